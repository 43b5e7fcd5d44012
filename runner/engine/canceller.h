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
 * The same sweep times out the instances nobody holds past their deadline
 * (cairn.expire_overdue), and the thread records the late results the shards hand it (struct
 * rn_late_queue): results that came after their instance ended, written with a statement of
 * their own since no lease covers them any more.
 *
 * Child workflows: the same session hears NOTIFY cairn_child (a child recorded its outcome as
 * the result of its parent's call); for a parent this runner holds, the thread reads that result
 * and hands it to the runner, which routes it to the parent's shard. A notification that is
 * missed leaves the parent waiting until it is handed back (the shard hands back a parent that
 * only waits for children, after a quiet spell) and claimed again: the claim reads every
 * recorded result. The sweep also hands over the outcomes of children that SQL finished
 * (parent_pending) and cancels children nobody waits for (cairn.reap_children); the shards
 * queue the children they stop waiting for (struct rn_reap), which are cancelled here.
 *
 * Schedules and backfills: every RN_SCHEDULE_TICK_MS the thread fires the schedules that are due
 * (one runner takes each; runner/ops/schedule.h), and ticks the backfills (cairn.backfill_tick,
 * sql/0015: one runner ticks each) every RN_BACKFILL_ACTIVE_TICK_MS while one runs, handing their
 * progress to the backfills hook.
 *
 * Threads: its own thread; rn_canceller_start/stop from the runner's. The callback runs on the
 * canceller thread and must not block. The stop flag is atomic: the thread checks it at least
 * every RN_CANCELLER_WAIT_MS. The late queue has a mutex of its own: shard threads push, the
 * canceller thread drains.
 */
#ifndef RUNNER_CANCELLER_H
#define RUNNER_CANCELLER_H

#include <pthread.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "runner/store/backend.h"

/* How often a runner sweeps for cancels it may have missed (canceller.h): the bound on a cancel's
 * delay when its notification was lost; the sweep reads a partial index that is almost always
 * empty. */
#define RN_CANCEL_SWEEP_MS 2000

/* How often a runner looks for due schedules (runner/ops/schedule.h): a slot starts at most about
 * this late (plus its jitter). */
#define RN_SCHEDULE_TICK_MS 1000
/* While a backfill runs, its partitions are topped up this often (else once a second). */
#define RN_BACKFILL_ACTIVE_TICK_MS 250

/* Longest wait for a notification before the stop flag and the sweep clock are looked at. */
#define RN_CANCELLER_WAIT_MS 250

/* Late results waiting to be recorded, at most this many (more are dropped with a warning: a
 * database that cannot keep up must not grow the runner's memory). */
#define RN_LATE_QUEUE_MAX 100000

/* Children a parent's write stopped waiting for (fail_fast, the parent's end): to cancel. */
struct rn_reap {
    struct rn_iid parent;
    struct rn_xid *exec_ids; /* the calls whose children go (malloc'd); n == 0: all of them */
    size_t n;
    unsigned tries; /* failed attempts so far (RN_REAP_TRIES at most) */
};

/* A cancel of children that fails (the database away, a deadlock with a claim) is tried again
 * in the next rounds, this many times in all; past that the sweep (cairn.reap_children) covers
 * the children of a parent that ended, and those a running parent dropped run to their end. */
#define RN_REAP_TRIES 5

/* Work on its way from the shards to the canceller thread: late results, and children to
 * cancel. */
struct rn_late_queue {
    pthread_mutex_t mtx;
    struct rn_late_result *items; /* values owned */
    size_t len, cap;
    uint64_t dropped;
    struct {
        struct rn_reap *items;
        size_t len, cap;
    } reaps;
};

void rn_late_queue_init(struct rn_late_queue *q);
/* Frees what is still queued. */
void rn_late_queue_fini(struct rn_late_queue *q);
/* Queues n late results (values retained). Never blocks for long; from any thread. */
void rn_late_queue_push(struct rn_late_queue *q, const struct rn_late_result *r, size_t n);
/* Queues the cancel of parent's children of the calls exec_ids[0..n) (copied), or of all of its
 * children (n == 0); at most RN_LATE_QUEUE_MAX wait (more are dropped with the count in
 * `dropped`). From any thread. */
void rn_late_queue_reap(struct rn_late_queue *q, struct rn_iid parent,
                        const struct rn_xid *exec_ids, size_t n);

/* What the canceller hands the runner: callbacks on the canceller thread, that must not
 * block. */
struct rn_canceller_hooks {
    rn_cancel_fn cancel;                         /* a cancel, maybe of an instance held here */
    bool (*holds)(void *arg, struct rn_iid iid); /* whether this runner holds the instance now */
    /* The outcome of a child of parent, held here: the result of its call d->exec_id,
     * d->attempt (value borrowed). */
    void (*child_result)(void *arg, struct rn_iid parent, const struct rn_done *d);
    /* The backfills' progress after a tick (for /metrics; the array is borrowed). */
    void (*backfills)(void *arg, const struct rn_backfill_stat *st, size_t n);
    void *arg;
};

struct rn_canceller_cfg {
    struct rn_backend *backend; /* used by the canceller thread only; needs wait/sweep_cancels */
    uint32_t sweep_interval_ms;
    struct rn_late_queue *late; /* drained into backend record_late; NULL: none */
};

struct rn_canceller;

CN_MUST_CHECK cn_err rn_canceller_start(const struct rn_canceller_cfg *cfg,
                                        const struct rn_canceller_hooks *hooks,
                                        struct rn_canceller **out, struct cn_errmsg *err);
/* Stops and frees (NULL is fine). */
void rn_canceller_stop(struct rn_canceller *c);

#endif
