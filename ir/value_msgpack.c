/* SPDX-License-Identifier: MIT */
/*
 * msgpack <-> value: the non-allocating shape check that guards every msgpack-c unpack call
 * (msgpack-c recurses without a limit), the encoder (msgpack_packer into a cn_buf) and the decoder
 * (msgpack-c's unpacker, then conversion of the msgpack_object tree).
 *
 * DESIGN
 * - msgpack-c 4.0 allocates, on seeing a container header, room for every element the header
 *   declares, before reading any of them: 5 bytes of array32 header can ask for ~100 GiB
 *   (msgpack/msgpack-c#1013). The shape check runs first and proves that every element still
 *   owed by every open container has at least one byte of its own left in the input, so what
 *   msgpack-c allocates stays below ~24 bytes per input byte.
 * - msgpack-c's C unpacker has a fixed 32-entry container stack (MSGPACK_EMBED_STACK_SIZE).
 *   With IR_VALUE_MAX_DEPTH = 32 the deepest container that can have children sits at level
 *   31, so at most 31 containers are ever open and msgpack-c's own limit is never reached.
 * - The error ext (IR_MP_EXT_ERROR, IR_MP_INTERNAL only) carries the map as a separate msgpack
 *   document. The wrapper adds no level: the map inside sits at the ext's level, and its
 *   payload is shape-checked and unpacked on its own (a fresh msgpack-c stack) with the depth
 *   budget that is left at that level. So plain and internal encodings of a value have the
 *   same depth, and a nested error inside an error's details works the same way.
 */
#include <stdint.h>

#include <msgpack.h>

#include "ir/value.h"

/* ---- shape check ---- */

/* Reads a big-endian unsigned field of w bytes; the caller has checked that they exist. */
static uint64_t
shape_be(const unsigned char *p, unsigned w)
{
    uint64_t x = 0;
    unsigned i;

    for (i = 0; i < w; i++) {
        x = (x << 8) | p[i];
    }
    return x;
}

/* Classifies the header byte b: the width of its length field (lenw), how many payload bytes
 * follow the length field besides the length itself (fixed), whether the length counts
 * payload bytes or children (per_len: 0 = none, 1 = bytes, 2 = array elements, 3 = map
 * entries), and for fixed forms the embedded count. Returns false for the reserved byte. */
struct shape_hdr {
    unsigned lenw;
    uint64_t fixed;
    int per_len;
    uint64_t count;
};

enum { SH_NONE = 0, SH_BYTES, SH_ARRAY, SH_MAP };

/* The payload size of the fixed-size forms 0xca..0xd8: floats, ints, and fixext (a type byte
 * and its data). */
static uint64_t
shape_fixed_size(unsigned b)
{
    switch (b) {
    case 0xca: /* float 32 */
        return 4;
    case 0xcb: /* float 64 */
        return 8;
    case 0xcc: /* uint 8/16/32/64, int 8/16/32/64 */
    case 0xd0:
        return 1;
    case 0xcd:
    case 0xd1:
        return 2;
    case 0xce:
    case 0xd2:
        return 4;
    case 0xcf:
    case 0xd3:
        return 8;
    case 0xd4: /* fixext 1/2/4/8/16: type byte + data */
        return 2;
    case 0xd5:
        return 3;
    case 0xd6:
        return 5;
    case 0xd7:
        return 9;
    default: /* 0xd8 */
        return 17;
    }
}

