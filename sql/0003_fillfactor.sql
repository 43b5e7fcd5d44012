-- SPDX-License-Identifier: MIT
-- 0003: leave room in the pages of the two tables the runner updates all the time, so that an
-- update touching no indexed column (a snapshot written to runner_instances.state after every
-- step; a lease renewed) can stay on its page as a HOT update instead of adding an entry to
-- every index. With the default fillfactor of 100 only 17% of the snapshot updates were HOT in
-- the sequence benchmark; with 70, 75%, and the benchmark went from 18 000 to 22 000 actions/s
-- with a third less WAL (bench/RESULTS.md as of commit 84a365a, "The performance push", step 3).
-- Applies to pages written from now on.
ALTER TABLE cairn.runner_instances SET (fillfactor = 70);
ALTER TABLE cairn.queued_instances SET (fillfactor = 70);
