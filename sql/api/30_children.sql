-- SPDX-License-Identifier: MIT
-- 30_children.sql
--
-- Child workflows (docs/operations.md "Task trees"): creating children inside the runner's fenced
-- write, waking the parents their outcomes reached, and cancelling children nobody waits for.
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). The API's writing functions are SECURITY DEFINER, owned by cairn_api
-- (90_api_owner.sql).

-- Creates child instances for the parents' calls (arrays of one entry per child), each only
-- while its parent's lease p_lock holds (the caller's transaction holds the parent's queue row).
-- A child is of its parent's tenant, and so is its workflow. Returns one row per child whose
-- parent holds: 'created', 'exists' (a replay: nothing changes), or why it was not created
-- ('not_found', 'bad_input', 'too_deep') with a message.
CREATE OR REPLACE FUNCTION cairn.start_children(
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
                   ri.priority, ri.tenant_id
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
        IF v_wf_key IS DISTINCT FROM par.tenant_id || '/' || p_workflow[i] || '/'
                                     || coalesce(p_version[i], '') THEN
            v_wf_key := par.tenant_id || '/' || p_workflow[i] || '/' || coalesce(p_version[i], '');
            SELECT wv.id, wv.timeout_ms, wv.inputs, wv.input_schema INTO v
              FROM cairn.workflow_versions wv
             WHERE wv.tenant_id = par.tenant_id AND wv.workflow_name = p_workflow[i]
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
        -- A child with typed inputs takes what cairn.enqueue would (defaults may be left out);
        -- one without, exactly its inputs' names.
        IF v.input_schema IS NOT NULL THEN
            message := cairn.input_refusal(v.input_schema, v_input, p_workflow[i]);
            IF message IS NOT NULL THEN
                status := 'bad_input';
                RETURN NEXT;
                CONTINUE;
            END IF;
        ELSIF v.inputs IS NOT NULL THEN
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
               (tenant_id, instance_id, workflow_version_id, workflow_name, input, priority,
                timeout_ms, deadline_at, parent_id, root_id, parent_exec_id, parent_attempt,
                depth, detached)
        VALUES (par.tenant_id, p_child[i], v.id, p_workflow[i], v_input, par.priority, v_timeout,
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

-- Waits of parents for children they started (`wait for id`), in the parents' fenced writes
-- (arrays of one entry per wait; each only while its parent's lease p_lock holds). Returns one
-- row per wait whose parent holds: 'ended' (the child had ended: its status as outcome, its
-- result or error, its workflow: the runner makes the call's result of them), 'waiting' (the
-- child is attached to the call now, as a `run` child is: its end records its outcome as the
-- call's result; a replay of the same call changes nothing), 'not_child' (no child of this
-- parent has that id), or 'taken' (another call waits for it already, or it is a `run` call's).
-- The child's row is locked: a child ending meanwhile either commits first (then this reads it
-- ended) or sees itself attached when its final write updates the row (cairn_finish marks it
-- parent_pending, and the runners' sweep hands its outcome over).
CREATE OR REPLACE FUNCTION cairn.join_children(
    p_parent uuid[], p_lock uuid[], p_exec uuid[], p_attempt integer[], p_child uuid[])
RETURNS TABLE (exec_id uuid, attempt integer, status text, outcome text, result text,
               error text, workflow text, message text)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    c record;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_child, 1), 0) LOOP
        PERFORM 1 FROM cairn.queued_instances q
          WHERE q.instance_id = p_parent[i] AND q.lock_uuid = p_lock[i];
        CONTINUE WHEN NOT FOUND; -- the parent's lease is gone: its write is lost
        exec_id := p_exec[i];
        attempt := p_attempt[i];
        outcome := NULL;
        result := NULL;
        error := NULL;
        workflow := NULL;
        message := NULL;
        SELECT ri.status, ri.result::text AS result, ri.error::text AS error, ri.workflow_name,
               ri.detached, ri.parent_exec_id, ri.parent_attempt
          INTO c
          FROM cairn.runner_instances ri
         WHERE ri.instance_id = p_child[i] AND ri.parent_id = p_parent[i]
           FOR UPDATE;
        IF NOT FOUND THEN
            status := 'not_child';
            message := format('no child of this instance has the id %s (wait for takes the id '
                              'a start of this instance gave)', p_child[i]);
        ELSIF c.status IN ('completed', 'failed', 'cancelled', 'timed_out') THEN
            status := 'ended';
            outcome := c.status;
            result := c.result;
            error := c.error;
            workflow := c.workflow_name;
        ELSIF c.detached THEN
            UPDATE cairn.runner_instances
               SET detached = false, parent_exec_id = p_exec[i], parent_attempt = p_attempt[i]
             WHERE instance_id = p_child[i];
            status := 'waiting';
        ELSIF c.parent_exec_id = p_exec[i] AND c.parent_attempt = p_attempt[i] THEN
            status := 'waiting';
        ELSE
            status := 'taken';
            message := format('child %s is waited for already (by another wait for, or by the '
                              'run that started it)', p_child[i]);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Wakes the parents of finished children marked parent_pending whose result the parent holds
-- (p_children: those children; NULL: any, for the sweep), and clears the mark. A child row
-- another call holds is skipped (that call does it); parents' queue rows are waited for, in
-- instance id order, the order the runners' fenced writes lock in, and nothing else that could
-- wait is held meanwhile: no cycle. Returns how many children it cleared.
CREATE OR REPLACE FUNCTION cairn.wake_parents(p_children uuid[] DEFAULT NULL) RETURNS integer
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

-- Cancels children nobody waits for any more; returns how many. With p_parent and p_exec: the
-- unfinished children of those calls of p_parent (a parent that stopped waiting: fail_fast, its
-- own end). With p_parent alone: all its unfinished children. Without: the sweep, for what a
-- runner that crashed did not get to: the unfinished children of parents that ended, except
-- those started with `start` of a parent that completed or failed (nobody waits for them, and
-- that is what `start` asks for); every child of a cancelled or timed-out parent.
CREATE OR REPLACE FUNCTION cairn.reap_children(p_parent uuid DEFAULT NULL, p_exec uuid[] DEFAULT NULL,
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
