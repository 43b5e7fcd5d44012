/* SPDX-License-Identifier: MIT */
/* The latency histogram: exact small values, bounded relative error, quantile ranks, merge. */
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "runner/core/lathist.h"

Test(lathist, empty_has_no_quantiles)
{
    struct rn_lathist h;

    memset(&h, 0, sizeof(h));
    cr_assert_eq(rn_lathist_quantile(&h, 0.5), 0);
    cr_assert_eq(rn_lathist_quantile(&h, 1.0), 0);
}

Test(lathist, small_values_are_exact)
{
    struct rn_lathist h;
    int64_t v;

    memset(&h, 0, sizeof(h));
    for (v = 1; v <= 10; v++) {
        rn_lathist_add(&h, v);
    }
    cr_assert_eq(h.count, 10);
    cr_assert_eq(h.sum_us, 55);
    cr_assert_eq(rn_lathist_quantile(&h, 0.5), 5);
    cr_assert_eq(rn_lathist_quantile(&h, 0.9), 9);
    cr_assert_eq(rn_lathist_quantile(&h, 1.0), 10);
    cr_assert_eq(rn_lathist_quantile(&h, 0.01), 1);
}

Test(lathist, relative_error_is_bounded)
{
    /* One sample each: the only quantile is that sample's bucket top, capped at the max. */
    int64_t vs[] = {16, 17, 100, 999, 1000, 1023, 1024, 4711, 65535, 1000000, 123456789};
    size_t i;

    for (i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        struct rn_lathist h;
        uint64_t q;

        memset(&h, 0, sizeof(h));
        rn_lathist_add(&h, 1); /* below: the median is the other sample */
        rn_lathist_add(&h, vs[i]);
        rn_lathist_add(&h, vs[i] * 4);
        q = rn_lathist_quantile(&h, 0.5);
        cr_assert_geq(q, (uint64_t) vs[i], "%lld -> %llu", (long long) vs[i],
                      (unsigned long long) q);
        cr_assert_leq((double) q, (double) vs[i] * 1.125, "%lld -> %llu", (long long) vs[i],
                      (unsigned long long) q);
    }
}

Test(lathist, quantiles_follow_ranks)
{
    struct rn_lathist h;
    int64_t v;

    memset(&h, 0, sizeof(h));
    for (v = 1; v <= 1000; v++) {
        rn_lathist_add(&h, v * 1000); /* 1 ms .. 1 s */
    }
    cr_assert_geq(rn_lathist_quantile(&h, 0.5), 500000);
    cr_assert_leq(rn_lathist_quantile(&h, 0.5), 562500);
    cr_assert_geq(rn_lathist_quantile(&h, 0.99), 990000);
    cr_assert_eq(rn_lathist_quantile(&h, 1.0), 1000000); /* the max, not the bucket top */
    cr_assert_eq(h.max_us, 1000000);
}

Test(lathist, negative_and_huge_samples)
{
    struct rn_lathist h;

    memset(&h, 0, sizeof(h));
    rn_lathist_add(&h, -5);
    cr_assert_eq(rn_lathist_quantile(&h, 1.0), 0);
    rn_lathist_add(&h, INT64_MAX);
    cr_assert_eq(h.count, 2);
    cr_assert_eq(rn_lathist_quantile(&h, 1.0), (uint64_t) INT64_MAX);
    cr_assert_eq(h.b[RN_LATHIST_BUCKETS - 1], 1);
}

Test(lathist, merge_adds_samples)
{
    struct rn_lathist a, b;

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    rn_lathist_add(&a, 3);
    rn_lathist_add(&b, 7);
    rn_lathist_add(&b, 2000);
    rn_lathist_merge(&a, &b);
    cr_assert_eq(a.count, 3);
    cr_assert_eq(a.sum_us, 2010);
    cr_assert_eq(a.max_us, 2000);
    cr_assert_eq(rn_lathist_quantile(&a, 0.5), 7);
}
