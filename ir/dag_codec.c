/* SPDX-License-Identifier: MIT */
/*
 * DAG template <-> msgpack, so a runner can cache compiled templates or ship them. The format
 * is a map of a few positional arrays (compact, and only four levels deep whatever the
 * workflow). Every field is always written (call 0 for a plain action), so one template has one
 * encoding. Decoding validates everything an executor relies on: indices in range, edges sorted
 * by source node, expression children defined before their parents (so expression trees are
 * acyclic) and no taller than IR_EXPR_MAX_HEIGHT. A corrupt blob is an error, never a crash.
 * Other formats are refused (CN_VERSION): templates are compiled from the stored source.
 *
 *   {"format": 4, "entry_func": s, "entry": u, "output": u, "timeout_ms": u,
 *    "frames": [[func, parent|nil, call_node|nil], ...],
 *    "exprs":  [[kind, op, line, col, nargs, args, ops, name|nil, const|nil, [kwnames]], ...],
 *    "args":   [u, ...],                               (children, then comparison ops)
 *    "nodes":  [[kind, frame, line, col, exc|nil, expr|nil, link|nil, callee_frame|nil,
 *                try_depth, loop_depth, name|nil, [targets], [argnames], [argexprs],
 *                [[[types], retries, backoff_ms, max_backoff_ms, multiplier_milli,
 *                  max_elapsed_ms], ...],
 *                timeout_ms, deadline_ms,
 *                [[[types], bind|nil], ...], unpack, fail_fast, call, version|nil], ...],
 *    "edges":  [[from, to, kind, expr|nil, index], ...]}
 */
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "ir/dag.h"
#include "ir/value.h"

#define DAG_MAX_DEPTH 8

/* ---- encoding ----------------------------------------------------------------------------- */

struct enc {
    msgpack_packer pk;
    int bad; /* non-zero after any packer failure (only OOM is possible) */
};

static int
enc_write(void *data, const char *buf, size_t len)
{
    return cn_buf_append(data, buf, len) == CN_OK ? 0 : -1;
}

static void
e_u(struct enc *e, uint64_t v)
{
    e->bad |= msgpack_pack_uint64(&e->pk, v);
}

static void
e_opt(struct enc *e, uint32_t v)
{
    e->bad |= v == UINT32_MAX ? msgpack_pack_nil(&e->pk) : msgpack_pack_uint32(&e->pk, v);
}

static void
e_str(struct enc *e, const char *s)
{
    if (s == NULL) {
        e->bad |= msgpack_pack_nil(&e->pk);
        return;
    }
    e->bad |= msgpack_pack_str_with_body(&e->pk, s, strlen(s));
}

static void
e_arr(struct enc *e, size_t n)
{
    e->bad |= msgpack_pack_array(&e->pk, n);
}

static void
e_strs(struct enc *e, const char *const *s, uint32_t n)
{
    uint32_t i;

    e_arr(e, n);
    for (i = 0; i < n; i++) {
        e_str(e, s[i]);
    }
}

static void
e_const(struct enc *e, struct ir_val v)
{
    switch (v.type) {
    case IR_T_BOOL:
        e->bad |= v.u.b ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk);
        break;
    case IR_T_INT:
        e->bad |= msgpack_pack_int64(&e->pk, v.u.i);
        break;
    case IR_T_FLOAT:
        e->bad |= msgpack_pack_double(&e->pk, v.u.f);
        break;
    case IR_T_STR:
        e->bad |= msgpack_pack_str_with_body(&e->pk, ir_str_data(v), ir_str_len(v));
        break;
    default: /* constants are scalars; None and anything else encode as nil */
        e->bad |= msgpack_pack_nil(&e->pk);
        break;
    }
}

static void
e_key(struct enc *e, const char *k)
{
    e_str(e, k);
}

