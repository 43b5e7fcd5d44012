/* SPDX-License-Identifier: MIT */
/*
 * The lease keeper: the registry of the leases this runner holds (instance, claim token, owning
 * shard), and one thread that renews all of them every heartbeat period, reports each lease
 * found gone to its shard (which evicts the instance unless a write of it is in flight; that
 * write's ACK decides), and every reclaim interval clears the expired leases of runners that
 * died so their instances show as queued.
 *
 * Threads: the keeper thread; rn_keeper_apply from the shard threads. Two mutexes, never held
 * together and never across a backend call or the lost callback: `reg` guards the registry,
 * `wake` the stop flag (and wakes the thread early to stop).
 */
#ifndef RUNNER_KEEPER_H
#define RUNNER_KEEPER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "runner/core/shard.h"

struct rn_keeper_cfg {
    struct rn_backend *backend; /* used by the keeper thread only */
    uint32_t lock_ttl_ms;
    uint32_t heartbeat_ms;
    uint32_t reclaim_interval_ms; /* 0: never */
    /* Set to the monotonic instant each complete renewal started (every lease renewed or
     * reported lost); the pool's lease gate reads it (pool.h). */
    _Atomic int64_t *confirmed_ms;
    /* Called on the keeper thread after a renewal that reopened the gate (the one before was
     * more than lock_ttl_ms ago), with the lost callback's arg. NULL: none. */
    void (*reopened)(void *arg);
    /* Set to the monotonic instant from which expired leases of other runners may be taken:
     * INT64_MAX while renewals fail (the database is out of reach), then a heartbeat period
     * plus a second after they succeed again, the time every live runner needs to renew its
     * own (claimer.h). The reclaimer waits for it too. NULL: not published. */
    _Atomic int64_t *orphans_from_ms;
};

/* Called on the keeper thread with a LOST event for shard `shard` (ownership passes). */
typedef void (*rn_lost_fn)(void *arg, uint32_t shard, struct rn_sev *e);

struct rn_keeper;

CN_MUST_CHECK cn_err rn_keeper_start(const struct rn_keeper_cfg *cfg, rn_lost_fn lost, void *arg,
                                     struct rn_keeper **out, struct cn_errmsg *err);
/* Records leases taken and dropped by shard `shard`, in order. */
void rn_keeper_apply(struct rn_keeper *k, uint32_t shard, const struct rn_lease_op *ops, size_t n);
/* Whether a lease on instance iid is held now (any thread). */
bool rn_keeper_holds(struct rn_keeper *k, struct rn_iid iid);
/* Leases held now. */
size_t rn_keeper_count(struct rn_keeper *k);
/* Stops renewing and joins the thread; frees everything. NULL: no-op. */
void rn_keeper_stop(struct rn_keeper *k);

#endif
