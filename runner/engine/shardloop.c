/* SPDX-License-Identifier: MIT */
/* A shard's thread (see shardloop.h). */
#include "runner/engine/shardloop.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#include <string.h>

#include "ir/base/clock.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"

struct rn_shardloop {
    struct rn_shard_cfg cfg;
    struct rn_shardloop_deps deps;
    struct rn_shard *sh; /* the thread's own while it runs; the stopper's after the join */
    struct cn_thread thread;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    struct rn_sev *head, *tail; /* inbox; protected by mtx */
    bool stop;                  /* protected by mtx */
    struct rn_shard_out out;    /* the thread's scratch output */
    int64_t busy_published;     /* this shard's share of deps->busy (thread's own) */
    _Atomic uint64_t completed, failed, evicted, lost, writes, dispatched;
};

/* ---- busy gauge --------------------------------------------------------------------------- */

void
rn_busy_init(struct rn_busy *b)
{
    cn_mutex_init(&b->mtx);
    cn_cond_init(&b->cond);
    b->total = 0;
}

void
rn_busy_fini(struct rn_busy *b)
{
    cn_cond_destroy(&b->cond);
    cn_mutex_destroy(&b->mtx);
}

static void
busy_add(struct rn_busy *b, int64_t delta)
{
    cn_mutex_lock(&b->mtx);
    b->total += delta;
    if (b->total == 0) {
        cn_cond_broadcast(&b->cond);
    }
    cn_mutex_unlock(&b->mtx);
}

int64_t
rn_busy_wait_idle(struct rn_busy *b, int64_t deadline_ms)
{
    int64_t n;

    cn_mutex_lock(&b->mtx);
    while (b->total > 0 && cn_mono_ms() < deadline_ms) {
        cn_cond_wait_until(&b->cond, &b->mtx, deadline_ms);
    }
    n = b->total;
    cn_mutex_unlock(&b->mtx);
    return n;
}

/* ---- the thread --------------------------------------------------------------------------- */

/* Carries out an output of the shard core, in the order shard.h gives. */
static void
carry_out(struct rn_shardloop *l)
{
    struct rn_shard_out *o = &l->out;
    int64_t busy;
    size_t i;

    rn_keeper_apply(l->deps.keeper, l->cfg.index, o->leases.items, o->leases.len);
    rn_persister_post(l->deps.persister, o->writes.items, o->writes.len);
    o->writes.len = 0; /* the persister owns them now */
    for (i = 0; i < o->withdrawals.len; i++) {
        (void) rn_pool_withdraw(l->deps.pool, o->withdrawals.items[i].instance_id,
                                o->withdrawals.items[i].lock);
    }
    for (i = 0; i < o->cancels.len; i++) {
        if (rn_pool_cancel(l->deps.pool, o->cancels.items[i], 0) != CN_OK) {
            /* not in flight (already reported): nothing to stop */
        }
    }
    for (i = 0; i < o->dispatches.len; i++) {
        if (rn_pool_submit(l->deps.pool, &o->dispatches.items[i]) != CN_OK) {
            cn_oom("dispatching an action");
        }
    }
    if (o->late.len > 0 && l->deps.late != NULL) {
        rn_late_queue_push(l->deps.late, o->late.items, o->late.len);
    }
    for (i = 0; i < o->reaps.len && l->deps.late != NULL; i++) {
        rn_late_queue_reap(l->deps.late, o->reaps.items[i].parent, o->reaps.items[i].exec_ids,
                           o->reaps.items[i].n);
    }
#ifdef __GLIBC__
    if (o->large_freed) {
        (void) malloc_trim(0);
    }
#endif
    atomic_fetch_add(&l->completed, o->completed);
    atomic_fetch_add(&l->failed, o->failed);
    atomic_fetch_add(&l->evicted, o->evicted);
    atomic_fetch_add(&l->lost, o->lost);
    atomic_fetch_add(&l->writes, o->committed);
    atomic_fetch_add(&l->dispatched, o->dispatches.len);
    atomic_fetch_sub(l->deps.active, o->removed);
    busy = (int64_t) rn_shard_busy(l->sh);
    if (busy != l->busy_published) {
        busy_add(l->deps.busy, busy - l->busy_published);
        l->busy_published = busy;
    }
    rn_shard_out_clear(o);
}

