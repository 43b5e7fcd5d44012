/* SPDX-License-Identifier: MIT */
/*
 * The persisters: N threads, each with its own backend connection, that take every write
 * queued by every shard into one backend transaction and acknowledge each write to its shard.
 * One transaction commits while the next is sent. Since an instance has at most one write in
 * flight, no two transactions touch the same instance and their order does not matter.
 * A batch that fails (storage down) goes back to the front of the queue, in order, and is
 * retried with a capped exponential backoff; when stopping with storage down, the writes still
 * queued are acknowledged as not written (their instances resume elsewhere from the last
 * committed state).
 *
 * Threads: the persister threads; rn_persister_post from any thread. One mutex guards the queue,
 * the stop flag and the statistics; it is never held while calling the backend or the ack
 * callback, and no other lock is taken while it is held.
 */
#ifndef RUNNER_PERSISTER_H
#define RUNNER_PERSISTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "runner/core/lathist.h"
#include "runner/core/wreq.h"

#define RN_PERSISTERS_MAX 8

struct rn_persister;

/* Called once per write, from a persister thread, with no lock held: committed (lost false),
 * fenced off (lost true), or not written at all (failed true). q is freed after the call. */
typedef void (*rn_persist_ack_fn)(void *arg, const struct rn_wreq *q, bool lost, bool failed);

/* Starts one thread per backend in backends[0..n) (1 <= n <= RN_PERSISTERS_MAX); the backends
 * stay the caller's. Returns CN_OK, or CN_INVAL/CN_IO with err saying why. */
CN_MUST_CHECK cn_err rn_persister_start(struct rn_backend *const *backends, uint32_t n,
                                        rn_persist_ack_fn ack, void *arg, struct rn_persister **out,
                                        struct cn_errmsg *err);
/* Queues writes[0..n) (ownership passes) and wakes a persister. */
void rn_persister_post(struct rn_persister *p, struct rn_wreq *const *writes, size_t n);
/* Transactions committed, and the duration of each. */
/* Ends a retry pause after a storage error now: the database is known to be back. */
void rn_persister_retry_now(struct rn_persister *p);
void rn_persister_stats(struct rn_persister *p, uint64_t *batches, struct rn_lathist *latency);
/* Writes what is queued (or acknowledges it as failed if storage is down), joins the threads
 * and frees everything. NULL: no-op. */
void rn_persister_stop(struct rn_persister *p);

#endif
