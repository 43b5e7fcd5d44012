/* SPDX-License-Identifier: MIT */
/*
 * Statements and blocks: if/elif/else, for, while, try/except, pass, break, continue, return,
 * sleep, assignments (plain, augmented, unpacking) with an expression, an action, a spread or
 * a parallel block on the right, and expression statements. A broken statement is skipped as a
 * whole (ir_ps_sync_stmt), so the next one is still checked. Pure; no global state, no threads
 * or locks.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"
#include "ir/parser_int.h"

struct stmt_vec {
    struct ir_stmt **items;
    size_t len, cap;
};

static struct ir_stmt *
new_stmt(struct parser *ps, enum ir_stmt_kind kind, const struct ir_token *t)
{
    struct ir_stmt *s = cn_arena_alloc(ps->prog->arena, sizeof(*s));

    if (s == NULL) {
        nomem(ps);
        return NULL;
    }
    s->kind = kind;
    s->pos = tok_pos(t);
    s->expr = IR_NO_EXPR;
    s->raise_args[0] = s->raise_args[1] = IR_NO_EXPR;
    return s;
}

static bool
end_simple(struct parser *ps)
{
    if (at(ps, IR_TK_NEWLINE)) {
        advance(ps);
        return true;
    }
    if (at(ps, IR_TK_EOF) || at(ps, IR_TK_DEDENT)) {
        return true;
    }
    ir_ps_error_at(ps, peek(ps), "expected end of line after statement");
    return false;
}

/* The error for `x[k] = v` or `x.f = v` (e is the target): values are immutable, so it shows
 * how to build the new value instead. */
static void
report_immutable_target(struct parser *ps, const struct ir_expr *e)
{
    const struct ir_xpool *p = &ps->prog->exprs;
    uint32_t base = ir_xchild(p, e, 0);
    /* Point at the container, where the user reads the assignment. */
    struct ir_pos at_base = {p->items[base].line, p->items[base].col};
    struct cn_buf b = CN_BUF_INIT, k = CN_BUF_INIT;

    if (ir_expr_print(p, base, &b) != CN_OK ||
        (e->kind == IR_X_INDEX && ir_expr_print(p, ir_xchild(p, e, 1), &k) != CN_OK)) {
        nomem(ps);
    } else if (e->kind == IR_X_INDEX) {
        ir_ps_error_pos(ps, at_base,
                        "item assignment is not supported: values are immutable; build a new "
                        "value instead, e.g. %s = %s | {%s: ...}",
                        b.data, b.data, k.data);
    } else {
        ir_ps_error_pos(ps, at_base,
                        "attribute assignment is not supported: values are immutable; build a new "
                        "value instead, e.g. %s = %s | {\"%s\": ...}",
                        b.data, b.data, e->name);
    }
    cn_buf_fini(&b);
    cn_buf_fini(&k);
}

/* Turns parsed target expressions into names, with the immutability errors docs/language.md
 * describes. */
static bool
targets_from_exprs(struct parser *ps, const struct u32_vec *ex, struct ir_names *out)
{
    struct name_list nl = {{0}, {0}, CN_STRMAP_INIT};
    size_t i;

    for (i = 0; i < ex->len; i++) {
        const struct ir_expr *e = &ps->prog->exprs.items[ex->items[i]];
        struct ir_pos pos = {e->line, e->col};
        if (e->kind == IR_X_INDEX || e->kind == IR_X_ATTR) {
            report_immutable_target(ps, e);
            goto fail;
        }
        if (e->kind != IR_X_NAME) {
            ir_ps_error_pos(ps, pos,
                            "cannot assign to an expression; the left side of '=' must be "
                            "one or more names");
            goto fail;
        }
        if (!ir_ps_names_add(ps, &nl, e->name, pos,
                             "name '%s' appears twice in the assignment targets", e->name)) {
            goto fail;
        }
    }
    *out = ir_ps_names_finish(ps, &nl);
    return true;
fail:
    ir_ps_names_drop(&nl);
    return false;
}

