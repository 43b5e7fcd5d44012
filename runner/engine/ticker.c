/* SPDX-License-Identifier: MIT */
/* The ticker: the runner's periodic jobs, each on its own clock and backoff (see ticker.h). */
#include "runner/engine/ticker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/uuid.h"
#include "ir/base/vec.h"
#include "ir/base/xalloc.h"
#include "runner/engine/backoff.h"
#include "runner/engine/stop.h"

struct rn_ticker;

/* A job's run: CN_OK with *next_ms, how long until it runs again; else its error in err. */
typedef cn_err (*rn_job_fn)(struct rn_ticker *t, int64_t *next_ms, struct cn_errmsg *err);

struct job {
    rn_job_fn run; /* NULL: the backend cannot do it */
    int64_t at_ms; /* monotonic: when it runs next */
    struct rn_backoff backoff;
    bool failing; /* its last run failed (the warning is logged once per outage) */
    bool poked;   /* rn_ticker_poke asked for a run since this one was chosen */
    uint64_t runs, failures;
};

struct rn_ticker {
    struct rn_ticker_cfg cfg;
    struct rn_ticker_hooks hooks;
    struct rn_stop stop; /* its mutex guards jobs[].at_ms (pokes) and the counters */
    struct job jobs[RN_JOB_COUNT];
};

static const char *const job_names[] = {
#define RN_TICKER_JOB_NAME(id, name, what) name,
    RN_TICKER_JOBS(RN_TICKER_JOB_NAME)
#undef RN_TICKER_JOB_NAME
};
static const char *const job_whats[] = {
#define RN_TICKER_JOB_WHAT(id, name, what) what,
    RN_TICKER_JOBS(RN_TICKER_JOB_WHAT)
#undef RN_TICKER_JOB_WHAT
};

const char *
rn_ticker_job_name(enum rn_ticker_job j)
{
    return (unsigned) j < RN_JOB_COUNT ? job_names[j] : "?";
}

/* ---- the late queue: shards -> ticker ------------------------------------------------------ */

void
rn_late_queue_init(struct rn_late_queue *q)
{
    memset(q, 0, sizeof(*q));
    cn_mutex_init(&q->mtx);
}

static void
late_free(struct rn_late_result *r, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        ir_val_release(r[i].d.value);
    }
    free(r);
}

void
rn_late_queue_fini(struct rn_late_queue *q)
{
    size_t i;

    late_free(q->items, q->len);
    for (i = 0; i < q->reaps.len; i++) {
        free(q->reaps.items[i].exec_ids);
    }
    free(q->reaps.items);
    cn_mutex_destroy(&q->mtx);
}

void
rn_late_queue_push(struct rn_late_queue *q, const struct rn_late_result *r, size_t n)
{
    size_t i;

    cn_mutex_lock(&q->mtx);
    for (i = 0; i < n; i++) {
        struct rn_late_result l = r[i];
        if (q->len >= RN_LATE_QUEUE_MAX) {
            q->dropped++;
            continue;
        }
        l.d.value = ir_val_retain(r[i].d.value);
        CN_VEC_XPUSH(q, l);
    }
    cn_mutex_unlock(&q->mtx);
}

/* Records what the shards queued. A batch that fails is dropped, with a warning: these results
 * change nothing in any instance, they only complete its history. */
static void
record_late(struct rn_ticker *t)
{
    struct rn_late_queue *q = t->cfg.late;
    struct rn_backend *b = t->cfg.backend;
    struct rn_late_result *items;
    struct cn_errmsg em = {{0}};
    uint64_t dropped;
    size_t n;

    if (q == NULL) {
        return;
    }
    cn_mutex_lock(&q->mtx);
    items = q->items;
    n = q->len;
    dropped = q->dropped;
    q->items = NULL;
    q->len = q->cap = 0;
    q->dropped = 0;
    cn_mutex_unlock(&q->mtx);
    if (dropped > 0) {
        cn_log(CN_LOG_WARN, "%llu late action results were not recorded (queue full)",
               (unsigned long long) dropped);
    }
    if (n > 0 && b->ops->record_late != NULL && b->ops->record_late(b, items, n, &em) != CN_OK) {
        cn_log(CN_LOG_WARN, "%zu late action results were not recorded: %s", n, em.text);
    }
    late_free(items, n);
}