static bool
shape_classify(unsigned b, struct shape_hdr *h)
{
    h->lenw = 0;
    h->fixed = 0;
    h->per_len = SH_NONE;
    h->count = 0;
    if (b <= 0x7f || b >= 0xe0) {
        return true; /* fixint */
    }
    if (b <= 0x8f) {
        h->per_len = SH_MAP;
        h->count = b & 0x0f;
        return true;
    }
    if (b <= 0x9f) {
        h->per_len = SH_ARRAY;
        h->count = b & 0x0f;
        return true;
    }
    if (b <= 0xbf) {
        h->per_len = SH_BYTES;
        h->count = b & 0x1f;
        return true;
    }
    if (b >= 0xca && b <= 0xd8) {
        h->fixed = shape_fixed_size(b);
        return true;
    }
    /* bin, ext and str come in 8/16/32 forms, in that order: a 1, 2 or 4 byte length of
     * payload bytes (ext's followed by its type byte). */
    if ((b >= 0xc4 && b <= 0xc9) || (b >= 0xd9 && b <= 0xdb)) {
        unsigned first = b >= 0xd9 ? 0xd9 : (b >= 0xc7 ? 0xc7 : 0xc4);
        h->lenw = 1u << (b - first);
        h->fixed = first == 0xc7;
        h->per_len = SH_BYTES;
        return true;
    }
    /* array 16/32, then map 16/32: a 2 or 4 byte count of children. */
    if (b >= 0xdc && b <= 0xdf) {
        h->lenw = 2u << ((b - 0xdc) & 1);
        h->per_len = b <= 0xdd ? SH_ARRAY : SH_MAP;
        return true;
    }
    return b != 0xc1; /* nil, false and true are complete; 0xc1 is never used */
}

/* Reads the header (and skips the payload) of the item at *pos; stores in *children how many
 * elements it opens (map entries count twice). */
static cn_err
shape_item(const unsigned char *p, size_t len, size_t *pos, uint64_t *children,
           struct cn_errmsg *err)
{
    size_t at = *pos, o = *pos + 1;
    struct shape_hdr h;
    uint64_t skip;

    if (!shape_classify(p[at], &h)) {
        return cn_errmsg_set(err, CN_PARSE, "msgpack: reserved byte 0xc1 at byte %zu", at);
    }
    if (len - o < h.lenw) {
        return cn_errmsg_set(err, CN_PARSE, "msgpack: truncated input at byte %zu", at);
    }
    if (h.lenw > 0) {
        h.count = shape_be(p + o, h.lenw);
        o += h.lenw;
    }
    skip = h.fixed + (h.per_len == SH_BYTES ? h.count : 0);
    if (skip > len - o) {
        return cn_errmsg_set(err, CN_PARSE,
                             "msgpack: object at byte %zu needs %llu bytes, %zu remain", at,
                             (unsigned long long) skip, len - o);
    }
    *pos = o + (size_t) skip;
    *children = h.per_len == SH_ARRAY ? h.count : (h.per_len == SH_MAP ? 2 * h.count : 0);
    return CN_OK;
}

cn_err
ir_msgpack_shape_ok(const void *buf, size_t len, int max_depth, struct cn_errmsg *err)
{
    const unsigned char *p = buf;
    uint64_t left[IR_MSGPACK_SHAPE_MAX_DEPTH]; /* children each open container still owes */
    uint64_t owed = 1; /* items not yet started, over all open containers and the top */
    uint64_t n = 0;
    size_t pos = 0, at, top = 0;
    cn_err rv;

    if (max_depth < 1 || max_depth > IR_MSGPACK_SHAPE_MAX_DEPTH) {
        return cn_errmsg_set(err, CN_INVAL, "msgpack: max_depth %d out of 1..%d", max_depth,
                             IR_MSGPACK_SHAPE_MAX_DEPTH);
    }
    while (owed > 0) {
        /* The item about to be read sits at level top + 1. */
        if (top + 1 > (size_t) max_depth) {
            return cn_errmsg_set(err, CN_DEPTH, "msgpack: nesting deeper than %d at byte %zu",
                                 max_depth, pos);
        }
        if (pos >= len) {
            return cn_errmsg_set(err, CN_PARSE, "msgpack: truncated input at byte %zu", pos);
        }
        at = pos;
        if ((rv = shape_item(p, len, &pos, &n, err)) != CN_OK) {
            return rv;
        }
        owed--;
        if (n > 0) {
            /* Every owed item needs a byte of its own: this bounds msgpack-c's allocations. */
            if (owed + n > len - pos) {
                return cn_errmsg_set(err, CN_PARSE,
                                     "msgpack: container at byte %zu declares %llu elements, "
                                     "only %zu bytes remain",
                                     at, (unsigned long long) n, len - pos);
            }
            owed += n;
            left[top++] = n;
            continue;
        }
        /* A leaf (or empty container) is done: close every container it completes. */
        while (top > 0 && --left[top - 1] == 0) {
            top--;
        }
    }
    if (pos != len) {
        return cn_errmsg_set(err, CN_PARSE, "msgpack: %zu trailing bytes after the value",
                             len - pos);
    }
    return CN_OK;
}

