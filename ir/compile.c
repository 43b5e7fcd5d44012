/* SPDX-License-Identifier: MIT */
/*
 * Compiler: checked AST -> DAG template (ir/dag.h). Statements are compiled in source order
 * with "pending edges": each compile step receives the edges waiting for the next node and
 * returns the ones its own exits leave open. A statement reached by no pending edge is
 * unreachable and not emitted. Nodes whose id is needed before they exist (the EXCEPT of a try
 * for the `exc` field of nodes in its body, the AGGREGATE of a fan-out) are referred to by
 * tokens that are resolved when the node is created, so ids stay in reading order.
 * Helper calls are inlined: each call site gets a frame and a copy of the helper's nodes.
 */
#include "ir/compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/strmap.h"
#include "ir/base/vec.h"
#include "ir/error.h"
#include "ir/parser.h"
#include "ir/types.h"

/* An upper bound that keeps a hostile or runaway source from exhausting memory at
 * registration (the graph's is the caller's: ir_compile_limits). */
#define COMPILE_MAX_INLINE_DEPTH 64

#define EXC_TOKEN 0x80000000u

struct pend {
    uint32_t from;
    uint8_t kind;
    uint32_t expr;
    uint32_t index;
    uint32_t seq; /* evaluation order among the source node's edges, fixed at creation */
};

struct pend_vec {
    struct pend *items;
    size_t len, cap;
};

struct loop_ctx {
    struct pend_vec breaks;
    struct pend_vec continues;
};

/* A try statement with a finally block, around the statement being compiled in its frame: what
 * a copy of the block needs to compile as if it stood where the try does (compile_finals). */
struct fin_ctx {
    const struct ir_block *body; /* the finally block */
    uint32_t exc;                /* the frame's context at the try */
    uint16_t try_depth, loop_depth;
    struct loop_ctx *loop;
    const char *handled;
    const struct fin_ctx *next; /* the next one out, in the same frame */
};

struct frame_ctx {
    uint32_t frame;
    uint32_t exc; /* node id, EXC_TOKEN|i, or IR_NO_NODE */
    uint16_t try_depth;
    uint16_t loop_depth;
    struct loop_ctx *loop;
    struct pend_vec *returns;
    int inline_depth;
    const char *handled;       /* in an except handler with a bare raise: the hidden name of the
                                  error it caught; else NULL */
    const struct fin_ctx *fin; /* the innermost try with a finally around, in this frame */
};

struct edge_rec {
    struct ir_edge e;
    uint32_t seq;
};

struct compiler {
    struct ir_program *p;
    struct ir_diags *d;
    cn_err rv;
    uint32_t max_nodes;     /* the graph's limit (ir_compile_limits) */
    struct cn_arena *arena; /* the DAG's (taken over from the program) */
    struct {
        struct ir_node *items;
        size_t len, cap;
    } nodes;
    struct {
        struct edge_rec *items;
        size_t len, cap;
    } edges;
    struct {
        struct ir_frame *items;
        size_t len, cap;
    } frames;
    struct {
        uint32_t *items; /* token -> node id */
        size_t len, cap;
    } tokens;
    uint32_t nloops;
    uint32_t nrets;
    uint32_t nexcs;
    uint32_t nfins;
    uint32_t next_seq;
    struct cn_strmap funcs; /* helper name -> index */
};

static void compile_block(struct compiler *c, struct frame_ctx *fc, const struct ir_block *b,
                          struct pend_vec *preds);

static void
fail(struct compiler *c, cn_err rv)
{
    if (c->rv == CN_OK) {
        c->rv = rv;
    }
}

static void
pend_push(struct compiler *c, struct pend_vec *v, uint32_t from, enum ir_edge_kind kind,
          uint32_t expr, uint32_t index)
{
    struct pend p = {from, (uint8_t) kind, expr, index, c->next_seq++};

    if (CN_VEC_PUSH(v, p) != CN_OK) {
        fail(c, CN_NOMEM);
    }
}

static void
pend_move(struct compiler *c, struct pend_vec *into, struct pend_vec *from)
{
    size_t i;

    for (i = 0; i < from->len; i++) {
        if (CN_VEC_PUSH(into, from->items[i]) != CN_OK) {
            fail(c, CN_NOMEM);
            break;
        }
    }
    from->len = 0;
}

static void
add_edge_seq(struct compiler *c, uint32_t from, uint32_t to, enum ir_edge_kind kind, uint32_t expr,
             uint32_t index, uint32_t seq)
{
    struct edge_rec r;

    r.e.from = from;
    r.e.to = to;
    r.e.kind = (uint8_t) kind;
    r.e.expr = expr;
    r.e.index = index;
    r.seq = seq;
    if (CN_VEC_PUSH(&c->edges, r) != CN_OK) {
        fail(c, CN_NOMEM);
    }
}

static void
add_edge(struct compiler *c, uint32_t from, uint32_t to, enum ir_edge_kind kind, uint32_t expr,
         uint32_t index)
{
    add_edge_seq(c, from, to, kind, expr, index, c->next_seq++);
}

/* Connects every pending edge to `to` (keeping each edge's own kind) and empties preds. */
static void
connect(struct compiler *c, struct pend_vec *preds, uint32_t to)
{
    size_t i;

    for (i = 0; i < preds->len; i++) {
        const struct pend *p = &preds->items[i];
        add_edge_seq(c, p->from, to, (enum ir_edge_kind) p->kind, p->expr, p->index, p->seq);
    }
    preds->len = 0;
}

static uint32_t
new_token(struct compiler *c)
{
    if (CN_VEC_PUSH(&c->tokens, IR_NO_NODE) != CN_OK) {
        fail(c, CN_NOMEM);
        return IR_NO_NODE;
    }
    return EXC_TOKEN | (uint32_t) (c->tokens.len - 1);
}

static void
resolve_token(struct compiler *c, uint32_t tok, uint32_t node)
{
    if (tok != IR_NO_NODE && (tok & EXC_TOKEN)) {
        c->tokens.items[tok & ~EXC_TOKEN] = node;
    }
}

/* Appends a node of `kind` in the current frame, connects preds to it and leaves preds empty.
 * Returns its id, or IR_NO_NODE after a failure (c->rv says which). */
static uint32_t
new_node(struct compiler *c, const struct frame_ctx *fc, enum ir_node_kind kind, struct ir_pos pos,
         struct pend_vec *preds)
{
    struct ir_node n;
    uint32_t id;

    if (c->rv != CN_OK) {
        return IR_NO_NODE;
    }
    if (c->nodes.len >= c->max_nodes) {
        ir_diags_add(c->d, pos.line, pos.col,
                     "workflow is too large: more than %u graph nodes after inlining helpers",
                     c->max_nodes);
        fail(c, CN_TOOBIG);
        return IR_NO_NODE;
    }
    memset(&n, 0, sizeof(n));
    n.kind = (uint8_t) kind;
    n.frame = fc->frame;
    n.line = pos.line;
    n.col = pos.col;
    n.exc = fc->exc;
    n.expr = IR_NO_EXPR;
    n.link = IR_NO_NODE;
    n.callee_frame = IR_NO_NODE;
    n.try_depth = fc->try_depth;
    n.loop_depth = fc->loop_depth;
    if (CN_VEC_PUSH(&c->nodes, n) != CN_OK) {
        fail(c, CN_NOMEM);
        return IR_NO_NODE;
    }
    id = (uint32_t) (c->nodes.len - 1);
    if (preds != NULL) {
        connect(c, preds, id);
    }
    return id;
}

