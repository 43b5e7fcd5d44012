/* SPDX-License-Identifier: MIT */
/*
 * The runner's retry pause after a storage error (claim, persist): 200 ms, doubling, capped at
 * 5 s. Short enough that a database restart costs well under a second of extra wait once it is
 * back (the PostgreSQL restart test measures that), long enough that a dead database is not
 * hammered. One definition for every retry loop of the runner. Plain data, no threads.
 */
#ifndef RUNNER_BACKOFF_H
#define RUNNER_BACKOFF_H

#include <stdint.h>

#define RN_BACKOFF_FIRST_MS 200
#define RN_BACKOFF_MAX_MS   5000

struct rn_backoff {
    int64_t next_ms;
};

#define RN_BACKOFF_INIT     \
    {                       \
        RN_BACKOFF_FIRST_MS \
    }

/* The pause to take now; the next one is twice as long, up to the cap. */
static inline int64_t
rn_backoff_next(struct rn_backoff *b)
{
    int64_t now = b->next_ms;

    b->next_ms = now * 2 > RN_BACKOFF_MAX_MS ? RN_BACKOFF_MAX_MS : now * 2;
    return now;
}

static inline void
rn_backoff_reset(struct rn_backoff *b)
{
    b->next_ms = RN_BACKOFF_FIRST_MS;
}

#endif
