/* SPDX-License-Identifier: MIT */
/*
 * Worker protocol codec: wp_msg <-> msgpack. Field tables per kind live in docs/protocol.md;
 * this file is the one place that knows them. Values (kwargs, results, errors) travel as `bin`
 * fields holding their own msgpack value document, so the envelope stays shallow and each value
 * gets the full nesting depth (docs/values.md).
 */
#include "worker-protocol/proto.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "ir/base/names.h"

#define WP_ENVELOPE_DEPTH 4

CN_ENUM_NAMES(wp_kind_name, enum wp_kind, WP_KINDS, WP_KIND_COUNT_)

void
wp_msg_init(struct wp_msg *m, enum wp_kind kind)
{
    memset(m, 0, sizeof(*m));
    m->kind = kind;
    m->room = WP_ROOM_ANY;
}

void
wp_msg_fini(struct wp_msg *m)
{
    uint32_t i;

    if (m->arena != NULL) {
        for (i = 0; i < m->noutcomes; i++) {
            ir_val_release(m->outcomes[i].value);
        }
        for (i = 0; i < m->nitems; i++) {
            ir_val_release(m->items[i].kwargs);
            ir_val_release(m->items[i].last_error);
        }
        cn_arena_free(m->arena);
    }
    wp_msg_init(m, m->kind);
}

/* ---- encoding ----------------------------------------------------------------------------- */

struct wenc {
    msgpack_packer pk;
    struct cn_buf tmp;
    int bad;
    cn_err rv;
};

static int
wenc_write(void *data, const char *buf, size_t len)
{
    return cn_buf_append(data, buf, len) == CN_OK ? 0 : -1;
}

static void
w_str(struct wenc *e, const char *s)
{
    if (s == NULL) {
        e->bad |= msgpack_pack_nil(&e->pk);
    } else {
        e->bad |= msgpack_pack_str_with_body(&e->pk, s, strlen(s));
    }
}

static void
w_kv_str(struct wenc *e, const char *k, const char *v)
{
    w_str(e, k);
    w_str(e, v);
}

static void
w_kv_u(struct wenc *e, const char *k, uint64_t v)
{
    w_str(e, k);
    e->bad |= msgpack_pack_uint64(&e->pk, v);
}

static void
w_kv_bin(struct wenc *e, const char *k, const void *p, size_t n)
{
    w_str(e, k);
    e->bad |= msgpack_pack_bin_with_body(&e->pk, p, n);
}

/* Number of fields each kind writes after "v" and "kind". */
static uint32_t
field_count(const struct wp_msg *m)
{
    switch (m->kind) {
    case WP_HELLO:
        return 6;
    case WP_WELCOME:
        return 2;
    case WP_REFUSED:
        return 1;
    case WP_CANCEL:
        return 3;
    default:
        return 0;
    }
}

/* The value document of v, in e->tmp. */
static bool
w_val_doc(struct wenc *e, struct ir_val v)
{
    cn_err rv;

    cn_buf_clear(&e->tmp);
    if ((rv = ir_val_to_msgpack(v, IR_MP_PLAIN, &e->tmp)) != CN_OK) {
        e->rv = rv == CN_NOMEM ? CN_NOMEM : CN_INVAL;
        e->bad |= 1;
        return false;
    }
    return true;
}

static void
w_kv_val(struct wenc *e, const char *k, struct ir_val v)
{
    if (w_val_doc(e, v)) {
        w_kv_bin(e, k, e->tmp.data, e->tmp.len);
    }
}

static void
w_outcome(struct wenc *e, const struct wp_outcome *o)
{
    e->bad |= msgpack_pack_map(&e->pk, 5);
    w_kv_bin(e, "exec_id", o->exec_id, 16);
    w_kv_u(e, "attempt", o->attempt);
    w_kv_u(e, "token", o->token);
    w_str(e, "ok");
    e->bad |= o->ok ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk);
    w_kv_val(e, "value", o->value);
}

static void
w_dispatch(struct wenc *e, const struct wp_dispatch *d)
{
    e->bad |= msgpack_pack_map(&e->pk, 7 + (d->last_error.type == IR_T_MAP) + (d->timeout_ms > 0));
    w_kv_bin(e, "instance", d->instance_id, 16);
    w_kv_bin(e, "exec_id", d->exec_id, 16);
    w_kv_u(e, "attempt", d->attempt);
    w_kv_u(e, "token", d->token);
    w_kv_str(e, "action", d->action);
    w_kv_val(e, "kwargs", d->kwargs);
    w_str(e, "deadline_ms");
    e->bad |= msgpack_pack_int64(&e->pk, d->deadline_ms);
    if (d->timeout_ms > 0) {
        w_kv_u(e, "timeout_ms", d->timeout_ms);
    }
    if (d->last_error.type == IR_T_MAP) {
        w_kv_val(e, "last_error", d->last_error);
    }
}

