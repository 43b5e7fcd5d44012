/* SPDX-License-Identifier: MIT */
/*
 * A shard's thread: its inbox, its wait (for an event or its next timer), and carrying out what
 * the shard core (shard.h) outputs: lease changes to the keeper, writes to the persisters,
 * cancels and dispatches to the worker pool, counts to the runner. All decisions are the
 * core's; this file only moves things between threads.
 *
 * Threads: one thread per shard; rn_shardloop_post from any thread (claimer, pool callbacks,
 * persisters, keeper). The inbox mutex guards the inbox and the stop flag and is never held
 * while calling anything else; the busy gauge has its own mutex (struct rn_busy), taken with no
 * other lock held.
 */
#ifndef RUNNER_SHARDLOOP_H
#define RUNNER_SHARDLOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "runner/core/shard.h"
#include "runner/engine/keeper.h"
#include "runner/engine/persister.h"
#include "runner/engine/ticker.h"
#include "runner/pool/pool.h"

/* Instances busy (writing, or with actions in flight) over every shard, and a wait for none:
 * what a graceful stop waits for. */
struct rn_busy {
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    int64_t total; /* protected by mtx */
};

void rn_busy_init(struct rn_busy *b);
void rn_busy_fini(struct rn_busy *b);
/* Waits until no instance is busy or the monotonic instant deadline_ms; returns how many are. */
int64_t rn_busy_wait_idle(struct rn_busy *b, int64_t deadline_ms);

struct rn_shardloop_deps {
    struct rn_pool *pool;
    struct rn_persister *persister;
    struct rn_keeper *keeper;
    _Atomic size_t *active; /* the runner's held-instance count; decremented here */
    struct rn_busy *busy;
    struct rn_late_queue *late; /* where late results go (the ticker records them) */
};

/* What a shard did, for the runner's statistics. */
struct rn_shardloop_counts {
    uint64_t completed, failed, evicted, lost, writes, dispatched;
};

struct rn_shardloop;

CN_MUST_CHECK cn_err rn_shardloop_start(const struct rn_shard_cfg *cfg,
                                        const struct rn_shardloop_deps *deps,
                                        struct rn_shardloop **out, struct cn_errmsg *err);
/* Queues an event for the shard (ownership passes). */
void rn_shardloop_post(struct rn_shardloop *l, struct rn_sev *e);
void rn_shardloop_counts(struct rn_shardloop *l, struct rn_shardloop_counts *c);
/* Stops the thread and hands every instance back: appends their leases to *handed (a vector of
 * struct rn_lease_op) for the caller to release. After this the claim-latency histogram is
 * final. Events posted later are freed unread by rn_shardloop_free. */
void rn_shardloop_stop(struct rn_shardloop *l, struct rn_shard_out *handed);
const struct rn_lathist *rn_shardloop_claim_latency(struct rn_shardloop *l);
/* Frees the loop (stopped first if it was not). NULL: no-op. */
void rn_shardloop_free(struct rn_shardloop *l);

#endif
