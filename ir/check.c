/* SPDX-License-Identifier: MIT */
/*
 * Semantic checks (docs/language.md, "What the compiler checks"): names read before assignment on
 * some path (a definite-assignment analysis over the structured statements, with bitsets per
 * function), unknown functions, builtin and helper arity, helper calls in positions that cannot be
 * inlined, break/continue outside loops, and recursion among helpers. Also resolves builtin
 * calls (ir_expr.op) and turns `x = helper(...)` into IR_S_CALL statements for the compiler.
 * Error types: each `class` declares a new name whose bases are declared or built in, without a
 * cycle; `raise T(...)` of an error type becomes its type form (ir_stmt.item, raise_args); a
 * bare `raise` stands inside an `except` handler of its own function.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/strmap.h"
#include "ir/base/vec.h"
#include "ir/compile.h"
#include "ir/error.h"
#include "ir/eval.h"
#include "ir/types.h"

/* A definite-assignment state: bit i set = variable i is assigned on every path to here.
 * `dead` marks unreachable code (after return/break/continue), which counts as "everything
 * assigned" so it is neutral in a meet. */
struct dstate {
    uint64_t *bits;
    bool dead;
};

struct call_edge {
    uint32_t callee;
    struct ir_pos pos;
};

struct call_vec {
    struct call_edge *items;
    size_t len, cap;
};

struct loop_ctx {
    struct dstate brk; /* meet of the states at each break */
    bool has_break;
};

struct checker {
    struct ir_program *p;
    struct ir_diags *d;
    cn_err rv;
    struct cn_strmap funcs; /* name -> index in p->funcs */
    struct call_vec *calls; /* per function: helpers it calls */
    /* per function being checked */
    uint32_t fidx;
    struct cn_strmap vars; /* name -> bit */
    uint32_t nvars;
    size_t words;
    uint8_t *reported;          /* per variable: "maybe unassigned" already reported */
    struct cn_strmap undefined; /* names already reported as undefined */
    int loop_depth;
    int handler_depth;        /* except handlers around the statement, in its function */
    int final_depth;          /* finally blocks around the statement, in its function */
    int final_loop_depth;     /* loop_depth where the innermost of them began */
    struct cn_strmap classes; /* declared error type -> index in p->classes */
    struct loop_ctx *loop;
    const char *item; /* the spread item variable while checking that spread's arguments */
};

static void walk_block(struct checker *c, const struct ir_block *b, struct dstate *st);

static void
nomem(struct checker *c)
{
    c->rv = CN_NOMEM;
}

/* ---- bitsets ------------------------------------------------------------------------------ */

static struct dstate
ds_new(struct checker *c, bool dead)
{
    struct dstate s;

    s.bits = calloc(c->words ? c->words : 1, sizeof(uint64_t));
    s.dead = dead;
    if (s.bits == NULL) {
        nomem(c);
    }
    return s;
}

static struct dstate
ds_copy(struct checker *c, const struct dstate *from)
{
    struct dstate s = ds_new(c, from->dead);

    if (s.bits != NULL && from->bits != NULL) {
        memcpy(s.bits, from->bits, (c->words ? c->words : 1) * sizeof(uint64_t));
    }
    return s;
}

static void
ds_free(struct dstate *s)
{
    free(s->bits);
    s->bits = NULL;
}

/* into := into meet other (intersection; dead is the identity). */
static void
ds_meet(struct checker *c, struct dstate *into, const struct dstate *other)
{
    size_t i;

    if (other->dead || into->bits == NULL || other->bits == NULL) {
        return;
    }
    if (into->dead) {
        memcpy(into->bits, other->bits, (c->words ? c->words : 1) * sizeof(uint64_t));
        into->dead = false;
        return;
    }
    for (i = 0; i < c->words; i++) {
        into->bits[i] &= other->bits[i];
    }
}

static void
ds_set(struct checker *c, struct dstate *s, const char *name)
{
    uint32_t v;

    if (s->bits != NULL && cn_strmap_get(&c->vars, name, &v)) {
        s->bits[v / 64] |= (uint64_t) 1 << (v % 64);
    }
}

static bool
ds_has(const struct dstate *s, uint32_t v)
{
    return s->dead || s->bits == NULL || (s->bits[v / 64] >> (v % 64)) & 1;
}

static void
ds_set_names(struct checker *c, struct dstate *s, const struct ir_names *n)
{
    uint32_t i;

    for (i = 0; i < n->len; i++) {
        ds_set(c, s, n->items[i]);
    }
}