static void
e_expr(struct enc *e, const struct ir_expr *x)
{
    e_arr(e, 10);
    e_u(e, x->kind);
    e_u(e, x->op);
    e_u(e, x->line);
    e_u(e, x->col);
    e_u(e, x->nargs);
    e_u(e, x->args);
    e_u(e, x->ops);
    e_str(e, x->name);
    e_const(e, x->val);
    e_strs(e, x->kwnames, x->nkw);
}

static void
e_retries(struct enc *e, const struct ir_node *n)
{
    uint32_t k;

    e_arr(e, n->nretries);
    for (k = 0; k < n->nretries; k++) {
        e_arr(e, 6);
        e_strs(e, n->retries[k].types, n->retries[k].ntypes);
        e_u(e, (uint64_t) n->retries[k].retries);
        e_u(e, (uint64_t) n->retries[k].backoff_ms);
        e_u(e, (uint64_t) n->retries[k].max_backoff_ms);
        e_u(e, (uint64_t) n->retries[k].multiplier_milli);
        e_u(e, (uint64_t) n->retries[k].max_elapsed_ms);
    }
}

static void
e_handlers(struct enc *e, const struct ir_node *n)
{
    uint32_t k;

    e_arr(e, n->nhandlers);
    for (k = 0; k < n->nhandlers; k++) {
        e_arr(e, 2);
        e_strs(e, n->handlers[k].types, n->handlers[k].ntypes);
        e_str(e, n->handlers[k].bind);
    }
}

static void
e_node(struct enc *e, const struct ir_node *n)
{
    uint32_t k;

    e_arr(e, 22);
    e_u(e, n->kind);
    e_u(e, n->frame);
    e_u(e, n->line);
    e_u(e, n->col);
    e_opt(e, n->exc);
    e_opt(e, n->expr);
    e_opt(e, n->link);
    e_opt(e, n->callee_frame);
    e_u(e, n->try_depth);
    e_u(e, n->loop_depth);
    e_str(e, n->name);
    e_strs(e, n->targets, n->ntargets);
    e_strs(e, n->argnames, n->nargs);
    e_arr(e, n->nargs);
    for (k = 0; k < n->nargs; k++) {
        e_opt(e, n->argexprs[k]);
    }
    e_retries(e, n);
    e_u(e, (uint64_t) n->timeout_ms);
    e_u(e, (uint64_t) n->deadline_ms);
    e_handlers(e, n);
    e_u(e, n->unpack ? 1 : 0);
    e_u(e, n->fail_fast ? 1 : 0);
    e_u(e, n->call);
    e_str(e, n->version);
}

static void
e_edge(struct enc *e, const struct ir_edge *g)
{
    e_arr(e, 5);
    e_u(e, g->from);
    e_u(e, g->to);
    e_u(e, g->kind);
    e_opt(e, g->expr);
    e_u(e, g->index);
}

cn_err
ir_dag_encode(const struct ir_dag *d, struct cn_buf *out)
{
    struct enc e;
    uint32_t i;

    memset(&e, 0, sizeof(e));
    msgpack_packer_init(&e.pk, out, enc_write);
    e.bad |= msgpack_pack_map(&e.pk, 10);
    e_key(&e, "format");
    e_u(&e, IR_DAG_FORMAT_VERSION);
    e_key(&e, "timeout_ms");
    e_u(&e, (uint64_t) d->timeout_ms);
    e_key(&e, "entry_func");
    e_str(&e, d->entry_func);
    e_key(&e, "entry");
    e_u(&e, d->entry);
    e_key(&e, "output");
    e_u(&e, d->output);
    e_key(&e, "frames");
    e_arr(&e, d->nframes);
    for (i = 0; i < d->nframes; i++) {
        e_arr(&e, 3);
        e_str(&e, d->frames[i].func);
        e_opt(&e, d->frames[i].parent);
        e_opt(&e, d->frames[i].call_node);
    }
    e_key(&e, "exprs");
    e_arr(&e, d->exprs.len);
    for (i = 0; i < d->exprs.len; i++) {
        e_expr(&e, &d->exprs.items[i]);
    }
    e_key(&e, "args");
    e_arr(&e, d->exprs.nargs);
    for (i = 0; i < d->exprs.nargs; i++) {
        e_opt(&e, d->exprs.args[i]);
    }
    e_key(&e, "nodes");
    e_arr(&e, d->nnodes);
    for (i = 0; i < d->nnodes; i++) {
        e_node(&e, &d->nodes[i]);
    }
    e_key(&e, "edges");
    e_arr(&e, d->nedges);
    for (i = 0; i < d->nedges; i++) {
        e_edge(&e, &d->edges[i]);
    }
    return e.bad ? CN_NOMEM : CN_OK;
}

