/* SPDX-License-Identifier: MIT */
/*
 * The value model: constructors, reference counting, UTF-8 strings, lists, insertion-ordered
 * maps, Python-semantics equality and hashing, and Python's repr() of values (a float's repr is
 * numtext.c's). The codecs live in value_json.c and value_msgpack.c.
 *
 * DESIGN
 * - Heap objects start with an atomic reference count. Retain is relaxed (taking a new
 *   reference needs no ordering: the caller already holds one); release is acq_rel so that
 *   every write made by any owner happens-before the free done by the last one.
 * - Release is iterative: a dead container is chained through its own dead_next field onto a
 *   work list instead of recursing, so freeing a very deep value cannot overflow the stack.
 * - Strings store their byte length, code point count and hash, computed once at creation
 *   (we walk the bytes to validate UTF-8 anyway), so map lookups and len() are O(1) per key.
 * - Maps keep entries in an array in insertion order. Up to MAP_INDEX_MIN entries a lookup is
 *   a linear scan (cheaper than hashing for the small records workflows pass around); beyond
 *   that an open-addressing index of entry positions (linear probing, load <= 1/2) is kept.
 *   Entries are never deleted (values are immutable), so the index needs no tombstones.
 * - Numbers compare exactly as in Python: an int equals a float only if the float is integral
 *   and has the same value, and such a float hashes as the int does.
 */
#include "ir/value.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ir/numtext.h"
#include "ir/value_int.h"

/* Linear scan up to this many entries; the hash index exists only above it. */
#define MAP_INDEX_MIN 8

struct ir_str {
    atomic_size_t refs;
    size_t len;
    size_t cplen;
    uint64_t hash;
    char data[]; /* len bytes + NUL */
};

struct ir_list {
    atomic_size_t refs;
    atomic_uint depth; /* cached nesting depth, 0 = not known (see ir_val_deeper_than) */
    size_t len;
    struct ir_val dead_next; /* release work list; meaningful only once refs hit zero */
    struct ir_val items[];
};

struct map_ent {
    struct ir_val key; /* always a string */
    struct ir_val val;
};

struct ir_map {
    atomic_size_t refs;
    atomic_uint depth; /* cached nesting depth, 0 = not known */
    size_t len;
    size_t cap;
    struct map_ent *ents;
    uint32_t *index; /* NULL, or index_mask + 1 slots holding entry position + 1 (0 = empty) */
    size_t index_mask;
    bool is_error;
    struct ir_val dead_next;
};

/* ---- scalars ---- */

struct ir_val
ir_null(void)
{
    struct ir_val v;

    memset(&v, 0, sizeof(v));
    v.type = IR_T_NULL;
    return v;
}

struct ir_val
ir_bool(bool b)
{
    struct ir_val v = ir_null();

    v.type = IR_T_BOOL;
    v.u.b = b;
    return v;
}

struct ir_val
ir_int(int64_t i)
{
    struct ir_val v = ir_null();

    v.type = IR_T_INT;
    v.u.i = i;
    return v;
}

struct ir_val
ir_float(double f)
{
    struct ir_val v = ir_null();

    v.type = IR_T_FLOAT;
    v.u.f = f;
    return v;
}

const char *
ir_type_name(enum ir_type t)
{
    switch (t) {
    case IR_T_NULL:
        return "NoneType";
    case IR_T_BOOL:
        return "bool";
    case IR_T_INT:
        return "int";
    case IR_T_FLOAT:
        return "float";
    case IR_T_STR:
        return "str";
    case IR_T_LIST:
        return "list";
    case IR_T_MAP:
        return "dict";
    default:
        return "unknown";
    }
}

/* ---- reference counting ---- */

static atomic_size_t *
val_refs(struct ir_val v)
{
    switch (v.type) {
    case IR_T_STR:
        return &v.u.s->refs;
    case IR_T_LIST:
        return &v.u.l->refs;
    case IR_T_MAP:
        return &v.u.m->refs;
    default:
        return NULL;
    }
}

