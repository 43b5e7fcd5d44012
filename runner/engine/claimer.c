/* SPDX-License-Identifier: MIT */
/* The claimer thread (see claimer.h). */
#include "runner/engine/claimer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/engine/backoff.h"
#include "runner/engine/dagcache.h"
#include "runner/exec/errors.h"

struct rn_claimer {
    struct rn_claimer_cfg cfg;
    rn_claim_fn deliver;
    void *arg;
    struct cn_thread thread;
    struct rn_dagcache dags; /* the claimer thread's only */
    _Atomic uint64_t claimed;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    bool stop; /* protected by mtx */
    bool room; /* protected by mtx: the runner said it has room again (claimer_room) */
};

static bool
stopping(struct rn_claimer *c)
{
    bool s;

    cn_mutex_lock(&c->mtx);
    s = c->stop;
    cn_mutex_unlock(&c->mtx);
    return s;
}

/* Sleeps ms unless stopped meanwhile. */
static void
pause_ms(struct rn_claimer *c, int64_t ms)
{
    int64_t until = cn_mono_ms() + ms;

    cn_mutex_lock(&c->mtx);
    while (!c->stop && cn_mono_ms() < until) {
        cn_cond_wait_until(&c->cond, &c->mtx, until);
    }
    cn_mutex_unlock(&c->mtx);
}

/* A claimed instance whose version cannot run fails at once, under its new lease. */
static void
fail_version(struct rn_claimer *c, const struct rn_claimed *cl, const char *why)
{
    struct rn_backend *b = c->cfg.backend;
    struct ir_val err = ir_null();
    struct cn_errmsg em = {{0}};
    char id[37];
    cn_err rv;

    cn_uuid_format(cl->instance_id.b, id);
    {
        const struct cn_log_field f[] = {{"instance", id}, {"workflow", cl->workflow}};
        cn_log_fields(CN_LOG_ERROR, f, 2, "instance %s (%s): its workflow version cannot run: %s",
                      id, cl->workflow, why);
    }
    rv = rn_error_new(RN_ERR_WORKFLOW, why, &err);
    if (rv == CN_UTF8) {
        rv = rn_error_new(RN_ERR_WORKFLOW, "the workflow version cannot be compiled", &err);
    }
    if (rv != CN_OK) {
        cn_oom("WorkflowError");
    }
    if (b->ops->fail(b, cl->instance_id, cl->lock, err, &em) != CN_OK) {
        cn_log(CN_LOG_ERROR, "cannot mark %s failed: %s (it is retried when its lease expires)", id,
               em.text);
    }
    ir_val_release(err);
}

/* The runner's wake when it has room again (cfg.room); called under the pool's lock, so it
 * takes nothing but the claimer's own mutex. */
static void
claimer_room(void *arg)
{
    struct rn_claimer *c = arg;

    cn_mutex_lock(&c->mtx);
    c->room = true;
    cn_cond_broadcast(&c->cond);
    cn_mutex_unlock(&c->mtx);
}

/* How many instances the runner has room for by its workers' backlog (cfg.room). When none,
 * the pool calls claimer_room once it has. */
static size_t
backlog_room(struct rn_claimer *c)
{
    if (c->cfg.room == NULL) {
        return SIZE_MAX;
    }
    cn_mutex_lock(&c->mtx);
    c->room = false;
    cn_mutex_unlock(&c->mtx);
    return c->cfg.room(c->cfg.room_arg, claimer_room, c);
}

/* Waits until the backlog has room again (claimer_room), or the poll interval passes (the
 * wake is the fast path, not the only one: orphans are looked for at that pace meanwhile). */
static void
wait_for_room(struct rn_claimer *c)
{
    int64_t until = cn_mono_ms() + c->cfg.poll_interval_ms;

    cn_mutex_lock(&c->mtx);
    while (!c->stop && !c->room && cn_mono_ms() < until) {
        cn_cond_wait_until(&c->cond, &c->mtx, until);
    }
    cn_mutex_unlock(&c->mtx);
}