static struct ir_node *
node_at(struct compiler *c, uint32_t id)
{
    return id == IR_NO_NODE ? NULL : &c->nodes.items[id];
}

/* Copies n names into the DAG arena. */
static const char **
copy_names(struct compiler *c, const char *const *names, uint32_t n)
{
    const char **r;

    if (n == 0) {
        return NULL;
    }
    r = cn_arena_calloc(c->arena, n, sizeof(*r));
    if (r == NULL) {
        fail(c, CN_NOMEM);
        return NULL;
    }
    memcpy(r, names, n * sizeof(*r));
    return r;
}

static void
set_targets(struct compiler *c, uint32_t id, const struct ir_names *t)
{
    struct ir_node *n = node_at(c, id);

    if (n != NULL) {
        n->targets = copy_names(c, t->items, t->len);
        n->ntargets = t->len;
        n->unpack = t->unpack;
    }
}

/* Adds a synthesized expression (loop machinery) positioned at the loop statement. */
static uint32_t
synth(struct compiler *c, enum ir_xkind kind, unsigned op, const char *name, struct ir_val val,
      struct ir_pos pos, const uint32_t *kids, uint32_t nkids)
{
    struct ir_expr e;
    uint32_t idx;
    cn_err rv;

    memset(&e, 0, sizeof(e));
    e.kind = (uint8_t) kind;
    e.op = (uint8_t) op;
    e.name = name;
    e.val = val;
    e.line = pos.line;
    e.col = pos.col;
    e.nargs = kind == IR_X_CMP ? 2 : nkids;
    if (c->rv != CN_OK) {
        ir_val_release(val);
        return IR_NO_EXPR;
    }
    if ((rv = ir_xpool_add(&c->p->exprs, &e, kids, nkids, &idx)) != CN_OK) {
        fail(c, rv);
        return IR_NO_EXPR;
    }
    return idx;
}

static uint32_t
synth_name(struct compiler *c, const char *name, struct ir_pos pos)
{
    return synth(c, IR_X_NAME, 0, name, ir_null(), pos, NULL, 0);
}

static void
compile_action(struct compiler *c, uint32_t id, const struct ir_action_call *a)
{
    struct ir_node *n = node_at(c, id);
    uint32_t i, nr = 0;

    if (n == NULL) {
        return;
    }
    n->name = a->name;
    n->call = a->call;
    n->version = a->version;
    n->nargs = a->nkwargs;
    if (a->nkwargs > 0) {
        n->argnames = cn_arena_calloc(c->arena, a->nkwargs, sizeof(*n->argnames));
        n->argexprs = cn_arena_calloc(c->arena, a->nkwargs, sizeof(*n->argexprs));
        if (n->argnames == NULL || n->argexprs == NULL) {
            fail(c, CN_NOMEM);
            return;
        }
        for (i = 0; i < a->nkwargs; i++) {
            n->argnames[i] = a->kwargs[i].name;
            n->argexprs[i] = a->kwargs[i].expr;
        }
    }
    for (i = 0; i < a->npolicies; i++) {
        if (a->policies[i].kind == IR_POLICY_RETRY) {
            nr++;
        } else if (a->policies[i].kind == IR_POLICY_TIMEOUT) {
            n->timeout_ms = a->policies[i].timeout_ms;
        } else {
            n->deadline_ms = a->policies[i].timeout_ms;
        }
    }
    if (nr == 0) {
        return;
    }
    n->retries = cn_arena_calloc(c->arena, nr, sizeof(*n->retries));
    if (n->retries == NULL) {
        fail(c, CN_NOMEM);
        return;
    }
    for (i = 0; i < a->npolicies; i++) {
        const struct ir_policy *p = &a->policies[i];
        struct ir_retry *r;
        if (p->kind != IR_POLICY_RETRY) {
            continue;
        }
        r = &n->retries[n->nretries++];
        r->types = copy_names(c, p->types.items, p->types.len);
        r->ntypes = p->types.len;
        r->retries = p->retries;
        r->backoff_ms = p->backoff_ms;
        r->max_backoff_ms = p->max_backoff_ms;
        r->multiplier_milli = p->multiplier_milli;
        r->max_elapsed_ms = p->max_elapsed_ms;
    }
}

/* Typed inputs and defaults (ir/types.h) on the ENTRY node: the default of each input as its
 * argument (IR_NO_EXPR: required), and the inputs' JSON Schema as its name, so that both are in
 * the encoded graph and its hash (two sources that differ only in a type are two versions).
 * An entry without either keeps the node as it always was. */
static void
compile_entry_params(struct compiler *c, uint32_t id, const struct ir_func *entry)
{
    struct cn_buf schema = CN_BUF_INIT;
    struct ir_node *n = node_at(c, id);
    uint32_t i;

    if (n == NULL || entry->params == NULL) {
        return;
    }
    n->nargs = entry->inputs.len;
    n->argnames = copy_names(c, entry->inputs.items, entry->inputs.len);
    n->argexprs =
        cn_arena_calloc(c->arena, entry->inputs.len ? entry->inputs.len : 1, sizeof(*n->argexprs));
    if (n->argexprs == NULL) {
        fail(c, CN_NOMEM);
        return;
    }
    for (i = 0; i < entry->inputs.len; i++) {
        n->argexprs[i] = entry->params[i].dflt;
    }
    if (ir_inputs_schema(entry, &c->p->exprs, "input", &schema) != CN_OK ||
        (n->name = cn_arena_strndup(c->arena, schema.data, schema.len)) == NULL) {
        fail(c, CN_NOMEM);
    }
    cn_buf_fini(&schema);
}

/* Inlines helper call `call` (an IR_X_CALL of a helper) binding its result to targets. */
static void
inline_call(struct compiler *c, struct frame_ctx *fc, uint32_t call, const struct ir_names *targets,
            struct pend_vec *preds)
{
    const struct ir_expr *e = &c->p->exprs.items[call];
    const struct ir_func *g = NULL;
    struct ir_pos pos = {e->line, e->col};
    struct pend_vec returns = {0};
    struct frame_ctx inner;
    struct ir_frame fr;
    struct ir_node *n;
    uint32_t enter, exit_id, i, j, npos = e->nargs - e->nkw;

