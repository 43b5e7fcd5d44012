/* SPDX-License-Identifier: MIT */
/*
 * Snapshot codec: the live execution state of one instance as msgpack. Only live execution
 * nodes (running, backing off, sleeping, aggregating) and the scopes they use are written,
 * renumbered densely, so the size follows the live state.
 * Values are embedded as `bin` holding their own value document, which keeps this envelope
 * shallow and lets each value use the full nesting depth.
 *
 *   {"format": 2|3, "instance": bin(16), "rng": uint, "outcome": uint, "result": bin|nil,
 *    "scopes": [[frame, parent|nil, vars: bin], ...],
 *    "nodes":  [[id: bin(16), node, status, scope, fork_agg|nil, fork_idx, attempt,
 *                scheduled_at, deadline, item: bin|nil, slots: [[ok, bin]|nil, ...],
 *                first_at, last_error: bin|nil], ...],
 *    "cleanup": [outcome, until, timer: bin(16), error: bin, before: bin]}   (format 3 only)
 *
 * Format 3 is format 2 with the cleanup under way (cleanup.c); it is written only while there is
 * one, so that a runner of the release before resumes every other snapshot during an upgrade.
 * Format 1 (nodes of 11 fields, without first_at and last_error) still decodes, so instances a
 * runner of the previous release left behind resume: their first_at reads as unknown (0: no
 * max_elapsed bound applies to that action) and their last error as none.
 *
 * Decoding checks every reference against the template and the state machine of exec_int.h,
 * and every time against [0, SNAP_MAX_TIME_MS], so a corrupt snapshot is an error
 * (CN_PARSE/CN_RANGE/CN_VERSION), never a crash or an overflow.
 */
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "runner/exec/exec_int.h"

#define SNAP_MAX_DEPTH 8

/* ---- encoding ----------------------------------------------------------------------------- */

struct senc {
    msgpack_packer pk;
    struct cn_buf tmp;
    int bad;
    cn_err rv;
};

static int
senc_write(void *data, const char *buf, size_t len)
{
    return cn_buf_append(data, buf, len) == CN_OK ? 0 : -1;
}

static void
s_u(struct senc *e, uint64_t v)
{
    e->bad |= msgpack_pack_uint64(&e->pk, v);
}

static void
s_i(struct senc *e, int64_t v)
{
    e->bad |= msgpack_pack_int64(&e->pk, v);
}

static void
s_opt(struct senc *e, uint32_t v)
{
    e->bad |= v == RN_NONE ? msgpack_pack_nil(&e->pk) : msgpack_pack_uint32(&e->pk, v);
}

static void
s_bin(struct senc *e, const void *p, size_t n)
{
    e->bad |= msgpack_pack_bin_with_body(&e->pk, p, n);
}

static void
s_key(struct senc *e, const char *k)
{
    e->bad |= msgpack_pack_str_with_body(&e->pk, k, strlen(k));
}

static void
s_val(struct senc *e, struct ir_val v)
{
    cn_err rv;

    cn_buf_clear(&e->tmp);
    if ((rv = ir_val_to_msgpack(v, IR_MP_INTERNAL, &e->tmp)) != CN_OK) {
        e->rv = rv;
        e->bad |= 1;
        return;
    }
    s_bin(e, e->tmp.data, e->tmp.len);
}

