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

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.prune_keeps, cairn.prune_batch, cairn.prune_due, cairn.retention_set
-- (sql/api/60_retention.sql).



