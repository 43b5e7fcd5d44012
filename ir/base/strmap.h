/* SPDX-License-Identifier: MIT */
/*
 * A string -> uint32 map with open addressing, for symbol tables in the compiler (variables,
 * functions). Keys are borrowed: they must outlive the map (they live in the AST arena).
 * Not thread-safe.
 */
#ifndef IR_BASE_STRMAP_H
#define IR_BASE_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"

struct cn_strmap_ent {
    const char *key; /* NULL: an empty slot */
    uint32_t val;
};

struct cn_strmap {
    struct cn_strmap_ent *ents;
    size_t len, cap; /* cap is 0 or a power of two */
};

#define CN_STRMAP_INIT \
    {                  \
        NULL, 0, 0     \
    }

/* Inserts key -> val, or replaces the value of an existing key. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err cn_strmap_put(struct cn_strmap *m, const char *key, uint32_t val);
/* Looks key up; returns true and sets *val when present. */
bool cn_strmap_get(const struct cn_strmap *m, const char *key, uint32_t *val);
void cn_strmap_fini(struct cn_strmap *m);

/* FNV-1a over a NUL-terminated string. */
uint64_t cn_hash_str(const char *s);

#endif
