-- SPDX-License-Identifier: MIT
-- 0015: backfills (docs/operations.md "Backfills").
--
-- A backfill runs a workflow once per partition of a range (days of a date range, or integers
-- with a step), the partition's value in one input, at most `concurrency` partitions at once.
-- The runners drive it: about once a second each runner calls cairn.backfill_tick(), which takes
-- every active backfill nobody else is ticking (FOR UPDATE SKIP LOCKED), counts its partitions,
-- folds the durations of those that finished into an exponentially weighted moving average (the
-- partitions' duration) and the partitions finished a second while running into another (the
-- ETA), starts the next partitions up to the concurrency and moves its state on, in one
-- transaction. The checkpoint is next_index, the first partition not started yet; a partition's
-- instance records its backfill and index under a unique index, so each partition is started
-- exactly once whichever runner ticks and whatever crashes. Nothing is driven by the client:
-- a runner that dies mid-tick rolls its transaction back and the next tick, on any runner, goes on.
--
-- States: pending -> running <-> (paused -> resuming -> running) -> completed | failed, and
-- cancelled from any state but completed; failed -> running again by retry_failed. A trigger
-- refuses any other change. A pause starts nothing new; the partitions running finish, so it
-- lands on a partition boundary.

CREATE TABLE cairn.backfills (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workflow_name text NOT NULL,
    workflow_version text,               -- NULL: the newest when each partition starts
    param text NOT NULL CHECK (param ~ '^[A-Za-z_][A-Za-z0-9_]{0,63}$'),
    kind text NOT NULL CHECK (kind IN ('date', 'int')),
    range_from text NOT NULL,            -- as given (a date, or an integer)
    range_to text NOT NULL,
    step text NOT NULL,                  -- as given (1d, 2w; or an integer)
    from_date date,                      -- kind date: partition i is from_date + i * step_days
    step_days integer CHECK (step_days > 0),
    from_int bigint,                     -- kind int: partition i is from_int + i * step_int
    step_int bigint CHECK (step_int > 0),
    total integer NOT NULL CHECK (total > 0 AND total <= 1000000),
    input jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(input) = 'object'),
    concurrency integer NOT NULL DEFAULT 1 CHECK (concurrency > 0 AND concurrency <= 10000),
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'running', 'paused', 'resuming', 'completed', 'failed',
                         'cancelled')),
    next_index integer NOT NULL DEFAULT 0,   -- the checkpoint: partitions below it were started
    done integer NOT NULL DEFAULT 0,         -- completed partitions (as of the last tick)
    failed integer NOT NULL DEFAULT 0,       -- failed, cancelled or timed out
    running integer NOT NULL DEFAULT 0,      -- started, not finished
    ewma_ms double precision,                -- moving average of a partition's duration
    accounted_at timestamptz,                -- partitions finished up to here are in ewma_ms
    rate_ps double precision,                -- moving average of partitions finished a second
    rate_at timestamptz,                     -- the rate's last sample (NULL: not running)
    rate_done integer NOT NULL DEFAULT 0,    -- partitions finished as of rate_at
    error text,                              -- why a tick could not start a partition
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at timestamptz,
    finished_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((kind = 'date') = (from_date IS NOT NULL AND step_days IS NOT NULL)),
    CHECK ((kind = 'int') = (from_int IS NOT NULL AND step_int IS NOT NULL))
);
-- What the runners tick: only active backfills.
CREATE INDEX backfills_active ON cairn.backfills (updated_at)
    WHERE state IN ('pending', 'running', 'paused', 'resuming');

ALTER TABLE cairn.runner_instances
    ADD COLUMN backfill_id uuid,
    ADD COLUMN backfill_index integer;
CREATE UNIQUE INDEX runner_instances_backfill ON cairn.runner_instances
    (backfill_id, backfill_index) WHERE backfill_id IS NOT NULL;

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.check_backfill_transition, trigger backfills_state_transition, cairn.backfill_create,
-- cairn.backfill_value, cairn.backfill_tick, cairn.backfill_lock, cairn.backfill_pause,
-- cairn.backfill_resume, cairn.backfill_cancel, cairn.backfill_retry_failed, cairn.backfill_status
-- (sql/api/70_backfills.sql); cairn.prune_keeps (sql/api/60_retention.sql).










