-- SPDX-License-Identifier: MIT
-- 60_retention.sql
--
-- Retention (docs/operations.md "Retention"): what is kept, pruning one batch, the runners' due
-- pruning and a workflow's own retention.
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). The API's writing functions are SECURITY DEFINER, owned by cairn_api
-- (90_api_owner.sql).

-- Retention keeps the partitions of a backfill that is still going: its counts are recounted
-- from them at every tick (a finished backfill's counts stay in its row).
CREATE OR REPLACE FUNCTION cairn.prune_keeps(p_id uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM cairn.runner_instances c
                    WHERE c.parent_id = p_id AND c.status IN ('queued', 'running')
                      AND NOT c.detached)
        OR EXISTS (SELECT 1 FROM cairn.runner_instances ri
                     JOIN cairn.backfills b ON b.id = ri.backfill_id
                    WHERE ri.instance_id = p_id
                      AND b.state IN ('pending', 'running', 'paused', 'resuming'))
$$;

CREATE OR REPLACE FUNCTION cairn.prune_batch(p_cutoff timestamptz, p_workflow text DEFAULT NULL,
                                  p_exclude text[] DEFAULT '{}', p_batch integer DEFAULT 500,
                                  p_before timestamptz DEFAULT NULL,
                                  p_tenant text DEFAULT NULL,
                                  p_exclude_own boolean DEFAULT false,
                                  OUT instances integer, OUT actions integer,
                                  OUT next_before timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
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
               AND (p_tenant IS NULL OR ri.tenant_id = p_tenant)
               AND ri.status IN ('completed', 'failed', 'cancelled', 'timed_out')
               AND ri.completed_at < p_cutoff AND NOT ri.parent_pending
               AND NOT cairn.prune_keeps(ri.instance_id)
             ORDER BY ri.created_at DESC LIMIT p_batch) c;
    ELSE
        SELECT array_agg(c.instance_id), min(c.created_at) INTO v_cand, next_before FROM (
            SELECT u.instance_id, u.created_at FROM (
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending, ri.tenant_id FROM cairn.runner_instances ri
                  WHERE ri.status = 'completed' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending, ri.tenant_id FROM cairn.runner_instances ri
                  WHERE ri.status = 'failed' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending, ri.tenant_id FROM cairn.runner_instances ri
                  WHERE ri.status = 'cancelled' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending, ri.tenant_id FROM cairn.runner_instances ri
                  WHERE ri.status = 'timed_out' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)) u
             WHERE u.completed_at < p_cutoff AND NOT u.parent_pending
               AND u.workflow_name <> ALL (p_exclude)
               AND (p_tenant IS NULL OR u.tenant_id = p_tenant)
               AND NOT (p_exclude_own
                        AND EXISTS (SELECT 1 FROM cairn.workflow_retention wr
                                     WHERE wr.tenant_id = u.tenant_id
                                       AND wr.workflow_name = u.workflow_name))
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

-- Deletes at most p_batch keyed events published before p_cutoff that no instance can take any
-- more, oldest first, tenant by tenant (p_tenant NULL: every tenant); returns how many. An
-- instance takes only the events published after it was created (cairn.runner_waits), so an
-- event older than every unfinished instance of its tenant is nobody's: such an instance pins
-- its tenant's later events, however old. Their reads (cairn.event_reads) go with them. Kept
-- until p_cutoff even when nobody can take them: a publisher's dedup key holds that long.
CREATE OR REPLACE FUNCTION cairn.prune_events(p_cutoff timestamptz, p_batch integer DEFAULT 500,
                                              p_tenant text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    t record;
    v_upto timestamptz;
    v_n integer;
    v_done integer := 0;
BEGIN
    IF p_batch < 1 OR p_batch > 100000 THEN
        RAISE EXCEPTION 'cairn.prune_events: the batch must be in 1..100000, got %', p_batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR t IN SELECT tn.name FROM cairn.tenants tn
              WHERE p_tenant IS NULL OR tn.name = p_tenant ORDER BY tn.name LOOP
        EXIT WHEN v_done >= p_batch;
        -- The oldest unfinished instance of the tenant: one walk of runner_instances_status per
        -- unfinished status, stopping at the tenant's first (least() skips the NULL of none).
        v_upto := least(p_cutoff,
                        (SELECT ri.created_at FROM cairn.runner_instances ri
                          WHERE ri.status = 'queued' AND ri.tenant_id = t.name
                          ORDER BY ri.created_at LIMIT 1),
                        (SELECT ri.created_at FROM cairn.runner_instances ri
                          WHERE ri.status = 'running' AND ri.tenant_id = t.name
                          ORDER BY ri.created_at LIMIT 1));
        DELETE FROM cairn.events e WHERE e.id IN (
            SELECT ev.id FROM cairn.events ev
             WHERE ev.tenant_id = t.name AND ev.published_at < v_upto
             ORDER BY ev.published_at LIMIT p_batch - v_done FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_done := v_done + v_n;
    END LOOP;
    RETURN v_done;
END;
$$;

-- One batch of what retention is due: each (tenant, workflow) with its own retention first, then
-- the rest under p_default (NULL: keep them), from p_before on (see prune_batch). What the
-- runners call, about once a minute and again at once, with next_before, while there is more.
CREATE OR REPLACE FUNCTION cairn.prune_due(p_default interval, p_batch integer DEFAULT 500,
                                           p_before timestamptz DEFAULT NULL,
                                           OUT instances integer, OUT actions integer,
                                           OUT next_before timestamptz, OUT events integer)
LANGUAGE plpgsql AS $$
DECLARE
    w record;
    v_i integer;
    v_a integer;
BEGIN
    instances := 0;
    actions := 0;
    events := 0;
    -- one runner prunes at a time; the others find nothing to do ("cair", 13)
    IF NOT pg_try_advisory_xact_lock(1667330681, 13) THEN
        RETURN;
    END IF;
    -- A round's first batch: the keyed events past the default retention that nobody can take
    -- (a workflow's own retention is not theirs: an event is its tenant's, not a workflow's).
    IF p_before IS NULL AND p_default IS NOT NULL THEN
        events := cairn.prune_events(now() - p_default, p_batch);
    END IF;
    IF p_before IS NULL THEN -- a round's first batch: the workflows' own retention
        FOR w IN SELECT wr.tenant_id, wr.workflow_name, wr.keep FROM cairn.workflow_retention wr
                  WHERE wr.keep IS NOT NULL ORDER BY wr.tenant_id, wr.workflow_name LOOP
            EXIT WHEN instances >= p_batch;
            SELECT b.instances, b.actions INTO v_i, v_a
              FROM cairn.prune_batch(now() - w.keep, w.workflow_name, '{}', p_batch - instances,
                                     NULL, w.tenant_id) b;
            instances := instances + v_i;
            actions := actions + v_a;
        END LOOP;
        IF instances >= p_batch THEN
            RETURN; -- more of them next time; the rest's walk has not started
        END IF;
    END IF;
    IF p_default IS NOT NULL THEN
        SELECT b.instances, b.actions, b.next_before INTO v_i, v_a, next_before
          FROM cairn.prune_batch(now() - p_default, NULL, '{}', p_batch - instances,
                                 p_before, NULL, true) b;
        instances := instances + v_i;
        actions := actions + v_a;
    END IF;
END;
$$;

-- Sets the own retention of a workflow of the caller's tenant (p_keep NULL: for ever) or, with
-- p_unset, goes back to the runners' CAIRN_RETENTION.
CREATE OR REPLACE FUNCTION cairn.retention_set(p_workflow text, p_keep interval,
                                               p_unset boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_tenant text := cairn.current_tenant();
BEGIN
    PERFORM cairn.find_version('cairn.retention_set', p_workflow);
    IF p_keep <= interval '0' THEN
        RAISE EXCEPTION 'cairn.retention_set: retention must be positive, got %', p_keep
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL keeps them for ever.';
    END IF;
    IF p_unset THEN
        DELETE FROM cairn.workflow_retention
         WHERE tenant_id = v_tenant AND workflow_name = p_workflow;
    ELSE
        INSERT INTO cairn.workflow_retention AS wr (tenant_id, workflow_name, keep)
        VALUES (v_tenant, p_workflow, p_keep)
        ON CONFLICT (tenant_id, workflow_name) DO UPDATE
           SET keep = EXCLUDED.keep, updated_at = clock_timestamp();
    END IF;
END;
$$;