static void *
claimer_main(void *arg)
{
    struct rn_claimer *c = arg;
    struct rn_backend *b = c->cfg.backend;
    struct rn_backoff backoff = RN_BACKOFF_INIT;
    /* Orphans may be claimed from this monotonic instant on; INT64_MAX: an outage is going on */
    int64_t orphans_from = 0;
    /* Until when (monotonic) cairn.claim_waits says this claimer waits */
    int64_t announced = 0;

    while (!stopping(c)) {
        struct cn_errmsg em = {{0}};
        struct rn_claimed *cl = NULL;
        size_t n = 0, i, room, active, orphans, fresh;
        int64_t now;
        bool confirmed;

        fresh = backlog_room(c);
        active = atomic_load(c->cfg.active);
        now = cn_mono_ms();
        confirmed = c->cfg.leases_confirmed_ms == NULL ||
                    now - atomic_load(c->cfg.leases_confirmed_ms) < c->cfg.lock_ttl_ms;

        if (!confirmed) {
            orphans_from = INT64_MAX;
        } else if (orphans_from == INT64_MAX) {
            orphans_from = now + c->cfg.heartbeat_ms + 1000;
        }
        orphans =
            confirmed && now >= orphans_from &&
                    (c->cfg.orphans_from_ms == NULL || now >= atomic_load(c->cfg.orphans_from_ms))
                ? SIZE_MAX
                : 0;

        room = active < c->cfg.max_instances ? c->cfg.max_instances - active : 0;
        if (room > RN_CLAIM_BATCH) {
            room = RN_CLAIM_BATCH;
        }
        /* Expired leases are taken past a full backlog, a few at a time: a dead runner's
         * instances were already running, and waiting for room kept some idle for seconds
         * after their lease expired; but a survivor taking them all at once left nothing for
         * a restarted runner (0% of the remaining work in the chaos suite's runner-kill9).
         * RN_CLAIM_ORPHANS_MIN per claim is both: every runner polls, the emptiest takes most.
         * Instances nobody holds wait for room. */
        if (fresh > room) {
            fresh = room;
        }
        if (orphans > fresh && orphans > RN_CLAIM_ORPHANS_MIN) {
            orphans = fresh > RN_CLAIM_ORPHANS_MIN ? fresh : RN_CLAIM_ORPHANS_MIN;
        }
        if (room > 0 && (fresh > 0 || orphans > 0)) {
            if (b->ops->claim(b, room, RN_CLAIM_MAX_BYTES, orphans, fresh, c->cfg.lock_ttl_ms, &cl,
                              &n, &em) != CN_OK) {
                int64_t pause = rn_backoff_next(&backoff);
                orphans_from = INT64_MAX;
                cn_log(CN_LOG_ERROR, "claim failed (retrying in %lld ms): %s", (long long) pause,
                       em.text);
                pause_ms(c, pause);
                continue;
            }
            rn_backoff_reset(&backoff);
            if (orphans_from == INT64_MAX) {
                orphans_from = cn_mono_ms() + c->cfg.heartbeat_ms + 1000;
            }
        }
        for (i = 0; i < n; i++) {
            struct rn_claimed *one = &cl[i];
            const struct ir_dag *dag =
                rn_dagcache_get(&c->dags, b, one->version_id, one->workflow, &em);
            struct rn_sev *e;

            if (dag == NULL) {
                fail_version(c, one, em.text);
                continue;
            }
            e = rn_sev_new(RN_SEV_NEW, one->instance_id);
            e->claimed = *one;
            memset(one, 0, sizeof(*one)); /* moved */
            one->input = ir_null();
            e->dag = dag;
            e->claimed_mono_us = cn_mono_us();
            atomic_fetch_add(c->cfg.active, 1);
            atomic_fetch_add(&c->claimed, 1);
            c->deliver(c->arg, e);
        }
        rn_claimed_free(cl, n);
        if (n == room && room > 0) {
            continue; /* more may be due right now */
        }
        if (fresh == 0 && room > 0) {
            wait_for_room(c); /* the backlog is full: wake when it halves */
            continue;
        }
        if (b->ops->announce_wait != NULL && room > 0 &&
            cn_mono_ms() + c->cfg.poll_interval_ms > announced) {
            /* Enqueues notify only while a claimer has said it waits (cairn.wake_claimers):
             * say so for two poll periods, then claim once more before waiting, for what was
             * enqueued before they could see it. A full runner (no room) does not ask: a wake
             * would not let it claim, and its waits are what its enqueues were spared. */
            int64_t span = 2 * (int64_t) c->cfg.poll_interval_ms + 1000;
            if (b->ops->announce_wait(b, span, &em) == CN_OK) {
                announced = cn_mono_ms() + span;
                continue;
            }
            cn_log(CN_LOG_WARN, "announcing a wait for enqueues failed: %s", em.text);
        }
        if (b->ops->wait_enqueue(b, (int) c->cfg.poll_interval_ms, &em) != CN_OK) {
            cn_log(CN_LOG_WARN, "waiting for enqueue notifications failed: %s", em.text);
            orphans_from = INT64_MAX; /* an outage, as a failed claim is */
            pause_ms(c, RN_BACKOFF_FIRST_MS);
        }
    }
    return NULL;
}

cn_err
rn_claimer_start(const struct rn_claimer_cfg *cfg, rn_claim_fn deliver, void *arg,
                 struct rn_claimer **out, struct cn_errmsg *err)
{
    struct rn_claimer *c = cn_xcalloc(1, sizeof(*c));
    cn_err rv;

    c->cfg = *cfg;
    c->deliver = deliver;
    c->arg = arg;
    cn_mutex_init(&c->mtx);
    cn_cond_init(&c->cond);
    if ((rv = cn_thread_start(&c->thread, "cairn-claimer", claimer_main, c, err)) != CN_OK) {
        rn_claimer_free(c);
        *out = NULL;
        return rv;
    }
    *out = c;
    return CN_OK;
}

uint64_t
rn_claimer_claimed(struct rn_claimer *c)
{
    return atomic_load(&c->claimed);
}

void
rn_claimer_stop(struct rn_claimer *c)
{
    if (c == NULL) {
        return;
    }
    cn_cond_raise(&c->mtx, &c->cond, &c->stop);
    cn_thread_wait(&c->thread);
}

void
rn_claimer_free(struct rn_claimer *c)
{
    if (c == NULL) {
        return;
    }
    rn_claimer_stop(c);
    rn_dagcache_fini(&c->dags);
    cn_cond_destroy(&c->cond);
    cn_mutex_destroy(&c->mtx);
    free(c);
}
