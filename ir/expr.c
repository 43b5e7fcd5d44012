/* SPDX-License-Identifier: MIT */
/* Expression pool, builtin table and the precedence-aware printer. */
#include "ir/expr.h"

#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"

static const struct {
    const char *name;
    unsigned min, max;
} builtins[] = {
#define IR_BUILTIN_ROW(id, name, lo, hi) {name, lo, hi},
    IR_BUILTINS(IR_BUILTIN_ROW)
#undef IR_BUILTIN_ROW
};

cn_err
ir_xpool_init(struct ir_xpool *p)
{
    memset(p, 0, sizeof(*p));
    p->arena = cn_arena_new(4096);
    return p->arena != NULL ? CN_OK : CN_NOMEM;
}

void
ir_xpool_fini(struct ir_xpool *p)
{
    size_t i;

    for (i = 0; i < p->len; i++) {
        ir_val_release(p->items[i].val);
    }
    free(p->items);
    free(p->args);
    cn_arena_free(p->arena);
    memset(p, 0, sizeof(*p));
}

cn_err
ir_xpool_add(struct ir_xpool *p, const struct ir_expr *e, const uint32_t *kids, uint32_t nkids,
             uint32_t *out)
{
    struct ir_expr x = *e;
    uint32_t i, h = 0;

    for (i = 0; i < x.nargs && i < nkids; i++) {
        if (kids[i] != IR_NO_EXPR && kids[i] < p->len && p->items[kids[i]].height > h) {
            h = p->items[kids[i]].height;
        }
    }
    if (h + 1 > IR_EXPR_MAX_HEIGHT) {
        ir_val_release(e->val);
        return CN_DEPTH;
    }
    x.height = (uint16_t) (h + 1);
    if (p->len >= INT32_MAX || p->nargs + nkids >= INT32_MAX) {
        ir_val_release(e->val);
        return CN_TOOBIG;
    }
    if (cn_vec_grow((void **) &p->items, &p->cap, sizeof(*p->items), p->len + 1) != CN_OK ||
        cn_vec_grow((void **) &p->args, &p->args_cap, sizeof(*p->args), p->nargs + nkids) !=
            CN_OK) {
        ir_val_release(e->val);
        return CN_NOMEM;
    }
    x.args = (uint32_t) p->nargs;
    /* Comparisons keep their ops right after their operands. */
    x.ops = x.kind == IR_X_CMP ? x.args + x.nargs : 0;
    if (nkids > 0) {
        memcpy(p->args + p->nargs, kids, nkids * sizeof(*kids));
    }
    p->nargs += nkids;
    p->items[p->len] = x;
    *out = (uint32_t) p->len++;
    return CN_OK;
}

const char *
ir_xpool_intern(struct ir_xpool *p, const char *s, size_t n)
{
    return cn_arena_strndup(p->arena, s, n);
}

const char *
ir_binop_text(enum ir_binop op)
{
    static const char *const t[] = {"+", "-", "*", "/", "//", "%", "|"};
    return (unsigned) op < (unsigned) IR_OP_COUNT_ ? t[op] : "?";
}

const char *
ir_cmpop_text(enum ir_cmpop op)
{
    static const char *const t[] = {"==", "!=", "<", "<=", ">", ">=", "in", "not in"};
    return (unsigned) op < (unsigned) IR_CMP_COUNT_ ? t[op] : "?";
}

const char *
ir_builtin_name(enum ir_builtin b)
{
    return (unsigned) b < (unsigned) IR_B_COUNT_ ? builtins[b].name : "?";
}

enum ir_builtin
ir_builtin_lookup(const char *name)
{
    unsigned i;

    for (i = 0; i < (unsigned) IR_B_COUNT_; i++) {
        if (strcmp(builtins[i].name, name) == 0) {
            return (enum ir_builtin) i;
        }
    }
    return IR_B_UNRESOLVED;
}

void
ir_builtin_arity(enum ir_builtin b, unsigned *min, unsigned *max)
{
    *min = builtins[b].min;
    *max = builtins[b].max;
}

/* Binding strength, loosest first; mirrors the parser's levels. */
enum {
    PREC_COND = 0,
    PREC_OR,
    PREC_AND,
    PREC_NOT,
    PREC_CMP,
    PREC_MERGE,
    PREC_SUM,
    PREC_TERM,
    PREC_NEG,
    PREC_POSTFIX,
    PREC_ATOM,
};

