-- SPDX-License-Identifier: MIT
-- 0025: the signals not yet taken, by when they were sent: the runners read how many there are
-- and the age of the oldest for /metrics every few seconds (runner/store/pg/ops.c,
-- pg_signal_stats), in time that grows with that backlog, never with the history kept.
CREATE INDEX signals_buffered ON cairn.signals (sent_at) WHERE consumed_at IS NULL;
