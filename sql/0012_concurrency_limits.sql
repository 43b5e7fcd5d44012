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

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.limit_lock_key, cairn.queue_limit, trigger queued_instances_limit, cairn.limit_set,
-- cairn.claim_limited, cairn.limit_status, cairn.limit_delete (sql/api/50_limits.sql);
-- cairn.enqueue (sql/api/20_instances.sql).





-- cairn.enqueue gains a last argument, concurrency_key (the old seven-argument function is
-- dropped: beside the new one, calls leaving out the trailing arguments would be ambiguous),
-- and finds an idempotency key among its own workflow's instances only.
DROP FUNCTION IF EXISTS cairn.enqueue(text, jsonb, text, integer, timestamptz, text, interval);

