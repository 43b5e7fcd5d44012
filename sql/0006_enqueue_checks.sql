-- SPDX-License-Identifier: MIT
-- 0006: cairn.enqueue checks its arguments against the engine's limits, which cairn.limits()
-- states once (docs/operations.md "Limits" explains each). Before this, an input the runner
-- cannot load (too deep, a number outside int64 or float64) was accepted and failed at run time
-- with a misleading error, a key beyond the B-tree row size failed with the raw index error, and
-- an instance scheduled at 'infinity' never ran.

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.limits, cairn.enqueue (sql/api/20_instances.sql).