/* ---- collecting a function's variables ---------------------------------------------------- */

static void
add_var(struct checker *c, const char *name)
{
    uint32_t v;

    if (c->rv != CN_OK || cn_strmap_get(&c->vars, name, &v)) {
        return;
    }
    if (cn_strmap_put(&c->vars, name, c->nvars) != CN_OK) {
        nomem(c);
        return;
    }
    c->nvars++;
}

static void
add_vars(struct checker *c, const struct ir_names *n)
{
    uint32_t i;

    for (i = 0; i < n->len; i++) {
        add_var(c, n->items[i]);
    }
}

static void
collect_block(struct checker *c, const struct ir_block *b)
{
    uint32_t i, j;

    for (i = 0; i < b->len; i++) {
        const struct ir_stmt *s = b->items[i];
        add_vars(c, &s->targets);
        for (j = 0; j < s->narms; j++) {
            collect_block(c, &s->arms[j].body);
        }
        collect_block(c, &s->body);
        for (j = 0; j < s->nhandlers; j++) {
            if (s->handlers[j].bind != NULL) {
                add_var(c, s->handlers[j].bind);
            }
            collect_block(c, &s->handlers[j].body);
        }
        collect_block(c, &s->final);
    }
}

/* ---- expressions -------------------------------------------------------------------------- */

static void
check_name(struct checker *c, const struct ir_expr *e, const struct dstate *st)
{
    uint32_t v, dummy;

    if (c->item != NULL && strcmp(c->item, e->name) == 0) {
        return; /* bound for each element of the spread */
    }
    if (cn_strmap_get(&c->vars, e->name, &v)) {
        if (!ds_has(st, v) && !c->reported[v]) {
            c->reported[v] = 1;
            ir_diags_add(c->d, e->line, e->col,
                         "variable '%s' may be used before it is assigned (it is not assigned on "
                         "every path to here)",
                         e->name);
        }
        return;
    }
    if (cn_strmap_get(&c->undefined, e->name, &dummy)) {
        return;
    }
    if (cn_strmap_put(&c->undefined, e->name, 0) != CN_OK) {
        nomem(c);
        return;
    }
    if (cn_strmap_get(&c->funcs, e->name, &dummy) ||
        ir_builtin_lookup(e->name) != IR_B_UNRESOLVED) {
        ir_diags_add(c->d, e->line, e->col, "function '%s' cannot be used as a value; call it",
                     e->name);
    } else {
        ir_diags_add(c->d, e->line, e->col, "name '%s' is not defined", e->name);
    }
}

static void check_expr(struct checker *c, uint32_t i, const struct dstate *st);

static void
check_builtin_call(struct checker *c, struct ir_expr *e)
{
    enum ir_builtin b = ir_builtin_lookup(e->name);
    unsigned lo, hi, npos = e->nargs - e->nkw;

    if (b == IR_B_UNRESOLVED) {
        if (ir_error_builtin_bases(e->name) != NULL || cn_strmap_get(&c->classes, e->name, &lo)) {
            ir_diags_add(c->d, e->line, e->col,
                         "%s(...) makes an error only in a raise statement (raise %s(\"...\"))",
                         e->name, e->name);
        } else if (strcmp(e->name, "run") == 0 || strcmp(e->name, "start") == 0) {
            /* `run(k=v)` reads as a call of a function named run: the workflow name is
             * missing. */
            ir_diags_add(c->d, e->line, e->col,
                         "unknown function '%s'; to call a child workflow, write its name after "
                         "'%s' (%s billing.refund(order=o))",
                         e->name, e->name, e->name);
        } else {
            ir_diags_add(c->d, e->line, e->col,
                         "unknown function '%s' (not a builtin and not a function in this file)",
                         e->name);
        }
        return;
    }
    e->op = (uint8_t) b;
    if (e->nkw > 0) {
        ir_diags_add(c->d, e->line, e->col, "builtin '%s' takes no keyword arguments", e->name);
        return;
    }
    ir_builtin_arity(b, &lo, &hi);
    if (npos < lo || npos > hi) {
        if (lo == hi) {
            ir_diags_add(c->d, e->line, e->col, "%s() takes exactly %u argument%s (%u given)",
                         e->name, lo, lo == 1 ? "" : "s", npos);
        } else if (hi == 255) {
            ir_diags_add(c->d, e->line, e->col, "%s() takes at least %u argument%s (%u given)",
                         e->name, lo, lo == 1 ? "" : "s", npos);
        } else {
            ir_diags_add(c->d, e->line, e->col, "%s() takes %u to %u arguments (%u given)", e->name,
                         lo, hi, npos);
        }
    }
}