/* ---- decoding ----------------------------------------------------------------------------- */

struct dec {
    struct ir_dag *d;
    struct cn_errmsg *err;
    cn_err rv;
};

static bool
d_fail(struct dec *x, cn_err rv, const char *what)
{
    if (x->rv == CN_OK) {
        x->rv = cn_errmsg_set(x->err, rv, "dag: %s", what);
    }
    return false;
}

static bool
d_u(struct dec *x, const msgpack_object *o, uint64_t max, uint64_t *out, const char *what)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max) {
        return d_fail(x, CN_PARSE, what);
    }
    *out = o->via.u64;
    return true;
}

static bool
d_u32(struct dec *x, const msgpack_object *o, uint64_t max, uint32_t *out, const char *what)
{
    uint64_t v = 0; /* gcc -O3 cannot see d_u() sets it whenever it returns true */

    if (!d_u(x, o, max, &v, what)) {
        return false;
    }
    *out = (uint32_t) v;
    return true;
}

/* nil -> UINT32_MAX; otherwise an index below `limit`. */
static bool
d_opt(struct dec *x, const msgpack_object *o, uint32_t limit, uint32_t *out, const char *what)
{
    if (o->type == MSGPACK_OBJECT_NIL) {
        *out = UINT32_MAX;
        return true;
    }
    if (limit == 0) {
        return d_fail(x, CN_RANGE, what);
    }
    return d_u32(x, o, (uint64_t) limit - 1, out, what);
}

static bool
d_str(struct dec *x, const msgpack_object *o, bool nullable, const char **out, const char *what)
{
    if (nullable && o->type == MSGPACK_OBJECT_NIL) {
        *out = NULL;
        return true;
    }
    if (o->type != MSGPACK_OBJECT_STR || !ir_utf8_valid(o->via.str.ptr, o->via.str.size, NULL)) {
        return d_fail(x, CN_PARSE, what);
    }
    *out = cn_arena_strndup(x->d->arena, o->via.str.ptr, o->via.str.size);
    return *out != NULL || d_fail(x, CN_NOMEM, "out of memory");
}

static const msgpack_object *
d_arr(struct dec *x, const msgpack_object *o, uint32_t want, const char *what)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || (want != UINT32_MAX && o->via.array.size != want)) {
        d_fail(x, CN_PARSE, what);
        return NULL;
    }
    return o->via.array.ptr;
}

static bool
d_strs(struct dec *x, const msgpack_object *o, const char ***out, uint32_t *n, const char *what)
{
    const msgpack_object *a = d_arr(x, o, UINT32_MAX, what);
    uint32_t i;

    if (a == NULL && o->type != MSGPACK_OBJECT_ARRAY) {
        return false;
    }
    *n = o->via.array.size;
    *out = NULL;
    if (*n == 0) {
        return true;
    }
    *out = cn_arena_calloc(x->d->arena, *n, sizeof(**out));
    if (*out == NULL) {
        return d_fail(x, CN_NOMEM, "out of memory");
    }
    for (i = 0; i < *n; i++) {
        if (!d_str(x, &a[i], false, &(*out)[i], what)) {
            return false;
        }
    }
    return true;
}