void
rn_late_queue_reap(struct rn_late_queue *q, struct rn_iid parent, const struct rn_xid *exec_ids,
                   size_t n)
{
    struct rn_reap r;

    r.parent = parent;
    r.n = n;
    r.tries = 0;
    r.exec_ids = NULL;
    cn_mutex_lock(&q->mtx);
    if (q->reaps.len >= RN_LATE_QUEUE_MAX) {
        q->dropped++;
        cn_mutex_unlock(&q->mtx);
        return;
    }
    if (n > 0) {
        r.exec_ids = cn_xcalloc(n, sizeof(*r.exec_ids));
        memcpy(r.exec_ids, exec_ids, n * sizeof(*exec_ids));
    }
    CN_VEC_XPUSH(&q->reaps, r);
    cn_mutex_unlock(&q->mtx);
}

/* Cancels the children the shards stopped waiting for. A batch that fails is dropped with a
 * warning: the sweep (cairn.reap_children) cancels those whose parent ended; a child of a call
 * dropped by fail_fast in a parent still running finishes unheeded. */
static void
reap(struct rn_ticker *t)
{
    struct rn_late_queue *q = t->cfg.late;
    struct rn_backend *b = t->cfg.backend;
    struct rn_reap *items;
    size_t n, i;

    if (q == NULL) {
        return;
    }
    cn_mutex_lock(&q->mtx);
    items = q->reaps.items;
    n = q->reaps.len;
    memset(&q->reaps, 0, sizeof(q->reaps));
    cn_mutex_unlock(&q->mtx);
    for (i = 0; i < n; i++) {
        struct cn_errmsg em = {{0}};
        if (b->ops->cancel_children != NULL &&
            b->ops->cancel_children(b, items[i].parent, items[i].exec_ids, items[i].n,
                                    "its parent no longer waits for it", &em) != CN_OK) {
            char id[37];
            cn_uuid_format(items[i].parent.b, id);
            if (++items[i].tries < RN_REAP_TRIES) {
                cn_mutex_lock(&q->mtx);
                CN_VEC_XPUSH(&q->reaps, items[i]); /* the next round tries again */
                cn_mutex_unlock(&q->mtx);
                continue;
            }
            cn_log(CN_LOG_WARN, "the children of %s were not cancelled: %s", id, em.text);
        }
        free(items[i].exec_ids);
    }
    free(items);
}

/* ---- the jobs ------------------------------------------------------------------------------ */

static cn_err
job_sweep(struct rn_ticker *t, int64_t *next_ms, struct cn_errmsg *err)
{
    struct rn_backend *b = t->cfg.backend;
    size_t handed = 0;
    cn_err rv = b->ops->sweep_cancels(b, t->hooks.cancel, t->hooks.arg, err);

    if (rv == CN_OK && b->ops->sweep_children != NULL) {
        rv = b->ops->sweep_children(b, &handed, err);
    }
    *next_ms = RN_CANCEL_SWEEP_MS;
    return rv;
}

static cn_err
job_schedules(struct rn_ticker *t, int64_t *next_ms, struct cn_errmsg *err)
{
    struct rn_backend *b = t->cfg.backend;
    size_t fired = 0;

    *next_ms = RN_SCHEDULE_TICK_MS;
    return b->ops->fire_schedules(b, &fired, err);
}