    {
        uint32_t gi;
        if (!cn_strmap_get(&c->funcs, e->name, &gi)) {
            fail(c, CN_INVAL); /* the checker guarantees every helper exists */
            return;
        }
        g = &c->p->funcs[gi];
    }
    if (fc->inline_depth >= COMPILE_MAX_INLINE_DEPTH) {
        ir_diags_add(c->d, e->line, e->col, "helper calls nested too deeply (limit %d)",
                     COMPILE_MAX_INLINE_DEPTH);
        fail(c, CN_TOOBIG);
        return;
    }
    enter = new_node(c, fc, IR_N_CALL_ENTER, pos, preds);
    if (enter == IR_NO_NODE) {
        return;
    }
    fr.func = g->name;
    fr.parent = fc->frame;
    fr.call_node = enter;
    if (CN_VEC_PUSH(&c->frames, fr) != CN_OK) {
        fail(c, CN_NOMEM);
        return;
    }
    n = node_at(c, enter);
    n->name = g->name;
    n->callee_frame = (uint32_t) (c->frames.len - 1);
    n->nargs = g->inputs.len;
    if (g->inputs.len > 0) {
        n->argnames = copy_names(c, g->inputs.items, g->inputs.len);
        n->argexprs = cn_arena_calloc(c->arena, g->inputs.len, sizeof(*n->argexprs));
        if (n->argexprs == NULL) {
            fail(c, CN_NOMEM);
            return;
        }
        /* The checker guaranteed each parameter is given exactly once. */
        for (j = 0; j < g->inputs.len; j++) {
            n->argexprs[j] = IR_NO_EXPR;
        }
        for (i = 0; i < npos && i < g->inputs.len; i++) {
            n->argexprs[i] = ir_xchild(&c->p->exprs, e, i);
        }
        {
            /* Keyword arguments by name; hashing keeps huge calls linear. */
            struct cn_strmap params = CN_STRMAP_INIT;
            for (j = 0; j < g->inputs.len; j++) {
                if (cn_strmap_put(&params, g->inputs.items[j], j) != CN_OK) {
                    fail(c, CN_NOMEM);
                }
            }
            for (i = 0; i < e->nkw; i++) {
                if (cn_strmap_get(&params, e->kwnames[i], &j)) {
                    n->argexprs[j] = ir_xchild(&c->p->exprs, e, npos + i);
                }
            }
            cn_strmap_fini(&params);
        }
    }
    inner.frame = n->callee_frame;
    inner.exc = fc->exc; /* errors in a helper propagate to the caller's handlers */
    inner.try_depth = fc->try_depth;
    inner.loop_depth = 0;
    inner.loop = NULL;
    inner.returns = &returns;
    inner.inline_depth = fc->inline_depth + 1;
    inner.handled = NULL;
    inner.fin = NULL; /* a helper's return leaves the helper, not the caller's try */
    pend_push(c, preds, enter, IR_E_NEXT, IR_NO_EXPR, 0);
    compile_block(c, &inner, &g->body, preds);
    pend_move(c, preds, &returns);
    free(returns.items);
    exit_id = new_node(c, fc, IR_N_CALL_EXIT, pos, preds);
    if (exit_id == IR_NO_NODE) {
        return;
    }
    set_targets(c, exit_id, targets);
    n = node_at(c, exit_id);
    n->name = g->name;
    n->link = enter;
    n->callee_frame = node_at(c, enter)->callee_frame;
    node_at(c, enter)->link = exit_id;
    pend_push(c, preds, exit_id, IR_E_NEXT, IR_NO_EXPR, 0);
}

static void
compile_if(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
           struct pend_vec *preds)
{
    struct pend_vec ends = {0}, arm = {0};
    uint32_t br = new_node(c, fc, IR_N_BRANCH, s->pos, preds), i, j;
    bool has_else = false;

    if (br == IR_NO_NODE) {
        return;
    }
    for (i = 0; i < s->narms && c->rv == CN_OK; i++) {
        const struct ir_arm *a = &s->arms[i];
        if (a->cond == IR_NO_EXPR) {
            has_else = true;
            pend_push(c, &arm, br, IR_E_ELSE, IR_NO_EXPR, 0);
        } else {
            pend_push(c, &arm, br, IR_E_GUARD, a->cond, i);
        }
        compile_block(c, fc, &a->body, &arm);
        pend_move(c, &ends, &arm);
    }
    if (!has_else) {
        pend_push(c, &ends, br, IR_E_ELSE, IR_NO_EXPR, 0);
    }
    free(arm.items);
    if (ends.len > 0) {
        j = new_node(c, fc, IR_N_JOIN, s->pos, &ends);
        node_at(c, br)->link = j;
        pend_push(c, preds, j, IR_E_NEXT, IR_NO_EXPR, 0);
    }
    free(ends.items);
}

static const char *
loop_name(struct compiler *c, const char *stem, uint32_t k)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "$%s%u", stem, k);
    const char *r = cn_arena_strndup(c->arena, buf, (size_t) n);

    if (r == NULL) {
        fail(c, CN_NOMEM);
    }
    return r;
}

/* The start of `for targets in xs`: the LOOP_INIT node after preds, with the names of its
 * hidden sequence and index in *seq and *idx and the loop condition in *cond_expr. False when
 * it could not be made. */
static bool
compile_for_init(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
                 struct pend_vec *preds, const char **seq, const char **idx, uint32_t *cond_expr)
{
    uint32_t k = ++c->nloops, kids[2], lst, zero, e, init, ln, ops[3];
    struct ir_pos pos = s->pos;
    const char *t[2];

    *seq = loop_name(c, "seq", k);
    *idx = loop_name(c, "i", k);
    if (c->rv != CN_OK) {
        return false;
    }
    /* $seqK, $iK = [list(xs), 0]: list() gives Python's iteration order for lists,
     * dicts (keys) and strings (characters) and raises TypeError for anything else. */
    lst = synth(c, IR_X_CALL, IR_B_LIST, "list", ir_null(), pos, &s->expr, 1);
    zero = synth(c, IR_X_CONST, 0, NULL, ir_int(0), pos, NULL, 0);
    kids[0] = lst;
    kids[1] = zero;
    e = synth(c, IR_X_LIST, 0, NULL, ir_null(), pos, kids, 2);
    init = new_node(c, fc, IR_N_LOOP_INIT, s->pos, preds);
    if (init == IR_NO_NODE) {
        return false;
    }
    node_at(c, init)->expr = e;
    t[0] = *seq;
    t[1] = *idx;
    node_at(c, init)->targets = copy_names(c, t, 2);
    node_at(c, init)->ntargets = 2;
    node_at(c, init)->unpack = true;
    pend_push(c, preds, init, IR_E_NEXT, IR_NO_EXPR, 0);
    /* $iK < len($seqK) */
    kids[0] = synth_name(c, *seq, pos);
    ln = synth(c, IR_X_CALL, IR_B_LEN, "len", ir_null(), pos, kids, 1);
    ops[0] = synth_name(c, *idx, pos);
    ops[1] = ln;
    ops[2] = IR_CMP_LT;
    *cond_expr = synth(c, IR_X_CMP, 0, NULL, ir_null(), pos, ops, 3);
    return true;
}

/* The top of a for body: targets = $seqK[$iK] (LOOP_EXTRACT). */
static void
compile_for_extract(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
                    struct pend_vec *preds, const char *seq, const char *idx)
{
    uint32_t kids[2], get, ext;

    kids[0] = synth_name(c, seq, s->pos);
    kids[1] = synth_name(c, idx, s->pos);
    get = synth(c, IR_X_INDEX, 0, NULL, ir_null(), s->pos, kids, 2);
    ext = new_node(c, fc, IR_N_LOOP_EXTRACT, s->pos, preds);
    if (ext != IR_NO_NODE) {
        node_at(c, ext)->expr = get;
        set_targets(c, ext, &s->targets);
        pend_push(c, preds, ext, IR_E_NEXT, IR_NO_EXPR, 0);
    }
}

/* The end of a for body, reached also by its continues: $iK = $iK + 1 (LOOP_INCR) and the back
 * edge to cond. */
static void
compile_for_incr(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
                 struct pend_vec *preds, struct loop_ctx *lc, const char *idx, uint32_t cond)
{
    uint32_t kids[2], plus, incr;