/* ---- batches ------------------------------------------------------------------------------ */

/* The entry count is an array32 header patched at finish: its size is fixed, so entries can be
 * appended before the count is known (msgpack allows a wider header than needed). */
static cn_err
batch_begin(struct wp_batch *b, enum wp_kind kind, uint32_t room)
{
    static const char hdr[5] = {(char) 0xdd, 0, 0, 0, 0};
    struct wenc e;

    memset(b, 0, sizeof(*b));
    if ((kind != WP_READY && kind != WP_DISPATCH) ||
        (room != WP_ROOM_ANY && (kind != WP_READY || room > WP_MAX_BATCH))) {
        return CN_INVAL;
    }
    memset(&e, 0, sizeof(e));
    msgpack_packer_init(&e.pk, &b->buf, wenc_write);
    e.bad |= msgpack_pack_map(&e.pk, room != WP_ROOM_ANY ? 4 : 3);
    w_kv_u(&e, "v", WP_PROTOCOL_VERSION);
    w_kv_str(&e, "kind", wp_kind_name(kind));
    if (room != WP_ROOM_ANY) {
        w_kv_u(&e, "room", room);
    }
    w_str(&e, kind == WP_READY ? "outcomes" : "items");
    b->count_at = b->buf.len;
    if (e.bad || cn_buf_append(&b->buf, hdr, sizeof(hdr)) != CN_OK) {
        wp_batch_fini(b);
        return CN_NOMEM;
    }
    return CN_OK;
}

cn_err
wp_batch_begin(struct wp_batch *b, enum wp_kind kind)
{
    return batch_begin(b, kind, WP_ROOM_ANY);
}

cn_err
wp_batch_begin_ready(struct wp_batch *b, uint32_t room)
{
    return batch_begin(b, WP_READY, room);
}

/* Appends one entry written by fn; rolls back on any failure. */
static cn_err
batch_add(struct wp_batch *b, void (*fn)(struct wenc *, const void *), const void *entry)
{
    size_t mark = b->buf.len;
    struct wenc e;

    if (b->n >= WP_MAX_BATCH) {
        return CN_TOOBIG;
    }
    memset(&e, 0, sizeof(e));
    e.tmp = b->tmp;
    msgpack_packer_init(&e.pk, &b->buf, wenc_write);
    fn(&e, entry);
    b->tmp = e.tmp;
    if (e.bad || b->buf.len > WP_MAX_BODY) {
        b->buf.len = mark;
        return e.bad ? (e.rv != CN_OK ? e.rv : CN_NOMEM) : CN_TOOBIG;
    }
    b->n++;
    return CN_OK;
}

static void
batch_outcome(struct wenc *e, const void *p)
{
    w_outcome(e, p);
}

static void
batch_dispatch(struct wenc *e, const void *p)
{
    const struct wp_dispatch *d = p;

    if (d->action == NULL || d->kwargs.type != IR_T_MAP) {
        e->rv = CN_INVAL;
        e->bad |= 1;
        return;
    }
    w_dispatch(e, d);
}

cn_err
wp_batch_add_outcome(struct wp_batch *b, const struct wp_outcome *o)
{
    return batch_add(b, batch_outcome, o);
}

cn_err
wp_batch_add_dispatch(struct wp_batch *b, const struct wp_dispatch *d)
{
    return batch_add(b, batch_dispatch, d);
}

void
wp_batch_finish(struct wp_batch *b)
{
    unsigned char *p = (unsigned char *) b->buf.data + b->count_at + 1;

    p[0] = (unsigned char) (b->n >> 24);
    p[1] = (unsigned char) (b->n >> 16);
    p[2] = (unsigned char) (b->n >> 8);
    p[3] = (unsigned char) b->n;
}

void
wp_batch_fini(struct wp_batch *b)
{
    cn_buf_fini(&b->buf);
    cn_buf_fini(&b->tmp);
    memset(b, 0, sizeof(*b));
}