cn_err
rn_instance_snapshot(const struct rn_instance *in, struct cn_buf *out)
{
    struct senc e;
    uint32_t *smap = NULL, *xmap = NULL, ns = 0, nx = 0;
    size_t i, k;
    bool cleaning = rn_instance_cleaning(in);

    memset(&e, 0, sizeof(e));
    smap = malloc((in->s.len + 1) * sizeof(*smap));
    xmap = malloc((in->x.len + 1) * sizeof(*xmap));
    if (smap == NULL || xmap == NULL) {
        free(smap);
        free(xmap);
        return CN_NOMEM;
    }
    for (i = 0; i < in->s.len; i++) {
        smap[i] = in->s.items[i].live ? ns++ : RN_NONE;
    }
    for (i = 0; i < in->x.len; i++) {
        xmap[i] = in->x.items[i].status != RN_X_FREE ? nx++ : RN_NONE;
    }
    msgpack_packer_init(&e.pk, out, senc_write);
    e.bad |= msgpack_pack_map(&e.pk, cleaning ? 8 : 7);
    s_key(&e, "format");
    s_u(&e, cleaning ? RN_SNAPSHOT_FORMAT_VERSION : 2);
    if (cleaning) {
        s_key(&e, "cleanup");
        e.bad |= msgpack_pack_array(&e.pk, 5);
        s_u(&e, in->cleanup.outcome);
        s_i(&e, in->cleanup.until);
        s_bin(&e, in->cleanup.timer.b, 16);
        s_val(&e, in->cleanup.err);
        s_bin(&e, in->cleanup.before.data, in->cleanup.before.len);
    }
    s_key(&e, "instance");
    s_bin(&e, in->id.b, 16);
    s_key(&e, "rng");
    s_u(&e, in->rng);
    s_key(&e, "outcome");
    s_u(&e, (uint64_t) in->outcome);
    s_key(&e, "result");
    if (in->outcome == RN_RUNNING) {
        e.bad |= msgpack_pack_nil(&e.pk);
    } else {
        s_val(&e, in->result);
    }
    s_key(&e, "scopes");
    e.bad |= msgpack_pack_array(&e.pk, ns);
    for (i = 0; i < in->s.len; i++) {
        const struct rn_scope *s = &in->s.items[i];
        if (!s->live) {
            continue;
        }
        e.bad |= msgpack_pack_array(&e.pk, 3);
        s_u(&e, s->frame);
        s_opt(&e, s->parent == RN_NONE ? RN_NONE : smap[s->parent]);
        s_val(&e, s->vars);
    }
    s_key(&e, "nodes");
    e.bad |= msgpack_pack_array(&e.pk, nx);
    for (i = 0; i < in->x.len; i++) {
        const struct rn_xnode *x = &in->x.items[i];
        if (x->status == RN_X_FREE) {
            continue;
        }
        e.bad |= msgpack_pack_array(&e.pk, 13);
        s_bin(&e, x->id.b, 16);
        s_u(&e, x->node);
        s_u(&e, x->status);
        s_opt(&e, x->scope == RN_NONE ? RN_NONE : smap[x->scope]);
        s_opt(&e, x->fork_agg == RN_NONE ? RN_NONE : xmap[x->fork_agg]);
        s_u(&e, x->fork_idx);
        s_u(&e, x->attempt);
        s_i(&e, x->scheduled_at);
        s_i(&e, x->deadline);
        if (x->item_name != NULL) {
            s_val(&e, x->item);
        } else {
            e.bad |= msgpack_pack_nil(&e.pk);
        }
        if (x->status == RN_X_WAITING) {
            e.bad |= msgpack_pack_array(&e.pk, x->nslots);
            for (k = 0; k < x->nslots; k++) {
                if (!x->slots[k].filled) {
                    e.bad |= msgpack_pack_nil(&e.pk);
                    continue;
                }
                e.bad |= msgpack_pack_array(&e.pk, 2);
                e.bad |= x->slots[k].ok ? msgpack_pack_true(&e.pk) : msgpack_pack_false(&e.pk);
                s_val(&e, x->slots[k].value);
            }
        } else {
            e.bad |= msgpack_pack_nil(&e.pk);
        }
        s_i(&e, x->first_at);
        if (x->last_error.type != IR_T_NULL) {
            s_val(&e, x->last_error);
        } else {
            e.bad |= msgpack_pack_nil(&e.pk);
        }
    }
    free(smap);
    free(xmap);
    cn_buf_fini(&e.tmp);
    if (e.bad) {
        return e.rv != CN_OK ? e.rv : CN_NOMEM;
    }
    return CN_OK;
}

/* ---- decoding ----------------------------------------------------------------------------- */

struct sdec {
    struct rn_instance *in;
    struct cn_errmsg *err;
    cn_err rv;
};

static bool
sfail(struct sdec *d, cn_err rv, const char *what)
{
    if (d->rv == CN_OK) {
        d->rv = cn_errmsg_set(d->err, rv, "snapshot: %s", what);
    }
    return false;
}

static const msgpack_object *
sfield(const msgpack_object *m, const char *key)
{
    uint32_t i;
    size_t n = strlen(key);

    for (i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0) {
            return &m->via.map.ptr[i].val;
        }
    }
    return NULL;
}

