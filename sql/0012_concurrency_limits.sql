-- SPDX-License-Identifier: MIT
-- 0012: concurrency limits, and idempotency keys unique per workflow (docs/operations.md
-- "Concurrency limits", "Idempotency keys").
--
-- A workflow may have a limit on its running instances (max_running) and, for instances
-- enqueued with a concurrency key, a limit per key (max_per_key, 1 unless set). An instance
-- holds a slot from its first claim until it finishes, whatever it waits on meanwhile. The
-- limit lives in the claim, so it holds across every runner:
--   * A queue row of a limited workflow carries limit_name (the workflow) and limit_key; it
--     waits (holds_slot false) until cairn.claim_limited takes it, which sets holds_slot. From
--     then on the row is like any other: the hot claim, the lease, the reclaim of a dead
--     runner's instances all treat it as started. A row with limit_name NULL was never limited.
--   * The hot claim's index (queued_instances_ready) leaves the waiting rows out, so an
--     unlimited workload pays nothing for limits: the runners call cairn.claim_limited only
--     while some workflow has a limit.
--   * cairn.claim_limited locks a workflow's limits row (SKIP LOCKED: one runner claims for a
--     workflow at a time, the others go on with the next), counts the rows holding a slot and
--     takes waiting ones in priority then age order up to the free slots.
--   * Whether a new queue row is limited is decided by a trigger on its insert (every way an
--     instance is queued: enqueue, children, schedules, retry), under a shared advisory lock
--     per workflow that cairn.limit_set takes exclusively: a limit set while instances are
--     being enqueued marks every one of them, none slips through unmarked.

-- Idempotency keys were unique over all workflows: a key reused under another workflow
-- silently returned that workflow's instance. Unique per workflow now.
ALTER TABLE cairn.runner_instances DROP CONSTRAINT runner_instances_idempotency_key_key;
ALTER TABLE cairn.runner_instances ADD CONSTRAINT runner_instances_idempotency
    UNIQUE (workflow_name, idempotency_key);

ALTER TABLE cairn.runner_instances
    ADD COLUMN concurrency_key text CHECK (concurrency_key <> '' AND octet_length(concurrency_key) <= 255);

CREATE TABLE cairn.workflow_limits (
    workflow_name text PRIMARY KEY,
    max_running integer CHECK (max_running > 0),      -- NULL: no limit on the whole workflow
    max_per_key integer NOT NULL DEFAULT 1 CHECK (max_per_key > 0),
    key_cursor text,          -- where the next claim's walk over waiting keys starts
    claimed_at timestamptz,   -- the last claim for this workflow (claims take the oldest first)
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

ALTER TABLE cairn.queued_instances
    ADD COLUMN limit_name text,
    ADD COLUMN limit_key text,
    ADD COLUMN holds_slot boolean NOT NULL DEFAULT false;

-- The hot claim walks only rows it may take: unlimited ones and limited ones holding a slot.
DROP INDEX cairn.queued_instances_ready;
CREATE INDEX queued_instances_ready ON cairn.queued_instances (priority DESC, scheduled_at)
    WHERE lock_uuid IS NULL AND (limit_name IS NULL OR holds_slot);
-- Rows waiting for a slot, by workflow and key, in claim order.
CREATE INDEX queued_instances_waiting ON cairn.queued_instances
    (limit_name, limit_key, priority DESC, scheduled_at)
    WHERE limit_name IS NOT NULL AND NOT holds_slot;
-- Rows holding a slot, counted at each limited claim.
CREATE INDEX queued_instances_slots ON cairn.queued_instances (limit_name, limit_key)
    WHERE holds_slot;

-- The advisory lock that orders a limit change after the enqueues in flight ("cair", then the
-- workflow's hash; the two-integer form, apart from the sweep's one-bigint lock).
CREATE FUNCTION cairn.limit_lock_key(p_workflow text) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtext(p_workflow) $$;

CREATE FUNCTION cairn.queue_limit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_wf text;
    v_key text;
BEGIN
    SELECT ri.workflow_name, ri.concurrency_key INTO v_wf, v_key
      FROM cairn.runner_instances ri WHERE ri.instance_id = NEW.instance_id;
    NEW.limit_name := NULL;
    NEW.limit_key := NULL;
    NEW.holds_slot := false;
    IF v_wf IS NULL THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1667330681, cairn.limit_lock_key(v_wf));
    IF v_key IS NOT NULL THEN
        -- a key is limited (max_per_key) even on a workflow nobody set a limit for
        INSERT INTO cairn.workflow_limits (workflow_name) VALUES (v_wf) ON CONFLICT DO NOTHING;
    ELSIF NOT EXISTS (SELECT 1 FROM cairn.workflow_limits wl
                       WHERE wl.workflow_name = v_wf AND wl.max_running IS NOT NULL) THEN
        RETURN NEW;
    END IF;
    NEW.limit_name := v_wf;
    NEW.limit_key := v_key;
    RETURN NEW;