static struct ir_stmt *
parse_parallel(struct parser *ps, struct ir_stmt *s)
{
    struct ir_pbranch *br = NULL;
    size_t n = 0, cap = 0;

    advance(ps); /* parallel */
    while (ir_ps_at_fail_fast(ps)) {
        if (!ir_parse_fail_fast(ps, &s->fail_fast)) {
            return s;
        }
    }
    if (!ir_ps_expect(ps, IR_TK_COLON, "after 'parallel' (or 'parallel [fail_fast]')")) {
        return s;
    }
    if (!at(ps, IR_TK_NEWLINE) || peek_at(ps, 1)->kind != IR_TK_INDENT) {
        ir_ps_error_at(ps, peek(ps), "expected an indented block of calls after 'parallel:'");
        return s;
    }
    advance(ps);
    advance(ps);
    while (!at(ps, IR_TK_DEDENT) && !at(ps, IR_TK_EOF)) {
        struct ir_pbranch b;
        const struct ir_token *t = peek(ps);
        memset(&b, 0, sizeof(b));
        b.pos = tok_pos(t);
        if (child_call_at(ps) == IR_CALL_START || child_call_at(ps) == IR_CALL_SIGNAL) {
            /* A branch is something to wait for; a start or a signal has nothing to wait for. */
            ir_ps_error_at(ps, t,
                           child_call_at(ps) == IR_CALL_START
                               ? "start returns at once, so it does not belong in a parallel "
                                 "block: write `id = start wf(...)` statements one after another"
                               : "signal returns at once, so it does not belong in a parallel "
                                 "block: write the signal statements one after another");
            break;
        }
        if (t->kind == IR_TK_AT || child_call_at(ps) == IR_CALL_RUN ||
            ir_call_is_wait(child_call_at(ps)) || child_call_at(ps) == IR_CALL_JOIN) {
            b.is_action = true;
            if (!ir_parse_action(ps, &b.action, NULL)) {
                break;
            }
        } else {
            uint32_t e = ir_parse_expr(ps);
            if (ps->panic) {
                break;
            }
            if (ps->prog->exprs.items[e].kind != IR_X_CALL) {
                ir_ps_error_at(
                    ps, t,
                    "a parallel block holds only calls: actions (@mod.action(...)), child "
                    "workflows (run wf(...)), waits (wait name) or helper functions "
                    "(name(...))");
                break;
            }
            b.call = e;
        }
        if (!ir_ps_append(ps, (void **) &br, &cap, &n, &b, sizeof(b)) || !end_simple(ps)) {
            break;
        }
    }
    if (!ps->panic) {
        if (n == 0) {
            ir_ps_error_at(ps, peek(ps), "a parallel block needs at least one call");
        }
        accept(ps, IR_TK_DEDENT);
        s->branches = ir_ps_arena_copy(ps, br, n, sizeof(*br));
        s->nbranches = (uint32_t) n;
    } else {
        /* Skip what remains of the block so its lines do not cascade. */
        int nest = 1;
        while (nest > 0 && !at(ps, IR_TK_EOF)) {
            enum ir_tok k = advance(ps)->kind;
            nest += k == IR_TK_INDENT ? 1 : k == IR_TK_DEDENT ? -1 : 0;
        }
        ps->synced = true; /* the caller must not skip the next statement too */
    }
    free(br);
    return s;
}

/* `spread COLL:item -> @action(...)` (or `-> run wf(...)`, `-> start wf(...)`); the 'spread'
 * token is current. */
static bool
parse_spread(struct parser *ps, struct ir_stmt *s)
{
    const struct ir_token *t;

    advance(ps);
    s->expr = ir_parse_or(ps);
    if (ps->panic) {
        return false;
    }
    if (!ir_ps_expect(ps, IR_TK_COLON, "after the spread collection (spread items:item -> @...)")) {
        return false;
    }
    if ((t = ir_ps_expect_name(ps, "expected the item variable name after ':' in spread")) ==
        NULL) {
        return false;
    }
    s->item = t->str;
    s->item_pos = tok_pos(t);
    if (!ir_ps_expect(ps, IR_TK_ARROW, "after the spread item variable")) {
        return false;
    }
    /* After '->' only a call can follow, so `run`/`start` are keywords whatever comes next. */
    if (!at(ps, IR_TK_AT) && !is_child_word(peek(ps))) {
        ir_ps_error_at(ps, peek(ps),
                       "spread runs one action, child workflow, wait or signal per item: "
                       "expected '@module.action(...)', 'run workflow(...)', 'wait name' or "
                       "'signal name(to=id)'");
        return false;
    }
    return ir_parse_action(ps, &s->action, &s->fail_fast);
}

/* `publish NAME = expr`: `publish` is a word like `wait`, a statement only when a name and '='
 * follow (no expression has two names in a row, so `publish = 3` stays an assignment). */
