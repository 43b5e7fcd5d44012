-- SPDX-License-Identifier: MIT
-- 0021: an action's result is keyed by (instance, execution, attempt), and the key is unique.
--
-- The result rows had two indexes, the `id` primary key and the (instance, execution, attempt)
-- index that hydration reads, and every insert probed the second first (NOT EXISTS) so that a
-- result written again was not recorded twice. The key's index is now the primary key: one index
-- per row instead of two, and the uniqueness check rides on the index insertion's own descent
-- instead of a probe of its own. Runners insert plainly and, in the rare batch that writes a
-- result already recorded (a batch resent after a lost commit acknowledgement, a result reported
-- again after a re-claim), get a unique violation, roll back and write the batch again with the
-- probe. Measured on 600 000 results in batches of 10 000, 1 000 per instance, interleaved
-- (bench/results-insert): 2.9-3.5 s with the key, 3.9-4.8 s with the two indexes and the probe,
-- 3.8-4.9 s with the key and ON CONFLICT DO NOTHING instead (its speculative insertion costs
-- what the probe saved) (bench/RESULTS.md, "The results' insert alone").
--
-- `id` stays: it is the order results were recorded in (`cairnctl inspect`).
--
-- Every insert was guarded by that probe under the instance's lease, so no key should be
-- recorded twice. Should one be, the rows other than the last recorded (the one hydration read)
-- are removed, and the count is reported in a WARNING (which the migration tools show).
-- Building the key reads runner_actions_done once; runners' writes wait for it.

DO $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM cairn.runner_actions_done d USING cairn.runner_actions_done e
     WHERE e.instance_id = d.instance_id AND e.execution_id = d.execution_id
       AND e.attempt = d.attempt AND e.id > d.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        RAISE WARNING '0021: % results recorded twice for one attempt were removed (the last '
                     'recorded of each kept)', n;
    END IF;
END
$$;

ALTER TABLE cairn.runner_actions_done DROP CONSTRAINT runner_actions_done_pkey;
ALTER TABLE cairn.runner_actions_done
    ADD CONSTRAINT runner_actions_done_pkey PRIMARY KEY (instance_id, execution_id, attempt);
DROP INDEX cairn.runner_actions_done_key;
