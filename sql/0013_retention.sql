-- SPDX-License-Identifier: MIT
-- 0013: retention (docs/operations.md "Retention").
--
-- Finished instances (completed, failed, cancelled, timed_out) are deleted, with their action
-- results and their history, once they finished longer ago than their workflow's retention:
-- the runners' CAIRN_RETENTION, or the workflow's own from cairn.workflow_retention. Deleting
-- goes in small batches, each its own short transaction, so that it never holds many locks or
-- a long snapshot: the runners' writes touch only unfinished instances, so a batch and the hot
-- path never wait for each other.
--
-- The walk uses runner_instances_status (status, created_at): an instance finishes after it is
-- created, so created_at < cutoff bounds the walk and completed_at < cutoff decides. No index
-- on completed_at: it would cost every instance an index insertion when it finishes, to save a
-- walk past instances created before the cutoff that finished after it (few: long-lived ones).
--
-- A child whose outcome has not reached its parent yet (parent_pending) is kept until it has.

CREATE TABLE cairn.workflow_retention (
    workflow_name text PRIMARY KEY,
    keep interval CHECK (keep > interval '0'),   -- NULL: keep this workflow's instances for ever
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- What retention keeps although it finished long ago: a parent whose child (one it waits for,
-- not one it started with `start`) has not finished yet, since the child's outcome is still to
-- be recorded against it and the sweep that cancels such children finds them through the
-- parent's row. (0015 adds the partitions of a backfill still going.)
CREATE FUNCTION cairn.prune_keeps(p_id uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM cairn.runner_instances c
                    WHERE c.parent_id = p_id AND c.status IN ('queued', 'running')
                      AND NOT c.detached)
$$;

-- Deletes up to p_batch finished instances that finished before p_cutoff, of p_workflow (NULL:
-- of any workflow but those in p_exclude), with their action results and history; the walk
-- goes from the newest creation time down, starting at p_before when it is not NULL. Returns
-- how many instances and action results it deleted and, when there may be more, next_before:
-- where the next batch starts. A caller going batch after batch passes it back, so that rows
-- the walk keeps (other workflows, children whose outcome is pending) are read once per prune,
-- not once per batch. Rows another transaction holds (a retry of one of them) are skipped.
CREATE FUNCTION cairn.prune_batch(p_cutoff timestamptz, p_workflow text DEFAULT NULL,
                                  p_exclude text[] DEFAULT '{}', p_batch integer DEFAULT 500,
                                  p_before timestamptz DEFAULT NULL,
                                  OUT instances integer, OUT actions integer,
                                  OUT next_before timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_upto timestamptz := least(p_cutoff, coalesce(p_before, p_cutoff));
    v_cand uuid[];
    v_ids uuid[];
BEGIN
    IF p_batch < 1 OR p_batch > 100000 THEN
        RAISE EXCEPTION 'cairn.prune_batch: the batch must be in 1..100000, got %', p_batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One index walk per finished status (runner_instances_status), merged in creation order;
    -- a workflow's own through runner_instances_workflow. No lock here: FOR UPDATE cannot sit
    -- under a UNION.
    IF p_workflow IS NOT NULL THEN
        SELECT array_agg(c.instance_id), min(c.created_at) INTO v_cand, next_before FROM (
            SELECT ri.instance_id, ri.created_at FROM cairn.runner_instances ri
             WHERE ri.workflow_name = p_workflow AND ri.created_at <= v_upto
               AND ri.status IN ('completed', 'failed', 'cancelled', 'timed_out')
               AND ri.completed_at < p_cutoff AND NOT ri.parent_pending
               AND NOT cairn.prune_keeps(ri.instance_id)
             ORDER BY ri.created_at DESC LIMIT p_batch) c;
    ELSE
        SELECT array_agg(c.instance_id), min(c.created_at) INTO v_cand, next_before FROM (
            SELECT u.instance_id, u.created_at FROM (
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending FROM cairn.runner_instances ri
                  WHERE ri.status = 'completed' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending FROM cairn.runner_instances ri
                  WHERE ri.status = 'failed' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending FROM cairn.runner_instances ri
                  WHERE ri.status = 'cancelled' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending FROM cairn.runner_instances ri
                  WHERE ri.status = 'timed_out' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)) u
             WHERE u.completed_at < p_cutoff AND NOT u.parent_pending
               AND u.workflow_name <> ALL (p_exclude)
               AND NOT cairn.prune_keeps(u.instance_id)
             ORDER BY u.created_at DESC LIMIT p_batch) c;
    END IF;
    IF coalesce(cardinality(v_cand), 0) < p_batch THEN
        next_before := NULL; -- the walk reached the end
    END IF;
    -- Locked and checked again: a retry may have queued one again meanwhile.
    SELECT coalesce(array_agg(l.instance_id), '{}') INTO v_ids FROM (
        SELECT ri.instance_id FROM cairn.runner_instances ri
         WHERE ri.instance_id = ANY (coalesce(v_cand, '{}'))
           AND ri.status IN ('completed', 'failed', 'cancelled', 'timed_out')
           AND ri.completed_at < p_cutoff AND NOT ri.parent_pending
           AND NOT cairn.prune_keeps(ri.instance_id)
           FOR UPDATE SKIP LOCKED) l;
    DELETE FROM cairn.runner_actions_done d WHERE d.instance_id = ANY (v_ids);
    GET DIAGNOSTICS actions = ROW_COUNT;
    DELETE FROM cairn.runner_instances ri WHERE ri.instance_id = ANY (v_ids);
    GET DIAGNOSTICS instances = ROW_COUNT;
END;
$$;

-- One batch of what retention is due: each workflow with its own retention first, then the
-- rest under p_default (NULL: keep them), from p_before on (see prune_batch). What the runners
-- call, about once a minute and again at once, with next_before, while there is more.
CREATE FUNCTION cairn.prune_due(p_default interval, p_batch integer DEFAULT 500,
                                p_before timestamptz DEFAULT NULL,
                                OUT instances integer, OUT actions integer,
                                OUT next_before timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    w record;
    v_i integer;
    v_a integer;
    v_own text[];
BEGIN
    instances := 0;
    actions := 0;
    -- one runner prunes at a time; the others find nothing to do ("cair", 13)
    IF NOT pg_try_advisory_xact_lock(1667330681, 13) THEN
        RETURN;
    END IF;
    SELECT coalesce(array_agg(wr.workflow_name), '{}') INTO v_own FROM cairn.workflow_retention wr;
    IF p_before IS NULL THEN -- a round's first batch: the workflows' own retention
        FOR w IN SELECT wr.workflow_name, wr.keep FROM cairn.workflow_retention wr
                  WHERE wr.keep IS NOT NULL ORDER BY wr.workflow_name LOOP
            EXIT WHEN instances >= p_batch;
            SELECT b.instances, b.actions INTO v_i, v_a
              FROM cairn.prune_batch(now() - w.keep, w.workflow_name, '{}', p_batch - instances) b;
            instances := instances + v_i;
            actions := actions + v_a;
        END LOOP;
        IF instances >= p_batch THEN
            RETURN; -- more of them next time; the rest's walk has not started
        END IF;
    END IF;
    IF p_default IS NOT NULL THEN
        SELECT b.instances, b.actions, b.next_before INTO v_i, v_a, next_before
          FROM cairn.prune_batch(now() - p_default, NULL, v_own, p_batch - instances,
                                 p_before) b;
        instances := instances + v_i;
        actions := actions + v_a;
    END IF;
END;
$$;

-- Sets a workflow's own retention (p_keep NULL: for ever) or, with p_unset, goes back to the
-- runners' CAIRN_RETENTION.
CREATE FUNCTION cairn.retention_set(p_workflow text, p_keep interval, p_unset boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.workflow_versions v WHERE v.workflow_name = p_workflow)
    THEN
        RAISE EXCEPTION 'cairn.retention_set: unknown workflow "%" (register it first)',
            p_workflow USING ERRCODE = 'undefined_object';
    END IF;
    IF p_keep <= interval '0' THEN
        RAISE EXCEPTION 'cairn.retention_set: retention must be positive, got %', p_keep
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL keeps them for ever.';
    END IF;
    IF p_unset THEN
        DELETE FROM cairn.workflow_retention WHERE workflow_name = p_workflow;
    ELSE
        INSERT INTO cairn.workflow_retention AS wr (workflow_name, keep)
        VALUES (p_workflow, p_keep)
        ON CONFLICT (workflow_name) DO UPDATE
           SET keep = EXCLUDED.keep, updated_at = clock_timestamp();
    END IF;
END;
$$;
