-- SPDX-License-Identifier: MIT
-- 0009: workflow deadlines and redrive (docs/operations.md, "Workflow timeouts" and "Retrying
-- an instance").
--
-- Deadlines. A workflow's `fn main(...) [timeout: D]` is stored with its version
-- (workflow_versions.timeout_ms, written by cairnctl register); cairn.enqueue's new `timeout`
-- argument overrides it per instance. The instance keeps its timeout (timeout_ms) and its
-- deadline (deadline_at = when it is due + the timeout). The runner that holds an instance arms
-- a timer at deadline_at and ends it `timed_out` (error WorkflowTimeout), cancelling its
-- running attempts. An instance nobody holds when its deadline passes (queued, a long sleep
-- handed back, a lease lost) is timed out by cairn.expire_overdue(), which every runner calls
-- every few seconds.
--
-- Redrive. cairn.retry(id) queues a failed, cancelled or timed_out instance again. It resumes
-- from its last durable state: the runner keeps the last snapshot of a running instance when it
-- fails (it does not write the final one), and the `redrive` flag tells the runner that claims
-- it to give every action that had not succeeded a new execution id and a fresh attempt budget,
-- while results already recorded are used again (completed actions do not run again). The flag
-- is cleared with the first snapshot written after that. The earlier outcome is kept in
-- cairn.instance_history, one row per redrive.

ALTER TABLE cairn.workflow_versions ADD COLUMN timeout_ms bigint
    CHECK (timeout_ms > 0 AND timeout_ms <= 31622400000);

ALTER TABLE cairn.runner_instances
    ADD COLUMN timeout_ms bigint CHECK (timeout_ms > 0 AND timeout_ms <= 31622400000),
    ADD COLUMN deadline_at timestamptz,
    ADD COLUMN redrive boolean NOT NULL DEFAULT false;

-- What cairn.expire_overdue() walks: only unfinished instances with a deadline.
CREATE INDEX runner_instances_deadline ON cairn.runner_instances (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running');

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.max_timeout_ms, cairn.enqueue, cairn.expire_overdue, cairn.retry, cairn.cancel
-- (sql/api/20_instances.sql).

-- Earlier outcomes of redriven instances, newest last.
CREATE TABLE cairn.instance_history (
    id bigserial PRIMARY KEY,
    instance_id uuid NOT NULL REFERENCES cairn.runner_instances (instance_id) ON DELETE CASCADE,
    status text NOT NULL,          -- how that run ended: failed, cancelled or timed_out
    error jsonb,
    started_at timestamptz,
    completed_at timestamptz,
    redriven_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    reason text                    -- cairn.retry's reason argument
);
CREATE INDEX instance_history_instance ON cairn.instance_history (instance_id, id);

-- The 0006 function with one more argument, `timeout` (NULL: the version's own). The old
-- signature is dropped: beside the new one every call leaving out the last arguments would be
-- ambiguous.
DROP FUNCTION IF EXISTS cairn.enqueue(text, jsonb, text, integer, timestamptz, text);




