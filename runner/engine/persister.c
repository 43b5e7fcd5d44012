/* SPDX-License-Identifier: MIT */
/* The persister threads (see persister.h). */
#include "runner/engine/persister.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/engine/backoff.h"

/* Most writes in one transaction: a batch this large already amortises the commit, and a
 * bounded batch keeps one transaction's locks and WAL burst short. */
#define PERSIST_BATCH 1024

struct pthread_slot {
    struct rn_persister *p;
    struct cn_thread thread;
    struct rn_backend *b;
};

struct rn_persister {
    struct pthread_slot slots[RN_PERSISTERS_MAX];
    uint32_t n;
    rn_persist_ack_fn ack;
    void *arg;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    struct rn_wreq *head, *tail; /* protected by mtx */
    bool stop;                   /* protected by mtx */
    uint64_t retry_gen;          /* protected by mtx: bumped by rn_persister_retry_now */
    uint64_t batches;            /* protected by mtx */
    struct rn_lathist latency;   /* protected by mtx */
};

/* Acknowledges and frees a chain of writes (no lock held). */
static void
ack_all(struct rn_persister *p, struct rn_wreq **qs, size_t n, bool failed)
{
    size_t i;

    for (i = 0; i < n; i++) {
        p->ack(p->arg, qs[i], qs[i]->w.lost, failed);
        rn_wreq_free(qs[i]);
    }
}

static void *
persister_main(void *arg)
{
    struct pthread_slot *self = arg;
    struct rn_persister *p = self->p;
    struct rn_write *ws = cn_xcalloc(PERSIST_BATCH, sizeof(*ws));
    struct rn_wreq **qs = cn_xcalloc(PERSIST_BATCH, sizeof(*qs));
    struct rn_backoff backoff = RN_BACKOFF_INIT;

    cn_mutex_lock(&p->mtx);
    for (;;) {
        struct cn_errmsg em = {{0}};
        size_t n = 0, i;
        int64_t t_us;
        cn_err rv;

        while (p->head == NULL && !p->stop) {
            cn_cond_wait(&p->cond, &p->mtx);
        }
        if (p->head == NULL) {
            break; /* stopping, and everything is written */
        }
        while (p->head != NULL && n < PERSIST_BATCH) {
            qs[n] = p->head;
            p->head = p->head->next;
            ws[n] = qs[n]->w;
            n++;
        }
        if (p->head == NULL) {
            p->tail = NULL;
        }
        cn_mutex_unlock(&p->mtx);
        t_us = cn_mono_us();
        rv = self->b->ops->persist(self->b, ws, n, &em);
        t_us = cn_mono_us() - t_us;
        if (rv != CN_OK) {
            int64_t pause = rn_backoff_next(&backoff);

            cn_log(CN_LOG_ERROR, "persist of %zu writes failed (retrying in %lld ms): %s", n,
                   (long long) pause, em.text);
            cn_mutex_lock(&p->mtx);
            if (!p->stop) {
                /* Put the batch back in front, in order, and retry after a pause. */
                for (i = n; i > 0; i--) {
                    qs[i - 1]->next = p->head;
                    p->head = qs[i - 1];
                    if (p->tail == NULL) {
                        p->tail = qs[i - 1];
                    }
                }
                /* The whole pause: new writes arriving meanwhile signal cond too, and waking
                 * for each of them retried a dead database every few milliseconds (the
                 * failover scenario saw about 30 reconnects a second per persister). The
                 * runner cuts the pause short once the database is known to be back. */
                {
                    int64_t until = cn_mono_ms() + pause;
                    uint64_t gen = p->retry_gen;

                    while (!p->stop && p->retry_gen == gen && cn_mono_ms() < until) {
                        cn_cond_wait_until(&p->cond, &p->mtx, until);
                    }
                }
                continue;
            }
            /* Stopping with storage down: give up on this batch and on what is queued; nothing
             * of it was written, so another runner redoes this work from the last committed
             * state. The ACKs go out with the lock released. */
            {
                struct rn_wreq *rest = p->head;
                p->head = p->tail = NULL;
                cn_mutex_unlock(&p->mtx);
                ack_all(p, qs, n, true);
                while (rest != NULL) {
                    struct rn_wreq *q = rest;
                    rest = q->next;
                    ack_all(p, &q, 1, true);
                }
            }
            cn_mutex_lock(&p->mtx);
            continue;
        }
        rn_backoff_reset(&backoff);
        for (i = 0; i < n; i++) {
            qs[i]->w.lost = ws[i].lost;
        }
        ack_all(p, qs, n, false);
        cn_mutex_lock(&p->mtx);
        p->batches++;
        rn_lathist_add(&p->latency, t_us);
    }
    cn_mutex_unlock(&p->mtx);
    free(ws);
    free(qs);
    return NULL;
}

