/* SPDX-License-Identifier: MIT */
/*
 * Running inline nodes: what each node kind does when a work item reaches it (entry, fork,
 * aggregate, except, sleep, call enter and exit), the inline-work budget, and the step loop that
 * pops work items until none is left. Pure, as the rest of the executor (exec.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"
#include "ir/eval.h"
#include "ir/types.h"
#include "runner/exec/errors.h"
#include "runner/exec/exec_int.h"

/* ---- running inline nodes ----------------------------------------------------------------- */

/* A workflow with typed inputs (the ENTRY node carries their schema) takes only its inputs, each
 * of its type: what cairn.enqueue checked already, checked again for an input that came another
 * way (a child's arguments, an instance enqueued before its version was typed). False, with
 * the TypeError raised, when the input is refused. */
static bool
entry_input_typed(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val input)
{
    const struct ir_param *params = in->dag->entry_params;
    struct cn_buf why = CN_BUF_INIT, path = CN_BUF_INIT;
    bool ok = true;
    size_t i;
    uint32_t k;

    for (i = 0; i < ir_map_len(input) && ok; i++) {
        const char *key = ir_str_data(ir_map_key_at(input, i));
        for (k = 0; k < t->ntargets && strcmp(t->targets[k], key) != 0; k++) {
        }
        if (k == t->ntargets) {
            ok = false;
            if (cn_buf_printf(&why, "input.%s: %s() has no such input", key, in->dag->entry_func) !=
                CN_OK) {
                rn_ex_oom(in);
            }
        } else if (params != NULL) {
            cn_buf_clear(&path);
            if (cn_buf_printf(&path, "input.%s", key) != CN_OK ||
                ir_ty_check(params[k].type, ir_map_val_at(input, i), path.data, &ok, &why) !=
                    CN_OK) {
                rn_ex_oom(in);
                ok = true;
                break;
            }
        }
    }
    if (!ok) {
        rn_ex_raise_new(in, xi, "TypeError", why.data != NULL ? why.data : "bad input");
    }
    cn_buf_fini(&why);
    cn_buf_fini(&path);
    return ok && in->rv == CN_OK;
}

static void
run_entry(struct rn_instance *in, uint32_t xi)
{
    const struct ir_node *t = tnode(in, in->x.items[xi].node);
    const struct ir_val *input = in->input;
    struct rn_scope *s = &in->s.items[in->x.items[xi].scope];
    uint32_t k;

    if (input == NULL || input->type != IR_T_MAP) {
        rn_ex_raise_new(in, xi, "TypeError", "workflow input must be a JSON object");
        return;
    }
    if (t->name != NULL && !entry_input_typed(in, xi, t, *input)) {
        return;
    }
    for (k = 0; k < t->ntargets; k++) {
        const struct ir_val *v = ir_map_get(*input, t->targets[k], strlen(t->targets[k]));
        struct ir_val dflt;
        char msg[256];
        if (v == NULL && k < t->nargs && t->argexprs[k] != IR_NO_EXPR) {
            /* its default, a literal (it reads no name) */
            if (rn_ex_eval(in, xi, t->argexprs[k], &dflt) != CN_OK) {
                if (in->rv == CN_OK) {
                    rn_ex_raise_error(in, xi, dflt);
                }
                return;
            }
            if (ir_map_set_cstr(&s->vars, t->targets[k], dflt) != CN_OK) {
                rn_ex_oom(in);
                return;
            }
            continue;
        }
        if (v == NULL) {
            (void) snprintf(msg, sizeof(msg), "%s() missing input '%s'", in->dag->entry_func,
                            t->targets[k]);
            rn_ex_raise_new(in, xi, "TypeError", msg);
            return;
        }
        if (ir_map_set_cstr(&s->vars, t->targets[k], ir_val_retain(*v)) != CN_OK) {
            rn_ex_oom(in);
            return;
        }
    }
    rn_ex_follow_first(in, xi, false, ir_null());
}