END;
$$;
CREATE TRIGGER queued_instances_limit BEFORE INSERT ON cairn.queued_instances
    FOR EACH ROW EXECUTE FUNCTION cairn.queue_limit();

-- Sets a workflow's limits: p_max_running NULL removes the limit on the whole workflow,
-- p_max_per_key NULL keeps the current one (1 at first). The workflow's unfinished instances
-- are re-marked at once: started ones hold a slot (so a limit set below the running count
-- admits nothing new until enough finish), queued ones wait. Returns the number of instances
-- re-marked. Waits at most 500 ms for a row lock (a runner's write in progress), then fails
-- with lock_not_available (55P03): try again.
CREATE FUNCTION cairn.limit_set(p_workflow text, p_max_running integer,
                                p_max_per_key integer DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.workflow_versions v WHERE v.workflow_name = p_workflow)
    THEN
        RAISE EXCEPTION 'cairn.limit_set: unknown workflow "%" (register it first)', p_workflow
            USING ERRCODE = 'undefined_object';
    END IF;
    IF p_max_running IS NOT NULL AND p_max_running < 1 OR p_max_per_key < 1 THEN
        RAISE EXCEPTION 'cairn.limit_set: limits must be at least 1 (got %, %)',
            p_max_running, p_max_per_key
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL as the running limit removes it.';
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    PERFORM pg_advisory_xact_lock(1667330681, cairn.limit_lock_key(p_workflow));
    INSERT INTO cairn.workflow_limits AS wl (workflow_name, max_running, max_per_key)
    VALUES (p_workflow, p_max_running, coalesce(p_max_per_key, 1))
    ON CONFLICT (workflow_name) DO UPDATE
       SET max_running = EXCLUDED.max_running,
           max_per_key = coalesce(p_max_per_key, wl.max_per_key),
           updated_at = clock_timestamp();
    -- The workflow's queue rows are locked first, in id order (as every writer locks them), and
    -- read again in a statement of their own: a claim or a write that changed one after this
    -- function's first snapshot is then seen as it is, not skipped (an UPDATE matched on a row
    -- version that has moved on leaves it alone), and whether an instance has started is read
    -- under the lock that every claim takes to start it.
    PERFORM 1 FROM cairn.queued_instances q
      JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id
     WHERE ri.workflow_name = p_workflow
     ORDER BY q.instance_id
       FOR UPDATE OF q;
    WITH m AS (
        SELECT q.instance_id AS id, ri.concurrency_key AS k,
               (ri.concurrency_key IS NOT NULL OR p_max_running IS NOT NULL) AS limited,
               (q.lock_uuid IS NOT NULL OR ri.status <> 'queued') AS started
          FROM cairn.queued_instances q
          JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id
         WHERE ri.workflow_name = p_workflow)
    UPDATE cairn.queued_instances q
       SET limit_name = CASE WHEN m.limited THEN p_workflow END,
           limit_key = CASE WHEN m.limited THEN m.k END,
           holds_slot = m.limited AND m.started
      FROM m
     WHERE q.instance_id = m.id
       AND (q.limit_name, q.limit_key, q.holds_slot) IS DISTINCT FROM
           (CASE WHEN m.limited THEN p_workflow END, CASE WHEN m.limited THEN m.k END,
            m.limited AND m.started);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

