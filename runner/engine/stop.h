/* SPDX-License-Identifier: MIT */
/*
 * A stop flag that a thread can pause on. The engine's threads that back off after an error
 * (canceller, ticker, pruner) pause with rn_stop_pause, which returns as soon as rn_stop_set is
 * called instead of waking every few milliseconds to look: a stop is never delayed by a
 * backoff, and an idle thread costs nothing.
 *
 * Threads and locks: rn_stop_set from any thread, the rest from the thread that owns the flag.
 * `mtx` is a leaf (nothing is taken under it); rn_stop_is_set reads an atomic, no lock.
 */
#ifndef RUNNER_ENGINE_STOP_H
#define RUNNER_ENGINE_STOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct rn_stop {
    atomic_bool set;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
};

void rn_stop_init(struct rn_stop *s);
void rn_stop_fini(struct rn_stop *s);
/* Sets the flag and wakes a pause. */
void rn_stop_set(struct rn_stop *s);
bool rn_stop_is_set(struct rn_stop *s);
/* Waits until the monotonic clock reaches at_mono_ms or the flag is set; true when it was set. */
bool rn_stop_wait_until(struct rn_stop *s, int64_t at_mono_ms);
/* rn_stop_wait_until(now + ms). */
bool rn_stop_pause(struct rn_stop *s, int64_t ms);

#endif
