/* SPDX-License-Identifier: MIT */
/* The canceller (see canceller.h). */
#include "runner/engine/canceller.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/uuid.h"
#include "ir/base/vec.h"
#include "ir/base/xalloc.h"
#include "runner/engine/backoff.h"

struct rn_canceller {
    struct rn_canceller_cfg cfg;
    struct rn_canceller_hooks hooks;
    pthread_t thread;
    atomic_bool stop;
    struct {
        struct rn_child_link *items; /* child notices of the last wait */
        size_t len, cap;
    } heard;
};

static void
pause_ms(struct rn_canceller *c, int64_t ms)
{
    int64_t until = cn_mono_ms() + ms;

    while (!atomic_load(&c->stop) && cn_mono_ms() < until) {
        struct timespec ts = {0, 50 * 1000000L};
        (void) nanosleep(&ts, NULL);
    }
}

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
record_late(struct rn_canceller *c)
{
    struct rn_late_queue *q = c->cfg.late;
    struct rn_backend *b = c->cfg.backend;
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
reap(struct rn_canceller *c)
{
    struct rn_late_queue *q = c->cfg.late;
    struct rn_backend *b = c->cfg.backend;
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

static void
heard_cancel(void *arg, struct rn_iid iid, const char *reason)
{
    struct rn_canceller *c = arg;

    c->hooks.cancel(c->hooks.arg, iid, reason);
}

static void
heard_children(void *arg, const struct rn_child_link *done, size_t n)
{
    struct rn_canceller *c = arg;
    size_t i;

    for (i = 0; i < n; i++) {
        if (c->hooks.holds == NULL || c->hooks.holds(c->hooks.arg, done[i].parent)) {
            CN_VEC_XPUSH(&c->heard, done[i]); /* most are for other runners' parents */
        }
    }
}

/* Reads the outcomes of the children heard of whose parents are held here and hands them over.
 * One that cannot be read now is left to the parent's next claim. */
static cn_err
deliver_children(struct rn_canceller *c, struct cn_errmsg *err)
{
    struct rn_backend *b = c->cfg.backend;
    struct rn_done *out;
    size_t i, n = c->heard.len;
    cn_err rv;

    if (n == 0 || b->ops->child_results == NULL) {
        c->heard.len = 0;
        return CN_OK;
    }
    out = cn_xcalloc(n, sizeof(*out));
    rv = b->ops->child_results(b, c->heard.items, n, out, err);
    for (i = 0; i < n; i++) {
        if (rv == CN_OK && !rn_xid_is_nil(out[i].exec_id) && c->hooks.child_result != NULL) {
            c->hooks.child_result(c->hooks.arg, c->heard.items[i].parent, &out[i]);
        }
        ir_val_release(out[i].value);
    }
    free(out);
    c->heard.len = 0;
    return rv;
}

static void *
canceller_main(void *arg)
{
    struct rn_canceller *c = arg;
    struct rn_backend *b = c->cfg.backend;
    struct rn_backoff backoff = RN_BACKOFF_INIT;
    int64_t next_sweep = 0; /* at once: what waited while no runner listened */
    int64_t next_tick = 0;
    int64_t next_backfill = 0;

    while (!atomic_load(&c->stop)) {
        struct cn_errmsg em = {{0}};
        /* Listening first (the wait (re)issues LISTEN), then the sweep when it is due: a
         * notification sent before the LISTEN is lost, one after it is not, and the sweep finds
         * what came before. Without waiting when the sweep is due. */
        cn_err rv = b->ops->wait_notices(b, cn_mono_ms() >= next_sweep ? 0 : RN_CANCELLER_WAIT_MS,
                                         heard_cancel, heard_children, c, &em);

        if (rv == CN_OK) {
            rv = deliver_children(c, &em);
        }
        if (rv == CN_OK && cn_mono_ms() >= next_sweep) {
            size_t handed = 0;
            rv = b->ops->sweep_cancels(b, c->hooks.cancel, c->hooks.arg, &em);
            if (rv == CN_OK && b->ops->sweep_children != NULL) {
                rv = b->ops->sweep_children(b, &handed, &em);
            }
            if (rv == CN_OK) {
                next_sweep = cn_mono_ms() + c->cfg.sweep_interval_ms;
            }
        }
        if (rv == CN_OK && b->ops->fire_schedules != NULL && cn_mono_ms() >= next_tick) {
            size_t fired = 0;
            if ((rv = b->ops->fire_schedules(b, &fired, &em)) == CN_OK) {
                next_tick = cn_mono_ms() + RN_SCHEDULE_TICK_MS;
            }
        }
        if (rv == CN_OK && b->ops->tick_backfills != NULL && cn_mono_ms() >= next_backfill) {
            struct rn_backfill_stat *bf = NULL;
            size_t nbf = 0, i;
            bool active = false;
            if ((rv = b->ops->tick_backfills(b, &bf, &nbf, &em)) == CN_OK) {
                for (i = 0; i < nbf; i++) {
                    active = active || strcmp(bf[i].state, "running") == 0 ||
                             strcmp(bf[i].state, "pending") == 0 ||
                             strcmp(bf[i].state, "resuming") == 0;
                }
                if (c->hooks.backfills != NULL) {
                    c->hooks.backfills(c->hooks.arg, bf, nbf);
                }
                /* a partition that finished is replaced within a quarter of a second */
                next_backfill =
                    cn_mono_ms() + (active ? RN_BACKFILL_ACTIVE_TICK_MS : RN_SCHEDULE_TICK_MS);
            }
            free(bf);
        }
        if (rv == CN_OK) {
            record_late(c);
            reap(c);
        }
        if (rv != CN_OK) {
            int64_t pause = rn_backoff_next(&backoff);
            cn_log(CN_LOG_WARN, "listening for cancels failed (retrying in %lld ms): %s",
                   (long long) pause, em.text);
            next_sweep = 0; /* notifications sent meanwhile are lost: sweep once back */
            pause_ms(c, pause);
            continue;
        }
        rn_backoff_reset(&backoff);
    }
    return NULL;
}

cn_err
rn_canceller_start(const struct rn_canceller_cfg *cfg, const struct rn_canceller_hooks *hooks,
                   struct rn_canceller **out, struct cn_errmsg *err)
{
    struct rn_canceller *c;

    *out = NULL;
    if (cfg->backend->ops->wait_notices == NULL || cfg->backend->ops->sweep_cancels == NULL) {
        return CN_OK; /* a backend without cancels (in memory): nothing to hear */
    }
    c = cn_xcalloc(1, sizeof(*c));
    c->cfg = *cfg;
    c->hooks = *hooks;
    atomic_init(&c->stop, false);
    if (pthread_create(&c->thread, NULL, canceller_main, c) != 0) {
        free(c);
        return cn_errmsg_set(err, CN_IO, "cannot start the canceller thread");
    }
    *out = c;
    return CN_OK;
}

void
rn_canceller_stop(struct rn_canceller *c)
{
    if (c == NULL) {
        return;
    }
    atomic_store(&c->stop, true);
    cn_thread_join(c->thread);
    record_late(c); /* what the shards handed over until they stopped */
    reap(c);
    free(c->heard.items);
    free(c);
}
