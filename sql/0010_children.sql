-- SPDX-License-Identifier: MIT
-- 0010: child workflows and task trees (docs/semantics.md "Child workflows", docs/operations.md
-- "Task trees").
--
-- A parent's `run wf(...)` / `start wf(...)` creates the child instance with
-- cairn.start_children, inside the runner's fenced write that records the call: the child's id
-- is derived from the call (execution id and attempt), so a replay after a crash finds it
-- created and changes nothing. The child remembers its call (parent_id, parent_exec_id,
-- parent_attempt); its tree (root_id, depth).
--
-- When a child of a `run` call finishes (one started with `start` hands nothing back: nobody
-- waits for it), its runner's final write records the outcome as the result of the parent's
-- call (a row of runner_actions_done under the parent's id), sets the parent's queue row `woken`
-- and due, and sends NOTIFY cairn_child ('parent exec attempt'): the runner that holds the parent
-- hands it the result; a parent handed back while it waited is claimed again. The write locks
-- the parent's queue row with its own, all in instance id order, so two writes never wait on
-- each other in a cycle. A child finished by SQL instead (cancelled or timed out while nobody
-- held it, or failed because it could not run) is marked parent_pending: a runner's sweep
-- records its outcome in the parent (the result is msgpack, which only the runner writes) and
-- wakes the parent (cairn.wake_parents).
--
-- `woken` closes the race between a parent being handed back and a child finishing: the claim
-- clears it, a child's outcome sets it, and a hand-back that finds it set leaves the parent due
-- at once instead of at its wake-up time.

ALTER TABLE cairn.workflow_versions ADD COLUMN inputs text[]; -- main's parameters (cairnctl
                                                              -- register); NULL: not known

ALTER TABLE cairn.runner_instances
    ADD COLUMN parent_id uuid,
    ADD COLUMN root_id uuid,
    ADD COLUMN parent_exec_id uuid,
    ADD COLUMN parent_attempt integer,
    ADD COLUMN depth integer NOT NULL DEFAULT 0,
    ADD COLUMN detached boolean NOT NULL DEFAULT false,
    ADD COLUMN parent_pending boolean NOT NULL DEFAULT false;

CREATE INDEX runner_instances_parent ON cairn.runner_instances (parent_id, created_at)
    WHERE parent_id IS NOT NULL;
CREATE INDEX runner_instances_root ON cairn.runner_instances (root_id)
    WHERE root_id IS NOT NULL;
-- What the runners' sweep reads: almost always empty.
CREATE INDEX runner_instances_parent_pending ON cairn.runner_instances (completed_at)
    WHERE parent_pending;
CREATE INDEX runner_instances_open_children ON cairn.runner_instances (parent_id)
    WHERE parent_id IS NOT NULL AND status IN ('queued', 'running');

ALTER TABLE cairn.queued_instances ADD COLUMN woken boolean NOT NULL DEFAULT false;

-- Creates child instances for the parents' calls (arrays of one entry per child), each only
-- while its parent's lease p_lock holds (the caller's transaction holds the parent's queue row).
-- Returns one row per child whose parent holds: 'created', 'exists' (a replay: nothing
-- changes), or why it was not created ('not_found', 'bad_input', 'too_deep') with a message.
CREATE FUNCTION cairn.start_children(
    p_parent uuid[], p_lock uuid[], p_child uuid[], p_exec uuid[], p_attempt integer[],
    p_workflow text[], p_version text[], p_input text[], p_timeout_ms bigint[],
    p_detached boolean[], p_max_depth integer)
RETURNS TABLE (child_id uuid, status text, message text)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    par record;
    v record;
    v_par_key text;   -- the parent (and lock) par holds; NULL: none looked up
    v_par_ok boolean;
    v_wf_key text;    -- the workflow (and version) v holds
    v_wf_ok boolean;
    v_sorted text[];  -- v.inputs, sorted
    v_input jsonb;
    v_keys text[];
    v_unknown text[];
    v_missing text[];
    v_timeout bigint;
    n_created integer := 0;