    pend_move(c, preds, &lc->continues);
    if (preds->len == 0) {
        return;
    }
    kids[0] = synth_name(c, idx, s->pos);
    kids[1] = synth(c, IR_X_CONST, 0, NULL, ir_int(1), s->pos, NULL, 0);
    plus = synth(c, IR_X_BIN, IR_OP_ADD, NULL, ir_null(), s->pos, kids, 2);
    incr = new_node(c, fc, IR_N_LOOP_INCR, s->pos, preds);
    if (incr != IR_NO_NODE) {
        node_at(c, incr)->expr = plus;
        node_at(c, incr)->targets = copy_names(c, &idx, 1);
        node_at(c, incr)->ntargets = 1;
        node_at(c, incr)->link = cond;
        add_edge(c, incr, cond, IR_E_BACK, IR_NO_EXPR, 0);
    }
}

/* The end of a while body: back edges to cond from where the body ends and from its
 * continues. */
static void
compile_while_back(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
                   struct pend_vec *preds, const struct loop_ctx *lc, uint32_t cond)
{
    size_t i;

    for (i = 0; i < preds->len; i++) {
        if (preds->items[i].kind != IR_E_NEXT) {
            /* `while c: pass` leaves the TRUE edge itself pending; a join keeps both the
             * edge's meaning and the back edge. */
            uint32_t j = new_node(c, fc, IR_N_JOIN, s->pos, preds);
            pend_push(c, preds, j, IR_E_NEXT, IR_NO_EXPR, 0);
            break;
        }
    }
    for (i = 0; i < preds->len; i++) {
        add_edge(c, preds->items[i].from, cond, IR_E_BACK, IR_NO_EXPR, 0);
    }
    preds->len = 0;
    for (i = 0; i < lc->continues.len; i++) {
        add_edge(c, lc->continues.items[i].from, cond, IR_E_BACK, IR_NO_EXPR, 0);
    }
}

static void
compile_loop(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
             struct pend_vec *preds)
{
    struct loop_ctx lc = {{0}, {0}};
    struct loop_ctx *saved = fc->loop;
    struct pend_vec exits = {0};
    uint32_t cond, exit_id, cond_expr = s->expr;
    const char *seq = NULL, *idx = NULL;
    bool is_for = s->kind == IR_S_FOR;

    if (is_for && !compile_for_init(c, fc, s, preds, &seq, &idx, &cond_expr)) {
        return;
    }
    cond = new_node(c, fc, IR_N_LOOP_COND, s->pos, preds);
    if (cond == IR_NO_NODE) {
        return;
    }
    node_at(c, cond)->expr = cond_expr;
    pend_push(c, preds, cond, IR_E_TRUE, IR_NO_EXPR, 0);
    pend_push(c, &exits, cond, IR_E_FALSE, IR_NO_EXPR, 0);
    fc->loop_depth++;
    if (is_for) {
        compile_for_extract(c, fc, s, preds, seq, idx);
    }
    fc->loop = &lc;
    compile_block(c, fc, &s->body, preds);
    fc->loop = saved;
    if (is_for) {
        compile_for_incr(c, fc, s, preds, &lc, idx, cond);
    } else {
        compile_while_back(c, fc, s, preds, &lc, cond);
    }
    fc->loop_depth--;
    pend_move(c, &exits, &lc.breaks);
    exit_id = new_node(c, fc, IR_N_LOOP_EXIT, s->pos, &exits);
    if (exit_id != IR_NO_NODE) {
        node_at(c, cond)->link = exit_id;
        node_at(c, exit_id)->link = cond;
        pend_push(c, preds, exit_id, IR_E_NEXT, IR_NO_EXPR, 0);
    }
    free(exits.items);
    free(lc.breaks.items);
    free(lc.continues.items);
}

/* Whether block b holds a bare `raise` that refers to the handler around b: anywhere in it,
 * but in the handlers of a try inside it, which catch errors of their own. */
static bool
has_bare_raise(const struct ir_block *b)
{
    uint32_t i, k;

    for (i = 0; i < b->len; i++) {
        const struct ir_stmt *s = b->items[i];
        if (s->kind == IR_S_RAISE && s->item == NULL && s->expr == IR_NO_EXPR) {
            return true;
        }
        for (k = 0; k < s->narms; k++) {
            if (has_bare_raise(&s->arms[k].body)) {
                return true;
            }
        }
        if (has_bare_raise(&s->body) || has_bare_raise(&s->final)) {
            return true;
        }
    }
    return false;
}

#define ERROR_BASES_MAX 64

/* Appends the bases of error type t to names[0..*n) once each, in depth-first order: a
 * built-in type's as Python lists them, a declared type's bases each followed by its own. The
 * checker made sure every chain ends at built-in types, without a cycle. */
static void
bases_add(const struct ir_program *p, const char *t, const char **names, size_t *n, int depth)
{
    const char *const *builtin = ir_error_builtin_bases(t);
    const char *add[ERROR_BASES_MAX];
    size_t na = 0, i, k;

    if (builtin != NULL) {
        for (k = 0; builtin[k] != NULL && na < ERROR_BASES_MAX; k++) {
            add[na++] = builtin[k];
        }
    } else {
        for (i = 0; i < p->nclasses; i++) {
            if (strcmp(p->classes[i].name, t) == 0) {
                for (k = 0; k < p->classes[i].bases.len && na < ERROR_BASES_MAX; k++) {
                    add[na++] = p->classes[i].bases.items[k];
                }
                break;
            }
        }
    }
    for (i = 0; i < na; i++) {
        for (k = 0; k < *n && strcmp(names[k], add[i]) != 0; k++) {
        }
        if (k == *n && *n < ERROR_BASES_MAX) {
            names[(*n)++] = add[i];
        }
        if (builtin == NULL && depth < ERROR_BASES_MAX) {
            bases_add(p, add[i], names, n, depth + 1);
        }
    }
}

/* The bases of error type `type` as a constant list of strings (bases_add), "Exception" last,
 * as every error's. */
static uint32_t
error_bases(struct compiler *c, const char *type, struct ir_pos pos)
{
    const char *names[ERROR_BASES_MAX + 1];
    uint32_t kids[ERROR_BASES_MAX + 1];
    size_t n = 0, i, k = 0;

    bases_add(c->p, type, names, &n, 0);
    for (i = 0; i < n; i++) {
        if (strcmp(names[i], "Exception") != 0) {
            names[k++] = names[i];
        }
    }
    names[k++] = "Exception";
    /* a list of string constants, as a literal would be: what the DAG's codec carries */
    for (i = 0; i < k && c->rv == CN_OK; i++) {
        struct ir_val v;
        if (ir_str_from_cstr(names[i], &v) != CN_OK) {
            fail(c, CN_NOMEM);
            return IR_NO_EXPR;
        }
        kids[i] = synth(c, IR_X_CONST, 0, NULL, v, pos, NULL, 0);
    }
    return synth(c, IR_X_LIST, 0, NULL, ir_null(), pos, kids, (uint32_t) k);
}

/* `raise T(message[, details])`: a RAISE node naming T, with the message as str(message) (""
 * without one), the details (None without) and T's bases; `raise e` and a bare `raise` (the
 * error the handler caught): a RAISE node of that value. No edge leaves it but its error's. */
static void
compile_raise(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
              struct pend_vec *preds)
{
    static const char *const argnames[] = {"message", "details", "bases"};
    uint32_t id = new_node(c, fc, IR_N_RAISE, s->pos, preds), k;
    struct ir_node *n;
    uint32_t args[3];