static void *
shardloop_main(void *arg)
{
    struct rn_shardloop *l = arg;

    cn_mutex_lock(&l->mtx);
    for (;;) {
        struct rn_sev *batch;
        int64_t at;

        while (l->head == NULL && !l->stop) {
            if (rn_shard_next_timer(l->sh, &at)) {
                /* Timers are wall-clock instants (they survive a snapshot); the wait is a
                 * duration on the monotonic clock. */
                int64_t left = at - cn_wall_ms();
                if (left <= 0) {
                    break;
                }
                cn_cond_wait_until(&l->cond, &l->mtx, cn_mono_ms() + left);
            } else {
                cn_cond_wait(&l->cond, &l->mtx);
            }
        }
        if (l->stop) {
            break;
        }
        batch = l->head;
        l->head = l->tail = NULL;
        cn_mutex_unlock(&l->mtx);
        while (batch != NULL) {
            struct rn_sev *e = batch;
            batch = e->next;
            rn_shard_apply(l->sh, e, cn_now_read(), &l->out);
            rn_sev_free(e);
        }
        rn_shard_fire(l->sh, cn_now_read(), &l->out);
        carry_out(l);
        cn_mutex_lock(&l->mtx);
    }
    cn_mutex_unlock(&l->mtx);
    return NULL;
}

cn_err
rn_shardloop_start(const struct rn_shard_cfg *cfg, const struct rn_shardloop_deps *deps,
                   struct rn_shardloop **out, struct cn_errmsg *err)
{
    struct rn_shardloop *l = cn_xcalloc(1, sizeof(*l));
    char name[16];
    cn_err rv;

    *out = NULL;
    l->cfg = *cfg;
    l->deps = *deps;
    l->sh = rn_shard_new(cfg);
    cn_mutex_init(&l->mtx);
    cn_cond_init(&l->cond);
    (void) snprintf(name, sizeof(name), "cairn-shard-%u", (unsigned) cfg->index);
    if ((rv = cn_thread_start(&l->thread, name, shardloop_main, l, err)) != CN_OK) {
        rn_shardloop_free(l);
        return rv;
    }
    *out = l;
    return CN_OK;
}

void
rn_shardloop_post(struct rn_shardloop *l, struct rn_sev *e)
{
    e->next = NULL;
    cn_mutex_lock(&l->mtx);
    if (l->tail != NULL) {
        l->tail->next = e;
    } else {
        l->head = e;
    }
    l->tail = e;
    cn_cond_signal(&l->cond);
    cn_mutex_unlock(&l->mtx);
}

void
rn_shardloop_counts(struct rn_shardloop *l, struct rn_shardloop_counts *c)
{
    c->completed = atomic_load(&l->completed);
    c->failed = atomic_load(&l->failed);
    c->evicted = atomic_load(&l->evicted);
    c->lost = atomic_load(&l->lost);
    c->writes = atomic_load(&l->writes);
    c->dispatched = atomic_load(&l->dispatched);
}

void
rn_shardloop_stop(struct rn_shardloop *l, struct rn_shard_out *handed)
{
    size_t i;

    if (!l->thread.started) {
        return;
    }
    cn_cond_raise(&l->mtx, &l->cond, &l->stop);
    cn_thread_wait(&l->thread);
    /* The thread is gone: the shard is ours. Anything it produced but did not carry out is
     * dropped with it (only an output of the last batch could be, and carry_out ran). */
    rn_shard_hand_back(l->sh, &l->out);
    for (i = 0; i < l->out.withdrawals.len; i++) {
        (void) rn_pool_withdraw(l->deps.pool, l->out.withdrawals.items[i].instance_id,
                                l->out.withdrawals.items[i].lock);
    }
    for (i = 0; i < l->out.handed_back.len; i++) {
        CN_VEC_XPUSH(&handed->handed_back, l->out.handed_back.items[i]);
    }
    rn_keeper_apply(l->deps.keeper, l->cfg.index, l->out.leases.items, l->out.leases.len);
    atomic_fetch_sub(l->deps.active, l->out.removed);
    if (l->busy_published != 0) {
        busy_add(l->deps.busy, -l->busy_published);
        l->busy_published = 0;
    }
    rn_shard_out_clear(&l->out);
}

const struct rn_lathist *
rn_shardloop_claim_latency(struct rn_shardloop *l)
{
    return rn_shard_claim_latency(l->sh);
}

void
rn_shardloop_free(struct rn_shardloop *l)
{
    struct rn_sev *e, *next;

    if (l == NULL) {
        return;
    }
    if (l->thread.started) {
        struct rn_shard_out scratch;
        memset(&scratch, 0, sizeof(scratch));
        rn_shardloop_stop(l, &scratch);
        rn_shard_out_fini(&scratch);
    }
    for (e = l->head; e != NULL; e = next) {
        next = e->next;
        rn_sev_free(e);
    }
    rn_shard_free(l->sh);
    rn_shard_out_fini(&l->out);
    cn_cond_destroy(&l->cond);
    cn_mutex_destroy(&l->mtx);
    free(l);
}
