-- SPDX-License-Identifier: MIT
-- 50_limits.sql
--
-- Concurrency limits and tenant quotas (docs/operations.md "Concurrency limits"): the queue's
-- insert trigger that marks limited rows, setting and deleting limits, the limited claim the
-- runners call while any limit exists, and the view of who holds what.
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). The API's writing functions are SECURITY DEFINER, owned by cairn_api
-- (90_api_owner.sql).

CREATE OR REPLACE FUNCTION cairn.limit_lock_key(p_tenant text, p_workflow text) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtext(p_tenant || '/' || p_workflow) $$;

-- Marks a new queue row with the limit it waits under (limit_name, limit_key) when its
-- workflow, key or tenant is limited. Two statements, on every enqueue's path: the instance's row
-- with the workflow's advisory lock (shared: limit_set takes it exclusive to re-mark), then, in a
-- snapshot taken after the lock, whether a limit or quota applies (in one statement each, the
-- four of before cost 10% of an enqueue).
CREATE OR REPLACE FUNCTION cairn.queue_limit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_wf text;
    v_key text;
    v_tenant text;
    v_version uuid;
    v_quota boolean;
    v_limited boolean;
BEGIN
    NEW.limit_name := NULL;
    NEW.limit_key := NULL;
    NEW.holds_slot := false;
    SELECT ri.workflow_name, ri.concurrency_key, ri.tenant_id, ri.workflow_version_id
      INTO v_wf, v_key, v_tenant, v_version
      FROM cairn.runner_instances ri,
           LATERAL pg_advisory_xact_lock_shared(1667330681,
                                                cairn.limit_lock_key(ri.tenant_id,
                                                                     ri.workflow_name)) AS l
     WHERE ri.instance_id = NEW.instance_id;
    IF v_wf IS NULL THEN
        RETURN NEW;
    END IF;
    NEW.tenant_id := v_tenant;
    NEW.workflow_version_id := v_version; -- whatever the writer said: the instance's is checked
    SELECT EXISTS (SELECT 1 FROM cairn.tenants t
                    WHERE t.name = v_tenant AND t.max_running IS NOT NULL),
           EXISTS (SELECT 1 FROM cairn.workflow_limits wl
                    WHERE wl.tenant_id = v_tenant AND wl.workflow_name = v_wf
                      AND wl.max_running IS NOT NULL)
      INTO v_quota, v_limited;
    IF v_key IS NOT NULL OR v_quota THEN
        -- a key is limited (max_per_key) even on a workflow nobody set a limit for, and so is
        -- every workflow of a tenant with a quota
        INSERT INTO cairn.workflow_limits (tenant_id, workflow_name) VALUES (v_tenant, v_wf)
        ON CONFLICT DO NOTHING;
    ELSIF NOT v_limited THEN
        RETURN NEW;
    END IF;
    NEW.limit_name := v_wf;
    NEW.limit_key := v_key;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER queued_instances_limit BEFORE INSERT ON cairn.queued_instances
    FOR EACH ROW EXECUTE FUNCTION cairn.queue_limit();