/* READY and DISPATCH through the batch builder: one encoding for both paths. */
static cn_err
encode_batch(const struct wp_msg *m, struct cn_buf *out)
{
    struct wp_batch b;
    uint32_t i, n = m->kind == WP_READY ? m->noutcomes : m->nitems;
    cn_err rv;

    if (m->kind == WP_DISPATCH && n == 0) {
        return CN_INVAL;
    }
    if ((rv = batch_begin(&b, m->kind, m->kind == WP_READY ? m->room : WP_ROOM_ANY)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < n && rv == CN_OK; i++) {
        rv = m->kind == WP_READY ? wp_batch_add_outcome(&b, &m->outcomes[i])
                                 : wp_batch_add_dispatch(&b, &m->items[i]);
    }
    if (rv == CN_OK) {
        wp_batch_finish(&b);
        rv = cn_buf_append(out, b.buf.data, b.buf.len);
    }
    wp_batch_fini(&b);
    return rv;
}

cn_err
wp_msg_encode(const struct wp_msg *m, struct cn_buf *out)
{
    struct wenc e;
    uint32_t i;

    if ((unsigned) m->kind >= (unsigned) WP_KIND_COUNT_ ||
        (m->kind == WP_HELLO && (m->worker == NULL || m->sdk == NULL || m->slots == 0)) ||
        (m->kind == WP_REFUSED && m->reason == NULL)) {
        return CN_INVAL;
    }
    if (m->kind == WP_READY || m->kind == WP_DISPATCH) {
        return encode_batch(m, out);
    }
    memset(&e, 0, sizeof(e));
    msgpack_packer_init(&e.pk, out, wenc_write);
    e.bad |= msgpack_pack_map(&e.pk, 2 + field_count(m));
    w_kv_u(&e, "v", WP_PROTOCOL_VERSION);
    w_kv_str(&e, "kind", wp_kind_name(m->kind));
    switch (m->kind) {
    case WP_HELLO:
        w_kv_str(&e, "worker", m->worker);
        w_kv_str(&e, "sdk", m->sdk);
        w_kv_str(&e, "credential", m->credential);
        w_str(&e, "actions");
        e.bad |= msgpack_pack_array(&e.pk, m->nactions);
        for (i = 0; i < m->nactions; i++) {
            w_str(&e, m->actions[i]);
        }
        w_kv_u(&e, "slots", m->slots);
        w_kv_u(&e, "prefetch", m->prefetch);
        break;
    case WP_WELCOME:
        w_kv_u(&e, "session", m->session);
        w_kv_u(&e, "idle_ms", m->idle_ms);
        break;
    case WP_REFUSED:
        w_kv_str(&e, "reason", m->reason);
        break;
    case WP_CANCEL:
        w_kv_bin(&e, "exec_id", m->exec_id, 16);
        w_kv_u(&e, "attempt", m->attempt);
        w_kv_u(&e, "token", m->token);
        break;
    default:
        break;
    }
    cn_buf_fini(&e.tmp);
    if (e.bad) {
        return e.rv != CN_OK ? e.rv : CN_NOMEM;
    }
    return CN_OK;
}

/* ---- decoding ----------------------------------------------------------------------------- */

struct wdec {
    struct wp_msg *m;
    struct cn_errmsg *err;
    cn_err rv;
};

static bool
wfail(struct wdec *d, cn_err rv, const char *what, const char *field)
{
    if (d->rv == CN_OK) {
        d->rv = cn_errmsg_set(d->err, rv, "protocol: %s%s%s", what, field ? ": " : "",
                              field ? field : "");
    }
    return false;
}

/* Names travel as C strings on both sides: UTF-8, bounded, and without NUL bytes (which
 * would silently cut them short). */
static bool
name_ok(const char *p, size_t n)
{
    return n <= WP_MAX_NAME && memchr(p, '\0', n) == NULL && ir_utf8_valid(p, n, NULL);
}

static const msgpack_object *
wfield(const msgpack_object *map, const char *key)
{
    uint32_t i;
    size_t n = strlen(key);

    for (i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0) {
            return &map->via.map.ptr[i].val;
        }
    }
    return NULL;
}

static bool
r_u(struct wdec *d, const msgpack_object *map, const char *key, uint64_t max, uint64_t *v)
{
    const msgpack_object *o = wfield(map, key);

    if (o == NULL) {
        return wfail(d, CN_PROTO, "missing field", key);
    }
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max) {
        return wfail(d, CN_PROTO, "field must be an unsigned integer in range", key);
    }
    *v = o->via.u64;
    return true;
}

