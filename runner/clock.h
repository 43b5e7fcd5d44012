/* SPDX-License-Identifier: MIT */
/*
 * Clock readings in milliseconds and microseconds, one definition for the runner, the pool,
 * the backends and cairnctl (they each had their own). CLOCK_MONOTONIC for durations,
 * CLOCK_REALTIME for deadlines and timestamps that cross processes. No state, no threads.
 */
#ifndef RUNNER_CLOCK_H
#define RUNNER_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t
rn_clock_ms(clockid_t c)
{
    struct timespec ts;

    clock_gettime(c, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t
rn_clock_us(clockid_t c)
{
    struct timespec ts;

    clock_gettime(c, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
