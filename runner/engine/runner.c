/* SPDX-License-Identifier: MIT */
/*
 * The runner engine: configuration, start, stop and statistics. The work is done by:
 *   core/shard.c        the shard core (instances, events, the commit barrier, timers), no threads;
 *   engine/shardloop.c  one thread per shard: inbox, wait, carrying out the core's output;
 *   engine/persister.c  the persist threads (batched fenced writes, one connection each);
 *   engine/claimer.c    the claim thread and its DAG cache (dagcache.c);
 *   engine/keeper.c     the lease registry, the heartbeat and the reclaimer;
 *   engine/canceller.c  the listener for cancels and children's outcomes;
 *   engine/ticker.c     the periodic jobs (sweeps, schedules, backfills, late results, reaps);
 *   engine/pruner.c     retention;
 *   ops/http.c          /metrics (ops/metrics.c), /healthz, /readyz, the status page;
 *   ops/status.c        this runner's row in cairn.runners, the status page's data (its own
 *                       threads);
 *   pool/               the worker pool.
 * This file routes events between them: pool results, persister ACKs, claims and lost leases
 * all go to the shard that owns the instance (chosen by a hash of its id).
 *
 * LOCK ORDER. Every mutex of the runner process, where it lives, and what may be taken while
 * it is held. A leaf is never held while taking another. None is held across a backend or
 * network call, a callback, a log line or a condition wait other than its own; routing an
 * event (rn_shardloop_post) therefore happens with no lock held: the pool calls back without
 * its lock, the persisters acknowledge after releasing theirs, the keeper reports lost leases
 * outside its registry lock.
 *   mutex                                   file                  taken under / takes
 *   the pool's p->mtx                       pool/pool_int.h       takes the claimer's and the
 *                                                                 transport's (below)
 *   the worker transport's s->mtx           pool/sprep.c          under the pool's only; takes
 *                                                                 the descriptor budget's
 *   the descriptor budget's                 pool/fdbudget.h       leaf (its waiter only
 *                                                                 schedules an nng aio)
 *   the claimer's c->mtx                    engine/claimer.c      leaf; under the pool's
 *                                                                 (rn_pool_room wakes it)
 *   the pools left behind                   pool/pool.c           leaf
 *   a shard inbox l->mtx                    engine/shardloop.c    leaf
 *   the busy gauge                          engine/shardloop.h    leaf
 *   the persister queue p->mtx              engine/persister.c    leaf
 *   the keeper's registry k->reg, its wake  engine/keeper.c       leaves (never nested)
 *   the ticker's stop flag (its clocks)     engine/ticker.c       leaf
 *   the late queue q->mtx                   engine/ticker.h       leaf
 *   the canceller's, the pruner's stop flag engine/stop.h         leaves
 *   the backfills' progress                 engine/runner.c       leaf
 *   the HTTP listener's h->mtx              ops/http.c            leaf (routes run unlocked)
 *   the status page's s->mtx                ops/status.c          leaf (answers and pool
 *                                                                 snapshots taken unlocked)
 *   the in-memory backend's b->mtx          store/backend_mem.c   leaf
 * So the only nestings are pool -> claimer and pool -> transport -> budget, each in that order
 * alone. The ThreadSanitizer program (tests/race) runs the whole engine and fails on any
 * lock-order inversion.
 *
 * NO HALF-ALIVE PROCESS: no engine thread returns before rn_runner_stop asks it to. Storage and
 * network errors are retried with backoff (backoff.h) and logged; running out of memory
 * (ir/base/xalloc.h) or a failed pthread call (ir/base/sync.h) aborts the whole process with a
 * log line, so a supervisor sees it exit and restarts it, and another runner takes its leases
 * when they expire.
 */
#include "runner/engine/runner.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/engine/canceller.h"
#include "runner/engine/claimer.h"
#include "runner/engine/defaults.h"
#include "runner/engine/keeper.h"
#include "runner/engine/persister.h"
#include "runner/engine/pruner.h"
#include "runner/engine/shardloop.h"
#include "runner/ops/http.h"
#include "runner/ops/metrics.h"
#include "runner/ops/status.h"
#include "runner/pool/pool.h"
#include "runner/store/backend.h"