static cn_err
job_backfills(struct rn_ticker *t, int64_t *next_ms, struct cn_errmsg *err)
{
    struct rn_backend *b = t->cfg.backend;
    struct rn_backfill_stat *bf = NULL;
    size_t nbf = 0, i;
    bool active = false;
    cn_err rv = b->ops->tick_backfills(b, &bf, &nbf, err);

    if (rv == CN_OK) {
        for (i = 0; i < nbf; i++) {
            active = active || strcmp(bf[i].state, "running") == 0 ||
                     strcmp(bf[i].state, "pending") == 0 || strcmp(bf[i].state, "resuming") == 0;
        }
        if (t->hooks.backfills != NULL) {
            t->hooks.backfills(t->hooks.arg, bf, nbf);
        }
    }
    free(bf);
    /* a partition that finished is replaced within a quarter of a second */
    *next_ms = active ? RN_BACKFILL_ACTIVE_TICK_MS : RN_SCHEDULE_TICK_MS;
    return rv;
}

static cn_err
job_signals(struct rn_ticker *t, int64_t *next_ms, struct cn_errmsg *err)
{
    struct rn_backend *b = t->cfg.backend;
    struct rn_signal_stat st;
    cn_err rv = b->ops->signal_stats(b, &st, err);

    if (rv == CN_OK && t->hooks.signals != NULL) {
        t->hooks.signals(t->hooks.arg, &st);
    }
    *next_ms = RN_SIGNAL_STATS_MS;
    return rv;
}

/* The late results and the reaps keep their own failures to themselves (dropped or tried
 * again, with their warnings): as jobs they always succeed. */
static cn_err
job_late(struct rn_ticker *t, int64_t *next_ms, struct cn_errmsg *err)
{
    (void) err;
    record_late(t);
    *next_ms = RN_DRAIN_TICK_MS;
    return CN_OK;
}

static cn_err
job_reap(struct rn_ticker *t, int64_t *next_ms, struct cn_errmsg *err)
{
    (void) err;
    reap(t);
    *next_ms = RN_DRAIN_TICK_MS;
    return CN_OK;
}

/* ---- the thread ---------------------------------------------------------------------------- */

/* Runs job j once (t->stop.mtx not held) and sets when it runs next. */
static void
run_job(struct rn_ticker *t, enum rn_ticker_job j)
{
    struct job *jb = &t->jobs[j];
    struct cn_errmsg em = {{0}};
    int64_t next_ms = RN_SCHEDULE_TICK_MS;
    cn_err rv = jb->run(t, &next_ms, &em);
    int64_t pause = 0;

    if (rv != CN_OK) {
        pause = rn_backoff_next(&jb->backoff);
        if (!jb->failing) {
            cn_log(CN_LOG_WARN, "%s failed (retrying in %lld ms, then less often): %s",
                   job_whats[j], (long long) pause, em.text);
        }
    } else if (jb->failing) {
        cn_log(CN_LOG_INFO, "%s works again", job_whats[j]);
    }
    cn_mutex_lock(&t->stop.mtx);
    jb->runs++;
    if (rv != CN_OK) {
        jb->failures++;
        jb->failing = true;
        jb->at_ms = cn_mono_ms() + pause;
    } else {
        rn_backoff_reset(&jb->backoff);
        jb->failing = false;
        if (!jb->poked) { /* a poke during the run asked for another: at_ms is due already */
            jb->at_ms = cn_mono_ms() + next_ms;
        }
    }
    cn_mutex_unlock(&t->stop.mtx);
}

static void *
ticker_main(void *arg)
{
    struct rn_ticker *t = arg;

    while (!rn_stop_is_set(&t->stop)) {
        int64_t now = cn_mono_ms(), first = INT64_MAX;
        int due = -1;
        int j;

        cn_mutex_lock(&t->stop.mtx);
        for (j = 0; j < RN_JOB_COUNT; j++) {
            if (t->jobs[j].run == NULL) {
                continue;
            }
            if (due < 0 && t->jobs[j].at_ms <= now) {
                due = j; /* in table order: the sweep first */
            }
            first = t->jobs[j].at_ms < first ? t->jobs[j].at_ms : first;
        }
        if (due < 0) {
            /* Until the first job is due, a poke or the stop; no polling. */
            cn_cond_wait_until(&t->stop.cond, &t->stop.mtx, first);
            cn_mutex_unlock(&t->stop.mtx);
            continue;
        }
        t->jobs[due].poked = false;
        cn_mutex_unlock(&t->stop.mtx);
        run_job(t, (enum rn_ticker_job) due);
    }
    return NULL;
}