/* Used only by assertions; release builds (NDEBUG) drop every caller. */
__attribute__((unused)) static bool
val_unshared(struct ir_val v)
{
    atomic_size_t *r = val_refs(v);

    return r != NULL && atomic_load_explicit(r, memory_order_relaxed) == 1;
}

struct ir_val
ir_val_retain(struct ir_val v)
{
    atomic_size_t *r = val_refs(v);

    if (r != NULL) {
        /* Relaxed: the caller's own reference keeps the object alive meanwhile. */
        (void) atomic_fetch_add_explicit(r, 1, memory_order_relaxed);
    }
    return v;
}

/* Drops one reference; true if it was the last one (the caller must then free). */
static bool
val_drop(struct ir_val v)
{
    atomic_size_t *r = val_refs(v);

    /* acq_rel: our writes must be visible to whoever frees, and the freer must see all. */
    return r != NULL && atomic_fetch_sub_explicit(r, 1, memory_order_acq_rel) == 1;
}

static struct ir_val *
dead_link(struct ir_val v)
{
    return v.type == IR_T_LIST ? &v.u.l->dead_next : &v.u.m->dead_next;
}

/* Releases a child of a dying container: strings are freed at once, containers are pushed on
 * the work list *head. */
static void
release_child(struct ir_val c, struct ir_val *head)
{
    if (!val_drop(c)) {
        return;
    }
    if (c.type == IR_T_STR) {
        free(c.u.s);
        return;
    }
    *dead_link(c) = *head;
    *head = c;
}

void
ir_val_release(struct ir_val v)
{
    struct ir_val head, cur;
    size_t i;

    if (!val_drop(v)) {
        return;
    }
    if (v.type == IR_T_STR) {
        free(v.u.s);
        return;
    }
    head = v;
    *dead_link(head) = ir_null();
    while (head.type != IR_T_NULL) {
        cur = head;
        head = *dead_link(cur);
        if (cur.type == IR_T_LIST) {
            for (i = 0; i < cur.u.l->len; i++) {
                release_child(cur.u.l->items[i], &head);
            }
            free(cur.u.l);
        } else {
            for (i = 0; i < cur.u.m->len; i++) {
                release_child(cur.u.m->ents[i].key, &head);
                release_child(cur.u.m->ents[i].val, &head);
            }
            free(cur.u.m->ents);
            free(cur.u.m->index);
            free(cur.u.m);
        }
    }
}

/* ---- hashing primitives ---- */

/* splitmix64 finaliser: a cheap full-avalanche mix. */
static uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

static uint64_t
rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* Byte-order independent (words are assembled little-endian), so a hash is the same on every
 * machine. Not seeded: see the header about determinism. */
static uint64_t
hash_bytes(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *) s;
    uint64_t h = UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t) n;
    uint64_t w;
    size_t i;

    while (n >= 8) {
        w = 0;
        for (i = 0; i < 8; i++) {
            w |= (uint64_t) p[i] << (8 * i);
        }
        h = rotl64(h ^ (w * UINT64_C(0x87c37b91114253d5)), 29) * UINT64_C(0x4cf5ad432745937f);
        p += 8;
        n -= 8;
    }
    w = 0;
    for (i = 0; i < n; i++) {
        w |= (uint64_t) p[i] << (8 * i);
    }
    h = rotl64(h ^ (w * UINT64_C(0x87c37b91114253d5)), 29) * UINT64_C(0x4cf5ad432745937f);
    return mix64(h);
}

static uint64_t
hash_int(int64_t i)
{
    return mix64((uint64_t) i ^ UINT64_C(0x2545f4914f6cdd1d));
}

/* ---- strings ---- */