/* ---- encoding ---- */

static int
mp_write(void *data, const char *buf, size_t len)
{
    return cn_buf_append(data, buf, len) == CN_OK ? 0 : -1;
}

static cn_err mp_pack(msgpack_packer *pk, struct ir_val v, unsigned flags, int depth,
                      bool unwrapped);

/* Packs an error map as ext IR_MP_EXT_ERROR around the map's own msgpack document. */
static cn_err
mp_pack_error(msgpack_packer *pk, struct ir_val v, unsigned flags, int depth)
{
    struct cn_buf body = CN_BUF_INIT;
    msgpack_packer bpk;
    cn_err rv;

    msgpack_packer_init(&bpk, &body, mp_write);
    if ((rv = mp_pack(&bpk, v, flags, depth, true)) != CN_OK) {
        goto out;
    }
    if (body.len > UINT32_MAX) {
        rv = CN_TOOBIG;
        goto out;
    }
    if (msgpack_pack_ext(pk, body.len, IR_MP_EXT_ERROR) != 0 ||
        msgpack_pack_ext_body(pk, body.data, body.len) != 0) {
        rv = CN_NOMEM;
        goto out;
    }
    rv = CN_OK;
out:
    cn_buf_fini(&body);
    return rv;
}

/* unwrapped: v is the map inside an error ext being packed, so do not wrap it again. */
/* Packs the header of a list (or a map) of n items: msgpack counts them in 32 bits. */
static cn_err
mp_pack_header(msgpack_packer *pk, size_t n, bool map)
{
    if (n > UINT32_MAX) {
        return CN_TOOBIG;
    }
    return (map ? msgpack_pack_map(pk, n) : msgpack_pack_array(pk, n)) != 0 ? CN_NOMEM : CN_OK;
}

static cn_err
mp_pack(msgpack_packer *pk, struct ir_val v, unsigned flags, int depth, bool unwrapped)
{
    struct ir_val k;
    size_t i, n;
    cn_err rv;
    int r;

    if (depth > IR_VALUE_MAX_DEPTH) {
        return CN_DEPTH;
    }
    switch (v.type) {
    case IR_T_NULL:
        r = msgpack_pack_nil(pk);
        break;
    case IR_T_BOOL:
        r = v.u.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
        break;
    case IR_T_INT:
        r = msgpack_pack_int64(pk, v.u.i);
        break;
    case IR_T_FLOAT:
        r = msgpack_pack_double(pk, v.u.f);
        break;
    case IR_T_STR:
        n = ir_str_len(v);
        if (n > UINT32_MAX) {
            return CN_TOOBIG;
        }
        r = msgpack_pack_str_with_body(pk, ir_str_data(v), n);
        break;
    case IR_T_LIST:
        n = ir_list_len(v);
        if ((rv = mp_pack_header(pk, n, false)) != CN_OK) {
            return rv;
        }
        for (i = 0; i < n; i++) {
            if ((rv = mp_pack(pk, ir_list_items(v)[i], flags, depth + 1, false)) != CN_OK) {
                return rv;
            }
        }
        return CN_OK;
    case IR_T_MAP:
        if ((flags & IR_MP_INTERNAL) && ir_map_is_error(v) && !unwrapped) {
            return mp_pack_error(pk, v, flags, depth);
        }
        n = ir_map_len(v);
        if ((rv = mp_pack_header(pk, n, true)) != CN_OK) {
            return rv;
        }
        for (i = 0; i < n; i++) {
            k = ir_map_key_at(v, i);
            if ((rv = mp_pack(pk, k, flags, depth + 1, false)) != CN_OK ||
                (rv = mp_pack(pk, ir_map_val_at(v, i), flags, depth + 1, false)) != CN_OK) {
                return rv;
            }
        }
        return CN_OK;
    default:
        return CN_INVAL;
    }
    return r == 0 ? CN_OK : CN_NOMEM;
}

