/* SPDX-License-Identifier: MIT */
/*
 * A latency histogram with bounded relative error: 8 buckets per power of two over
 * microseconds, exact below 16 µs, so a quantile is off by at most 12.5% with a fixed 2.4 KiB
 * whatever the number of samples (the runner records every dispatch). Not thread-safe: the
 * owner guards it (the pool records under its mutex and copies it out with its stats).
 */
#ifndef RUNNER_LATHIST_H
#define RUNNER_LATHIST_H

#include <stdint.h>

#define RN_LATHIST_SUB     8   /* buckets per power of two */
#define RN_LATHIST_BUCKETS 304 /* up to 2^40 µs (12 days); longer samples land in the last */

struct rn_lathist {
    uint64_t count;
    uint64_t sum_us;
    uint64_t max_us;
    uint64_t b[RN_LATHIST_BUCKETS];
};

/* Records one sample; a negative one (a clock step) counts as 0. */
void rn_lathist_add(struct rn_lathist *h, int64_t us);

/* The q-quantile (0 < q <= 1) in µs: the upper bound of the bucket holding the sample of rank
 * ceil(q * count), never above the largest sample. 0 when empty. */
uint64_t rn_lathist_quantile(const struct rn_lathist *h, double q);

/* Adds src's samples to dst. */
void rn_lathist_merge(struct rn_lathist *dst, const struct rn_lathist *src);

#endif