bool
ir_utf8_valid(const char *s, size_t len, size_t *cplen)
{
    const unsigned char *p = (const unsigned char *) s;
    size_t i = 0, n = 0, need, k;
    unsigned c, lo, hi;

    while (i < len) {
        c = p[i];
        if (c < 0x80) {
            i++;
            n++;
            continue;
        }
        /* The first continuation byte's range is what excludes overlongs (E0, F0),
         * surrogates (ED) and code points above U+10FFFF (F4); C0, C1, F5..FF never occur. */
        lo = 0x80;
        hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
        } else if (c == 0xe0) {
            need = 2;
            lo = 0xa0;
        } else if (c == 0xed) {
            need = 2;
            hi = 0x9f;
        } else if (c >= 0xe1 && c <= 0xef) {
            need = 2;
        } else if (c == 0xf0) {
            need = 3;
            lo = 0x90;
        } else if (c >= 0xf1 && c <= 0xf3) {
            need = 3;
        } else if (c == 0xf4) {
            need = 3;
            hi = 0x8f;
        } else {
            return false;
        }
        if (len - i - 1 < need) {
            return false;
        }
        if (p[i + 1] < lo || p[i + 1] > hi) {
            return false;
        }
        for (k = 2; k <= need; k++) {
            if ((p[i + k] & 0xc0) != 0x80) {
                return false;
            }
        }
        i += need + 1;
        n++;
    }
    if (cplen != NULL) {
        *cplen = n;
    }
    return true;
}

cn_err
ir_str_new(const char *s, size_t len, struct ir_val *out)
{
    struct ir_str *o;
    size_t cplen = 0;

    if (len > 0 && !ir_utf8_valid(s, len, &cplen)) {
        return CN_UTF8;
    }
    if (len > SIZE_MAX - sizeof(*o) - 1) {
        return CN_NOMEM;
    }
    o = malloc(sizeof(*o) + len + 1);
    if (o == NULL) {
        return CN_NOMEM;
    }
    atomic_init(&o->refs, 1);
    o->len = len;
    o->cplen = cplen;
    if (len > 0) {
        memcpy(o->data, s, len);
    }
    o->data[len] = '\0';
    o->hash = hash_bytes(o->data, len);
    *out = ir_null();
    out->type = IR_T_STR;
    out->u.s = o;
    return CN_OK;
}

cn_err
ir_str_from_cstr(const char *s, struct ir_val *out)
{
    return ir_str_new(s, strlen(s), out);
}

const char *
ir_str_data(struct ir_val v)
{
    assert(v.type == IR_T_STR);
    return v.u.s->data;
}

size_t
ir_str_len(struct ir_val v)
{
    assert(v.type == IR_T_STR);
    return v.u.s->len;
}

size_t
ir_str_cplen(struct ir_val v)
{
    assert(v.type == IR_T_STR);
    return v.u.s->cplen;
}

static bool
str_eq(const struct ir_str *a, const struct ir_str *b)
{
    return a == b ||
           (a->hash == b->hash && a->len == b->len && memcmp(a->data, b->data, a->len) == 0);
}

/* ---- lists ---- */

cn_err
ir_list_new(size_t len, struct ir_val *out)
{
    struct ir_list *o;
    size_t i;

    if (len > (SIZE_MAX - sizeof(*o)) / sizeof(struct ir_val)) {
        return CN_NOMEM;
    }
    o = malloc(sizeof(*o) + len * sizeof(struct ir_val));
    if (o == NULL) {
        return CN_NOMEM;
    }
    atomic_init(&o->refs, 1);
    atomic_init(&o->depth, 0u);
    o->len = len;
    o->dead_next = ir_null();
    for (i = 0; i < len; i++) {
        o->items[i] = ir_null();
    }
    *out = ir_null();
    out->type = IR_T_LIST;
    out->u.l = o;
    return CN_OK;
}