    preds->len = 0; /* nothing follows a raise */
    if (id == IR_NO_NODE) {
        return;
    }
    if (s->item == NULL) {
        node_at(c, id)->expr = s->expr != IR_NO_EXPR ? s->expr : synth_name(c, fc->handled, s->pos);
        return;
    }
    args[0] = s->raise_args[0] != IR_NO_EXPR
                  ? synth(c, IR_X_CALL, IR_B_STR, "str", ir_null(), s->pos, &s->raise_args[0], 1)
                  : synth(c, IR_X_CONST, 0, NULL, ir_null(), s->pos, NULL, 0);
    if (s->raise_args[0] == IR_NO_EXPR && c->rv == CN_OK) {
        struct ir_val empty;
        if (ir_str_from_cstr("", &empty) != CN_OK) {
            fail(c, CN_NOMEM);
            return;
        }
        c->p->exprs.items[args[0]].val = empty;
    }
    args[1] = s->raise_args[1] != IR_NO_EXPR
                  ? s->raise_args[1]
                  : synth(c, IR_X_CONST, 0, NULL, ir_null(), s->pos, NULL, 0);
    args[2] = error_bases(c, s->item, s->pos);
    n = node_at(c, id);
    n->name = s->item;
    n->nargs = 3;
    n->argnames = cn_arena_calloc(c->arena, 3, sizeof(*n->argnames));
    n->argexprs = cn_arena_calloc(c->arena, 3, sizeof(*n->argexprs));
    if (n->argnames == NULL || n->argexprs == NULL) {
        fail(c, CN_NOMEM);
        return;
    }
    for (k = 0; k < 3; k++) {
        n->argnames[k] = argnames[k];
        n->argexprs[k] = args[k];
    }
}

static void
compile_try_except(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
                   struct pend_vec *preds)
{
    struct pend_vec ends = {0}, h = {0};
    uint32_t outer_exc = fc->exc, tok, try_id, exc_id, i;
    struct ir_node *n;

    try_id = new_node(c, fc, IR_N_TRY, s->pos, preds);
    tok = new_token(c);
    if (try_id == IR_NO_NODE || c->rv != CN_OK) {
        return;
    }
    pend_push(c, preds, try_id, IR_E_NEXT, IR_NO_EXPR, 0);
    fc->exc = tok;
    fc->try_depth++;
    compile_block(c, fc, &s->body, preds);
    fc->try_depth--;
    fc->exc = outer_exc;
    pend_move(c, &ends, preds);
    exc_id = new_node(c, fc, IR_N_EXCEPT, s->pos, NULL);
    if (exc_id == IR_NO_NODE) {
        goto out;
    }
    resolve_token(c, tok, exc_id);
    node_at(c, try_id)->link = exc_id;
    n = node_at(c, exc_id);
    n->link = try_id;
    n->nhandlers = s->nhandlers;
    n->handlers = cn_arena_calloc(c->arena, s->nhandlers ? s->nhandlers : 1, sizeof(*n->handlers));
    if (n->handlers == NULL) {
        fail(c, CN_NOMEM);
        goto out;
    }
    for (i = 0; i < s->nhandlers && c->rv == CN_OK; i++) {
        const struct ir_handler *hd = &s->handlers[i];
        const char *saved = fc->handled;
        n = node_at(c, exc_id); /* the node array may move while compiling handlers */
        n->handlers[i].types = copy_names(c, hd->types.items, hd->types.len);
        n->handlers[i].ntypes = hd->types.len;
        n->handlers[i].bind = hd->bind;
        pend_push(c, &h, exc_id, IR_E_HANDLER, IR_NO_EXPR, i);
        if (has_bare_raise(&hd->body)) {
            /* A bare raise re-raises the caught error even if the handler rebinds its `as`
             * name: the handler binds a hidden name, and the `as` name from it. Only such
             * handlers change, so every graph without one keeps its node numbers. */
            fc->handled = loop_name(c, "exc", ++c->nexcs);
            node_at(c, exc_id)->handlers[i].bind = fc->handled;
            if (hd->bind != NULL && fc->handled != NULL) {
                uint32_t as = new_node(c, fc, IR_N_ASSIGN, hd->bind_pos, &h);
                if (as != IR_NO_NODE) {
                    struct ir_node *an = node_at(c, as);
                    an->expr = synth_name(c, fc->handled, hd->bind_pos);
                    an->targets = copy_names(c, &hd->bind, 1);
                    an->ntargets = 1;
                }
                pend_push(c, &h, as, IR_E_NEXT, IR_NO_EXPR, 0);
            }
        }
        compile_block(c, fc, &hd->body, &h);
        fc->handled = saved;
        pend_move(c, &ends, &h);
    }
    if (ends.len > 0) {
        uint32_t j = new_node(c, fc, IR_N_JOIN, s->pos, &ends);
        pend_push(c, preds, j, IR_E_NEXT, IR_NO_EXPR, 0);
    }
out:
    free(ends.items);
    free(h.items);
}

/* Compiles after preds a copy of each finally block a jump leaves, innermost first: every one of
 * the frame for a return (all), those of the tries begun inside the innermost loop for a break
 * or a continue. Each copy compiles as if it stood where its try does: an error in it goes to
 * the handlers around that try. fc is as it was afterwards. */
static void
compile_finals(struct compiler *c, struct frame_ctx *fc, bool all, struct pend_vec *preds)
{
    const struct frame_ctx saved = *fc;
    const struct fin_ctx *f;

    for (f = saved.fin; f != NULL && preds->len > 0 && c->rv == CN_OK; f = f->next) {
        if (!all && f->loop_depth < saved.loop_depth) {
            break; /* this try holds the loop: the jump stays inside it */
        }
        fc->exc = f->exc;
        fc->try_depth = f->try_depth;
        fc->loop_depth = f->loop_depth;
        fc->loop = f->loop;
        fc->handled = f->handled;
        fc->fin = f->next;
        compile_block(c, fc, f->body, preds);
    }
    *fc = saved;
}

/* `return v` inside a try with a finally: v is evaluated first, into a hidden $retK, then the
 * finally blocks run, then $retK is returned: Python's order, and what a finally block assigns
 * does not change what is returned. The RETURN stands outside them all: an error it raises
 * (a value that cannot be stored) must not run them again. */
static void
compile_return_through(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
                       struct pend_vec *preds)
{
    const char *tmp = NULL;
    const struct fin_ctx *f;
    struct frame_ctx out = *fc;
    uint32_t id;

    if (s->expr != IR_NO_EXPR) {
        struct ir_names t = {NULL, NULL, 1, false};
        tmp = loop_name(c, "ret", ++c->nrets);
        t.items = &tmp;
        if (s->helper_call) {
            inline_call(c, fc, s->expr, &t, preds);
        } else {
            id = new_node(c, fc, IR_N_ASSIGN, s->pos, preds);
            if (id != IR_NO_NODE) {
                node_at(c, id)->expr = s->expr;
                set_targets(c, id, &t);
            }
            pend_push(c, preds, id, IR_E_NEXT, IR_NO_EXPR, 0);
        }
    }
    compile_finals(c, fc, true, preds);
    if (preds->len == 0) {
        return; /* a finally block that always raises */
    }
    for (f = fc->fin; f->next != NULL; f = f->next) {
    }
    out.exc = f->exc;
    out.try_depth = f->try_depth;
    id = new_node(c, &out, IR_N_RETURN, s->pos, preds);
    if (id != IR_NO_NODE && tmp != NULL) {
        node_at(c, id)->expr = synth_name(c, tmp, s->pos);
    }
    pend_push(c, fc->returns, id, IR_E_NEXT, IR_NO_EXPR, 0);
}

