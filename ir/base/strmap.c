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

/* Where key is in ents (cap slots, a power of two), or the empty slot where it would go. */
static size_t
strmap_slot(const struct cn_strmap_ent *ents, size_t cap, const char *key)
{
    size_t j = (size_t) cn_hash_str(key) & (cap - 1);

    while (ents[j].key != NULL && strcmp(ents[j].key, key) != 0) {
        j = (j + 1) & (cap - 1);
    }
    return j;
}

static cn_err
strmap_grow(struct cn_strmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16, i;
    struct cn_strmap_ent *ents = calloc(ncap, sizeof(*ents));

    if (ents == NULL) {
        return CN_NOMEM;
    }
    for (i = 0; i < m->cap; i++) {
        if (m->ents[i].key != NULL) {
            ents[strmap_slot(ents, ncap, m->ents[i].key)] = m->ents[i];
        }
    }
    free(m->ents);
    m->ents = ents;
    m->cap = ncap;
    return CN_OK;
}

cn_err
cn_strmap_put(struct cn_strmap *m, const char *key, uint32_t val)
{
    struct cn_strmap_ent *e;

    if ((m->len + 1) * 2 > m->cap && strmap_grow(m) != CN_OK) {
        return CN_NOMEM;
    }
    e = &m->ents[strmap_slot(m->ents, m->cap, key)];
    if (e->key == NULL) {
        e->key = key;
        m->len++;
    }
    e->val = val;
    return CN_OK;
}

bool
cn_strmap_get(const struct cn_strmap *m, const char *key, uint32_t *val)
{
    const struct cn_strmap_ent *e;

    if (m->cap == 0) {
        return false;
    }
    e = &m->ents[strmap_slot(m->ents, m->cap, key)];
    if (e->key == NULL) {
        return false;
    }
    *val = e->val;
    return true;
}

void
cn_strmap_fini(struct cn_strmap *m)
{
    free(m->ents);
    memset(m, 0, sizeof(*m));
}