static int
binop_prec(unsigned op)
{
    switch (op) {
    case IR_OP_MERGE:
        return PREC_MERGE;
    case IR_OP_ADD:
    case IR_OP_SUB:
        return PREC_SUM;
    default:
        return PREC_TERM;
    }
}

static int
expr_prec(const struct ir_expr *e)
{
    switch (e->kind) {
    case IR_X_COND:
        return PREC_COND;
    case IR_X_OR:
        return PREC_OR;
    case IR_X_AND:
        return PREC_AND;
    case IR_X_NOT:
        return PREC_NOT;
    case IR_X_CMP:
        return PREC_CMP;
    case IR_X_BIN:
        return binop_prec(e->op);
    case IR_X_NEG:
        return PREC_NEG;
    case IR_X_CONST:
        /* -5 as the base of x[...] or x.f needs parentheses, like a unary minus. */
        if ((e->val.type == IR_T_INT && e->val.u.i < 0) ||
            (e->val.type == IR_T_FLOAT &&
             (e->val.u.f < 0 || (e->val.u.f == 0 && 1 / e->val.u.f < 0)))) {
            return PREC_NEG;
        }
        return PREC_ATOM;
    case IR_X_INDEX:
    case IR_X_SLICE:
    case IR_X_ATTR:
    case IR_X_CALL:
        return PREC_POSTFIX;
    default:
        return PREC_ATOM;
    }
}

/* The printer recurses over the expression tree; the parser bounds its depth. */
static cn_err print_at(const struct ir_xpool *p, uint32_t i, int min, struct cn_buf *o);

static cn_err
print_list(const struct ir_xpool *p, const struct ir_expr *e, uint32_t from, uint32_t to,
           struct cn_buf *o)
{
    cn_err rv = CN_OK;
    uint32_t k;

    for (k = from; k < to && rv == CN_OK; k++) {
        if (k > from) {
            rv = cn_buf_puts(o, ", ");
        }
        if (rv == CN_OK) {
            rv = print_at(p, ir_xchild(p, e, k), PREC_COND, o);
        }
    }
    return rv;
}

static cn_err
print_dict(const struct ir_xpool *p, const struct ir_expr *e, struct cn_buf *o)
{
    cn_err rv = cn_buf_putc(o, '{');
    uint32_t k;

    for (k = 0; k + 1 < e->nargs && rv == CN_OK; k += 2) {
        if (k > 0) {
            rv = cn_buf_puts(o, ", ");
        }
        if (rv == CN_OK) {
            rv = print_at(p, ir_xchild(p, e, k), PREC_COND, o);
        }
        if (rv == CN_OK) {
            rv = cn_buf_puts(o, ": ");
        }
        if (rv == CN_OK) {
            rv = print_at(p, ir_xchild(p, e, k + 1), PREC_COND, o);
        }
    }
    return rv == CN_OK ? cn_buf_putc(o, '}') : rv;
}

/* x[i] or x[a:b], either bound of a slice left out when absent. */
static cn_err
print_subscript(const struct ir_xpool *p, const struct ir_expr *e, struct cn_buf *o)
{
    bool slice = e->kind == IR_X_SLICE;
    cn_err rv = print_at(p, ir_xchild(p, e, 0), PREC_POSTFIX, o);

    if (rv == CN_OK) {
        rv = cn_buf_putc(o, '[');
    }
    if (rv == CN_OK && (!slice || ir_xchild(p, e, 1) != IR_NO_EXPR)) {
        rv = print_at(p, ir_xchild(p, e, 1), PREC_COND, o);
    }
    if (slice && rv == CN_OK) {
        rv = cn_buf_putc(o, ':');
    }
    if (slice && rv == CN_OK && ir_xchild(p, e, 2) != IR_NO_EXPR) {
        rv = print_at(p, ir_xchild(p, e, 2), PREC_COND, o);
    }
    return rv == CN_OK ? cn_buf_putc(o, ']') : rv;
}

static cn_err
print_cond(const struct ir_xpool *p, const struct ir_expr *e, struct cn_buf *o)
{
    cn_err rv = print_at(p, ir_xchild(p, e, 0), PREC_OR, o);

    if (rv == CN_OK) {
        rv = cn_buf_puts(o, " if ");
    }
    if (rv == CN_OK) {
        rv = print_at(p, ir_xchild(p, e, 1), PREC_OR, o);
    }
    if (rv == CN_OK) {
        rv = cn_buf_puts(o, " else ");
    }
    return rv == CN_OK ? print_at(p, ir_xchild(p, e, 2), PREC_COND, o) : rv;
}