/* `try ... finally` (with or without except clauses): the try and its handlers inside a hidden
 * catch-all try, whose handler binds the error to a hidden $finN, runs a copy of the finally
 * block and raises $finN again; a copy after the normal end; and a copy before each return,
 * break or continue that leaves the try (compile_finals). Which way the try was left is which
 * copy runs, so nothing about it is kept at run time, and replay needs nothing new. */
static void
compile_try(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
            struct pend_vec *preds)
{
    struct pend_vec ends = {0}, h = {0};
    struct fin_ctx fin;
    uint32_t tok, try_id, exc_id, raise_id;
    const char *name;
    struct ir_node *n;

    if (!s->has_final) {
        compile_try_except(c, fc, s, preds);
        return;
    }
    try_id = new_node(c, fc, IR_N_TRY, s->pos, preds);
    tok = new_token(c);
    if (try_id == IR_NO_NODE || c->rv != CN_OK) {
        return;
    }
    pend_push(c, preds, try_id, IR_E_NEXT, IR_NO_EXPR, 0);
    fin.body = &s->final;
    fin.exc = fc->exc;
    fin.try_depth = fc->try_depth;
    fin.loop_depth = fc->loop_depth;
    fin.loop = fc->loop;
    fin.handled = fc->handled;
    fin.next = fc->fin;
    fc->exc = tok;
    fc->try_depth++;
    fc->fin = &fin;
    if (s->nhandlers > 0) {
        compile_try_except(c, fc, s, preds);
    } else {
        compile_block(c, fc, &s->body, preds);
    }
    fc->fin = fin.next;
    fc->try_depth--;
    fc->exc = fin.exc;
    pend_move(c, &ends, preds);
    exc_id = new_node(c, fc, IR_N_EXCEPT, s->final_pos, NULL);
    name = loop_name(c, "fin", ++c->nfins);
    if (exc_id == IR_NO_NODE || name == NULL) {
        goto out;
    }
    resolve_token(c, tok, exc_id);
    node_at(c, try_id)->link = exc_id;
    n = node_at(c, exc_id);
    n->link = try_id;
    n->nhandlers = 1;
    n->handlers = cn_arena_calloc(c->arena, 1, sizeof(*n->handlers));
    if (n->handlers == NULL) {
        fail(c, CN_NOMEM);
        goto out;
    }
    n->handlers[0].bind = name; /* no types: every error */
    if (ends.len > 0) {
        uint32_t j = new_node(c, fc, IR_N_JOIN, s->pos, &ends);
        pend_push(c, preds, j, IR_E_NEXT, IR_NO_EXPR, 0);
        compile_block(c, fc, &s->final, preds);
    }
    pend_push(c, &h, exc_id, IR_E_HANDLER, IR_NO_EXPR, 0);
    compile_block(c, fc, &s->final, &h);
    if (h.len > 0) {
        raise_id = new_node(c, fc, IR_N_RAISE, s->final_pos, &h);
        if (raise_id != IR_NO_NODE) {
            node_at(c, raise_id)->expr = synth_name(c, name, s->final_pos);
        }
    }
out:
    free(ends.items);
    free(h.items);
}

static void
compile_fanout(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
               struct pend_vec *preds)
{
    struct pend_vec ends = {0}, br = {0};
    uint32_t outer_exc = fc->exc, tok, fork, agg, i;
    bool spread = s->kind == IR_S_SPREAD;

    fork = new_node(c, fc, spread ? IR_N_SPREAD : IR_N_PARALLEL, s->pos, preds);
    tok = new_token(c);
    if (fork == IR_NO_NODE || c->rv != CN_OK) {
        return;
    }
    /* An error in one branch does not interrupt the others: it goes to the AGGREGATE, which
     * raises the lowest-index error once every branch has finished (docs/semantics.md, spread and
     * parallel). */
    fc->exc = tok;
    if (spread) {
        uint32_t act;
        node_at(c, fork)->expr = s->expr;
        node_at(c, fork)->name = s->item;
        pend_push(c, &br, fork, IR_E_FORK, IR_NO_EXPR, 0);
        act = new_node(c, fc, IR_N_ACTION, s->action.pos, &br);
        compile_action(c, act, &s->action);
        pend_push(c, &ends, act, IR_E_NEXT, IR_NO_EXPR, 0);
    } else {
        for (i = 0; i < s->nbranches && c->rv == CN_OK; i++) {
            const struct ir_pbranch *b = &s->branches[i];
            pend_push(c, &br, fork, IR_E_FORK, IR_NO_EXPR, i);
            if (b->is_action) {
                uint32_t act = new_node(c, fc, IR_N_ACTION, b->action.pos, &br);
                compile_action(c, act, &b->action);
                pend_push(c, &br, act, IR_E_NEXT, IR_NO_EXPR, 0);
            } else {
                struct ir_names none = {NULL, NULL, 0, false};
                inline_call(c, fc, b->call, &none, &br);
            }
            pend_move(c, &ends, &br);
        }
    }
    fc->exc = outer_exc;
    agg = new_node(c, fc, IR_N_AGGREGATE, s->pos, &ends);
    if (agg != IR_NO_NODE) {
        resolve_token(c, tok, agg);
        set_targets(c, agg, &s->targets);
        node_at(c, agg)->link = fork;
        node_at(c, fork)->link = agg;
        node_at(c, agg)->fail_fast = s->fail_fast;
        node_at(c, fork)->fail_fast = s->fail_fast;
        pend_push(c, preds, agg, IR_E_NEXT, IR_NO_EXPR, 0);
    }
    free(ends.items);
    free(br.items);
}

/* A node that evaluates one expression (ASSIGN, SLEEP, RETURN, PUBLISH) and continues. */
static uint32_t
simple_node(struct compiler *c, struct frame_ctx *fc, enum ir_node_kind kind,
            const struct ir_stmt *s, struct pend_vec *preds)
{
    uint32_t id = new_node(c, fc, kind, s->pos, preds);

    if (id != IR_NO_NODE) {
        node_at(c, id)->expr = s->expr;
        set_targets(c, id, &s->targets);
    }
    return id;
}

static void
compile_stmt(struct compiler *c, struct frame_ctx *fc, const struct ir_stmt *s,
             struct pend_vec *preds)
{
    uint32_t id;

