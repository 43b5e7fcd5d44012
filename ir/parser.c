/* SPDX-License-Identifier: MIT */
/*
 * Parser for the workflow language. Grammar (docs/language.md), loosest expression level first:
 *   program   := funcdef* EOF
 *   funcdef   := 'fn' NAME '(' ['input' ':' names] [',' 'output' ':' names] ')' ':' block
 *   block     := NEWLINE INDENT stmt+ DEDENT | simple_stmt
 *   stmt      := if | for | while | try | simple_stmt
 *   simple    := pass | break | continue | return [exprs] | sleep expr | targets '=' rhs
 *              | NAME augop expr | rhs
 *   rhs       := action | 'spread' expr ':' NAME '->' action | 'parallel' ':' calls | exprs
 *   action    := ('@' NAME ('.' NAME)+ | ('run' | 'start') NAME ('.' NAME)*)
 *                '(' [NAME '=' expr, ...] ')' ('[' policy ']')*
 *   expr      := or ['if' or 'else' expr];  or := and ('or' and)*;  and := not ('and' not)*
 *   not       := 'not' not | cmp;  cmp := merge (cmpop merge)*;  merge := sum ('|' sum)*
 *   sum       := term (('+'|'-') term)*;  term := unary (('*'|'/'|'//'|'%') unary)*
 *   unary     := '-' unary | postfix;  postfix := atom ('[' sub ']' | '.' NAME | '(' args ')')*
 * `run` and `start` are contextual: keywords only where an action call can stand and a name
 * follows them (see child_call_at), ordinary names everywhere else.
 * Error handling is panic mode: the first error of a statement is recorded, the rest of the
 * statement (and the block it would have opened) is skipped.
 */
#include "ir/parser.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/strmap.h"
#include "ir/base/vec.h"
#include "ir/lexer.h"
#include "ir/wfname.h"

struct parser {
    struct ir_tokens toks;
    size_t i;
    struct ir_program *prog;
    struct ir_diags *d;
    bool panic;
    bool synced;     /* a failed statement already skipped its own block */
    int depth;       /* expression nesting */
    int block_depth; /* block nesting */
    cn_err rv;       /* sticky CN_NOMEM */
};

struct stmt_vec {
    struct ir_stmt **items;
    size_t len, cap;
};

struct name_vec {
    const char **items;
    size_t len, cap;
};

struct pos_vec {
    struct ir_pos *items;
    size_t len, cap;
};

struct u32_vec {
    uint32_t *items;
    size_t len, cap;
};

static struct ir_block parse_block(struct parser *ps, const char *what);
static struct ir_stmt *parse_stmt(struct parser *ps);
static uint32_t parse_expr(struct parser *ps);

/* ---- token access ------------------------------------------------------------------------ */

static const struct ir_token *
peek(const struct parser *ps)
{
    return &ps->toks.items[ps->i];
}

static const struct ir_token *
peek_at(const struct parser *ps, size_t ahead)
{
    size_t j = ps->i + ahead;
    return &ps->toks.items[j < ps->toks.len ? j : ps->toks.len - 1];
}

static bool
at(const struct parser *ps, enum ir_tok k)
{
    return peek(ps)->kind == k;
}

static const struct ir_token *
advance(struct parser *ps)
{
    const struct ir_token *t = peek(ps);

    if (t->kind != IR_TK_EOF) {
        ps->i++;
    }
    return t;
}

static bool
accept(struct parser *ps, enum ir_tok k)
{
    if (at(ps, k)) {
        advance(ps);
        return true;
    }
    return false;
}

static bool
is_name_tok(const struct ir_token *t, const char *word)
{
    return t->kind == IR_TK_NAME && strcmp(t->str, word) == 0;
}

static struct ir_pos
tok_pos(const struct ir_token *t)
{
    struct ir_pos p = {t->line, t->col};
    return p;
}

/* True at the word `run` or `start` (a NAME token: they are not reserved). */
static bool
is_child_word(const struct ir_token *t)
{
    return is_name_tok(t, "run") || is_name_tok(t, "start");
}

/* `run` and `start` begin a child workflow call only when a name follows (`run billing.refund(`):
 * no expression has two names in a row, so `run = 3`, `f(run)`, `start + 1` and a helper called
 * `run(...)` keep them ordinary names. A string after them counts too, so that a quoted workflow
 * name gets an explanation instead of "expected end of line". Returns IR_CALL_RUN or
 * IR_CALL_START there, IR_CALL_ACTION anywhere else. */
static enum ir_call_kind
child_call_at(const struct parser *ps)
{
    enum ir_tok next = peek_at(ps, 1)->kind;

    if (!is_child_word(peek(ps)) || (next != IR_TK_NAME && next != IR_TK_STRING)) {
        return IR_CALL_ACTION;
    }
    return is_name_tok(peek(ps), "run") ? IR_CALL_RUN : IR_CALL_START;
}

static void error_at(struct parser *ps, const struct ir_token *t, const char *fmt, ...)
    CN_PRINTF(3, 4);

static void
error_at(struct parser *ps, const struct ir_token *t, const char *fmt, ...)
{
    va_list ap;
    char msg[400];

    if (ps->panic) {
        return;
    }
    ps->panic = true;
    if (ir_diags_has_at(ps->d, t->line, t->col)) {
        return; /* e.g. the lexer already explained this token */
    }
    va_start(ap, fmt);
    (void) vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ir_diags_add(ps->d, t->line, t->col, "%s", msg);
}

/* Consumes a token of kind k or reports "expected <k> <context>". */
static bool
expect(struct parser *ps, enum ir_tok k, const char *context)
{
    if (accept(ps, k)) {
        return true;
    }
    error_at(ps, peek(ps), "expected %s%s%s", ir_tok_text(k), context[0] ? " " : "", context);
    return false;
}

static void
nomem(struct parser *ps)
{
    ps->rv = CN_NOMEM;
    ps->panic = true;
}

/* True when `name` was already added to `m` (a per-list duplicate check: hashing keeps a
 * hostile 100 000-argument call linear). Adds it otherwise. */
static bool
seen(struct parser *ps, struct cn_strmap *m, const char *name)
{
    uint32_t dummy;

    if (cn_strmap_get(m, name, &dummy)) {
        return true;
    }
    if (cn_strmap_put(m, name, 0) != CN_OK) {
        nomem(ps);
    }
    return false;
}

static void *
arena_copy(struct parser *ps, const void *items, size_t n, size_t size)
{
    void *p;

    if (n == 0) {
        return NULL;
    }
    p = cn_arena_calloc(ps->prog->arena, n, size);
    if (p == NULL) {
        nomem(ps);
        return NULL;
    }
    memcpy(p, items, n * size);
    return p;
}

/* Skips the rest of a broken statement: to the end of its line and over any block it opened. */
static void
sync_stmt(struct parser *ps)
{
    int nest = 0;

    if (ps->synced) {
        ps->synced = false;
        ps->panic = false;
        return;
    }
    while (!at(ps, IR_TK_EOF)) {
        enum ir_tok k = peek(ps)->kind;
        if (k == IR_TK_NEWLINE) {
            advance(ps);
            break;
        }
        if (k == IR_TK_DEDENT || k == IR_TK_INDENT) {
            break;
        }
        advance(ps);
    }
    if (at(ps, IR_TK_INDENT)) {
        do {
            enum ir_tok k = advance(ps)->kind;
            if (k == IR_TK_INDENT) {
                nest++;
            } else if (k == IR_TK_DEDENT) {
                nest--;
            }
        } while (nest > 0 && !at(ps, IR_TK_EOF));
    }
    ps->panic = false;
}

/* ---- expressions -------------------------------------------------------------------------- */

static uint32_t
mk(struct parser *ps, enum ir_xkind kind, unsigned op, const struct ir_token *t,
   const uint32_t *kids, uint32_t nkids)
{
    struct ir_expr e;
    uint32_t idx;

    memset(&e, 0, sizeof(e));
    e.kind = (uint8_t) kind;
    e.op = (uint8_t) op;
    e.line = t->line;
    e.col = t->col;
    e.nargs = nkids;
    if (ps->rv != CN_OK) {
        return IR_NO_EXPR;
    }
    switch (ir_xpool_add(&ps->prog->exprs, &e, kids, nkids, &idx)) {
    case CN_OK:
        return idx;
    case CN_DEPTH:
        error_at(ps, t, "expression is too deeply nested (more than %d levels)",
                 IR_EXPR_MAX_HEIGHT);
        return IR_NO_EXPR;
    default:
        nomem(ps);
        return IR_NO_EXPR;
    }
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
    uint32_t idx = mk(ps, kind, 0, t, kids, nkids);

    if (idx != IR_NO_EXPR) {
        ps->prog->exprs.items[idx].name = name;
    }
    return idx;
}