static bool
su(struct sdec *d, const msgpack_object *o, uint64_t max, uint64_t *v, const char *what)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max) {
        return sfail(d, CN_PARSE, what);
    }
    *v = o->via.u64;
    return true;
}

static bool
si(struct sdec *d, const msgpack_object *o, int64_t *v, const char *what)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t) INT64_MAX) {
        *v = (int64_t) o->via.u64;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *v = o->via.i64;
        return true;
    }
    return sfail(d, CN_PARSE, what);
}

/* The latest wall-clock time a snapshot may hold, in ms (9999-12-31T23:59:59.999Z). Times are
 * ms since the epoch or 0 for none; the executor adds durations of at most a year and a day to
 * them (a retry bound from first_at), which this bound keeps far from overflow. */
#define SNAP_MAX_TIME_MS 253402300799999LL

static bool
stime(struct sdec *d, const msgpack_object *o, int64_t *v, const char *what)
{
    if (!si(d, o, v, what)) {
        return false;
    }
    if (*v < 0 || *v > SNAP_MAX_TIME_MS) {
        return sfail(d, CN_RANGE, what);
    }
    return true;
}

static bool
sopt(struct sdec *d, const msgpack_object *o, size_t limit, uint32_t *v, const char *what)
{
    uint64_t u;

    if (o->type == MSGPACK_OBJECT_NIL) {
        *v = RN_NONE;
        return true;
    }
    if (limit == 0 || !su(d, o, limit - 1, &u, what)) {
        return sfail(d, CN_RANGE, what);
    }
    *v = (uint32_t) u;
    return true;
}

static bool
sval(struct sdec *d, const msgpack_object *o, struct ir_val *v, const char *what)
{
    struct cn_errmsg em;
    cn_err rv;

    if (o->type != MSGPACK_OBJECT_BIN) {
        return sfail(d, CN_PARSE, what);
    }
    rv = ir_val_from_msgpack(o->via.bin.ptr, o->via.bin.size, IR_MP_INTERNAL, v, &em);
    if (rv != CN_OK) {
        return sfail(d, rv == CN_NOMEM ? CN_NOMEM : CN_PARSE, em.text);
    }
    return true;
}

static const msgpack_object *
sarr(struct sdec *d, const msgpack_object *o, uint32_t n, const char *what)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY ||
        (n != UINT32_MAX && o->via.array.size != n)) {
        sfail(d, CN_PARSE, what);
        return NULL;
    }
    return o->via.array.ptr;
}

static bool
sdec_scopes(struct sdec *d, const msgpack_object *arr)
{
    struct rn_instance *in = d->in;
    const struct ir_dag *dag = in->dag;
    uint32_t n = arr->via.array.size, i, depth, p;

    for (i = 0; i < n; i++) {
        const msgpack_object *a = sarr(d, &arr->via.array.ptr[i], 3, "scope must have 3 fields");
        uint32_t si_ = rn_s_alloc(in);
        struct rn_scope *s;
        uint64_t frame;
        if (a == NULL || si_ == RN_NONE) {
            return si_ == RN_NONE ? sfail(d, CN_NOMEM, "out of memory") : false;
        }
        s = &in->s.items[si_];
        if (!su(d, &a[0], dag->nframes - 1, &frame, "bad scope frame") ||
            !sopt(d, &a[1], n, &s->parent, "bad scope parent") ||
            !sval(d, &a[2], &s->vars, "bad scope variables")) {
            return false;
        }
        s->frame = (uint32_t) frame;
        if (s->vars.type != IR_T_MAP) {
            return sfail(d, CN_PARSE, "scope variables must be a map");
        }
    }
    /* Every caller chain must end at a root within n steps (no cycles). */
    for (i = 0; i < n; i++) {
        for (depth = 0, p = i; p != RN_NONE && depth <= n; depth++) {
            p = in->s.items[p].parent;
        }
        if (depth > n) {
            return sfail(d, CN_RANGE, "scope parents form a cycle");
        }
        if (in->s.items[i].parent != RN_NONE) {
            in->s.items[in->s.items[i].parent].refs++;
        }
    }
    return true;
}

static bool
status_fits(uint8_t status, uint8_t kind)
{
    switch (status) {
    case RN_X_RUNNING:
    case RN_X_BACKOFF:
        return kind == IR_N_ACTION;
    case RN_X_SLEEPING:
        return kind == IR_N_SLEEP;
    case RN_X_WAITING:
        return kind == IR_N_AGGREGATE;
    default:
        return false;
    }
}

