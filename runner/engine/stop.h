/* SPDX-License-Identifier: MIT */
/*
 * A thread that runs until it is told to stop, and the stop flag it pauses on. The engine's
 * threads that back off after an error (canceller, ticker, pruner) pause with rn_stop_pause,
 * which returns as soon as rn_stop_set is called instead of waking every few milliseconds to
 * look: a stop is never delayed by a backoff, and an idle thread costs nothing. Their owners
 * start them with rn_stop_start and end them with rn_stop_join, the one way all three stop.
 *
 * Threads and locks: rn_stop_start and rn_stop_join from the owner, rn_stop_set from any thread,
 * the rest from the thread. `mtx` is a leaf (nothing is taken under it) that an owner may also
 * use for state it shares with the thread; rn_stop_is_set reads an atomic, no lock.
 */
#ifndef RUNNER_ENGINE_STOP_H
#define RUNNER_ENGINE_STOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "ir/base/sync.h"

struct rn_stop {
    atomic_bool set;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    struct cn_thread thread;
};

/* Readies the flag and starts fn(arg) on a thread named `name`; when that fails, nothing is left
 * to stop. */
cn_err rn_stop_start(struct rn_stop *s, const char *name, void *(*fn)(void *), void *arg,
                     struct cn_errmsg *err);
/* Sets the flag, waits for the thread to return, and frees the flag. */
void rn_stop_join(struct rn_stop *s);
/* Sets the flag and wakes a pause. */
void rn_stop_set(struct rn_stop *s);
bool rn_stop_is_set(struct rn_stop *s);
/* Waits until the monotonic clock reaches at_mono_ms or the flag is set; true when it was set. */
bool rn_stop_wait_until(struct rn_stop *s, int64_t at_mono_ms);
/* rn_stop_wait_until(now + ms). */
bool rn_stop_pause(struct rn_stop *s, int64_t ms);

#endif