struct rn_runner {
    struct rn_runner_cfg cfg;
    uint32_t npersisters;
    struct rn_backend *claim_b, *lease_b, *cancel_b, *persist_b[RN_PERSISTERS_MAX];
    struct rn_pool *pool;
    struct rn_persister *persister;
    struct rn_keeper *keeper;
    struct rn_claimer *claimer;
    struct rn_canceller *canceller; /* NULL with a backend without cancels */
    struct rn_ticker *ticker;       /* NULL with a backend without periodic jobs */
    struct rn_pruner *pruner;       /* NULL with a backend that cannot prune */
    struct {
        pthread_mutex_t mtx;            /* the ticker's thread writes, HTTP threads read */
        struct rn_backfill_stat *items; /* the backfills' */
        size_t n;
        struct rn_signal_stat signals; /* the last read of the signals' figures */
        bool have_signals;
    } figures; /* the ticker's, for /metrics: the backfills' last progress, the signals' */
    struct rn_backend *prune_b;
    struct rn_backend *tick_b;
    struct rn_late_queue late; /* shards -> ticker: results after an outcome, reaps */
    struct rn_shardloop **loops;
    uint32_t nloops;
    struct rn_busy busy;
    struct rn_http *http;
    struct rn_fdbudget fds;   /* the listeners' connections (fdbudget.h) */
    struct rn_status *status; /* NULL with a backend of its own (no database to show) */
    _Atomic size_t active;
    atomic_bool ready; /* started and not stopping */
    /* Every part /metrics reads exists (set once rn_runner_start is done): the HTTP server
     * starts before the shards and the persister, and a scrape may come at once. */
    atomic_bool started;
    _Atomic int64_t leases_confirmed_ms; /* the lease gate (pool.h): written by the keeper */
    _Atomic int64_t orphans_from_ms;     /* keeper.h: written by the keeper, read by the claimer */
};

/* ---- routing ------------------------------------------------------------------------------ */

static uint32_t
shard_of(const struct rn_runner *r, struct rn_iid iid)
{
    uint32_t h = 2166136261u; /* FNV-1a: ids are random, any mix spreads them */
    int i;

    for (i = 0; i < (int) sizeof(iid.b); i++) {
        h = (h ^ iid.b[i]) * 16777619u;
    }
    return h % r->nloops;
}

/* The pool's result callback (no pool lock held; must not block). */
static void
on_pool_result(void *arg, const struct rn_pool_result *res)
{
    struct rn_runner *r = arg;
    struct rn_sev *e = rn_sev_new(RN_SEV_RESULT, res->instance_id);

    e->value = ir_val_retain(res->value);
    e->exec_id = res->exec_id;
    e->attempt = res->attempt;
    e->ok = res->ok;
    rn_shardloop_post(r->loops[shard_of(r, res->instance_id)], e);
}

static void
on_persist_ack(void *arg, const struct rn_wreq *q, bool lost, bool failed)
{
    struct rn_runner *r = arg;
    struct rn_sev *e = rn_sev_new(RN_SEV_ACK, q->w.instance_id);

    e->lock = q->w.lock;
    e->lost = lost;
    e->write_failed = failed;
    if (q->nchildren > 0) {
        size_t k;
        e->children = cn_xcalloc(q->nchildren, sizeof(*e->children));
        for (k = 0; k < q->nchildren; k++) {
            e->children[k] = q->w.children[k];
            e->children[k].input = ir_null(); /* the write keeps it */
        }
        e->nchildren = q->nchildren;
    }
    if (q->nsends > 0 && !lost && !failed) {
        size_t k;
        e->sends = cn_xcalloc(q->nsends, sizeof(*e->sends));
        for (k = 0; k < q->nsends; k++) {
            e->sends[k] = q->w.sends[k];
            e->sends[k].payload = ir_null(); /* the write keeps it */
        }
        e->nsends = q->nsends;
    }
    if (q->njoins > 0 && !lost && !failed) {
        size_t k;
        e->joins = cn_xcalloc(q->njoins, sizeof(*e->joins));
        for (k = 0; k < q->njoins; k++) {
            e->joins[k] = q->w.joins[k];
            e->joins[k].value = ir_val_retain(q->w.joins[k].value);
        }
        e->njoins = q->njoins;
    }
    if (q->nwaits > 0 && !lost && !failed) {
        size_t k;
        e->waits = cn_xcalloc(q->nwaits, sizeof(*e->waits));
        for (k = 0; k < q->nwaits; k++) {
            if (q->w.waits[k].status != RN_WAIT_ANSWERED) {
                continue;
            }
            e->waits[e->nwaits] = q->w.waits[k];
            e->waits[e->nwaits].key = NULL;
            e->waits[e->nwaits].timeout_value = ir_null();
            e->waits[e->nwaits].value = ir_val_retain(q->w.waits[k].value);
            e->nwaits++;
        }
    }
    rn_shardloop_post(r->loops[q->shard], e);
}