static bool
sdec_node(struct sdec *d, const msgpack_object *o, uint32_t nscopes, uint32_t nnodes,
          uint64_t format)
{
    struct rn_instance *in = d->in;
    const struct ir_dag *dag = in->dag;
    const msgpack_object *a =
        sarr(d, o, format == 1 ? 11 : 13,
             format == 1 ? "node must have 11 fields" : "node must have 13 fields");
    uint32_t xi = rn_x_alloc(in), k;
    struct rn_xnode *x;
    uint64_t u;

    if (a == NULL || xi == RN_NONE) {
        return xi == RN_NONE ? sfail(d, CN_NOMEM, "out of memory") : false;
    }
    x = &in->x.items[xi];
    if (a[0].type != MSGPACK_OBJECT_BIN || a[0].via.bin.size != 16) {
        return sfail(d, CN_PARSE, "execution id must be 16 bytes");
    }
    memcpy(x->id.b, a[0].via.bin.ptr, 16);
    x->has_id = true;
    if (!su(d, &a[1], dag->nnodes - 1, &u, "bad template node")) {
        return false;
    }
    x->node = (uint32_t) u;
    if (!su(d, &a[2], RN_X_STATUS_COUNT_ - 1, &u, "bad status")) {
        return false;
    }
    x->status = (uint8_t) u;
    if (!status_fits(x->status, dag->nodes[x->node].kind)) {
        return sfail(d, CN_RANGE, "node status does not fit its template node");
    }
    if (!sopt(d, &a[3], nscopes, &x->scope, "bad node scope") ||
        !sopt(d, &a[4], nnodes, &x->fork_agg, "bad fork aggregate") ||
        !su(d, &a[5], UINT32_MAX, &u, "bad fork index")) {
        return false;
    }
    x->fork_idx = (uint32_t) u;
    if (x->scope == RN_NONE || in->s.items[x->scope].frame != dag->nodes[x->node].frame) {
        return sfail(d, CN_RANGE, "node scope does not match its frame");
    }
    in->s.items[x->scope].refs++;
    if (!su(d, &a[6], UINT32_MAX, &u, "bad attempt") ||
        !stime(d, &a[7], &x->scheduled_at, "bad scheduled_at") ||
        !stime(d, &a[8], &x->deadline, "bad deadline")) {
        return false;
    }
    x->attempt = (uint32_t) u;
    if ((x->status == RN_X_RUNNING || x->status == RN_X_BACKOFF) && x->attempt == 0) {
        /* Attempts count from 1 (dispatch sets it): a resend would number this one anew, and
         * a replay of the snapshot would not give the snapshot back. */
        return sfail(d, CN_RANGE, "an action running or waiting to retry has no attempt number");
    }
    {
        /* Exactly the action of a spread carries an item; its name is the spread node's. */
        uint32_t e;
        for (e = 0; e < dag->nnodes; e++) {
            const struct ir_node *sp = &dag->nodes[e];
            if (sp->kind == IR_N_SPREAD && sp->nedges == 1 &&
                dag->edges[sp->first_edge].to == x->node) {
                x->item_name = sp->name;
                break;
            }
        }
        if ((x->item_name == NULL) != (a[9].type == MSGPACK_OBJECT_NIL)) {
            return sfail(d, CN_RANGE,
                         x->item_name == NULL ? "item binding outside a spread"
                                              : "spread action without its item");
        }
        if (x->item_name != NULL && !sval(d, &a[9], &x->item, "bad item")) {
            return false;
        }
        if (x->item_name != NULL && x->fork_agg == RN_NONE) {
            return sfail(d, CN_RANGE, "spread action outside its spread");
        }
    }
    if (format >= 2) {
        if (!stime(d, &a[11], &x->first_at, "bad first_at")) {
            return false;
        }
        if (a[12].type != MSGPACK_OBJECT_NIL) {
            if (x->status != RN_X_RUNNING && x->status != RN_X_BACKOFF) {
                return sfail(d, CN_RANGE, "only an action keeps its previous error");
            }
            if (!sval(d, &a[12], &x->last_error, "bad last error")) {
                return false;
            }
        }
    }
    if (x->status == RN_X_WAITING) {
        const msgpack_object *sl = sarr(d, &a[10], UINT32_MAX, "slots must be an array");
        if (sl == NULL && a[10].via.array.size > 0) {
            return false;
        }
        x->nslots = a[10].via.array.size;
        x->slots = calloc(x->nslots ? x->nslots : 1, sizeof(*x->slots));
        if (x->slots == NULL) {
            return sfail(d, CN_NOMEM, "out of memory");
        }
        for (k = 0; k < x->nslots; k++) {
            const msgpack_object *p;
            x->slots[k].value = ir_null();
            if (sl[k].type == MSGPACK_OBJECT_NIL) {
                x->pending++;
                continue;
            }
            if ((p = sarr(d, &sl[k], 2, "slot must have 2 fields")) == NULL ||
                p[0].type != MSGPACK_OBJECT_BOOLEAN ||
                !sval(d, &p[1], &x->slots[k].value, "bad slot value")) {
                return d->rv != CN_OK ? false : sfail(d, CN_PARSE, "bad slot");
            }
            x->slots[k].filled = true;
            x->slots[k].ok = p[0].via.boolean;
        }
        if (x->pending == 0) {
            return sfail(d, CN_RANGE, "an aggregate with every slot filled is not waiting");
        }
    }
    return rn_xidmap_put(&in->ids, x->id, xi) == CN_OK || sfail(d, CN_NOMEM, "out of memory");
}