cn_err
ir_list_of_cstrs(const char *const *names, size_t n, struct ir_val *out)
{
    size_t i;
    cn_err rv;

    if ((rv = ir_list_new(n, out)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < n; i++) {
        if ((rv = ir_str_from_cstr(names[i], &ir_list_items(*out)[i])) != CN_OK) {
            ir_val_release(*out);
            *out = ir_null();
            return rv;
        }
    }
    return CN_OK;
}

size_t
ir_list_len(struct ir_val v)
{
    assert(v.type == IR_T_LIST);
    return v.u.l->len;
}

struct ir_val *
ir_list_items(struct ir_val v)
{
    assert(v.type == IR_T_LIST);
    /* An unshared list may be written through this pointer: forget its cached depth. */
    if (atomic_load_explicit(&v.u.l->refs, memory_order_relaxed) == 1) {
        atomic_store_explicit(&v.u.l->depth, 0u, memory_order_relaxed);
    }
    return v.u.l->items;
}

/* The depth of v, exact when it is at most `limit`, otherwise some value above `limit`.
 * Recursion is bounded by `limit`; exact results are cached in the (immutable once shared)
 * container, so a value built from already-measured parts costs one pass over its own
 * children. The cache is a relaxed atomic: racing threads compute the same number. */
static unsigned
val_depth(struct ir_val v, unsigned limit)
{
    atomic_uint *cache;
    unsigned d = 0, cd;
    size_t i, n;

    if (v.type == IR_T_LIST) {
        cache = &v.u.l->depth;
        n = v.u.l->len;
    } else if (v.type == IR_T_MAP) {
        cache = &v.u.m->depth;
        n = v.u.m->len;
    } else {
        return 1;
    }
    if ((cd = atomic_load_explicit(cache, memory_order_relaxed)) != 0) {
        return cd;
    }
    if (limit == 0) {
        return 1; /* any container is deeper than 0 */
    }
    for (i = 0; i < n && d < limit; i++) {
        struct ir_val c = v.type == IR_T_LIST ? v.u.l->items[i] : v.u.m->ents[i].val;
        cd = val_depth(c, limit - 1);
        if (cd > d) {
            d = cd;
        }
    }
    if (d < limit) {
        atomic_store_explicit(cache, d + 1, memory_order_relaxed); /* exact */
    }
    return d + 1;
}

bool
ir_val_deeper_than(struct ir_val v, unsigned limit)
{
    return val_depth(v, limit) > limit;
}

/* ---- maps ---- */

cn_err
ir_map_new(size_t cap_hint, struct ir_val *out)
{
    struct ir_map *o;

    if (cap_hint > SIZE_MAX / sizeof(struct map_ent)) {
        return CN_NOMEM;
    }
    o = calloc(1, sizeof(*o));
    if (o == NULL) {
        return CN_NOMEM;
    }
    if (cap_hint > 0) {
        o->ents = malloc(cap_hint * sizeof(struct map_ent));
        if (o->ents == NULL) {
            free(o);
            return CN_NOMEM;
        }
        o->cap = cap_hint;
    }
    atomic_init(&o->refs, 1);
    atomic_init(&o->depth, 0u);
    o->dead_next = ir_null();
    *out = ir_null();
    out->type = IR_T_MAP;
    out->u.m = o;
    return CN_OK;
}

static void
map_index_put(struct ir_map *m, size_t pos)
{
    size_t slot = (size_t) m->ents[pos].key.u.s->hash & m->index_mask;

    while (m->index[slot] != 0) {
        slot = (slot + 1) & m->index_mask;
    }
    m->index[slot] = (uint32_t) (pos + 1);
}

/* Rebuilds the index with room for `want` entries at load <= 1/2. */
static cn_err
map_index_build(struct ir_map *m, size_t want)
{
    size_t slots = 32, i;
    uint32_t *idx;

    while (slots < want * 2) {
        if (slots > SIZE_MAX / 2 / sizeof(uint32_t)) {
            return CN_NOMEM;
        }
        slots *= 2;
    }
    idx = calloc(slots, sizeof(uint32_t));
    if (idx == NULL) {
        return CN_NOMEM;
    }
    free(m->index);
    m->index = idx;
    m->index_mask = slots - 1;
    for (i = 0; i < m->len; i++) {
        map_index_put(m, i);
    }
    return CN_OK;
}

/* key may be NULL when key_len is 0, which memcmp does not allow. */
static bool
key_eq(const struct ir_str *k, const char *key, size_t key_len)
{
    return key_len == 0 || memcmp(k->data, key, key_len) == 0;
}

/* Position of key in m, or SIZE_MAX. */
static size_t
map_find(const struct ir_map *m, const char *key, size_t key_len, uint64_t h)
{
    const struct ir_str *k;
    size_t i, slot;
    uint32_t e;

    if (m->index == NULL) {
        for (i = 0; i < m->len; i++) {
            k = m->ents[i].key.u.s;
            if (k->len == key_len && k->hash == h && key_eq(k, key, key_len)) {
                return i;
            }
        }
        return SIZE_MAX;
    }
    slot = (size_t) h & m->index_mask;
    while ((e = m->index[slot]) != 0) {
        k = m->ents[e - 1].key.u.s;
        if (k->len == key_len && k->hash == h && key_eq(k, key, key_len)) {
            return e - 1;
        }
        slot = (slot + 1) & m->index_mask;
    }
    return SIZE_MAX;
}

cn_err
ir_map_set(struct ir_val *map, struct ir_val key, struct ir_val val)
{
    struct ir_map *m;
    struct ir_str *k;
    struct map_ent *ents;
    size_t pos, ncap;
    cn_err rv;

    assert(map->type == IR_T_MAP && val_unshared(*map));
    if (key.type != IR_T_STR) {
        rv = CN_TYPE;
        goto fail;
    }
    m = map->u.m;
    atomic_store_explicit(&m->depth, 0u, memory_order_relaxed);
    k = key.u.s;
    pos = map_find(m, k->data, k->len, k->hash);
    if (pos != SIZE_MAX) {
        /* Python keeps the first key object and position, and takes the new value. */
        ir_val_release(m->ents[pos].val);
        m->ents[pos].val = val;
        ir_val_release(key);
        return CN_OK;
    }
    if (m->len >= UINT32_MAX - 1) {
        rv = CN_NOMEM;
        goto fail;
    }
    /* Grow the index before appending so a failure leaves the map untouched. */
    if (m->len + 1 > MAP_INDEX_MIN && (m->index == NULL || (m->len + 1) * 2 > m->index_mask + 1)) {
        if ((rv = map_index_build(m, m->len + 1)) != CN_OK) {
            goto fail;
        }
    }
    if (m->len == m->cap) {
        ncap = m->cap < 4 ? 4 : m->cap * 2;
        if (ncap > SIZE_MAX / sizeof(struct map_ent)) {
            rv = CN_NOMEM;
            goto fail;
        }
        ents = realloc(m->ents, ncap * sizeof(struct map_ent));
        if (ents == NULL) {
            rv = CN_NOMEM;
            goto fail;
        }
        m->ents = ents;
        m->cap = ncap;
    }
    m->ents[m->len].key = key;
    m->ents[m->len].val = val;
    m->len++;
    if (m->index != NULL) {
        map_index_put(m, m->len - 1);
    }
    return CN_OK;

fail:
    ir_val_release(key);
    ir_val_release(val);
    return rv;
}

cn_err
ir_map_set_cstr(struct ir_val *map, const char *key, struct ir_val val)
{
    struct ir_val k;
    cn_err rv;

    if ((rv = ir_str_from_cstr(key, &k)) != CN_OK) {
        ir_val_release(val);
        return rv;
    }
    return ir_map_set(map, k, val);
}

const struct ir_val *
ir_map_get(struct ir_val map, const char *key, size_t key_len)
{
    size_t pos;

    assert(map.type == IR_T_MAP);
    pos = map_find(map.u.m, key, key_len, hash_bytes(key, key_len));
    return pos == SIZE_MAX ? NULL : &map.u.m->ents[pos].val;
}

size_t
ir_map_len(struct ir_val v)
{
    assert(v.type == IR_T_MAP);
    return v.u.m->len;
}

struct ir_val
ir_map_key_at(struct ir_val v, size_t i)
{
    assert(v.type == IR_T_MAP && i < v.u.m->len);
    return v.u.m->ents[i].key;
}

struct ir_val
ir_map_val_at(struct ir_val v, size_t i)
{
    assert(v.type == IR_T_MAP && i < v.u.m->len);
    return v.u.m->ents[i].val;
}

bool
ir_map_is_error(struct ir_val v)
{
    return v.type == IR_T_MAP && v.u.m->is_error;
}

void
ir_map_set_error(struct ir_val *map, bool is_error)
{
    assert(map->type == IR_T_MAP && val_unshared(*map));
    map->u.m->is_error = is_error;
}

/* ---- equality and hashing ---- */

static bool
is_num(enum ir_type t)
{
    return t == IR_T_BOOL || t == IR_T_INT || t == IR_T_FLOAT;
}

static int64_t
num_as_int(struct ir_val v)
{
    return v.type == IR_T_BOOL ? (int64_t) v.u.b : v.u.i;
}

/* If f is integral and inside int64, stores it in *i. NaN fails both comparisons. */
static bool
float_as_int(double f, int64_t *i)
{
    int64_t t;

    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) {
        return false;
    }
    t = (int64_t) f;
    if ((double) t != f) {
        return false;
    }
    *i = t;
    return true;
}