cn_err
ir_val_to_msgpack(struct ir_val v, unsigned flags, struct cn_buf *out)
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, out, mp_write);
    return mp_pack(&pk, v, flags, 1, false);
}

/* ---- decoding ---- */

static cn_err mp_decode(const char *buf, size_t len, unsigned flags, int level, struct ir_val *out,
                        struct cn_errmsg *err);

static bool
mp_is_map_header(unsigned char b)
{
    return (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf;
}

static cn_err mp_obj_to_val(const msgpack_object *o, unsigned flags, int level, struct ir_val *out,
                            struct cn_errmsg *err);

static cn_err
mp_array(const msgpack_object_array *a, unsigned flags, int level, struct ir_val *out,
         struct cn_errmsg *err)
{
    struct ir_val v;
    uint32_t i;
    cn_err rv;

    if ((rv = ir_list_new(a->size, &v)) != CN_OK) {
        return cn_errmsg_set(err, rv, "msgpack: %s", cn_strerror(rv));
    }
    for (i = 0; i < a->size; i++) {
        if ((rv = mp_obj_to_val(&a->ptr[i], flags, level + 1, &ir_list_items(v)[i], err)) !=
            CN_OK) {
            ir_val_release(v);
            return rv;
        }
    }
    *out = v;
    return CN_OK;
}

static cn_err
mp_map(const msgpack_object_map *m, unsigned flags, int level, struct ir_val *out,
       struct cn_errmsg *err)
{
    struct ir_val v, k = ir_null(), item = ir_null();
    uint32_t i;
    cn_err rv;

    if ((rv = ir_map_new(m->size, &v)) != CN_OK) {
        return cn_errmsg_set(err, rv, "msgpack: %s", cn_strerror(rv));
    }
    for (i = 0; i < m->size; i++) {
        if (m->ptr[i].key.type != MSGPACK_OBJECT_STR) {
            rv = cn_errmsg_set(err, CN_TYPE, "msgpack: map key is not a string");
            goto fail;
        }
        if ((rv = mp_obj_to_val(&m->ptr[i].key, flags, level + 1, &k, err)) != CN_OK) {
            goto fail;
        }
        if ((rv = mp_obj_to_val(&m->ptr[i].val, flags, level + 1, &item, err)) != CN_OK) {
            ir_val_release(k);
            goto fail;
        }
        if ((rv = ir_map_set(&v, k, item)) != CN_OK) {
            rv = cn_errmsg_set(err, rv, "msgpack: %s", cn_strerror(rv));
            goto fail;
        }
    }
    *out = v;
    return CN_OK;

fail:
    ir_val_release(v);
    return rv;
}

static cn_err
mp_ext(const msgpack_object_ext *e, unsigned flags, int level, struct ir_val *out,
       struct cn_errmsg *err)
{
    struct ir_val v = ir_null();
    cn_err rv;

    if (!(flags & IR_MP_INTERNAL) || e->type != IR_MP_EXT_ERROR) {
        return cn_errmsg_set(err, CN_TYPE, "msgpack: ext type %d is not a value type",
                             (int) e->type);
    }
    /* The payload must itself be a map, not something that decodes to one (another error
     * ext), so check its header byte before decoding. */
    if (e->size == 0 || !mp_is_map_header((unsigned char) e->ptr[0])) {
        return cn_errmsg_set(err, CN_PARSE, "msgpack: error ext does not hold a map");
    }
    /* Same level: the wrapper adds no nesting (see DESIGN). */
    if ((rv = mp_decode(e->ptr, e->size, flags, level, &v, err)) != CN_OK) {
        return rv;
    }
    ir_map_set_error(&v, true);
    *out = v;
    return CN_OK;
}

cn_err
ir_val_from_msgpack_scalar(const struct msgpack_object *o, struct ir_val *out)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        *out = ir_null();
        return CN_OK;
    case MSGPACK_OBJECT_BOOLEAN:
        *out = ir_bool(o->via.boolean);
        return CN_OK;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t) INT64_MAX) {
            return CN_RANGE;
        }
        *out = ir_int((int64_t) o->via.u64);
        return CN_OK;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = ir_int(o->via.i64);
        return CN_OK;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        /* msgpack-c widens float32 into f64 already. */
        *out = ir_float(o->via.f64);
        return CN_OK;
    case MSGPACK_OBJECT_STR:
        return ir_str_new(o->via.str.ptr, o->via.str.size, out);
    default:
        return CN_TYPE;
    }
}

