/* SPDX-License-Identifier: MIT */
/* Latency histogram (see lathist.h). Pure; no threads. */
#include "runner/core/lathist.h"

#include <math.h>

static unsigned
bucket_of(uint64_t v)
{
    unsigned e, idx;

    if (v < 2 * RN_LATHIST_SUB) {
        return (unsigned) v;
    }
    e = 63u - (unsigned) __builtin_clzll(v); /* v in [2^e, 2^(e+1)), e >= 4 */
    idx = (e - 2) * RN_LATHIST_SUB + (unsigned) ((v >> (e - 3)) - RN_LATHIST_SUB);
    return idx < RN_LATHIST_BUCKETS ? idx : RN_LATHIST_BUCKETS - 1;
}

/* The largest value that falls in bucket idx. */
static uint64_t
bucket_top(unsigned idx)
{
    unsigned e, sub;

    if (idx < 2 * RN_LATHIST_SUB) {
        return idx;
    }
    e = idx / RN_LATHIST_SUB + 2;
    sub = idx % RN_LATHIST_SUB;
    return (((uint64_t) (RN_LATHIST_SUB + sub + 1)) << (e - 3)) - 1;
}

void
rn_lathist_add(struct rn_lathist *h, int64_t us)
{
    uint64_t v = us > 0 ? (uint64_t) us : 0;

    h->b[bucket_of(v)]++;
    h->count++;
    h->sum_us += v;
    if (v > h->max_us) {
        h->max_us = v;
    }
}

uint64_t
rn_lathist_quantile(const struct rn_lathist *h, double q)
{
    uint64_t rank, seen = 0, top;
    unsigned i;

    if (h->count == 0) {
        return 0;
    }
    rank = (uint64_t) ceil(q * (double) h->count);
    if (rank < 1) {
        rank = 1;
    }
    for (i = 0; i < RN_LATHIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            top = i < RN_LATHIST_BUCKETS - 1 ? bucket_top(i) : h->max_us; /* last: open */
            return top < h->max_us ? top : h->max_us;
        }
    }
    return h->max_us;
}

void
rn_lathist_merge(struct rn_lathist *dst, const struct rn_lathist *src)
{
    unsigned i;

    for (i = 0; i < RN_LATHIST_BUCKETS; i++) {
        dst->b[i] += src->b[i];
    }
    dst->count += src->count;
    dst->sum_us += src->sum_us;
    if (src->max_us > dst->max_us) {
        dst->max_us = src->max_us;
    }
}
