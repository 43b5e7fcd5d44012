/* SPDX-License-Identifier: MIT */
/*
 * The executor: runs inline nodes, dispatches actions, applies results, retries, sleeps,
 * aggregates fan-outs and propagates errors along exception edges. Single-threaded per
 * instance. See exec.h for the model and exec_int.h for the node state machine; what each node
 * kind does is in nodes.c, the graph's storage in graph.c, resuming in resume.c.
 *
 * DESIGN
 * A "work item" is an execution node that has arrived at a template node (optionally carrying
 * a value: a return value, a branch result, or the error an EXCEPT node must dispatch). The
 * step loop pops items and runs them; inline nodes move the item along an edge and push it
 * again, blocking nodes (actions, sleeps, aggregates) park it. Edges into the AGGREGATE of
 * the node's own fork deliver to that aggregate instead. Scopes are reference counted: each
 * live execution node holds its scope, each scope its caller's.
 */

#include <stdio.h>
#include <stdlib.h>

#include "ir/base/uuid.h"
#include "ir/base/vec.h"
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

void
rn_ex_new_uuid(struct rn_instance *in, struct rn_xid *id)
{
    uint64_t a = rng_next(&in->rng), b = rng_next(&in->rng);

    memcpy(id->b, &a, 8);
    memcpy(id->b + 8, &b, 8);
    id->b[6] = (uint8_t) ((id->b[6] & 0x0f) | 0x40); /* version 4 */
    id->b[8] = (uint8_t) ((id->b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
}

void
rn_ex_oom(struct rn_instance *in)
{
    in->rv = CN_NOMEM;
}

/* ---- the work queue ----------------------------------------------------------------------- */

void
rn_ex_push(struct rn_instance *in, uint32_t x, bool has_val, struct ir_val val, bool agg_done)
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
        rn_ex_oom(in);
    }
}

/* ---- outputs ------------------------------------------------------------------------------ */

void
rn_ex_out_timer(struct rn_instance *in, uint32_t xi, enum rn_timer_kind kind, int64_t at)
{
    struct rn_timer t;

    t.exec_id = in->x.items[xi].id;
    t.kind = kind;
    t.at_ms = at;
    in->out->timed = true;
    if (CN_VEC_PUSH(&in->out->timers, t) != CN_OK) {
        rn_ex_oom(in);
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
        rn_ex_oom(in);
    }
}

/* The running attempt of x is to stop: an action's goes to its worker, a child call's child
 * is cancelled, a wait is withdrawn. False without memory. */