static void
check_expr(struct checker *c, uint32_t i, const struct dstate *st)
{
    struct ir_expr *e;
    uint32_t k, dummy;

    if (i == IR_NO_EXPR || c->rv != CN_OK) {
        return;
    }
    e = &c->p->exprs.items[i];
    if (e->kind == IR_X_NAME) {
        check_name(c, e, st);
        return;
    }
    if (e->kind == IR_X_CALL) {
        if (cn_strmap_get(&c->funcs, e->name, &dummy)) {
            ir_diags_add(c->d, e->line, e->col,
                         "helper '%s' must be called as a statement of its own (x = %s(...)): "
                         "helpers are inlined into the workflow graph",
                         e->name, e->name);
        } else {
            check_builtin_call(c, e);
        }
    }
    if (e->kind == IR_X_DICT) {
        for (k = 0; k < e->nargs; k += 2) {
            const struct ir_expr *key = &c->p->exprs.items[ir_xchild(&c->p->exprs, e, k)];
            if (key->kind == IR_X_CONST && key->val.type != IR_T_STR) {
                ir_diags_add(c->d, key->line, key->col, "dict keys must be strings, not %s",
                             ir_type_name(key->val.type));
            }
        }
    }
    for (k = 0; k < e->nargs; k++) {
        check_expr(c, ir_xchild(&c->p->exprs, e, k), st);
    }
}

/* Checks a helper call `g(args)` made from the current function; records the call edge. */
static void
check_helper_call(struct checker *c, uint32_t i, const struct dstate *st)
{
    struct ir_expr *e = &c->p->exprs.items[i];
    uint32_t gi, k, j, npos = e->nargs - e->nkw;
    const struct ir_func *g;
    struct call_edge edge;
    struct cn_strmap params = CN_STRMAP_INIT;
    bool *given;

    (void) cn_strmap_get(&c->funcs, e->name, &gi);
    g = &c->p->funcs[gi];
    for (k = 0; k < e->nargs; k++) {
        check_expr(c, ir_xchild(&c->p->exprs, e, k), st);
    }
    edge.callee = gi;
    edge.pos.line = e->line;
    edge.pos.col = e->col;
    if (CN_VEC_PUSH(&c->calls[c->fidx], edge) != CN_OK) {
        nomem(c);
        return;
    }
    if (npos > g->inputs.len) {
        ir_diags_add(c->d, e->line, e->col, "helper '%s' takes %u argument%s (%u given)", g->name,
                     g->inputs.len, g->inputs.len == 1 ? "" : "s", npos);
        return;
    }
    given = calloc(g->inputs.len + 1, sizeof(*given));
    if (given == NULL) {
        nomem(c);
        return;
    }
    for (k = 0; k < npos; k++) {
        given[k] = true;
    }
    for (j = 0; j < g->inputs.len; j++) {
        if (cn_strmap_put(&params, g->inputs.items[j], j) != CN_OK) {
            nomem(c);
        }
    }
    for (k = 0; k < e->nkw; k++) {
        if (!cn_strmap_get(&params, e->kwnames[k], &j)) {
            j = g->inputs.len;
        }
        if (j == g->inputs.len) {
            ir_diags_add(c->d, e->line, e->col, "helper '%s' has no input named '%s'", g->name,
                         e->kwnames[k]);
        } else if (given[j]) {
            ir_diags_add(c->d, e->line, e->col, "argument '%s' given twice in call to '%s'",
                         e->kwnames[k], g->name);
        } else {
            given[j] = true;
        }
    }
    for (j = 0; j < g->inputs.len; j++) {
        if (!given[j]) {
            ir_diags_add(c->d, e->line, e->col, "missing argument '%s' in call to helper '%s'",
                         g->inputs.items[j], g->name);
        }
    }
    free(given);
    cn_strmap_fini(&params);
}

static bool
is_helper_call(struct checker *c, uint32_t i)
{
    uint32_t dummy;
    const struct ir_expr *e;

    if (i == IR_NO_EXPR) {
        return false;
    }
    e = &c->p->exprs.items[i];
    return e->kind == IR_X_CALL && cn_strmap_get(&c->funcs, e->name, &dummy);
}

static void
check_action(struct checker *c, const struct ir_action_call *a, const struct dstate *st)
{
    uint32_t k;

    for (k = 0; k < a->nkwargs; k++) {
        check_expr(c, a->kwargs[k].expr, st);
    }
}