static bool
r_u32(struct wdec *d, const msgpack_object *map, const char *key, uint32_t min, uint32_t max,
      uint32_t *v)
{
    uint64_t u;

    if (!r_u(d, map, key, max, &u)) {
        return false;
    }
    if (u < min) {
        return wfail(d, CN_PROTO, "field out of range", key);
    }
    *v = (uint32_t) u;
    return true;
}

/* An optional unsigned field: absent or nil gives def. */
static bool
r_u32_opt(struct wdec *d, const msgpack_object *map, const char *key, uint32_t max, uint32_t def,
          uint32_t *v)
{
    const msgpack_object *o = wfield(map, key);

    if (o == NULL || o->type == MSGPACK_OBJECT_NIL) {
        *v = def;
        return true;
    }
    return r_u32(d, map, key, 0, max, v);
}

/* A string field (nullable: absent or nil gives NULL), copied into the message's arena. */
static bool
r_str(struct wdec *d, const msgpack_object *map, const char *key, bool nullable, const char **out)
{
    const msgpack_object *o = wfield(map, key);

    *out = NULL;
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL) {
        return nullable || wfail(d, CN_PROTO, "missing field", key);
    }
    if (o->type != MSGPACK_OBJECT_STR || !name_ok(o->via.str.ptr, o->via.str.size)) {
        return wfail(d, CN_PROTO, "field must be a UTF-8 string of at most 256 bytes, no NUL", key);
    }
    *out = cn_arena_strndup(d->m->arena, o->via.str.ptr, o->via.str.size);
    return *out != NULL || wfail(d, CN_NOMEM, "out of memory", NULL);
}

static bool
r_id(struct wdec *d, const msgpack_object *map, const char *key, uint8_t id[16])
{
    const msgpack_object *o = wfield(map, key);

    if (o == NULL || o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != 16) {
        return wfail(d, CN_PROTO, "field must be a 16-byte id", key);
    }
    memcpy(id, o->via.bin.ptr, 16);
    return true;
}

static bool
r_val(struct wdec *d, const msgpack_object *map, const char *key, struct ir_val *v)
{
    const msgpack_object *o = wfield(map, key);
    struct cn_errmsg em;
    cn_err rv;

    if (o == NULL || o->type != MSGPACK_OBJECT_BIN) {
        return wfail(d, CN_PROTO, "field must be bin holding a msgpack value", key);
    }
    rv = ir_val_from_msgpack(o->via.bin.ptr, o->via.bin.size, IR_MP_PLAIN, v, &em);
    if (rv != CN_OK) {
        return wfail(d, rv == CN_NOMEM ? CN_NOMEM : CN_PROTO, em.text, key);
    }
    return true;
}

static bool
r_hello(struct wdec *d, const msgpack_object *map)
{
    struct wp_msg *m = d->m;
    const msgpack_object *a = wfield(map, "actions");
    uint32_t i;

    if (!r_str(d, map, "worker", false, &m->worker) || !r_str(d, map, "sdk", false, &m->sdk) ||
        !r_str(d, map, "credential", true, &m->credential) ||
        !r_u32(d, map, "slots", 1, WP_MAX_SLOTS, &m->slots) ||
        !r_u32_opt(d, map, "prefetch", WP_MAX_PREFETCH, 0, &m->prefetch)) {
        return false;
    }
    if (a == NULL || a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size > WP_MAX_ACTIONS) {
        return wfail(d, CN_PROTO, "field must be an array of at most 4096 names", "actions");
    }
    m->nactions = a->via.array.size;
    m->actions = cn_arena_calloc(m->arena, m->nactions ? m->nactions : 1, sizeof(*m->actions));
    if (m->actions == NULL) {
        return wfail(d, CN_NOMEM, "out of memory", NULL);
    }
    for (i = 0; i < m->nactions; i++) {
        const msgpack_object *s = &a->via.array.ptr[i];
        if (s->type != MSGPACK_OBJECT_STR || s->via.str.size == 0 ||
            !name_ok(s->via.str.ptr, s->via.str.size)) {
            return wfail(d, CN_PROTO, "action names must be non-empty UTF-8 strings", "actions");
        }
        m->actions[i] = cn_arena_strndup(m->arena, s->via.str.ptr, s->via.str.size);
        if (m->actions[i] == NULL) {
            return wfail(d, CN_NOMEM, "out of memory", NULL);
        }
    }
    return true;
}

