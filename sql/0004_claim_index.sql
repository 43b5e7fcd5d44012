-- SPDX-License-Identifier: MIT
-- 0004: indexes that cannot mislead the planner.
--
-- The claim reads an index of the rows nobody holds. The index of 0002 covered every queue row,
-- so each claim walked past every instance already claimed and still running (and the dead
-- versions the claims left behind) before it found a free one: O(queue) per claim.
--
-- The lease index of 0002 was partial on `lock_uuid IS NOT NULL`, a predicate implied by every
-- write's fence (`lock_uuid = $token`). That made a full scan of it a candidate plan for every
-- write; when autovacuum had just analyzed an almost empty queue, the planner took it, and each
-- write scanned every held lease (once per row of the batch): a drain of 20 000 instances fell
-- from 12 000 to 650 instances/s for half a minute. The new one is partial on the expiry, which
-- only the claim and the reclaimer (`lock_expires_at < now()`) imply.
CREATE INDEX queued_instances_ready ON cairn.queued_instances (priority DESC, scheduled_at)
    WHERE lock_uuid IS NULL;
DROP INDEX cairn.queued_instances_claim;
CREATE INDEX queued_instances_expiry ON cairn.queued_instances (lock_expires_at)
    WHERE lock_expires_at IS NOT NULL;
DROP INDEX cairn.queued_instances_leases;
