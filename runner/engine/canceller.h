/* SPDX-License-Identifier: MIT */
/*
 * The canceller: one thread, with its own database session, that listens. It hears of cancels
 * asked for instances a live runner holds (cairn.cancel marks the instance and sends NOTIFY
 * cairn_cancel, sql/api/20_instances.sql) and hands each to the runner, which routes it to the
 * shard that holds the instance (or drops it: most notifications are for other runners'
 * instances); and of child workflows' outcomes (NOTIFY cairn_child: a child recorded its
 * outcome as the result of its parent's call): for a parent this runner holds, it reads that
 * result and hands it to the runner, which routes it to the parent's shard.
 *
 * A notification is a hint that can be missed (it is lost while the session is down), so each
 * time the thread has (re)issued its LISTEN it pokes the ticker's sweep (ticker.h), which finds
 * what was sent before: cancels still waiting are delivered again (a shard ignores a second
 * cancel) or done by the sweep itself, children's outcomes handed over. A claim of an instance
 * already marked carries the mark too (struct rn_claimed), and a parent that only waits for
 * children is handed back after a quiet spell and claimed again, reading every recorded result:
 * no path misses one. Periodic work (sweeps, schedules, backfills, late results) is the
 * ticker's, so that a slow or failing job never delays a cancel.
 *
 * Threads: its own thread; rn_canceller_start/stop from the runner's, rn_canceller_stats from
 * any. The hooks run on the canceller thread and must not block. A failed wait backs off
 * (backoff.h) on a stop flag (stop.h), so a stop is never delayed; otherwise the thread looks at
 * the flag at least every RN_CANCELLER_WAIT_MS.
 */
#ifndef RUNNER_CANCELLER_H
#define RUNNER_CANCELLER_H

#include <stdint.h>

#include "ir/base/err.h"
#include "runner/engine/ticker.h"
#include "runner/store/backend.h"

/* Longest wait for a notification before the stop flag is looked at. */
#define RN_CANCELLER_WAIT_MS 250

/* What the canceller hands the runner: callbacks on the canceller thread, that must not
 * block. */
struct rn_canceller_hooks {
    rn_cancel_fn cancel;                         /* a cancel, maybe of an instance held here */
    bool (*holds)(void *arg, struct rn_iid iid); /* whether this runner holds the instance now */
    /* The outcome of a child of parent, held here: the result of its call d->exec_id,
     * d->attempt (value borrowed). */
    void (*child_result)(void *arg, struct rn_iid parent, const struct rn_done *d);
    void *arg;
};

struct rn_canceller_cfg {
    struct rn_backend *backend; /* used by the canceller thread only; needs wait_notices */
    struct rn_ticker *ticker;   /* poked to sweep once listening; NULL: none */
};

struct rn_canceller;

/* Starts the thread; *out is NULL (and nothing listens) when the backend has no notices. */
CN_MUST_CHECK cn_err rn_canceller_start(const struct rn_canceller_cfg *cfg,
                                        const struct rn_canceller_hooks *hooks,
                                        struct rn_canceller **out, struct cn_errmsg *err);
/* Waits for notices so far, and how many of them failed (NULL is fine: 0 and 0). */
void rn_canceller_stats(struct rn_canceller *c, uint64_t *runs, uint64_t *failures);
/* Stops and frees (NULL is fine). */
void rn_canceller_stop(struct rn_canceller *c);

#endif