static bool
out_cancel(struct rn_instance *in, const struct rn_xnode *x)
{
    uint8_t call = tnode(in, x->node)->call;
    struct rn_done w;
    cn_err rv;

    if (ir_call_is_send(call) || call == IR_CALL_JOIN) {
        /* A send goes with the write that records it, or not at all; a wait for a started
         * child stops waiting, and the child goes on, as `start` asked. Nothing to stop. */
        return true;
    }
    if (ir_call_is_wait(call)) {
        memset(&w, 0, sizeof(w));
        w.exec_id = x->id;
        w.attempt = x->attempt;
        w.value = ir_null();
        rv = CN_VEC_PUSH(&in->out->wait_drops, w);
    } else {
        rv = call != IR_CALL_ACTION ? CN_VEC_PUSH(&in->out->child_cancels, x->id)
                                    : CN_VEC_PUSH(&in->out->cancels, x->id);
    }
    if (rv != CN_OK) {
        rn_ex_oom(in);
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
    for (i = 0; i < o->published.len; i++) {
        ir_val_release(o->published.items[i].value);
    }
    ir_val_release(o->result);
    o->result = ir_null();
    o->actions.len = o->timers.len = o->done.len = o->cancels.len = o->child_cancels.len = 0;
    o->wait_drops.len = o->published.len = 0;
    o->snapshot_needed = false;
    o->timed = false;
    o->cleanup_until_ms = 0;
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
    free(o->wait_drops.items);
    free(o->published.items);
    memset(o, 0, sizeof(*o));
}

/* ---- evaluation --------------------------------------------------------------------------- */

struct env_ctx {
    struct rn_instance *in; /* not const: uuid() draws from its generator */
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

/* now(), uuid(), instance_id() and workflow_name() of the instance running them. now() is the
 * step's time (now_ms): a step that reads it is timed and writes a snapshot, so the value it
 * computed is what a replay finds, never recomputed at another time. uuid() draws from the
 * instance's generator, which the snapshot carries: a replay draws the same ones. */
static cn_err
env_host(void *ctx, enum ir_builtin b, struct ir_val *out)
{
    const struct env_ctx *e = ctx;
    char text[CN_UUID_TEXT_LEN + 1];

    if (b == IR_B_NOW) {
        e->in->out->timed = true;
        e->in->out->snapshot_needed = true;
        *out = ir_float((double) e->in->now / 1000.0);
        return CN_OK;
    }
    if (b == IR_B_WORKFLOW_NAME) {
        const char *w = e->in->dag->workflow;
        if (w == NULL) {
            return ir_raise(out, "RuntimeError",
                            "workflow_name(): no registered workflow runs here");
        }
        return ir_str_new(w, strlen(w), out);
    }
    if (b == IR_B_UUID) {
        struct rn_xid id;
        rn_ex_new_uuid(e->in, &id);
        cn_uuid_format(id.b, text);
    } else {
        cn_uuid_format(e->in->id.b, text);
    }
    return ir_str_new(text, strlen(text), out);
}

/* Evaluates expression `e` for node xi: CN_OK (out = value), CN_RAISED (out = error), or
 * CN_NOMEM (recorded in in->rv). */
cn_err
rn_ex_eval(struct rn_instance *in, uint32_t xi, uint32_t e, struct ir_val *out)
{
    struct env_ctx ctx = {in, &in->x.items[xi]};
    struct ir_eval_env env = {env_lookup, &ctx, env_host};
    cn_err rv = ir_eval(&in->dag->exprs, e, &env, out);

    if (rv != CN_OK && rv != CN_RAISED) {
        rn_ex_oom(in);
    }
    return rv;
}

/* Every value the instance keeps must fit in a snapshot (IR_VALUE_MAX_DEPTH levels); a
 * deeper one (built by e.g. `x = [x]` in a loop) is refused where it would be stored, as a
 * catchable ValueError. Returns CN_OK, or CN_RAISED with *err set, or CN_NOMEM. */
cn_err
rn_ex_check_storable(struct rn_instance *in, struct ir_val v, struct ir_val *err)
{
    cn_err rv;

    if (!ir_val_deeper_than(v, IR_VALUE_MAX_DEPTH)) {
        return CN_OK;
    }
    rv = ir_raise(err, "ValueError", "value nested more than %d levels deep cannot be stored",
                  IR_VALUE_MAX_DEPTH);
    if (rv != CN_RAISED) {
        rn_ex_oom(in);
    }
    return rv;
}

/* Binds t's targets to v in xi's scope (unpacking v into several, or into one as in `a, = v`).
 * Consumes v. CN_RAISED: *err set. */
cn_err
rn_ex_bind(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val v,
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
    if ((rv = rn_ex_check_storable(in, v, err)) != CN_OK) {
        ir_val_release(v);
        return rv;
    }
    if (n == 1 && !t->unpack) {
        if (ir_map_set_cstr(&s->vars, names[0], v) != CN_OK) {
            rn_ex_oom(in);
            return CN_NOMEM;
        }
        return CN_OK;
    }
    if (n > 16 && (many = calloc(n, sizeof(*many))) == NULL) {
        ir_val_release(v);
        rn_ex_oom(in);
        return CN_NOMEM;
    }
    rv = ir_unpack(v, n, many, err);
    ir_val_release(v);
    if (rv == CN_OK) {
        for (k = 0; k < n; k++) {
            if (ir_map_set_cstr(&s->vars, names[k], many[k]) != CN_OK && rv == CN_OK) {
                rn_ex_oom(in);
                rv = CN_NOMEM;
            }
        }
    } else if (rv != CN_RAISED) {
        rn_ex_oom(in);
    }
    if (many != items) {
        free(many);
    }
    return rv;
}

/* ---- control flow ------------------------------------------------------------------------- */

/* Moves node xi's scope up to the scope of `frame` (leaving inlined helpers). */
void
rn_ex_scope_to_frame(struct rn_instance *in, uint32_t xi, uint32_t frame)
{
    struct rn_xnode *x = &in->x.items[xi];

    while (x->scope != RN_NONE && in->s.items[x->scope].frame != frame) {
        uint32_t parent = in->s.items[x->scope].parent;
        if (parent == RN_NONE) {
            break; /* frame 0 is the root of every scope chain */
        }
        rn_ex_scope_hold(in, parent);
        rn_ex_scope_rele(in, x->scope);
        x->scope = parent;
    }
}

void
rn_ex_finish(struct rn_instance *in, enum rn_outcome outcome, struct ir_val v)
{
    size_t i;

    if (rn_ex_cleaning(in)) {
        v = rn_ex_cleanup_result(in, outcome, v); /* the interruption decides how it ends */
        outcome = (enum rn_outcome) in->cleanup.outcome;
    }
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
        rn_ex_x_free(in, (uint32_t) i);
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

/* Execution node i stops where it is: a request or timer this step made for it never goes out
 * (a cancel would reach the pool before the request and miss it), its running attempt is
 * stopped (out_cancel), and work queued for it later in this step is dropped. The node itself
 * stays; the caller frees or moves it. False without memory (the instance failed). */
bool
rn_ex_x_stop(struct rn_instance *in, uint32_t i)
{
    struct rn_step_out *o = in->out;
    struct rn_xnode *x = &in->x.items[i];
    size_t k, kept;

    if (x->has_id) {
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
        return false;
    }
    for (k = in->q.head; k < in->q.len; k++) {
        if (in->q.items[k].x == i) { /* queued to run later in this step */
            ir_val_release(in->q.items[k].val);
            in->q.items[k].val = ir_null();
            in->q.items[k].x = RN_NONE;
        }
    }
    return true;
}

/* `[fail_fast]`: a branch of aggregate ai failed with err (consumed). Every other branch still
 * live is dropped now (running attempts cancelled on their workers, sleeps and backoffs
 * forgotten, nested fan-outs with them), and err is raised from the aggregate at once. */
static void
fail_fast(struct rn_instance *in, uint32_t ai, struct ir_val err)
{
    struct rn_xnode *a;
    uint8_t *victim;
    size_t i, k;

    /* Which nodes go, decided before any is freed: freeing zeroes a node, and the walk up a
     * nested branch's fork_agg chain must not pass through one already gone. */
    if ((victim = calloc(in->x.len ? in->x.len : 1, 1)) == NULL) {
        ir_val_release(err);
        rn_ex_oom(in);
        return;
    }
    for (i = 0; i < in->x.len; i++) {
        victim[i] = in->x.items[i].status != RN_X_FREE && under_aggregate(in, (uint32_t) i, ai);
    }
    for (i = 0; i < in->x.len; i++) {
        if (!victim[i]) {
            continue;
        }
        if (!rn_ex_x_stop(in, (uint32_t) i)) {
            free(victim);
            ir_val_release(err);
            return;
        }
        rn_ex_x_free(in, (uint32_t) i);
    }
    free(victim);
    a = &in->x.items[ai];
    for (k = 0; k < a->nslots; k++) {
        ir_val_release(a->slots[k].value);
    }
    free(a->slots);
    a->slots = NULL;
    a->nslots = a->pending = 0;
    rn_x_move(a, RN_X_ACTIVE);
    in->out->snapshot_needed = true;
    rn_ex_raise_error(in, ai, err);
}

/* Delivers a branch's value (or error) to aggregate `ai`, slot `idx`. Consumes v. */
void
rn_ex_deliver(struct rn_instance *in, uint32_t ai, uint32_t idx, bool ok, struct ir_val v)
{
    struct rn_xnode *a = &in->x.items[ai];
    struct rn_slot *s;

    if (a->status != RN_X_WAITING || idx >= a->nslots || a->slots[idx].filled) {
        ir_val_release(v); /* cannot happen: each branch reports once */
        return;
    }
    if (!ok && tnode(in, a->node)->fail_fast && !rn_ex_cleaning(in)) {
        /* Cleaning up, every branch runs its own finally blocks to their end. */
        fail_fast(in, ai, v);
        return;
    }
    s = &a->slots[idx];
    s->filled = true;
    s->ok = ok;
    s->value = v;
    if (--a->pending == 0) {
        rn_x_move(a, RN_X_ACTIVE);
        rn_ex_push(in, ai, false, ir_null(), true);
    }
}

/* An execution node leaving an action keeps nothing of its attempts. */
void
rn_ex_forget_attempts(struct rn_xnode *x)
{
    x->first_at = 0;
    ir_val_release(x->last_error);
    x->last_error = ir_null();
}

/* Moves xi along `edge` carrying (has_val, val). Consumes val. */
void
rn_ex_follow(struct rn_instance *in, uint32_t xi, const struct ir_edge *edge, bool has_val,
             struct ir_val val)
{
    struct rn_xnode *x = &in->x.items[xi];
    const struct ir_node *to = tnode(in, edge->to);

    if (to->kind == IR_N_AGGREGATE && x->fork_agg != RN_NONE &&
        in->x.items[x->fork_agg].node == edge->to) {
        /* The end of a branch: its value is the last action result or helper return. */
        uint32_t ai = x->fork_agg, idx = x->fork_idx;
        rn_ex_x_free(in, xi);
        rn_ex_deliver(in, ai, idx, true, has_val ? val : ir_null());
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
    rn_ex_forget_attempts(x);
    x->node = edge->to;
    rn_x_move(x, RN_X_ACTIVE);
    if (to->kind != IR_N_CALL_EXIT) {
        rn_ex_scope_to_frame(in, xi, to->frame);
    }
    rn_ex_push(in, xi, has_val, val, false);
}

void
rn_ex_follow_first(struct rn_instance *in, uint32_t xi, bool has_val, struct ir_val val)
{
    const struct ir_node *t = tnode(in, in->x.items[xi].node);

    if (t->nedges == 0) {
        ir_val_release(val);
        rn_ex_oom(in); /* a template without a successor here is corrupt; fail loudly */
        return;
    }
    rn_ex_follow(in, xi, tedge(in, t, 0), has_val, val);
}

bool
rn_ex_value(struct rn_instance *in, uint32_t xi, uint32_t e, struct ir_val *out)
{
    cn_err rv = rn_ex_eval(in, xi, e, out);

    if (rv == CN_RAISED) {
        rn_ex_raise_error(in, xi, *out);
    }
    return rv == CN_OK;
}

void
rn_ex_bind_follow(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val val)
{
    struct ir_val err;
    cn_err rv = rn_ex_bind(in, xi, t, ir_val_retain(val), &err);

    if (rv != CN_OK) {
        ir_val_release(val);
        if (rv == CN_RAISED) {
            rn_ex_raise_error(in, xi, err);
        }
        return;
    }
    rn_ex_follow_first(in, xi, true, val);
}

/* Where an error raised at xi goes: the innermost handler, the fork's aggregate, or out. */
void
rn_ex_raise_error(struct rn_instance *in, uint32_t xi, struct ir_val err)
{
    struct rn_xnode *x = &in->x.items[xi];
    uint32_t target = tnode(in, x->node)->exc;

    if (target == IR_NO_NODE) {
        rn_ex_finish(in, RN_FAILED, err);
        return;
    }
    if (tnode(in, target)->kind == IR_N_AGGREGATE && x->fork_agg != RN_NONE &&
        in->x.items[x->fork_agg].node == target) {
        uint32_t ai = x->fork_agg, idx = x->fork_idx;
        rn_ex_x_free(in, xi);
        rn_ex_deliver(in, ai, idx, false, err);
        return;
    }
    if (x->has_id) {
        rn_xidmap_del(&in->ids, x->id);
        x->has_id = false;
    }
    rn_ex_forget_attempts(x);
    x->node = target;
    rn_x_move(x, RN_X_ACTIVE);
    rn_ex_scope_to_frame(in, xi, tnode(in, target)->frame);
    rn_ex_push(in, xi, true, err, false);
}

void
rn_ex_raise_new(struct rn_instance *in, uint32_t xi, const char *type, const char *msg)
{
    struct ir_val err;

    if (ir_raise(&err, type, "%s", msg) != CN_RAISED) {
        rn_ex_oom(in);
        return;
    }
    rn_ex_raise_error(in, xi, err);
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

/* The key of a `wait event` (in *kw, consumed on failure) as the text publishers name it: a
 * string as it is, an int in decimal (an order id may be either). Anything else raises a
 * TypeError at the wait; false then. */
static bool
event_key(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val *kw)
{
    const struct ir_val *k = ir_map_get(*kw, "key", 3);
    struct ir_val err, text;
    const char *what;
    char num[24];

    if (k != NULL && k->type == IR_T_STR) {
        return true;
    }
    if (k != NULL && k->type == IR_T_INT) {
        (void) snprintf(num, sizeof(num), "%lld", (long long) k->u.i);
        if (ir_str_from_cstr(num, &text) != CN_OK || ir_map_set_cstr(kw, "key", text) != CN_OK) {
            ir_val_release(*kw);
            rn_ex_oom(in);
            return false;
        }
        return true;
    }
    what = k != NULL ? ir_type_name(k->type) : "nothing"; /* a static name: kw may go */
    ir_val_release(*kw);
    if (ir_raise(&err, "TypeError", "the key of wait event %s must be a str or an int, not %s",
                 t->name, what) != CN_RAISED) {
        rn_ex_oom(in);
        return false;
    }
    rn_ex_raise_error(in, xi, err);
    return false;
}

/* The arguments of a `signal` (in *kw, consumed on failure): `to` an instance id (a UUID
 * string, what `start` gives), else a TypeError or ValueError at the signal; the payload None
 * when not given, else what JSON holds (rn_ex_json_ok). False when it raised. */
static bool
signal_args(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val *kw)
{
    const struct ir_val *to = ir_map_get(*kw, "to", 2);
    const struct ir_val *payload = ir_map_get(*kw, "payload", 7);
    char what[IR_MAX_WAIT_NAME + 16], msg[IR_MAX_WAIT_NAME + 160];
    uint8_t id[16];

    (void) snprintf(what, sizeof(what), "signal %s", t->name);
    if (to == NULL || to->type != IR_T_STR) {
        (void) snprintf(msg, sizeof(msg),
                        "signal %s: to= must be an instance id (a str, as start gives), not %s",
                        t->name, to != NULL ? ir_type_name(to->type) : "nothing");
        ir_val_release(*kw);
        rn_ex_raise_new(in, xi, "TypeError", msg);
        return false;
    }
    if (!cn_uuid_parse(ir_str_data(*to), id)) {
        (void) snprintf(msg, sizeof(msg), "signal %s: to= is not an instance id: '%.40s'", t->name,
                        ir_str_data(*to));
        ir_val_release(*kw);
        rn_ex_raise_new(in, xi, "ValueError", msg);
        return false;
    }
    if (payload != NULL && !rn_ex_json_ok(in, xi, *payload, what)) {
        ir_val_release(*kw);
        return false;
    }
    return true;
}

/* The argument of a `wait for` (in *kw, consumed on failure): a child's id, a UUID string (what
 * `start` gives), else a TypeError or ValueError at the wait. False when it raised. */
static bool
join_arg(struct rn_instance *in, uint32_t xi, struct ir_val *kw)
{
    const struct ir_val *c = ir_map_get(*kw, "child", 5);
    char msg[160];
    uint8_t id[16];

    if (c == NULL || c->type != IR_T_STR) {
        (void) snprintf(
            msg, sizeof(msg), "wait for takes a child's id (a str, as start gives), not %s%s",
            c != NULL ? ir_type_name(c->type) : "nothing",
            c != NULL && c->type == IR_T_LIST ? ": for several, `spread ids:id -> wait for id`"
                                              : "");
        ir_val_release(*kw);
        rn_ex_raise_new(in, xi, "TypeError", msg);
        return false;
    }
    if (!cn_uuid_parse(ir_str_data(*c), id)) {
        (void) snprintf(msg, sizeof(msg), "wait for: not a child's id: '%.40s'", ir_str_data(*c));
        ir_val_release(*kw);
        rn_ex_raise_new(in, xi, "ValueError", msg);
        return false;
    }
    return true;
}

/* Evaluates the kwargs and requests attempt x->attempt. The timeout (start to close) goes with
 * the request: the pool counts it from when a worker starts the attempt, so waiting for a slot
 * is not counted (pool.h). With [deadline: D] (schedule to close) a new attempt also gets the
 * deadline now + D, kept here (durable, with its timer); a re-sent one (after hydration) keeps
 * the deadline it already had, so restarts cannot postpone it. */
void
rn_ex_dispatch(struct rn_instance *in, uint32_t xi, bool resend)
{
    const struct ir_node *t = tnode(in, in->x.items[xi].node);
    struct rn_action_req r;
    struct ir_val kw, v;
    uint32_t k;
    cn_err rv;

    if (ir_map_new(t->nargs, &kw) != CN_OK) {
        rn_ex_oom(in);
        return;
    }
    for (k = 0; k < t->nargs; k++) {
        rv = rn_ex_eval(in, xi, t->argexprs[k], &v);
        if (rv == CN_OK) {
            struct ir_val err;
            if ((rv = rn_ex_check_storable(in, v, &err)) == CN_RAISED) {
                ir_val_release(v);
                v = err;
            }
        }
        if (rv == CN_RAISED) {
            ir_val_release(kw);
            rn_ex_raise_error(in, xi, v);
            return;
        }
        if (rv != CN_OK || ir_map_set_cstr(&kw, t->argnames[k], v) != CN_OK) {
            ir_val_release(kw);
            rn_ex_oom(in);
            return;
        }
    }
    if (t->call == IR_CALL_EVENT && !event_key(in, xi, t, &kw)) {
        return;
    }
    if (t->call == IR_CALL_SIGNAL && !signal_args(in, xi, t, &kw)) {
        return;
    }
    if (t->call == IR_CALL_JOIN && !join_arg(in, xi, &kw)) {
        return;
    }
    if (rn_ex_x_ensure_id(in, xi) != CN_OK) {
        ir_val_release(kw);
        rn_ex_oom(in);
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
        /* A wait's [timeout: D] is kept as its deadline: durable, with its timer, never
         * postponed by a restart; at it the wait is asked again, to expire (see the timer). */
        int64_t until = ir_call_is_wait(t->call) ? t->timeout_ms : t->deadline_ms;
        rn_x_move(x, RN_X_RUNNING);
        if (!resend || x->deadline == 0) {
            x->deadline = until > 0 ? in->now + until : 0;
            in->out->timed = in->out->timed || until > 0;
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
        r.expire = ir_call_is_wait(t->call) && x->deadline != 0 && in->now >= x->deadline;
        r.prev_error = ir_val_retain(x->last_error);
    }
    if (CN_VEC_PUSH(&in->out->actions, r) != CN_OK) {
        ir_val_release(kw);
        ir_val_release(r.prev_error);
        rn_ex_oom(in);
        return;
    }
    if (in->x.items[xi].deadline != 0 && !in->out->actions.items[in->out->actions.len - 1].expire) {
        rn_ex_out_timer(in, xi, RN_TIMER_DEADLINE, in->x.items[xi].deadline);
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
        rn_x_move(x, RN_X_ACTIVE);
        rn_ex_raise_error(in, xi, err);
        return;
    }
    /* Kept for the next attempt's request (its worker sees what went wrong before). */
    ir_val_release(x->last_error);
    x->last_error = err;
    x->attempt++;
    rn_x_move(x, RN_X_BACKOFF);
    x->scheduled_at = in->now + delay;
    rn_ex_out_timer(in, xi, RN_TIMER_BACKOFF, x->scheduled_at);
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

    rn_x_move(&in->x.items[xi], RN_X_ACTIVE);
    if ((rv = rn_ex_check_storable(in, result, &err)) != CN_OK) {
        if (rv == CN_RAISED) {
            rn_ex_raise_error(in, xi, err);
        }
        return;
    }
    rn_ex_bind_follow(in, xi, t, ir_val_retain(result));
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
        rn_ex_oom(in);
        return;
    }
    if (!out_cancel(in, x)) {
        ir_val_release(err);
        return;
    }
    out_done(in, x, false, err);
    attempt_failed(in, xi, err);
}

void
rn_ex_apply_event(struct rn_instance *in, const struct rn_event *ev)
{
    uint32_t xi;
    struct rn_xnode *x;
    struct ir_val err;

    if (ev->kind == RN_EV_CANCEL) {
        /* Recorded as the instance's error, as cairn.cancel records one it cancels itself. */
        const char *why = ev->value.type == IR_T_STR ? ir_str_data(ev->value) : "cancelled";
        if (rn_error_new(RN_ERR_CANCELLED, why, &err) != CN_OK) {
            rn_ex_oom(in);
            return;
        }
        rn_ex_interrupt(in, RN_CANCELLED, err, ev->force);
        return;
    }
    if (ev->kind == RN_EV_TIMEOUT) {
        const char *why = ev->value.type == IR_T_STR ? ir_str_data(ev->value)
                                                     : "the workflow passed its deadline";
        if (rn_error_new(RN_ERR_WORKFLOW_TIMEOUT, why, &err) != CN_OK) {
            rn_ex_oom(in);
            return;
        }
        rn_ex_interrupt(in, RN_TIMED_OUT, err, false);
        return;
    }
    if (ev->kind == RN_EV_TIMER && rn_ex_cleanup_timer(in, ev)) {
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
            rn_ex_oom(in);
            return;
        }
        if (!ev->recorded) {
            out_done(in, x, false, err);
        }
        attempt_failed(in, xi, err);
        return;
    case RN_EV_TIMER:
        if (x->status == RN_X_SLEEPING && in->now >= x->scheduled_at) {
            rn_x_move(x, RN_X_ACTIVE);
            in->out->snapshot_needed = true;
            rn_ex_follow_first(in, xi, false, ir_null());
        } else if (x->status == RN_X_BACKOFF && in->now >= x->scheduled_at) {
            rn_ex_dispatch(in, xi, false);
        } else if (x->status == RN_X_RUNNING && x->deadline != 0 && in->now >= x->deadline &&
                   ir_call_is_wait(tnode(in, x->node)->call)) {
            /* Whether the wait timed out or a signal came first is storage's to say, in the
             * write that asks it again (expire): the answer comes back as the attempt's recorded
             * result, like a signal's. */
            rn_ex_dispatch(in, xi, true);
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

    w->actions = w->children = w->waits = 0;
    w->next_ms = INT64_MAX;
    for (i = 0; i < in->x.len; i++) {
        const struct rn_xnode *x = &in->x.items[i];
        int64_t at = 0;

        switch (x->status) {
        case RN_X_RUNNING:
            if (ir_call_is_wait(tnode(in, x->node)->call)) {
                w->waits++;
            } else if (tnode(in, x->node)->call != IR_CALL_ACTION &&
                       !ir_call_is_send(tnode(in, x->node)->call)) {
                w->children++;
            } else {
                /* A send counts as an action: the write in flight answers it, never a child. */
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
    if (rn_ex_cleaning(in) && in->cleanup.until < w->next_ms) {
        w->next_ms = in->cleanup.until;
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
    if (in->cfg.cleanup_timeout_ms <= 0) {
        in->cfg.cleanup_timeout_ms = RN_EXEC_DEFAULT_CLEANUP_TIMEOUT_MS;
    }
    in->cleanup.err = ir_null();
    in->x_free = RN_NONE;
    in->s_free = RN_NONE;
    in->result = ir_null();
    return in;
}

void
rn_ex_begin_step(struct rn_instance *in, struct rn_step_out *o, int64_t now)
{
    in->out = o;
    in->now = now;
    in->step_nodes = 0;
    in->rv = CN_OK;
    o->outcome = in->outcome;
}

cn_err
rn_ex_end_step(struct rn_instance *in)
{
    struct rn_step_out *o = in->out;

    rn_ex_run_queue(in);
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
    rn_ex_begin_step(in, o, now_ms);
    in->input = &input;
    s = rn_ex_scope_new(in, 0, RN_NONE);
    x = s == RN_NONE ? RN_NONE : rn_ex_x_new(in, dag->entry, s, RN_NONE, 0);
    if (x != RN_NONE) {
        rn_ex_push(in, x, false, ir_null(), false);
        in->out->snapshot_needed = true;
    }
    rv = rn_ex_end_step(in);
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

    rn_ex_begin_step(in, o, now_ms);
    for (i = 0; i < n && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        rn_ex_apply_event(in, &evs[i]);
        /* Each event's consequences run before the next event is applied, so a batch behaves
         * exactly like the same events one step at a time. */
        rn_ex_run_queue(in);
    }
    return rn_ex_end_step(in);
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
    ir_val_release(in->cleanup.err);
    cn_buf_fini(&in->cleanup.before);
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