static bool
num_equal(struct ir_val a, struct ir_val b)
{
    int64_t i;

    if (a.type == IR_T_FLOAT && b.type == IR_T_FLOAT) {
        return a.u.f == b.u.f;
    }
    if (a.type == IR_T_FLOAT) {
        return float_as_int(a.u.f, &i) && i == num_as_int(b);
    }
    if (b.type == IR_T_FLOAT) {
        return float_as_int(b.u.f, &i) && i == num_as_int(a);
    }
    return num_as_int(a) == num_as_int(b);
}

/* Lists of the same length whose items pair up under eq (equality or sameness). */
static bool
lists_match(const struct ir_list *a, const struct ir_list *b,
            bool (*eq)(struct ir_val, struct ir_val))
{
    size_t i;

    if (a->len != b->len) {
        return false;
    }
    for (i = 0; i < a->len; i++) {
        if (!eq(a->items[i], b->items[i])) {
            return false;
        }
    }
    return true;
}

bool
ir_val_equal(struct ir_val a, struct ir_val b)
{
    const struct ir_map *ma, *mb;
    const struct ir_val *bv;
    const struct ir_str *k;
    size_t i;

    if (is_num(a.type) && is_num(b.type)) {
        return num_equal(a, b);
    }
    if (a.type != b.type) {
        return false;
    }
    switch (a.type) {
    case IR_T_NULL:
        return true;
    case IR_T_STR:
        return str_eq(a.u.s, b.u.s);
    case IR_T_LIST:
        return lists_match(a.u.l, b.u.l, ir_val_equal);
    case IR_T_MAP:
        ma = a.u.m;
        mb = b.u.m;
        if (ma->len != mb->len) {
            return false;
        }
        for (i = 0; i < ma->len; i++) {
            k = ma->ents[i].key.u.s;
            /* Fast path: same key at the same position, as when both came from one source. */
            if (str_eq(k, mb->ents[i].key.u.s)) {
                bv = &mb->ents[i].val;
            } else {
                bv = ir_map_get(b, k->data, k->len);
            }
            if (bv == NULL || !ir_val_equal(ma->ents[i].val, *bv)) {
                return false;
            }
        }
        return true;
    default:
        return false;
    }
}

