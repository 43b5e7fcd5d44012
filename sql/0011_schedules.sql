-- SPDX-License-Identifier: MIT
-- 0011: schedules (docs/operations.md "Schedules").
--
-- A schedule enqueues an instance of a workflow at each slot of a cron expression (in a time
-- zone) or every D. The runners fire them: every runner looks about once a second for due
-- schedules (FOR UPDATE SKIP LOCKED, so one runner takes each), enqueues the due slots and
-- moves next_at on, in one transaction. Each instance records its schedule and slot, unique
-- together: a slot is enqueued at most once however many runners look and whatever crashes.
-- Slots are computed by the runner (cron matching in runner/ops/cron.c, zones by PostgreSQL); a
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

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.schedule_add, cairn.schedule_fire, cairn.schedule_pause, cairn.schedule_resume,
-- cairn.schedule_delete, cairn.schedule_trigger (sql/api/40_schedules.sql).