static bool
r_outcome(struct wdec *d, const msgpack_object *o, struct wp_outcome *out)
{
    const msgpack_object *ok;

    if (o->type != MSGPACK_OBJECT_MAP) {
        return wfail(d, CN_PROTO, "every outcome must be a map", "outcomes");
    }
    ok = wfield(o, "ok");
    if (ok == NULL || ok->type != MSGPACK_OBJECT_BOOLEAN) {
        return wfail(d, CN_PROTO, "field must be a boolean", "outcomes.ok");
    }
    out->ok = ok->via.boolean;
    if (!r_id(d, o, "exec_id", out->exec_id) ||
        !r_u32(d, o, "attempt", 1, UINT32_MAX, &out->attempt) ||
        !r_u(d, o, "token", UINT64_MAX, &out->token) || !r_val(d, o, "value", &out->value)) {
        return false;
    }
    if (!out->ok) {
        /* An error is a map with at least a string "type" (docs/language.md, "Errors"). */
        const struct ir_val *t =
            out->value.type == IR_T_MAP ? ir_map_get(out->value, "type", 4) : NULL;
        if (t == NULL || t->type != IR_T_STR) {
            return wfail(d, CN_PROTO, "an error must be a map with a string \"type\"",
                         "outcomes.value");
        }
        /* The plain encoding drops the error flag: `ok` restores it, so the executor's
         * `except` and retry policies see an error, not a map that looks like one. */
        ir_map_set_error(&out->value, true);
    }
    return true;
}

static bool
r_dispatch(struct wdec *d, const msgpack_object *map, struct wp_dispatch *out)
{
    const msgpack_object *o;

    if (map->type != MSGPACK_OBJECT_MAP) {
        return wfail(d, CN_PROTO, "every item must be a map", "items");
    }
    if (!r_id(d, map, "instance", out->instance_id) || !r_id(d, map, "exec_id", out->exec_id) ||
        !r_u32(d, map, "attempt", 1, UINT32_MAX, &out->attempt) ||
        !r_u(d, map, "token", UINT64_MAX, &out->token) ||
        !r_str(d, map, "action", false, &out->action) || !r_val(d, map, "kwargs", &out->kwargs)) {
        return false;
    }
    if (out->kwargs.type != IR_T_MAP) {
        return wfail(d, CN_PROTO, "kwargs must be a map", "items.kwargs");
    }
    if (wfield(map, "last_error") != NULL) {
        const struct ir_val *t;
        if (!r_val(d, map, "last_error", &out->last_error)) {
            return false;
        }
        t = out->last_error.type == IR_T_MAP ? ir_map_get(out->last_error, "type", 4) : NULL;
        if (t == NULL || t->type != IR_T_STR) {
            return wfail(d, CN_PROTO, "last_error must be an error map with a string \"type\"",
                         "items.last_error");
        }
        ir_map_set_error(&out->last_error, true);
    }
    if (wfield(map, "timeout_ms") != NULL &&
        !r_u(d, map, "timeout_ms", INT64_MAX, &out->timeout_ms)) {
        return false;
    }
    o = wfield(map, "deadline_ms");
    if (o != NULL && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        out->deadline_ms = (int64_t) o->via.u64;
        return true;
    }
    if (o != NULL && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        out->deadline_ms = o->via.i64;
        return true;
    }
    return wfail(d, CN_PROTO, "field must be an integer", "items.deadline_ms");
}

/* The array field key of a batch kind, with min..WP_MAX_BATCH entries, each read by the
 * matching reader into an arena array. Values decoded so far are counted in *n at once, so
 * wp_msg_fini releases them whatever fails later. */
static bool
r_batch(struct wdec *d, const msgpack_object *map, const char *key, uint32_t min)
{
    struct wp_msg *m = d->m;
    const msgpack_object *a = wfield(map, key);
    bool ready = m->kind == WP_READY;
    uint32_t i, n;

    if (a == NULL || a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size < min ||
        a->via.array.size > WP_MAX_BATCH) {
        return wfail(d, CN_PROTO,
                     min ? "field must be an array of 1 to 8192 entries"
                         : "field must be an array of at most 8192 entries",
                     key);
    }
    n = a->via.array.size;
    if (ready) {
        m->outcomes = cn_arena_calloc(m->arena, n ? n : 1, sizeof(*m->outcomes));
    } else {
        m->items = cn_arena_calloc(m->arena, n ? n : 1, sizeof(*m->items));
    }
    if (ready ? m->outcomes == NULL : m->items == NULL) {
        return wfail(d, CN_NOMEM, "out of memory", NULL);
    }
    for (i = 0; i < n; i++) {
        if (ready) {
            m->outcomes[i].value = ir_null();
            m->noutcomes = i + 1;
            if (!r_outcome(d, &a->via.array.ptr[i], &m->outcomes[i])) {
                return false;
            }
        } else {
            m->items[i].kwargs = ir_null();
            m->items[i].last_error = ir_null();
            m->nitems = i + 1;
            if (!r_dispatch(d, &a->via.array.ptr[i], &m->items[i])) {
                return false;
            }
        }
    }
    return true;
}

