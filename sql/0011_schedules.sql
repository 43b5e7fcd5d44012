-- SPDX-License-Identifier: MIT
-- 0011: schedules (docs/operations.md "Schedules").
--
-- A schedule enqueues an instance of a workflow at each slot of a cron expression (in a time
-- zone) or every D. The runners fire them: every runner looks about once a second for due
-- schedules (FOR UPDATE SKIP LOCKED, so one runner takes each), enqueues the due slots and
-- moves next_at on, in one transaction. Each instance records its schedule and slot, unique
-- together: a slot is enqueued at most once however many runners look and whatever crashes.
-- Slots are computed by the runner (cron matching in runner/cron.c, zones by PostgreSQL); a
-- schedule added by SQL has next_at NULL until a runner computes its first slot, and one whose
-- expression a runner cannot read is paused with the reason in `error`.

CREATE TABLE cairn.schedules (
    name text PRIMARY KEY CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_.-]{0,127}$'),
    workflow_name text NOT NULL,
    workflow_version text,            -- NULL: the newest when each slot is enqueued
    cron text CHECK (length(cron) <= 256),
    every_ms bigint CHECK (every_ms >= 1000 AND every_ms <= 31622400000),
    timezone text NOT NULL DEFAULT 'UTC',
    input jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(input) = 'object'),
    jitter_ms bigint NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0 AND jitter_ms <= 86400000),
    catch_up text NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'one', 'all')),
    paused boolean NOT NULL DEFAULT false,
    next_at timestamptz,              -- the next slot; NULL: a runner computes it
    last_slot timestamptz,            -- the last slot enqueued
    error text,                       -- why a runner paused it (an expression it cannot read)
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((cron IS NULL) <> (every_ms IS NULL))
);
-- What the runners look at every second: only schedules that may be due.
CREATE INDEX schedules_due ON cairn.schedules (next_at NULLS FIRST) WHERE NOT paused;

ALTER TABLE cairn.runner_instances
    ADD COLUMN schedule_name text,
    ADD COLUMN schedule_slot timestamptz;
-- One instance per slot of a schedule (a manual trigger has no slot).
CREATE UNIQUE INDEX runner_instances_schedule_slot ON cairn.runner_instances
    (schedule_name, schedule_slot) WHERE schedule_name IS NOT NULL;

-- A schedule from SQL: the same checks as `cairnctl schedule add`, but for the cron expression,
-- which the runner reads (one it cannot read pauses the schedule, with `error` set). Returns
-- the name.
CREATE FUNCTION cairn.schedule_add(
    p_name text, p_workflow text, p_cron text DEFAULT NULL, p_every interval DEFAULT NULL,
    p_timezone text DEFAULT 'UTC', p_input jsonb DEFAULT '{}', p_jitter interval DEFAULT NULL,
    p_catch_up text DEFAULT 'skip', p_paused boolean DEFAULT false,
    p_workflow_version text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    IF (p_cron IS NULL) = (p_every IS NULL) THEN
        RAISE EXCEPTION 'cairn.schedule_add: give a cron expression or an interval, not both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM 1 FROM cairn.workflow_versions v
      WHERE v.workflow_name = p_workflow
        AND (p_workflow_version IS NULL OR v.workflow_version = p_workflow_version);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cairn.schedule_add: unknown workflow "%"%', p_workflow,
            CASE WHEN p_workflow_version IS NULL THEN ' (register it first)'
                 ELSE format(' version "%s"', p_workflow_version) END
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM now() AT TIME ZONE p_timezone; -- an unknown zone raises 22023 here
    INSERT INTO cairn.schedules (name, workflow_name, workflow_version, cron, every_ms,
                                 timezone, input, jitter_ms, catch_up, paused)
    VALUES (p_name, p_workflow, p_workflow_version, p_cron,
            floor(extract(epoch FROM p_every) * 1000), p_timezone, coalesce(p_input, '{}'),
            coalesce(floor(extract(epoch FROM p_jitter) * 1000), 0), p_catch_up, p_paused);
    RETURN p_name;
END
$$;

-- Enqueues the instance of schedule p_name's slot p_slot (due at p_due: the slot plus its
-- jitter), once: a slot already enqueued returns NULL. p_slot NULL: a manual trigger (due at
-- once, always a new instance). Returns the instance id.
CREATE FUNCTION cairn.schedule_fire(p_name text, p_slot timestamptz, p_due timestamptz)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    s cairn.schedules%ROWTYPE;
    v_version_id uuid;
    v_timeout bigint;
    v_id uuid;
BEGIN
    SELECT * INTO s FROM cairn.schedules WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule "%"', p_name USING ERRCODE = 'no_data_found';
    END IF;
    SELECT v.id, v.timeout_ms INTO v_version_id, v_timeout
      FROM cairn.workflow_versions v
     WHERE v.workflow_name = s.workflow_name
       AND (s.workflow_version IS NULL OR v.workflow_version = s.workflow_version)
     ORDER BY v.created_at DESC LIMIT 1;
    IF v_version_id IS NULL THEN
        RAISE EXCEPTION 'schedule "%": workflow "%" is not registered', p_name, s.workflow_name
            USING ERRCODE = 'undefined_object';
    END IF;
    INSERT INTO cairn.runner_instances AS ri
           (workflow_version_id, workflow_name, input, timeout_ms, deadline_at, schedule_name,
            schedule_slot)
    VALUES (v_version_id, s.workflow_name, s.input, v_timeout,
            coalesce(p_due, clock_timestamp()) + v_timeout * interval '1 millisecond', p_name,
            p_slot)
    ON CONFLICT (schedule_name, schedule_slot) WHERE schedule_name IS NOT NULL DO NOTHING
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

CREATE FUNCTION cairn.schedule_pause(p_name text) RETURNS boolean
LANGUAGE sql AS $$
    UPDATE cairn.schedules SET paused = true WHERE name = p_name RETURNING true
$$;

-- Resumes a schedule from now: slots missed while it was paused are not caught up.
CREATE FUNCTION cairn.schedule_resume(p_name text) RETURNS boolean
LANGUAGE sql AS $$
    UPDATE cairn.schedules SET paused = false, error = NULL, next_at = NULL
     WHERE name = p_name RETURNING true
$$;

-- Deletes a schedule; the instances it started keep its name.
CREATE FUNCTION cairn.schedule_delete(p_name text) RETURNS boolean
LANGUAGE sql AS $$
    DELETE FROM cairn.schedules WHERE name = p_name RETURNING true
$$;

-- Runs a schedule's workflow once now (outside its slots). Returns the instance id.
CREATE FUNCTION cairn.schedule_trigger(p_name text) RETURNS uuid
LANGUAGE sql AS $$
    SELECT cairn.schedule_fire(p_name, NULL, NULL)
$$;
