/* SPDX-License-Identifier: MIT */
/*
 * Mutexes and condition variables that cannot fail silently, and condition waits on the
 * monotonic clock. A pthread call that fails here means a corrupted lock or a programming error
 * (EINVAL, EDEADLK, EPERM), never a condition to recover from, so every one aborts with a
 * message naming the call. Condition variables made by cn_cond_init measure their timeouts on
 * CLOCK_MONOTONIC, so a wall-clock step (NTP, an operator) neither stalls nor hurries a wait.
 * No state of its own.
 */
#ifndef IR_BASE_SYNC_H
#define IR_BASE_SYNC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ir/base/err.h"

void cn_mutex_init(pthread_mutex_t *m);
void cn_mutex_destroy(pthread_mutex_t *m);
void cn_mutex_lock(pthread_mutex_t *m);
void cn_mutex_unlock(pthread_mutex_t *m);

/* A condition variable whose timed waits use CLOCK_MONOTONIC. */
void cn_cond_init(pthread_cond_t *c);
void cn_cond_destroy(pthread_cond_t *c);
void cn_cond_signal(pthread_cond_t *c);
void cn_cond_broadcast(pthread_cond_t *c);
void cn_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
/* Waits until signalled or until the monotonic instant at_mono_ms (cn_mono_ms()); spurious
 * wake-ups return early, so callers re-check their condition in a loop. */
void cn_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t at_mono_ms);

/* Joins a thread, aborting if it cannot be joined (it was never started, or joined twice). */
void cn_thread_join(pthread_t t);

/* Sets *flag under m and wakes every waiter on c: how an owner tells the threads that wait on c
 * to stop (or to look again), without a wake-up lost between their check and their wait. */
void cn_cond_raise(pthread_mutex_t *m, pthread_cond_t *c, bool *flag);

/* A thread its owner starts and later waits for. `started` says whether there is one to join,
 * so an owner whose start failed half-way can run its one stop path. */
struct cn_thread {
    pthread_t id;
    bool started;
};

/* Starts fn(arg) on a thread named `name`, the name top -H, ps -L, gdb and perf show (the
 * kernel keeps 15 characters). Running out of threads is an error the caller reports, not an
 * abort: CN_NOMEM, "cannot start the NAME thread: REASON". */
cn_err cn_thread_start(struct cn_thread *t, const char *name, void *(*fn)(void *), void *arg,
                       struct cn_errmsg *err);
/* Joins the thread if one was started; afterwards there is none. */
void cn_thread_wait(struct cn_thread *t);

#endif
