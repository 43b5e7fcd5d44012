/* SPDX-License-Identifier: MIT */
/* The lease keeper (see keeper.h). */
#include "runner/engine/keeper.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/exec/idmap.h"

/* Expired leases cleared per reclaim statement: small enough to keep each one short. */
#define RECLAIM_BATCH 1000

struct lease {
    struct rn_iid iid;
    struct rn_token lock;
    uint32_t shard;
};

struct rn_keeper {
    struct rn_keeper_cfg cfg;
    rn_lost_fn lost;
    void *arg;
    struct cn_thread thread;

    pthread_mutex_t reg; /* guards leases and byid */
    struct {
        struct lease *items;
        size_t len, cap;
    } leases;
    struct rn_iidmap byid; /* instance id -> index in leases */

    pthread_mutex_t wake; /* guards stop */
    pthread_cond_t cond;
    bool stop;
};

static void
reg_put(struct rn_keeper *k, const struct lease *l)
{
    uint32_t i;

    if (rn_iidmap_get(&k->byid, l->iid, &i)) {
        k->leases.items[i] = *l; /* claimed again under a new token */
        return;
    }
    CN_VEC_XPUSH(&k->leases, *l);
    if (rn_iidmap_put(&k->byid, l->iid, (uint32_t) (k->leases.len - 1)) != CN_OK) {
        cn_oom("lease registry");
    }
}

static void
reg_del(struct rn_keeper *k, struct rn_iid iid)
{
    size_t last;
    uint32_t i;

    if (!rn_iidmap_get(&k->byid, iid, &i)) {
        return;
    }
    rn_iidmap_del(&k->byid, iid);
    last = k->leases.len - 1;
    if (i != last) {
        k->leases.items[i] = k->leases.items[last];
        if (rn_iidmap_put(&k->byid, k->leases.items[i].iid, i) != CN_OK) {
            cn_oom("lease registry"); /* cannot happen: the key was present */
        }
    }
    k->leases.len--;
}

void
rn_keeper_apply(struct rn_keeper *k, uint32_t shard, const struct rn_lease_op *ops, size_t n)
{
    size_t i;

    if (n == 0) {
        return;
    }
    cn_mutex_lock(&k->reg);
    for (i = 0; i < n; i++) {
        if (ops[i].take) {
            struct lease l;
            l.iid = ops[i].iid;
            l.lock = ops[i].lock;
            l.shard = shard;
            reg_put(k, &l);
        } else {
            uint32_t at;
            /* Only the lease under this token: a newer claim's entry stays. */
            if (rn_iidmap_get(&k->byid, ops[i].iid, &at) &&
                rn_token_eq(k->leases.items[at].lock, ops[i].lock)) {
                reg_del(k, ops[i].iid);
            }
        }
    }
    cn_mutex_unlock(&k->reg);
}

bool
rn_keeper_holds(struct rn_keeper *k, struct rn_iid iid)
{
    uint32_t i;
    bool held;

    cn_mutex_lock(&k->reg);
    held = rn_iidmap_get(&k->byid, iid, &i);
    cn_mutex_unlock(&k->reg);
    return held;
}

size_t
rn_keeper_count(struct rn_keeper *k)
{
    size_t n;

    cn_mutex_lock(&k->reg);
    n = k->leases.len;
    cn_mutex_unlock(&k->reg);
    return n;
}

/* Clears expired leases (runners that died) so their instances show as queued, in batches. */
static void
reclaim_expired(struct rn_keeper *k)
{
    struct rn_backend *b = k->cfg.backend;
    struct cn_errmsg em = {{0}};
    size_t n = 0, total = 0;

    do {
        if (b->ops->reclaim(b, RECLAIM_BATCH, k->cfg.lock_ttl_ms, &n, &em) != CN_OK) {
            cn_log(CN_LOG_ERROR, "reclaiming expired leases failed: %s", em.text);
            return;
        }
        total += n;
    } while (n == RECLAIM_BATCH);
    if (total > 0) {
        cn_log(CN_LOG_INFO, "reclaimed %zu expired lease(s)", total);
    }
}

/* Records a complete renewal that started at t0; reopens the pool's lease gate if it had
 * closed. */