/* A constant condition that is always true (`while True:`, `while 1:`). */
static bool
is_const_true(struct checker *c, uint32_t i)
{
    const struct ir_expr *e = &c->p->exprs.items[i];

    if (e->kind != IR_X_CONST) {
        return false;
    }
    switch (e->val.type) {
    case IR_T_BOOL:
        return e->val.u.b;
    case IR_T_INT:
        return e->val.u.i != 0;
    case IR_T_FLOAT:
        return e->val.u.f != 0.0;
    case IR_T_STR:
        return ir_str_len(e->val) > 0;
    default:
        return false;
    }
}

/* ---- statements --------------------------------------------------------------------------- */

static void
walk_loop_body(struct checker *c, const struct ir_block *body, struct dstate *in,
               struct loop_ctx *lc)
{
    struct loop_ctx *saved = c->loop;
    struct dstate b = ds_copy(c, in);

    lc->brk = ds_new(c, true);
    lc->has_break = false;
    c->loop = lc;
    c->loop_depth++;
    walk_block(c, body, &b);
    c->loop_depth--;
    c->loop = saved;
    ds_free(&b);
}

/* Checks the value of an assignment or a return: a call of a helper function (true; the
 * compiler inlines it) or any other expression (false). */
static bool
check_value(struct checker *c, uint32_t e, const struct dstate *st)
{
    if (is_helper_call(c, e)) {
        check_helper_call(c, e, st);
        return true;
    }
    check_expr(c, e, st);
    return false;
}

static void
walk_spread(struct checker *c, const struct ir_stmt *s, struct dstate *st)
{
    struct dstate inner;

    check_expr(c, s->expr, st);
    inner = ds_copy(c, st);
    c->item = s->item;
    check_action(c, &s->action, &inner);
    c->item = NULL;
    ds_free(&inner);
    ds_set_names(c, st, &s->targets);
}

static void
walk_parallel(struct checker *c, const struct ir_stmt *s, struct dstate *st)
{
    uint32_t i;

    for (i = 0; i < s->nbranches; i++) {
        struct ir_pbranch *b = &s->branches[i];
        if (b->is_action) {
            check_action(c, &b->action, st);
        } else if (is_helper_call(c, b->call)) {
            check_helper_call(c, b->call, st);
        } else {
            const struct ir_expr *e = &c->p->exprs.items[b->call];
            ir_diags_add(c->d, e->line, e->col,
                         "only actions and helper functions can run in parallel; '%s' is "
                         "%s",
                         e->name,
                         ir_builtin_lookup(e->name) != IR_B_UNRESOLVED
                             ? "a builtin"
                             : "not a function in this file");
        }
    }
    if (s->targets.unpack && s->targets.len != s->nbranches) {
        ir_diags_add(c->d, s->pos.line, s->pos.col,
                     "parallel block has %u call%s but %u target%s to unpack into", s->nbranches,
                     s->nbranches == 1 ? "" : "s", s->targets.len, s->targets.len == 1 ? "" : "s");
    }
    ds_set_names(c, st, &s->targets);
}

static void
walk_if(struct checker *c, const struct ir_stmt *s, struct dstate *st)
{
    struct dstate out = ds_new(c, true);
    bool has_else = false;
    uint32_t i;

    for (i = 0; i < s->narms; i++) {
        struct dstate arm;
        if (s->arms[i].cond != IR_NO_EXPR) {
            check_expr(c, s->arms[i].cond, st);
        } else {
            has_else = true;
        }
        arm = ds_copy(c, st);
        walk_block(c, &s->arms[i].body, &arm);
        ds_meet(c, &out, &arm);
        ds_free(&arm);
    }
    if (!has_else) {
        ds_meet(c, &out, st);
    }
    ds_free(st);
    *st = out;
}

/* The loop may run zero times, so what it assigns is not assigned after it: *st is unchanged. */
static void
walk_for(struct checker *c, const struct ir_stmt *s, struct dstate *st)
{
    struct loop_ctx lc;
    struct dstate in;

    check_expr(c, s->expr, st);
    in = ds_copy(c, st);
    ds_set_names(c, &in, &s->targets);
    walk_loop_body(c, &s->body, &in, &lc);
    ds_free(&in);
    ds_free(&lc.brk);
}

static void
walk_while(struct checker *c, const struct ir_stmt *s, struct dstate *st)
{
    struct loop_ctx lc;

    check_expr(c, s->expr, st);
    walk_loop_body(c, &s->body, st, &lc);
    if (is_const_true(c, s->expr)) {
        /* `while True:` ends only through a break. */
        ds_free(st);
        *st = lc.brk;
    } else {
        ds_free(&lc.brk);
    }
}