static bool
d_const(struct dec *x, const msgpack_object *o, struct ir_val *v)
{
    switch (ir_val_from_msgpack_scalar(o, v)) {
    case CN_OK:
        return true;
    case CN_RANGE:
        return d_fail(x, CN_RANGE, "constant out of int64 range");
    case CN_TYPE:
        return d_fail(x, CN_PARSE, "constant of an unsupported type");
    default:
        return d_fail(x, CN_PARSE, "constant string is not valid UTF-8");
    }
}

/* Children and operator each kind reads, so no walker ever follows an unchecked slot. */
static bool
expr_shape_ok(const struct ir_expr *e)
{
    switch ((enum ir_xkind) e->kind) {
    case IR_X_CONST:
    case IR_X_NAME:
        return e->nargs == 0;
    case IR_X_NEG:
    case IR_X_NOT:
    case IR_X_ATTR:
        return e->nargs == 1;
    case IR_X_BIN:
        return e->nargs == 2 && e->op < IR_OP_COUNT_;
    case IR_X_AND:
    case IR_X_OR:
    case IR_X_INDEX:
        return e->nargs == 2;
    case IR_X_SLICE:
    case IR_X_COND:
        return e->nargs == 3;
    case IR_X_CMP:
        return e->nargs >= 2;
    case IR_X_DICT:
        return e->nargs % 2 == 0;
    case IR_X_CALL:
        return e->op < IR_B_COUNT_ || e->op == IR_B_UNRESOLVED;
    case IR_X_LIST:
        return true;
    default:
        return false;
    }
}

static bool
d_exprs(struct dec *x, const msgpack_object *xs, const msgpack_object *args)
{
    struct ir_xpool *p = &x->d->exprs;
    const msgpack_object *a;
    uint32_t i, k, n;

    if (xs->type != MSGPACK_OBJECT_ARRAY || args->type != MSGPACK_OBJECT_ARRAY) {
        return d_fail(x, CN_PARSE, "exprs/args must be arrays");
    }
    n = xs->via.array.size;
    p->items = calloc(n ? n : 1, sizeof(*p->items));
    p->args = calloc(args->via.array.size ? args->via.array.size : 1, sizeof(*p->args));
    if (p->items == NULL || p->args == NULL) {
        return d_fail(x, CN_NOMEM, "out of memory");
    }
    p->cap = n;
    p->args_cap = p->nargs = args->via.array.size;
    for (i = 0; i < args->via.array.size; i++) {
        if (!d_opt(x, &args->via.array.ptr[i], n > IR_CMP_COUNT_ ? n : IR_CMP_COUNT_, &p->args[i],
                   "bad expression child")) {
            return false;
        }
    }
    for (i = 0; i < n; i++) {
        struct ir_expr *e = &p->items[i];
        uint32_t kind, op, span, h = 0, c;
        if ((a = d_arr(x, &xs->via.array.ptr[i], 10, "expression must be a 10-element array")) ==
            NULL) {
            return false;
        }
        e->val = ir_null();
        if (!d_u32(x, &a[0], IR_X_KIND_COUNT_ - 1, &kind, "bad expression kind") ||
            !d_u32(x, &a[1], 255, &op, "bad expression op") ||
            !d_u32(x, &a[2], UINT32_MAX, &e->line, "bad line") ||
            !d_u32(x, &a[3], UINT32_MAX, &e->col, "bad column") ||
            !d_u32(x, &a[4], p->nargs, &e->nargs, "bad child count") ||
            !d_u32(x, &a[5], p->nargs, &e->args, "bad child offset") ||
            !d_u32(x, &a[6], p->nargs, &e->ops, "bad op offset") ||
            !d_str(x, &a[7], true, &e->name, "bad expression name") ||
            !d_const(x, &a[8], &e->val)) {
            p->len = i + 1; /* release the constant, if any */
            return false;
        }
        p->len = i + 1;
        e->kind = (uint8_t) kind;
        e->op = (uint8_t) op;
        span = e->nargs + (kind == IR_X_CMP && e->nargs > 0 ? e->nargs - 1 : 0);
        if ((uint64_t) e->args + span > p->nargs ||
            (kind == IR_X_CMP && (e->nargs < 2 || e->ops != e->args + e->nargs))) {
            return d_fail(x, CN_RANGE, "expression children out of range");
        }
        if (!d_strs(x, &a[9], &e->kwnames, &c, "bad keyword names")) {
            return false;
        }
        if (c > e->nargs || c > UINT16_MAX) {
            return d_fail(x, CN_RANGE, "too many keyword names");
        }
        e->nkw = (uint16_t) c;
        if (!expr_shape_ok(e)) {
            return d_fail(x, CN_RANGE, "expression has the wrong number of children");
        }
        if ((kind == IR_X_NAME || kind == IR_X_ATTR || kind == IR_X_CALL) && e->name == NULL) {
            return d_fail(x, CN_PARSE, "expression without its name");
        }
        if (kind == IR_X_CMP) {
            for (k = 0; k + 1 < e->nargs; k++) {
                if (p->args[e->ops + k] >= IR_CMP_COUNT_) {
                    return d_fail(x, CN_RANGE, "bad comparison operator");
                }
            }
        }
        for (k = 0; k < e->nargs; k++) {
            uint32_t ch = p->args[e->args + k];
            if (ch == IR_NO_EXPR) {
                if (kind != IR_X_SLICE || k == 0) {
                    return d_fail(x, CN_RANGE, "missing expression child");
                }
                continue;
            }
            /* Children precede parents: this makes every expression tree finite. */
            if (ch >= i) {
                return d_fail(x, CN_RANGE, "expression child does not precede its parent");
            }
            if (p->items[ch].height > h) {
                h = p->items[ch].height;
            }
        }
        if (h + 1 > IR_EXPR_MAX_HEIGHT) {
            return d_fail(x, CN_DEPTH, "expression tree too tall");
        }
        e->height = (uint16_t) (h + 1);
    }
    return true;
}