static void
on_lease_lost(void *arg, uint32_t shard, struct rn_sev *e)
{
    struct rn_runner *r = arg;

    /* Withdrawn here, on the keeper thread, before the keeper confirms its renewal and the
     * pool's lease gate opens again: no attempt under a lost lease can be dispatched in the
     * moment before its shard reads this event (the shard withdraws too; the second finds
     * nothing). */
    (void) rn_pool_withdraw(r->pool, e->iid, e->lock);
    rn_shardloop_post(r->loops[shard], e);
}

/* The lease gate reopened after a pause or an outage longer than a lease: dispatch what
 * waited. */
static void
on_leases_reopened(void *arg)
{
    struct rn_runner *r = arg;

    cn_log(CN_LOG_WARN, "leases confirmed again after more than a lease period: dispatching "
                        "resumes");
    rn_pool_kick(r->pool);
    rn_persister_retry_now(r->persister); /* writes waiting out a backoff pause go now */
}

static void
on_claimed(void *arg, struct rn_sev *e)
{
    struct rn_runner *r = arg;
    uint32_t shard = shard_of(r, e->iid);
    struct rn_lease_op op;

    /* Renewed from the claim on, not from when its shard gets to it: a shard busy with a long
     * step (up to CAIRN_MAX_INLINE_STEPS) must not let the leases queued behind it expire. The
     * lease goes to the keeper before the event goes to the shard, so the shard's own "let go"
     * for it always comes after, and removes it. */
    op.take = true;
    op.iid = e->iid;
    op.lock = e->claimed.lock;
    rn_keeper_apply(r->keeper, shard, &op, 1);
    rn_shardloop_post(r->loops[shard], e);
}

/* The canceller's callback (canceller thread; must not block): to the shard that would hold
 * the instance, which drops it when it does not. */
static void
on_cancel(void *arg, struct rn_iid iid, const char *reason, bool force)
{
    struct rn_runner *r = arg;
    struct rn_sev *e = rn_sev_new(RN_SEV_CANCEL, iid);

    e->force = force;
    if (reason == NULL || ir_str_from_cstr(reason, &e->value) != CN_OK) {
        e->value = ir_null(); /* not text: the executor says "cancelled" */
    }
    rn_shardloop_post(r->loops[shard_of(r, iid)], e);
}

/* The canceller asks before it reads a child's outcome for a parent (canceller thread). */
static bool
holds(void *arg, struct rn_iid iid)
{
    struct rn_runner *r = arg;

    return rn_keeper_holds(r->keeper, iid);
}

/* A child's outcome for a parent held here (canceller thread): to the parent's shard. */
static void
on_child_result(void *arg, struct rn_iid parent, const struct rn_done *d)
{
    struct rn_runner *r = arg;
    struct rn_sev *e = rn_sev_new(RN_SEV_RESULT, parent);

    e->exec_id = d->exec_id;
    e->attempt = d->attempt;
    e->ok = d->ok;
    e->value = ir_val_retain(d->value);
    e->child = true;
    rn_shardloop_post(r->loops[shard_of(r, parent)], e);
}

/* ---- statistics and HTTP ------------------------------------------------------------------ */