static void
walk_break(struct checker *c, const struct ir_stmt *s, struct dstate *st)
{
    if (c->loop_depth == 0) {
        ir_diags_add(c->d, s->pos.line, s->pos.col, "'%s' outside a loop",
                     s->kind == IR_S_BREAK ? "break" : "continue");
        return; /* reported; the code after it is still checked as reachable */
    }
    if (c->final_depth > 0 && c->loop_depth == c->final_loop_depth) {
        /* Python 3.14 warns of it (PEP 765): leaving a finally drops the error it runs for. */
        ir_diags_add(c->d, s->pos.line, s->pos.col,
                     "'%s' would leave the 'finally' block, dropping the error it may be "
                     "running for; leave the loop after the try statement",
                     s->kind == IR_S_BREAK ? "break" : "continue");
        return;
    }
    if (s->kind == IR_S_BREAK) {
        ds_meet(c, &c->loop->brk, st);
        c->loop->has_break = true;
    }
    st->dead = true;
}

/* Whether name is an error type `raise` can make: declared by a class, or built in. */
static bool
is_error_type(const struct checker *c, const char *name)
{
    uint32_t k;

    return ir_error_builtin_bases(name) != NULL || cn_strmap_get(&c->classes, name, &k);
}

/* `raise T(message[, details])` of an error type becomes its type form; any other `raise e`
 * raises the error value e gives (checked when it runs); a bare `raise` re-raises the error
 * its handler caught. Nothing after it runs. */
static void
walk_raise(struct checker *c, struct ir_stmt *s, struct dstate *st)
{
    struct ir_expr *e = s->expr != IR_NO_EXPR ? &c->p->exprs.items[s->expr] : NULL;
    uint32_t k;

    if (e == NULL) {
        if (c->handler_depth == 0) {
            ir_diags_add(c->d, s->pos.line, s->pos.col,
                         "a bare raise re-raises the error an except handler caught: it goes "
                         "inside one (in the same function), or name the error: raise "
                         "ValueError(\"...\")");
        }
    } else if (e->kind == IR_X_CALL && is_error_type(c, e->name)) {
        if (e->nkw > 0 || e->nargs > 2) {
            ir_diags_add(c->d, e->line, e->col,
                         "%s(...) takes a message and, optionally, details: raise %s(\"what "
                         "went wrong\", {\"order\": id})",
                         e->name, e->name);
        }
        s->item = e->name;
        for (k = 0; k < e->nargs && k < 2; k++) {
            s->raise_args[k] = ir_xchild(&c->p->exprs, e, k);
            check_expr(c, s->raise_args[k], st);
        }
        s->expr = IR_NO_EXPR;
    } else if (e->kind == IR_X_CALL && !cn_strmap_get(&c->funcs, e->name, &k) &&
               ir_builtin_lookup(e->name) == IR_B_UNRESOLVED) {
        ir_diags_add(c->d, e->line, e->col,
                     "unknown error type '%s': declare it before raising it (class %s(Exception): "
                     "pass), or raise a built-in one (ValueError, RuntimeError, ...)",
                     e->name, e->name);
    } else {
        check_expr(c, s->expr, st);
    }
    st->dead = true;
}

/* The declared error types: each a new name (not a built-in type, a function or another
 * class), its bases declared (earlier or later) or built in, and no cycle among them. */
