/* SPDX-License-Identifier: MIT */
/*
 * Waiting helpers shared by the tests that wait on threads or processes: milliseconds on a
 * clock, the CLOCK_REALTIME deadline that pthread_cond_timedwait takes, and a bounded wait for a
 * counter that another thread raises under a mutex. No state of their own.
 */
#ifndef TESTS_SUPPORT_WAIT_H
#define TESTS_SUPPORT_WAIT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds on clk (CLOCK_MONOTONIC for durations, CLOCK_REALTIME for wall times). */
int64_t t_clock_ms(clockid_t clk);

/* The CLOCK_REALTIME time ms milliseconds from now, for pthread_cond_timedwait. */
struct timespec t_deadline_in(int64_t ms);

/* Waits up to ms for *count (guarded by mtx, signalled on cond) to reach n; true if it did. */
bool t_wait_count(pthread_mutex_t *mtx, pthread_cond_t *cond, const int *count, int n, int ms);

#endif