-- Re-marks the unfinished instances of a tenant's workflow after its limits or the tenant's
-- quota changed (the caller holds the workflow's advisory lock exclusively): started ones hold
-- a slot (so a limit set below the running count admits nothing new until enough finish),
-- queued ones wait. Returns how many it re-marked.
CREATE OR REPLACE FUNCTION cairn.limit_mark(p_tenant text, p_workflow text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
    v_all boolean;
BEGIN
    -- Every instance is limited when the workflow has a running limit or its tenant a quota.
    SELECT EXISTS (SELECT 1 FROM cairn.workflow_limits wl
                    WHERE wl.tenant_id = p_tenant AND wl.workflow_name = p_workflow
                      AND wl.max_running IS NOT NULL)
        OR EXISTS (SELECT 1 FROM cairn.tenants t
                    WHERE t.name = p_tenant AND t.max_running IS NOT NULL)
      INTO v_all;
    -- The workflow's queue rows are locked first, in id order (as every writer locks them), and
    -- read again in a statement of their own: a claim or a write that changed one after this
    -- function's first snapshot is then seen as it is, not skipped (an UPDATE matched on a row
    -- version that has moved on leaves it alone), and whether an instance has started is read
    -- under the lock that every claim takes to start it.
    PERFORM 1 FROM cairn.queued_instances q
      JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id
     WHERE ri.tenant_id = p_tenant AND ri.workflow_name = p_workflow
     ORDER BY q.instance_id
       FOR UPDATE OF q;
    WITH m AS (
        SELECT q.instance_id AS id, ri.concurrency_key AS k,
               (ri.concurrency_key IS NOT NULL OR v_all) AS limited,
               (q.lock_uuid IS NOT NULL OR ri.status <> 'queued') AS started
          FROM cairn.queued_instances q
          JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id
         WHERE ri.tenant_id = p_tenant AND ri.workflow_name = p_workflow)
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

-- Sets the limits of a workflow of the caller's tenant: p_max_running NULL removes the limit on
-- the whole workflow, p_max_per_key NULL keeps the current one (1 at first). The workflow's
-- unfinished instances are re-marked at once: started ones hold a slot (so a limit set below the
-- running count admits nothing new until enough finish), queued ones wait. Returns the number
-- of instances re-marked. Waits at most 500 ms for a row lock (a runner's write in progress),
-- then fails with lock_not_available (55P03): try again.
CREATE OR REPLACE FUNCTION cairn.limit_set(p_workflow text, p_max_running integer,
                                           p_max_per_key integer DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_tenant text := cairn.current_tenant();
BEGIN
    PERFORM cairn.find_version('cairn.limit_set', p_workflow);
    IF p_max_running IS NOT NULL AND p_max_running < 1 OR p_max_per_key < 1 THEN
        RAISE EXCEPTION 'cairn.limit_set: limits must be at least 1 (got %, %)',
            p_max_running, p_max_per_key
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL as the running limit removes it.';
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    PERFORM pg_advisory_xact_lock(1667330681, cairn.limit_lock_key(v_tenant, p_workflow));
    INSERT INTO cairn.workflow_limits AS wl (tenant_id, workflow_name, max_running, max_per_key)
    VALUES (v_tenant, p_workflow, p_max_running, coalesce(p_max_per_key, 1))
    ON CONFLICT (tenant_id, workflow_name) DO UPDATE
       SET max_running = EXCLUDED.max_running,
           max_per_key = coalesce(p_max_per_key, wl.max_per_key),
           updated_at = clock_timestamp();
    RETURN cairn.limit_mark(v_tenant, p_workflow);
END;
$$;

-- Removes the limits of a workflow of the caller's tenant altogether (its row in
-- cairn.workflow_limits): while any workflow has a row, every claim goes through
-- cairn.claim_limited. Refused while instances with a concurrency key are unfinished (the key's
-- limit would go with it), and while the tenant has a quota and the workflow unfinished
-- instances (they are limited by the quota). Returns whether there was a row.
CREATE OR REPLACE FUNCTION cairn.limit_delete(p_workflow text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_tenant text := cairn.current_tenant();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.workflow_limits
                    WHERE tenant_id = v_tenant AND workflow_name = p_workflow) THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    PERFORM pg_advisory_xact_lock(1667330681, cairn.limit_lock_key(v_tenant, p_workflow));
    IF EXISTS (SELECT 1 FROM cairn.queued_instances q
                WHERE q.tenant_id = v_tenant AND q.limit_name = p_workflow
                  AND q.limit_key IS NOT NULL) THEN
        RAISE EXCEPTION 'cairn.limit_delete: workflow "%" has unfinished instances with a '
            'concurrency key', p_workflow
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Wait until they finish, or keep the row (limit set W none).';
    END IF;
    PERFORM cairn.limit_set(p_workflow, NULL);
    IF EXISTS (SELECT 1 FROM cairn.queued_instances q
                WHERE q.tenant_id = v_tenant AND q.limit_name = p_workflow) THEN
        RAISE EXCEPTION 'cairn.limit_delete: workflow "%" has unfinished instances under its '
            'tenant''s quota', p_workflow
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Wait until they finish, or keep the row (limit set W none).';
    END IF;
    DELETE FROM cairn.workflow_limits WHERE tenant_id = v_tenant AND workflow_name = p_workflow;
    RETURN true;
END;
$$;

-- Claims up to p_max instances waiting for a slot, over every limited (tenant, workflow), and
-- returns them leased for p_lease_ms (the runner's claim then marks them running, as for the hot
-- claim). Within a workflow, the waiting instances whose key has a free slot are taken in
-- priority then age order. Keys are looked at 1 000 at a time, in key order from where the last
-- claim stopped: a key with a long backlog costs one index probe, not a walk of its backlog, and
-- with more than 1 000 keys waiting every key comes round in turn. Under the tenants' quotas, a
-- tenant's row is locked (SKIP LOCKED) while a claim counts and takes its slots, so two runners
-- never both take the last one; a runner that finds it locked leaves the workflow to the other.
CREATE OR REPLACE FUNCTION cairn.claim_limited(p_max integer, p_lease_ms bigint)
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
        SELECT wl.tenant_id, wl.workflow_name, wl.max_running, wl.max_per_key, wl.key_cursor,
               (SELECT t.max_running FROM cairn.tenants t WHERE t.name = wl.tenant_id) AS quota
          INTO l
          FROM cairn.workflow_limits wl
         WHERE wl.tenant_id || '/' || wl.workflow_name <> ALL (v_seen)
           AND EXISTS (SELECT 1 FROM cairn.queued_instances q
                        WHERE q.tenant_id = wl.tenant_id AND q.limit_name = wl.workflow_name
                          AND NOT q.holds_slot AND q.scheduled_at <= now())
         ORDER BY wl.claimed_at NULLS FIRST
         LIMIT 1
           FOR UPDATE OF wl SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        v_seen := v_seen || (l.tenant_id || '/' || l.workflow_name);
        v_free := v_left;
        IF l.max_running IS NOT NULL THEN
            SELECT least(v_free, l.max_running - count(*)) INTO v_free
              FROM cairn.queued_instances q
             WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name AND q.holds_slot;
        END IF;
        IF l.quota IS NOT NULL THEN
            PERFORM 1 FROM cairn.tenants t WHERE t.name = l.tenant_id FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND; -- another runner is taking this tenant's slots
            -- a statement of its own: its snapshot sees the claims committed before the lock
            SELECT least(v_free, l.quota - count(*)) INTO v_free
              FROM cairn.queued_instances q
             WHERE q.tenant_id = l.tenant_id AND q.holds_slot;
        END IF;
        CONTINUE WHEN v_free <= 0;
        -- The waiting keys, skipping from one to the next through the index.
        SELECT coalesce(array_agg(s.k), '{}') INTO v_keys FROM (
            WITH RECURSIVE ks(k) AS (
                (SELECT q.limit_key FROM cairn.queued_instances q
                  WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                    AND NOT q.holds_slot AND q.limit_key > coalesce(l.key_cursor, '')
                  ORDER BY q.limit_key LIMIT 1)
                UNION ALL
                SELECT (SELECT q.limit_key FROM cairn.queued_instances q
                         WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                           AND NOT q.holds_slot AND q.limit_key > ks.k
                         ORDER BY q.limit_key LIMIT 1)
                  FROM ks WHERE ks.k IS NOT NULL)
            SELECT ks.k FROM ks WHERE ks.k IS NOT NULL LIMIT 1000) s;
        IF cardinality(v_keys) < 1000 AND l.key_cursor IS NOT NULL THEN
            -- wrap round to the keys before the cursor
            SELECT coalesce(array_agg(s.k), '{}') INTO v_more FROM (
                WITH RECURSIVE ks(k) AS (
                    (SELECT q.limit_key FROM cairn.queued_instances q
                      WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                        AND NOT q.holds_slot AND q.limit_key <= l.key_cursor
                      ORDER BY q.limit_key LIMIT 1)
                    UNION ALL
                    SELECT (SELECT q.limit_key FROM cairn.queued_instances q
                             WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                               AND NOT q.holds_slot AND q.limit_key > ks.k
                               AND q.limit_key <= l.key_cursor
                             ORDER BY q.limit_key LIMIT 1)
                      FROM ks WHERE ks.k IS NOT NULL)
                SELECT ks.k FROM ks WHERE ks.k IS NOT NULL
                LIMIT 1000 - cardinality(v_keys)) s;
            v_keys := v_keys || v_more;
        END IF;
        RETURN QUERY
        WITH held AS (
            SELECT q.limit_key AS k, count(*) AS n FROM cairn.queued_instances q
             WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name AND q.holds_slot
               AND q.limit_key = ANY (v_keys)
             GROUP BY q.limit_key),
        cand AS (
            SELECT x.tid, x.priority, x.scheduled_at
              FROM unnest(v_keys) AS u(k)
              LEFT JOIN held h ON h.k = u.k
             CROSS JOIN LATERAL (
                   SELECT q.ctid AS tid, q.priority, q.scheduled_at
                     FROM cairn.queued_instances q
                    WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                      AND q.limit_key = u.k
                      AND NOT q.holds_slot AND q.lock_uuid IS NULL AND q.scheduled_at <= now()
                    ORDER BY q.priority DESC, q.scheduled_at
                    LIMIT greatest(l.max_per_key - coalesce(h.n, 0), 0)) x
            UNION ALL
            (SELECT q.ctid, q.priority, q.scheduled_at FROM cairn.queued_instances q
              WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                AND q.limit_key IS NULL
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
         WHERE wl.tenant_id = l.tenant_id AND wl.workflow_name = l.workflow_name;
    END LOOP;
END;
$$;

CREATE OR REPLACE VIEW cairn.limit_status WITH (security_invoker = true) AS
SELECT wl.workflow_name, wl.max_running, wl.max_per_key,
       (SELECT count(*) FROM cairn.queued_instances q
         WHERE q.tenant_id = wl.tenant_id AND q.limit_name = wl.workflow_name
           AND q.holds_slot) AS running,
       (SELECT count(*) FROM cairn.queued_instances q
         WHERE q.tenant_id = wl.tenant_id AND q.limit_name = wl.workflow_name
           AND NOT q.holds_slot AND q.scheduled_at <= now()) AS waiting,
       wl.tenant_id
  FROM cairn.workflow_limits wl;