static void
check_classes(struct checker *c)
{
    uint32_t i, k, n = c->p->nclasses;

    for (i = 0; i < n; i++) {
        const struct ir_errclass *kl = &c->p->classes[i];
        uint32_t prev;
        if (ir_error_builtin_bases(kl->name) != NULL) {
            ir_diags_add(c->d, kl->pos.line, kl->pos.col,
                         "%s is a built-in error type: name yours otherwise", kl->name);
        } else if (cn_strmap_get(&c->classes, kl->name, &prev)) {
            ir_diags_add(c->d, kl->pos.line, kl->pos.col,
                         "error type '%s' is already declared at line %u", kl->name,
                         c->p->classes[prev].pos.line);
        } else if (cn_strmap_get(&c->funcs, kl->name, &prev)) {
            ir_diags_add(c->d, kl->pos.line, kl->pos.col,
                         "'%s' is both a function and an error type", kl->name);
        } else if (cn_strmap_put(&c->classes, kl->name, i) != CN_OK) {
            nomem(c);
        }
    }
    for (i = 0; i < n; i++) {
        const struct ir_errclass *kl = &c->p->classes[i];
        for (k = 0; k < kl->bases.len; k++) {
            if (!is_error_type(c, kl->bases.items[k])) {
                ir_diags_add(c->d, kl->bases.pos[k].line, kl->bases.pos[k].col,
                             "unknown base '%s': an error type's bases are built-in error types "
                             "(Exception, ValueError, ...) or declared ones",
                             kl->bases.items[k]);
            }
        }
    }
    /* A cycle: a class reachable from itself through declared bases (each walk visits a class
     * at most once). */
    {
        uint32_t *stack = calloc(n + 1, sizeof(*stack));
        uint8_t *seen = calloc(n + 1, 1);
        if (stack == NULL || seen == NULL) {
            nomem(c);
            n = 0;
        }
        for (i = 0; i < n; i++) {
            uint32_t top = 0;
            bool cycle = false;
            memset(seen, 0, n);
            stack[top++] = i;
            while (top > 0 && !cycle) {
                const struct ir_errclass *kl = &c->p->classes[stack[--top]];
                for (k = 0; k < kl->bases.len && !cycle; k++) {
                    uint32_t b;
                    if (!cn_strmap_get(&c->classes, kl->bases.items[k], &b) || seen[b]) {
                        continue;
                    }
                    cycle = b == i;
                    seen[b] = 1;
                    stack[top++] = b;
                }
            }
            if (cycle) {
                ir_diags_add(c->d, c->p->classes[i].pos.line, c->p->classes[i].pos.col,
                             "error type '%s' is among its own bases", c->p->classes[i].name);
            }
        }
        free(stack);
        free(seen);
    }
}

/* The finally block of try s, from the state before the try (an error may leave the body or a
 * handler anywhere): what it assigns is assigned after the try, and a finally that never ends
 * makes the try never end. */
static void
walk_finally(struct checker *c, const struct ir_stmt *s, const struct dstate *entry,
             struct dstate *out)
{
    struct dstate f = ds_copy(c, entry);
    int saved = c->final_loop_depth;
    size_t w;

    c->final_depth++;
    c->final_loop_depth = c->loop_depth;
    walk_block(c, &s->final, &f);
    c->final_depth--;
    c->final_loop_depth = saved;
    if (f.dead) {
        out->dead = true;
    } else if (out->bits != NULL && f.bits != NULL && entry->bits != NULL) {
        for (w = 0; w < c->words; w++) {
            out->bits[w] |= f.bits[w] & ~entry->bits[w];
        }
    }
    ds_free(&f);
}

static void
walk_try(struct checker *c, const struct ir_stmt *s, struct dstate *st)
{
    struct dstate body = ds_copy(c, st), out;
    uint32_t i;

    walk_block(c, &s->body, &body);
    out = body;
    for (i = 0; i < s->nhandlers; i++) {
        struct dstate h = ds_copy(c, st);
        if (s->handlers[i].bind != NULL) {
            ds_set(c, &h, s->handlers[i].bind);
        }
        c->handler_depth++;
        walk_block(c, &s->handlers[i].body, &h);
        c->handler_depth--;
        if (s->handlers[i].bind != NULL && !h.dead && h.bits != NULL) {
            uint32_t v;
            /* Python deletes the `as` name when the handler ends. */
            if (cn_strmap_get(&c->vars, s->handlers[i].bind, &v)) {
                h.bits[v / 64] &= ~((uint64_t) 1 << (v % 64));
            }
        }
        ds_meet(c, &out, &h);
        ds_free(&h);
    }
    if (s->has_final) {
        walk_finally(c, s, st, &out);
    }
    ds_free(st);
    *st = out;
}

/* A statement that binds its targets once its value is checked: an assignment (which becomes a
 * helper call when its value is one), a helper call, an action. */
static void
walk_binding(struct checker *c, struct ir_stmt *s, struct dstate *st)
{
    if (s->kind == IR_S_ACTION) {
        check_action(c, &s->action, st);
    } else if (s->kind == IR_S_CALL) { /* already converted (not reached on a first check) */
        check_helper_call(c, s->expr, st);
    } else if (check_value(c, s->expr, st)) {
        s->kind = IR_S_CALL;
    }
    ds_set_names(c, st, &s->targets);
}

/* Types and defaults: the workflow's inputs only (a helper's arguments come from its caller,
 * checked by the compiler). A default is a constant (a literal, evaluated here without names)
 * of the input's type. */