/* A node's argument expressions, one per argument name (n->nargs is set). */
static bool
d_argexprs(struct dec *x, const msgpack_object *o, struct ir_node *n)
{
    const msgpack_object *b = d_arr(x, o, n->nargs, "argument expressions do not match names");
    uint32_t k;

    if (b == NULL && n->nargs > 0) {
        return false;
    }
    if (n->nargs > 0) {
        n->argexprs = cn_arena_calloc(x->d->arena, n->nargs, sizeof(*n->argexprs));
        if (n->argexprs == NULL) {
            return d_fail(x, CN_NOMEM, "out of memory");
        }
        for (k = 0; k < n->nargs; k++) {
            if (!d_opt(x, &b[k], (uint32_t) x->d->exprs.len, &n->argexprs[k], "bad argument")) {
                return false;
            }
        }
    }
    return true;
}

/* The count of the records (retries, handlers) that array o holds in *n, and zeroed room for
 * them, of size bytes each, in *room (NULL for none); what is the error for a non-array. */
static bool
d_records(struct dec *x, const msgpack_object *o, size_t size, uint32_t *n, void **room,
          const char *what)
{
    if (o->type != MSGPACK_OBJECT_ARRAY) {
        return d_fail(x, CN_PARSE, what);
    }
    *n = o->via.array.size;
    *room = NULL;
    if (*n > 0 && (*room = cn_arena_calloc(x->d->arena, *n, size)) == NULL) {
        return d_fail(x, CN_NOMEM, "out of memory");
    }
    return true;
}