uint64_t
ir_val_hash(struct ir_val v)
{
    uint64_t h;
    int64_t i;
    size_t k;

    switch (v.type) {
    case IR_T_NULL:
        return UINT64_C(0x6a09e667f3bcc908);
    case IR_T_BOOL:
    case IR_T_INT:
        return hash_int(num_as_int(v));
    case IR_T_FLOAT:
        if (float_as_int(v.u.f, &i)) {
            return hash_int(i);
        }
        if (isnan(v.u.f)) {
            return UINT64_C(0xbb67ae8584caa73b);
        }
        memcpy(&h, &v.u.f, sizeof(h));
        return mix64(h);
    case IR_T_STR:
        return v.u.s->hash;
    case IR_T_LIST:
        h = UINT64_C(0x3c6ef372fe94f82b) ^ (uint64_t) v.u.l->len;
        for (k = 0; k < v.u.l->len; k++) {
            h = rotl64(h ^ ir_val_hash(v.u.l->items[k]), 27) * UINT64_C(0x9e3779b97f4a7c15);
        }
        return mix64(h);
    case IR_T_MAP:
        /* Order-independent (a sum), because equality ignores order. */
        h = UINT64_C(0xa54ff53a5f1d36f1) ^ (uint64_t) v.u.m->len;
        for (k = 0; k < v.u.m->len; k++) {
            h += mix64(v.u.m->ents[k].key.u.s->hash * UINT64_C(31) +
                       ir_val_hash(v.u.m->ents[k].val));
        }
        return mix64(h);
    default:
        return 0;
    }
}

