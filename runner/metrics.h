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
#include "runner/pool.h"
#include "runner/runner.h"

/* Appends every metric to out; false when out cannot grow. */
bool rn_metrics_render(const struct rn_runner_stats *st, const struct rn_pool_stats *ps,
                       struct cn_buf *out);

#endif