static void
run_fork(struct rn_instance *in, uint32_t xi, const struct ir_node *t)
{
    struct ir_val coll = ir_null(), items = ir_null();
    struct rn_xnode *x = &in->x.items[xi];
    uint32_t n, k, ai;
    cn_err rv;

    if (t->kind == IR_N_SPREAD) {
        if (!rn_ex_value(in, xi, t->expr, &coll)) {
            return;
        }
        rv = ir_iter_items(coll, &items);
        ir_val_release(coll);
        if (rv == CN_RAISED) {
            rn_ex_raise_error(in, xi, items);
            return;
        }
        if (rv != CN_OK) {
            rn_ex_oom(in);
            return;
        }
        n = (uint32_t) ir_list_len(items);
    } else {
        n = t->nedges;
    }
    /* The forking node becomes the aggregate: it keeps the scope and the outer fork context. */
    ai = xi;
    x->node = t->link;
    rn_x_move(x, RN_X_WAITING);
    x->nslots = n;
    x->pending = n;
    x->slots = calloc(n ? n : 1, sizeof(*x->slots));
    if (x->slots == NULL) {
        ir_val_release(items);
        rn_ex_oom(in);
        return;
    }
    for (k = 0; k < n; k++) {
        x->slots[k].value = ir_null();
    }
    if (rn_ex_x_ensure_id(in, ai) != CN_OK) {
        ir_val_release(items);
        rn_ex_oom(in);
        return;
    }
    in->out->snapshot_needed = true;
    if (n == 0) {
        ir_val_release(items);
        rn_x_move(x, RN_X_ACTIVE);
        rn_ex_push(in, ai, false, ir_null(), true);
        return;
    }
    for (k = 0; k < n && in->rv == CN_OK; k++) {
        const struct ir_edge *e = tedge(in, t, t->kind == IR_N_SPREAD ? 0 : k);
        uint32_t bi = rn_ex_x_new(in, e->to, in->x.items[ai].scope, ai, k);
        if (bi == RN_NONE) {
            break;
        }
        if (t->kind == IR_N_SPREAD) {
            in->x.items[bi].item_name = t->name;
            in->x.items[bi].item = ir_val_retain(ir_list_items(items)[k]);
        }
        rn_ex_push(in, bi, false, ir_null(), false);
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
            rn_ex_raise_error(in, ai, err);
            return;
        }
    }
    if (ir_list_new(a->nslots, &list) != CN_OK) {
        rn_ex_oom(in);
        return;
    }
    for (k = 0; k < a->nslots; k++) {
        ir_list_items(list)[k] = a->slots[k].value;
        a->slots[k].value = ir_null();
    }
    free(a->slots);
    a->slots = NULL;
    a->nslots = a->pending = 0;
    rn_ex_bind_follow(in, ai, t, list);
}

static void
run_except(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val err)
{
    uint32_t k, j;

    if (rn_ex_cleaning(in) && !ir_node_is_finally(t) && ir_val_equal(err, in->cleanup.err)) {
        /* The cancel (or timeout) itself: only finally blocks see it. An error the cleanup
         * raises is an ordinary one. */
        rn_ex_raise_error(in, xi, err);
        return;
    }
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
                rn_ex_oom(in);
                return;
            }
        }
        ir_val_release(err);
        rn_ex_follow(in, xi, tedge(in, t, k), false, ir_null());
        return;
    }
    rn_ex_raise_error(in, xi, err); /* no handler matched: on to the enclosing one */
}

bool
rn_ex_json_ok(struct rn_instance *in, uint32_t xi, struct ir_val v, const char *what)
{
    struct cn_buf js = CN_BUF_INIT;
    struct cn_errmsg em = {0};
    char msg[IR_MAX_WAIT_NAME + 192];
    cn_err rv = ir_val_to_json(v, &js, &em);

    if (rv == CN_OK && (cn_buf_puts(&js, "") != CN_OK)) {
        rv = CN_NOMEM;
    }
    if (rv == CN_OK && strstr(js.data, "\\u0000") != NULL) {
        rv = cn_errmsg_set(&em, CN_RANGE, "the character U+0000");
    }
    if (rv != CN_OK && rv != CN_NOMEM) {
        (void) snprintf(msg, sizeof(msg), "%s: the value cannot be stored as JSON (%s)", what,
                        em.text);
    } else if (rv == CN_OK && js.len > RN_PUBLISH_MAX_BYTES) {
        (void) snprintf(msg, sizeof(msg),
                        "%s: the value is %zu bytes of JSON, over the limit of %d", what, js.len,
                        RN_PUBLISH_MAX_BYTES);
        rv = CN_RANGE;
    }
    cn_buf_fini(&js);
    if (rv == CN_NOMEM) {
        rn_ex_oom(in);
    } else if (rv != CN_OK) {
        rn_ex_raise_new(in, xi, "ValueError", msg);
    }
    return rv == CN_OK;
}

/* A published value is JSON in cairn.published, read by any client: refused at the `publish`
 * when JSON cannot hold it (rn_ex_json_ok). */