-- Claims up to p_max instances waiting for a slot, over every limited workflow, and returns
-- them leased for p_lease_ms (the runner's claim then marks them running, as for the hot
-- claim). Within a workflow, the waiting instances whose key has a free slot are taken in
-- priority then age order. Keys are looked at 1 000 at a time, in key order from where the
-- last claim stopped: a key with a long backlog costs one index probe, not a walk of its
-- backlog, and with more than 1 000 keys waiting every key comes round in turn.
CREATE FUNCTION cairn.claim_limited(p_max integer, p_lease_ms bigint)
RETURNS TABLE (l_instance_id uuid, l_lock uuid, l_version uuid)
LANGUAGE plpgsql AS $$
DECLARE
    l record;
    v_left integer := p_max;
    v_free bigint;
    v_keys text[];
    v_more text[];
    v_n integer;
    v_seen text[] := '{}';
BEGIN
    -- One limits row at a time: a FOR loop over a locking query fetches (and locks) ten rows
    -- at once, which other runners would then skip without this one using them.
    LOOP
        EXIT WHEN v_left <= 0;
        SELECT wl.workflow_name, wl.max_running, wl.max_per_key, wl.key_cursor INTO l
          FROM cairn.workflow_limits wl
         WHERE wl.workflow_name <> ALL (v_seen)
           AND EXISTS (SELECT 1 FROM cairn.queued_instances q
                        WHERE q.limit_name = wl.workflow_name AND NOT q.holds_slot
                          AND q.scheduled_at <= now())
         ORDER BY wl.claimed_at NULLS FIRST
         LIMIT 1
           FOR UPDATE OF wl SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        v_seen := v_seen || l.workflow_name;
        v_free := v_left;
        IF l.max_running IS NOT NULL THEN
            SELECT least(v_free, l.max_running - count(*)) INTO v_free
              FROM cairn.queued_instances q
             WHERE q.limit_name = l.workflow_name AND q.holds_slot;
        END IF;
        CONTINUE WHEN v_free <= 0;
        -- The waiting keys, skipping from one to the next through the index.
        SELECT coalesce(array_agg(s.k), '{}') INTO v_keys FROM (
            WITH RECURSIVE ks(k) AS (
                (SELECT q.limit_key FROM cairn.queued_instances q
                  WHERE q.limit_name = l.workflow_name AND NOT q.holds_slot
                    AND q.limit_key > coalesce(l.key_cursor, '')
                  ORDER BY q.limit_key LIMIT 1)
                UNION ALL
                SELECT (SELECT q.limit_key FROM cairn.queued_instances q
                         WHERE q.limit_name = l.workflow_name AND NOT q.holds_slot
                           AND q.limit_key > ks.k
                         ORDER BY q.limit_key LIMIT 1)
                  FROM ks WHERE ks.k IS NOT NULL)
            SELECT ks.k FROM ks WHERE ks.k IS NOT NULL LIMIT 1000) s;
        IF cardinality(v_keys) < 1000 AND l.key_cursor IS NOT NULL THEN
            -- wrap round to the keys before the cursor
            SELECT coalesce(array_agg(s.k), '{}') INTO v_more FROM (
                WITH RECURSIVE ks(k) AS (
                    (SELECT q.limit_key FROM cairn.queued_instances q
                      WHERE q.limit_name = l.workflow_name AND NOT q.holds_slot
                        AND q.limit_key <= l.key_cursor
                      ORDER BY q.limit_key LIMIT 1)
                    UNION ALL
                    SELECT (SELECT q.limit_key FROM cairn.queued_instances q
                             WHERE q.limit_name = l.workflow_name AND NOT q.holds_slot
                               AND q.limit_key > ks.k AND q.limit_key <= l.key_cursor
                             ORDER BY q.limit_key LIMIT 1)
                      FROM ks WHERE ks.k IS NOT NULL)
                SELECT ks.k FROM ks WHERE ks.k IS NOT NULL
                LIMIT 1000 - cardinality(v_keys)) s;
            v_keys := v_keys || v_more;
        END IF;
        RETURN QUERY
        WITH held AS (
            SELECT q.limit_key AS k, count(*) AS n FROM cairn.queued_instances q
             WHERE q.limit_name = l.workflow_name AND q.holds_slot
               AND q.limit_key = ANY (v_keys)
             GROUP BY q.limit_key),
        cand AS (
            SELECT x.tid, x.priority, x.scheduled_at
              FROM unnest(v_keys) AS u(k)
              LEFT JOIN held h ON h.k = u.k
             CROSS JOIN LATERAL (
                   SELECT q.ctid AS tid, q.priority, q.scheduled_at
                     FROM cairn.queued_instances q
                    WHERE q.limit_name = l.workflow_name AND q.limit_key = u.k
                      AND NOT q.holds_slot AND q.lock_uuid IS NULL AND q.scheduled_at <= now()
                    ORDER BY q.priority DESC, q.scheduled_at
                    LIMIT greatest(l.max_per_key - coalesce(h.n, 0), 0)) x
            UNION ALL
            (SELECT q.ctid, q.priority, q.scheduled_at FROM cairn.queued_instances q
              WHERE q.limit_name = l.workflow_name AND q.limit_key IS NULL
                AND NOT q.holds_slot AND q.lock_uuid IS NULL AND q.scheduled_at <= now()
              ORDER BY q.priority DESC, q.scheduled_at LIMIT v_free)),
        pick AS (SELECT c.tid FROM cand c ORDER BY c.priority DESC, c.scheduled_at LIMIT v_free),
        lk AS (SELECT q.ctid AS tid FROM cairn.queued_instances q, pick
                WHERE q.ctid = pick.tid FOR UPDATE OF q SKIP LOCKED)
        UPDATE cairn.queued_instances q
           SET lock_uuid = gen_random_uuid(), holds_slot = true, woken = false,
               lock_expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond'
          FROM lk WHERE q.ctid = lk.tid
        RETURNING q.instance_id, q.lock_uuid, q.workflow_version_id;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_left := v_left - v_n;
        UPDATE cairn.workflow_limits wl
           SET claimed_at = clock_timestamp(),
               key_cursor = CASE WHEN cardinality(v_keys) >= 1000 THEN v_keys[1000] END
         WHERE wl.workflow_name = l.workflow_name;
    END LOOP;
