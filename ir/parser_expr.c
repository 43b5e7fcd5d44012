/* SPDX-License-Identifier: MIT */
/*
 * Expressions, loosest level first (the grammar is in parser.c): conditional, `or`, `and`,
 * `not`, comparison chains, the binary levels `|`, `+ -`, `* / // %`, unary minus, postfix
 * index/slice/field/call, and atoms (literals, names, list, tuple and dict displays). Each
 * builds nodes of the program's flat expression pool; the nesting depth is bounded (enter),
 * so a hostile file cannot overflow the stack. Pure; no global state, no threads or locks.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"
#include "ir/parser_int.h"

/* Adds e, with its kids (for a comparison, operands then operators), to the pool. */
static uint32_t
add_expr(struct parser *ps, const struct ir_expr *e, const struct ir_token *t, const uint32_t *kids,
         uint32_t nkids)
{
    uint32_t idx;

    switch (ir_xpool_add(&ps->prog->exprs, e, kids, nkids, &idx)) {
    case CN_OK:
        return idx;
    case CN_DEPTH:
        ir_ps_error_at(ps, t, "expression is too deeply nested (more than %d levels)",
                       IR_EXPR_MAX_HEIGHT);
        return IR_NO_EXPR;
    default:
        nomem(ps);
        return IR_NO_EXPR;
    }
}

uint32_t
ir_ps_mk(struct parser *ps, enum ir_xkind kind, unsigned op, const struct ir_token *t,
         const uint32_t *kids, uint32_t nkids)
{
    struct ir_expr e;

    memset(&e, 0, sizeof(e));
    e.kind = (uint8_t) kind;
    e.op = (uint8_t) op;
    e.line = t->line;
    e.col = t->col;
    e.nargs = nkids;
    if (ps->rv != CN_OK) {
        return IR_NO_EXPR;
    }
    return add_expr(ps, &e, t, kids, nkids);
}

static uint32_t
mk_const(struct parser *ps, const struct ir_token *t, struct ir_val v)
{
    struct ir_expr e;
    uint32_t idx;

    memset(&e, 0, sizeof(e));
    e.kind = IR_X_CONST;
    e.line = t->line;
    e.col = t->col;
    e.val = v;
    if (ps->rv != CN_OK || ir_xpool_add(&ps->prog->exprs, &e, NULL, 0, &idx) != CN_OK) {
        ir_val_release(v);
        nomem(ps);
        return IR_NO_EXPR;
    }
    return idx;
}

static uint32_t
mk_named(struct parser *ps, enum ir_xkind kind, const struct ir_token *t, const char *name,
         const uint32_t *kids, uint32_t nkids)
{
    uint32_t idx = ir_ps_mk(ps, kind, 0, t, kids, nkids);

    if (idx != IR_NO_EXPR) {
        ps->prog->exprs.items[idx].name = name;
    }
    return idx;
}

static bool
enter(struct parser *ps)
{
    if (ps->depth >= IR_PARSE_MAX_DEPTH) {
        ir_ps_error_at(ps, peek(ps), "expression nested too deeply (limit %d)", IR_PARSE_MAX_DEPTH);
        return false;
    }
    ps->depth++;
    return true;
}

static void
leave(struct parser *ps)
{
    ps->depth--;
}