static void
run_publish(struct rn_instance *in, uint32_t xi, const struct ir_node *t)
{
    struct rn_publish p = {.name = t->name};
    char what[IR_MAX_WAIT_NAME + 16];

    if (!rn_ex_value(in, xi, t->expr, &p.value)) {
        return;
    }
    (void) snprintf(what, sizeof(what), "publish %s", t->name);
    if (!rn_ex_json_ok(in, xi, p.value, what)) {
        ir_val_release(p.value);
        return;
    }
    if (CN_VEC_PUSH(&in->out->published, p) != CN_OK) {
        ir_val_release(p.value);
        rn_ex_oom(in);
        return;
    }
    in->out->snapshot_needed = true;
    rn_ex_follow_first(in, xi, false, ir_null());
}

/* `raise`: a new error of the node's type (message, details and bases compiled in), or the
 * error value of its expression (`raise e`, a bare `raise`); anything else raised is a
 * TypeError, as in Python. Goes where any error raised here goes. */
static void
run_raise(struct rn_instance *in, uint32_t xi, const struct ir_node *t)
{
    struct ir_val v[3], err;
    uint32_t k;
    cn_err rv;

    if (t->name == NULL) {
        if (!rn_ex_value(in, xi, t->expr, &v[0])) {
            return;
        }
        if (!ir_is_error(v[0])) {
            ir_val_release(v[0]);
            rn_ex_raise_new(in, xi, "TypeError", "exceptions must derive from BaseException");
            return;
        }
        rn_ex_raise_error(in, xi, v[0]);
        return;
    }
    for (k = 0; k < 3; k++) { /* message, details, bases (dag.h) */
        if (!rn_ex_value(in, xi, t->argexprs[k], &v[k])) {
            while (k-- > 0) {
                ir_val_release(v[k]);
            }
            return;
        }
    }
    rv = ir_error_new(t->name, v[0].type == IR_T_STR ? ir_str_data(v[0]) : "", v[2], v[1], &err);
    ir_val_release(v[0]);
    if (rv == CN_OK && (rv = rn_ex_check_storable(in, err, &v[0])) == CN_RAISED) {
        ir_val_release(err);
        err = v[0]; /* details that cannot be stored: that error instead */
        rv = CN_OK;
    }
    if (rv != CN_OK) {
        rn_ex_oom(in);
        return;
    }
    rn_ex_raise_error(in, xi, err);
}

static void
run_sleep(struct rn_instance *in, uint32_t xi, const struct ir_node *t)
{
    struct ir_val v;
    double secs;

    if (!rn_ex_value(in, xi, t->expr, &v)) {
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
        rn_ex_raise_new(in, xi, "TypeError", msg);
        return;
    }
    ir_val_release(v);
    if (isnan(secs) || secs < 0) {
        rn_ex_raise_new(in, xi, "ValueError", "sleep length must be non-negative");
        return;
    }
    if (secs > 9.0e15 / 1000.0) {
        rn_ex_raise_new(in, xi, "OverflowError", "sleep length is too large");
        return;
    }
    if (secs * 1000.0 < 1.0) {
        rn_ex_follow_first(in, xi, false, ir_null());
        return;
    }
    if (rn_ex_x_ensure_id(in, xi) != CN_OK) {
        rn_ex_oom(in);
        return;
    }
    rn_x_move(&in->x.items[xi], RN_X_SLEEPING);
    in->x.items[xi].scheduled_at = in->now + (int64_t) ceil(secs * 1000.0);
    rn_ex_out_timer(in, xi, RN_TIMER_SLEEP, in->x.items[xi].scheduled_at);
    in->out->snapshot_needed = true;
}

static void
run_call_enter(struct rn_instance *in, uint32_t xi, const struct ir_node *t)
{
    uint32_t caller = in->x.items[xi].scope, s, k;
    struct ir_val v;
    cn_err rv;

    s = rn_ex_scope_new(in, t->callee_frame, caller);
    if (s == RN_NONE) {
        return;
    }
    for (k = 0; k < t->nargs; k++) {
        rv = rn_ex_eval(in, xi, t->argexprs[k], &v);
        if (rv == CN_RAISED) {
            in->s.items[s].refs++;
            rn_ex_scope_rele(in, s);
            rn_ex_raise_error(in, xi, v);
            return;
        }
        if (rv != CN_OK || ir_map_set_cstr(&in->s.items[s].vars, t->argnames[k], v) != CN_OK) {
            in->s.items[s].refs++;
            rn_ex_scope_rele(in, s);
            rn_ex_oom(in);
            return;
        }
    }
    /* The node moves into the helper's scope. */
    in->x.items[xi].scope = s;
    rn_ex_scope_hold(in, s);
    rn_ex_scope_rele(in, caller);
    rn_ex_follow_first(in, xi, false, ir_null());
}