END;
$$;

-- Each limited workflow: its limits, the instances holding a slot and those waiting for one
-- (due, not started). What `cairnctl limit list` and the status page show.
CREATE VIEW cairn.limit_status AS
SELECT wl.workflow_name, wl.max_running, wl.max_per_key,
       (SELECT count(*) FROM cairn.queued_instances q
         WHERE q.limit_name = wl.workflow_name AND q.holds_slot) AS running,
       (SELECT count(*) FROM cairn.queued_instances q
         WHERE q.limit_name = wl.workflow_name AND NOT q.holds_slot
           AND q.scheduled_at <= now()) AS waiting
  FROM cairn.workflow_limits wl;

-- cairn.enqueue gains a last argument, concurrency_key (the old seven-argument function is
-- dropped: beside the new one, calls leaving out the trailing arguments would be ambiguous),
-- and finds an idempotency key among its own workflow's instances only.
DROP FUNCTION cairn.enqueue(text, jsonb, text, integer, timestamptz, text, interval);
CREATE FUNCTION cairn.enqueue(
    workflow_name text,
    input jsonb DEFAULT '{}',
    idempotency_key text DEFAULT NULL,
    priority integer DEFAULT 0,
    scheduled_at timestamptz DEFAULT NULL,
    workflow_version text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    concurrency_key text DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_version_id uuid;
    v_version_timeout bigint;
    v_timeout_ms bigint;
    v_due timestamptz;
    v_id uuid;
    v_lim record;
    v_len integer;
    v_num numeric;
BEGIN
    SELECT * INTO v_lim FROM cairn.limits();
    IF input IS NULL OR jsonb_typeof(input) <> 'object' THEN
        RAISE EXCEPTION 'cairn.enqueue: input must be a JSON object, got %',
            coalesce(jsonb_typeof(input), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Measured as PostgreSQL prints it (what the runner reads back), before the walks below,
    -- so that they only ever see a bounded document.
    v_len := octet_length(enqueue.input::text);
    IF v_len > v_lim.input_bytes THEN
        RAISE EXCEPTION 'cairn.enqueue: input is % bytes of JSON, over the limit of % bytes',
            v_len, v_lim.input_bytes
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Pass large data by reference (a URL, a row id) and let an action '
                         'fetch it. SELECT * FROM cairn.limits() lists the limits.';
    END IF;
    -- The top object is at level 1 and jsonpath counts it as level 0, so anything at jsonpath
    -- level value_depth is one level too deep. The walk stops at that level.
    IF jsonb_path_exists(enqueue.input,
                         format('strict $.**{%s}', v_lim.value_depth)::jsonpath) THEN
        RAISE EXCEPTION 'cairn.enqueue: input is nested deeper than % levels', v_lim.value_depth
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'The top object is level 1; each array or object adds one.';
    END IF;
    -- jsonb keeps numbers exactly, the runner does not: one printed without a fraction (jsonb
    -- prints 1e19 as 10000000000000000000) must fit int64, any other a finite float64, i.e.
    -- stay below 2^1024 - 2^970, from which strtod rounds to infinity. Only numbers of at least
    -- 2^63 in magnitude can fail either test, and jsonpath finds those without leaving C (in
    -- strict mode .abs() of anything but a number is an error, which a filter counts as false;
    -- measured, twice as fast as testing .type() first).
    SELECT q.n::numeric INTO v_num
      FROM jsonb_path_query(enqueue.input, 'strict $.** ? (@.abs() >= 9223372036854775808)')
           AS q(n)
     WHERE (scale(q.n::numeric) = 0 AND q.n::numeric <> -9223372036854775808)
        OR abs(q.n::numeric) >= 2::numeric ^ 1024 - 2::numeric ^ 970
     LIMIT 1;
    IF v_num IS NOT NULL AND scale(v_num) = 0 THEN
        RAISE EXCEPTION 'cairn.enqueue: input holds the integer %, outside the 64-bit range',
            CASE WHEN length(v_num::text) > 24 THEN left(v_num::text, 20) || '... ('
                 || length(v_num::text) || ' digits)' ELSE v_num::text END
            USING ERRCODE = 'numeric_value_out_of_range',
                  HINT = 'Integers must lie in -9223372036854775808..9223372036854775807. '
                         'jsonb stores a number without a fraction, such as 1e19, as an '
                         'integer: write a float with a fraction (10000000000000000000.0).';
    ELSIF v_num IS NOT NULL THEN
        RAISE EXCEPTION 'cairn.enqueue: input holds the number %, beyond the largest float',
            left(v_num::text, 20) || '... (' || length(v_num::text) || ' characters)'
            USING ERRCODE = 'numeric_value_out_of_range',
                  HINT = 'Floats are 64-bit: their magnitude must stay below about 1.8e308.';
    END IF;
    IF enqueue.idempotency_key = '' THEN
        RAISE EXCEPTION 'cairn.enqueue: the idempotency key is empty'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use NULL for no key.';
    END IF;
    IF octet_length(enqueue.idempotency_key) > v_lim.idempotency_key_bytes THEN
        RAISE EXCEPTION 'cairn.enqueue: the idempotency key is % bytes, over the limit of % bytes',
            octet_length(enqueue.idempotency_key), v_lim.idempotency_key_bytes
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Use a digest of a longer key (a hex SHA-256 is 64 bytes).';
    END IF;
    IF enqueue.concurrency_key = '' THEN
        RAISE EXCEPTION 'cairn.enqueue: the concurrency key is empty'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use NULL for no key.';
    END IF;
    IF octet_length(enqueue.concurrency_key) > v_lim.idempotency_key_bytes THEN
        RAISE EXCEPTION 'cairn.enqueue: the concurrency key is % bytes, over the limit of % bytes',
            octet_length(enqueue.concurrency_key), v_lim.idempotency_key_bytes
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF NOT isfinite(enqueue.scheduled_at) THEN
        RAISE EXCEPTION 'cairn.enqueue: scheduled_at must be a finite time, got %',
            enqueue.scheduled_at
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL means now.';
    END IF;
    IF enqueue.timeout IS NOT NULL THEN
        v_timeout_ms := floor(extract(epoch FROM enqueue.timeout) * 1000);
        IF v_timeout_ms <= 0 OR v_timeout_ms > cairn.max_timeout_ms() THEN
            RAISE EXCEPTION 'cairn.enqueue: timeout must be positive and at most 366 days, got %',
                enqueue.timeout
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'NULL means the workflow''s own [timeout: D], if it has one.';
        END IF;
    END IF;
    SELECT v.id, v.timeout_ms INTO v_version_id, v_version_timeout
      FROM cairn.workflow_versions v
     WHERE v.workflow_name = enqueue.workflow_name
       AND (enqueue.workflow_version IS NULL OR v.workflow_version = enqueue.workflow_version)
     ORDER BY v.created_at DESC
     LIMIT 1;
    IF v_version_id IS NULL THEN
        IF enqueue.workflow_version IS NULL THEN
            RAISE EXCEPTION 'cairn.enqueue: unknown workflow "%" (register it first)',
                enqueue.workflow_name USING ERRCODE = 'undefined_object';
        END IF;
        RAISE EXCEPTION 'cairn.enqueue: workflow "%" has no version "%"',
            enqueue.workflow_name, enqueue.workflow_version USING ERRCODE = 'undefined_object';
    END IF;
    v_timeout_ms := coalesce(v_timeout_ms, v_version_timeout);
    v_due := coalesce(enqueue.scheduled_at, clock_timestamp());
    INSERT INTO cairn.runner_instances AS ri
           (workflow_version_id, workflow_name, input, idempotency_key, priority, timeout_ms,
            deadline_at, concurrency_key)
    VALUES (v_version_id, enqueue.workflow_name, enqueue.input, enqueue.idempotency_key,
            coalesce(enqueue.priority, 0), v_timeout_ms,
            v_due + v_timeout_ms * interval '1 millisecond', enqueue.concurrency_key)
    ON CONFLICT ON CONSTRAINT runner_instances_idempotency DO NOTHING
    RETURNING ri.instance_id INTO v_id;
    IF v_id IS NULL THEN
        SELECT ri.instance_id INTO v_id
          FROM cairn.runner_instances ri
         WHERE ri.workflow_name = enqueue.workflow_name
           AND ri.idempotency_key = enqueue.idempotency_key;
        RETURN v_id;
    END IF;
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    VALUES (v_id, v_version_id, coalesce(enqueue.priority, 0), v_due);
    PERFORM pg_notify('cairn_enqueue', '');
    RETURN v_id;
END;
$$;

-- Removes a workflow's limits altogether (its row in cairn.workflow_limits): while any workflow
-- has a row, every claim goes through cairn.claim_limited. Refused while instances with a
-- concurrency key are unfinished (the key's limit would go with it). Returns whether there was
-- a row.
CREATE FUNCTION cairn.limit_delete(p_workflow text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.workflow_limits WHERE workflow_name = p_workflow) THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    PERFORM pg_advisory_xact_lock(1667330681, cairn.limit_lock_key(p_workflow));
    IF EXISTS (SELECT 1 FROM cairn.queued_instances q
                WHERE q.limit_name = p_workflow AND q.limit_key IS NOT NULL) THEN
        RAISE EXCEPTION 'cairn.limit_delete: workflow "%" has unfinished instances with a '
            'concurrency key', p_workflow
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Wait until they finish, or keep the row (limit set W none).';
    END IF;
    PERFORM cairn.limit_set(p_workflow, NULL);
    DELETE FROM cairn.workflow_limits WHERE workflow_name = p_workflow;
    RETURN true;
END;
$$;