    switch (s->kind) {
    case IR_S_ASSIGN:
    case IR_S_SLEEP:
        id = simple_node(c, fc, s->kind == IR_S_ASSIGN ? IR_N_ASSIGN : IR_N_SLEEP, s, preds);
        pend_push(c, preds, id, IR_E_NEXT, IR_NO_EXPR, 0);
        break;
    case IR_S_PUBLISH:
        id = simple_node(c, fc, IR_N_PUBLISH, s, preds);
        if (id != IR_NO_NODE) {
            node_at(c, id)->name = s->item;
        }
        pend_push(c, preds, id, IR_E_NEXT, IR_NO_EXPR, 0);
        break;
    case IR_S_ACTION:
        /* A child call is placed at its `run`/`start` word, which is what `cairnctl register`
         * points at when the child is missing; an action keeps the statement's position. */
        id = new_node(c, fc, IR_N_ACTION, s->action.call == IR_CALL_ACTION ? s->pos : s->action.pos,
                      preds);
        compile_action(c, id, &s->action);
        set_targets(c, id, &s->targets);
        pend_push(c, preds, id, IR_E_NEXT, IR_NO_EXPR, 0);
        break;
    case IR_S_CALL:
        inline_call(c, fc, s->expr, &s->targets, preds);
        break;
    case IR_S_SPREAD:
    case IR_S_PARALLEL:
        compile_fanout(c, fc, s, preds);
        break;
    case IR_S_IF:
        compile_if(c, fc, s, preds);
        break;
    case IR_S_FOR:
    case IR_S_WHILE:
        compile_loop(c, fc, s, preds);
        break;
    case IR_S_TRY:
        compile_try(c, fc, s, preds);
        break;
    case IR_S_RAISE:
        compile_raise(c, fc, s, preds);
        break;
    case IR_S_BREAK:
    case IR_S_CONTINUE:
        if (fc->fin != NULL && fc->loop != NULL) {
            compile_finals(c, fc, false, preds);
            if (preds->len == 0) {
                break; /* a finally block that always raises */
            }
        }
        id = new_node(c, fc, s->kind == IR_S_BREAK ? IR_N_BREAK : IR_N_CONTINUE, s->pos, preds);
        if (fc->loop != NULL) {
            pend_push(c, s->kind == IR_S_BREAK ? &fc->loop->breaks : &fc->loop->continues, id,
                      IR_E_NEXT, IR_NO_EXPR, 0);
        }
        break;
    case IR_S_RETURN:
        if (fc->fin != NULL) {
            compile_return_through(c, fc, s, preds);
            break;
        }
        if (s->helper_call) {
            /* return helper(...) == $retK = helper(...); return $retK */
            const char *tmp = loop_name(c, "ret", ++c->nrets);
            struct ir_names t = {&tmp, NULL, 1, false};
            inline_call(c, fc, s->expr, &t, preds);
            id = new_node(c, fc, IR_N_RETURN, s->pos, preds);
            if (id != IR_NO_NODE) {
                node_at(c, id)->expr = synth_name(c, tmp, s->pos);
            }
        } else {
            id = simple_node(c, fc, IR_N_RETURN, s, preds);
        }
        pend_push(c, fc->returns, id, IR_E_NEXT, IR_NO_EXPR, 0);
        break;
    case IR_S_PASS:
    default:
        break;
    }
}

static void
compile_block(struct compiler *c, struct frame_ctx *fc, const struct ir_block *b,
              struct pend_vec *preds)
{
    uint32_t i;

    for (i = 0; i < b->len && c->rv == CN_OK; i++) {
        if (preds->len == 0) {
            break; /* the rest of the block is unreachable */
        }
        compile_stmt(c, fc, b->items[i], preds);
    }
}