static bool
r_body(struct wdec *d, const msgpack_object *map)
{
    struct wp_msg *m = d->m;

    switch (m->kind) {
    case WP_HELLO:
        return r_hello(d, map);
    case WP_WELCOME:
        if (!r_u(d, map, "session", UINT64_MAX, &m->session)) {
            return false;
        }
        return r_u32(d, map, "idle_ms", 0, UINT32_MAX, &m->idle_ms);
    case WP_REFUSED:
        return r_str(d, map, "reason", false, &m->reason);
    case WP_READY:
        return r_u32_opt(d, map, "room", WP_MAX_BATCH, WP_ROOM_ANY, &m->room) &&
               r_batch(d, map, "outcomes", 0);
    case WP_DISPATCH:
        return r_batch(d, map, "items", 1);
    case WP_CANCEL:
        return r_id(d, map, "exec_id", m->exec_id) &&
               r_u32(d, map, "attempt", 1, UINT32_MAX, &m->attempt) &&
               r_u(d, map, "token", UINT64_MAX, &m->token);
    default:
        return true; /* control, goodbye, noop, ack carry nothing */
    }
}

cn_err
wp_msg_decode(const void *buf, size_t len, struct wp_msg *m, struct cn_errmsg *err)
{
    msgpack_unpacked up;
    struct wdec d;
    const msgpack_object *root, *kind;
    uint64_t v;
    size_t off = 0;
    unsigned k;
    cn_err rv;

    wp_msg_init(m, WP_NOOP);
    if (len > WP_MAX_MSG) {
        return cn_errmsg_set(err, CN_TOOBIG, "protocol: message of %zu bytes (limit %u)", len,
                             WP_MAX_MSG);
    }
    if ((rv = ir_msgpack_shape_ok(buf, len, WP_ENVELOPE_DEPTH, err)) != CN_OK) {
        return rv == CN_NOMEM ? rv : CN_PROTO;
    }
    m->arena = cn_arena_new(1024);
    if (m->arena == NULL) {
        return CN_NOMEM;
    }
    memset(&d, 0, sizeof(d));
    d.m = m;
    d.err = err;
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
        wfail(&d, CN_PROTO, "undecodable msgpack", NULL);
        goto out;
    }
    root = &up.data;
    if (root->type != MSGPACK_OBJECT_MAP) {
        wfail(&d, CN_PROTO, "a message must be a map", NULL);
        goto out;
    }
    if (!r_u(&d, root, "v", UINT32_MAX, &v)) {
        goto out;
    }
    if (v != WP_PROTOCOL_VERSION) {
        d.rv = cn_errmsg_set(err, CN_VERSION, "protocol: version %llu (this side speaks %d)",
                             (unsigned long long) v, WP_PROTOCOL_VERSION);
        goto out;
    }
    kind = wfield(root, "kind");
    if (kind == NULL || kind->type != MSGPACK_OBJECT_STR) {
        wfail(&d, CN_PROTO, "missing field", "kind");
        goto out;
    }
    for (k = 0; k < (unsigned) WP_KIND_COUNT_; k++) {
        const char *name = wp_kind_name((enum wp_kind) k);
        if (strlen(name) == kind->via.str.size &&
            memcmp(name, kind->via.str.ptr, kind->via.str.size) == 0) {
            break;
        }
    }
    if (k == (unsigned) WP_KIND_COUNT_) {
        wfail(&d, CN_PROTO, "unknown message kind", NULL);
        goto out;
    }
    m->kind = (enum wp_kind) k;
    (void) r_body(&d, root);
out:
    msgpack_unpacked_destroy(&up);
    if (d.rv != CN_OK) {
        wp_msg_fini(m);
        return d.rv;
    }
    return CN_OK;
}
