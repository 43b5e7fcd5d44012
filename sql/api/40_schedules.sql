-- SPDX-License-Identifier: MIT
-- 40_schedules.sql
--
-- Schedules (docs/operations.md "Schedules"): adding, pausing, resuming, deleting and triggering
-- them, the first slot, and the firing of a slot (the runners compute slots, runner/ops/schedule.c).
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). The API's writing functions are SECURITY DEFINER, owned by cairn_api
-- (90_api_owner.sql).

-- A schedule of the caller's tenant from SQL: the same checks as `cairnctl schedule add`, but for
-- the cron expression, which the runner reads (one it cannot read pauses the schedule, with
-- `error` set). Returns the name.
CREATE OR REPLACE FUNCTION cairn.schedule_add(
    p_name text, p_workflow text, p_cron text DEFAULT NULL, p_every interval DEFAULT NULL,
    p_timezone text DEFAULT 'UTC', p_input jsonb DEFAULT '{}', p_jitter interval DEFAULT NULL,
    p_catch_up text DEFAULT 'skip', p_paused boolean DEFAULT false,
    p_workflow_version text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
BEGIN
    IF (p_cron IS NULL) = (p_every IS NULL) THEN
        RAISE EXCEPTION 'cairn.schedule_add: give a cron expression or an interval, not both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM cairn.find_version('cairn.schedule_add', p_workflow, p_workflow_version);
    PERFORM now() AT TIME ZONE p_timezone; -- an unknown zone raises 22023 here
    INSERT INTO cairn.schedules (tenant_id, name, workflow_name, workflow_version, cron, every_ms,
                                 timezone, input, jitter_ms, catch_up, paused)
    VALUES (cairn.current_tenant(), p_name, p_workflow, p_workflow_version, p_cron,
            floor(extract(epoch FROM p_every) * 1000), p_timezone, coalesce(p_input, '{}'),
            coalesce(floor(extract(epoch FROM p_jitter) * 1000), 0), p_catch_up, p_paused);
    RETURN p_name;
END
$$;

-- What `cairnctl schedule add` wrote itself: the first slot, when the schedule has none yet
-- (so that `schedule list` shows it at once; a runner computes it too).
CREATE OR REPLACE FUNCTION cairn.schedule_first(p_name text, p_at timestamptz) RETURNS boolean
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    WITH u AS (UPDATE cairn.schedules SET next_at = p_at
                WHERE name = p_name AND tenant_id = cairn.current_tenant() AND next_at IS NULL
               RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM u)
$$;

CREATE OR REPLACE FUNCTION cairn.schedule_fire(p_name text, p_slot timestamptz, p_due timestamptz,
                                    p_tenant text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    s cairn.schedules%ROWTYPE;
    v_version_id uuid;
    v_timeout bigint;
    v_id uuid;
    v_tenant text := coalesce(p_tenant, cairn.current_tenant());
BEGIN
    SELECT * INTO s FROM cairn.schedules WHERE tenant_id = v_tenant AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule "%"', p_name USING ERRCODE = 'no_data_found';
    END IF;
    SELECT v.id, v.timeout_ms INTO v_version_id, v_timeout
      FROM cairn.workflow_versions v
     WHERE v.tenant_id = v_tenant AND v.workflow_name = s.workflow_name
       AND (s.workflow_version IS NULL OR v.workflow_version = s.workflow_version)
     ORDER BY v.created_at DESC LIMIT 1;
    IF v_version_id IS NULL THEN
        RAISE EXCEPTION 'schedule "%": workflow "%" is not registered', p_name, s.workflow_name
            USING ERRCODE = 'undefined_object';
    END IF;
    INSERT INTO cairn.runner_instances AS ri
           (tenant_id, workflow_version_id, workflow_name, input, timeout_ms, deadline_at,
            schedule_name, schedule_slot)
    VALUES (v_tenant, v_version_id, s.workflow_name, s.input, v_timeout,
            coalesce(p_due, clock_timestamp()) + v_timeout * interval '1 millisecond', p_name,
            p_slot)
    ON CONFLICT (schedule_name, schedule_slot, tenant_id) WHERE schedule_name IS NOT NULL
    DO NOTHING
    RETURNING ri.instance_id INTO v_id;
    IF v_id IS NULL THEN
        RETURN NULL; -- this slot was enqueued before
    END IF;
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    VALUES (v_id, v_version_id, 0, coalesce(p_due, clock_timestamp()));
    PERFORM pg_notify('cairn_enqueue', '');
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION cairn.schedule_pause(p_name text) RETURNS boolean
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    UPDATE cairn.schedules SET paused = true
     WHERE tenant_id = cairn.current_tenant() AND name = p_name RETURNING true
$$;

CREATE OR REPLACE FUNCTION cairn.schedule_resume(p_name text) RETURNS boolean
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    UPDATE cairn.schedules SET paused = false, error = NULL, next_at = NULL
     WHERE tenant_id = cairn.current_tenant() AND name = p_name RETURNING true
$$;

CREATE OR REPLACE FUNCTION cairn.schedule_delete(p_name text) RETURNS boolean
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    DELETE FROM cairn.schedules
     WHERE tenant_id = cairn.current_tenant() AND name = p_name RETURNING true
$$;

-- Runs a schedule's workflow once now (outside its slots). Returns the instance id.
CREATE OR REPLACE FUNCTION cairn.schedule_trigger(p_name text) RETURNS uuid
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    SELECT cairn.schedule_fire(p_name, NULL, NULL)
$$;