static bool
publish_at(const struct parser *ps)
{
    return is_name_tok(peek(ps), "publish") && peek_at(ps, 1)->kind == IR_TK_NAME &&
           peek_at(ps, 2)->kind == IR_TK_ASSIGN;
}

static struct ir_stmt *
parse_publish(struct parser *ps)
{
    struct ir_stmt *s = new_stmt(ps, IR_S_PUBLISH, advance(ps));
    const struct ir_token *name = advance(ps);

    if (s == NULL) {
        return NULL;
    }
    if (strlen(name->str) > IR_MAX_WAIT_NAME) {
        ir_ps_error_at(ps, name, "a published value's name is at most %d characters",
                       IR_MAX_WAIT_NAME);
        return s;
    }
    s->item = name->str;
    s->item_pos = tok_pos(name);
    advance(ps); /* '=' */
    s->expr = ir_parse_expr(ps);
    if (!ps->panic) {
        end_simple(ps);
    }
    return s;
}

/* Assignment, augmented assignment, action/spread/parallel, or an expression statement. */
static struct ir_stmt *
parse_simple_assign(struct parser *ps)
{
    const struct ir_token *t = peek(ps);
    struct u32_vec lhs = {0}, rhs = {0};
    struct ir_stmt *s = new_stmt(ps, IR_S_ASSIGN, t);
    bool aug;
    enum ir_binop op;
    uint32_t e;

    if (s == NULL) {
        return NULL;
    }
    e = ir_parse_exprs(ps, &lhs);
    if (ps->panic) {
        goto out;
    }
    op = ir_ps_aug_op(peek(ps)->kind, &aug);
    if (aug) {
        const struct ir_token *opt = advance(ps);
        uint32_t kids[2];
        if (!targets_from_exprs(ps, &lhs, &s->targets)) {
            goto out;
        }
        if (s->targets.len != 1 || e != lhs.items[0]) {
            ir_ps_error_at(ps, opt, "augmented assignment takes exactly one name on the left");
            goto out;
        }
        kids[0] = e;
        kids[1] = ir_parse_expr(ps);
        if (ps->panic) {
            goto out;
        }
        s->expr = ir_ps_mk(ps, IR_X_BIN, op, opt, kids, 2);
        end_simple(ps);
        goto out;
    }
    if (!accept(ps, IR_TK_ASSIGN)) {
        s->expr = e; /* expression statement */
        end_simple(ps);
        goto out;
    }
    if (!targets_from_exprs(ps, &lhs, &s->targets)) {
        goto out;
    }
    /* `a, = x` unpacks as `a, b = x` does: parse_exprs made a list of the one target. */
    s->targets.unpack = s->targets.len > 1 || e != lhs.items[0];
    t = peek(ps);
    if (t->kind == IR_TK_AT || child_call_at(ps) != IR_CALL_ACTION) {
        s->kind = IR_S_ACTION;
        if (ir_parse_action(ps, &s->action, NULL)) {
            if (s->action.call == IR_CALL_START && s->targets.unpack) {
                ir_ps_error_pos(ps, s->pos,
                                "start gives one value, the child's id (a string): it cannot be "
                                "unpacked; write `child_id = start ...`");
            } else if (s->action.call == IR_CALL_SIGNAL && s->targets.unpack) {
                ir_ps_error_pos(ps, s->pos,
                                "signal gives one value, what became of the signal (a string): "
                                "it cannot be unpacked; write `sent = signal ...`");
            } else {
                end_simple(ps);
            }
        }
    } else if (t->kind == IR_TK_SPREAD) {
        s->kind = IR_S_SPREAD;
        if (parse_spread(ps, s)) {
            end_simple(ps);
        }
    } else if (t->kind == IR_TK_PARALLEL) {
        s->kind = IR_S_PARALLEL;
        parse_parallel(ps, s);
    } else {
        s->expr = ir_parse_exprs(ps, &rhs);
        if (!ps->panic && at(ps, IR_TK_ASSIGN)) {
            ir_ps_error_at(ps, peek(ps), "chained assignment (a = b = ...) is not supported");
        }
        if (!ps->panic) {
            end_simple(ps);
        }
    }
out:
    free(lhs.items);
    free(rhs.items);
    return s;
}

