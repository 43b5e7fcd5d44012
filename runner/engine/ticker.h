/* SPDX-License-Identifier: MIT */
/*
 * The ticker: one thread, with its own database session, that runs the runner's periodic jobs.
 * Each job keeps its own clock, its own backoff after a failure (backoff.h), its own log line
 * and its own counters (cairn_job_runs_total and cairn_job_failures_total, by job): a failing
 * schedule tick backs off the schedules alone, and its warning names it. The jobs
 * (RN_TICKER_JOBS):
 *   sweep       the cancels a notification may have missed (delivered again to the instance's
 *               runner, or done by the sweep's statement when nobody holds it), the deadlines
 *               nobody holds (cairn.expire_overdue), the children's outcomes SQL produced and
 *               the children nobody waits for (cairn.reap_children); every RN_CANCEL_SWEEP_MS,
 *               and at once when the canceller (canceller.h) has (re)issued its LISTEN, since
 *               notifications sent while it was not listening are lost;
 *   schedules   the due schedules fired (one runner takes each; runner/ops/schedule.h), every
 *               RN_SCHEDULE_TICK_MS;
 *   backfills   the backfills ticked (cairn.backfill_tick: one runner ticks each), every
 *               RN_BACKFILL_ACTIVE_TICK_MS while one runs, else every RN_SCHEDULE_TICK_MS, their
 *               progress handed to the backfills hook;
 *   late        the late results the shards queued recorded (results that came after their
 *               instance ended, with a statement of their own since no lease covers them);
 *   reap        the children the shards stopped waiting for cancelled;
 *   signals     the signals' figures read (struct rn_signal_stat) and handed to the signals
 *               hook, for /metrics, every RN_SIGNAL_STATS_MS.
 * A job whose backend operation is missing (the in-memory backend) never runs.
 *
 * Threads and locks: its own thread; rn_ticker_start/stop from the runner's thread,
 * rn_ticker_poke and rn_ticker_stats from any. `t->mtx` (a leaf: nothing is taken under it)
 * guards the jobs' clocks and counters; a job runs with it released. The late queue has a
 * mutex of its own (a leaf): shard threads push, the ticker drains. The hooks run on the
 * ticker's thread and must not block.
 */
#ifndef RUNNER_ENGINE_TICKER_H
#define RUNNER_ENGINE_TICKER_H

#include <pthread.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "runner/store/backend.h"

/* How often a runner sweeps for cancels it may have missed: the bound on a cancel's delay when
 * its notification was lost; the sweep reads a partial index that is almost always empty. */
#define RN_CANCEL_SWEEP_MS 2000
/* How often a runner looks for due schedules (runner/ops/schedule.h): a slot starts at most about
 * this late (plus its jitter). */
#define RN_SCHEDULE_TICK_MS 1000
/* The signals' figures are gauges for a scrape every 15 s or so: read as often, never more. */
#define RN_SIGNAL_STATS_MS 5000
/* While a backfill runs, its partitions are topped up this often (else once a second). */
#define RN_BACKFILL_ACTIVE_TICK_MS 250
/* How often the late results and the children to cancel are taken from the shards. */
#define RN_DRAIN_TICK_MS 250

/* The jobs: id, name (the metric's label), what it does (its log line: "<what> failed"). */
#define RN_TICKER_JOBS(X)                                                                       \
    X(SWEEP, "sweep", "sweeping for missed cancels, overdue instances and children's outcomes") \
    X(SCHEDULES, "schedules", "firing due schedules")                                           \
    X(BACKFILLS, "backfills", "ticking backfills")                                              \
    X(LATE, "late", "recording late action results")                                            \
    X(REAP, "reap", "cancelling children nobody waits for")                                     \
    X(SIGNALS, "signals", "reading the signals' figures")

enum rn_ticker_job {
#define RN_TICKER_JOB_ENUM(id, name, what) RN_JOB_##id,
    RN_TICKER_JOBS(RN_TICKER_JOB_ENUM)
#undef RN_TICKER_JOB_ENUM
        RN_JOB_COUNT
};

/* A job's name (its label in the metrics). */
const char *rn_ticker_job_name(enum rn_ticker_job j);

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

/* Work on its way from the shards to the ticker: late results, and children to cancel. */
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

/* What the ticker hands the runner: callbacks on the ticker's thread, that must not block. */
struct rn_ticker_hooks {
    rn_cancel_fn cancel; /* a cancel the sweep found, maybe of an instance held here */
    /* The backfills' progress after a tick (for /metrics; the array is borrowed). */
    void (*backfills)(void *arg, const struct rn_backfill_stat *st, size_t n);
    /* The signals' figures after a read (for /metrics; borrowed). */
    void (*signals)(void *arg, const struct rn_signal_stat *st);
    void *arg;
};

struct rn_ticker_cfg {
    struct rn_backend *backend; /* used by the ticker's thread only */
    struct rn_late_queue *late; /* drained into backend record_late and cancel_children */
};

struct rn_ticker_stats {
    uint64_t runs[RN_JOB_COUNT], failures[RN_JOB_COUNT];
};

struct rn_ticker;

/* Starts the thread; *out is NULL (and nothing runs) when the backend has none of the jobs. */
CN_MUST_CHECK cn_err rn_ticker_start(const struct rn_ticker_cfg *cfg,
                                     const struct rn_ticker_hooks *hooks, struct rn_ticker **out,
                                     struct cn_errmsg *err);
/* Runs job j as soon as the thread is free (the canceller's "sweep now"). NULL is fine. */
void rn_ticker_poke(struct rn_ticker *t, enum rn_ticker_job j);
void rn_ticker_stats(struct rn_ticker *t, struct rn_ticker_stats *st);
/* Stops and frees (NULL is fine); the late results and reaps queued until then are done first. */
void rn_ticker_stop(struct rn_ticker *t);

#endif
