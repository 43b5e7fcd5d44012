/* SPDX-License-Identifier: MIT */
/* The canceller (see canceller.h). */
#include "runner/canceller.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/backoff.h"

struct rn_canceller {
    struct rn_canceller_cfg cfg;
    rn_cancel_fn fn;
    void *arg;
    pthread_t thread;
    atomic_bool stop;
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
    late_free(q->items, q->len);
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

static void *
canceller_main(void *arg)
{
    struct rn_canceller *c = arg;
    struct rn_backend *b = c->cfg.backend;
    struct rn_backoff backoff = RN_BACKOFF_INIT;
    int64_t next_sweep = 0; /* at once: what waited while no runner listened */

    while (!atomic_load(&c->stop)) {
        struct cn_errmsg em = {{0}};
        cn_err rv = CN_OK;

        if (cn_mono_ms() >= next_sweep) {
            rv = b->ops->sweep_cancels(b, c->fn, c->arg, &em);
            if (rv == CN_OK) {
                next_sweep = cn_mono_ms() + c->cfg.sweep_interval_ms;
            }
        }
        if (rv == CN_OK) {
            rv = b->ops->wait_cancels(b, RN_CANCELLER_WAIT_MS, c->fn, c->arg, &em);
        }
        if (rv == CN_OK) {
            record_late(c);
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
rn_canceller_start(const struct rn_canceller_cfg *cfg, rn_cancel_fn fn, void *arg,
                   struct rn_canceller **out, struct cn_errmsg *err)
{
    struct rn_canceller *c;

    *out = NULL;
    if (cfg->backend->ops->wait_cancels == NULL || cfg->backend->ops->sweep_cancels == NULL) {
        return CN_OK; /* a backend without cancels (in memory): nothing to hear */
    }
    c = cn_xcalloc(1, sizeof(*c));
    c->cfg = *cfg;
    c->fn = fn;
    c->arg = arg;
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
    free(c);
}