static void
confirm(struct rn_keeper *k, int64_t t0)
{
    int64_t before;

    if (k->cfg.confirmed_ms == NULL) {
        return;
    }
    before = atomic_exchange(k->cfg.confirmed_ms, t0);
    if (k->cfg.reopened != NULL && cn_mono_ms() - before >= (int64_t) k->cfg.lock_ttl_ms) {
        k->cfg.reopened(k->arg);
    }
}

/* Renewal rounds per beat for leases whose rows were busy (being written): a write commits in
 * milliseconds, so the second round almost always finds them free. */
#define RENEW_ROUNDS   3
#define RENEW_RETRY_MS 20

/* Renews every lease held, RN_HEARTBEAT_BATCH at a time (each batch its own short transaction,
 * which never waits for a row lock); asks again for the busy ones; reports the lost ones.
 * Returns whether a heartbeat statement failed (the database is out of reach), not merely met
 * busy rows. */
static bool
renew(struct rn_keeper *k)
{
    struct rn_backend *b = k->cfg.backend;
    struct cn_errmsg em = {{0}};
    struct lease *copy;
    struct rn_lease *leases;
    enum rn_lease_state *st;
    size_t n, i, at, m, busy = 0;
    int failures = 0, round;
    bool complete;
    int64_t t0 = cn_mono_ms(), took;

    cn_mutex_lock(&k->reg);
    n = k->leases.len;
    copy = n > 0 ? cn_xmalloc(n * sizeof(*copy)) : NULL;
    if (n > 0) {
        memcpy(copy, k->leases.items, n * sizeof(*copy));
    }
    cn_mutex_unlock(&k->reg);
    if (n == 0) {
        confirm(k, t0);
        return false;
    }
    leases = cn_xmalloc(n * sizeof(*leases));
    st = cn_xmalloc(n * sizeof(*st));
    for (i = 0; i < n; i++) {
        leases[i].instance_id = copy[i].iid;
        leases[i].lock = copy[i].lock;
        st[i] = RN_LEASE_BUSY;
    }
    for (round = 0; round < RENEW_ROUNDS; round++) {
        struct rn_lease *todo = cn_xmalloc(n * sizeof(*todo));
        size_t *where = cn_xmalloc(n * sizeof(*where));
        enum rn_lease_state *got = cn_xmalloc(n * sizeof(*got));
        size_t nt = 0;

        for (i = 0; i < n; i++) {
            if (st[i] == RN_LEASE_BUSY) {
                todo[nt] = leases[i];
                where[nt++] = i;
            }
        }
        for (at = 0; at < nt; at += m) {
            m = nt - at < RN_HEARTBEAT_BATCH ? nt - at : RN_HEARTBEAT_BATCH;
            if (b->ops->heartbeat(b, todo + at, m, k->cfg.lock_ttl_ms, got + at, &em) != CN_OK) {
                /* Unknown: renewed at the next beat, or reported then. */
                if (failures++ == 0) {
                    cn_log(CN_LOG_ERROR, "lease heartbeat failed: %s", em.text);
                }
                for (i = at; i < at + m; i++) {
                    got[i] = RN_LEASE_RENEWED; /* not retried in this beat */
                }
            }
        }
        for (i = 0; i < nt; i++) {
            st[where[i]] = got[i];
        }
        free(todo);
        free(where);
        free(got);
        busy = 0;
        for (i = 0; i < n; i++) {
            busy += st[i] == RN_LEASE_BUSY;
        }
        if (busy == 0 || failures > 0) {
            break;
        }
        if (round + 1 < RENEW_ROUNDS) {
            struct timespec ts = {0, RENEW_RETRY_MS * 1000000L};
            (void) nanosleep(&ts, NULL);
        }
    }
    for (i = 0; i < n; i++) {
        if (st[i] == RN_LEASE_LOST) {
            struct rn_sev *e = rn_sev_new(RN_SEV_LOST, copy[i].iid);
            e->lock = copy[i].lock;
            k->lost(k->arg, copy[i].shard, e);
        }
    }
    complete = failures == 0 && busy == 0;
    if (complete) {
        /* Every lease is accounted for, and the losses are on their way to the shards (which
         * withdraw those instances' attempts before the pool can dispatch more of them). */
        confirm(k, t0);
    }
    took = cn_mono_ms() - t0;
    if (took > (int64_t) k->cfg.heartbeat_ms / 2 || busy > 0) {
        /* Leases expire when renewal takes longer than the TTL minus the heartbeat period. */
        cn_log(CN_LOG_WARN,
               "renewing %zu lease(s) took %lld ms (heartbeat every %u ms, TTL %u ms); %zu "
               "busy, left for the next beat",
               n, (long long) took, k->cfg.heartbeat_ms, k->cfg.lock_ttl_ms, busy);
    }
    free(copy);
    free(leases);
    free(st);
    return failures > 0;
}