static bool
d_retries(struct dec *x, const msgpack_object *o, struct ir_node *n)
{
    const msgpack_object *c;
    uint32_t k, cnt;
    uint64_t u;
    void *room;

    if (!d_records(x, o, sizeof(*n->retries), &cnt, &room, "retries must be an array")) {
        return false;
    }
    n->retries = room;
    for (k = 0; k < cnt; k++) {
        struct ir_retry *r = &n->retries[k];
        if ((c = d_arr(x, &o->via.array.ptr[k], 6, "retry must be a 6-element array")) == NULL ||
            !d_strs(x, &c[0], &r->types, &r->ntypes, "bad retry types") ||
            !d_u(x, &c[1], INT64_MAX, &u, "bad retry count")) {
            return false;
        }
        r->retries = (int64_t) u;
        if (!d_u(x, &c[2], INT64_MAX, &u, "bad backoff")) {
            return false;
        }
        r->backoff_ms = (int64_t) u;
        if (!d_u(x, &c[3], IR_MAX_BACKOFF_MS, &u, "bad max_backoff")) {
            return false;
        }
        r->max_backoff_ms = (int64_t) u;
        if (!d_u(x, &c[4], IR_MAX_BACKOFF_MULTIPLIER_MILLI, &u, "bad multiplier") ||
            u < IR_MIN_BACKOFF_MULTIPLIER_MILLI) {
            return x->rv != CN_OK ? false : d_fail(x, CN_PARSE, "bad multiplier");
        }
        r->multiplier_milli = (int64_t) u;
        if (!d_u(x, &c[5], IR_MAX_POLICY_DURATION_MS, &u, "bad max_elapsed")) {
            return false;
        }
        r->max_elapsed_ms = (int64_t) u;
    }
    n->nretries = cnt;
    return true;
}

static bool
d_handlers(struct dec *x, const msgpack_object *o, struct ir_node *n)
{
    const msgpack_object *c;
    uint32_t k, cnt;
    void *room;

    if (!d_records(x, o, sizeof(*n->handlers), &cnt, &room, "handlers must be an array")) {
        return false;
    }
    n->handlers = room;
    for (k = 0; k < cnt; k++) {
        struct ir_handler_info *h = &n->handlers[k];
        if ((c = d_arr(x, &o->via.array.ptr[k], 2, "handler must be a 2-element array")) == NULL ||
            !d_strs(x, &c[0], &h->types, &h->ntypes, "bad handler types") ||
            !d_str(x, &c[1], true, &h->bind, "bad handler binding")) {
            return false;
        }
    }
    n->nhandlers = cnt;
    return true;
}

static bool
d_node(struct dec *x, const msgpack_object *o, struct ir_node *n)
{
    struct ir_dag *d = x->d;
    const msgpack_object *a = d_arr(x, o, 22, "node must be a 22-element array");
    uint32_t kind;
    uint64_t u;

    if (a == NULL) {
        return false;
    }
    if (!d_u32(x, &a[0], IR_N_COUNT_ - 1, &kind, "bad node kind") ||
        !d_u32(x, &a[1], d->nframes ? d->nframes - 1 : 0, &n->frame, "bad node frame") ||
        !d_u32(x, &a[2], UINT32_MAX, &n->line, "bad line") ||
        !d_u32(x, &a[3], UINT32_MAX, &n->col, "bad column") ||
        !d_opt(x, &a[4], d->nnodes, &n->exc, "bad exception target") ||
        !d_opt(x, &a[5], (uint32_t) d->exprs.len, &n->expr, "bad node expression") ||
        !d_opt(x, &a[6], d->nnodes, &n->link, "bad node link") ||
        !d_opt(x, &a[7], d->nframes, &n->callee_frame, "bad callee frame") ||
        !d_u(x, &a[8], UINT16_MAX, &u, "bad try depth")) {
        return false;
    }
    n->kind = (uint8_t) kind;
    n->try_depth = (uint16_t) u;
    if (!d_u(x, &a[9], UINT16_MAX, &u, "bad loop depth")) {
        return false;
    }
    n->loop_depth = (uint16_t) u;
    if (!d_str(x, &a[10], true, &n->name, "bad node name") ||
        !d_strs(x, &a[11], &n->targets, &n->ntargets, "bad targets") ||
        !d_strs(x, &a[12], &n->argnames, &n->nargs, "bad argument names") ||
        !d_argexprs(x, &a[13], n) || !d_retries(x, &a[14], n)) {
        return false;
    }
    if (!d_u(x, &a[15], INT64_MAX, &u, "bad timeout")) {
        return false;
    }
    n->timeout_ms = (int64_t) u;
    if (!d_u(x, &a[16], INT64_MAX, &u, "bad deadline")) {
        return false;
    }
    n->deadline_ms = (int64_t) u;
    if (!d_handlers(x, &a[17], n)) {
        return false;
    }
    if (!d_u(x, &a[18], 1, &u, "bad unpack flag")) {
        return false;
    }
    n->unpack = u == 1;
    if (!d_u(x, &a[19], 1, &u, "bad fail_fast flag")) {
        return false;
    }
    n->fail_fast = u == 1;
    /* What the call means is ir_dag_validate's to check (call kind against node kind, names). */
    if (!d_u(x, &a[20], IR_CALL_COUNT_ - 1, &u, "bad call kind")) {
        return false;
    }
    n->call = (uint8_t) u;
    return d_str(x, &a[21], true, &n->version, "bad version");
}