static void
check_params(struct checker *c, struct ir_func *f)
{
    uint32_t i;

    if (f->params == NULL) {
        return;
    }
    for (i = 0; i < f->inputs.len && c->rv == CN_OK; i++) {
        struct ir_param *p = &f->params[i];
        struct ir_val v;
        cn_err rv;

        if (f != ir_program_entry(c->p)) {
            if (p->type != NULL || p->dflt != IR_NO_EXPR) {
                struct ir_pos at = p->type != NULL ? p->type->pos : p->dflt_pos;
                ir_diags_add(c->d, at.line, at.col,
                             "types and defaults are for the workflow's inputs (%s is a helper: "
                             "its arguments come from its caller)",
                             f->name);
                return;
            }
            continue;
        }
        if (p->dflt == IR_NO_EXPR) {
            continue;
        }
        rv = ir_eval_const(&c->p->exprs, p->dflt, &v);
        if (rv == CN_NOMEM) {
            nomem(c);
            return;
        }
        if (rv != CN_OK) {
            if (rv == CN_RAISED) {
                ir_val_release(v);
            }
            ir_diags_add(c->d, p->dflt_pos.line, p->dflt_pos.col,
                         "the default of '%s' must be a constant (1, \"a\", [], {}, None, ...)",
                         f->inputs.items[i]);
            continue;
        }
        {
            struct cn_buf why = CN_BUF_INIT, name = CN_BUF_INIT;
            bool ok = true;
            if (cn_buf_printf(&name, "the default of '%s'", f->inputs.items[i]) != CN_OK ||
                ir_ty_check(p->type, v, name.data, &ok, &why) != CN_OK) {
                nomem(c);
            } else if (!ok) {
                ir_diags_add(c->d, p->dflt_pos.line, p->dflt_pos.col, "%s", why.data);
            }
            cn_buf_fini(&why);
            cn_buf_fini(&name);
        }
        ir_val_release(v); /* the expression stays: the graph's codec carries literals */
    }
}

static void
walk_stmt(struct checker *c, struct ir_stmt *s, struct dstate *st)
{
    switch (s->kind) {
    case IR_S_ASSIGN:
    case IR_S_CALL:
    case IR_S_ACTION:
        walk_binding(c, s, st);
        break;
    case IR_S_SPREAD:
        walk_spread(c, s, st);
        break;
    case IR_S_PARALLEL:
        walk_parallel(c, s, st);
        break;
    case IR_S_IF:
        walk_if(c, s, st);
        break;
    case IR_S_FOR:
        walk_for(c, s, st);
        break;
    case IR_S_WHILE:
        walk_while(c, s, st);
        break;
    case IR_S_BREAK:
    case IR_S_CONTINUE:
        walk_break(c, s, st);
        break;
    case IR_S_TRY:
        walk_try(c, s, st);
        break;
    case IR_S_RETURN:
        if (c->final_depth > 0) {
            ir_diags_add(c->d, s->pos.line, s->pos.col,
                         "'return' inside a 'finally' block would drop the error it may be "
                         "running for; return after the try statement");
        }
        if (check_value(c, s->expr, st)) {
            s->helper_call = true;
        }
        st->dead = true;
        break;
    case IR_S_SLEEP:
    case IR_S_PUBLISH:
        check_expr(c, s->expr, st);
        break;
    case IR_S_RAISE:
        walk_raise(c, s, st);
        break;
    case IR_S_PASS:
    default:
        break;
    }
}

static void
walk_block(struct checker *c, const struct ir_block *b, struct dstate *st)
{
    uint32_t i;

    for (i = 0; i < b->len && c->rv == CN_OK; i++) {
        walk_stmt(c, b->items[i], st);
    }
}

static void
check_func(struct checker *c, uint32_t fi)
{
    const struct ir_func *f = &c->p->funcs[fi];
    struct dstate st;

    c->fidx = fi;
    c->nvars = 0;
    add_vars(c, &f->inputs);
    collect_block(c, &f->body);
    if (c->rv != CN_OK) {
        return;
    }
    c->words = (c->nvars + 63) / 64;
    c->reported = calloc(c->nvars + 1, 1);
    if (c->reported == NULL) {
        nomem(c);
        return;
    }
    st = ds_new(c, false);
    ds_set_names(c, &st, &f->inputs);
    c->loop_depth = 0;
    c->handler_depth = 0;
    c->final_depth = 0;
    c->final_loop_depth = 0;
    c->loop = NULL;
    walk_block(c, &f->body, &st);
    ds_free(&st);
    free(c->reported);
    c->reported = NULL;
    cn_strmap_fini(&c->vars);
    cn_strmap_fini(&c->undefined);
}