static bool
enter(struct parser *ps)
{
    if (ps->depth >= IR_PARSE_MAX_DEPTH) {
        error_at(ps, peek(ps), "expression nested too deeply (limit %d)", IR_PARSE_MAX_DEPTH);
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
        uint32_t e = parse_expr(ps);
        if (ps->panic) {
            return false;
        }
        if (at(ps, IR_TK_FOR)) {
            error_at(ps, peek(ps),
                     "comprehensions are not supported; build the list with a for "
                     "loop (or run an action per item with spread)");
            return false;
        }
        if (CN_VEC_PUSH(out, e) != CN_OK) {
            nomem(ps);
            return false;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    return expect(ps, close, context);
}

static uint32_t
parse_dict(struct parser *ps, const struct ir_token *open)
{
    struct u32_vec kids = {0};
    uint32_t r = IR_NO_EXPR;

    while (!at(ps, IR_TK_RBRACE)) {
        uint32_t k = parse_expr(ps), v;
        if (ps->panic) {
            goto out;
        }
        if (!expect(ps, IR_TK_COLON, "after dict key")) {
            goto out;
        }
        v = parse_expr(ps);
        if (ps->panic) {
            goto out;
        }
        if (CN_VEC_PUSH(&kids, k) != CN_OK || CN_VEC_PUSH(&kids, v) != CN_OK) {
            nomem(ps);
            goto out;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    if (expect(ps, IR_TK_RBRACE, "to close the dict")) {
        r = mk(ps, IR_X_DICT, 0, open, kids.items, (uint32_t) kids.len);
    }
out:
    free(kids.items);
    return r;
}

static uint32_t
parse_atom(struct parser *ps)
{
    const struct ir_token *t = peek(ps);
    struct ir_val v;
    uint32_t r;

    switch (t->kind) {
    case IR_TK_NAME:
        if (child_call_at(ps) != IR_CALL_ACTION) {
            /* The result of a child arrives later, like an action's: only a statement can wait
             * for it. */
            error_at(ps, t,
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
            error_at(ps, t, "integer literal %.*s does not fit in 64 bits", (int) t->len, t->start);
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
        error_at(ps, t, "durations like '%.*s' are only allowed in policy brackets", (int) t->len,
                 t->start);
        return IR_NO_EXPR;
    case IR_TK_LPAREN: {
        struct u32_vec kids = {0};
        advance(ps);
        if (at(ps, IR_TK_RPAREN)) {
            error_at(ps, peek(ps), "empty tuple '()' is not supported; use [] for a list");
            return IR_NO_EXPR;
        }
        r = parse_expr(ps);
        if (ps->panic) {
            return IR_NO_EXPR;
        }
        if (at(ps, IR_TK_COMMA)) {
            /* A tuple display is a list in Cairn: values have no tuple type. */
            if (CN_VEC_PUSH(&kids, r) != CN_OK) {
                nomem(ps);
                return IR_NO_EXPR;
            }
            advance(ps);
            if (!parse_expr_list_until(ps, IR_TK_RPAREN, &kids, "to close the tuple")) {
                free(kids.items);
                return IR_NO_EXPR;
            }
            r = mk(ps, IR_X_LIST, 0, t, kids.items, (uint32_t) kids.len);
            free(kids.items);
            return r;
        }
        return expect(ps, IR_TK_RPAREN, "to close '('") ? r : IR_NO_EXPR;
    }
    case IR_TK_LBRACK: {
        struct u32_vec kids = {0};
        advance(ps);
        r = IR_NO_EXPR;
        if (parse_expr_list_until(ps, IR_TK_RBRACK, &kids, "to close the list")) {
            r = mk(ps, IR_X_LIST, 0, t, kids.items, (uint32_t) kids.len);
        }
        free(kids.items);
        return r;
    }
    case IR_TK_LBRACE:
        advance(ps);
        return parse_dict(ps, t);
    case IR_TK_AT:
        error_at(ps, t,
                 "an action call must be a statement of its own (`x = @mod.action(...)`), not "
                 "part of an expression");
        return IR_NO_EXPR;
    case IR_TK_SPREAD:
    case IR_TK_PARALLEL:
        error_at(ps, t, "'%s' must be the whole right-hand side of an assignment", t->str);
        return IR_NO_EXPR;
    default:
        error_at(ps, t, "expected an expression");
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
        error_at(ps, open,
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
            if (seen(ps, &kwseen, t->str)) {
                error_at(ps, t, "keyword argument '%s' repeated", t->str);
                goto out;
            }
            if (CN_VEC_PUSH(&kw, t->str) != CN_OK) {
                nomem(ps);
                goto out;
            }
        } else if (kw.len > 0) {
            error_at(ps, t, "positional argument follows keyword argument");
            goto out;
        }
        e = parse_expr(ps);
        if (ps->panic) {
            goto out;
        }
        if (CN_VEC_PUSH(&kids, e) != CN_OK) {
            nomem(ps);
            goto out;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    if (!expect(ps, IR_TK_RPAREN, "to close the argument list")) {
        goto out;
    }
    if (kids.len > 65535) {
        error_at(ps, open, "too many arguments");
        goto out;
    }
    r = mk_named(ps, IR_X_CALL, &at_tok, name, kids.items, (uint32_t) kids.len);
    if (r != IR_NO_EXPR) {
        struct ir_expr *x = &ps->prog->exprs.items[r];
        x->op = IR_B_UNRESOLVED;
        x->nkw = (uint16_t) kw.len;
        x->kwnames = arena_copy(ps, kw.items, kw.len, sizeof(kw.items[0]));
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
                kids[1] = parse_expr(ps);
                if (ps->panic) {
                    return IR_NO_EXPR;
                }
            }
            if (accept(ps, IR_TK_COLON)) {
                if (!at(ps, IR_TK_RBRACK)) {
                    if (at(ps, IR_TK_COLON)) {
                        error_at(ps, peek(ps), "slice steps (x[a:b:c]) are not supported");
                        return IR_NO_EXPR;
                    }
                    kids[2] = parse_expr(ps);
                    if (ps->panic) {
                        return IR_NO_EXPR;
                    }
                }
                if (at(ps, IR_TK_COLON)) {
                    error_at(ps, peek(ps), "slice steps (x[a:b:c]) are not supported");
                    return IR_NO_EXPR;
                }
                if (!expect(ps, IR_TK_RBRACK, "to close the slice")) {
                    return IR_NO_EXPR;
                }
                e = mk(ps, IR_X_SLICE, 0, t, kids, 3);
            } else {
                if (!expect(ps, IR_TK_RBRACK, "to close the index")) {
                    return IR_NO_EXPR;
                }
                e = mk(ps, IR_X_INDEX, 0, t, kids, 2);
            }
        } else if (t->kind == IR_TK_DOT) {
            const struct ir_token *n;
            advance(ps);
            n = peek(ps);
            if (n->kind != IR_TK_NAME) {
                error_at(ps, n, "expected a field name after '.'");
                return IR_NO_EXPR;
            }
            advance(ps);
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
        error_at(ps, t, "unary '+' is not supported");
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
    return mk(ps, IR_X_NEG, 0, t, &e, 1);
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
        l = mk(ps, IR_X_BIN, op, t, kids, 2);
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
            if (CN_VEC_PUSH(&operands, e) != CN_OK) {
                nomem(ps);
                goto out;
            }
        }
        if (CN_VEC_PUSH(&ops, (uint32_t) op) != CN_OK) {
            nomem(ps);
            goto out;
        }
        e = parse_binary_level(ps, 0);
        if (ps->panic) {
            goto out;
        }
        if (CN_VEC_PUSH(&operands, e) != CN_OK) {
            nomem(ps);
            goto out;
        }
    }
    if (first == NULL) {
        return e;
    }
    /* The pool stores operands followed by ops (ir_xpool_add splits them by nargs). */
    for (i = 0; i < ops.len; i++) {
        if (CN_VEC_PUSH(&operands, ops.items[i]) != CN_OK) {
            nomem(ps);
            goto out;
        }
    }
    {
        struct ir_expr x;
        memset(&x, 0, sizeof(x));
        x.kind = IR_X_CMP;
        x.line = first->line;
        x.col = first->col;
        x.nargs = (uint32_t) (ops.len + 1);
        cn_err arv =
            ir_xpool_add(&ps->prog->exprs, &x, operands.items, (uint32_t) operands.len, &r);
        if (arv == CN_DEPTH) {
            error_at(ps, first, "expression is too deeply nested (more than %d levels)",
                     IR_EXPR_MAX_HEIGHT);
            r = IR_NO_EXPR;
        } else if (arv != CN_OK) {
            nomem(ps);
            r = IR_NO_EXPR;
        }
    }
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
    return ps->panic ? IR_NO_EXPR : mk(ps, IR_X_NOT, 0, t, &e, 1);
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
        l = mk(ps, kind, 0, t, kids, 2);
    }
    return ps->panic ? IR_NO_EXPR : l;
}

static uint32_t
parse_and(struct parser *ps)
{
    return parse_bool_chain(ps, IR_TK_AND, IR_X_AND, parse_not);
}

static uint32_t
parse_or(struct parser *ps)
{
    return parse_bool_chain(ps, IR_TK_OR, IR_X_OR, parse_and);
}

static uint32_t
parse_expr(struct parser *ps)
{
    uint32_t e, kids[3];
    const struct ir_token *t;

    if (!enter(ps)) {
        return IR_NO_EXPR;
    }
    e = parse_or(ps);
    if (!ps->panic && at(ps, IR_TK_IF)) {
        t = advance(ps);
        kids[0] = e;
        kids[1] = parse_or(ps);
        if (!ps->panic && expect(ps, IR_TK_ELSE, "in conditional expression (x if c else y)")) {
            kids[2] = parse_expr(ps);
            if (!ps->panic) {
                e = mk(ps, IR_X_COND, 0, t, kids, 3);
            }
        }
    }
    leave(ps);
    return ps->panic ? IR_NO_EXPR : e;
}

static enum ir_binop aug_op(enum ir_tok k, bool *ok);

/* expr (',' expr)* [',']: a bare tuple becomes a list (see parse_atom), and as in Python a
 * trailing comma makes one of a single item (`return x,` is `[x]`). */
static uint32_t
parse_exprs(struct parser *ps, struct u32_vec *items)
{
    const struct ir_token *t = peek(ps);
    uint32_t e = parse_expr(ps);
    bool comma = false;

    if (ps->panic) {
        return IR_NO_EXPR;
    }
    if (CN_VEC_PUSH(items, e) != CN_OK) {
        nomem(ps);
        return IR_NO_EXPR;
    }
    while (accept(ps, IR_TK_COMMA)) {
        bool aug;
        comma = true;
        (void) aug_op(peek(ps)->kind, &aug);
        if (at(ps, IR_TK_NEWLINE) || at(ps, IR_TK_ASSIGN) || aug) {
            break;
        }
        e = parse_expr(ps);
        if (ps->panic) {
            return IR_NO_EXPR;
        }
        if (CN_VEC_PUSH(items, e) != CN_OK) {
            nomem(ps);
            return IR_NO_EXPR;
        }
    }
    if (items->len == 1 && !comma) {
        return items->items[0];
    }
    return mk(ps, IR_X_LIST, 0, t, items->items, (uint32_t) items->len);
}

/* ---- names, policies, actions ------------------------------------------------------------- */

static bool
names_push(struct parser *ps, struct name_vec *nv, struct pos_vec *pv, const struct ir_token *t)
{
    if (CN_VEC_PUSH(nv, t->str) != CN_OK || CN_VEC_PUSH(pv, tok_pos(t)) != CN_OK) {
        nomem(ps);
        return false;
    }
    return true;
}

static struct ir_names
names_finish(struct parser *ps, struct name_vec *nv, struct pos_vec *pv)
{
    struct ir_names n;

    n.unpack = false;
    n.len = (uint32_t) nv->len;
    n.items = arena_copy(ps, nv->items, nv->len, sizeof(nv->items[0]));
    n.pos = arena_copy(ps, pv->items, pv->len, sizeof(pv->items[0]));
    free(nv->items);
    free(pv->items);
    memset(nv, 0, sizeof(*nv));
    memset(pv, 0, sizeof(*pv));
    return n;
}

/* A dotted name (error type): NAME ('.' NAME)*, interned into the arena. */
static const char *
parse_dotted(struct parser *ps, const char *what)
{
    const struct ir_token *t = peek(ps);
    struct cn_buf b = CN_BUF_INIT;
    const char *r = NULL;

    if (t->kind != IR_TK_NAME) {
        error_at(ps, t, "expected %s", what);
        return NULL;
    }
    advance(ps);
    if (cn_buf_puts(&b, t->str) != CN_OK) {
        goto oom;
    }
    while (at(ps, IR_TK_DOT) && peek_at(ps, 1)->kind == IR_TK_NAME) {
        advance(ps);
        if (cn_buf_putc(&b, '.') != CN_OK || cn_buf_puts(&b, advance(ps)->str) != CN_OK) {
            goto oom;
        }
    }
    r = cn_arena_strndup(ps->prog->arena, b.data, b.len);
    if (r == NULL) {
        goto oom;
    }
    cn_buf_fini(&b);
    return r;
oom:
    cn_buf_fini(&b);
    nomem(ps);
    return NULL;
}

/* Error types: T or (T1, T2, ...). */
static bool
parse_types(struct parser *ps, struct ir_names *out, const char *what)
{
    struct name_vec nv = {0};
    struct pos_vec pv = {0};
    bool paren = accept(ps, IR_TK_LPAREN);

    do {
        const struct ir_token *t = peek(ps);
        const char *n = parse_dotted(ps, what);
        if (n == NULL) {
            goto fail;
        }
        if (CN_VEC_PUSH(&nv, n) != CN_OK || CN_VEC_PUSH(&pv, tok_pos(t)) != CN_OK) {
            nomem(ps);
            goto fail;
        }
    } while (paren && accept(ps, IR_TK_COMMA) && !at(ps, IR_TK_RPAREN));
    if (paren && !expect(ps, IR_TK_RPAREN, "to close the list of error types")) {
        goto fail;
    }
    *out = names_finish(ps, &nv, &pv);
    return true;
fail:
    free(nv.items);
    free(pv.items);
    return false;
}

/* A duration in a policy: 30s, 100ms, 2m, 1h, or a bare integer (seconds). */
static bool
parse_duration(struct parser *ps, const char *what, int64_t *ms)
{
    const struct ir_token *t = peek(ps);
    bool neg = false;

    if (t->kind == IR_TK_MINUS) {
        neg = true;
        advance(ps);
    }
    t = peek(ps);
    if (t->kind == IR_TK_DURATION) {
        *ms = t->v.dur_ms;
    } else if (t->kind == IR_TK_INT) {
        if (t->v.i > (uint64_t) INT64_MAX / 1000) {
            error_at(ps, t, "%s is too large", what);
            return false;
        }
        *ms = (int64_t) t->v.i * 1000;
    } else if (t->kind == IR_TK_FLOAT) {
        error_at(ps, t, "%s must be a whole number with a unit (ms, s, m or h), e.g. 1500ms", what);
        return false;
    } else {
        error_at(ps, t, "expected a duration for %s (e.g. 30s, 500ms, 2m)", what);
        return false;
    }
    advance(ps);
    if (neg || *ms <= 0) {
        error_at(ps, t, "%s must be a positive duration", what);
        return false;
    }
    if (*ms > IR_MAX_POLICY_DURATION_MS) {
        error_at(ps, t, "%s is too long (at most 366 days)", what);
        return false;
    }
    return true;
}

/* A growth factor: a number from 1 to 100, kept in thousandths (exact, and the same on every
 * machine that replays the backoff). */
static bool
parse_multiplier(struct parser *ps, int64_t *milli)
{
    const struct ir_token *t = peek(ps);
    double v;

    if (t->kind == IR_TK_INT) {
        v = (double) t->v.i;
    } else if (t->kind == IR_TK_FLOAT) {
        v = t->v.f;
    } else {
        error_at(ps, t, "expected a number for multiplier (e.g. 1.5)");
        return false;
    }
    if (!(v >= IR_MIN_BACKOFF_MULTIPLIER_MILLI / 1000.0 &&
          v <= IR_MAX_BACKOFF_MULTIPLIER_MILLI / 1000.0)) {
        error_at(ps, t, "multiplier must be between 1 and 100");
        return false;
    }
    *milli = (int64_t) (v * 1000.0 + 0.5);
    advance(ps);
    return true;
}

/* One `name: value` after a retry count: backoff, max_backoff or multiplier, each at most
 * once (seen: a bit per option). */
static bool
parse_retry_option(struct parser *ps, struct ir_policy *pol, unsigned *seen)
{
    static const char *const names[] = {"backoff", "max_backoff", "multiplier", "max_elapsed"};
    const struct ir_token *t = peek(ps);
    unsigned k;

    for (k = 0; k < 4; k++) {
        if (is_name_tok(t, names[k]) && peek_at(ps, 1)->kind == IR_TK_COLON) {
            break;
        }
    }
    if (k == 4) {
        error_at(ps, t,
                 "expected 'backoff:', 'max_backoff:', 'multiplier:' or 'max_elapsed:' after the "
                 "retry count");
        return false;
    }
    if (*seen & (1u << k)) {
        error_at(ps, t, "'%s' appears twice in this policy", names[k]);
        return false;
    }
    *seen |= 1u << k;
    advance(ps);
    advance(ps);
    if (k == 2) {
        return parse_multiplier(ps, &pol->multiplier_milli);
    }
    if (k == 3) {
        return parse_duration(ps, names[k], &pol->max_elapsed_ms);
    }
    if (!parse_duration(ps, names[k], k == 0 ? &pol->backoff_ms : &pol->max_backoff_ms)) {
        return false;
    }
    if ((k == 0 ? pol->backoff_ms : pol->max_backoff_ms) > IR_MAX_BACKOFF_MS) {
        error_at(ps, t,
                 k == 0 ? "backoff is capped at 1h; use a smaller base delay"
                        : "max_backoff is at most 1h");
        return false;
    }
    return true;
}

static bool
parse_policy(struct parser *ps, struct ir_policy *pol)
{
    const struct ir_token *open = advance(ps); /* '[' */
    const struct ir_token *t = peek(ps);
    unsigned seen = 0;

    memset(pol, 0, sizeof(*pol));
    pol->pos = tok_pos(open);
    if ((is_name_tok(t, "timeout") || is_name_tok(t, "deadline")) &&
        peek_at(ps, 1)->kind == IR_TK_COLON) {
        bool deadline = is_name_tok(t, "deadline");
        advance(ps);
        advance(ps);
        pol->kind = deadline ? IR_POLICY_DEADLINE : IR_POLICY_TIMEOUT;
        if (!parse_duration(ps, deadline ? "deadline" : "timeout", &pol->timeout_ms)) {
            return false;
        }
        return expect(ps, IR_TK_RBRACK, "to close the policy");
    }
    if (is_name_tok(t, "version") && peek_at(ps, 1)->kind == IR_TK_COLON) {
        const struct ir_token *v;
        advance(ps);
        advance(ps);
        v = peek(ps);
        pol->kind = IR_POLICY_VERSION;
        if (v->kind != IR_TK_STRING) {
            error_at(ps, v, "expected a version string after 'version:' (e.g. [version: \"v2\"])");
            return false;
        }
        /* The registry's rule, checked here so that a typo fails at registration, not when
         * the call runs and finds no such version. */
        if (!ir_workflow_version_ok(v->str, v->str_len)) {
            error_at(ps, v,
                     "a version is 1 to %d letters, digits, '_', '.' or '-' (as registered with "
                     "cairnctl register --version)",
                     IR_WORKFLOW_VERSION_MAX);
            return false;
        }
        advance(ps);
        pol->version = v->str;
        return expect(ps, IR_TK_RBRACK, "to close the policy");
    }
    if (!(is_name_tok(t, "retry") && peek_at(ps, 1)->kind == IR_TK_COLON)) {
        if (t->kind != IR_TK_NAME && t->kind != IR_TK_LPAREN) {
            error_at(ps, t, "expected 'retry', 'timeout', 'deadline' or error types in policy");
            return false;
        }
        if (!parse_types(ps, &pol->types, "an error type")) {
            return false;
        }
        if (!at(ps, IR_TK_ARROW)) {
            error_at(ps, peek(ps),
                     "expected '->' after error types in policy (e.g. [TimeoutError -> retry: 3])");
            return false;
        }
        advance(ps);
        t = peek(ps);
        if (is_name_tok(t, "timeout") || is_name_tok(t, "deadline")) {
            error_at(ps, t, "a %s applies to every attempt; it cannot be limited to error types",
                     is_name_tok(t, "timeout") ? "timeout" : "deadline");
            return false;
        }
        if (is_name_tok(t, "version")) {
            error_at(ps, t,
                     "a version applies to the whole call; it cannot be limited to error types");
            return false;
        }
        if (!is_name_tok(t, "retry")) {
            error_at(ps, t, "expected 'retry' after '->' in policy");
            return false;
        }
    }
    advance(ps); /* retry */
    if (!expect(ps, IR_TK_COLON, "after 'retry'")) {
        return false;
    }
    pol->kind = IR_POLICY_RETRY;
    pol->backoff_ms = IR_DEFAULT_BACKOFF_MS;
    t = peek(ps);
    if (t->kind == IR_TK_MINUS && peek_at(ps, 1)->kind == IR_TK_INT) {
        error_at(ps, t, "retry count must be 0 or more");
        return false;
    }
    if (t->kind != IR_TK_INT) {
        error_at(ps, t, "expected a whole number of retries after 'retry:'");
        return false;
    }
    if (t->v.i > 1000000) {
        error_at(ps, t, "retry count %.*s is too large (limit 1000000)", (int) t->len, t->start);
        return false;
    }
    pol->retries = (int64_t) advance(ps)->v.i;
    pol->max_backoff_ms = IR_MAX_BACKOFF_MS;
    pol->multiplier_milli = IR_DEFAULT_BACKOFF_MULTIPLIER_MILLI;
    while (accept(ps, IR_TK_COMMA)) {
        if (!parse_retry_option(ps, pol, &seen)) {
            return false;
        }
    }
    if (pol->backoff_ms > pol->max_backoff_ms) {
        error_at(ps, open,
                 "backoff is larger than max_backoff: the first delay would exceed the cap");
        return false;
    }
    if (pol->max_elapsed_ms != 0 && pol->max_elapsed_ms < pol->backoff_ms) {
        error_at(ps, open,
                 "max_elapsed is shorter than backoff: no retry could ever start in time");
        return false;
    }
    return expect(ps, IR_TK_RBRACK, "to close the policy");
}

/* True at `[fail_fast]`. */
static bool
at_fail_fast(struct parser *ps)
{
    return at(ps, IR_TK_LBRACK) && is_name_tok(peek_at(ps, 1), "fail_fast") &&
           peek_at(ps, 2)->kind == IR_TK_RBRACK;
}

/* Consumes `[fail_fast]` into *flag (NULL: not allowed here, an error). */
static bool
parse_fail_fast(struct parser *ps, bool *flag)
{
    const struct ir_token *t = advance(ps); /* '[' */

    if (flag == NULL) {
        error_at(ps, t, "[fail_fast] applies to a spread or a parallel block, not to one call");
        return false;
    }
    if (*flag) {
        error_at(ps, t, "[fail_fast] given twice");
        return false;
    }
    *flag = true;
    advance(ps);
    advance(ps);
    return true;
}

/* Whether policy p may go on call ac, else an error at its bracket: a child started with
 * `start` has nobody waiting for it, and only children have versions. */
static bool
policy_fits(struct parser *ps, const struct ir_action_call *ac, const struct ir_policy *p)
{
    struct ir_token at_br;
    const char *what = p->kind == IR_POLICY_RETRY     ? "retry: N"
                       : p->kind == IR_POLICY_TIMEOUT ? "timeout: D"
                                                      : "deadline: D";

    memset(&at_br, 0, sizeof(at_br));
    at_br.line = p->pos.line;
    at_br.col = p->pos.col;
    if (p->kind == IR_POLICY_VERSION) {
        if (ac->call == IR_CALL_ACTION) {
            error_at(ps, &at_br,
                     "[version: ...] pins the version of a child workflow (run or start); an "
                     "action has no version");
            return false;
        }
        if (ac->version != NULL) {
            error_at(ps, &at_br, "version given twice for the same call");
            return false;
        }
        return true;
    }
    if (ac->call == IR_CALL_START) {
        error_at(ps, &at_br,
                 "[%s] does not apply to start: start returns the child's id at once and nothing "
                 "waits for the child; use run to wait for it (with retries and a timeout), or "
                 "put the policy inside the child workflow",
                 what);
        return false;
    }
    if (ac->call == IR_CALL_RUN && p->kind == IR_POLICY_DEADLINE) {
        error_at(ps, &at_br,
                 "[deadline: D] does not apply to run: use [timeout: D], which for a child "
                 "workflow counts from when the child is started");
        return false;
    }
    return true;
}

/* The `('.' NAME)*` after the first part of a dotted name, appended to *name; *dots counts the
 * parts. Keywords are fine after a dot (@db.input, @queue.sleep, billing.input). `what` names
 * the kind of name for the error. */
static bool
parse_dotted_rest(struct parser *ps, const char *what, struct cn_buf *name, int *dots)
{
    while (accept(ps, IR_TK_DOT)) {
        if (!at(ps, IR_TK_NAME) && !(peek(ps)->kind >= IR_TK_FN && peek(ps)->kind <= IR_TK_PASS)) {
            error_at(ps, peek(ps), "expected a name after '.' in %s name", what);
            return false;
        }
        if (cn_buf_putc(name, '.') != CN_OK || cn_buf_puts(name, advance(ps)->str) != CN_OK) {
            nomem(ps);
            return false;
        }
        (*dots)++;
    }
    return true;
}

/* The action name after '@' (consumed, at): NAME ('.' NAME)+, into *name. */
static bool
parse_action_name(struct parser *ps, const struct ir_token *at_tok, struct cn_buf *name)
{
    int dots = 0;

    if (!at(ps, IR_TK_NAME)) {
        error_at(ps, peek(ps), "expected an action name after '@' (e.g. @mail.send)");
        return false;
    }
    if (cn_buf_puts(name, advance(ps)->str) != CN_OK) {
        nomem(ps);
        return false;
    }
    if (!parse_dotted_rest(ps, "action", name, &dots)) {
        return false;
    }
    if (dots == 0) {
        error_at(ps, at_tok, "action names are module-qualified: write @module.%s(...)",
                 name->data);
        return false;
    }
    return true;
}

/* The workflow name after `run`/`start` (consumed, kw): NAME ('.' NAME)*, into *name. It is
 * never resolved against the file's functions: `run f(...)` starts the registered workflow f,
 * whatever helpers the file defines. */
static bool
parse_workflow_name(struct parser *ps, const struct ir_token *kw, struct cn_buf *name)
{
    const struct ir_token *first = peek(ps);
    int dots = 0;

    if (first->kind == IR_TK_STRING) {
        error_at(ps, first,
                 "a workflow name is written without quotes (%s billing.refund(...)); names "
                 "with '-' cannot be called",
                 kw->str);
        return false;
    }
    if (first->kind != IR_TK_NAME) {
        error_at(ps, first, "expected a workflow name after '%s' (e.g. %s billing.refund(order=o))",
                 kw->str, kw->str);
        return false;
    }
    if (cn_buf_puts(name, advance(ps)->str) != CN_OK) {
        nomem(ps);
        return false;
    }
    if (!parse_dotted_rest(ps, "workflow", name, &dots)) {
        return false;
    }
    if (!ir_workflow_name_ok(name->data)) {
        error_at(ps, first, "workflow name is too long (at most %d characters)",
                 IR_WORKFLOW_NAME_MAX);
        return false;
    }
    return true;
}

/* An action call `'@' NAME ('.' NAME)+ '(' kwargs ')' policies` (the '@' is current), or a
 * child workflow call `run|start NAME ('.' NAME)* '(' kwargs ')' policies` (the word is
 * current). fail_fast: where a spread's `[fail_fast]` goes (among its call's policies), NULL
 * elsewhere. */
static bool
parse_action(struct parser *ps, struct ir_action_call *ac, bool *fail_fast)
{
    const struct ir_token *t = advance(ps);
    struct cn_buf name = CN_BUF_INIT;
    struct ir_kwarg *kw = NULL;
    struct ir_policy *pols = NULL;
    struct cn_strmap kwseen = CN_STRMAP_INIT;
    size_t nkw = 0, kwcap = 0, npol = 0, polcap = 0, i;
    bool named;

    memset(ac, 0, sizeof(*ac));
    ac->pos = tok_pos(t);
    if (t->kind == IR_TK_AT) {
        named = parse_action_name(ps, t, &name);
    } else {
        ac->call = (uint8_t) (is_name_tok(t, "run") ? IR_CALL_RUN : IR_CALL_START);
        named = parse_workflow_name(ps, t, &name);
    }
    if (!named ||
        !expect(ps, IR_TK_LPAREN,
                ac->call == IR_CALL_ACTION ? "after action name" : "after the workflow name")) {
        goto fail;
    }
    while (!at(ps, IR_TK_RPAREN)) {
        const struct ir_token *k = peek(ps);
        struct ir_kwarg a;
        if (k->kind != IR_TK_NAME || peek_at(ps, 1)->kind != IR_TK_ASSIGN) {
            error_at(ps, k,
                     ac->call == IR_CALL_ACTION
                         ? "actions take keyword arguments only (write name=value)"
                         : "child workflows take keyword arguments only (write name=value, one "
                           "per input of the child's main)");
            goto fail;
        }
        if (seen(ps, &kwseen, k->str)) {
            error_at(ps, k, "keyword argument '%s' repeated", k->str);
            goto fail;
        }
        advance(ps);
        advance(ps);
        a.name = k->str;
        a.pos = tok_pos(k);
        a.expr = parse_expr(ps);
        if (ps->panic) {
            goto fail;
        }
        if (cn_vec_grow((void **) &kw, &kwcap, sizeof(*kw), nkw + 1) != CN_OK) {
            goto oom;
        }
        kw[nkw++] = a;
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    if (!expect(ps, IR_TK_RPAREN,
                ac->call == IR_CALL_ACTION ? "to close the action's arguments"
                                           : "to close the child workflow's arguments")) {
        goto fail;
    }
    while (at(ps, IR_TK_LBRACK)) {
        struct ir_policy p;
        if (at_fail_fast(ps)) {
            if (!parse_fail_fast(ps, fail_fast)) {
                goto fail;
            }
            continue;
        }
        if (!parse_policy(ps, &p) || !policy_fits(ps, ac, &p)) {
            goto fail;
        }
        if (p.kind == IR_POLICY_VERSION) {
            ac->version = p.version;
            continue;
        }
        if (p.kind != IR_POLICY_RETRY) {
            for (i = 0; i < npol; i++) {
                if (pols[i].kind == p.kind) {
                    ir_diags_add(ps->d, p.pos.line, p.pos.col, "%s given twice for the same %s",
                                 p.kind == IR_POLICY_TIMEOUT ? "timeout" : "deadline",
                                 ac->call == IR_CALL_ACTION ? "action" : "call");
                    ps->panic = true;
                    goto fail;
                }
            }
        }
        if (cn_vec_grow((void **) &pols, &polcap, sizeof(*pols), npol + 1) != CN_OK) {
            goto oom;
        }
        pols[npol++] = p;
    }
    ac->name = cn_arena_strndup(ps->prog->arena, name.data, name.len);
    ac->kwargs = arena_copy(ps, kw, nkw, sizeof(*kw));
    ac->nkwargs = (uint32_t) nkw;
    ac->policies = arena_copy(ps, pols, npol, sizeof(*pols));
    ac->npolicies = (uint32_t) npol;
    if (ac->name == NULL) {
        goto oom;
    }
    cn_buf_fini(&name);
    free(kw);
    free(pols);
    cn_strmap_fini(&kwseen);
    return true;
oom:
    nomem(ps);
fail:
    cn_buf_fini(&name);
    free(kw);
    free(pols);
    cn_strmap_fini(&kwseen);
    return false;
}

/* ---- statements --------------------------------------------------------------------------- */

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
    error_at(ps, peek(ps), "expected end of line after statement");
    return false;
}

/* Turns parsed target expressions into names, with the immutability errors docs/language.md
 * describes. */
static bool
targets_from_exprs(struct parser *ps, const struct u32_vec *ex, struct ir_names *out)
{
    struct name_vec nv = {0};
    struct pos_vec pv = {0};
    struct cn_strmap dup = CN_STRMAP_INIT;
    size_t i;

    for (i = 0; i < ex->len; i++) {
        const struct ir_expr *e = &ps->prog->exprs.items[ex->items[i]];
        struct ir_token fake;
        memset(&fake, 0, sizeof(fake));
        fake.line = e->line;
        fake.col = e->col;
        if (e->kind == IR_X_INDEX) {
            struct cn_buf b = CN_BUF_INIT, k = CN_BUF_INIT;
            uint32_t base = ir_xchild(&ps->prog->exprs, e, 0);
            uint32_t key = ir_xchild(&ps->prog->exprs, e, 1);
            if (ir_expr_print(&ps->prog->exprs, base, &b) != CN_OK ||
                ir_expr_print(&ps->prog->exprs, key, &k) != CN_OK) {
                cn_buf_fini(&b);
                cn_buf_fini(&k);
                nomem(ps);
                goto fail;
            }
            /* Point at the container, where the user reads the assignment. */
            fake.line = ps->prog->exprs.items[base].line;
            fake.col = ps->prog->exprs.items[base].col;
            error_at(ps, &fake,
                     "item assignment is not supported: values are immutable; build a new value "
                     "instead, e.g. %s = %s | {%s: ...}",
                     b.data, b.data, k.data);
            cn_buf_fini(&b);
            cn_buf_fini(&k);
            goto fail;
        }
        if (e->kind == IR_X_ATTR) {
            struct cn_buf b = CN_BUF_INIT;
            uint32_t base = ir_xchild(&ps->prog->exprs, e, 0);
            if (ir_expr_print(&ps->prog->exprs, base, &b) != CN_OK) {
                cn_buf_fini(&b);
                nomem(ps);
                goto fail;
            }
            fake.line = ps->prog->exprs.items[base].line;
            fake.col = ps->prog->exprs.items[base].col;
            error_at(ps, &fake,
                     "attribute assignment is not supported: values are immutable; build a new "
                     "value instead, e.g. %s = %s | {\"%s\": ...}",
                     b.data, b.data, e->name);
            cn_buf_fini(&b);
            goto fail;
        }
        if (e->kind != IR_X_NAME) {
            error_at(ps, &fake,
                     "cannot assign to an expression; the left side of '=' must be "
                     "one or more names");
            goto fail;
        }
        if (seen(ps, &dup, e->name)) {
            error_at(ps, &fake, "name '%s' appears twice in the assignment targets", e->name);
            goto fail;
        }
        if (CN_VEC_PUSH(&nv, e->name) != CN_OK ||
            CN_VEC_PUSH(&pv, ((struct ir_pos){e->line, e->col})) != CN_OK) {
            nomem(ps);
            goto fail;
        }
    }
    *out = names_finish(ps, &nv, &pv);
    cn_strmap_fini(&dup);
    return true;
fail:
    free(nv.items);
    free(pv.items);
    cn_strmap_fini(&dup);
    return false;
}

static struct ir_stmt *
parse_parallel(struct parser *ps, struct ir_stmt *s)
{
    struct ir_pbranch *br = NULL;
    size_t n = 0, cap = 0;

    advance(ps); /* parallel */
    while (at_fail_fast(ps)) {
        if (!parse_fail_fast(ps, &s->fail_fast)) {
            return s;
        }
    }
    if (!expect(ps, IR_TK_COLON, "after 'parallel' (or 'parallel [fail_fast]')")) {
        return s;
    }
    if (!at(ps, IR_TK_NEWLINE) || peek_at(ps, 1)->kind != IR_TK_INDENT) {
        error_at(ps, peek(ps), "expected an indented block of calls after 'parallel:'");
        return s;
    }
    advance(ps);
    advance(ps);
    while (!at(ps, IR_TK_DEDENT) && !at(ps, IR_TK_EOF)) {
        struct ir_pbranch b;
        const struct ir_token *t = peek(ps);
        memset(&b, 0, sizeof(b));
        b.pos = tok_pos(t);
        if (child_call_at(ps) == IR_CALL_START) {
            /* A branch is something to wait for; a start has nothing to wait for. */
            error_at(ps, t,
                     "start returns at once, so it does not belong in a parallel block: write "
                     "`id = start wf(...)` statements one after another");
            break;
        }
        if (t->kind == IR_TK_AT || child_call_at(ps) == IR_CALL_RUN) {
            b.is_action = true;
            if (!parse_action(ps, &b.action, NULL)) {
                break;
            }
        } else {
            uint32_t e = parse_expr(ps);
            if (ps->panic) {
                break;
            }
            if (ps->prog->exprs.items[e].kind != IR_X_CALL) {
                error_at(ps, t,
                         "a parallel block holds only calls: actions (@mod.action(...)), child "
                         "workflows (run wf(...)) or helper functions (name(...))");
                break;
            }
            b.call = e;
        }
        if (cn_vec_grow((void **) &br, &cap, sizeof(*br), n + 1) != CN_OK) {
            nomem(ps);
            break;
        }
        br[n++] = b;
        if (!end_simple(ps)) {
            break;
        }
    }
    if (!ps->panic) {
        if (n == 0) {
            error_at(ps, peek(ps), "a parallel block needs at least one call");
        }
        accept(ps, IR_TK_DEDENT);
        s->branches = arena_copy(ps, br, n, sizeof(*br));
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
    s->expr = parse_or(ps);
    if (ps->panic) {
        return false;
    }
    if (!expect(ps, IR_TK_COLON, "after the spread collection (spread items:item -> @...)")) {
        return false;
    }
    t = peek(ps);
    if (t->kind != IR_TK_NAME) {
        error_at(ps, t, "expected the item variable name after ':' in spread");
        return false;
    }
    advance(ps);
    s->item = t->str;
    s->item_pos = tok_pos(t);
    if (!expect(ps, IR_TK_ARROW, "after the spread item variable")) {
        return false;
    }
    /* After '->' only a call can follow, so `run`/`start` are keywords whatever comes next. */
    if (!at(ps, IR_TK_AT) && !is_child_word(peek(ps))) {
        error_at(ps, peek(ps),
                 "spread runs one action or child workflow per item: expected "
                 "'@module.action(...)' or 'run workflow(...)'");
        return false;
    }
    return parse_action(ps, &s->action, &s->fail_fast);
}

static enum ir_binop
aug_op(enum ir_tok k, bool *ok)
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
    e = parse_exprs(ps, &lhs);
    if (ps->panic) {
        goto out;
    }
    op = aug_op(peek(ps)->kind, &aug);
    if (aug) {
        const struct ir_token *opt = advance(ps);
        uint32_t kids[2];
        if (!targets_from_exprs(ps, &lhs, &s->targets)) {
            goto out;
        }
        if (s->targets.len != 1 || e != lhs.items[0]) {
            error_at(ps, opt, "augmented assignment takes exactly one name on the left");
            goto out;
        }
        kids[0] = e;
        kids[1] = parse_expr(ps);
        if (ps->panic) {
            goto out;
        }
        s->expr = mk(ps, IR_X_BIN, op, opt, kids, 2);
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
        if (parse_action(ps, &s->action, NULL)) {
            if (s->action.call == IR_CALL_START && s->targets.unpack) {
                struct ir_token first;
                memset(&first, 0, sizeof(first));
                first.line = s->pos.line;
                first.col = s->pos.col;
                error_at(ps, &first,
                         "start gives one value, the child's id (a string): it cannot be "
                         "unpacked; write `child_id = start ...`");
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
        s->expr = parse_exprs(ps, &rhs);
        if (!ps->panic && at(ps, IR_TK_ASSIGN)) {
            error_at(ps, peek(ps), "chained assignment (a = b = ...) is not supported");
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

static struct ir_stmt *
parse_if(struct parser *ps)
{
    const struct ir_token *t = advance(ps);
    struct ir_stmt *s = new_stmt(ps, IR_S_IF, t);
    struct ir_arm *arms = NULL;
    size_t n = 0, cap = 0;
    struct ir_arm a;

    if (s == NULL) {
        return NULL;
    }
    for (;;) {
        memset(&a, 0, sizeof(a));
        a.pos = tok_pos(t);
        if (t->kind == IR_TK_ELSE) {
            a.cond = IR_NO_EXPR;
            if (!expect(ps, IR_TK_COLON, "after 'else'")) {
                break;
            }
            a.body = parse_block(ps, "'else'");
        } else {
            a.cond = parse_expr(ps);
            if (ps->panic) {
                break;
            }
            if (!expect(ps, IR_TK_COLON,
                        t->kind == IR_TK_IF ? "after if condition" : "after elif condition")) {
                break;
            }
            a.body = parse_block(ps, t->kind == IR_TK_IF ? "'if'" : "'elif'");
        }
        if (ps->panic) {
            break;
        }
        if (cn_vec_grow((void **) &arms, &cap, sizeof(*arms), n + 1) != CN_OK) {
            nomem(ps);
            break;
        }
        arms[n++] = a;
        if (a.cond == IR_NO_EXPR || !(at(ps, IR_TK_ELIF) || at(ps, IR_TK_ELSE))) {
            break;
        }
        t = advance(ps);
    }
    s->arms = arena_copy(ps, arms, n, sizeof(*arms));
    s->narms = (uint32_t) n;
    free(arms);
    return s;
}

static struct ir_stmt *
parse_for(struct parser *ps)
{
    const struct ir_token *t = advance(ps);
    struct ir_stmt *s = new_stmt(ps, IR_S_FOR, t);
    struct name_vec nv = {0};
    struct pos_vec pv = {0};
    struct cn_strmap dup = CN_STRMAP_INIT;
    bool paren, unpack = false;

    if (s == NULL) {
        return NULL;
    }
    paren = accept(ps, IR_TK_LPAREN);
    do {
        const struct ir_token *n = peek(ps);
        if (nv.len > 0 && (at(ps, IR_TK_IN) || (paren && at(ps, IR_TK_RPAREN)))) {
            unpack = true; /* a trailing comma: `for a, in pairs:` unpacks each item */
            break;
        }
        if (n->kind != IR_TK_NAME) {
            error_at(ps, n, "expected a loop variable name after 'for'");
            goto fail;
        }
        advance(ps);
        if (seen(ps, &dup, n->str)) {
            error_at(ps, n, "loop variable '%s' appears twice", n->str);
            goto fail;
        }
        if (!names_push(ps, &nv, &pv, n)) {
            goto fail;
        }
    } while (accept(ps, IR_TK_COMMA));
    if (paren && !expect(ps, IR_TK_RPAREN, "to close the loop variables")) {
        goto fail;
    }
    if (!expect(ps, IR_TK_IN, "after the loop variable")) {
        goto fail;
    }
    s->targets = names_finish(ps, &nv, &pv);
    s->targets.unpack = unpack || s->targets.len > 1;
    cn_strmap_fini(&dup);
    s->expr = parse_expr(ps);
    if (ps->panic) {
        return s;
    }
    if (!expect(ps, IR_TK_COLON, "after for loop header")) {
        return s;
    }
    s->body = parse_block(ps, "'for'");
    return s;
fail:
    free(nv.items);
    free(pv.items);
    cn_strmap_fini(&dup);
    return s;
}

static struct ir_stmt *
parse_while(struct parser *ps)
{
    const struct ir_token *t = advance(ps);
    struct ir_stmt *s = new_stmt(ps, IR_S_WHILE, t);

    if (s == NULL) {
        return NULL;
    }
    s->expr = parse_expr(ps);
    if (ps->panic || !expect(ps, IR_TK_COLON, "after while condition")) {
        return s;
    }
    s->body = parse_block(ps, "'while'");
    return s;
}

static struct ir_stmt *
parse_try(struct parser *ps)
{
    const struct ir_token *t = advance(ps);
    struct ir_stmt *s = new_stmt(ps, IR_S_TRY, t);
    struct ir_handler *hs = NULL;
    size_t n = 0, cap = 0;

    if (s == NULL) {
        return NULL;
    }
    if (!expect(ps, IR_TK_COLON, "after 'try'")) {
        return s;
    }
    s->body = parse_block(ps, "'try'");
    if (ps->panic) {
        return s;
    }
    if (!at(ps, IR_TK_EXCEPT)) {
        error_at(ps, peek(ps), "expected 'except' after the try block");
        return s;
    }
    while (at(ps, IR_TK_EXCEPT)) {
        struct ir_handler h;
        const struct ir_token *e = advance(ps);
        memset(&h, 0, sizeof(h));
        h.pos = tok_pos(e);
        if (n > 0 && hs[n - 1].types.len == 0) {
            error_at(ps, e, "a bare 'except:' must be the last handler");
            break;
        }
        if (at(ps, IR_TK_AS)) {
            /* Python rejects it too: a handler that binds the error names what it catches. */
            error_at(ps, peek(ps),
                     "'except as NAME' needs an error type before 'as' (e.g. 'except ValueError "
                     "as e:'); a bare 'except:' binds no name");
            break;
        }
        if (!at(ps, IR_TK_COLON)) {
            if (!parse_types(ps, &h.types, "an error type after 'except'")) {
                break;
            }
        }
        if (accept(ps, IR_TK_AS)) {
            const struct ir_token *b = peek(ps);
            if (b->kind != IR_TK_NAME) {
                error_at(ps, b, "expected a name after 'as'");
                break;
            }
            advance(ps);
            h.bind = b->str;
            h.bind_pos = tok_pos(b);
        }
        if (!expect(ps, IR_TK_COLON, "after except clause")) {
            break;
        }
        h.body = parse_block(ps, "'except'");
        if (ps->panic) {
            break;
        }
        if (cn_vec_grow((void **) &hs, &cap, sizeof(*hs), n + 1) != CN_OK) {
            nomem(ps);
            break;
        }
        hs[n++] = h;
    }
    s->handlers = arena_copy(ps, hs, n, sizeof(*hs));
    s->nhandlers = (uint32_t) n;
    free(hs);
    return s;
}

static struct ir_stmt *
parse_stmt(struct parser *ps)
{
    const struct ir_token *t = peek(ps);
    struct ir_stmt *s;

    switch (t->kind) {
    case IR_TK_IF:
        return parse_if(ps);
    case IR_TK_FOR:
        return parse_for(ps);
    case IR_TK_WHILE:
        return parse_while(ps);
    case IR_TK_TRY:
        return parse_try(ps);
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
            s->expr = parse_exprs(ps, &v);
        }
        free(v.items);
        if (!ps->panic) {
            end_simple(ps);
        }
        return s;
    }
    case IR_TK_SLEEP:
        advance(ps);
        s = new_stmt(ps, IR_S_SLEEP, t);
        if (s != NULL) {
            s->expr = parse_expr(ps);
        }
        if (!ps->panic) {
            end_simple(ps);
        }
        return s;
    case IR_TK_AT:
        s = new_stmt(ps, IR_S_ACTION, t);
        if (s != NULL && parse_action(ps, &s->action, NULL)) {
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
        error_at(ps, t, "unexpected indent");
        return NULL;
    case IR_TK_ELSE:
    case IR_TK_ELIF:
        error_at(ps, t, "'%s' without a matching 'if' (check the indentation)", t->str);
        return NULL;
    case IR_TK_EXCEPT:
        error_at(ps, t, "'except' without a matching 'try' (check the indentation)");
        return NULL;
    case IR_TK_FN:
        error_at(ps, t, "functions must be defined at top level, not inside another function");
        return NULL;
    default:
        if (child_call_at(ps) != IR_CALL_ACTION) {
            s = new_stmt(ps, IR_S_ACTION, t);
            if (s != NULL && parse_action(ps, &s->action, NULL)) {
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
            sync_stmt(ps);
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
    b.items = arena_copy(ps, v.items, v.len, sizeof(v.items[0]));
    b.len = (uint32_t) v.len;
    free(v.items);
    return b;
}

/* After a header's ':' : an indented block, or one simple statement on the same line. */
static struct ir_block
parse_block(struct parser *ps, const char *what)
{
    struct ir_block b = {NULL, 0};
    struct ir_stmt *s;
    enum ir_tok k = peek(ps)->kind;

    if (!at(ps, IR_TK_NEWLINE)) {
        if (k == IR_TK_IF || k == IR_TK_FOR || k == IR_TK_WHILE || k == IR_TK_TRY ||
            k == IR_TK_EOF) {
            error_at(ps, peek(ps), "expected an indented block after %s", what);
            return b;
        }
        s = parse_stmt(ps);
        if (ps->panic || s == NULL) {
            return b;
        }
        b.items = arena_copy(ps, &s, 1, sizeof(s));
        b.len = 1;
        return b;
    }
    advance(ps);
    if (!at(ps, IR_TK_INDENT)) {
        error_at(ps, peek(ps), "expected an indented block after %s", what);
        return b;
    }
    advance(ps);
    /* The lexer already caps indentation levels; this bounds the recursion on its own terms. */
    if (ps->block_depth >= IR_PARSE_MAX_DEPTH) {
        error_at(ps, peek(ps), "blocks nested too deeply (limit %d)", IR_PARSE_MAX_DEPTH);
        return b;
    }
    ps->block_depth++;
    b = parse_stmts(ps);
    ps->block_depth--;
    return b;
}

/* '[' NAME, ... ']' after input: / output: */
static bool
parse_name_list(struct parser *ps, struct ir_names *out, const char *what)
{
    struct name_vec nv = {0};
    struct pos_vec pv = {0};
    struct cn_strmap dup = CN_STRMAP_INIT;

    if (!expect(ps, IR_TK_LBRACK, what)) {
        return false;
    }
    while (!at(ps, IR_TK_RBRACK)) {
        const struct ir_token *t = peek(ps);
        if (t->kind != IR_TK_NAME) {
            error_at(ps, t, "expected a name in the %s list", what + 6 /* skip "after " */);
            goto fail;
        }
        advance(ps);
        if (seen(ps, &dup, t->str)) {
            error_at(ps, t, "duplicate name '%s'", t->str);
            goto fail;
        }
        if (!names_push(ps, &nv, &pv, t)) {
            goto fail;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    if (!expect(ps, IR_TK_RBRACK, "to close the name list")) {
        goto fail;
    }
    *out = names_finish(ps, &nv, &pv);
    cn_strmap_fini(&dup);
    return true;
fail:
    free(nv.items);
    free(pv.items);
    cn_strmap_fini(&dup);
    return false;
}

static bool
parse_func(struct parser *ps, struct ir_func *f)
{
    const struct ir_token *t = advance(ps); /* fn */
    const struct ir_token *n = peek(ps);

    memset(f, 0, sizeof(*f));
    f->pos = tok_pos(t);
    if (n->kind != IR_TK_NAME) {
        error_at(ps, n, "expected a function name after 'fn'");
        return false;
    }
    advance(ps);
    f->name = n->str;
    f->pos = tok_pos(n);
    if (!expect(ps, IR_TK_LPAREN, "after function name")) {
        return false;
    }
    if (accept(ps, IR_TK_INPUT)) {
        if (!expect(ps, IR_TK_COLON, "after 'input'") ||
            !parse_name_list(ps, &f->inputs, "after input:")) {
            return false;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            goto close;
        }
    }
    if (accept(ps, IR_TK_OUTPUT)) {
        if (!expect(ps, IR_TK_COLON, "after 'output'") ||
            !parse_name_list(ps, &f->outputs, "after output:")) {
            return false;
        }
        accept(ps, IR_TK_COMMA);
    } else if (at(ps, IR_TK_NAME)) {
        error_at(ps, peek(ps), "parameters are declared as fn %s(input: [a, b], output: [c])",
                 f->name);
        return false;
    }
close:
    if (!expect(ps, IR_TK_RPAREN, "to close the function signature")) {
        return false;
    }
    /* `fn main(...) [timeout: D]:` bounds a whole instance (the checker allows it on the entry
     * function only). */
    while (at(ps, IR_TK_LBRACK)) {
        const struct ir_token *o = peek(ps);
        struct ir_policy p;
        if (!(is_name_tok(peek_at(ps, 1), "timeout") && peek_at(ps, 2)->kind == IR_TK_COLON)) {
            error_at(ps, o, "a function takes only [timeout: D] (the workflow's deadline)");
            return false;
        }
        if (f->timeout_ms != 0) {
            error_at(ps, o, "timeout given twice for function %s", f->name);
            return false;
        }
        if (!parse_policy(ps, &p)) {
            return false;
        }
        f->timeout_ms = p.timeout_ms;
        f->timeout_pos = p.pos;
    }
    if (!expect(ps, IR_TK_COLON, "after function signature")) {
        return false;
    }
    f->body = parse_block(ps, "the function signature");
    return !ps->panic;
}

void
ir_program_free(struct ir_program *p)
{
    if (p == NULL) {
        return;
    }
    ir_xpool_fini(&p->exprs);
    cn_arena_free(p->arena);
    free(p);
}

cn_err
ir_parse(const char *src, size_t len, struct ir_diags *diags, struct ir_program **out)
{
    struct parser ps;
    struct ir_func *funcs = NULL;
    struct cn_strmap fnames = CN_STRMAP_INIT;
    size_t nf = 0, cap = 0, errs0 = diags->len;
    cn_err rv;

    memset(&ps, 0, sizeof(ps));
    ps.d = diags;
    ps.prog = calloc(1, sizeof(*ps.prog));
    if (ps.prog == NULL) {
        return CN_NOMEM;
    }
    ps.prog->arena = cn_arena_new(16 * 1024);
    if (ps.prog->arena == NULL || ir_xpool_init(&ps.prog->exprs) != CN_OK) {
        ir_program_free(ps.prog);
        return CN_NOMEM;
    }
    if ((rv = ir_lex(src, len, ps.prog->arena, diags, &ps.toks)) != CN_OK) {
        ir_program_free(ps.prog);
        return rv;
    }
    while (!at(&ps, IR_TK_EOF) && ps.rv == CN_OK) {
        struct ir_func f;
        size_t before = ps.i;
        if (accept(&ps, IR_TK_NEWLINE)) {
            continue;
        }
        if (!at(&ps, IR_TK_FN)) {
            error_at(&ps, peek(&ps),
                     at(&ps, IR_TK_INDENT) ? "unexpected indent"
                                           : "expected 'fn' at top level (statements belong "
                                             "inside a function)");
            sync_stmt(&ps);
            if (ps.i == before) {
                advance(&ps);
            }
            continue;
        }
        if (!parse_func(&ps, &f)) {
            sync_stmt(&ps);
            continue;
        }
        {
            uint32_t prev;
            if (cn_strmap_get(&fnames, f.name, &prev)) {
                ir_diags_add(diags, f.pos.line, f.pos.col,
                             "function '%s' is already defined at line %u", f.name,
                             funcs[prev].pos.line);
            } else if (cn_strmap_put(&fnames, f.name, (uint32_t) nf) != CN_OK) {
                nomem(&ps);
            }
        }
        if (cn_vec_grow((void **) &funcs, &cap, sizeof(*funcs), nf + 1) != CN_OK) {
            nomem(&ps);
            break;
        }
        funcs[nf++] = f;
    }
    if (ps.rv == CN_OK && nf == 0 && diags->len == errs0) {
        ir_diags_add(diags, 1, 1, "no function defined; a workflow needs `fn main(...):`");
    }
    ps.prog->funcs = arena_copy(&ps, funcs, nf, sizeof(*funcs));
    ps.prog->nfuncs = (uint32_t) nf;
    free(funcs);
    cn_strmap_fini(&fnames);
    ir_tokens_fini(&ps.toks);
    if (ps.rv != CN_OK) {
        ir_program_free(ps.prog);
        return ps.rv;
    }
    if (diags->len > errs0 || diags->oom) {
        ir_program_free(ps.prog);
        return CN_COMPILE;
    }
    *out = ps.prog;
    return CN_OK;
}