/* The cleanup under way: [outcome (cancelled or timed_out), until, timer id, error, the format 2
 * snapshot from before the interruption]. */
static bool
sdec_cleanup(struct sdec *d, const msgpack_object *f)
{
    struct rn_instance *in = d->in;
    const msgpack_object *a = sarr(d, f, 5, "cleanup must be an array of 5");
    uint64_t u;

    if (a == NULL) {
        return false;
    }
    if (!su(d, &a[0], RN_OUTCOME_COUNT_ - 1, &u, "bad cleanup outcome")) {
        return false;
    }
    if (u != RN_CANCELLED && u != RN_TIMED_OUT) {
        return sfail(d, CN_RANGE, "a cleanup follows a cancel or a timeout");
    }
    in->cleanup.outcome = (uint8_t) u;
    if (!stime(d, &a[1], &in->cleanup.until, "bad cleanup bound")) {
        return false;
    }
    f = &a[2];
    if (f->type != MSGPACK_OBJECT_BIN || f->via.bin.size != 16) {
        return sfail(d, CN_PARSE, "cleanup timer id must be 16 bytes");
    }
    memcpy(in->cleanup.timer.b, f->via.bin.ptr, 16);
    if (!sval(d, &a[3], &in->cleanup.err, "bad cleanup error")) {
        return false;
    }
    f = &a[4];
    if (f->type != MSGPACK_OBJECT_BIN || f->via.bin.size == 0) {
        return sfail(d, CN_PARSE, "cleanup's earlier snapshot must be bytes");
    }
    return cn_buf_append(&in->cleanup.before, f->via.bin.ptr, f->via.bin.size) == CN_OK ||
           sfail(d, CN_NOMEM, "out of memory");
}

