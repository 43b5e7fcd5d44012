/* SPDX-License-Identifier: MIT */
/* Open-addressing string map with linear probing, grown at 50% load. */
#include "ir/base/strmap.h"

#include <stdlib.h>
#include <string.h>

uint64_t
cn_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;

    while (*s) {
        h ^= (unsigned char) *s++;
        h *= 1099511628211ULL;
    }
    return h;
}

static cn_err
strmap_grow(struct cn_strmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16, i, j;
    const char **keys = calloc(ncap, sizeof(*keys));
    uint32_t *vals = calloc(ncap, sizeof(*vals));

    if (keys == NULL || vals == NULL) {
        free(keys);
        free(vals);
        return CN_NOMEM;
    }
    for (i = 0; i < m->cap; i++) {
        if (m->keys[i] == NULL) {
            continue;
        }
        j = (size_t) cn_hash_str(m->keys[i]) & (ncap - 1);
        while (keys[j] != NULL) {
            j = (j + 1) & (ncap - 1);
        }
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    return CN_OK;
}

cn_err
cn_strmap_put(struct cn_strmap *m, const char *key, uint32_t val)
{
    size_t j;

    if ((m->len + 1) * 2 > m->cap && strmap_grow(m) != CN_OK) {
        return CN_NOMEM;
    }
    j = (size_t) cn_hash_str(key) & (m->cap - 1);
    while (m->keys[j] != NULL) {
        if (strcmp(m->keys[j], key) == 0) {
            m->vals[j] = val;
            return CN_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->vals[j] = val;
    m->len++;
    return CN_OK;
}

bool
cn_strmap_get(const struct cn_strmap *m, const char *key, uint32_t *val)
{
    size_t j;

    if (m->cap == 0) {
        return false;
    }
    j = (size_t) cn_hash_str(key) & (m->cap - 1);
    while (m->keys[j] != NULL) {
        if (strcmp(m->keys[j], key) == 0) {
            *val = m->vals[j];
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return false;
}

void
cn_strmap_fini(struct cn_strmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}