static void
parse_if(struct parser *ps, struct ir_stmt *s, const struct ir_token *t)
{
    struct ir_arm *arms = NULL;
    size_t n = 0, cap = 0;
    struct ir_arm a;

    for (;;) {
        memset(&a, 0, sizeof(a));
        a.pos = tok_pos(t);
        if (t->kind == IR_TK_ELSE) {
            a.cond = IR_NO_EXPR;
            if (!ir_ps_expect(ps, IR_TK_COLON, "after 'else'")) {
                break;
            }
            a.body = ir_parse_block(ps, "'else'");
        } else {
            a.cond = ir_parse_expr(ps);
            if (ps->panic) {
                break;
            }
            if (!ir_ps_expect(ps, IR_TK_COLON,
                              t->kind == IR_TK_IF ? "after if condition"
                                                  : "after elif condition")) {
                break;
            }
            a.body = ir_parse_block(ps, t->kind == IR_TK_IF ? "'if'" : "'elif'");
        }
        if (ps->panic || !ir_ps_append(ps, (void **) &arms, &cap, &n, &a, sizeof(a))) {
            break;
        }
        if (a.cond == IR_NO_EXPR || !(at(ps, IR_TK_ELIF) || at(ps, IR_TK_ELSE))) {
            break;
        }
        t = advance(ps);
    }
    s->arms = ir_ps_arena_copy(ps, arms, n, sizeof(*arms));
    s->narms = (uint32_t) n;
    free(arms);
}

/* The loop variables after 'for', through 'in': `a`, `a, b` or `(a, b)`; a trailing comma
 * unpacks, as in `for a, in pairs:`. */
static bool
parse_loop_vars(struct parser *ps, struct ir_names *out)
{
    struct name_list nl = {{0}, {0}, CN_STRMAP_INIT};
    bool paren = accept(ps, IR_TK_LPAREN), unpack = false;

    do {
        const struct ir_token *n = peek(ps);
        if (nl.names.len > 0 && (at(ps, IR_TK_IN) || (paren && at(ps, IR_TK_RPAREN)))) {
            unpack = true;
            break;
        }
        if (ir_ps_expect_name(ps, "expected a loop variable name after 'for'") == NULL) {
            goto fail;
        }
        if (!ir_ps_names_add(ps, &nl, n->str, tok_pos(n), "loop variable '%s' appears twice",
                             n->str)) {
            goto fail;
        }
    } while (accept(ps, IR_TK_COMMA));
    if (paren && !ir_ps_expect(ps, IR_TK_RPAREN, "to close the loop variables")) {
        goto fail;
    }
    if (!ir_ps_expect(ps, IR_TK_IN, "after the loop variable")) {
        goto fail;
    }
    *out = ir_ps_names_finish(ps, &nl);
    out->unpack = unpack || out->len > 1;
    return true;
fail:
    ir_ps_names_drop(&nl);
    return false;
}

/* What ends a loop header, `expr ':'`, and the body, into s; after and what name the header for
 * the errors. */
static void
parse_loop_rest(struct parser *ps, struct ir_stmt *s, const char *after, const char *what)
{
    s->expr = ir_parse_expr(ps);
    if (ps->panic || !ir_ps_expect(ps, IR_TK_COLON, after)) {
        return;
    }
    s->body = ir_parse_block(ps, what);
}

static void
parse_for(struct parser *ps, struct ir_stmt *s, const struct ir_token *t)
{
    (void) t;
    if (parse_loop_vars(ps, &s->targets)) {
        parse_loop_rest(ps, s, "after for loop header", "'for'");
    }
}

static void
parse_while(struct parser *ps, struct ir_stmt *s, const struct ir_token *t)
{
    (void) t;
    parse_loop_rest(ps, s, "after while condition", "'while'");
}