/* name(a, b, k=v): positional arguments first, then the keyword ones. */
static cn_err
print_call(const struct ir_xpool *p, const struct ir_expr *e, struct cn_buf *o)
{
    uint32_t k, npos = e->nargs - e->nkw;
    cn_err rv = cn_buf_printf(o, "%s(", e->name);

    if (rv == CN_OK) {
        rv = print_list(p, e, 0, npos, o);
    }
    for (k = npos; k < e->nargs && rv == CN_OK; k++) {
        rv = cn_buf_printf(o, "%s%s=", k > 0 ? ", " : "", e->kwnames[k - npos]);
        if (rv == CN_OK) {
            rv = print_at(p, ir_xchild(p, e, k), PREC_COND, o);
        }
    }
    return rv == CN_OK ? cn_buf_putc(o, ')') : rv;
}

static cn_err
print_body(const struct ir_xpool *p, const struct ir_expr *e, struct cn_buf *o)
{
    cn_err rv = CN_OK;
    uint32_t k;
    int pr = expr_prec(e);

    switch ((enum ir_xkind) e->kind) {
    case IR_X_CONST:
        return ir_val_repr(e->val, o);
    case IR_X_NAME:
        return cn_buf_puts(o, e->name);
    case IR_X_LIST:
        rv = cn_buf_putc(o, '[');
        if (rv == CN_OK) {
            rv = print_list(p, e, 0, e->nargs, o);
        }
        return rv == CN_OK ? cn_buf_putc(o, ']') : rv;
    case IR_X_DICT:
        return print_dict(p, e, o);
    case IR_X_NEG:
        rv = cn_buf_putc(o, '-');
        return rv == CN_OK ? print_at(p, ir_xchild(p, e, 0), PREC_NEG, o) : rv;
    case IR_X_NOT:
        rv = cn_buf_puts(o, "not ");
        return rv == CN_OK ? print_at(p, ir_xchild(p, e, 0), PREC_NOT, o) : rv;
    case IR_X_BIN:
    case IR_X_AND:
    case IR_X_OR:
        rv = print_at(p, ir_xchild(p, e, 0), pr, o);
        if (rv == CN_OK) {
            rv = cn_buf_printf(o, " %s ",
                               e->kind == IR_X_AND  ? "and"
                               : e->kind == IR_X_OR ? "or"
                                                    : ir_binop_text(e->op));
        }
        return rv == CN_OK ? print_at(p, ir_xchild(p, e, 1), pr + 1, o) : rv;
    case IR_X_CMP:
        rv = print_at(p, ir_xchild(p, e, 0), PREC_MERGE, o);
        for (k = 1; k < e->nargs && rv == CN_OK; k++) {
            rv = cn_buf_printf(o, " %s ", ir_cmpop_text(p->args[e->ops + k - 1]));
            if (rv == CN_OK) {
                rv = print_at(p, ir_xchild(p, e, k), PREC_MERGE, o);
            }
        }
        return rv;
    case IR_X_INDEX:
    case IR_X_SLICE:
        return print_subscript(p, e, o);
    case IR_X_ATTR:
        rv = print_at(p, ir_xchild(p, e, 0), PREC_POSTFIX, o);
        return rv == CN_OK ? cn_buf_printf(o, ".%s", e->name) : rv;
    case IR_X_COND:
        return print_cond(p, e, o);
    case IR_X_CALL:
        return print_call(p, e, o);
    default:
        return cn_buf_puts(o, "<?>");
    }
}

static cn_err
print_at(const struct ir_xpool *p, uint32_t i, int min, struct cn_buf *o)
{
    const struct ir_expr *e;
    bool paren;
    cn_err rv;

    if (i == IR_NO_EXPR || i >= p->len) {
        return cn_buf_puts(o, "<?>");
    }
    e = &p->items[i];
    paren = expr_prec(e) < min;
    if (paren && (rv = cn_buf_putc(o, '(')) != CN_OK) {
        return rv;
    }
    if ((rv = print_body(p, e, o)) != CN_OK) {
        return rv;
    }
    return paren ? cn_buf_putc(o, ')') : CN_OK;
}

cn_err
ir_expr_print(const struct ir_xpool *p, uint32_t e, struct cn_buf *out)
{
    return print_at(p, e, PREC_COND, out);
}
