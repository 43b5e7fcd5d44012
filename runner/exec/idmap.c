/* SPDX-License-Identifier: MIT */
/* 16-byte id -> uint32 map; see idmap.h. */
#include "runner/exec/idmap.h"

#include <stdlib.h>
#include <string.h>

/* Ids are random (UUIDv4), so a few of their bytes are already a good hash. */
static size_t
idmap_slot(const uint8_t key[16], size_t cap)
{
    uint64_t h;

    memcpy(&h, key + 8, sizeof(h));
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return (size_t) h & (cap - 1);
}

static cn_err
idmap_grow(struct rn_idmap *m)
{
    struct rn_idmap n;
    size_t i, j;

    n.cap = m->cap ? m->cap * 2 : 64;
    n.len = m->len;
    n.keys = calloc(n.cap, sizeof(*n.keys));
    n.vals = calloc(n.cap, sizeof(*n.vals));
    n.used = calloc(n.cap, 1);
    if (n.keys == NULL || n.vals == NULL || n.used == NULL) {
        free(n.keys);
        free(n.vals);
        free(n.used);
        return CN_NOMEM;
    }
    for (i = 0; i < m->cap; i++) {
        if (!m->used[i]) {
            continue;
        }
        j = idmap_slot(m->keys[i], n.cap);
        while (n.used[j]) {
            j = (j + 1) & (n.cap - 1);
        }
        memcpy(n.keys[j], m->keys[i], 16);
        n.vals[j] = m->vals[i];
        n.used[j] = 1;
    }
    rn_idmap_fini(m);
    *m = n;
    return CN_OK;
}

cn_err
rn_idmap_put(struct rn_idmap *m, const uint8_t key[16], uint32_t val)
{
    size_t j;

    if ((m->len + 1) * 4 > m->cap * 3 && idmap_grow(m) != CN_OK) {
        return CN_NOMEM;
    }
    j = idmap_slot(key, m->cap);
    while (m->used[j]) {
        if (memcmp(m->keys[j], key, 16) == 0) {
            m->vals[j] = val;
            return CN_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    memcpy(m->keys[j], key, 16);
    m->vals[j] = val;
    m->used[j] = 1;
    m->len++;
    return CN_OK;
}

static bool
idmap_find(const struct rn_idmap *m, const uint8_t key[16], size_t *at)
{
    size_t j;

    if (m->cap == 0) {
        return false;
    }
    j = idmap_slot(key, m->cap);
    while (m->used[j]) {
        if (memcmp(m->keys[j], key, 16) == 0) {
            *at = j;
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return false;
}

bool
rn_idmap_get(const struct rn_idmap *m, const uint8_t key[16], uint32_t *val)
{
    size_t j;

    if (!idmap_find(m, key, &j)) {
        return false;
    }
    *val = m->vals[j];
    return true;
}

void
rn_idmap_del(struct rn_idmap *m, const uint8_t key[16])
{
    size_t i, j, k;

    if (!idmap_find(m, key, &i)) {
        return;
    }
    m->used[i] = 0;
    m->len--;
    /* Backward-shift: move later entries of the probe run into the hole when their home slot
     * does not lie cyclically in (i, j]. */
    for (j = (i + 1) & (m->cap - 1); m->used[j]; j = (j + 1) & (m->cap - 1)) {
        k = idmap_slot(m->keys[j], m->cap);
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            memcpy(m->keys[i], m->keys[j], 16);
            m->vals[i] = m->vals[j];
            m->used[i] = 1;
            m->used[j] = 0;
            i = j;
        }
    }
}

void
rn_idmap_fini(struct rn_idmap *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof(*m));
}
