-- SPDX-License-Identifier: MIT
-- Cancelling instances (docs/operations.md, "Cancelling instances").
--
-- A cancel of an instance nobody holds (queued, a sleep handed back, a lease expired) is done
-- here at once: status cancelled, the queue row gone, so no runner can claim it again and the
-- fenced writes of a runner that lost its lease find no row. An instance a live runner holds is
-- marked (cancel_requested_at, cancel_reason) and its runner told with NOTIFY cairn_cancel
-- (payload: the instance id, a space, the reason); the runner cancels its running attempts and
-- writes `cancelled` through its fenced write path. A runner that missed the notification sees
-- the mark when it sweeps (after each reconnect and every few seconds) or when it claims the
-- instance.

ALTER TABLE cairn.runner_instances
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN cancel_reason text;

-- What the runners sweep: few rows, only those waiting for their runner to act.
CREATE INDEX runner_instances_cancel_requested ON cairn.runner_instances (instance_id)
    WHERE cancel_requested_at IS NOT NULL AND status IN ('queued', 'running');

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.cancel (sql/api/20_instances.sql).