/* Finds cycles in the helper call graph with an explicit-stack DFS (depth is user-controlled). */
static void
check_recursion(struct checker *c)
{
    uint32_t n = c->p->nfuncs, i;
    /* n + 1: calloc(0) may return NULL, which would read as out of memory. */
    uint8_t *color = calloc(n + 1, 1); /* 0 white, 1 on stack, 2 done */
    uint32_t *stack = calloc(n + 1, sizeof(*stack));
    size_t *next = calloc(n + 1, sizeof(*next));
    size_t top;

    if (color == NULL || stack == NULL || next == NULL) {
        nomem(c);
        goto out;
    }
    for (i = 0; i < n; i++) {
        if (color[i] != 0) {
            continue;
        }
        top = 0;
        stack[top++] = i;
        color[i] = 1;
        next[i] = 0;
        while (top > 0) {
            uint32_t f = stack[top - 1];
            if (next[f] < c->calls[f].len) {
                const struct call_edge *e = &c->calls[f].items[next[f]++];
                if (color[e->callee] == 1) {
                    struct cn_buf path = CN_BUF_INIT;
                    size_t k = top;
                    while (k > 0 && stack[k - 1] != e->callee) {
                        k--;
                    }
                    for (; k > 0 && k <= top; k++) {
                        if (cn_buf_printf(&path, "%s -> ", c->p->funcs[stack[k - 1]].name) !=
                            CN_OK) {
                            break;
                        }
                    }
                    ir_diags_add(c->d, e->pos.line, e->pos.col,
                                 "recursive call: %s%s (helpers are inlined, so they cannot "
                                 "call themselves)",
                                 path.data ? path.data : "", c->p->funcs[e->callee].name);
                    cn_buf_fini(&path);
                } else if (color[e->callee] == 0) {
                    color[e->callee] = 1;
                    next[e->callee] = 0;
                    stack[top++] = e->callee;
                }
            } else {
                color[f] = 2;
                top--;
            }
        }
    }
out:
    free(color);
    free(stack);
    free(next);
}

cn_err
ir_check(struct ir_program *p, struct ir_diags *diags)
{
    struct checker c;
    size_t errs0 = diags->len;
    uint32_t i;

    memset(&c, 0, sizeof(c));
    c.p = p;
    c.d = diags;
    c.calls = calloc(p->nfuncs + 1, sizeof(*c.calls));
    if (c.calls == NULL) {
        return CN_NOMEM;
    }
    for (i = 0; i < p->nfuncs; i++) {
        if (cn_strmap_put(&c.funcs, p->funcs[i].name, i) != CN_OK) {
            nomem(&c);
        }
        if (ir_builtin_lookup(p->funcs[i].name) != IR_B_UNRESOLVED) {
            ir_diags_add(diags, p->funcs[i].pos.line, p->funcs[i].pos.col,
                         "function '%s' has the name of a builtin", p->funcs[i].name);
        }
    }
    if (p->nfuncs > 0 && ir_program_entry(p) == NULL) {
        ir_diags_add(diags, p->funcs[0].pos.line, p->funcs[0].pos.col,
                     "no entry function: name one function 'main' (or define only one)");
    }
    for (i = 0; i < p->nfuncs; i++) {
        const struct ir_func *f = &p->funcs[i];
        if (f->timeout_ms != 0 && f != ir_program_entry(p)) {
            ir_diags_add(diags, f->timeout_pos.line, f->timeout_pos.col,
                         "[timeout: D] bounds a whole workflow: only the entry function takes it "
                         "(%s is a helper)",
                         f->name);
        }
    }
    check_classes(&c);
    for (i = 0; i < p->nfuncs && c.rv == CN_OK; i++) {
        check_params(&c, &p->funcs[i]);
        check_func(&c, i);
    }
    if (c.rv == CN_OK) {
        check_recursion(&c);
    }
    for (i = 0; i < p->nfuncs; i++) {
        free(c.calls[i].items);
    }
    free(c.calls);
    free(c.reported);
    cn_strmap_fini(&c.funcs);
    cn_strmap_fini(&c.classes);
    cn_strmap_fini(&c.vars);
    cn_strmap_fini(&c.undefined);
    if (c.rv != CN_OK) {
        return c.rv;
    }
    return diags->len > errs0 || diags->oom ? CN_COMPILE : CN_OK;
}
