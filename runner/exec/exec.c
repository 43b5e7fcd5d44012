/* SPDX-License-Identifier: MIT */
/*
 * The executor: runs inline nodes, dispatches actions, applies results, retries, sleeps,
 * aggregates fan-outs and propagates errors along exception edges. Single-threaded per
 * instance. See exec.h for the model and exec_int.h for the node state machine.
 *
 * DESIGN
 * A "work item" is an execution node that has arrived at a template node (optionally carrying
 * a value: a return value, a branch result, or the error an EXCEPT node must dispatch). The
 * step loop pops items and runs them; inline nodes move the item along an edge and push it
 * again, blocking nodes (actions, sleeps, aggregates) park it. Edges into the AGGREGATE of
 * the node's own fork deliver to that aggregate instead. Scopes are reference counted: each
 * live execution node holds its scope, each scope its caller's.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"
#include "ir/error.h"
#include "ir/eval.h"
#include "runner/exec/errors.h"
#include "runner/exec/exec_int.h"

/* ---- small utilities ---------------------------------------------------------------------- */

/* splitmix64: tiny, seedable, good enough for ids and jitter; its state is one word, which the
 * snapshot carries so a replay draws the same numbers. */
static uint64_t
rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void
new_uuid(struct rn_instance *in, struct rn_xid *id)
{
    uint64_t a = rng_next(&in->rng), b = rng_next(&in->rng);

    memcpy(id->b, &a, 8);
    memcpy(id->b + 8, &b, 8);
    id->b[6] = (uint8_t) ((id->b[6] & 0x0f) | 0x40); /* version 4 */
    id->b[8] = (uint8_t) ((id->b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
}

static void
oom(struct rn_instance *in)
{
    in->rv = CN_NOMEM;
}

static const struct ir_node *
tnode(const struct rn_instance *in, uint32_t n)
{
    return &in->dag->nodes[n];
}

static const struct ir_edge *
tedge(const struct rn_instance *in, const struct ir_node *n, uint32_t k)
{
    return &in->dag->edges[n->first_edge + k];
}

/* ---- scopes and nodes --------------------------------------------------------------------- */

/* Takes a slot of a pool threaded by a free list through each slot's `next_free` field (at
 * next_off), or appends one; the slot comes back zeroed. RN_NONE on OOM. */
static uint32_t
slot_take(void **items, size_t *len, size_t *cap, size_t elem, uint32_t *free_head, size_t next_off)
{
    uint32_t i;

    if (*free_head != RN_NONE) {
        i = *free_head;
        memcpy(free_head, (char *) *items + (size_t) i * elem + next_off, sizeof(*free_head));
    } else {
        if (cn_vec_grow(items, cap, elem, *len + 1) != CN_OK) {
            return RN_NONE;
        }
        i = (uint32_t) (*len)++;
    }
    memset((char *) *items + (size_t) i * elem, 0, elem);
    return i;
}

uint32_t
rn_s_alloc(struct rn_instance *in)
{
    uint32_t i = slot_take((void **) &in->s.items, &in->s.len, &in->s.cap, sizeof(*in->s.items),
                           &in->s_free, offsetof(struct rn_scope, next_free));
    struct rn_scope *s;

    if (i == RN_NONE) {
        oom(in);
        return RN_NONE;
    }
    s = &in->s.items[i];
    s->live = true;
    s->parent = RN_NONE;
    s->vars = ir_null();
    in->live_s++;
    return i;
}

static void
scope_rele(struct rn_instance *in, uint32_t i)
{
    /* Iterative: releasing a helper scope may release its caller chain. */
    while (i != RN_NONE) {
        struct rn_scope *s = &in->s.items[i];
        uint32_t parent;
        if (--s->refs > 0) {
            return;
        }
        parent = s->parent;
        ir_val_release(s->vars);
        s->vars = ir_null();
        s->live = false;
        s->next_free = in->s_free;
        in->s_free = i;
        in->live_s--;
        i = parent;
    }
}

static void
scope_hold(struct rn_instance *in, uint32_t i)
{
    if (i != RN_NONE) {
        in->s.items[i].refs++;
    }
}

/* A new scope for `frame`, child of `parent`, with an empty variable map. */
static uint32_t
scope_new(struct rn_instance *in, uint32_t frame, uint32_t parent)
{
    uint32_t i = rn_s_alloc(in);

    if (i == RN_NONE) {
        return RN_NONE;
    }
    if (ir_map_new(8, &in->s.items[i].vars) != CN_OK) {
        in->s.items[i].refs = 1;
        scope_rele(in, i);
        oom(in);
        return RN_NONE;
    }
    in->s.items[i].frame = frame;
    in->s.items[i].parent = parent;
    scope_hold(in, parent);
    return i;
}

uint32_t
rn_x_alloc(struct rn_instance *in)
{
    uint32_t i = slot_take((void **) &in->x.items, &in->x.len, &in->x.cap, sizeof(*in->x.items),
                           &in->x_free, offsetof(struct rn_xnode, next_free));
    struct rn_xnode *x;

    if (i == RN_NONE) {
        oom(in);
        return RN_NONE;
    }
    x = &in->x.items[i];
    x->status = RN_X_ACTIVE;
    x->scope = RN_NONE;
    x->fork_agg = RN_NONE;
    x->item = ir_null();
    x->last_error = ir_null();
    in->live_x++;
    return i;
}

static void
x_free(struct rn_instance *in, uint32_t i)
{
    struct rn_xnode *x = &in->x.items[i];
    uint32_t k;

    if (x->has_id) {
        rn_xidmap_del(&in->ids, x->id);
    }
    for (k = 0; k < x->nslots && x->slots != NULL; k++) {
        ir_val_release(x->slots[k].value);
    }
    free(x->slots);
    ir_val_release(x->item);
    ir_val_release(x->last_error);
    scope_rele(in, x->scope);
    memset(x, 0, sizeof(*x));
    x->status = RN_X_FREE;
    x->next_free = in->x_free;
    in->x_free = i;
    in->live_x--;
}

/* A new execution node at template node `node`, sharing `scope` and the fork context. */
static uint32_t
x_new(struct rn_instance *in, uint32_t node, uint32_t scope, uint32_t fork_agg, uint32_t idx)
{
    uint32_t i = rn_x_alloc(in);
    struct rn_xnode *x;

    if (i == RN_NONE) {
        return RN_NONE;
    }
    x = &in->x.items[i];
    x->node = node;
    x->scope = scope;
    scope_hold(in, scope);
    x->fork_agg = fork_agg;
    x->fork_idx = idx;
    return i;
}

static cn_err
x_ensure_id(struct rn_instance *in, uint32_t i)
{
    struct rn_xnode *x = &in->x.items[i];

    if (x->has_id) {
        return CN_OK;
    }
    new_uuid(in, &x->id);
    x->has_id = true;
    return rn_xidmap_put(&in->ids, x->id, i);
}

/* ---- the work queue ----------------------------------------------------------------------- */

static void
push(struct rn_instance *in, uint32_t x, bool has_val, struct ir_val val, bool agg_done)
{
    struct rn_work w;

    if (in->q.head > 0 && in->q.head == in->q.len) {
        in->q.head = in->q.len = 0;
    }
    w.x = x;
    w.has_val = has_val;
    w.val = val;
    w.agg_done = agg_done;
    if (CN_VEC_PUSH(&in->q, w) != CN_OK) {
        ir_val_release(val);
        oom(in);
    }
}

/* ---- outputs ------------------------------------------------------------------------------ */

static void
out_timer(struct rn_instance *in, uint32_t xi, enum rn_timer_kind kind, int64_t at)
{
    struct rn_timer t;

    t.exec_id = in->x.items[xi].id;
    t.kind = kind;
    t.at_ms = at;
    in->out->timed = true;
    if (CN_VEC_PUSH(&in->out->timers, t) != CN_OK) {
        oom(in);
    }
}

static void
out_done(struct rn_instance *in, const struct rn_xnode *x, bool ok, struct ir_val v)
{
    struct rn_done d;

    memset(&d, 0, sizeof(d));
    d.exec_id = x->id;
    d.attempt = x->attempt;
    d.ok = ok;
    d.value = ir_val_retain(v);
    if (CN_VEC_PUSH(&in->out->done, d) != CN_OK) {
        ir_val_release(d.value);
        oom(in);
    }
}

/* The running attempt of x is to stop: an action's goes to its worker, a child call's child
 * is cancelled. False without memory. */
static bool
out_cancel(struct rn_instance *in, const struct rn_xnode *x)
{
    bool child = tnode(in, x->node)->call != IR_CALL_ACTION;

    if ((child ? CN_VEC_PUSH(&in->out->child_cancels, x->id)
               : CN_VEC_PUSH(&in->out->cancels, x->id)) != CN_OK) {
        oom(in);
        return false;
    }
    return true;
}

void
rn_step_out_clear(struct rn_step_out *o)
{
    size_t i;

    for (i = 0; i < o->actions.len; i++) {
        ir_val_release(o->actions.items[i].kwargs);
        ir_val_release(o->actions.items[i].prev_error);
    }
    for (i = 0; i < o->done.len; i++) {
        ir_val_release(o->done.items[i].value);
    }
    ir_val_release(o->result);
    o->result = ir_null();
    o->actions.len = o->timers.len = o->done.len = o->cancels.len = o->child_cancels.len = 0;
    o->snapshot_needed = false;
    o->timed = false;
    o->outcome = RN_RUNNING;
}

void
rn_step_out_fini(struct rn_step_out *o)
{
    rn_step_out_clear(o);
    free(o->actions.items);
    free(o->timers.items);
    free(o->done.items);
    free(o->cancels.items);
    free(o->child_cancels.items);
    memset(o, 0, sizeof(*o));
}

/* ---- evaluation --------------------------------------------------------------------------- */

struct env_ctx {
    const struct rn_instance *in;
    const struct rn_xnode *x;
};

static const struct ir_val *
env_lookup(void *ctx, const char *name)
{
    const struct env_ctx *e = ctx;
    const struct rn_scope *s;

    if (e->x->item_name != NULL && strcmp(e->x->item_name, name) == 0) {
        return &e->x->item;
    }
    if (e->x->scope == RN_NONE) {
        return NULL;
    }
    s = &e->in->s.items[e->x->scope];
    return ir_map_get(s->vars, name, strlen(name));
}

/* Evaluates expression `e` for node xi: CN_OK (out = value), CN_RAISED (out = error), or
 * CN_NOMEM (recorded in in->rv). */
static cn_err
eval(struct rn_instance *in, uint32_t xi, uint32_t e, struct ir_val *out)
{
    struct env_ctx ctx = {in, &in->x.items[xi]};
    struct ir_eval_env env = {env_lookup, &ctx};
    cn_err rv = ir_eval(&in->dag->exprs, e, &env, out);

    if (rv != CN_OK && rv != CN_RAISED) {
        oom(in);
    }
    return rv;
}

/* Every value the instance keeps must fit in a snapshot (IR_VALUE_MAX_DEPTH levels); a
 * deeper one (built by e.g. `x = [x]` in a loop) is refused where it would be stored, as a
 * catchable ValueError. Returns CN_OK, or CN_RAISED with *err set, or CN_NOMEM. */
static cn_err
check_storable(struct rn_instance *in, struct ir_val v, struct ir_val *err)
{
    cn_err rv;

    if (!ir_val_deeper_than(v, IR_VALUE_MAX_DEPTH)) {
        return CN_OK;
    }
    rv = ir_raise(err, "ValueError", "value nested more than %d levels deep cannot be stored",
                  IR_VALUE_MAX_DEPTH);
    if (rv != CN_RAISED) {
        oom(in);
    }
    return rv;
}

/* Binds t's targets to v in xi's scope (unpacking v into several, or into one as in `a, = v`).
 * Consumes v. CN_RAISED: *err set. */
static cn_err
bind(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val v,
     struct ir_val *err)
{
    const char *const *names = t->targets;
    uint32_t n = t->ntargets;
    struct rn_scope *s = &in->s.items[in->x.items[xi].scope];
    struct ir_val items[16], *many = items;
    uint32_t k;
    cn_err rv = CN_OK;

    if (n == 0) {
        ir_val_release(v);
        return CN_OK;
    }
    if ((rv = check_storable(in, v, err)) != CN_OK) {
        ir_val_release(v);
        return rv;
    }
    if (n == 1 && !t->unpack) {
        if (ir_map_set_cstr(&s->vars, names[0], v) != CN_OK) {
            oom(in);
            return CN_NOMEM;
        }
        return CN_OK;
    }
    if (n > 16 && (many = calloc(n, sizeof(*many))) == NULL) {
        ir_val_release(v);
        oom(in);
        return CN_NOMEM;
    }
    rv = ir_unpack(v, n, many, err);
    ir_val_release(v);
    if (rv == CN_OK) {
        for (k = 0; k < n; k++) {
            if (ir_map_set_cstr(&s->vars, names[k], many[k]) != CN_OK && rv == CN_OK) {
                oom(in);
                rv = CN_NOMEM;
            }
        }
    } else if (rv != CN_RAISED) {
        oom(in);
    }
    if (many != items) {
        free(many);
    }
    return rv;
}

/* ---- control flow ------------------------------------------------------------------------- */

static void raise_error(struct rn_instance *in, uint32_t xi, struct ir_val err);

/* Moves node xi's scope up to the scope of `frame` (leaving inlined helpers). */
static void
scope_to_frame(struct rn_instance *in, uint32_t xi, uint32_t frame)
{
    struct rn_xnode *x = &in->x.items[xi];

    while (x->scope != RN_NONE && in->s.items[x->scope].frame != frame) {
        uint32_t parent = in->s.items[x->scope].parent;
        if (parent == RN_NONE) {
            break; /* frame 0 is the root of every scope chain */
        }
        scope_hold(in, parent);
        scope_rele(in, x->scope);
        x->scope = parent;
    }
}

static void
finish(struct rn_instance *in, enum rn_outcome outcome, struct ir_val v)
{
    size_t i;

    in->outcome = outcome;
    ir_val_release(in->result);
    in->result = v;
    /* Nothing may run after an outcome: cancel what is in flight and drop every node. */
    for (i = 0; i < in->x.len; i++) {
        struct rn_xnode *x = &in->x.items[i];
        if (x->status == RN_X_FREE) {
            continue;
        }
        if (x->status == RN_X_RUNNING) {
            out_cancel(in, x);
        }
        x_free(in, (uint32_t) i);
    }
    for (i = in->q.head; i < in->q.len; i++) {
        ir_val_release(in->q.items[i].val);
    }
    in->q.head = in->q.len = 0;
    in->out->snapshot_needed = true;
}

/* True when execution node j runs inside a branch of aggregate ai, however deeply nested. */
static bool
under_aggregate(const struct rn_instance *in, uint32_t j, uint32_t ai)
{
    uint32_t a = in->x.items[j].fork_agg;

    while (a != RN_NONE) {
        if (a == ai) {
            return true;
        }
        a = in->x.items[a].fork_agg;
    }
    return false;
}

/* `[fail_fast]`: a branch of aggregate ai failed with err (consumed). Every other branch still
 * live is dropped now (running attempts cancelled on their workers, sleeps and backoffs
 * forgotten, nested fan-outs with them), and err is raised from the aggregate at once. */
static void
fail_fast(struct rn_instance *in, uint32_t ai, struct ir_val err)
{
    struct rn_step_out *o = in->out;
    struct rn_xnode *a;
    uint8_t *victim;
    size_t i, k, kept;

    /* Which nodes go, decided before any is freed: freeing zeroes a node, and the walk up a
     * nested branch's fork_agg chain must not pass through one already gone. */
    if ((victim = calloc(in->x.len ? in->x.len : 1, 1)) == NULL) {
        ir_val_release(err);
        oom(in);
        return;
    }
    for (i = 0; i < in->x.len; i++) {
        victim[i] = in->x.items[i].status != RN_X_FREE && under_aggregate(in, (uint32_t) i, ai);
    }
    for (i = 0; i < in->x.len; i++) {
        struct rn_xnode *x = &in->x.items[i];
        if (!victim[i]) {
            continue;
        }
        if (x->has_id) {
            /* A request or timer this step made for it never goes out: drop it here (a
             * cancel would reach the pool before the request and miss it). */
            for (k = 0, kept = 0; k < o->actions.len; k++) {
                if (rn_xid_eq(o->actions.items[k].exec_id, x->id)) {
                    ir_val_release(o->actions.items[k].kwargs);
                    ir_val_release(o->actions.items[k].prev_error);
                } else {
                    o->actions.items[kept++] = o->actions.items[k];
                }
            }
            o->actions.len = kept;
            for (k = 0, kept = 0; k < o->timers.len; k++) {
                if (!rn_xid_eq(o->timers.items[k].exec_id, x->id)) {
                    o->timers.items[kept++] = o->timers.items[k];
                }
            }
            o->timers.len = kept;
        }
        if (x->status == RN_X_RUNNING && !out_cancel(in, x)) {
            free(victim);
            ir_val_release(err);
            return;
        }
        for (k = in->q.head; k < in->q.len; k++) {
            if (in->q.items[k].x == (uint32_t) i) { /* queued to run later in this step */
                ir_val_release(in->q.items[k].val);
                in->q.items[k].val = ir_null();
                in->q.items[k].x = RN_NONE;
            }
        }
        x_free(in, (uint32_t) i);
    }
    free(victim);
    a = &in->x.items[ai];
    for (k = 0; k < a->nslots; k++) {
        ir_val_release(a->slots[k].value);
    }
    free(a->slots);
    a->slots = NULL;
    a->nslots = a->pending = 0;
    a->status = RN_X_ACTIVE;
    o->snapshot_needed = true;
    raise_error(in, ai, err);
}

/* Delivers a branch's value (or error) to aggregate `ai`, slot `idx`. Consumes v. */
static void
deliver(struct rn_instance *in, uint32_t ai, uint32_t idx, bool ok, struct ir_val v)
{
    struct rn_xnode *a = &in->x.items[ai];
    struct rn_slot *s;

    if (a->status != RN_X_WAITING || idx >= a->nslots || a->slots[idx].filled) {
        ir_val_release(v); /* cannot happen: each branch reports once */
        return;
    }
    if (!ok && tnode(in, a->node)->fail_fast) {
        fail_fast(in, ai, v);
        return;
    }
    s = &a->slots[idx];
    s->filled = true;
    s->ok = ok;
    s->value = v;
    if (--a->pending == 0) {
        a->status = RN_X_ACTIVE;
        push(in, ai, false, ir_null(), true);
    }
}

/* An execution node leaving an action keeps nothing of its attempts. */
static void
forget_attempts(struct rn_xnode *x)
{
    x->first_at = 0;
    ir_val_release(x->last_error);
    x->last_error = ir_null();
}

/* Moves xi along `edge` carrying (has_val, val). Consumes val. */
static void
follow(struct rn_instance *in, uint32_t xi, const struct ir_edge *edge, bool has_val,
       struct ir_val val)
{
    struct rn_xnode *x = &in->x.items[xi];
    const struct ir_node *to = tnode(in, edge->to);

    if (to->kind == IR_N_AGGREGATE && x->fork_agg != RN_NONE &&
        in->x.items[x->fork_agg].node == edge->to) {
        /* The end of a branch: its value is the last action result or helper return. */
        uint32_t ai = x->fork_agg, idx = x->fork_idx;
        x_free(in, xi);
        deliver(in, ai, idx, true, has_val ? val : ir_null());
        return;
    }
    if (has_val && tnode(in, x->node)->kind != IR_N_RETURN) {
        /* A branch's last value matters only to its aggregate (handled above); anywhere else
         * only a `return` produces a function's value: falling off the end returns None. */
        ir_val_release(val);
        has_val = false;
        val = ir_null();
    }
    if (x->has_id) {
        /* An execution id names one execution of one template node. */
        rn_xidmap_del(&in->ids, x->id);
        x->has_id = false;
    }
    forget_attempts(x);
    x->node = edge->to;
    x->status = RN_X_ACTIVE;
    if (to->kind != IR_N_CALL_EXIT) {
        scope_to_frame(in, xi, to->frame);
    }
    push(in, xi, has_val, val, false);
}

static void
follow_first(struct rn_instance *in, uint32_t xi, bool has_val, struct ir_val val)
{
    const struct ir_node *t = tnode(in, in->x.items[xi].node);

    if (t->nedges == 0) {
        ir_val_release(val);
        oom(in); /* a template without a successor here is corrupt; fail loudly */
        return;
    }
    follow(in, xi, tedge(in, t, 0), has_val, val);
}

/* Where an error raised at xi goes: the innermost handler, the fork's aggregate, or out. */
static void
raise_error(struct rn_instance *in, uint32_t xi, struct ir_val err)
{
    struct rn_xnode *x = &in->x.items[xi];
    uint32_t target = tnode(in, x->node)->exc;

    if (target == IR_NO_NODE) {
        finish(in, RN_FAILED, err);
        return;
    }
    if (tnode(in, target)->kind == IR_N_AGGREGATE && x->fork_agg != RN_NONE &&
        in->x.items[x->fork_agg].node == target) {
        uint32_t ai = x->fork_agg, idx = x->fork_idx;
        x_free(in, xi);
        deliver(in, ai, idx, false, err);
        return;
    }
    if (x->has_id) {
        rn_xidmap_del(&in->ids, x->id);
        x->has_id = false;
    }
    forget_attempts(x);
    x->node = target;
    x->status = RN_X_ACTIVE;
    scope_to_frame(in, xi, tnode(in, target)->frame);
    push(in, xi, true, err, false);
}

static void
raise_new(struct rn_instance *in, uint32_t xi, const char *type, const char *msg)
{
    struct ir_val err;

    if (ir_raise(&err, type, "%s", msg) != CN_RAISED) {
        oom(in);
        return;
    }
    raise_error(in, xi, err);
}

/* ---- actions ------------------------------------------------------------------------------ */

static int64_t
timeout_for(const struct rn_instance *in, const struct ir_node *t)
{
    return t->timeout_ms > 0 ? t->timeout_ms : in->cfg.default_timeout_ms;
}

/* Whether a retry policy of t bounds the time its retries may take (max_elapsed): only then
 * does the time of its first attempt matter. */
static bool
bounds_elapsed(const struct ir_node *t)
{
    uint32_t k;

    for (k = 0; k < t->nretries; k++) {
        if (t->retries[k].max_elapsed_ms > 0) {
            return true;
        }
    }
    return false;
}

/* Evaluates the kwargs and requests attempt x->attempt. The timeout (start to close) goes with
 * the request: the pool counts it from when a worker starts the attempt, so waiting for a slot
 * is not counted (pool.h). With [deadline: D] (schedule to close) a new attempt also gets the
 * deadline now + D, kept here (durable, with its timer); a re-sent one (after hydration) keeps
 * the deadline it already had, so restarts cannot postpone it. */
static void
dispatch(struct rn_instance *in, uint32_t xi, bool resend)
{
    const struct ir_node *t = tnode(in, in->x.items[xi].node);
    struct rn_action_req r;
    struct ir_val kw, v;
    uint32_t k;
    cn_err rv;

    if (ir_map_new(t->nargs, &kw) != CN_OK) {
        oom(in);
        return;
    }
    for (k = 0; k < t->nargs; k++) {
        rv = eval(in, xi, t->argexprs[k], &v);
        if (rv == CN_OK) {
            struct ir_val err;
            if ((rv = check_storable(in, v, &err)) == CN_RAISED) {
                ir_val_release(v);
                v = err;
            }
        }
        if (rv == CN_RAISED) {
            ir_val_release(kw);
            raise_error(in, xi, v);
            return;
        }
        if (rv != CN_OK || ir_map_set_cstr(&kw, t->argnames[k], v) != CN_OK) {
            ir_val_release(kw);
            oom(in);
            return;
        }
    }
    if (x_ensure_id(in, xi) != CN_OK) {
        ir_val_release(kw);
        oom(in);
        return;
    }
    {
        struct rn_xnode *x = &in->x.items[xi];
        if (x->attempt == 0) {
            x->attempt = 1;
        }
        if (x->first_at == 0) {
            x->first_at = in->now; /* max_elapsed counts from here */
            in->out->timed = in->out->timed || bounds_elapsed(t);
        }
        x->status = RN_X_RUNNING;
        if (!resend || x->deadline == 0) {
            x->deadline = t->deadline_ms > 0 ? in->now + t->deadline_ms : 0;
            in->out->timed = in->out->timed || t->deadline_ms > 0;
        }
        r.exec_id = x->id;
        r.attempt = x->attempt;
        r.call = t->call;
        r.action = t->name;
        r.version = t->version;
        r.kwargs = kw;
        /* A child's timeout is the child's own deadline (it times itself out and its parent
         * gets ChildWorkflowTimeout); the runner's default action timeout is not for it. */
        r.timeout_ms = t->call == IR_CALL_ACTION ? timeout_for(in, t) : t->timeout_ms;
        r.deadline_ms = x->deadline;
        r.prev_error = ir_val_retain(x->last_error);
    }
    if (CN_VEC_PUSH(&in->out->actions, r) != CN_OK) {
        ir_val_release(kw);
        ir_val_release(r.prev_error);
        oom(in);
        return;
    }
    if (in->x.items[xi].deadline != 0) {
        out_timer(in, xi, RN_TIMER_DEADLINE, in->x.items[xi].deadline);
    }
    in->out->snapshot_needed = true;
}

/* The retry policy for `err` after attempt x->attempt: the largest N among the matching
 * brackets applies, with that bracket's backoff. Returns the delay or -1 for no retry. */
static int64_t
retry_delay(struct rn_instance *in, uint32_t xi, struct ir_val err)
{
    const struct rn_xnode *x = &in->x.items[xi];
    const struct ir_node *t = tnode(in, x->node);
    bool timeout = strcmp(ir_error_type(err), rn_error_name(RN_ERR_ACTION_TIMEOUT)) == 0 ||
                   strcmp(ir_error_type(err), rn_error_name(RN_ERR_CHILD_TIMEOUT)) == 0;
    int64_t best = -1, base = 0, cap = IR_MAX_BACKOFF_MS, mult = 2000, elapsed = 0, delay;
    uint32_t k, j;

    if (!ir_error_retryable(err)) {
        return -1; /* its worker said so: no policy retries it */
    }
    for (k = 0; k < t->nretries; k++) {
        const struct ir_retry *r = &t->retries[k];
        bool match = false;
        if (r->ntypes == 0) {
            match = !timeout; /* timeouts are retried only when named */
        }
        for (j = 0; j < r->ntypes && !match; j++) {
            match = ir_error_matches(err, r->types[j]);
        }
        if (match && r->retries > best) {
            best = r->retries;
            base = r->backoff_ms;
            cap = r->max_backoff_ms;
            mult = r->multiplier_milli;
            elapsed = r->max_elapsed_ms;
        }
    }
    if (best < (int64_t) x->attempt) {
        return -1;
    }
    if (elapsed > 0 && x->first_at != 0 && in->now - x->first_at >= elapsed) {
        return -1; /* max_elapsed: the time for retries is up */
    }
    /* Exponential from the base (times the multiplier per retry, in thousandths: integer
     * arithmetic, so that a replay computes the same delay), up to the cap; then full jitter:
     * uniform in [0, d]. Nothing overflows: delay < cap <= 1h and mult <= 100 000. */
    delay = base;
    for (k = 1; k < x->attempt && delay < cap && mult > 1000; k++) {
        delay = delay * mult / 1000;
    }
    if (delay > cap) {
        delay = cap;
    }
    delay = (int64_t) (rng_next(&in->rng) % (uint64_t) (delay + 1));
    if (elapsed > 0 && x->first_at != 0 && in->now + delay > x->first_at + elapsed) {
        delay = x->first_at + elapsed - in->now; /* the last retry starts at the bound */
    }
    return delay;
}

/* An attempt of xi failed with err (consumed). Retry later or raise. */
static void
attempt_failed(struct rn_instance *in, uint32_t xi, struct ir_val err)
{
    int64_t delay = retry_delay(in, xi, err);
    struct rn_xnode *x = &in->x.items[xi];

    if (delay < 0) {
        x->status = RN_X_ACTIVE;
        raise_error(in, xi, err);
        return;
    }
    /* Kept for the next attempt's request (its worker sees what went wrong before). */
    ir_val_release(x->last_error);
    x->last_error = err;
    x->attempt++;
    x->status = RN_X_BACKOFF;
    x->scheduled_at = in->now + delay;
    out_timer(in, xi, RN_TIMER_BACKOFF, x->scheduled_at);
    in->out->snapshot_needed = true;
}

/* Normalises an error reported by a worker into an error value (flagged map). */
static cn_err
as_error(struct ir_val v, struct ir_val *out)
{
    const struct ir_val *t, *m, *b, *d, *r;
    cn_err rv;

    if (v.type == IR_T_MAP && ir_map_is_error(v)) {
        *out = ir_val_retain(v);
        return CN_OK;
    }
    if (v.type != IR_T_MAP || (t = ir_map_get(v, "type", 4)) == NULL || t->type != IR_T_STR) {
        rv = ir_raise(out, "WorkerError", "malformed error from worker");
        return rv == CN_RAISED ? CN_OK : rv;
    }
    m = ir_map_get(v, "message", 7);
    b = ir_map_get(v, "bases", 5);
    d = ir_map_get(v, "details", 7);
    r = ir_map_get(v, IR_ERROR_RETRYABLE_KEY, sizeof(IR_ERROR_RETRYABLE_KEY) - 1);
    rv = ir_error_new(ir_str_data(*t), m && m->type == IR_T_STR ? ir_str_data(*m) : "",
                      b && b->type == IR_T_LIST ? ir_val_retain(*b) : ir_null(),
                      d ? ir_val_retain(*d) : ir_null(), out);
    if (rv == CN_OK && r != NULL && r->type == IR_T_BOOL && !r->u.b) {
        rv = ir_error_set_final(out);
    }
    return rv;
}

static void
on_action_result(struct rn_instance *in, uint32_t xi, struct ir_val result)
{
    const struct ir_node *t = tnode(in, in->x.items[xi].node);
    struct ir_val err;
    cn_err rv;

    in->x.items[xi].status = RN_X_ACTIVE;
    if ((rv = check_storable(in, result, &err)) != CN_OK) {
        if (rv == CN_RAISED) {
            raise_error(in, xi, err);
        }
        return;
    }
    if (t->ntargets > 0) {
        rv = bind(in, xi, t, ir_val_retain(result), &err);
        if (rv == CN_RAISED) {
            raise_error(in, xi, err);
            return;
        }
        if (rv != CN_OK) {
            return;
        }
    }
    follow_first(in, xi, true, ir_val_retain(result));
}

/* ---- running inline nodes ----------------------------------------------------------------- */

static void
run_entry(struct rn_instance *in, uint32_t xi)
{
    const struct ir_node *t = tnode(in, in->x.items[xi].node);
    const struct ir_val *input = in->input;
    struct rn_scope *s = &in->s.items[in->x.items[xi].scope];
    uint32_t k;

    if (input == NULL || input->type != IR_T_MAP) {
        raise_new(in, xi, "TypeError", "workflow input must be a JSON object");
        return;
    }
    for (k = 0; k < t->ntargets; k++) {
        const struct ir_val *v = ir_map_get(*input, t->targets[k], strlen(t->targets[k]));
        char msg[256];
        if (v == NULL) {
            (void) snprintf(msg, sizeof(msg), "%s() missing input '%s'", in->dag->entry_func,
                            t->targets[k]);
            raise_new(in, xi, "TypeError", msg);
            return;
        }
        if (ir_map_set_cstr(&s->vars, t->targets[k], ir_val_retain(*v)) != CN_OK) {
            oom(in);
            return;
        }
    }
    follow_first(in, xi, false, ir_null());
}

static void
run_fork(struct rn_instance *in, uint32_t xi, const struct ir_node *t)
{
    struct ir_val coll = ir_null(), items = ir_null();
    struct rn_xnode *x = &in->x.items[xi];
    uint32_t n, k, ai;
    cn_err rv;

    if (t->kind == IR_N_SPREAD) {
        rv = eval(in, xi, t->expr, &coll);
        if (rv == CN_RAISED) {
            raise_error(in, xi, coll);
            return;
        }
        if (rv != CN_OK) {
            return;
        }
        rv = ir_iter_items(coll, &items);
        ir_val_release(coll);
        if (rv == CN_RAISED) {
            raise_error(in, xi, items);
            return;
        }
        if (rv != CN_OK) {
            oom(in);
            return;
        }
        n = (uint32_t) ir_list_len(items);
    } else {
        n = t->nedges;
    }
    /* The forking node becomes the aggregate: it keeps the scope and the outer fork context. */
    ai = xi;
    x->node = t->link;
    x->status = RN_X_WAITING;
    x->nslots = n;
    x->pending = n;
    x->slots = calloc(n ? n : 1, sizeof(*x->slots));
    if (x->slots == NULL) {
        ir_val_release(items);
        oom(in);
        return;
    }
    for (k = 0; k < n; k++) {
        x->slots[k].value = ir_null();
    }
    if (x_ensure_id(in, ai) != CN_OK) {
        ir_val_release(items);
        oom(in);
        return;
    }
    in->out->snapshot_needed = true;
    if (n == 0) {
        ir_val_release(items);
        x->status = RN_X_ACTIVE;
        push(in, ai, false, ir_null(), true);
        return;
    }
    for (k = 0; k < n && in->rv == CN_OK; k++) {
        const struct ir_edge *e = tedge(in, t, t->kind == IR_N_SPREAD ? 0 : k);
        uint32_t bi = x_new(in, e->to, in->x.items[ai].scope, ai, k);
        if (bi == RN_NONE) {
            break;
        }
        if (t->kind == IR_N_SPREAD) {
            in->x.items[bi].item_name = t->name;
            in->x.items[bi].item = ir_val_retain(ir_list_items(items)[k]);
        }
        push(in, bi, false, ir_null(), false);
    }
    ir_val_release(items);
}

static void
run_aggregate_done(struct rn_instance *in, uint32_t ai)
{
    struct rn_xnode *a = &in->x.items[ai];
    const struct ir_node *t = tnode(in, a->node);
    struct ir_val list, err;
    uint32_t k;
    cn_err rv;

    for (k = 0; k < a->nslots; k++) {
        if (!a->slots[k].ok) {
            uint32_t j;
            /* The lowest-index failure is raised once every branch has finished. */
            err = a->slots[k].value;
            a->slots[k].value = ir_null();
            for (j = 0; j < a->nslots; j++) {
                ir_val_release(a->slots[j].value);
            }
            free(a->slots);
            a->slots = NULL;
            a->nslots = a->pending = 0;
            raise_error(in, ai, err);
            return;
        }
    }
    if (ir_list_new(a->nslots, &list) != CN_OK) {
        oom(in);
        return;
    }
    for (k = 0; k < a->nslots; k++) {
        ir_list_items(list)[k] = a->slots[k].value;
        a->slots[k].value = ir_null();
    }
    free(a->slots);
    a->slots = NULL;
    a->nslots = a->pending = 0;
    rv = bind(in, ai, t, ir_val_retain(list), &err);
    if (rv == CN_RAISED) {
        ir_val_release(list);
        raise_error(in, ai, err);
        return;
    }
    if (rv != CN_OK) {
        ir_val_release(list);
        return;
    }
    follow_first(in, ai, true, list);
}

static void
run_except(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val err)
{
    uint32_t k, j;

    for (k = 0; k < t->nhandlers; k++) {
        const struct ir_handler_info *h = &t->handlers[k];
        bool match = h->ntypes == 0;
        for (j = 0; j < h->ntypes && !match; j++) {
            match = ir_error_matches(err, h->types[j]);
        }
        if (!match) {
            continue;
        }
        if (h->bind != NULL) {
            struct rn_scope *s = &in->s.items[in->x.items[xi].scope];
            if (ir_map_set_cstr(&s->vars, h->bind, ir_val_retain(err)) != CN_OK) {
                ir_val_release(err);
                oom(in);
                return;
            }
        }
        ir_val_release(err);
        follow(in, xi, tedge(in, t, k), false, ir_null());
        return;
    }
    raise_error(in, xi, err); /* no handler matched: on to the enclosing one */
}

static void
run_sleep(struct rn_instance *in, uint32_t xi, const struct ir_node *t)
{
    struct ir_val v;
    double secs;
    cn_err rv = eval(in, xi, t->expr, &v);

    if (rv == CN_RAISED) {
        raise_error(in, xi, v);
        return;
    }
    if (rv != CN_OK) {
        return;
    }
    if (v.type == IR_T_INT) {
        secs = (double) v.u.i;
    } else if (v.type == IR_T_FLOAT) {
        secs = v.u.f;
    } else if (v.type == IR_T_BOOL) {
        secs = v.u.b ? 1.0 : 0.0;
    } else {
        char msg[128];
        (void) snprintf(msg, sizeof(msg), "sleep takes a number of seconds, not '%s'",
                        ir_type_name(v.type));
        ir_val_release(v);
        raise_new(in, xi, "TypeError", msg);
        return;
    }
    ir_val_release(v);
    if (isnan(secs) || secs < 0) {
        raise_new(in, xi, "ValueError", "sleep length must be non-negative");
        return;
    }
    if (secs > 9.0e15 / 1000.0) {
        raise_new(in, xi, "OverflowError", "sleep length is too large");
        return;
    }
    if (secs * 1000.0 < 1.0) {
        follow_first(in, xi, false, ir_null());
        return;
    }
    if (x_ensure_id(in, xi) != CN_OK) {
        oom(in);
        return;
    }
    in->x.items[xi].status = RN_X_SLEEPING;
    in->x.items[xi].scheduled_at = in->now + (int64_t) ceil(secs * 1000.0);
    out_timer(in, xi, RN_TIMER_SLEEP, in->x.items[xi].scheduled_at);
    in->out->snapshot_needed = true;
}

static void
run_call_enter(struct rn_instance *in, uint32_t xi, const struct ir_node *t)
{
    uint32_t caller = in->x.items[xi].scope, s, k;
    struct ir_val v;
    cn_err rv;

    s = scope_new(in, t->callee_frame, caller);
    if (s == RN_NONE) {
        return;
    }
    for (k = 0; k < t->nargs; k++) {
        rv = eval(in, xi, t->argexprs[k], &v);
        if (rv == CN_RAISED) {
            in->s.items[s].refs++;
            scope_rele(in, s);
            raise_error(in, xi, v);
            return;
        }
        if (rv != CN_OK || ir_map_set_cstr(&in->s.items[s].vars, t->argnames[k], v) != CN_OK) {
            in->s.items[s].refs++;
            scope_rele(in, s);
            oom(in);
            return;
        }
    }
    /* The node moves into the helper's scope. */
    in->x.items[xi].scope = s;
    scope_hold(in, s);
    scope_rele(in, caller);
    follow_first(in, xi, false, ir_null());
}

static void
run_call_exit(struct rn_instance *in, uint32_t xi, const struct ir_node *t, bool has_val,
              struct ir_val val)
{
    struct ir_val err;
    cn_err rv;

    scope_to_frame(in, xi, t->frame);
    if (!has_val) {
        val = ir_null(); /* fell off the end of the helper */
    }
    rv = bind(in, xi, t, ir_val_retain(val), &err);
    if (rv == CN_RAISED) {
        ir_val_release(val);
        raise_error(in, xi, err);
        return;
    }
    if (rv != CN_OK) {
        ir_val_release(val);
        return;
    }
    follow_first(in, xi, true, val);
}

/* The step ran out of inline budget at work item w (whose value it consumes): the instance
 * fails outright, past every handler, or a catch-all `try` in the loop would keep it spinning. */
static void
over_budget(struct rn_instance *in, const struct rn_work *w)
{
    char msg[160];
    struct ir_val err;

    ir_val_release(w->val);
    (void) snprintf(msg, sizeof(msg),
                    "more than %llu inline steps without waiting for an action, a sleep or a "
                    "timer (line %u)",
                    (unsigned long long) in->cfg.max_inline_steps,
                    (unsigned) tnode(in, in->x.items[w->x].node)->line);
    if (rn_error_new(RN_ERR_STEP_LIMIT, msg, &err) != CN_OK) {
        oom(in);
        return;
    }
    finish(in, RN_FAILED, err);
}

/* Runs the node at the front of a work item. Consumes the carried value. */
static void
run_node(struct rn_instance *in, const struct rn_work *w)
{
    uint32_t xi = w->x, k;
    const struct ir_node *t = tnode(in, in->x.items[xi].node);
    struct ir_val v, err;
    cn_err rv;

    /* Every work item counts, aggregates included: any cycle of inline nodes passes here. */
    if (++in->step_nodes > in->cfg.max_inline_steps) {
        over_budget(in, w);
        return;
    }
    if (w->agg_done) {
        run_aggregate_done(in, xi);
        return;
    }
    if (t->kind != IR_N_EXCEPT && t->kind != IR_N_RETURN && t->kind != IR_N_CALL_EXIT &&
        t->kind != IR_N_OUTPUT) {
        ir_val_release(w->val); /* only these consume a carried value */
    }
    switch ((enum ir_node_kind) t->kind) {
    case IR_N_ENTRY:
        run_entry(in, xi);
        return;
    case IR_N_ASSIGN:
    case IR_N_LOOP_INIT:
    case IR_N_LOOP_EXTRACT:
    case IR_N_LOOP_INCR:
        rv = eval(in, xi, t->expr, &v);
        if (rv == CN_RAISED) {
            raise_error(in, xi, v);
            return;
        }
        if (rv != CN_OK) {
            return;
        }
        rv = bind(in, xi, t, v, &err);
        if (rv == CN_RAISED) {
            raise_error(in, xi, err);
        } else if (rv == CN_OK) {
            follow_first(in, xi, false, ir_null());
        }
        return;
    case IR_N_LOOP_COND:
        rv = eval(in, xi, t->expr, &v);
        if (rv == CN_RAISED) {
            raise_error(in, xi, v);
            return;
        }
        if (rv != CN_OK) {
            return;
        }
        k = ir_truthy(v) ? 0 : 1; /* edges: TRUE first, then FALSE */
        ir_val_release(v);
        follow(in, xi, tedge(in, t, k), false, ir_null());
        return;
    case IR_N_BRANCH:
        for (k = 0; k < t->nedges; k++) {
            const struct ir_edge *e = tedge(in, t, k);
            if (e->kind == IR_E_GUARD) {
                rv = eval(in, xi, e->expr, &v);
                if (rv == CN_RAISED) {
                    raise_error(in, xi, v);
                    return;
                }
                if (rv != CN_OK) {
                    return;
                }
                if (!ir_truthy(v)) {
                    ir_val_release(v);
                    continue;
                }
                ir_val_release(v);
            }
            follow(in, xi, e, false, ir_null());
            return;
        }
        oom(in); /* every branch node has an else edge */
        return;
    case IR_N_JOIN:
    case IR_N_LOOP_EXIT:
    case IR_N_TRY:
    case IR_N_BREAK:
    case IR_N_CONTINUE:
        follow_first(in, xi, false, ir_null());
        return;
    case IR_N_ACTION:
        in->x.items[xi].attempt = 0;
        in->x.items[xi].first_at = 0;
        ir_val_release(in->x.items[xi].last_error);
        in->x.items[xi].last_error = ir_null();
        dispatch(in, xi, false);
        return;
    case IR_N_SPREAD:
    case IR_N_PARALLEL:
        run_fork(in, xi, t);
        return;
    case IR_N_EXCEPT:
        if (!w->has_val) {
            oom(in); /* an except node is only reached by an error */
            return;
        }
        run_except(in, xi, t, w->val);
        return;
    case IR_N_SLEEP:
        run_sleep(in, xi, t);
        return;
    case IR_N_RETURN:
        ir_val_release(w->val);
        if (t->expr == IR_NO_EXPR) {
            follow_first(in, xi, true, ir_null());
            return;
        }
        rv = eval(in, xi, t->expr, &v);
        if (rv == CN_OK && (rv = check_storable(in, v, &err)) == CN_RAISED) {
            ir_val_release(v);
            v = err;
        }
        if (rv == CN_RAISED) {
            raise_error(in, xi, v);
        } else if (rv == CN_OK) {
            follow_first(in, xi, true, v);
        }
        return;
    case IR_N_CALL_ENTER:
        run_call_enter(in, xi, t);
        return;
    case IR_N_CALL_EXIT:
        run_call_exit(in, xi, t, w->has_val, w->val);
        return;
    case IR_N_OUTPUT:
        x_free(in, xi);
        finish(in, RN_COMPLETED, w->has_val ? w->val : ir_null());
        return;
    case IR_N_AGGREGATE:
    default:
        ir_val_release(w->val);
        oom(in); /* reached only through deliver(); anything else is a corrupt template */
        return;
    }
}

static void
run_queue(struct rn_instance *in)
{
    while (in->q.head < in->q.len && in->rv == CN_OK && in->outcome == RN_RUNNING) {
        struct rn_work w = in->q.items[in->q.head++];
        if (w.x != RN_NONE) { /* RN_NONE: its node was cancelled (fail_fast) */
            run_node(in, &w);
        }
    }
}

/* ---- events ------------------------------------------------------------------------------- */

/* The running attempt of xi is past its deadline ([deadline: D]): it fails with ActionTimeout
 * (recorded like a worker's error), the pool drops it or has its worker cancel it, and the
 * retry policy decides what follows. */
static void
attempt_timed_out(struct rn_instance *in, uint32_t xi)
{
    struct rn_xnode *x = &in->x.items[xi];
    struct ir_val err;
    char msg[96];

    (void) snprintf(msg, sizeof(msg), "attempt %u was not done within its deadline of %lld ms",
                    x->attempt, (long long) tnode(in, x->node)->deadline_ms);
    if (rn_error_new(RN_ERR_ACTION_TIMEOUT, msg, &err) != CN_OK) {
        oom(in);
        return;
    }
    if (!out_cancel(in, x)) {
        ir_val_release(err);
        return;
    }
    out_done(in, x, false, err);
    attempt_failed(in, xi, err);
}

static void
apply_event(struct rn_instance *in, const struct rn_event *ev)
{
    uint32_t xi;
    struct rn_xnode *x;
    struct ir_val err;

    if (ev->kind == RN_EV_CANCEL) {
        /* Recorded as the instance's error, as cairn.cancel records one it cancels itself. */
        const char *why = ev->value.type == IR_T_STR ? ir_str_data(ev->value) : "cancelled";
        if (rn_error_raise(&err, "Cancelled", why) != CN_RAISED) {
            oom(in);
            return;
        }
        finish(in, RN_CANCELLED, err);
        return;
    }
    if (ev->kind == RN_EV_TIMEOUT) {
        const char *why = ev->value.type == IR_T_STR ? ir_str_data(ev->value)
                                                     : "the workflow passed its deadline";
        if (rn_error_new(RN_ERR_WORKFLOW_TIMEOUT, why, &err) != CN_OK) {
            oom(in);
            return;
        }
        finish(in, RN_TIMED_OUT, err);
        return;
    }
    if (!rn_xidmap_get(&in->ids, ev->exec_id, &xi)) {
        in->stats.stale_events++;
        return;
    }
    x = &in->x.items[xi];
    switch (ev->kind) {
    case RN_EV_RESULT:
    case RN_EV_ERROR:
        if (x->status != RN_X_RUNNING || x->attempt != ev->attempt) {
            in->stats.stale_events++;
            return;
        }
        if (ev->kind == RN_EV_RESULT) {
            if (!ev->recorded) {
                out_done(in, x, true, ev->value);
            }
            on_action_result(in, xi, ev->value);
            return;
        }
        if (as_error(ev->value, &err) != CN_OK) {
            oom(in);
            return;
        }
        if (!ev->recorded) {
            out_done(in, x, false, err);
        }
        attempt_failed(in, xi, err);
        return;
    case RN_EV_TIMER:
        if (x->status == RN_X_SLEEPING && in->now >= x->scheduled_at) {
            x->status = RN_X_ACTIVE;
            in->out->snapshot_needed = true;
            follow_first(in, xi, false, ir_null());
        } else if (x->status == RN_X_BACKOFF && in->now >= x->scheduled_at) {
            dispatch(in, xi, false);
        } else if (x->status == RN_X_RUNNING && x->deadline != 0 && in->now >= x->deadline) {
            attempt_timed_out(in, xi);
        } else {
            in->stats.stale_events++;
        }
        return;
    default:
        in->stats.stale_events++;
        return;
    }
}

/* ---- public API --------------------------------------------------------------------------- */

struct rn_iid
rn_child_id(struct rn_xid exec_id, uint32_t attempt)
{
    struct rn_iid id;
    uint64_t a, b, s;

    memcpy(&a, exec_id.b, 8);
    memcpy(&b, exec_id.b + 8, 8);
    /* Two rounds of splitmix64 over the execution id and the attempt: a fixed function (it is
     * part of what makes a replay name the same child), and one that spreads the ids. */
    s = a ^ ((uint64_t) attempt * 0xd1b54a32d192ed03ULL);
    a = rng_next(&s);
    s ^= b;
    b = rng_next(&s);
    memcpy(id.b, &a, 8);
    memcpy(id.b + 8, &b, 8);
    id.b[6] = (uint8_t) ((id.b[6] & 0x0f) | 0x80); /* version 8: custom */
    id.b[8] = (uint8_t) ((id.b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    return id;
}

void
rn_instance_waits(const struct rn_instance *in, struct rn_instance_waits *w)
{
    size_t i;

    w->actions = w->children = 0;
    w->next_ms = INT64_MAX;
    for (i = 0; i < in->x.len; i++) {
        const struct rn_xnode *x = &in->x.items[i];
        int64_t at = 0;

        switch (x->status) {
        case RN_X_RUNNING:
            if (tnode(in, x->node)->call != IR_CALL_ACTION) {
                w->children++;
            } else {
                w->actions++;
            }
            at = x->deadline;
            break;
        case RN_X_BACKOFF:
        case RN_X_SLEEPING:
            at = x->scheduled_at;
            break;
        default:
            break;
        }
        if (at != 0 && at < w->next_ms) {
            w->next_ms = at;
        }
    }
}

struct rn_instance *
rn_instance_alloc(const struct ir_dag *dag, const struct rn_exec_cfg *cfg)
{
    struct rn_instance *in = calloc(1, sizeof(*in));

    if (in == NULL) {
        return NULL;
    }
    in->dag = dag;
    in->cfg = *cfg;
    if (in->cfg.default_timeout_ms <= 0) {
        in->cfg.default_timeout_ms = 300000;
    }
    if (in->cfg.max_inline_steps == 0) {
        in->cfg.max_inline_steps = RN_EXEC_DEFAULT_MAX_INLINE_STEPS;
    }
    in->x_free = RN_NONE;
    in->s_free = RN_NONE;
    in->result = ir_null();
    return in;
}

static void
begin_step(struct rn_instance *in, struct rn_step_out *o, int64_t now)
{
    in->out = o;
    in->now = now;
    in->step_nodes = 0;
    in->rv = CN_OK;
    o->outcome = in->outcome;
}

static cn_err
end_step(struct rn_instance *in)
{
    struct rn_step_out *o = in->out;

    run_queue(in);
    o->outcome = in->outcome;
    if (in->outcome != RN_RUNNING && o->result.type == IR_T_NULL) {
        o->result = ir_val_retain(in->result);
    }
    in->out = NULL;
    return in->rv;
}

cn_err
rn_instance_start(const struct ir_dag *dag, struct rn_iid instance_id, struct ir_val input,
                  const struct rn_exec_cfg *cfg, int64_t now_ms, struct rn_instance **out,
                  struct rn_step_out *o)
{
    struct rn_instance *in = rn_instance_alloc(dag, cfg);
    uint32_t s, x;
    uint64_t seed;
    cn_err rv;

    if (in == NULL) {
        return CN_NOMEM;
    }
    in->id = instance_id;
    memcpy(&seed, instance_id.b, 8);
    in->rng = seed ^ 0x6a09e667f3bcc909ULL;
    begin_step(in, o, now_ms);
    in->input = &input;
    s = scope_new(in, 0, RN_NONE);
    x = s == RN_NONE ? RN_NONE : x_new(in, dag->entry, s, RN_NONE, 0);
    if (x != RN_NONE) {
        push(in, x, false, ir_null(), false);
        in->out->snapshot_needed = true;
    }
    rv = end_step(in);
    in->input = NULL;
    if (rv != CN_OK) {
        rn_instance_free(in);
        return rv;
    }
    *out = in;
    return CN_OK;
}

cn_err
rn_instance_step(struct rn_instance *in, const struct rn_event *evs, size_t n, int64_t now_ms,
                 struct rn_step_out *o)
{
    size_t i;

    begin_step(in, o, now_ms);
    for (i = 0; i < n && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        apply_event(in, &evs[i]);
        /* Each event's consequences run before the next event is applied, so a batch behaves
         * exactly like the same events one step at a time. */
        run_queue(in);
    }
    return end_step(in);
}

/* Redrive: execution node xi (an action running or waiting to retry in the last snapshot of a
 * run that failed) starts over: a new execution id, attempt 1, a fresh budget of retries and a
 * new deadline; what its old attempts may still report is stale. */
static void
restart_action(struct rn_instance *in, uint32_t xi)
{
    struct rn_xnode *x = &in->x.items[xi];

    if (x->has_id) {
        rn_xidmap_del(&in->ids, x->id);
        x->has_id = false;
    }
    forget_attempts(x);
    x->attempt = 0;
    x->deadline = 0;
    x->status = RN_X_ACTIVE;
    dispatch(in, xi, false);
}

/* Redrive: a branch of waiting aggregate ai that ended with an error before the snapshot (its
 * slot holds the error) runs again from the start of the branch. The aggregate still has the
 * scope its fork evaluated the collection in, so a spread's items come out the same. */
static void
restart_failed_branches(struct rn_instance *in, uint32_t ai)
{
    const struct ir_node *fork = tnode(in, tnode(in, in->x.items[ai].node)->link);
    struct ir_val coll = ir_null(), items = ir_null();
    uint32_t k;

    for (k = 0; k < in->x.items[ai].nslots && in->rv == CN_OK; k++) {
        struct rn_slot *sl = &in->x.items[ai].slots[k];
        const struct ir_edge *e;
        uint32_t bi;
        if (!sl->filled || sl->ok) {
            continue;
        }
        if (fork->kind == IR_N_SPREAD && items.type == IR_T_NULL) {
            if (eval(in, ai, fork->expr, &coll) != CN_OK || ir_iter_items(coll, &items) != CN_OK ||
                ir_list_len(items) != in->x.items[ai].nslots) {
                /* Cannot happen: the same expression over the same scope. Leave the error. */
                ir_val_release(coll);
                ir_val_release(items);
                return;
            }
            ir_val_release(coll);
        }
        ir_val_release(sl->value);
        sl->value = ir_null();
        sl->filled = false;
        in->x.items[ai].pending++;
        e = tedge(in, fork, fork->kind == IR_N_SPREAD ? 0 : k);
        bi = x_new(in, e->to, in->x.items[ai].scope, ai, k);
        if (bi == RN_NONE) {
            break;
        }
        if (fork->kind == IR_N_SPREAD) {
            in->x.items[bi].item_name = fork->name;
            in->x.items[bi].item = ir_val_retain(ir_list_items(items)[k]);
        }
        push(in, bi, false, ir_null(), false);
    }
    ir_val_release(items);
}

static cn_err
hydrate(const struct ir_dag *dag, const void *snap, size_t len, const struct rn_done *results,
        size_t nresults, const struct rn_exec_cfg *cfg, int64_t now_ms, bool redrive,
        struct rn_instance **out, struct rn_step_out *o, struct cn_errmsg *err)
{
    struct rn_instance *in = rn_instance_alloc(dag, cfg);
    struct {
        struct rn_xid *items;
        size_t len, cap;
    } running = {NULL, 0, 0};
    size_t i;
    cn_err rv;

    if (in == NULL) {
        return CN_NOMEM;
    }
    if ((rv = rn_snapshot_decode(in, snap, len, err)) != CN_OK) {
        rn_instance_free(in);
        return rv;
    }
    begin_step(in, o, now_ms);
    /* Remember what the snapshot had running: only those may be dispatched again below;
     * actions started while replaying results are dispatched by that replay itself. */
    for (i = 0; i < in->x.len; i++) {
        uint8_t st = in->x.items[i].status;
        if (st == RN_X_RUNNING || (redrive && st == RN_X_BACKOFF)) {
            if (CN_VEC_PUSH(&running, in->x.items[i].id) != CN_OK) {
                free(running.items);
                rn_instance_free(in);
                return CN_NOMEM;
            }
        }
    }
    if (redrive && in->outcome == RN_RUNNING) {
        /* 0. Branches that had already failed into their aggregate run again, before any
         * result arrives that would complete the aggregate and raise their error. */
        size_t n = in->x.len;
        for (i = 0; i < n && in->rv == CN_OK; i++) {
            if (in->x.items[i].status == RN_X_WAITING) {
                restart_failed_branches(in, (uint32_t) i);
            }
        }
        in->out->snapshot_needed = true;
        run_queue(in);
    }
    /* 1. Results recorded after the snapshot, for attempts it has running. */
    for (i = 0; i < nresults && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        struct rn_event ev;
        uint32_t xi;
        if (!rn_xidmap_get(&in->ids, results[i].exec_id, &xi) ||
            in->x.items[xi].status != RN_X_RUNNING ||
            in->x.items[xi].attempt != results[i].attempt || (redrive && !results[i].ok)) {
            continue; /* a redrive runs what failed again instead of raising its error */
        }
        ev.kind = results[i].ok ? RN_EV_RESULT : RN_EV_ERROR;
        ev.exec_id = results[i].exec_id;
        ev.attempt = results[i].attempt;
        ev.value = results[i].value;
        /* Read from storage: recording them again would only be a write that inserts nothing
         * (a parent woken by the last of 10 000 children replays 10 000 of them). */
        ev.recorded = true;
        apply_event(in, &ev);
        run_queue(in);
    }
    /* 2. Dispatches the crash may have lost go out again (same id and attempt: at least
     * once), unless their deadline passed meanwhile: those are not sent again but get their
     * deadline timer, which is due at once and times them out (through the timer, not here:
     * hydration only rebuilds, so a snapshot taken right after it hydrates to itself); sleeps
     * and backoffs get their timers again. */
    if (redrive) {
        /* 2'. Every action of the snapshot still running or waiting to retry (no success
         * recorded) starts over. */
        for (i = 0; i < running.len && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
            uint32_t xi;
            if (rn_xidmap_get(&in->ids, running.items[i], &xi) &&
                (in->x.items[xi].status == RN_X_RUNNING ||
                 in->x.items[xi].status == RN_X_BACKOFF)) {
                restart_action(in, xi);
            }
        }
        run_queue(in);
        running.len = 0;
    }
    for (i = 0; i < running.len && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        uint32_t xi;
        if (rn_xidmap_get(&in->ids, running.items[i], &xi) &&
            in->x.items[xi].status == RN_X_RUNNING) {
            if (in->x.items[xi].deadline != 0 && in->now >= in->x.items[xi].deadline) {
                out_timer(in, xi, RN_TIMER_DEADLINE, in->x.items[xi].deadline);
            } else {
                dispatch(in, xi, true);
            }
        }
    }
    for (i = 0; i < in->x.len && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        struct rn_xnode *x = &in->x.items[i];
        bool fresh = false;
        size_t k;
        if ((x->status != RN_X_SLEEPING && x->status != RN_X_BACKOFF) || !x->has_id) {
            continue;
        }
        for (k = 0; k < o->timers.len && !fresh; k++) {
            fresh = rn_xid_eq(o->timers.items[k].exec_id, x->id); /* set by the replay */
        }
        if (!fresh) {
            out_timer(in, (uint32_t) i,
                      x->status == RN_X_SLEEPING ? RN_TIMER_SLEEP : RN_TIMER_BACKOFF,
                      x->scheduled_at);
        }
    }
    free(running.items);
    rv = end_step(in);
    if (rv != CN_OK) {
        rn_instance_free(in);
        return rv;
    }
    *out = in;
    return CN_OK;
}

cn_err
rn_instance_hydrate(const struct ir_dag *dag, const void *snap, size_t len,
                    const struct rn_done *results, size_t nresults, const struct rn_exec_cfg *cfg,
                    int64_t now_ms, struct rn_instance **out, struct rn_step_out *o,
                    struct cn_errmsg *err)
{
    return hydrate(dag, snap, len, results, nresults, cfg, now_ms, false, out, o, err);
}

cn_err
rn_instance_redrive(const struct ir_dag *dag, const void *snap, size_t len,
                    const struct rn_done *results, size_t nresults, const struct rn_exec_cfg *cfg,
                    int64_t now_ms, struct rn_instance **out, struct rn_step_out *o,
                    struct cn_errmsg *err)
{
    return hydrate(dag, snap, len, results, nresults, cfg, now_ms, true, out, o, err);
}

/* Whether o, made from evs[0..n), is a step that its results alone record (rn_steplog). */
static bool
by_results(const struct rn_step_out *o, const struct rn_event *evs, size_t n)
{
    size_t k;

    if (o->timed || o->outcome != RN_RUNNING || o->cancels.len > 0 || o->child_cancels.len > 0 ||
        n == 0 || o->done.len != n) {
        return false;
    }
    for (k = 0; k < o->actions.len; k++) {
        if (o->actions.items[k].call != IR_CALL_ACTION) {
            return false;
        }
    }
    for (k = 0; k < n; k++) {
        const struct rn_done *d = &o->done.items[k];
        if ((evs[k].kind != RN_EV_RESULT && evs[k].kind != RN_EV_ERROR) || evs[k].recorded ||
            !rn_xid_eq(d->exec_id, evs[k].exec_id) || d->attempt != evs[k].attempt ||
            d->ok != (evs[k].kind == RN_EV_RESULT)) {
            return false;
        }
    }
    return true;
}

bool
rn_steplog_take(struct rn_steplog *l, struct rn_step_out *o, const struct rn_event *evs, size_t n,
                uint32_t max)
{
    size_t k;

    if (l->inexact || l->unsnapped + n > max || l->seq > INT32_MAX - n || !by_results(o, evs, n)) {
        /* Whatever changed is recorded otherwise: by a snapshot, which clears this
         * (rn_steplog_snapshot), or by nothing that a replay could put in its place. */
        l->inexact = l->inexact || n > 0;
        return false;
    }
    for (k = 0; k < n; k++) {
        o->done.items[k].step = ++l->seq;
    }
    l->unsnapped += (uint32_t) n;
    return true;
}

void
rn_steplog_snapshot(struct rn_steplog *l)
{
    l->unsnapped = 0;
    l->inexact = false;
}

void
rn_steplog_resumed(struct rn_steplog *l, uint32_t state_step, const struct rn_done *results,
                   size_t n)
{
    size_t k;

    l->seq = state_step;
    l->unsnapped = 0;
    for (k = 0; k < n; k++) {
        if (results[k].step > state_step) {
            l->unsnapped++;
            l->seq = results[k].step > l->seq ? results[k].step : l->seq;
        }
    }
    l->inexact = true;
}

static int
cmp_step(const void *x, const void *y)
{
    const struct rn_done *a = *(const struct rn_done *const *) x;
    const struct rn_done *b = *(const struct rn_done *const *) y;

    return a->step < b->step ? -1 : a->step > b->step;
}

/* The state of r before its hydration (rn_instance_resume): its snapshot, or its first step,
 * with the steps recorded by their results replayed on it in order. Those no longer running at
 * their turn are appended to rest[*nrest]. */
static cn_err
replay(const struct ir_dag *dag, const struct rn_resume *r, const struct rn_done **steps,
       size_t nsteps, const struct rn_exec_cfg *cfg, int64_t now_ms, struct rn_done *rest,
       size_t *nrest, struct cn_buf *snap, struct cn_errmsg *err)
{
    struct rn_instance *in = NULL;
    struct rn_step_out scratch;
    size_t i;
    cn_err rv;

    memset(&scratch, 0, sizeof(scratch));
    scratch.result = ir_null();
    /* What either call asks for (dispatches, timers) is what the hydration at the end asks
     * for again: dropped here. */
    rv = r->snap != NULL
             ? hydrate(dag, r->snap, r->len, NULL, 0, cfg, now_ms, false, &in, &scratch, err)
             : rn_instance_start(dag, r->instance_id, r->input, cfg, now_ms, &in, &scratch);
    for (i = 0; rv == CN_OK && i < nsteps; i++) {
        struct rn_event ev;

        rn_step_out_clear(&scratch);
        memset(&ev, 0, sizeof(ev));
        ev.kind = steps[i]->ok ? RN_EV_RESULT : RN_EV_ERROR;
        ev.exec_id = steps[i]->exec_id;
        ev.attempt = steps[i]->attempt;
        ev.value = steps[i]->value;
        rv = rn_instance_step(in, &ev, 1, now_ms, &scratch);
        if (rv == CN_OK && scratch.done.len == 0) {
            rest[(*nrest)++] = *steps[i];
        }
    }
    rn_step_out_fini(&scratch);
    if (rv == CN_OK) {
        rv = rn_instance_snapshot(in, snap);
    }
    rn_instance_free(in);
    return rv;
}

cn_err
rn_instance_resume(const struct ir_dag *dag, const struct rn_resume *r,
                   const struct rn_exec_cfg *cfg, int64_t now_ms, struct rn_instance **out,
                   struct rn_step_out *o, struct cn_errmsg *err)
{
    const struct rn_done **steps;
    struct rn_done *rest;
    struct cn_buf snap = CN_BUF_INIT;
    size_t i, nsteps = 0, nrest = 0;
    cn_err rv;

    *out = NULL;
    steps = malloc((r->nresults ? r->nresults : 1) * sizeof(*steps));
    rest = malloc((r->nresults ? r->nresults : 1) * sizeof(*rest));
    if (steps == NULL || rest == NULL) {
        free(steps);
        free(rest);
        return CN_NOMEM;
    }
    for (i = 0; i < r->nresults; i++) {
        if (r->results[i].step > r->state_step) {
            steps[nsteps++] = &r->results[i];
        } else if (r->results[i].step == 0) {
            rest[nrest++] = r->results[i];
        } /* else held by the snapshot already */
    }
    if (nsteps == 0 && r->snap != NULL) {
        rv = hydrate(dag, r->snap, r->len, rest, nrest, cfg, now_ms, r->redrive, out, o, err);
    } else {
        qsort(steps, nsteps, sizeof(*steps), cmp_step);
        rv = replay(dag, r, steps, nsteps, cfg, now_ms, rest, &nrest, &snap, err);
        if (rv == CN_OK) {
            rv = hydrate(dag, snap.data, snap.len, rest, nrest, cfg, now_ms, r->redrive, out, o,
                         err);
        }
    }
    cn_buf_fini(&snap);
    free(steps);
    free(rest);
    return rv;
}

void
rn_instance_free(struct rn_instance *in)
{
    size_t i;

    if (in == NULL) {
        return;
    }
    for (i = 0; i < in->x.len; i++) {
        struct rn_xnode *x = &in->x.items[i];
        uint32_t k;
        if (x->status == RN_X_FREE) {
            continue;
        }
        for (k = 0; k < x->nslots && x->slots != NULL; k++) {
            ir_val_release(x->slots[k].value);
        }
        free(x->slots);
        ir_val_release(x->item);
        ir_val_release(x->last_error);
    }
    for (i = 0; i < in->s.len; i++) {
        if (in->s.items[i].live) {
            ir_val_release(in->s.items[i].vars);
        }
    }
    for (i = in->q.head; i < in->q.len; i++) {
        ir_val_release(in->q.items[i].val);
    }
    free(in->x.items);
    free(in->s.items);
    free(in->q.items);
    rn_xidmap_fini(&in->ids);
    ir_val_release(in->result);
    free(in);
}

/* ---- outcome and status names ---- */

#define RN_OUTCOME_NAME(e, name) [e] = name,
static const char *const outcome_names[] = {RN_OUTCOMES(RN_OUTCOME_NAME)};
#undef RN_OUTCOME_NAME

const char *
rn_outcome_name(enum rn_outcome o)
{
    return (size_t) o < RN_OUTCOME_COUNT_ ? outcome_names[o] : "";
}

bool
rn_outcome_parse(const char *name, enum rn_outcome *o)
{
    size_t i;

    for (i = 0; i < RN_OUTCOME_COUNT_; i++) {
        if (strcmp(name, outcome_names[i]) == 0) {
            *o = (enum rn_outcome) i;
            return true;
        }
    }
    return false;
}

bool
rn_status_valid(const char *name)
{
    enum rn_outcome o;

    return strcmp(name, RN_STATUS_QUEUED) == 0 || rn_outcome_parse(name, &o);
}

enum rn_outcome
rn_instance_outcome(const struct rn_instance *in)
{
    return in->outcome;
}

void
rn_instance_stats(const struct rn_instance *in, struct rn_instance_stats *st)
{
    *st = in->stats;
    st->live_nodes = in->live_x;
    st->node_slots = in->x.len;
    st->live_scopes = in->live_s;
}