/* Elements of a list display or call arguments, up to the closing bracket `close`. */
static bool
parse_expr_list_until(struct parser *ps, enum ir_tok close, struct u32_vec *out,
                      const char *context)
{
    while (!at(ps, close)) {
        uint32_t e = ir_parse_expr(ps);
        if (ps->panic) {
            return false;
        }
        if (at(ps, IR_TK_FOR)) {
            ir_ps_error_at(ps, peek(ps),
                           "comprehensions are not supported; build the list with a for "
                           "loop (or run an action per item with spread)");
            return false;
        }
        if (!ps_alloc_ok(ps, CN_VEC_PUSH(out, e))) {
            return false;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    return ir_ps_expect(ps, close, context);
}

static uint32_t
parse_dict(struct parser *ps, const struct ir_token *open)
{
    struct u32_vec kids = {0};
    uint32_t r = IR_NO_EXPR;

    while (!at(ps, IR_TK_RBRACE)) {
        uint32_t k = ir_parse_expr(ps), v;
        if (ps->panic) {
            goto out;
        }
        if (!ir_ps_expect(ps, IR_TK_COLON, "after dict key")) {
            goto out;
        }
        v = ir_parse_expr(ps);
        if (ps->panic) {
            goto out;
        }
        if (!ps_alloc_ok(ps, CN_VEC_PUSH(&kids, k)) || !ps_alloc_ok(ps, CN_VEC_PUSH(&kids, v))) {
            goto out;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    if (ir_ps_expect(ps, IR_TK_RBRACE, "to close the dict")) {
        r = ir_ps_mk(ps, IR_X_DICT, 0, open, kids.items, (uint32_t) kids.len);
    }
out:
    free(kids.items);
    return r;
}

/* After '(' (consumed, open): a parenthesized expression, or a tuple display, which is a list
 * in Cairn: values have no tuple type. */
static uint32_t
parse_paren(struct parser *ps, const struct ir_token *open)
{
    struct u32_vec kids = {0};
    uint32_t r;

    if (at(ps, IR_TK_RPAREN)) {
        ir_ps_error_at(ps, peek(ps), "empty tuple '()' is not supported; use [] for a list");
        return IR_NO_EXPR;
    }
    r = ir_parse_expr(ps);
    if (ps->panic) {
        return IR_NO_EXPR;
    }
    if (!at(ps, IR_TK_COMMA)) {
        return ir_ps_expect(ps, IR_TK_RPAREN, "to close '('") ? r : IR_NO_EXPR;
    }
    if (!ps_alloc_ok(ps, CN_VEC_PUSH(&kids, r))) {
        return IR_NO_EXPR;
    }
    advance(ps);
    r = IR_NO_EXPR;
    if (parse_expr_list_until(ps, IR_TK_RPAREN, &kids, "to close the tuple")) {
        r = ir_ps_mk(ps, IR_X_LIST, 0, open, kids.items, (uint32_t) kids.len);
    }
    free(kids.items);
    return r;
}

/* After '[' (consumed, open): a list display. */
static uint32_t
parse_list(struct parser *ps, const struct ir_token *open)
{
    struct u32_vec kids = {0};
    uint32_t r = IR_NO_EXPR;

    if (parse_expr_list_until(ps, IR_TK_RBRACK, &kids, "to close the list")) {
        r = ir_ps_mk(ps, IR_X_LIST, 0, open, kids.items, (uint32_t) kids.len);
    }
    free(kids.items);
    return r;
}

static uint32_t
parse_atom(struct parser *ps)
{
    const struct ir_token *t = peek(ps);
    struct ir_val v;

    switch (t->kind) {
    case IR_TK_NAME:
        if (ir_call_is_wait(child_call_at(ps)) || child_call_at(ps) == IR_CALL_JOIN) {
            ir_ps_error_at(ps, t,
                           "a wait must be a statement of its own (`x = wait name`), not part "
                           "of an expression");
            return IR_NO_EXPR;
        }
        if (child_call_at(ps) == IR_CALL_SIGNAL) {
            ir_ps_error_at(ps, t,
                           "a signal must be a statement of its own (`sent = signal name(to=id)`), "
                           "not part of an expression");
            return IR_NO_EXPR;
        }
        if (child_call_at(ps) != IR_CALL_ACTION) {
            /* The result of a child arrives later, like an action's: only a statement can wait
             * for it. */
            ir_ps_error_at(
                ps, t,
                "a child workflow call must be a statement of its own (`x = %s wf(...)`), "
                "not part of an expression",
                t->str);
            return IR_NO_EXPR;
        }
        advance(ps);
        return mk_named(ps, IR_X_NAME, t, t->str, NULL, 0);
    case IR_TK_INT:
        advance(ps);
        if (t->v.i > (uint64_t) INT64_MAX) {
            ir_ps_error_at(ps, t, "integer literal %.*s does not fit in 64 bits", (int) t->len,
                           t->start);
            return IR_NO_EXPR;
        }
        return mk_const(ps, t, ir_int((int64_t) t->v.i));
    case IR_TK_FLOAT:
        advance(ps);
        return mk_const(ps, t, ir_float(t->v.f));
    case IR_TK_STRING:
        advance(ps);
        if (ir_str_new(t->str, t->str_len, &v) != CN_OK) {
            nomem(ps);
            return IR_NO_EXPR;
        }
        return mk_const(ps, t, v);
    case IR_TK_TRUE:
    case IR_TK_FALSE:
        advance(ps);
        return mk_const(ps, t, ir_bool(t->kind == IR_TK_TRUE));
    case IR_TK_NONE:
        advance(ps);
        return mk_const(ps, t, ir_null());
    case IR_TK_DURATION:
        ir_ps_error_at(ps, t, "durations like '%.*s' are only allowed in policy brackets",
                       (int) t->len, t->start);
        return IR_NO_EXPR;
    case IR_TK_LPAREN:
        advance(ps);
        return parse_paren(ps, t);
    case IR_TK_LBRACK:
        advance(ps);
        return parse_list(ps, t);
    case IR_TK_LBRACE:
        advance(ps);
        return parse_dict(ps, t);
    case IR_TK_AT:
        ir_ps_error_at(
            ps, t,
            "an action call must be a statement of its own (`x = @mod.action(...)`), not "
            "part of an expression");
        return IR_NO_EXPR;
    case IR_TK_SPREAD:
    case IR_TK_PARALLEL:
        ir_ps_error_at(ps, t, "'%s' must be the whole right-hand side of an assignment", t->str);
        return IR_NO_EXPR;
    default:
        ir_ps_error_at(ps, t, "expected an expression");
        return IR_NO_EXPR;
    }
}

static uint32_t
parse_call(struct parser *ps, uint32_t callee, const struct ir_token *open)
{
    struct u32_vec kids = {0};
    struct name_vec kw = {0};
    struct cn_strmap kwseen = CN_STRMAP_INIT;
    const struct ir_expr *ce = &ps->prog->exprs.items[callee];
    const char *name = ce->name;
    struct ir_token at_tok;
    uint32_t r = IR_NO_EXPR;

    memset(&at_tok, 0, sizeof(at_tok));
    at_tok.line = ce->line;
    at_tok.col = ce->col;
    if (ce->kind != IR_X_NAME) {
        ir_ps_error_at(ps, open,
                       ce->kind == IR_X_ATTR ? "method calls are not supported; use a builtin such "
                                               "as keys(d) or len(x)"
                                             : "only named functions can be called");
        return IR_NO_EXPR;
    }
    while (!at(ps, IR_TK_RPAREN)) {
        const struct ir_token *t = peek(ps);
        uint32_t e;
        if (t->kind == IR_TK_NAME && peek_at(ps, 1)->kind == IR_TK_ASSIGN) {
            advance(ps);
            advance(ps);
            if (ir_ps_seen(ps, &kwseen, t->str)) {
                ir_ps_error_at(ps, t, "keyword argument '%s' repeated", t->str);
                goto out;
            }
            if (!ps_alloc_ok(ps, CN_VEC_PUSH(&kw, t->str))) {
                goto out;
            }
        } else if (kw.len > 0) {
            ir_ps_error_at(ps, t, "positional argument follows keyword argument");
            goto out;
        }
        e = ir_parse_expr(ps);
        if (ps->panic) {
            goto out;
        }
        if (!ps_alloc_ok(ps, CN_VEC_PUSH(&kids, e))) {
            goto out;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    if (!ir_ps_expect(ps, IR_TK_RPAREN, "to close the argument list")) {
        goto out;
    }
    if (kids.len > 65535) {
        ir_ps_error_at(ps, open, "too many arguments");
        goto out;
    }
    r = mk_named(ps, IR_X_CALL, &at_tok, name, kids.items, (uint32_t) kids.len);
    if (r != IR_NO_EXPR) {
        struct ir_expr *x = &ps->prog->exprs.items[r];
        x->op = IR_B_UNRESOLVED;
        x->nkw = (uint16_t) kw.len;
        x->kwnames = ir_ps_arena_copy(ps, kw.items, kw.len, sizeof(kw.items[0]));
    }
out:
    free(kids.items);
    free(kw.items);
    cn_strmap_fini(&kwseen);
    return r;
}

static uint32_t
parse_postfix(struct parser *ps)
{
    uint32_t e = parse_atom(ps);

    while (!ps->panic) {
        const struct ir_token *t = peek(ps);
        if (t->kind == IR_TK_LBRACK) {
            uint32_t kids[3] = {e, IR_NO_EXPR, IR_NO_EXPR};
            advance(ps);
            if (!at(ps, IR_TK_COLON)) {
                kids[1] = ir_parse_expr(ps);
                if (ps->panic) {
                    return IR_NO_EXPR;
                }
            }
            if (accept(ps, IR_TK_COLON)) {
                if (!at(ps, IR_TK_RBRACK)) {
                    if (at(ps, IR_TK_COLON)) {
                        ir_ps_error_at(ps, peek(ps), "slice steps (x[a:b:c]) are not supported");
                        return IR_NO_EXPR;
                    }
                    kids[2] = ir_parse_expr(ps);
                    if (ps->panic) {
                        return IR_NO_EXPR;
                    }
                }
                if (at(ps, IR_TK_COLON)) {
                    ir_ps_error_at(ps, peek(ps), "slice steps (x[a:b:c]) are not supported");
                    return IR_NO_EXPR;
                }
                if (!ir_ps_expect(ps, IR_TK_RBRACK, "to close the slice")) {
                    return IR_NO_EXPR;
                }
                e = ir_ps_mk(ps, IR_X_SLICE, 0, t, kids, 3);
            } else {
                if (!ir_ps_expect(ps, IR_TK_RBRACK, "to close the index")) {
                    return IR_NO_EXPR;
                }
                e = ir_ps_mk(ps, IR_X_INDEX, 0, t, kids, 2);
            }
        } else if (t->kind == IR_TK_DOT) {
            const struct ir_token *n;
            advance(ps);
            if ((n = ir_ps_expect_name(ps, "expected a field name after '.'")) == NULL) {
                return IR_NO_EXPR;
            }
            e = mk_named(ps, IR_X_ATTR, n, n->str, &e, 1);
        } else if (t->kind == IR_TK_LPAREN) {
            advance(ps);
            e = parse_call(ps, e, t);
        } else {
            break;
        }
    }
    return ps->panic ? IR_NO_EXPR : e;
}

static uint32_t
parse_unary(struct parser *ps)
{
    const struct ir_token *t = peek(ps);
    uint32_t e;

    if (t->kind == IR_TK_PLUS) {
        ir_ps_error_at(ps, t, "unary '+' is not supported");
        return IR_NO_EXPR;
    }
    if (t->kind != IR_TK_MINUS) {
        return parse_postfix(ps);
    }
    advance(ps);
    /* Fold -literal so that -9223372036854775808 is representable. */
    if (peek(ps)->kind == IR_TK_INT && peek_at(ps, 1)->kind != IR_TK_LBRACK &&
        peek_at(ps, 1)->kind != IR_TK_DOT && peek_at(ps, 1)->kind != IR_TK_LPAREN) {
        const struct ir_token *n = advance(ps);
        if (n->v.i == (uint64_t) 1 << 63) {
            return mk_const(ps, t, ir_int(INT64_MIN));
        }
        return mk_const(ps, t, ir_int(-(int64_t) n->v.i));
    }
    if (peek(ps)->kind == IR_TK_FLOAT && peek_at(ps, 1)->kind != IR_TK_LBRACK &&
        peek_at(ps, 1)->kind != IR_TK_DOT && peek_at(ps, 1)->kind != IR_TK_LPAREN) {
        return mk_const(ps, t, ir_float(-advance(ps)->v.f));
    }
    if (!enter(ps)) {
        return IR_NO_EXPR;
    }
    e = parse_unary(ps);
    leave(ps);
    if (ps->panic) {
        return IR_NO_EXPR;
    }
    return ir_ps_mk(ps, IR_X_NEG, 0, t, &e, 1);
}

static uint32_t parse_binary_level(struct parser *ps, int level);

/* Binary levels, tightest last: 0 merge '|', 1 sum, 2 term. */
static bool
binop_at_level(enum ir_tok k, int level, enum ir_binop *op)
{
    switch (level) {
    case 0:
        *op = IR_OP_MERGE;
        return k == IR_TK_PIPE;
    case 1:
        *op = k == IR_TK_PLUS ? IR_OP_ADD : IR_OP_SUB;
        return k == IR_TK_PLUS || k == IR_TK_MINUS;
    default:
        switch (k) {
        case IR_TK_STAR:
            *op = IR_OP_MUL;
            return true;
        case IR_TK_SLASH:
            *op = IR_OP_DIV;
            return true;
        case IR_TK_DSLASH:
            *op = IR_OP_FLOORDIV;
            return true;
        case IR_TK_PERCENT:
            *op = IR_OP_MOD;
            return true;
        default:
            return false;
        }
    }
}

static uint32_t
parse_binary_level(struct parser *ps, int level)
{
    uint32_t l = level > 2 ? parse_unary(ps) : parse_binary_level(ps, level + 1);
    enum ir_binop op;

    while (!ps->panic && binop_at_level(peek(ps)->kind, level, &op)) {
        const struct ir_token *t = advance(ps);
        uint32_t kids[2];
        kids[0] = l;
        kids[1] = level > 2 ? parse_unary(ps) : parse_binary_level(ps, level + 1);
        if (ps->panic) {
            return IR_NO_EXPR;
        }
        l = ir_ps_mk(ps, IR_X_BIN, op, t, kids, 2);
    }
    return ps->panic ? IR_NO_EXPR : l;
}

static bool
cmp_op(struct parser *ps, enum ir_cmpop *op)
{
    switch (peek(ps)->kind) {
    case IR_TK_EQ:
        *op = IR_CMP_EQ;
        break;
    case IR_TK_NE:
        *op = IR_CMP_NE;
        break;
    case IR_TK_LT:
        *op = IR_CMP_LT;
        break;
    case IR_TK_LE:
        *op = IR_CMP_LE;
        break;
    case IR_TK_GT:
        *op = IR_CMP_GT;
        break;
    case IR_TK_GE:
        *op = IR_CMP_GE;
        break;
    case IR_TK_IN:
        *op = IR_CMP_IN;
        break;
    case IR_TK_NOT:
        if (peek_at(ps, 1)->kind != IR_TK_IN) {
            return false;
        }
        advance(ps);
        *op = IR_CMP_NOTIN;
        break;
    default:
        return false;
    }
    advance(ps);
    return true;
}

static uint32_t
parse_comparison(struct parser *ps)
{
    struct u32_vec operands = {0}, ops = {0};
    const struct ir_token *first = NULL;
    uint32_t e = parse_binary_level(ps, 0), r = IR_NO_EXPR;
    struct ir_expr x;
    enum ir_cmpop op;
    size_t i;

    if (ps->panic) {
        return IR_NO_EXPR;
    }
    while (true) {
        const struct ir_token *t = peek(ps);
        if (!cmp_op(ps, &op)) {
            break;
        }
        if (first == NULL) {
            first = t;
            if (!ps_alloc_ok(ps, CN_VEC_PUSH(&operands, e))) {
                goto out;
            }
        }
        if (!ps_alloc_ok(ps, CN_VEC_PUSH(&ops, (uint32_t) op))) {
            goto out;
        }
        e = parse_binary_level(ps, 0);
        if (ps->panic) {
            goto out;
        }
        if (!ps_alloc_ok(ps, CN_VEC_PUSH(&operands, e))) {
            goto out;
        }
    }
    if (first == NULL) {
        return e;
    }
    /* The pool stores operands followed by ops (ir_xpool_add splits them by nargs). */
    for (i = 0; i < ops.len; i++) {
        if (!ps_alloc_ok(ps, CN_VEC_PUSH(&operands, ops.items[i]))) {
            goto out;
        }
    }
    memset(&x, 0, sizeof(x));
    x.kind = IR_X_CMP;
    x.line = first->line;
    x.col = first->col;
    x.nargs = (uint32_t) (ops.len + 1);
    r = add_expr(ps, &x, first, operands.items, (uint32_t) operands.len);
out:
    free(operands.items);
    free(ops.items);
    return r;
}

static uint32_t
parse_not(struct parser *ps)
{
    const struct ir_token *t = peek(ps);
    uint32_t e;

    if (t->kind != IR_TK_NOT) {
        return parse_comparison(ps);
    }
    advance(ps);
    if (!enter(ps)) {
        return IR_NO_EXPR;
    }
    e = parse_not(ps);
    leave(ps);
    return ps->panic ? IR_NO_EXPR : ir_ps_mk(ps, IR_X_NOT, 0, t, &e, 1);
}

/* A left-associative chain `sub (tok sub)*` of `and` or `or`. */
static uint32_t
parse_bool_chain(struct parser *ps, enum ir_tok tok, enum ir_xkind kind,
                 uint32_t (*sub)(struct parser *))
{
    uint32_t l = sub(ps);

    while (!ps->panic && at(ps, tok)) {
        const struct ir_token *t = advance(ps);
        uint32_t kids[2] = {l, sub(ps)};
        if (ps->panic) {
            return IR_NO_EXPR;
        }
        l = ir_ps_mk(ps, kind, 0, t, kids, 2);
    }
    return ps->panic ? IR_NO_EXPR : l;
}

static uint32_t
parse_and(struct parser *ps)
{
    return parse_bool_chain(ps, IR_TK_AND, IR_X_AND, parse_not);
}

uint32_t
ir_parse_or(struct parser *ps)
{
    return parse_bool_chain(ps, IR_TK_OR, IR_X_OR, parse_and);
}

uint32_t
ir_parse_expr(struct parser *ps)
{
    uint32_t e, kids[3];
    const struct ir_token *t;

    if (!enter(ps)) {
        return IR_NO_EXPR;
    }
    e = ir_parse_or(ps);
    if (!ps->panic && at(ps, IR_TK_IF)) {
        t = advance(ps);
        kids[0] = e;
        kids[1] = ir_parse_or(ps);
        if (!ps->panic &&
            ir_ps_expect(ps, IR_TK_ELSE, "in conditional expression (x if c else y)")) {
            kids[2] = ir_parse_expr(ps);
            if (!ps->panic) {
                e = ir_ps_mk(ps, IR_X_COND, 0, t, kids, 3);
            }
        }
    }
    leave(ps);
    return ps->panic ? IR_NO_EXPR : e;
}

/* expr (',' expr)* [',']: a bare tuple becomes a list (see parse_atom), and as in Python a
 * trailing comma makes one of a single item (`return x,` is `[x]`). */
uint32_t
ir_parse_exprs(struct parser *ps, struct u32_vec *items)
{
    const struct ir_token *t = peek(ps);
    uint32_t e = ir_parse_expr(ps);
    bool comma = false;

    if (ps->panic) {
        return IR_NO_EXPR;
    }
    if (!ps_alloc_ok(ps, CN_VEC_PUSH(items, e))) {
        return IR_NO_EXPR;
    }
    while (accept(ps, IR_TK_COMMA)) {
        bool aug;
        comma = true;
        (void) ir_ps_aug_op(peek(ps)->kind, &aug);
        if (at(ps, IR_TK_NEWLINE) || at(ps, IR_TK_ASSIGN) || aug) {
            break;
        }
        e = ir_parse_expr(ps);
        if (ps->panic) {
            return IR_NO_EXPR;
        }
        if (!ps_alloc_ok(ps, CN_VEC_PUSH(items, e))) {
            return IR_NO_EXPR;
        }
    }
    if (items->len == 1 && !comma) {
        return items->items[0];
    }
    return ir_ps_mk(ps, IR_X_LIST, 0, t, items->items, (uint32_t) items->len);
}

enum ir_binop
ir_ps_aug_op(enum ir_tok k, bool *ok)
{
    *ok = true;
    switch (k) {
    case IR_TK_PLUSEQ:
        return IR_OP_ADD;
    case IR_TK_MINUSEQ:
        return IR_OP_SUB;
    case IR_TK_STAREQ:
        return IR_OP_MUL;
    case IR_TK_SLASHEQ:
        return IR_OP_DIV;
    case IR_TK_DSLASHEQ:
        return IR_OP_FLOORDIV;
    case IR_TK_PERCENTEQ:
        return IR_OP_MOD;
    case IR_TK_PIPEEQ:
        return IR_OP_MERGE;
    default:
        *ok = false;
        return IR_OP_ADD;
    }
}
