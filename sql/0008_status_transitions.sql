-- SPDX-License-Identifier: MIT
-- Status transitions checked by the database (docs/operations.md, "Instance states"): whatever
-- writes runner_instances.status (the runner, cairn.cancel, an operator's hand-written SQL),
-- only these changes are allowed:
--
--   queued  -> running                  a runner claimed it
--   running -> queued                   handed back (shutdown, a long sleep) or a lease reclaimed
--   queued | running -> completed | failed | cancelled | timed_out
--                                       it finished (queued -> cancelled: cairn.cancel of an
--                                       instance nobody held; queued -> failed | timed_out:
--                                       reserved for the checks that fail an instance unclaimed)
--   failed | cancelled | timed_out -> queued
--                                       run again (redrive)
--
-- Everything else (completed -> anything, a finished instance back to running, ...) is refused
-- with check_violation (23514) naming both statuses. timed_out (a workflow past its deadline) is
-- allowed here already, for the workflow deadlines that write it.

ALTER TABLE cairn.runner_instances DROP CONSTRAINT runner_instances_status_check;
ALTER TABLE cairn.runner_instances ADD CONSTRAINT runner_instances_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'timed_out'));

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.check_status_transition, trigger runner_instances_status_transition
-- (sql/api/20_instances.sql).

