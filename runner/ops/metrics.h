/* SPDX-License-Identifier: MIT */
/*
 * The /metrics body: the runner's and the pool's statistics in Prometheus text format (one
 * table of counters and gauges, and the latency summaries). Pure formatting; no threads.
 * docs/operations.md lists every metric for operators.
 */
#ifndef RUNNER_METRICS_H
#define RUNNER_METRICS_H

#include <stdbool.h>

#include "ir/base/buf.h"
#include "runner/engine/runner.h"
#include "runner/pool/pool.h"
#include "runner/store/backend.h"

/* Appends every metric to out; false when out cannot grow. */
/* Appends the backfills' partitions by state (cairn_backfill_partitions{backfill, workflow,
 * state}); nothing when n is 0. False when out of memory. */
bool rn_metrics_render_backfills(const struct rn_backfill_stat *bf, size_t n, struct cn_buf *b);
/* Appends the signals' figures (cairn_signals_sent_total, cairn_events_published_total,
 * cairn_signals_buffered, cairn_signal_oldest_buffered_seconds, cairn_waits{kind}). False when
 * out of memory. */
bool rn_metrics_render_signals(const struct rn_signal_stat *s, struct cn_buf *b);
bool rn_metrics_render(const struct rn_runner_stats *st, const struct rn_pool_stats *ps,
                       struct cn_buf *out);

#endif