static void *
keeper_main(void *arg)
{
    struct rn_keeper *k = arg;
    int64_t next_beat = cn_mono_ms() + k->cfg.heartbeat_ms;
    int64_t next_reclaim = cn_mono_ms() + k->cfg.reclaim_interval_ms;
    /* Other runners' expired leases (the reclaimer's, and the claimer's orphans) are left
     * alone until a heartbeat period plus a second after this keeper renewed again following a
     * failure or a gap of a lease period: after an outage longer than a lease every lease has
     * expired, including those of live runners that have not renewed yet. INT64_MAX: renewal
     * is failing now. Only a failed statement counts: busy rows are this runner's own writes.
     * A claimer that had not seen the outage itself (it was waiting for a notification, or
     * had no room) took another runner's instances the moment their leases expired, before
     * that runner's next beat renewed them, and both ran their next attempts (13 duplicate
     * executions in one CI run of the chaos suite's pg-restart). */
    int64_t last_ok = cn_mono_ms(), orphans_from = 0;

    cn_mutex_lock(&k->wake);
    for (;;) {
        while (!k->stop && cn_mono_ms() < next_beat) {
            cn_cond_wait_until(&k->cond, &k->wake, next_beat);
        }
        if (k->stop) {
            break;
        }
        cn_mutex_unlock(&k->wake);
        {
            int64_t t0 = cn_mono_ms();
            if (renew(k)) {
                orphans_from = INT64_MAX;
            } else {
                if (orphans_from == INT64_MAX || t0 - last_ok >= (int64_t) k->cfg.lock_ttl_ms) {
                    orphans_from = t0 + k->cfg.heartbeat_ms + 1000;
                }
                last_ok = t0;
            }
            if (k->cfg.orphans_from_ms != NULL) {
                atomic_store(k->cfg.orphans_from_ms, orphans_from);
            }
        }
        next_beat = cn_mono_ms() + k->cfg.heartbeat_ms;
        if (k->cfg.reclaim_interval_ms != 0 && cn_mono_ms() >= next_reclaim &&
            cn_mono_ms() >= orphans_from) {
            reclaim_expired(k);
            next_reclaim = cn_mono_ms() + k->cfg.reclaim_interval_ms;
        }
        cn_mutex_lock(&k->wake);
    }
    cn_mutex_unlock(&k->wake);
    return NULL;
}

cn_err
rn_keeper_start(const struct rn_keeper_cfg *cfg, rn_lost_fn lost, void *arg, struct rn_keeper **out,
                struct cn_errmsg *err)
{
    struct rn_keeper *k = cn_xcalloc(1, sizeof(*k));
    cn_err rv;

    k->cfg = *cfg;
    k->lost = lost;
    k->arg = arg;
    cn_mutex_init(&k->reg);
    cn_mutex_init(&k->wake);
    cn_cond_init(&k->cond);
    if ((rv = cn_thread_start(&k->thread, "cairn-keeper", keeper_main, k, err)) != CN_OK) {
        rn_keeper_stop(k);
        *out = NULL;
        return rv;
    }
    *out = k;
    return CN_OK;
}

void
rn_keeper_stop(struct rn_keeper *k)
{
    if (k == NULL) {
        return;
    }
    cn_cond_raise(&k->wake, &k->cond, &k->stop);
    cn_thread_wait(&k->thread);
    free(k->leases.items);
    rn_iidmap_fini(&k->byid);
    cn_cond_destroy(&k->cond);
    cn_mutex_destroy(&k->wake);
    cn_mutex_destroy(&k->reg);
    free(k);
}