static void
parse_try(struct parser *ps, struct ir_stmt *s, const struct ir_token *t)
{
    struct ir_handler *hs = NULL;
    size_t n = 0, cap = 0;

    (void) t;
    if (!ir_ps_expect(ps, IR_TK_COLON, "after 'try'")) {
        return;
    }
    s->body = ir_parse_block(ps, "'try'");
    if (ps->panic) {
        return;
    }
    if (!at(ps, IR_TK_EXCEPT) && !at(ps, IR_TK_FINALLY)) {
        ir_ps_error_at(ps, peek(ps), "expected 'except' or 'finally' after the try block");
        return;
    }
    while (at(ps, IR_TK_EXCEPT)) {
        struct ir_handler h;
        const struct ir_token *e = advance(ps);
        memset(&h, 0, sizeof(h));
        h.pos = tok_pos(e);
        if (n > 0 && hs[n - 1].types.len == 0) {
            ir_ps_error_at(ps, e, "a bare 'except:' must be the last handler");
            break;
        }
        if (at(ps, IR_TK_AS)) {
            /* Python rejects it too: a handler that binds the error names what it catches. */
            ir_ps_error_at(
                ps, peek(ps),
                "'except as NAME' needs an error type before 'as' (e.g. 'except ValueError "
                "as e:'); a bare 'except:' binds no name");
            break;
        }
        if (!at(ps, IR_TK_COLON)) {
            if (!ir_parse_types(ps, &h.types, "an error type after 'except'")) {
                break;
            }
        }
        if (accept(ps, IR_TK_AS)) {
            const struct ir_token *b = ir_ps_expect_name(ps, "expected a name after 'as'");
            if (b == NULL) {
                break;
            }
            h.bind = b->str;
            h.bind_pos = tok_pos(b);
        }
        if (!ir_ps_expect(ps, IR_TK_COLON, "after except clause")) {
            break;
        }
        h.body = ir_parse_block(ps, "'except'");
        if (ps->panic || !ir_ps_append(ps, (void **) &hs, &cap, &n, &h, sizeof(h))) {
            break;
        }
    }
    s->handlers = ir_ps_arena_copy(ps, hs, n, sizeof(*hs));
    s->nhandlers = (uint32_t) n;
    free(hs);
    if (!ps->panic && at(ps, IR_TK_FINALLY)) {
        const struct ir_token *f = advance(ps);
        s->final_pos = tok_pos(f);
        if (ir_ps_expect(ps, IR_TK_COLON, "after 'finally'")) {
            s->final = ir_parse_block(ps, "'finally'");
            s->has_final = !ps->panic;
        }
    }
}

/* The compound statements: each parser gets the statement made from its keyword kw (consumed)
 * and fills in the rest. */
static const struct {
    enum ir_tok kw;
    enum ir_stmt_kind kind;
    void (*parse)(struct parser *ps, struct ir_stmt *s, const struct ir_token *kw);
} compound_stmts[] = {
    {IR_TK_IF, IR_S_IF, parse_if},
    {IR_TK_FOR, IR_S_FOR, parse_for},
    {IR_TK_WHILE, IR_S_WHILE, parse_while},
    {IR_TK_TRY, IR_S_TRY, parse_try},
};

static struct ir_stmt *
parse_stmt(struct parser *ps)
{
    const struct ir_token *t = peek(ps);
    struct ir_stmt *s;
    size_t i;

    for (i = 0; i < sizeof(compound_stmts) / sizeof(compound_stmts[0]); i++) {
        if (t->kind == compound_stmts[i].kw) {
            advance(ps);
            if ((s = new_stmt(ps, compound_stmts[i].kind, t)) != NULL) {
                compound_stmts[i].parse(ps, s, t);
            }
            return s;
        }
    }
    switch (t->kind) {
    case IR_TK_PASS:
    case IR_TK_BREAK:
    case IR_TK_CONTINUE:
        advance(ps);
        s = new_stmt(ps,
                     t->kind == IR_TK_PASS    ? IR_S_PASS
                     : t->kind == IR_TK_BREAK ? IR_S_BREAK
                                              : IR_S_CONTINUE,
                     t);
        end_simple(ps);
        return s;
    case IR_TK_RETURN: {
        struct u32_vec v = {0};
        advance(ps);
        s = new_stmt(ps, IR_S_RETURN, t);
        if (s != NULL && !at(ps, IR_TK_NEWLINE) && !at(ps, IR_TK_EOF) && !at(ps, IR_TK_DEDENT)) {
            s->expr = ir_parse_exprs(ps, &v);
        }
        free(v.items);
        if (!ps->panic) {
            end_simple(ps);
        }
        return s;
    }
    case IR_TK_RAISE:
        /* `raise T(msg)`, `raise e`, bare `raise`: the checker tells a call of an error type
         * from an expression that gives an error value. */
        advance(ps);
        s = new_stmt(ps, IR_S_RAISE, t);
        if (s != NULL) {
            if (!at(ps, IR_TK_NEWLINE) && !at(ps, IR_TK_EOF) && !at(ps, IR_TK_DEDENT)) {
                s->expr = ir_parse_expr(ps);
            }
        }
        if (!ps->panic && is_name_tok(peek(ps), "from")) {
            ir_ps_error_at(ps, peek(ps),
                           "raise ... from ... is not supported: an error's bases are declared "
                           "with its type (class PaymentDeclined(ValueError): pass), and its "
                           "cause goes in its details");
        } else if (!ps->panic) {
            end_simple(ps);
        }
        return s;
    case IR_TK_SLEEP:
        advance(ps);
        s = new_stmt(ps, IR_S_SLEEP, t);
        if (s != NULL) {
            s->expr = ir_parse_expr(ps);
        }
        if (!ps->panic) {
            end_simple(ps);
        }
        return s;
    case IR_TK_AT:
        s = new_stmt(ps, IR_S_ACTION, t);
        if (s != NULL && ir_parse_action(ps, &s->action, NULL)) {
            end_simple(ps);
        }
        return s;
    case IR_TK_SPREAD:
        s = new_stmt(ps, IR_S_SPREAD, t);
        if (s != NULL && parse_spread(ps, s)) {
            end_simple(ps);
        }
        return s;
    case IR_TK_PARALLEL:
        s = new_stmt(ps, IR_S_PARALLEL, t);
        return s != NULL ? parse_parallel(ps, s) : NULL;
    case IR_TK_INDENT:
        ir_ps_error_at(ps, t, "unexpected indent");
        return NULL;
    case IR_TK_ELSE:
    case IR_TK_ELIF:
        ir_ps_error_at(ps, t, "'%s' without a matching 'if' (check the indentation)", t->str);
        return NULL;
    case IR_TK_EXCEPT:
        ir_ps_error_at(ps, t, "'except' without a matching 'try' (check the indentation)");
        return NULL;
    case IR_TK_FN:
        ir_ps_error_at(ps, t,
                       "functions must be defined at top level, not inside another function");
        return NULL;
    default:
        if (publish_at(ps)) {
            return parse_publish(ps);
        }
        if (child_call_at(ps) != IR_CALL_ACTION) {
            s = new_stmt(ps, IR_S_ACTION, t);
            if (s != NULL && ir_parse_action(ps, &s->action, NULL)) {
                end_simple(ps);
            }
            return s;
        }
        return parse_simple_assign(ps);
    }
}