static int
edge_cmp(const void *a, const void *b)
{
    const struct edge_rec *x = a, *y = b;

    if (x->e.from != y->e.from) {
        return x->e.from < y->e.from ? -1 : 1;
    }
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Moves the vectors into the DAG's arena, resolves exception tokens and indexes edges. */
static cn_err
finish(struct compiler *c, struct ir_dag *d)
{
    size_t i;

    d->nnodes = (uint32_t) c->nodes.len;
    d->nedges = (uint32_t) c->edges.len;
    d->nframes = (uint32_t) c->frames.len;
    d->nodes = cn_arena_calloc(c->arena, c->nodes.len ? c->nodes.len : 1, sizeof(*d->nodes));
    d->edges = cn_arena_calloc(c->arena, c->edges.len ? c->edges.len : 1, sizeof(*d->edges));
    d->frames = cn_arena_calloc(c->arena, c->frames.len ? c->frames.len : 1, sizeof(*d->frames));
    if (d->nodes == NULL || d->edges == NULL || d->frames == NULL) {
        return CN_NOMEM;
    }
    qsort(c->edges.items, c->edges.len, sizeof(c->edges.items[0]), edge_cmp);
    memcpy(d->frames, c->frames.items, c->frames.len * sizeof(*d->frames));
    for (i = 0; i < c->nodes.len; i++) {
        struct ir_node *n = &c->nodes.items[i];
        if (n->exc != IR_NO_NODE && (n->exc & EXC_TOKEN)) {
            n->exc = c->tokens.items[n->exc & ~EXC_TOKEN];
        }
        n->first_edge = 0;
        n->nedges = 0;
    }
    for (i = 0; i < c->edges.len; i++) {
        struct ir_node *n = &c->nodes.items[c->edges.items[i].e.from];
        d->edges[i] = c->edges.items[i].e;
        if (n->nedges == 0) {
            n->first_edge = (uint32_t) i;
        }
        n->nedges++;
    }
    memcpy(d->nodes, c->nodes.items, c->nodes.len * sizeof(*d->nodes));
    return CN_OK;
}

/* ---- size estimate ------------------------------------------------------------------------ */

/* A lower bound on the nodes inlining would create, so that an exponential "diamond" of
 * helpers (each calling the next one twice) is refused before anything is built, at the call
 * responsible. Saturates instead of overflowing. The call graph is acyclic (the checker
 * refused recursion), so memoised recursion terminates; its depth is bounded by the inline
 * depth limit, enforced here too. */
#define EST_INF (UINT64_MAX / 4)

struct est {
    const struct ir_program *p;
    struct cn_strmap *funcs;
    uint64_t *memo; /* per function; 0 = not computed */
    int depth;
    bool too_deep;  /* the inline depth limit was hit: the inliner reports that itself */
    uint64_t worst; /* the entry function's most expensive call, when tracking */
    uint32_t worst_call;
    bool track;
};

static uint64_t est_func(struct est *e, uint32_t fi);

static uint64_t
est_add(uint64_t a, uint64_t b)
{
    return a > EST_INF - b ? EST_INF : a + b;
}

static uint64_t
est_call(struct est *e, uint32_t call)
{
    const struct ir_expr *x = &e->p->exprs.items[call];
    uint32_t gi;

    uint64_t n;
    bool track = e->track;

    if (!cn_strmap_get(e->funcs, x->name, &gi)) {
        return 1;
    }
    e->track = false;                /* only calls written in the entry function are blamed */
    n = est_add(2, est_func(e, gi)); /* call enter + exit + the body */
    e->track = track;
    if (track && n > e->worst) {
        e->worst = n;
        e->worst_call = call;
    }
    return n;
}

/* The return, break and continue statements in b, at any depth: each may leave a try through
 * its finally (an upper bound: a break of a loop inside b leaves no try). */
static uint64_t
jumps_in(const struct ir_block *b)
{
    uint64_t n = 0;
    uint32_t i, k;

    for (i = 0; i < b->len; i++) {
        const struct ir_stmt *s = b->items[i];
        n += s->kind == IR_S_RETURN || s->kind == IR_S_BREAK || s->kind == IR_S_CONTINUE;
        for (k = 0; k < s->narms; k++) {
            n += jumps_in(&s->arms[k].body);
        }
        for (k = 0; k < s->nhandlers; k++) {
            n += jumps_in(&s->handlers[k].body);
        }
        n += jumps_in(&s->body) + jumps_in(&s->final);
    }
    return n;
}

static uint64_t
est_block(struct est *e, const struct ir_block *b)
{
    uint64_t n = 0;
    uint32_t i, k;

    for (i = 0; i < b->len; i++) {
        const struct ir_stmt *s = b->items[i];
        n = est_add(n, 1);
        if (s->kind == IR_S_CALL || (s->kind == IR_S_RETURN && s->helper_call)) {
            n = est_add(n, est_call(e, s->expr));
        }
        for (k = 0; k < s->nbranches; k++) {
            if (!s->branches[k].is_action) {
                n = est_add(n, est_call(e, s->branches[k].call));
            }
        }
        for (k = 0; k < s->narms; k++) {
            n = est_add(n, est_block(e, &s->arms[k].body));
        }
        n = est_add(n, est_block(e, &s->body));
        for (k = 0; k < s->nhandlers; k++) {
            n = est_add(n, est_block(e, &s->handlers[k].body));
        }
        if (s->has_final) { /* a copy per way out (compile_try_finally) */
            uint64_t f = est_block(e, &s->final), ways = 2 + jumps_in(&s->body);
            for (k = 0; k < s->nhandlers; k++) {
                ways += jumps_in(&s->handlers[k].body);
            }
            n = est_add(n, ways != 0 && f > EST_INF / ways ? EST_INF : f * ways);
        }
    }
    return n;
}

static uint64_t
est_func(struct est *e, uint32_t fi)
{
    if (e->memo[fi] == 0) {
        if (++e->depth > COMPILE_MAX_INLINE_DEPTH + 1) {
            e->too_deep = true;
            e->memo[fi] = 1;
        } else {
            e->memo[fi] = est_add(1, est_block(e, &e->p->funcs[fi].body));
        }
        e->depth--;
    }
    return e->memo[fi];
}

/* Reports the entry function's most expensive call when the estimate is over the limit.
 * Returns true when compiling may go ahead. */
static bool
size_check(struct compiler *c, const struct ir_func *entry)
{
    struct est e;
    uint64_t total;
    bool ok = true;

    memset(&e, 0, sizeof(e));
    e.p = c->p;
    e.funcs = &c->funcs;
    e.worst_call = IR_NO_EXPR;
    e.track = true;
    e.memo = calloc(c->p->nfuncs + 1, sizeof(*e.memo));
    if (e.memo == NULL) {
        fail(c, CN_NOMEM);
        return false;
    }
    total = est_add(2, est_block(&e, &entry->body));
    if (total > c->max_nodes && !e.too_deep) {
        uint32_t line = entry->pos.line, col = entry->pos.col;
        if (e.worst_call != IR_NO_EXPR) {
            line = c->p->exprs.items[e.worst_call].line;
            col = c->p->exprs.items[e.worst_call].col;
        }
        ir_diags_add(c->d, line, col,
                     "workflow is too large: inlining the helpers makes at least %.3g graph "
                     "nodes (limit %u); each call inlines a copy of the helper, so helpers that "
                     "call other helpers several times multiply",
                     (double) total, c->max_nodes);
        fail(c, CN_TOOBIG);
        ok = false;
    }
    free(e.memo);
    return ok;
}

cn_err
ir_compile_program(struct ir_program *p, struct ir_diags *diags, struct ir_dag **out)
{
    return ir_compile_program_limited(p, IR_COMPILE_MAX_NODES, diags, out);
}

cn_err
ir_compile_program_limited(struct ir_program *p, uint32_t max_nodes, struct ir_diags *diags,
                           struct ir_dag **out)
{
    struct compiler c;
    const struct ir_func *entry = ir_program_entry(p);
    struct pend_vec preds = {0}, returns = {0};
    struct frame_ctx fc;
    struct ir_frame f0;
    struct ir_dag *d;
    uint32_t id;
    cn_err rv;

    if (entry == NULL) {
        return CN_INVAL;
    }
    memset(&c, 0, sizeof(c));
    c.p = p;
    c.d = diags;
    c.max_nodes = max_nodes < IR_COMPILE_MAX_NODES ? max_nodes : IR_COMPILE_MAX_NODES;
    c.arena = p->arena;
    for (uint32_t fi = 0; fi < p->nfuncs; fi++) {
        if (cn_strmap_put(&c.funcs, p->funcs[fi].name, fi) != CN_OK) {
            cn_strmap_fini(&c.funcs);
            return CN_NOMEM;
        }
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        cn_strmap_fini(&c.funcs);
        return CN_NOMEM;
    }
    f0.func = entry->name;
    f0.parent = IR_NO_NODE;
    f0.call_node = IR_NO_NODE;
    if (CN_VEC_PUSH(&c.frames, f0) != CN_OK) {
        fail(&c, CN_NOMEM);
    }
    memset(&fc, 0, sizeof(fc));
    fc.frame = 0;
    fc.exc = IR_NO_NODE;
    fc.returns = &returns;
    if (!size_check(&c, entry)) {
        free(c.frames.items);
        cn_strmap_fini(&c.funcs);
        free(d);
        return c.rv;
    }
    id = new_node(&c, &fc, IR_N_ENTRY, entry->pos, &preds);
    set_targets(&c, id, &entry->inputs);
    compile_entry_params(&c, id, entry);
    pend_push(&c, &preds, id, IR_E_NEXT, IR_NO_EXPR, 0);
    compile_block(&c, &fc, &entry->body, &preds);
    pend_move(&c, &preds, &returns);
    d->entry = id;
    d->output = new_node(&c, &fc, IR_N_OUTPUT, entry->pos, &preds);
    set_targets(&c, d->output, &entry->outputs);
    rv = c.rv;
    if (rv == CN_OK) {
        rv = finish(&c, d);
    }
    free(preds.items);
    free(returns.items);
    free(c.nodes.items);
    free(c.edges.items);
    free(c.frames.items);
    free(c.tokens.items);
    cn_strmap_fini(&c.funcs);
    if (rv != CN_OK) {
        free(d);
        return rv;
    }
    /* The DAG takes over the arena (names, AST strings) and the expression pool. */
    d->arena = p->arena;
    p->arena = NULL;
    d->exprs = p->exprs;
    memset(&p->exprs, 0, sizeof(p->exprs));
    d->entry_func = entry->name;
    d->timeout_ms = entry->timeout_ms;
    d->entry_params = entry->params;
    *out = d;
    return CN_OK;
}

cn_err
ir_compile_source(const char *src, size_t len, struct ir_diags *diags, struct ir_dag **out)
{
    const struct ir_compile_limits ceilings = {IR_COMPILE_MAX_SOURCE_BYTES, IR_COMPILE_MAX_NODES};

    return ir_compile_source_limited(src, len, &ceilings, diags, out);
}

cn_err
ir_compile_source_limited(const char *src, size_t len, const struct ir_compile_limits *lim,
                          struct ir_diags *diags, struct ir_dag **out)
{
    struct ir_program *p = NULL;
    size_t max_src = lim->max_source_bytes < IR_COMPILE_MAX_SOURCE_BYTES
                         ? lim->max_source_bytes
                         : IR_COMPILE_MAX_SOURCE_BYTES;
    cn_err rv;

    if (len > max_src) {
        ir_diags_add(diags, 1, 1, "source is %zu bytes, over the limit of %zu bytes", len, max_src);
        return CN_TOOBIG;
    }
    if ((rv = ir_parse(src, len, diags, &p)) != CN_OK) {
        return rv;
    }
    if ((rv = ir_check(p, diags)) == CN_OK) {
        rv = ir_compile_program_limited(p, lim->max_nodes, diags, out);
    }
    ir_program_free(p);
    return rv;
}