cn_err
rn_ticker_start(const struct rn_ticker_cfg *cfg, const struct rn_ticker_hooks *hooks,
                struct rn_ticker **out, struct cn_errmsg *err)
{
    const struct rn_backend_ops *ops = cfg->backend->ops;
    struct rn_ticker *t;
    int64_t now = cn_mono_ms();
    int j, any = 0;
    cn_err rv;

    *out = NULL;
    t = cn_xcalloc(1, sizeof(*t));
    t->cfg = *cfg;
    t->hooks = *hooks;
    t->jobs[RN_JOB_SWEEP].run = ops->sweep_cancels != NULL ? job_sweep : NULL;
    t->jobs[RN_JOB_SCHEDULES].run = ops->fire_schedules != NULL ? job_schedules : NULL;
    t->jobs[RN_JOB_BACKFILLS].run = ops->tick_backfills != NULL ? job_backfills : NULL;
    t->jobs[RN_JOB_LATE].run = cfg->late != NULL && ops->record_late != NULL ? job_late : NULL;
    t->jobs[RN_JOB_REAP].run = cfg->late != NULL && ops->cancel_children != NULL ? job_reap : NULL;
    t->jobs[RN_JOB_SIGNALS].run = ops->signal_stats != NULL ? job_signals : NULL;
    for (j = 0; j < RN_JOB_COUNT; j++) {
        t->jobs[j].backoff = (struct rn_backoff) RN_BACKOFF_INIT;
        t->jobs[j].at_ms = now;
        any |= t->jobs[j].run != NULL;
    }
    /* The first sweep waits for the canceller's poke, once it listens: a sweep before the
     * LISTEN would leave a gap a notification could fall into. The interval bounds the wait
     * should no canceller poke (a backend without notices). */
    t->jobs[RN_JOB_SWEEP].at_ms = now + RN_CANCEL_SWEEP_MS;
    if (!any) {
        free(t);
        return CN_OK;
    }
    if ((rv = rn_stop_start(&t->stop, "cairn-ticker", ticker_main, t, err)) != CN_OK) {
        free(t);
        return rv;
    }
    *out = t;
    return CN_OK;
}

void
rn_ticker_poke(struct rn_ticker *t, enum rn_ticker_job j)
{
    if (t == NULL || (unsigned) j >= RN_JOB_COUNT) {
        return;
    }
    cn_mutex_lock(&t->stop.mtx);
    t->jobs[j].at_ms = cn_mono_ms();
    t->jobs[j].poked = true;
    cn_cond_broadcast(&t->stop.cond);
    cn_mutex_unlock(&t->stop.mtx);
}

void
rn_ticker_stats(struct rn_ticker *t, struct rn_ticker_stats *st)
{
    int j;

    memset(st, 0, sizeof(*st));
    if (t == NULL) {
        return;
    }
    cn_mutex_lock(&t->stop.mtx);
    for (j = 0; j < RN_JOB_COUNT; j++) {
        st->runs[j] = t->jobs[j].runs;
        st->failures[j] = t->jobs[j].failures;
    }
    cn_mutex_unlock(&t->stop.mtx);
}

void
rn_ticker_stop(struct rn_ticker *t)
{
    if (t == NULL) {
        return;
    }
    rn_stop_join(&t->stop);
    /* what the shards handed over until they stopped */
    if (t->jobs[RN_JOB_LATE].run != NULL) {
        record_late(t);
    }
    if (t->jobs[RN_JOB_REAP].run != NULL) {
        reap(t);
    }
    free(t);
}
