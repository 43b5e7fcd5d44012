/* SPDX-License-Identifier: MIT */
/*
 * The canceller: one thread, with its own database session, that hears of cancels asked for
 * instances a live runner holds (cairn.cancel marks the instance and sends NOTIFY cairn_cancel,
 * sql/0007_cancel.sql) and hands each to the runner, which routes it to the shard that holds the
 * instance (or drops it: most notifications are for other runners' instances). A notification
 * is a hint that can be missed (it is lost while the session is down), so the thread also sweeps
 * for cancels still waiting, after each (re)connection and every sweep_interval_ms: the held ones
 * are delivered again (a shard ignores a second cancel), and those nobody holds any more (a
 * sleep handed back, a lease expired) are cancelled by the sweep's own statement. A claim of an
 * instance already marked carries the mark too (struct rn_claimed), so no path misses one.
 *
 * Threads: its own thread; rn_canceller_start/stop from the runner's. The callback runs on the
 * canceller thread and must not block. The stop flag is atomic: the thread checks it at least
 * every RN_CANCELLER_WAIT_MS.
 */
#ifndef RUNNER_CANCELLER_H
#define RUNNER_CANCELLER_H

#include <stdint.h>

#include "ir/base/err.h"
#include "runner/backend.h"

/* How often a runner sweeps for cancels it may have missed (canceller.h): the bound on a cancel's
 * delay when its notification was lost; the sweep reads a partial index that is almost always
 * empty. */
#define RN_CANCEL_SWEEP_MS 2000

/* Longest wait for a notification before the stop flag and the sweep clock are looked at. */
#define RN_CANCELLER_WAIT_MS 250

struct rn_canceller_cfg {
    struct rn_backend *backend; /* used by the canceller thread only; needs wait/sweep_cancels */
    uint32_t sweep_interval_ms;
};

struct rn_canceller;

CN_MUST_CHECK cn_err rn_canceller_start(const struct rn_canceller_cfg *cfg, rn_cancel_fn fn,
                                        void *arg, struct rn_canceller **out,
                                        struct cn_errmsg *err);
/* Stops and frees (NULL is fine). */
void rn_canceller_stop(struct rn_canceller *c);

#endif
