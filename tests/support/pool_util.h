/* SPDX-License-Identifier: MIT */
/*
 * Helpers for the tests that drive a worker pool (runner/pool/pool.h): submit one attempt with
 * a one-entry kwargs map, and wait (bounded, polling) for one of the pool's counters to reach a
 * value. Header-only (static inline): only the pool's tests include it, and the support library
 * does not link the pool. No state; the pool's own threads and locks are the pool's.
 */
#ifndef TESTS_SUPPORT_POOL_UTIL_H
#define TESTS_SUPPORT_POOL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "runner/pool/pool.h"

/* Submits attempt 1 of id running action with kwargs {key: v}; deadline_ms 0: none. */
static inline void
t_pool_submit(struct rn_pool *p, struct rn_xid id, const char *action, const char *key, int64_t v,
              int64_t deadline_ms)
{
    struct rn_pool_dispatch d;

    memset(&d, 0, sizeof(d));
    d.exec_id = id;
    d.attempt = 1;
    d.action = action;
    cr_assert_eq(ir_map_new(1, &d.kwargs), CN_OK);
    cr_assert_eq(ir_map_set_cstr(&d.kwargs, key, ir_int(v)), CN_OK);
    d.deadline_ms = deadline_ms;
    cr_assert_eq(rn_pool_submit(p, &d), CN_OK);
    ir_val_release(d.kwargs);
}

/* Polls p's stats every 10 ms, for up to ms, until the counter at offset `field` of struct
 * rn_pool_stats (offsetof) equals want. Leaves the last stats in *st; true if it got there. */
static inline bool
t_pool_wait_stat(struct rn_pool *p, size_t field, uint64_t want, int ms, struct rn_pool_stats *st)
{
    uint64_t got;

    for (int waited = 0;; waited += 10) {
        rn_pool_stats(p, st);
        memcpy(&got, (const char *) st + field, sizeof(got));
        if (got == want || waited >= ms) {
            return got == want;
        }
        usleep(10000);
    }
}

#endif