/* The background jobs' counters, by name (rn_runner_stats). */
static void
job_stats(struct rn_runner *r, const struct rn_pruner_stats *ps, struct rn_runner_stats *st)
{
    struct rn_ticker_stats ts;
    size_t j;

    rn_ticker_stats(r->ticker, &ts);
    st->njobs = 0;
    for (j = 0; j < RN_JOB_COUNT; j++) {
        st->jobs[st->njobs++] = (struct rn_job_stat){rn_ticker_job_name((enum rn_ticker_job) j),
                                                     ts.runs[j], ts.failures[j]};
    }
    st->jobs[st->njobs].name = "notices";
    rn_canceller_stats(r->canceller, &st->jobs[st->njobs].runs, &st->jobs[st->njobs].failures);
    st->njobs++;
    st->jobs[st->njobs++] = (struct rn_job_stat){"retention", ps->runs, ps->errors};
}

void
rn_runner_stats(struct rn_runner *r, struct rn_runner_stats *st)
{
    uint32_t i;

    memset(st, 0, sizeof(*st));
    for (i = 0; i < r->nloops; i++) {
        struct rn_shardloop_counts c;
        rn_shardloop_counts(r->loops[i], &c);
        st->completed += c.completed;
        st->failed += c.failed;
        st->evicted += c.evicted;
        st->lost += c.lost;
        st->writes += c.writes;
        st->dispatched += c.dispatched;
    }
    st->claimed = r->claimer != NULL ? rn_claimer_claimed(r->claimer) : 0;
    rn_http_stats(r->http, &st->http);
    st->fd_budget = r->fds.budget;
    st->fd_used = atomic_load(&r->fds.used);
    st->fd_exhausted = atomic_load(&r->fds.exhausted);
    st->active = atomic_load(&r->active);
    rn_persister_stats(r->persister, &st->batches, &st->persist);
    {
        struct rn_pruner_stats ps;
        rn_pruner_stats(r->pruner, &ps);
        st->pruned = ps.instances;
        st->pruned_actions = ps.actions;
        st->pruned_events = ps.events;
        job_stats(r, &ps, st);
    }
}

static bool
http_metrics(void *arg, struct cn_buf *out)
{
    struct rn_runner *r = arg;
    struct rn_runner_stats st;
    struct rn_pool_stats ps;
    bool ok;

    if (!atomic_load(&r->started)) {
        return false; /* 500 "metrics unavailable" for the moment the runner takes to start */
    }
    rn_runner_stats(r, &st);
    rn_pool_stats(r->pool, &ps);
    ok = rn_metrics_render(&st, &ps, out);
    cn_mutex_lock(&r->figures.mtx);
    ok = ok && rn_metrics_render_backfills(r->figures.items, r->figures.n, out);
    ok = ok && (!r->figures.have_signals || rn_metrics_render_signals(&r->figures.signals, out));
    cn_mutex_unlock(&r->figures.mtx);
    return ok;
}

/* The ticker's backfill progress (ticker thread): kept for /metrics. */
static void
on_backfills(void *arg, const struct rn_backfill_stat *st, size_t n)
{
    struct rn_runner *r = arg;
    struct rn_backfill_stat *copy = n > 0 ? cn_xcalloc(n, sizeof(*copy)) : NULL;

    if (n > 0) {
        memcpy(copy, st, n * sizeof(*copy));
    }
    cn_mutex_lock(&r->figures.mtx);
    free(r->figures.items);
    r->figures.items = copy;
    r->figures.n = n;
    cn_mutex_unlock(&r->figures.mtx);
}

/* The ticker's read of the signals' figures (ticker thread): kept for /metrics. */
static void
on_signals(void *arg, const struct rn_signal_stat *st)
{
    struct rn_runner *r = arg;

    cn_mutex_lock(&r->figures.mtx);
    r->figures.signals = *st;
    r->figures.have_signals = true;
    cn_mutex_unlock(&r->figures.mtx);
}

static void
http_status(void *arg, struct rn_http_pending *req)
{
    static const char none[] = "the status page needs PostgreSQL\n";
    struct rn_runner *r = arg;

    if (r->status == NULL) {
        rn_http_answer(req, 503, "text/plain", none, sizeof(none) - 1);
        return;
    }
    rn_status_serve(r->status, req);
}

static bool
http_ready(void *arg)
{
    struct rn_runner *r = arg;

    return atomic_load(&r->ready);
}

/* ---- start and stop ----------------------------------------------------------------------- */

static void runner_free(struct rn_runner *r);

