/* SPDX-License-Identifier: MIT */
/*
 * The two clocks, under names that cannot be confused:
 * - monotonic (cn_mono_ms, cn_mono_us): durations, timeouts, "how long since"; never goes back,
 *   means nothing outside this process;
 * - wall (cn_wall_ms): instants that are stored or cross processes (action deadlines and timers
 *   in snapshots, scheduled times, log timestamps).
 * A comparison or difference takes both sides from the same clock. Code that must be tested
 * without time passing (the shard core, the executor) takes a struct cn_now instead of reading
 * a clock, so a test states the instant it means. No state, no threads.
 */
#ifndef IR_BASE_CLOCK_H
#define IR_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t
cn_clock_read_us_(clockid_t c)
{
    struct timespec ts;

    (void) clock_gettime(c, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t
cn_mono_us(void)
{
    return cn_clock_read_us_(CLOCK_MONOTONIC);
}

static inline int64_t
cn_mono_ms(void)
{
    return cn_clock_read_us_(CLOCK_MONOTONIC) / 1000;
}

static inline int64_t
cn_wall_ms(void)
{
    return cn_clock_read_us_(CLOCK_REALTIME) / 1000;
}

/* One instant on both clocks, read once and handed to code that must not read clocks itself. */
struct cn_now {
    int64_t wall_ms;
    int64_t mono_us;
};

static inline struct cn_now
cn_now_read(void)
{
    struct cn_now n = {cn_wall_ms(), cn_mono_us()};

    return n;
}

#endif
