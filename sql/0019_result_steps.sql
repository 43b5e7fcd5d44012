-- SPDX-License-Identifier: MIT
-- 0019: a step recorded by its result alone. A step that reads no clock and consumes one
-- result of its own action (or several, each its own step) is a function of the state before it
-- and that result, so its write records the result with the step's number and no snapshot; a
-- runner resuming the instance replays those steps, in order, from the last snapshot
-- (docs/semantics.md, "Durability and replay"). runner_instances.state_step is the last step
-- the stored snapshot holds: the results recorded with a greater step are replayed on it. One
-- row version less per such step (the snapshot's update) and two fifths of the WAL in the
-- sequence benchmark (bench/HISTORY.md, "Steps recorded by their results").
ALTER TABLE cairn.runner_actions_done ADD COLUMN step integer CHECK (step > 0);
ALTER TABLE cairn.runner_instances ADD COLUMN state_step integer NOT NULL DEFAULT 0
    CHECK (state_step >= 0);
