-- SPDX-License-Identifier: MIT
-- 0020: the idempotency keys' unique index holds keyed instances only.
--
-- As a constraint it had an entry for every instance, most of them with no key: one long run of
-- equal (workflow, NULL, tenant) entries that every enqueue, and every update of an instance
-- that moves it to a new row version (a claim's `running` mark, a hand-back, the outcome),
-- searched and extended. Measured on 40 000 instances, interleaved: an update of `status` took
-- 13.5-17 microseconds a row with it, 11-14.5 without it (bench/HISTORY.md, "The idempotency
-- index without the instances that have no key"). NULLs never conflict in a unique index, so a
-- partial index on the keyed rows enforces exactly what the constraint did.
--
-- A partial unique index cannot be a constraint, so cairn.enqueue names it by its columns and
-- predicate in ON CONFLICT instead of by constraint. Its text is 0017's with that one clause
-- changed (patched here rather than repeated, which keeps 0018's SECURITY DEFINER, search_path,
-- owner and grants as they are).
--
-- Building the index reads runner_instances once; enqueues wait for it.

ALTER TABLE cairn.runner_instances DROP CONSTRAINT runner_instances_idempotency;
CREATE UNIQUE INDEX runner_instances_idempotency ON cairn.runner_instances
    (workflow_name, idempotency_key, tenant_id) WHERE idempotency_key IS NOT NULL;