static uint64_t
float_bits(double f)
{
    uint64_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

bool
ir_val_same(struct ir_val a, struct ir_val b)
{
    size_t i;

    if (a.type != b.type) {
        return false;
    }
    switch (a.type) {
    case IR_T_NULL:
        return true;
    case IR_T_BOOL:
        return a.u.b == b.u.b;
    case IR_T_INT:
        return a.u.i == b.u.i;
    case IR_T_FLOAT:
        return float_bits(a.u.f) == float_bits(b.u.f);
    case IR_T_STR:
        return str_eq(a.u.s, b.u.s);
    case IR_T_LIST:
        return lists_match(a.u.l, b.u.l, ir_val_same);
    case IR_T_MAP:
        if (a.u.m->len != b.u.m->len || a.u.m->is_error != b.u.m->is_error) {
            return false;
        }
        for (i = 0; i < a.u.m->len; i++) {
            if (!str_eq(a.u.m->ents[i].key.u.s, b.u.m->ents[i].key.u.s) ||
                !ir_val_same(a.u.m->ents[i].val, b.u.m->ents[i].val)) {
                return false;
            }
        }
        return true;
    default:
        return false;
    }
}

/* ---- repr ---- */

/* Assigned code points that Python 3.11's str.isprintable() rejects (categories Cc, Cf, Zs
 * other than space, Zl, Zp, Co), generated from unicodedata. Unassigned code points (Cn) are
 * left out: that table would be ~700 ranges and changes with every Unicode release. */
static const uint32_t nonprint[][2] = {
    {0x0, 0x1f},        {0x7f, 0xa0},       {0xad, 0xad},       {0x600, 0x605},
    {0x61c, 0x61c},     {0x6dd, 0x6dd},     {0x70f, 0x70f},     {0x890, 0x891},
    {0x8e2, 0x8e2},     {0x1680, 0x1680},   {0x180e, 0x180e},   {0x2000, 0x200f},
    {0x2028, 0x202f},   {0x205f, 0x2064},   {0x2066, 0x206f},   {0x3000, 0x3000},
    {0xe000, 0xf8ff},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd},
    {0x110cd, 0x110cd}, {0x13430, 0x13438}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},
    {0xe0001, 0xe0001}, {0xe0020, 0xe007f}, {0xf0000, 0xffffd}, {0x100000, 0x10fffd},
};

static bool
cp_printable(uint32_t cp)
{
    size_t lo = 0, hi = sizeof(nonprint) / sizeof(nonprint[0]), mid;

    while (lo < hi) {
        mid = (lo + hi) / 2;
        if (cp < nonprint[mid][0]) {
            hi = mid;
        } else if (cp > nonprint[mid][1]) {
            lo = mid + 1;
        } else {
            return false;
        }
    }
    return true;
}

/* Decodes one code point of valid UTF-8 at s; returns its byte length. */
static size_t
utf8_decode(const unsigned char *s, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xe0) {
        *cp = ((uint32_t) (s[0] & 0x1f) << 6) | (s[1] & 0x3f);
        return 2;
    }
    if (s[0] < 0xf0) {
        *cp = ((uint32_t) (s[0] & 0x0f) << 12) | ((uint32_t) (s[1] & 0x3f) << 6) | (s[2] & 0x3f);
        return 3;
    }
    *cp = ((uint32_t) (s[0] & 0x07) << 18) | ((uint32_t) (s[1] & 0x3f) << 12) |
          ((uint32_t) (s[2] & 0x3f) << 6) | (s[3] & 0x3f);
    return 4;
}

