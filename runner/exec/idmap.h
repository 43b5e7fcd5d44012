/* SPDX-License-Identifier: MIT */
/*
 * A map from 16-byte keys to uint32 handles, open addressing with linear probing and
 * backward-shift deletion, so a 10 000-element spread looks results up in O(1) with no
 * tombstones. Keys are hashed on their last 8 bytes, which must be well mixed (a random UUID,
 * or a counter stored there).
 *
 * The generic map takes raw bytes; each kind of id gets its own map type over it, so a map of
 * execution ids cannot be asked about an instance id: struct rn_xidmap (the executor's live
 * nodes by execution id) and struct rn_iidmap (a shard's or the lease keeper's instances by
 * instance id). The pool keys its in-flight attempts by an internal counter and uses the
 * generic map directly. Not thread-safe (one owner thread, or the owner's lock).
 */
#ifndef RUNNER_IDMAP_H
#define RUNNER_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "runner/exec/ids.h"

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

/* One typed map per id kind, so that a map of execution ids takes no instance id: struct
 * rn_xidmap (execution id -> handle) and struct rn_iidmap (instance id -> handle), each with
 * _put, _get, _del and _fini as above. Zero-initialised is empty. */
#define RN_IDMAP_OF(map, id)                                                                       \
    struct rn_##map {                                                                              \
        struct rn_idmap m;                                                                         \
    };                                                                                             \
    CN_MUST_CHECK static inline cn_err rn_##map##_put(struct rn_##map *m, struct rn_##id key,      \
                                                      uint32_t val)                                \
    {                                                                                              \
        return rn_idmap_put(&m->m, key.b, val);                                                    \
    }                                                                                              \
    static inline bool rn_##map##_get(const struct rn_##map *m, struct rn_##id key, uint32_t *val) \
    {                                                                                              \
        return rn_idmap_get(&m->m, key.b, val);                                                    \
    }                                                                                              \
    static inline void rn_##map##_del(struct rn_##map *m, struct rn_##id key)                      \
    {                                                                                              \
        rn_idmap_del(&m->m, key.b);                                                                \
    }                                                                                              \
    static inline void rn_##map##_fini(struct rn_##map *m)                                         \
    {                                                                                              \
        rn_idmap_fini(&m->m);                                                                      \
    }
RN_IDMAP_OF(xidmap, xid)
RN_IDMAP_OF(iidmap, iid)
#undef RN_IDMAP_OF

#endif
