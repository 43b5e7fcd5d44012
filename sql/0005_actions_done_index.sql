-- SPDX-License-Identifier: MIT
-- 0005: one index on runner_actions_done instead of two. Hydration reads an instance's results
-- (instance_id) and the persister's idempotency check looks for (execution_id, attempt); with
-- the instance id in front, one index serves both, and every recorded result costs one random
-- B-tree insertion less (B-tree work was the largest share of PostgreSQL's time in the sequence
-- benchmark; bench/HISTORY.md, "What is left, and why"). Rebuilding an index takes a while on a
-- large table, and writes to it wait meanwhile: apply it when the runners are stopped.
CREATE INDEX runner_actions_done_key ON cairn.runner_actions_done (instance_id, execution_id, attempt);
DROP INDEX cairn.runner_actions_done_instance;
DROP INDEX cairn.runner_actions_done_execution;