static cn_err
mp_obj_to_val(const msgpack_object *o, unsigned flags, int level, struct ir_val *out,
              struct cn_errmsg *err)
{
    cn_err rv;

    /* The shape check already bounds depth; this keeps the recursion safe on its own. */
    if (level > IR_VALUE_MAX_DEPTH) {
        return cn_errmsg_set(err, CN_DEPTH, "msgpack: nesting deeper than %d", IR_VALUE_MAX_DEPTH);
    }
    switch (o->type) {
    case MSGPACK_OBJECT_ARRAY:
        return mp_array(&o->via.array, flags, level, out, err);
    case MSGPACK_OBJECT_MAP:
        return mp_map(&o->via.map, flags, level, out, err);
    case MSGPACK_OBJECT_BIN:
        return cn_errmsg_set(err, CN_TYPE, "msgpack: bin is not a value type");
    case MSGPACK_OBJECT_EXT:
        return mp_ext(&o->via.ext, flags, level, out, err);
    default:
        break;
    }
    switch (rv = ir_val_from_msgpack_scalar(o, out)) {
    case CN_OK:
        return CN_OK;
    case CN_RANGE:
        return cn_errmsg_set(err, CN_RANGE, "msgpack: integer %llu does not fit in int64",
                             (unsigned long long) o->via.u64);
    case CN_TYPE:
        return cn_errmsg_set(err, CN_PARSE, "msgpack: unknown object type %d", (int) o->type);
    default:
        return cn_errmsg_set(err, rv, "msgpack: string: %s", cn_strerror(rv));
    }
}

/* Decodes one document whose top object sits at `level` of the enclosing value. */
static cn_err
mp_decode(const char *buf, size_t len, unsigned flags, int level, struct ir_val *out,
          struct cn_errmsg *err)
{
    msgpack_unpacked u;
    msgpack_unpack_return r;
    size_t off = 0;
    cn_err rv;

    if ((rv = ir_msgpack_shape_ok(buf, len, IR_VALUE_MAX_DEPTH - level + 1, err)) != CN_OK) {
        return rv;
    }
    msgpack_unpacked_init(&u);
    r = msgpack_unpack_next(&u, buf, len, &off);
    if (r == MSGPACK_UNPACK_NOMEM_ERROR) {
        rv = cn_errmsg_set(err, CN_NOMEM, "msgpack: out of memory");
    } else if (r != MSGPACK_UNPACK_SUCCESS || off != len) {
        /* Unreachable after the shape check, kept so a msgpack-c surprise is an error. */
        rv = cn_errmsg_set(err, CN_PARSE, "msgpack: unpack failed (%d)", (int) r);
    } else {
        rv = mp_obj_to_val(&u.data, flags, level, out, err);
    }
    msgpack_unpacked_destroy(&u);
    return rv;
}

cn_err
ir_val_from_msgpack(const void *buf, size_t len, unsigned flags, struct ir_val *out,
                    struct cn_errmsg *err)
{
    return mp_decode(buf, len, flags, 1, out, err);
}