BEGIN
    -- A fan-out starts its children in one call, all of one parent and one workflow: the parent
    -- and the version are looked up once, not per child.
    FOR i IN 1 .. coalesce(array_length(p_child, 1), 0) LOOP
        child_id := p_child[i];
        message := NULL;
        IF v_par_key IS DISTINCT FROM p_parent[i]::text || p_lock[i]::text THEN
            v_par_key := p_parent[i]::text || p_lock[i]::text;
            SELECT ri.instance_id, ri.depth, coalesce(ri.root_id, ri.instance_id) AS root,
                   ri.priority
              INTO par
              FROM cairn.queued_instances q
              JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id
             WHERE q.instance_id = p_parent[i] AND q.lock_uuid = p_lock[i];
            v_par_ok := FOUND;
        END IF;
        CONTINUE WHEN NOT v_par_ok; -- the parent's lease is gone: its write is lost
        PERFORM 1 FROM cairn.runner_instances ri WHERE ri.instance_id = p_child[i];
        IF FOUND THEN
            status := 'exists';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF par.depth + 1 > p_max_depth THEN
            status := 'too_deep';
            message := format('a child of this instance would be at depth %s, past the limit '
                              'of %s (CAIRN_MAX_CHILD_DEPTH)', par.depth + 1, p_max_depth);
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_wf_key IS DISTINCT FROM p_workflow[i] || '/' || coalesce(p_version[i], '') THEN
            v_wf_key := p_workflow[i] || '/' || coalesce(p_version[i], '');
            SELECT wv.id, wv.timeout_ms, wv.inputs INTO v
              FROM cairn.workflow_versions wv
             WHERE wv.workflow_name = p_workflow[i]
               AND (p_version[i] IS NULL OR wv.workflow_version = p_version[i])
             ORDER BY wv.created_at DESC
             LIMIT 1;
            v_wf_ok := FOUND;
            IF v_wf_ok AND v.inputs IS NOT NULL THEN
                SELECT coalesce(array_agg(n ORDER BY n), '{}') INTO v_sorted
                  FROM unnest(v.inputs) AS n;
            END IF;
        END IF;
        IF NOT v_wf_ok THEN
            status := 'not_found';
            message := CASE WHEN p_version[i] IS NULL
                            THEN format('no workflow "%s" is registered', p_workflow[i])
                            ELSE format('workflow "%s" has no version "%s"', p_workflow[i],
                                        p_version[i]) END;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_input := p_input[i]::jsonb;
        IF v.inputs IS NOT NULL THEN
            SELECT coalesce(array_agg(k ORDER BY k), '{}') INTO v_keys
              FROM jsonb_object_keys(v_input) AS k;
            IF v_keys IS DISTINCT FROM v_sorted THEN
                SELECT array_agg(k ORDER BY k) INTO v_unknown
                  FROM unnest(v_keys) AS k WHERE k <> ALL (v.inputs);
                SELECT array_agg(n ORDER BY o) INTO v_missing
                  FROM unnest(v.inputs) WITH ORDINALITY AS u(n, o) WHERE NOT v_input ? n;
                status := 'bad_input';
                message := format('%s takes inputs (%s)%s%s', p_workflow[i],
                                  array_to_string(v.inputs, ', '),
                                  CASE WHEN v_missing IS NULL THEN ''
                                       ELSE '; missing: ' || array_to_string(v_missing, ', ')
                                       END,
                                  CASE WHEN v_unknown IS NULL THEN ''
                                       ELSE '; unknown: ' || array_to_string(v_unknown, ', ')
                                       END);
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        -- The call's [timeout: D] is the child's deadline, unless its own is sooner.
        v_timeout := CASE WHEN p_timeout_ms[i] > 0
                          THEN least(p_timeout_ms[i], coalesce(v.timeout_ms, p_timeout_ms[i]))
                          ELSE v.timeout_ms END;
        INSERT INTO cairn.runner_instances
               (instance_id, workflow_version_id, workflow_name, input, priority, timeout_ms,
                deadline_at, parent_id, root_id, parent_exec_id, parent_attempt, depth,
                detached)
        VALUES (p_child[i], v.id, p_workflow[i], v_input, par.priority, v_timeout,
                clock_timestamp() + v_timeout * interval '1 millisecond', par.instance_id,
                par.root, p_exec[i], p_attempt[i], par.depth + 1, p_detached[i]);
        INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority,
                                            scheduled_at)
        VALUES (p_child[i], v.id, par.priority, clock_timestamp());
        n_created := n_created + 1;
        status := 'created';
        RETURN NEXT;
    END LOOP;
    IF n_created > 0 THEN
        PERFORM pg_notify('cairn_enqueue', '');
    END IF;