static cn_err
repr_str(const struct ir_str *s, struct cn_buf *out)
{
    const unsigned char *p = (const unsigned char *) s->data;
    char quote = '\'';
    size_t i, n;
    uint32_t cp;
    cn_err rv;

    /* Python switches to double quotes only when that avoids escaping. */
    if (memchr(s->data, '\'', s->len) != NULL && memchr(s->data, '"', s->len) == NULL) {
        quote = '"';
    }
    if ((rv = cn_buf_putc(out, quote)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < s->len; i += n) {
        n = utf8_decode(p + i, &cp);
        if (cp == '\\' || cp == (uint32_t) quote) {
            rv = cn_buf_printf(out, "\\%c", (char) cp);
        } else if (cp == '\n') {
            rv = cn_buf_puts(out, "\\n");
        } else if (cp == '\r') {
            rv = cn_buf_puts(out, "\\r");
        } else if (cp == '\t') {
            rv = cn_buf_puts(out, "\\t");
        } else if (cp_printable(cp)) {
            rv = cn_buf_append(out, p + i, n);
        } else if (cp < 0x100) {
            rv = cn_buf_printf(out, "\\x%02x", (unsigned) cp);
        } else if (cp < 0x10000) {
            rv = cn_buf_printf(out, "\\u%04x", (unsigned) cp);
        } else {
            rv = cn_buf_printf(out, "\\U%08x", (unsigned) cp);
        }
        if (rv != CN_OK) {
            return rv;
        }
    }
    return cn_buf_putc(out, quote);
}

/* A list as [a, b] or a map as {k: v}: the same in every style. */
static cn_err
write_items(struct ir_val v, const struct ir_text_style *st, int depth, struct cn_buf *out,
            struct cn_errmsg *err)
{
    bool map = v.type == IR_T_MAP;
    size_t i, n = map ? v.u.m->len : v.u.l->len;
    cn_err rv;

    if ((rv = cn_buf_putc(out, map ? '{' : '[')) != CN_OK) {
        return rv;
    }
    for (i = 0; i < n; i++) {
        if (i > 0 && (rv = cn_buf_puts(out, ", ")) != CN_OK) {
            return rv;
        }
        if (map && ((rv = st->put_str(v.u.m->ents[i].key, out)) != CN_OK ||
                    (rv = cn_buf_puts(out, ": ")) != CN_OK)) {
            return rv;
        }
        rv = ir_val_write_text(map ? v.u.m->ents[i].val : v.u.l->items[i], st, depth + 1, out, err);
        if (rv != CN_OK) {
            return rv;
        }
    }
    return cn_buf_putc(out, map ? '}' : ']');
}

cn_err
ir_val_write_text(struct ir_val v, const struct ir_text_style *st, int depth, struct cn_buf *out,
                  struct cn_errmsg *err)
{
    char fb[IR_FLOAT_REPR_MAX];
    size_t n;

    if (depth > st->max_depth) {
        return cn_errmsg_set(err, CN_DEPTH, "%s: value nested deeper than %d levels", st->what,
                             st->max_depth);
    }
    switch (v.type) {
    case IR_T_NULL:
        return cn_buf_puts(out, st->none);
    case IR_T_BOOL:
        return cn_buf_puts(out, v.u.b ? st->yes : st->no);
    case IR_T_INT:
        return cn_buf_printf(out, "%lld", (long long) v.u.i);
    case IR_T_FLOAT:
        n = ir_float_repr(v.u.f, fb);
        if (st->finite_only && !isfinite(v.u.f)) {
            return cn_errmsg_set(err, CN_RANGE, "%s cannot represent the float %s", st->what, fb);
        }
        return cn_buf_append(out, fb, n);
    case IR_T_STR:
        return st->put_str(v, out);
    case IR_T_LIST:
    case IR_T_MAP:
        return write_items(v, st, depth, out, err);
    default:
        return cn_errmsg_set(err, CN_INVAL, "%s: bad value type %d", st->what, (int) v.type);
    }
}

static cn_err
repr_str_val(struct ir_val s, struct cn_buf *out)
{
    return repr_str(s.u.s, out);
}

static const struct ir_text_style repr_style = {
    "None", "True", "False", IR_REPR_MAX_DEPTH, false, "repr", repr_str_val,
};

cn_err
ir_val_repr(struct ir_val v, struct cn_buf *out)
{
    return ir_val_write_text(v, &repr_style, 1, out, NULL);
}