/* Statements up to the end of the block; the INDENT has been consumed. */
static struct ir_block
parse_stmts(struct parser *ps)
{
    struct stmt_vec v = {0};
    struct ir_block b = {NULL, 0};

    while (!at(ps, IR_TK_DEDENT) && !at(ps, IR_TK_EOF) && ps->rv == CN_OK) {
        size_t before = ps->i;
        struct ir_stmt *s = parse_stmt(ps);
        if (ps->panic) {
            ir_ps_sync_stmt(ps);
            if (ps->i == before) {
                advance(ps); /* guarantee progress */
            }
            continue;
        }
        if (s != NULL && CN_VEC_PUSH(&v, s) != CN_OK) {
            nomem(ps);
        }
    }
    accept(ps, IR_TK_DEDENT);
    b.items = ir_ps_arena_copy(ps, v.items, v.len, sizeof(v.items[0]));
    b.len = (uint32_t) v.len;
    free(v.items);
    return b;
}

struct ir_block
ir_parse_block(struct parser *ps, const char *what)
{
    struct ir_block b = {NULL, 0};
    struct ir_stmt *s;
    enum ir_tok k = peek(ps)->kind;

    if (!at(ps, IR_TK_NEWLINE)) {
        if (k == IR_TK_IF || k == IR_TK_FOR || k == IR_TK_WHILE || k == IR_TK_TRY ||
            k == IR_TK_EOF) {
            ir_ps_error_at(ps, peek(ps), "expected an indented block after %s", what);
            return b;
        }
        s = parse_stmt(ps);
        if (ps->panic || s == NULL) {
            return b;
        }
        b.items = ir_ps_arena_copy(ps, &s, 1, sizeof(s));
        b.len = 1;
        return b;
    }
    advance(ps);
    if (!at(ps, IR_TK_INDENT)) {
        ir_ps_error_at(ps, peek(ps), "expected an indented block after %s", what);
        return b;
    }
    advance(ps);
    /* The lexer already caps indentation levels; this bounds the recursion on its own terms. */
    if (ps->block_depth >= IR_PARSE_MAX_DEPTH) {
        ir_ps_error_at(ps, peek(ps), "blocks nested too deeply (limit %d)", IR_PARSE_MAX_DEPTH);
        return b;
    }
    ps->block_depth++;
    b = parse_stmts(ps);
    ps->block_depth--;
    return b;
}
