/* SPDX-License-Identifier: MIT */
/*
 * t_civil_cmp: the order of two civil minutes (runner/ops/cron.h), field by field, for the cron
 * unit test and the cron fuzz target. Header-only (static inline) because the fuzz target links
 * no test support library. No state.
 */
#ifndef TESTS_SUPPORT_CIVIL_CMP_H
#define TESTS_SUPPORT_CIVIL_CMP_H

#include "runner/ops/cron.h"

/* -1, 0 or 1 as a is before, the same minute as, or after b. */
static inline int
t_civil_cmp(const struct rn_civil *a, const struct rn_civil *b)
{
    const int x[] = {a->year, a->month, a->day, a->hour, a->minute};
    const int y[] = {b->year, b->month, b->day, b->hour, b->minute};

    for (int i = 0; i < 5; i++) {
        if (x[i] != y[i]) {
            return x[i] < y[i] ? -1 : 1;
        }
    }
    return 0;
}

#endif
