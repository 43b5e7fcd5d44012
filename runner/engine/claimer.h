/* SPDX-License-Identifier: MIT */
/*
 * The claimer: one thread that claims due instances in batches (as many as the runner has room
 * for, at most RN_CLAIM_BATCH, and no more than its workers' backlog has room for, but for up to
 * RN_CLAIM_ORPHANS_MIN expired leases: cfg.room), finds each one's compiled template in its DAG
 * cache, and hands each to the runner as a NEW event. It waits for enqueue notifications (or the
 * poll interval) when nothing is due, and backs off after a storage error. An instance whose
 * version cannot be compiled is failed at once with WorkflowError, under its new lease.
 *
 * Expired leases (orphans) are taken only while this runner's own leases are confirmed, and not
 * until a heartbeat period plus a second after the database came back from an outage (a failed
 * claim or wait for notifications, a failed lease renewal: the keeper's orphans_from_ms, or
 * leases unconfirmed for a lease period): every live runner renews its own leases in that time.
 * Otherwise, after an outage longer than a lease, when every lease has expired, each runner's
 * claimer took the others' instances before their keepers could renew them, and ran their attempts
 * again (401 duplicate executions in the chaos suite's pg-down, against 32 in flight).
 *
 * Before it waits for a notification it says so in cairn.claim_waits (backend announce_wait),
 * for two poll periods, and claims once more: enqueues notify only while some claimer waits,
 * since a NOTIFY makes the notifying transactions commit one at a time (sql/0033).
 *
 * Threads: its own thread; rn_claimer_start/stop from the runner's. The stop flag is guarded
 * by a mutex used only to wake the thread early from a pause (no other lock is taken with it;
 * the room wake takes it under the pool's lock, so it is a leaf). `active` is the runner's count of
 * held instances (atomic; shards decrement it).
 */
#ifndef RUNNER_CLAIMER_H
#define RUNNER_CLAIMER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "runner/core/shard.h"

#define RN_CLAIM_BATCH 256
/* Expired leases a claim may take past a full backlog (claimer.c). */
#define RN_CLAIM_ORPHANS_MIN 32
/* Stored bytes of inputs and snapshots per claim. Without it one claim of a few instances with
 * 20 MB inputs loaded 1.2 GB at once, held it while hydrating, and starved the runner until its
 * leases lapsed; a batch that large buys nothing, since the claim is repeated at once when it
 * fills. */
#define RN_CLAIM_MAX_BYTES (64u << 20)

struct rn_claimer_cfg {
    struct rn_backend *backend; /* used by the claimer thread only */
    uint32_t max_instances;
    uint32_t lock_ttl_ms;
    uint32_t heartbeat_ms;
    uint32_t poll_interval_ms;
    _Atomic size_t *active; /* incremented here per claimed instance */
    /* The runner's lease confirmation (pool.h, the lease gate); NULL: always confirmed. */
    _Atomic int64_t *leases_confirmed_ms;
    /* The keeper's earliest instant for orphans (keeper.h); NULL: no such bound. */
    _Atomic int64_t *orphans_from_ms;
    /* How many more the runner has room for by its workers' backlog (rn_pool_room); when it
     * says 0 it calls wake(wake_arg) once it has. NULL: room is max_instances alone. */
    size_t (*room)(void *room_arg, void (*wake)(void *), void *wake_arg);
    void *room_arg;
};

/* Called on the claimer thread with a NEW event (ownership passes). */
typedef void (*rn_claim_fn)(void *arg, struct rn_sev *e);

struct rn_claimer;

CN_MUST_CHECK cn_err rn_claimer_start(const struct rn_claimer_cfg *cfg, rn_claim_fn deliver,
                                      void *arg, struct rn_claimer **out, struct cn_errmsg *err);
/* Instances claimed so far. */
uint64_t rn_claimer_claimed(struct rn_claimer *c);
/* Claims nothing more and joins the thread (within one poll interval). The templates stay
 * valid until rn_claimer_free. */
void rn_claimer_stop(struct rn_claimer *c);
/* Frees the DAG cache: call once no instance uses a template any more. NULL: no-op. */
void rn_claimer_free(struct rn_claimer *c);

#endif