static const msgpack_object *
d_field(const msgpack_object *root, const char *key)
{
    uint32_t i;
    size_t kl = strlen(key);

    for (i = 0; i < root->via.map.size; i++) {
        const msgpack_object_kv *kv = &root->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == kl &&
            memcmp(kv->key.via.str.ptr, key, kl) == 0) {
            return &kv->val;
        }
    }
    return NULL;
}

static bool
d_dag(struct dec *x, const msgpack_object *root)
{
    struct ir_dag *d = x->d;
    const msgpack_object *f[10];
    static const char *const keys[] = {"format", "entry_func", "entry", "output", "frames",
                                       "exprs",  "args",       "nodes", "edges",  "timeout_ms"};
    const msgpack_object *a;
    uint64_t fmt;
    uint32_t i;

    if (root->type != MSGPACK_OBJECT_MAP) {
        return d_fail(x, CN_PARSE, "top level must be a map");
    }
    /* The version comes first: a later format may change every other field. */
    if ((f[0] = d_field(root, keys[0])) != NULL && f[0]->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
        f[0]->via.u64 != IR_DAG_FORMAT_VERSION) {
        return d_fail(x, CN_VERSION, "unsupported format version");
    }
    for (i = 0; i < 10; i++) {
        if ((f[i] = d_field(root, keys[i])) == NULL) {
            char msg[64];
            (void) snprintf(msg, sizeof(msg), "missing field '%s'", keys[i]);
            return d_fail(x, CN_PARSE, msg);
        }
    }
    if (!d_u(x, f[0], UINT32_MAX, &fmt, "bad format")) {
        return false;
    }
    if (fmt != IR_DAG_FORMAT_VERSION) {
        return d_fail(x, CN_VERSION, "unsupported format version");
    }
    if (!d_str(x, f[1], false, &d->entry_func, "bad entry function") ||
        f[4]->type != MSGPACK_OBJECT_ARRAY || f[7]->type != MSGPACK_OBJECT_ARRAY ||
        f[8]->type != MSGPACK_OBJECT_ARRAY) {
        return d_fail(x, CN_PARSE, "frames, nodes and edges must be arrays");
    }
    d->nframes = f[4]->via.array.size;
    d->nnodes = f[7]->via.array.size;
    d->nedges = f[8]->via.array.size;
    if (d->nnodes == 0 || d->nframes == 0) {
        return d_fail(x, CN_PARSE, "a template needs nodes and a frame");
    }
    if (!d_u32(x, f[2], d->nnodes - 1, &d->entry, "bad entry node") ||
        !d_u32(x, f[3], d->nnodes - 1, &d->output, "bad output node") || !d_exprs(x, f[5], f[6]) ||
        !d_u(x, f[9], IR_MAX_POLICY_DURATION_MS, &fmt, "bad workflow timeout")) {
        return false;
    }
    d->timeout_ms = (int64_t) fmt;
    d->frames = cn_arena_calloc(d->arena, d->nframes, sizeof(*d->frames));
    d->nodes = cn_arena_calloc(d->arena, d->nnodes, sizeof(*d->nodes));
    d->edges = cn_arena_calloc(d->arena, d->nedges ? d->nedges : 1, sizeof(*d->edges));
    if (d->frames == NULL || d->nodes == NULL || d->edges == NULL) {
        return d_fail(x, CN_NOMEM, "out of memory");
    }
    for (i = 0; i < d->nframes; i++) {
        if ((a = d_arr(x, &f[4]->via.array.ptr[i], 3, "frame must be a 3-element array")) == NULL ||
            !d_str(x, &a[0], false, &d->frames[i].func, "bad frame function") ||
            !d_opt(x, &a[1], d->nframes, &d->frames[i].parent, "bad frame parent") ||
            !d_opt(x, &a[2], d->nnodes, &d->frames[i].call_node, "bad frame call node")) {
            return false;
        }
    }
    for (i = 0; i < d->nnodes; i++) {
        if (!d_node(x, &f[7]->via.array.ptr[i], &d->nodes[i])) {
            return false;
        }
    }
    for (i = 0; i < d->nedges; i++) {
        struct ir_edge *e = &d->edges[i];
        uint32_t kind;
        if ((a = d_arr(x, &f[8]->via.array.ptr[i], 5, "edge must be a 5-element array")) == NULL ||
            !d_u32(x, &a[0], d->nnodes - 1, &e->from, "bad edge source") ||
            !d_u32(x, &a[1], d->nnodes - 1, &e->to, "bad edge target") ||
            !d_u32(x, &a[2], IR_E_COUNT_ - 1, &kind, "bad edge kind") ||
            !d_opt(x, &a[3], (uint32_t) d->exprs.len, &e->expr, "bad edge guard") ||
            !d_u32(x, &a[4], UINT32_MAX, &e->index, "bad edge index")) {
            return false;
        }
        e->kind = (uint8_t) kind;
        if (i > 0 && e->from < d->edges[i - 1].from) {
            return d_fail(x, CN_PARSE, "edges are not sorted by source node");
        }
        if (d->nodes[e->from].nedges == 0) {
            d->nodes[e->from].first_edge = i;
        }
        d->nodes[e->from].nedges++;
    }
    return true;
}

cn_err
ir_dag_decode(const void *buf, size_t len, struct ir_dag **out, struct cn_errmsg *err)
{
    msgpack_unpacked up;
    struct dec x;
    size_t off = 0;
    cn_err rv;

    if ((rv = ir_msgpack_shape_ok(buf, len, DAG_MAX_DEPTH, err)) != CN_OK) {
        return rv;
    }
    memset(&x, 0, sizeof(x));
    x.err = err;
    x.d = calloc(1, sizeof(*x.d));
    if (x.d == NULL || (x.d->arena = cn_arena_new(16 * 1024)) == NULL) {
        free(x.d);
        return CN_NOMEM;
    }
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
        rv = cn_errmsg_set(err, CN_PARSE, "dag: undecodable msgpack");
    } else if (!d_dag(&x, &up.data) || x.rv != CN_OK) {
        rv = x.rv != CN_OK ? x.rv : CN_PARSE;
    } else {
        rv = ir_dag_validate(x.d, err);
    }
    msgpack_unpacked_destroy(&up);
    if (rv != CN_OK) {
        ir_dag_free(x.d);
        return rv;
    }
    *out = x.d;
    return CN_OK;
}