static void
run_call_exit(struct rn_instance *in, uint32_t xi, const struct ir_node *t, bool has_val,
              struct ir_val val)
{
    rn_ex_scope_to_frame(in, xi, t->frame);
    if (!has_val) {
        val = ir_null(); /* fell off the end of the helper */
    }
    rn_ex_bind_follow(in, xi, t, val);
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
        rn_ex_oom(in);
        return;
    }
    rn_ex_finish(in, RN_FAILED, err);
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
        if (!rn_ex_value(in, xi, t->expr, &v)) {
            return;
        }
        rv = rn_ex_bind(in, xi, t, v, &err);
        if (rv == CN_RAISED) {
            rn_ex_raise_error(in, xi, err);
        } else if (rv == CN_OK) {
            rn_ex_follow_first(in, xi, false, ir_null());
        }
        return;
    case IR_N_LOOP_COND:
        if (!rn_ex_value(in, xi, t->expr, &v)) {
            return;
        }
        k = ir_truthy(v) ? 0 : 1; /* edges: TRUE first, then FALSE */
        ir_val_release(v);
        rn_ex_follow(in, xi, tedge(in, t, k), false, ir_null());
        return;
    case IR_N_BRANCH:
        for (k = 0; k < t->nedges; k++) {
            const struct ir_edge *e = tedge(in, t, k);
            if (e->kind == IR_E_GUARD) {
                if (!rn_ex_value(in, xi, e->expr, &v)) {
                    return;
                }
                if (!ir_truthy(v)) {
                    ir_val_release(v);
                    continue;
                }
                ir_val_release(v);
            }
            rn_ex_follow(in, xi, e, false, ir_null());
            return;
        }
        rn_ex_oom(in); /* every branch node has an else edge */
        return;
    case IR_N_JOIN:
    case IR_N_LOOP_EXIT:
    case IR_N_TRY:
    case IR_N_BREAK:
    case IR_N_CONTINUE:
        rn_ex_follow_first(in, xi, false, ir_null());
        return;
    case IR_N_ACTION:
        in->x.items[xi].attempt = 0;
        in->x.items[xi].first_at = 0;
        ir_val_release(in->x.items[xi].last_error);
        in->x.items[xi].last_error = ir_null();
        rn_ex_dispatch(in, xi, false);
        return;
    case IR_N_SPREAD:
    case IR_N_PARALLEL:
        run_fork(in, xi, t);
        return;
    case IR_N_EXCEPT:
        if (!w->has_val) {
            rn_ex_oom(in); /* an except node is only reached by an error */
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
            rn_ex_follow_first(in, xi, true, ir_null());
            return;
        }
        rv = rn_ex_eval(in, xi, t->expr, &v);
        if (rv == CN_OK && (rv = rn_ex_check_storable(in, v, &err)) == CN_RAISED) {
            ir_val_release(v);
            v = err;
        }
        if (rv == CN_RAISED) {
            rn_ex_raise_error(in, xi, v);
        } else if (rv == CN_OK) {
            rn_ex_follow_first(in, xi, true, v);
        }
        return;
    case IR_N_PUBLISH:
        run_publish(in, xi, t);
        return;
    case IR_N_RAISE:
        run_raise(in, xi, t);
        return;
    case IR_N_CALL_ENTER:
        run_call_enter(in, xi, t);
        return;
    case IR_N_CALL_EXIT:
        run_call_exit(in, xi, t, w->has_val, w->val);
        return;
    case IR_N_OUTPUT:
        rn_ex_x_free(in, xi);
        rn_ex_finish(in, RN_COMPLETED, w->has_val ? w->val : ir_null());
        return;
    case IR_N_AGGREGATE:
    default:
        ir_val_release(w->val);
        rn_ex_oom(
            in); /* reached only through rn_ex_deliver(); anything else is a corrupt template */
        return;
    }
}

void
rn_ex_run_queue(struct rn_instance *in)
{
    while (in->q.head < in->q.len && in->rv == CN_OK && in->outcome == RN_RUNNING) {
        struct rn_work w = in->q.items[in->q.head++];
        if (w.x != RN_NONE) { /* RN_NONE: its node was cancelled (fail_fast) */
            run_node(in, &w);
        }
    }
}
