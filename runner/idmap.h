/* SPDX-License-Identifier: MIT */
/*
 * A map from 16-byte ids (execution UUIDs) to uint32 handles, open addressing with linear
 * probing and backward-shift deletion, so a 10 000-element spread looks results up in O(1)
 * with no tombstones. Not thread-safe (one instance, one shard thread).
 */
#ifndef RUNNER_IDMAP_H
#define RUNNER_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"

struct rn_idmap {
    uint8_t (*keys)[16];
    uint32_t *vals;
    uint8_t *used;
    size_t len, cap; /* cap is 0 or a power of two */
};

/* Inserts or replaces. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err rn_idmap_put(struct rn_idmap *m, const uint8_t key[16], uint32_t val);
bool rn_idmap_get(const struct rn_idmap *m, const uint8_t key[16], uint32_t *val);
void rn_idmap_del(struct rn_idmap *m, const uint8_t key[16]);
void rn_idmap_fini(struct rn_idmap *m);

#endif