END
$$;

-- Wakes the parents of finished children marked parent_pending whose result the parent holds
-- (p_children: those children; NULL: any, for the sweep), and clears the mark. A child row
-- another call holds is skipped (that call does it); parents' queue rows are waited for, in
-- instance id order, the order the runners' fenced writes lock in, and nothing else that could
-- wait is held meanwhile: no cycle. Returns how many children it cleared.
CREATE FUNCTION cairn.wake_parents(p_children uuid[] DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT c.instance_id AS child, c.parent_id, c.parent_exec_id, c.parent_attempt
          FROM cairn.runner_instances c
         WHERE c.parent_pending
           AND (p_children IS NULL OR c.instance_id = ANY (p_children))
           AND EXISTS (SELECT 1 FROM cairn.runner_actions_done d
                        WHERE d.instance_id = c.parent_id AND d.execution_id = c.parent_exec_id
                          AND d.attempt = c.parent_attempt)
         ORDER BY c.parent_id
         LIMIT 1000
           FOR UPDATE OF c SKIP LOCKED
    LOOP
        -- No queue row: the parent finished, nothing to wake.
        UPDATE cairn.queued_instances
           SET woken = true, scheduled_at = least(scheduled_at, clock_timestamp())
         WHERE instance_id = r.parent_id;
        UPDATE cairn.runner_instances SET parent_pending = false WHERE instance_id = r.child;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- cairn.cancel of 0009, cancelling the instance's unfinished descendants first, and marking a
-- child it cancels itself (nobody held it) parent_pending, so that a runner hands the outcome
-- to its parent. Descendants first: a child's final write locks the child's queue row, then its
-- parent's (to wake it), and this takes them in the same order, so the two never wait on each
-- other in a cycle.
CREATE OR REPLACE FUNCTION cairn.cancel(p_instance_id uuid, p_reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    q cairn.queued_instances%ROWTYPE;
    st text;
    c record;
    reason text := left(coalesce(p_reason, 'cancelled'), 1000);
BEGIN
    FOR c IN
        SELECT ri.instance_id FROM cairn.runner_instances ri
         WHERE ri.parent_id = p_instance_id AND ri.status IN ('queued', 'running')
         ORDER BY ri.instance_id
    LOOP
        PERFORM cairn.cancel(c.instance_id, reason);
    END LOOP;
    SELECT * INTO q FROM cairn.queued_instances WHERE instance_id = p_instance_id FOR UPDATE;
    SELECT status INTO st FROM cairn.runner_instances WHERE instance_id = p_instance_id
        FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance %', p_instance_id USING ERRCODE = 'no_data_found';
    END IF;
    IF st IN ('completed', 'failed', 'cancelled', 'timed_out') THEN
        RETURN 'already ' || st;
    END IF;
    IF q.instance_id IS NULL THEN
        -- Retried while this cancel waited for the instance row: its new queue row, without
        -- waiting (see 0009).
        SELECT * INTO q FROM cairn.queued_instances WHERE instance_id = p_instance_id
            FOR UPDATE NOWAIT;
    END IF;
    IF q.instance_id IS NOT NULL AND q.lock_uuid IS NOT NULL
       AND q.lock_expires_at > clock_timestamp() THEN
        UPDATE cairn.runner_instances
           SET cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
               cancel_reason = reason
         WHERE instance_id = p_instance_id;
        PERFORM pg_notify('cairn_cancel', p_instance_id::text || ' ' || reason);
        RETURN 'requested';
    END IF;
    UPDATE cairn.runner_instances
       SET status = 'cancelled',
           error = jsonb_build_object('type', 'Cancelled', 'message', reason,
                                      'bases', jsonb_build_array('Exception'),
                                      'details', NULL),
           cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
           cancel_reason = reason,
           completed_at = clock_timestamp(),
           parent_pending = parent_id IS NOT NULL AND NOT detached
     WHERE instance_id = p_instance_id;
    DELETE FROM cairn.queued_instances WHERE instance_id = p_instance_id;
    RETURN 'cancelled';
END
$$;

-- cairn.expire_overdue of 0009, marking the children it times out parent_pending.
CREATE OR REPLACE FUNCTION cairn.expire_overdue() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer := 0;
    r record;
BEGIN
    FOR r IN
        SELECT ri.instance_id, ri.timeout_ms
          FROM cairn.runner_instances ri
         WHERE ri.deadline_at < now() AND ri.status IN ('queued', 'running')
         ORDER BY ri.deadline_at
         LIMIT 1000
    LOOP
        PERFORM 1 FROM cairn.queued_instances q
          WHERE q.instance_id = r.instance_id
            AND (q.lock_uuid IS NULL OR q.lock_expires_at <= clock_timestamp())
          FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE cairn.runner_instances
           SET status = 'timed_out',
               error = jsonb_build_object(
                   'type', 'WorkflowTimeout',
                   'message', format('the instance did not finish within its timeout of %s ms',
                                     r.timeout_ms),
                   'bases', jsonb_build_array('TimeoutError', 'Exception'), 'details', NULL),
               completed_at = clock_timestamp(),
               parent_pending = parent_id IS NOT NULL AND NOT detached
         WHERE instance_id = r.instance_id AND status IN ('queued', 'running');
        DELETE FROM cairn.queued_instances WHERE instance_id = r.instance_id;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Cancels children nobody waits for any more; returns how many. With p_parent and p_exec: the
-- unfinished children of those calls of p_parent (a parent that stopped waiting: fail_fast, its
-- own end). With p_parent alone: all its unfinished children. Without: the sweep, for what a
-- runner that crashed did not get to: the unfinished children of parents that ended, except
-- those started with `start` of a parent that completed or failed (nobody waits for them, and
-- that is what `start` asks for); every child of a cancelled or timed-out parent.
CREATE FUNCTION cairn.reap_children(p_parent uuid DEFAULT NULL, p_exec uuid[] DEFAULT NULL,
                                    p_reason text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT c.instance_id
          FROM cairn.runner_instances c
          JOIN cairn.runner_instances p ON p.instance_id = c.parent_id
         WHERE c.parent_id IS NOT NULL AND c.status IN ('queued', 'running')
           AND (p_parent IS NULL OR c.parent_id = p_parent)
           AND CASE WHEN p_exec IS NOT NULL THEN c.parent_exec_id = ANY (p_exec)
                    WHEN p_parent IS NOT NULL THEN true
                    ELSE p.status IN ('cancelled', 'timed_out')
                         OR (p.status IN ('completed', 'failed') AND NOT c.detached) END
         ORDER BY c.instance_id
         LIMIT 1000
    LOOP
        BEGIN
            PERFORM cairn.cancel(r.instance_id,
                                 coalesce(p_reason, 'its parent no longer waits for it'));
            n := n + 1;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            NULL; -- racing a cairn.retry of it, or another runner's sweep: the next sweep
        END;
    END LOOP;
    RETURN n;
END
$$;

-- cairn.retry of 0009, clearing parent_pending: a child queued again answers its parent when it
-- finishes again, not with the outcome it is retried from.
CREATE OR REPLACE FUNCTION cairn.retry(p_instance_id uuid, p_reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    ri cairn.runner_instances%ROWTYPE;
BEGIN
    SELECT * INTO ri FROM cairn.runner_instances WHERE instance_id = p_instance_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance %', p_instance_id USING ERRCODE = 'no_data_found';
    END IF;
    IF ri.status IN ('queued', 'running') THEN
        RETURN 'already ' || ri.status;
    END IF;
    IF ri.status = 'completed' THEN
        RAISE EXCEPTION 'instance % completed: only failed, cancelled or timed_out instances '
                        'can be retried', p_instance_id
            USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO cairn.instance_history (instance_id, status, error, started_at, completed_at,
                                        reason)
    VALUES (ri.instance_id, ri.status, ri.error, ri.started_at, ri.completed_at,
            left(p_reason, 1000));
    UPDATE cairn.runner_instances
       SET status = 'queued', error = NULL, result = NULL, completed_at = NULL,
           cancel_requested_at = NULL, cancel_reason = NULL, redrive = true,
           parent_pending = false,
           deadline_at = clock_timestamp() + timeout_ms * interval '1 millisecond'
     WHERE instance_id = p_instance_id;
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    VALUES (ri.instance_id, ri.workflow_version_id, ri.priority, clock_timestamp());
    PERFORM pg_notify('cairn_enqueue', '');
    RETURN 'queued';
END
$$;