static bool
sdec_all(struct sdec *d, const msgpack_object *root)
{
    struct rn_instance *in = d->in;
    const msgpack_object *f, *scopes, *nodes;
    uint64_t u, format;
    uint32_t i, pending_total;

    if (root->type != MSGPACK_OBJECT_MAP) {
        return sfail(d, CN_PARSE, "top level must be a map");
    }
    if (!su(d, sfield(root, "format"), UINT32_MAX, &u, "missing format")) {
        return false;
    }
    if (u < 1 || u > RN_SNAPSHOT_FORMAT_VERSION) {
        return sfail(d, CN_VERSION, "unsupported format version");
    }
    format = u;
    if (format >= 3 && !sdec_cleanup(d, sfield(root, "cleanup"))) {
        return false;
    }
    f = sfield(root, "instance");
    if (f == NULL || f->type != MSGPACK_OBJECT_BIN || f->via.bin.size != 16) {
        return sfail(d, CN_PARSE, "instance id must be 16 bytes");
    }
    memcpy(in->id.b, f->via.bin.ptr, 16);
    if (!su(d, sfield(root, "rng"), UINT64_MAX, &in->rng, "missing rng") ||
        !su(d, sfield(root, "outcome"), RN_OUTCOME_COUNT_ - 1, &u, "bad outcome")) {
        return false;
    }
    in->outcome = (enum rn_outcome) u;
    f = sfield(root, "result");
    if (f != NULL && f->type != MSGPACK_OBJECT_NIL && !sval(d, f, &in->result, "bad result")) {
        return false;
    }
    scopes = sfield(root, "scopes");
    nodes = sfield(root, "nodes");
    if (sarr(d, scopes, UINT32_MAX, "scopes must be an array") == NULL && d->rv != CN_OK) {
        return false;
    }
    if (sarr(d, nodes, UINT32_MAX, "nodes must be an array") == NULL && d->rv != CN_OK) {
        return false;
    }
    if (in->outcome != RN_RUNNING && nodes->via.array.size > 0) {
        /* finish() drops every node: a finished instance has nothing left to run */
        return sfail(d, CN_RANGE, "a finished instance has live nodes");
    }
    if (!sdec_scopes(d, scopes)) {
        return false;
    }
    for (i = 0; i < nodes->via.array.size; i++) {
        if (!sdec_node(d, &nodes->via.array.ptr[i], scopes->via.array.size, nodes->via.array.size,
                       format)) {
            return false;
        }
    }
    /* Each open slot of a waiting aggregate is owed by exactly one live branch, and every
     * branch reports to an open slot: otherwise the aggregate would wait forever, or finish
     * twice. `filled` is used as the claim mark and restored afterwards. */
    pending_total = 0;
    for (i = 0; i < in->x.len; i++) {
        struct rn_xnode *x = &in->x.items[i];
        struct rn_xnode *a;
        if (x->fork_agg == RN_NONE) {
            continue;
        }
        a = &in->x.items[x->fork_agg];
        if (x->fork_agg == i || a->status != RN_X_WAITING || x->fork_idx >= a->nslots ||
            a->slots[x->fork_idx].filled) {
            return sfail(d, CN_RANGE, "branch reports to no open aggregate slot");
        }
        a->slots[x->fork_idx].filled = true; /* claimed */
        pending_total++;
    }
    for (i = 0; i < in->x.len; i++) {
        struct rn_xnode *x = &in->x.items[i];
        if (x->fork_agg != RN_NONE) {
            in->x.items[x->fork_agg].slots[x->fork_idx].filled = false;
        }
    }
    for (i = 0; i < in->x.len; i++) {
        uint32_t open = 0, k;
        const struct rn_xnode *a = &in->x.items[i];
        if (a->status != RN_X_WAITING) {
            continue;
        }
        for (k = 0; k < a->nslots; k++) {
            open += !a->slots[k].filled;
        }
        pending_total -= open;
    }
    if (pending_total != 0) {
        return sfail(d, CN_RANGE, "aggregate slots and live branches do not match");
    }
    for (i = 0; i < scopes->via.array.size; i++) {
        if (in->s.items[i].refs == 0) {
            return sfail(d, CN_RANGE, "scope used by nothing");
        }
    }
    (void) pending_total;
    return true;
}

cn_err
rn_snapshot_decode(struct rn_instance *in, const void *buf, size_t len, struct cn_errmsg *err)
{
    msgpack_unpacked up;
    struct sdec d;
    size_t off = 0;
    cn_err rv;

    if ((rv = ir_msgpack_shape_ok(buf, len, SNAP_MAX_DEPTH, err)) != CN_OK) {
        return rv;
    }
    memset(&d, 0, sizeof(d));
    d.in = in;
    d.err = err;
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
        rv = cn_errmsg_set(err, CN_PARSE, "snapshot: undecodable msgpack");
    } else if (!sdec_all(&d, &up.data) || d.rv != CN_OK) {
        rv = d.rv != CN_OK ? d.rv : CN_PARSE;
    } else {
        rv = CN_OK;
    }
    msgpack_unpacked_destroy(&up);
    return rv;
}

cn_err
rn_snapshot_load(const struct ir_dag *dag, const struct rn_exec_cfg *cfg, const void *buf,
                 size_t len, struct rn_instance **out, struct cn_errmsg *err)
{
    cn_err rv;

    if ((*out = rn_instance_alloc(dag, cfg)) == NULL) {
        return CN_NOMEM;
    }
    if ((rv = rn_snapshot_decode(*out, buf, len, err)) != CN_OK) {
        rn_instance_free(*out);
        *out = NULL;
    }
    return rv;
}