cn_err
rn_persister_start(struct rn_backend *const *backends, uint32_t n, rn_persist_ack_fn ack, void *arg,
                   struct rn_persister **out, struct cn_errmsg *err)
{
    struct rn_persister *p;
    char name[16];
    uint32_t i;
    cn_err rv;

    *out = NULL;
    if (n == 0 || n > RN_PERSISTERS_MAX) {
        return cn_errmsg_set(err, CN_INVAL, "persisters must be 1 to %d", RN_PERSISTERS_MAX);
    }
    p = cn_xcalloc(1, sizeof(*p));
    p->n = n;
    p->ack = ack;
    p->arg = arg;
    cn_mutex_init(&p->mtx);
    cn_cond_init(&p->cond);
    for (i = 0; i < n; i++) {
        p->slots[i].p = p;
        p->slots[i].b = backends[i];
        (void) snprintf(name, sizeof(name), "cairn-persist-%u", (unsigned) i);
        if ((rv = cn_thread_start(&p->slots[i].thread, name, persister_main, &p->slots[i], err)) !=
            CN_OK) {
            rn_persister_stop(p);
            return rv;
        }
    }
    *out = p;
    return CN_OK;
}

void
rn_persister_post(struct rn_persister *p, struct rn_wreq *const *writes, size_t n)
{
    size_t i;

    if (n == 0) {
        return;
    }
    for (i = 0; i + 1 < n; i++) {
        writes[i]->next = writes[i + 1];
    }
    writes[n - 1]->next = NULL;
    cn_mutex_lock(&p->mtx);
    if (p->tail != NULL) {
        p->tail->next = writes[0];
    } else {
        p->head = writes[0];
    }
    p->tail = writes[n - 1];
    cn_cond_signal(&p->cond);
    cn_mutex_unlock(&p->mtx);
}

void
rn_persister_retry_now(struct rn_persister *p)
{
    cn_mutex_lock(&p->mtx);
    p->retry_gen++;
    cn_cond_broadcast(&p->cond);
    cn_mutex_unlock(&p->mtx);
}

void
rn_persister_stats(struct rn_persister *p, uint64_t *batches, struct rn_lathist *latency)
{
    cn_mutex_lock(&p->mtx);
    *batches = p->batches;
    *latency = p->latency;
    cn_mutex_unlock(&p->mtx);
}

void
rn_persister_stop(struct rn_persister *p)
{
    uint32_t i;

    if (p == NULL) {
        return;
    }
    cn_cond_raise(&p->mtx, &p->cond, &p->stop);
    for (i = 0; i < p->n; i++) {
        cn_thread_wait(&p->slots[i].thread);
    }
    while (p->head != NULL) { /* only if no thread ever started */
        struct rn_wreq *q = p->head;
        p->head = q->next;
        rn_wreq_free(q);
    }
    cn_cond_destroy(&p->cond);
    cn_mutex_destroy(&p->mtx);
    free(p);
}
