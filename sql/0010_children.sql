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

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.start_children, cairn.wake_parents, cairn.reap_children (sql/api/30_children.sql);
-- cairn.cancel, cairn.expire_overdue, cairn.retry (sql/api/20_instances.sql).