static cn_err
open_backends(struct rn_runner *r, struct cn_errmsg *err)
{
    const struct rn_runner_cfg *cfg = &r->cfg;
    uint32_t i;
    cn_err rv;

    if (cfg->backend != NULL) {
        r->claim_b = r->lease_b = r->cancel_b = r->prune_b = r->tick_b = cfg->backend;
        for (i = 0; i < r->npersisters; i++) {
            r->persist_b[i] = cfg->backend;
        }
        return CN_OK;
    }
    if ((rv = rn_backend_pg_open(cfg->database_url, &r->claim_b, err)) != CN_OK ||
        (rv = rn_backend_pg_open(cfg->database_url, &r->lease_b, err)) != CN_OK ||
        (rv = rn_backend_pg_open(cfg->database_url, &r->cancel_b, err)) != CN_OK ||
        (rv = rn_backend_pg_open(cfg->database_url, &r->prune_b, err)) != CN_OK ||
        (rv = rn_backend_pg_open(cfg->database_url, &r->tick_b, err)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < r->npersisters; i++) {
        if ((rv = rn_backend_pg_open(cfg->database_url, &r->persist_b[i], err)) != CN_OK) {
            return rv;
        }
    }
    return CN_OK;
}

static size_t
pool_room(void *pool, void (*wake)(void *), void *arg)
{
    return rn_pool_room(pool, wake, arg);
}

/* The worker pool, listening for workers. No result can arrive before a shard dispatches. */
static cn_err
start_pool(struct rn_runner *r, struct cn_errmsg *err)
{
    const struct rn_runner_cfg *cfg = &r->cfg;
    struct rn_pool_cfg pcfg;

    memset(&pcfg, 0, sizeof(pcfg));
    pcfg.listen_url = cfg->worker_listen;
    pcfg.credential = cfg->worker_credential;
    pcfg.tls_cert_key_file = cfg->worker_tls_cert_key;
    pcfg.tls_ca_file = cfg->worker_tls_ca;
    pcfg.tls_require_client_cert = cfg->worker_tls_ca != NULL;
    pcfg.idle_ms = cfg->worker_idle_ms;
    /* A crashed worker is an infrastructure failure, not the action's: its attempts go to
     * another worker (same execution id and attempt) before the workflow sees WorkerLost. */
    pcfg.requeue_lost = 3;
    pcfg.budget = &r->fds;
    atomic_store(&r->leases_confirmed_ms, cn_mono_ms());
    pcfg.leases_confirmed_ms = &r->leases_confirmed_ms;
    pcfg.lease_ttl_ms = cfg->lock_ttl_ms;
    return rn_pool_start(&pcfg, on_pool_result, r, &r->pool, err);
}

/* The status page's reader and the HTTP listener, its connections capped within the budget. */
static cn_err
start_http(struct rn_runner *r, struct cn_errmsg *err)
{
    const struct rn_runner_cfg *cfg = &r->cfg;
    cn_err rv;

    if (cfg->backend == NULL) {
        struct rn_status_cfg stcfg = {cfg->database_url, r->pool, cfg->http_listen};
        if ((rv = rn_status_start(&stcfg, &r->status, err)) != CN_OK) {
            return rv;
        }
    }
    if (cfg->http_listen != NULL && *cfg->http_listen != '\0') {
        struct rn_http_routes routes = {http_metrics, http_ready, http_status, r};
        struct rn_http_cfg hcfg = {cfg->http_listen, cfg->http_max_connections,
                                   cfg->http_header_timeout_ms, cfg->http_idle_timeout_ms, &r->fds};
        uint64_t half = r->fds.budget / 2;

        if (hcfg.max_connections == 0) {
            hcfg.max_connections = RN_DEFAULT_HTTP_MAX_CONNECTIONS;
        }
        /* Half the descriptor budget at most: the worker port keeps the other half, so that
         * idle HTTP clients cannot keep workers out (and none can take the runner's own). */
        if ((uint64_t) hcfg.max_connections + RN_HTTP_CONN_SLACK > half) {
            uint32_t was = hcfg.max_connections;
            hcfg.max_connections =
                half > RN_HTTP_CONN_SLACK + 1 ? (uint32_t) (half - RN_HTTP_CONN_SLACK) : 1;
            cn_log(CN_LOG_WARN,
                   "CAIRN_HTTP_MAX_CONNECTIONS %u lowered to %u: half of the %llu connections the "
                   "open-file limit leaves to the listeners (raise LimitNOFILE for more)",
                   was, hcfg.max_connections, (unsigned long long) r->fds.budget);
        }
        if ((rv = rn_http_start(&hcfg, &routes, &r->http, err)) != CN_OK) {
            return rv;
        }
    }
    return CN_OK;
}

/* The lease keeper: heartbeat and reclaimer. */
static cn_err
start_keeper(struct rn_runner *r, struct cn_errmsg *err)
{
    struct rn_keeper_cfg kcfg = {.backend = r->lease_b,
                                 .lock_ttl_ms = r->cfg.lock_ttl_ms,
                                 .heartbeat_ms = r->cfg.lock_heartbeat_ms,
                                 .reclaim_interval_ms = r->cfg.reclaim_interval_ms,
                                 .confirmed_ms = &r->leases_confirmed_ms,
                                 .reopened = on_leases_reopened,
                                 .orphans_from_ms = &r->orphans_from_ms};

    return rn_keeper_start(&kcfg, on_lease_lost, r, &r->keeper, err);
}

/* The shards' threads, each fed by the pool, the persisters and the keeper. */
static cn_err
start_shards(struct rn_runner *r, struct cn_errmsg *err)
{
    const struct rn_runner_cfg *cfg = &r->cfg;
    struct rn_shardloop_deps deps;
    uint32_t i;
    cn_err rv;

    deps.pool = r->pool;
    deps.persister = r->persister;
    deps.keeper = r->keeper;
    deps.active = &r->active;
    deps.busy = &r->busy;
    /* Only a backend that records them (not the in-memory one) gets late results: nothing
     * would drain the queue. */
    deps.late = r->tick_b->ops->record_late != NULL ? &r->late : NULL;
    for (i = 0; i < r->nloops; i++) {
        struct rn_shard_cfg scfg = {.index = i,
                                    .exec = {.default_timeout_ms = cfg->default_action_timeout_ms,
                                             .max_inline_steps = cfg->max_inline_steps,
                                             .cleanup_timeout_ms = cfg->cleanup_timeout_ms},
                                    .evict_sleep_threshold_ms = cfg->evict_sleep_threshold_ms,
                                    .evict_child_wait_ms = cfg->evict_child_wait_ms,
                                    .max_child_depth = cfg->max_child_depth};
        if ((rv = rn_shardloop_start(&scfg, &deps, &r->loops[i], err)) != CN_OK) {
            return rv;
        }
    }
    return CN_OK;
}

/* The ticker, the canceller (which pokes it) and the pruner. */
static cn_err
start_control(struct rn_runner *r, struct cn_errmsg *err)
{
    const struct rn_runner_cfg *cfg = &r->cfg;
    cn_err rv;

    {
        struct rn_ticker_cfg tcfg = {r->tick_b,
                                     r->tick_b->ops->record_late != NULL ? &r->late : NULL};
        struct rn_ticker_hooks thooks = {on_cancel, on_backfills, on_signals, r};
        struct rn_canceller_cfg xcfg = {r->cancel_b, NULL};
        struct rn_canceller_hooks hooks = {on_cancel, holds, on_child_result, r};
        if ((rv = rn_ticker_start(&tcfg, &thooks, &r->ticker, err)) != CN_OK) {
            return rv;
        }
        xcfg.ticker = r->ticker;
        if ((rv = rn_canceller_start(&xcfg, &hooks, &r->canceller, err)) != CN_OK) {
            return rv;
        }
    }
    {
        struct rn_pruner_cfg pcfg_ = {r->prune_b, cfg->retention_s,
                                      cfg->prune_interval_ms ? cfg->prune_interval_ms
                                                             : RN_DEFAULT_PRUNE_INTERVAL_MS};
        if ((rv = rn_pruner_start(&pcfg_, &r->pruner, err)) != CN_OK) {
            return rv;
        }
    }
    return CN_OK;
}

/* The claimer: from here on instances arrive. */
static cn_err
start_claimer(struct rn_runner *r, struct cn_errmsg *err)
{
    struct rn_claimer_cfg ccfg = {.backend = r->claim_b,
                                  .max_instances = r->cfg.max_instances,
                                  .lock_ttl_ms = r->cfg.lock_ttl_ms,
                                  .heartbeat_ms = r->cfg.lock_heartbeat_ms,
                                  .leases_confirmed_ms = &r->leases_confirmed_ms,
                                  .orphans_from_ms = &r->orphans_from_ms,
                                  .poll_interval_ms = r->cfg.poll_interval_ms,
                                  .active = &r->active,
                                  .room = pool_room,
                                  .room_arg = r->pool};

    return rn_claimer_start(&ccfg, on_claimed, r, &r->claimer, err);
}

cn_err
rn_runner_start(const struct rn_runner_cfg *cfg, struct rn_runner **out, struct cn_errmsg *err)
{
    struct rn_runner *r;
    cn_err rv;

    *out = NULL;
    if (cfg->shards == 0 || cfg->max_instances == 0 || cfg->worker_listen == NULL ||
        cfg->persisters == 0 || cfg->persisters > RN_PERSISTERS_MAX) {
        return cn_errmsg_set(err, CN_INVAL, "invalid runner configuration");
    }
    r = cn_xcalloc(1, sizeof(*r));
    r->cfg = *cfg;
    r->npersisters = cfg->persisters;
    r->nloops = cfg->shards;
    r->loops = cn_xcalloc(r->nloops, sizeof(*r->loops));
    rn_busy_init(&r->busy);
    cn_mutex_init(&r->figures.mtx);
    rn_late_queue_init(&r->late);
    /* Staged: each stage needs the ones before it; a failure frees what started (runner_free). */
    /* Before anything opens a descriptor: the budget counts what is open now and keeps the
     * reserve for every session the runner opens, and their reconnects. */
    rn_fdbudget_init(&r->fds, RN_FD_RESERVE(r->npersisters));
    if ((rv = open_backends(r, err)) != CN_OK || /* every database session, or none */
        (rv = start_pool(r, err)) != CN_OK ||    /* workers may connect from here on */
        (rv = start_http(r, err)) != CN_OK ||    /* it reads the pool; answers 500 until started */
        (rv = rn_persister_start(r->persist_b, r->npersisters, on_persist_ack, r, &r->persister,
                                 err)) != CN_OK || /* before the shards that queue writes */
        (rv = start_keeper(r, err)) != CN_OK ||    /* before the shards that take leases */
        (rv = start_shards(r, err)) != CN_OK ||
        /* Before the claimer: a parent claimed before the canceller listens could miss its
         * children's notifications (it would wait for CAIRN_EVICT_CHILD_WAIT_MS, be handed
         * back and claimed again). */
        (rv = start_control(r, err)) != CN_OK || (rv = start_claimer(r, err)) != CN_OK) {
        runner_free(r);
        return rv;
    }
    atomic_store(&r->started, true);
    atomic_store(&r->ready, true);
    *out = r;
    return CN_OK;
}

/* Logs the claim-to-first-dispatch latency over this runner's life (shards are stopped). */
static void
report_latency(struct rn_runner *r)
{
    struct rn_lathist all;
    uint32_t i;

    memset(&all, 0, sizeof(all));
    for (i = 0; i < r->nloops; i++) {
        rn_lathist_merge(&all, rn_shardloop_claim_latency(r->loops[i]));
    }
    if (all.count == 0) {
        return;
    }
    cn_log(CN_LOG_INFO,
           "claim-to-first-dispatch: p50 %llu ms, p99 %llu ms, max %llu ms over %llu instances",
           (unsigned long long) rn_lathist_quantile(&all, 0.5) / 1000,
           (unsigned long long) rn_lathist_quantile(&all, 0.99) / 1000,
           (unsigned long long) all.max_us / 1000, (unsigned long long) all.count);
}

/* Clears the leases of instances handed back, so another runner continues them at once. */
static void
release_handed_back(struct rn_runner *r, const struct rn_shard_out *handed)
{
    size_t n = handed->handed_back.len, k;
    struct cn_errmsg em = {{0}};
    struct rn_token *locks;

    if (n == 0) {
        return;
    }
    locks = cn_xmalloc(n * sizeof(*locks));
    for (k = 0; k < n; k++) {
        locks[k] = handed->handed_back.items[k].lock;
    }
    if (r->lease_b->ops->release(r->lease_b, locks, n, &em) != CN_OK) {
        cn_log(CN_LOG_ERROR,
               "could not hand back %zu instance(s): %s (their leases expire instead)", n, em.text);
    } else {
        cn_log(CN_LOG_INFO, "handed back %zu instance(s)", n);
    }
    free(locks);
}

void
rn_runner_stop(struct rn_runner *r, uint32_t grace_ms)
{
    struct rn_shard_out handed;
    int64_t busy;
    uint32_t i;

    if (r == NULL) {
        return;
    }
    atomic_store(&r->ready, false);
    /* No handler may read the parts stopped below: the running ones finish, later ones get 503. */
    rn_http_quiesce(r->http);
    rn_claimer_stop(r->claimer);
    rn_canceller_stop(r->canceller); /* it posts to the shards: stopped before them */
    r->canceller = NULL;
    rn_ticker_stop(r->ticker); /* so does it; first the late results queued until now */
    r->ticker = NULL;
    rn_pruner_stop(r->pruner);
    r->pruner = NULL;
    /* Let running actions report and their writes commit, up to the grace period. */
    busy = rn_busy_wait_idle(&r->busy, cn_mono_ms() + grace_ms);
    if (busy > 0) {
        cn_log(CN_LOG_WARN,
               "shutdown: %lld instance(s) still busy after the grace period; handing them back",
               (long long) busy);
    }
    memset(&handed, 0, sizeof(handed));
    for (i = 0; i < r->nloops; i++) {
        rn_shardloop_stop(r->loops[i], &handed);
    }
    rn_persister_stop(r->persister); /* writes what is queued; ACKs wait unread in the inboxes */
    r->persister = NULL;
    rn_keeper_stop(r->keeper);
    r->keeper = NULL;
    report_latency(r);
    release_handed_back(r, &handed);
    rn_shard_out_fini(&handed);
    runner_free(r);
}

static void
runner_free(struct rn_runner *r)
{
    uint32_t i;

    rn_http_stop(r->http);
    rn_status_stop(r->status); /* answers what is parked; deletes this runner's row */
    rn_claimer_stop(r->claimer);
    rn_canceller_stop(r->canceller);
    rn_ticker_stop(r->ticker);
    rn_pruner_stop(r->pruner);
    /* Shards stop before the persisters and the keeper they feed. */
    for (i = 0; i < r->nloops; i++) {
        if (r->loops[i] != NULL) {
            struct rn_shard_out scratch;
            memset(&scratch, 0, sizeof(scratch));
            rn_shardloop_stop(r->loops[i], &scratch);
            rn_shard_out_fini(&scratch);
        }
    }
    rn_persister_stop(r->persister);
    rn_keeper_stop(r->keeper);
    rn_pool_stop(r->pool); /* its last WorkerLost results go to the inboxes, freed below */
    for (i = 0; i < r->nloops; i++) {
        rn_shardloop_free(r->loops[i]);
    }
    free(r->loops);
    rn_claimer_free(r->claimer); /* the templates: no instance is left to use them */
    if (r->cfg.backend == NULL) {
        if (r->claim_b != NULL) {
            r->claim_b->ops->close(r->claim_b);
        }
        if (r->cancel_b != NULL) {
            r->cancel_b->ops->close(r->cancel_b);
        }
        if (r->prune_b != NULL) {
            r->prune_b->ops->close(r->prune_b);
        }
        if (r->tick_b != NULL) {
            r->tick_b->ops->close(r->tick_b);
        }
        if (r->lease_b != NULL) {
            r->lease_b->ops->close(r->lease_b);
        }
        for (i = 0; i < r->npersisters; i++) {
            if (r->persist_b[i] != NULL) {
                r->persist_b[i]->ops->close(r->persist_b[i]);
            }
        }
    }
    rn_busy_fini(&r->busy);
    rn_fdbudget_fini(&r->fds);
    rn_late_queue_fini(&r->late); /* what came after the ticker stopped is not recorded */
    free(r->figures.items);
    cn_mutex_destroy(&r->figures.mtx);
    free(r);
}
