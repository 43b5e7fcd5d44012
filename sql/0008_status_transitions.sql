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

CREATE FUNCTION cairn.check_status_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status = 'queued' AND NEW.status = 'running')
       OR (OLD.status = 'running' AND NEW.status = 'queued')
       OR (OLD.status IN ('queued', 'running')
           AND NEW.status IN ('completed', 'failed', 'cancelled', 'timed_out'))
       OR (OLD.status IN ('failed', 'cancelled', 'timed_out') AND NEW.status = 'queued') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'instance %: status % -> % is not allowed', OLD.instance_id, OLD.status,
        NEW.status
        USING ERRCODE = 'check_violation',
              HINT = 'allowed: queued -> running -> queued; queued or running -> completed, '
                     'failed, cancelled or timed_out; failed, cancelled or timed_out -> queued';
END
$$;

-- Only when the status changes: the runner's other updates (snapshots, leases) skip it.
CREATE TRIGGER runner_instances_status_transition
    BEFORE UPDATE OF status ON cairn.runner_instances
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION cairn.check_status_transition();
