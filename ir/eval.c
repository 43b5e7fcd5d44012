/* SPDX-License-Identifier: MIT */
/*
 * The expression evaluator: the walk over an expression pool, the operators (arithmetic,
 * sequences, dict merge, unary), comparison and membership, indexing, slicing and field
 * access, plus truthiness, iteration and unpacking. The contract, including every deliberate
 * difference from Python, is in eval.h; this file says how. Builtins are in builtins.c, number
 * text and rounding in numtext.c, error values in error.c; eval_int.h holds what they share.
 *
 * DESIGN
 * - One recursive walk over the flat pool. Trees are at most IR_EXPR_MAX_HEIGHT tall (parser
 *   and DAG decoder enforce it), so the C stack is bounded by the tree; recursion over *values*
 *   (ordering nested lists, str() of containers) carries an explicit depth and raises
 *   RecursionError, as Python does, instead of trusting the value's depth.
 * - Every internal operation has the shape eval_int.h describes (CN_OK or CN_RAISED with a new
 *   value in *out; CN_NOMEM or CN_INVAL with *out untouched).
 * - Operands are evaluated left to right before any type check, as CPython does (`{[1]: 1//0}`
 *   raises ZeroDivisionError, not TypeError). Only and/or, the conditional expression and
 *   chained comparisons skip operands.
 * - Sizes are checked before allocating: no result above IR_EVAL_MAX_ITEMS elements or
 *   IR_EVAL_MAX_STR bytes is ever built, whatever the operands claim.
 * - Numbers follow CPython's algorithms rather than "close enough" C: int / int is correctly
 *   rounded (128-bit long division), float // and % are float_divmod, int <-> float comparisons
 *   are exact.
 */
/* memmem: POSIX.1-2024, linear time and constant space in glibc (two-way), which still
 * declares it only for _GNU_SOURCE. Must precede every include. */
#define _GNU_SOURCE

#include "ir/eval.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/buf.h"
#include "ir/eval_int.h"

__extension__ typedef unsigned __int128 ev_u128;

struct ev {
    const struct ir_xpool *p;
    const struct ir_eval_env *env;
};

static cn_err ev_expr(const struct ev *x, uint32_t ei, struct ir_val *out);

/* ---- errors only this file raises ---- */

static cn_err
raise_unsupported(struct ir_val *out, const char *op, struct ir_val a, struct ir_val b)
{
    return ir_raise(out, "TypeError", "unsupported operand type(s) for %s: '%s' and '%s'", op,
                    tname(a), tname(b));
}

/* ---- UTF-8 ---- */

/* Byte offset of code point index cp (0..cplen) of string s. Linear for non-ASCII strings. */
static size_t
utf8_offset(struct ir_val s, size_t cp)
{
    const char *d = ir_str_data(s);
    size_t len = ir_str_len(s), off = 0;

    if (ir_str_cplen(s) == len) {
        return cp;
    }
    while (cp > 0 && off < len) {
        off += utf8_seqlen((unsigned char) d[off]);
        cp--;
    }
    return off;
}

/* ---- truthiness, iteration, unpacking ---- */

bool
ir_truthy(struct ir_val v)
{
    switch (v.type) {
    case IR_T_NULL:
        return false;
    case IR_T_BOOL:
        return v.u.b;
    case IR_T_INT:
        return v.u.i != 0;
    case IR_T_FLOAT:
        return v.u.f != 0.0; /* NaN is true, as in Python */
    case IR_T_STR:
        return ir_str_len(v) > 0;
    case IR_T_LIST:
        return ir_list_len(v) > 0;
    case IR_T_MAP:
        return ir_map_len(v) > 0;
    default:
        return false;
    }
}

/* The items of an iterable as a list in *list: a list itself, a string's characters, a
 * dict's keys. v must be iterable; the size limit raises into *out. */
cn_err
ir_ev_iter_items(struct ir_val v, struct ir_val *list, struct ir_val *out)
{
    struct ir_val l;
    const char *d;
    size_t i, n, off = 0, k;
    cn_err rv;

    assert(is_iterable(v));
    if (v.type == IR_T_LIST) {
        *list = ir_val_retain(v);
        return CN_OK;
    }
    n = iter_len(v);
    if ((rv = list_alloc(n, &l, out)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < n; i++) {
        if (v.type == IR_T_MAP) {
            ir_list_items(l)[i] = ir_val_retain(ir_map_key_at(v, i));
            continue;
        }
        d = ir_str_data(v);
        k = utf8_seqlen((unsigned char) d[off]);
        if ((rv = ir_str_new(d + off, k, &ir_list_items(l)[i])) != CN_OK) {
            ir_val_release(l);
            return rv;
        }
        off += k;
    }
    *list = l;
    return CN_OK;
}

cn_err
ir_iter_items(struct ir_val v, struct ir_val *out)
{
    if (!is_iterable(v)) {
        return raise_not_iterable(out, v);
    }
    return ir_ev_iter_items(v, out, out);
}

cn_err
ir_unpack(struct ir_val v, size_t n, struct ir_val *items, struct ir_val *err)
{
    struct ir_val l;
    size_t have, i;
    cn_err rv;

    if (!is_iterable(v)) {
        return ir_raise(err, "TypeError", "cannot unpack non-iterable %s object", tname(v));
    }
    /* Count first, so a mismatch never materialises a long string's characters. */
    have = iter_len(v);
    if (have < n) {
        return ir_raise(err, "ValueError", "not enough values to unpack (expected %zu, got %zu)", n,
                        have);
    }
    if (have > n) {
        return ir_raise(err, "ValueError", "too many values to unpack (expected %zu)", n);
    }
    if ((rv = ir_ev_iter_items(v, &l, err)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < n; i++) {
        items[i] = ir_val_retain(ir_list_items(l)[i]);
    }
    ir_val_release(l);
    return CN_OK;
}

/* ---- numbers ---- */

/* Exact comparison of an int with a finite-or-infinite, non-NaN double: -1, 0 or 1. */
static int
cmp_int_double(int64_t i, double f)
{
    double t;
    int64_t ti;

    if (f >= 9223372036854775808.0) {
        return -1;
    }
    if (f < -9223372036854775808.0) {
        return 1;
    }
    t = trunc(f);
    ti = (int64_t) t;
    if (i != ti) {
        return i < ti ? -1 : 1;
    }
    if (f > t) {
        return -1;
    }
    return f < t ? 1 : 0;
}

/* Numeric comparison: -1, 0, 1, or 2 when unordered (a NaN is involved). */
static int
num_cmp(struct ir_val a, struct ir_val b)
{
    int64_t x, y;

    if (is_intlike(a) && is_intlike(b)) {
        x = as_int(a);
        y = as_int(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.type == IR_T_FLOAT && b.type == IR_T_FLOAT) {
        if (isnan(a.u.f) || isnan(b.u.f)) {
            return 2;
        }
        return a.u.f < b.u.f ? -1 : a.u.f > b.u.f ? 1 : 0;
    }
    if (a.type == IR_T_FLOAT) {
        return isnan(a.u.f) ? 2 : -cmp_int_double(as_int(b), a.u.f);
    }
    return isnan(b.u.f) ? 2 : cmp_int_double(as_int(a), b.u.f);
}

/* Correctly rounded a / b for int64 operands (b != 0), as CPython's long_true_divide: the
 * quotient is computed to at least 63 bits with a sticky bit, then rounded half to even once,
 * so no double rounding happens for operands beyond 2^53. */
static double
int_true_div(int64_t a, int64_t b)
{
    uint64_t ua = a < 0 ? (uint64_t) 0 - (uint64_t) a : (uint64_t) a;
    uint64_t ub = b < 0 ? (uint64_t) 0 - (uint64_t) b : (uint64_t) b;
    bool neg = (a < 0) != (b < 0);
    ev_u128 n, q, rest, half;
    uint64_t m;
    int shift, len, s;
    double d;

    if (ua <= (UINT64_C(1) << 53) && ub <= (UINT64_C(1) << 53)) {
        return (double) a / (double) b; /* both exact as doubles: one rounding */
    }
    if (ua == 0) {
        return neg ? -0.0 : 0.0;
    }
    shift = 63 + __builtin_clzll((unsigned long long) ua); /* bit 126 of n is set */
    n = (ev_u128) ua << shift;
    q = n / ub;
    if (n % ub != 0) {
        q |= 1; /* sticky: q has >= 63 bits, far below the rounding position */
    }
    len = 128 - ((uint64_t) (q >> 64) != 0 ? __builtin_clzll((unsigned long long) (q >> 64))
                                           : 64 + __builtin_clzll((unsigned long long) q));
    s = len - 53;
    m = (uint64_t) (q >> s);
    rest = q & (((ev_u128) 1 << s) - 1);
    half = (ev_u128) 1 << (s - 1);
    if (rest > half || (rest == half && (m & 1) != 0)) {
        m++; /* may reach 2^53, still exact */
    }
    d = ldexp((double) m, s - shift);
    return neg ? -d : d;
}

/* CPython's float_divmod (wx != 0): floor quotient and remainder with the divisor's sign. */
static void
float_divmod(double vx, double wx, double *floordiv, double *mod)
{
    double m = fmod(vx, wx), div = (vx - m) / wx;

    if (m != 0.0) { /* NaN included, as CPython's `if (mod)` */
        if ((wx < 0) != (m < 0)) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = copysign(0.0, wx);
    }
    if (div != 0.0) {
        *floordiv = floor(div);
        if (div - *floordiv > 0.5) {
            *floordiv += 1.0;
        }
    } else {
        *floordiv = copysign(0.0, vx / wx);
    }
    *mod = m;
}

static const char *
binop_sym(enum ir_binop op)
{
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "|"};

    return op < IR_OP_COUNT_ ? sym[op] : "?";
}

/* Arithmetic on two numbers (bool counts as int). */
static cn_err
num_binop(enum ir_binop op, struct ir_val a, struct ir_val b, struct ir_val *out)
{
    int64_t x, y, r;
    double fx, fy, q, m;

    if (is_intlike(a) && is_intlike(b)) {
        x = as_int(a);
        y = as_int(b);
        switch (op) {
        case IR_OP_ADD:
            if (__builtin_add_overflow(x, y, &r)) {
                return raise_overflow(out);
            }
            break;
        case IR_OP_SUB:
            if (__builtin_sub_overflow(x, y, &r)) {
                return raise_overflow(out);
            }
            break;
        case IR_OP_MUL:
            if (__builtin_mul_overflow(x, y, &r)) {
                return raise_overflow(out);
            }
            break;
        case IR_OP_DIV:
            if (y == 0) {
                return ir_raise(out, "ZeroDivisionError", "division by zero");
            }
            *out = ir_float(int_true_div(x, y));
            return CN_OK;
        case IR_OP_FLOORDIV:
            if (y == 0) {
                return ir_raise(out, "ZeroDivisionError", "integer division or modulo by zero");
            }
            if (x == INT64_MIN && y == -1) {
                return raise_overflow(out);
            }
            r = x / y;
            if (x % y != 0 && ((x % y < 0) != (y < 0))) {
                r--;
            }
            break;
        case IR_OP_MOD:
            if (y == 0) {
                return ir_raise(out, "ZeroDivisionError", "integer modulo by zero");
            }
            if (y == -1) {
                r = 0; /* INT64_MIN % -1 is undefined in C */
                break;
            }
            r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) {
                r += y;
            }
            break;
        default:
            return CN_INVAL;
        }
        *out = ir_int(r);
        return CN_OK;
    }
    fx = as_double(a);
    fy = as_double(b);
    switch (op) {
    case IR_OP_ADD:
        *out = ir_float(fx + fy);
        return CN_OK;
    case IR_OP_SUB:
        *out = ir_float(fx - fy);
        return CN_OK;
    case IR_OP_MUL:
        *out = ir_float(fx * fy);
        return CN_OK;
    case IR_OP_DIV:
        if (fy == 0.0) {
            return ir_raise(out, "ZeroDivisionError", "float division by zero");
        }
        *out = ir_float(fx / fy);
        return CN_OK;
    case IR_OP_FLOORDIV:
        if (fy == 0.0) {
            return ir_raise(out, "ZeroDivisionError", "float floor division by zero");
        }
        float_divmod(fx, fy, &q, &m);
        *out = ir_float(q);
        return CN_OK;
    case IR_OP_MOD:
        if (fy == 0.0) {
            return ir_raise(out, "ZeroDivisionError", "float modulo");
        }
        float_divmod(fx, fy, &q, &m);
        *out = ir_float(m);
        return CN_OK;
    default:
        return CN_INVAL;
    }
}

/* ---- sequences ---- */

static cn_err
concat(struct ir_val a, struct ir_val b, struct ir_val *out)
{
    struct ir_val l;
    size_t na, nb, i;
    char *buf;
    cn_err rv;

    if (a.type == IR_T_STR) {
        na = ir_str_len(a);
        nb = ir_str_len(b);
        if (na + nb > IR_EVAL_MAX_STR) {
            return raise_str_too_long(out);
        }
        if ((buf = malloc(na + nb + 1)) == NULL) {
            return CN_NOMEM;
        }
        memcpy(buf, ir_str_data(a), na);
        memcpy(buf + na, ir_str_data(b), nb);
        rv = str_make(buf, na + nb, out);
        free(buf);
        return rv;
    }
    na = ir_list_len(a);
    nb = ir_list_len(b);
    if ((rv = list_alloc(na + nb, &l, out)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < na; i++) {
        ir_list_items(l)[i] = ir_val_retain(ir_list_items(a)[i]);
    }
    for (i = 0; i < nb; i++) {
        ir_list_items(l)[na + i] = ir_val_retain(ir_list_items(b)[i]);
    }
    *out = l;
    return CN_OK;
}

/* seq * n for a string or list and an int count (negative counts give an empty result). */
static cn_err
repeat(struct ir_val seq, int64_t n, struct ir_val *out)
{
    size_t len = seq.type == IR_T_STR ? ir_str_len(seq) : ir_list_len(seq), cnt, i, k;
    size_t limit = seq.type == IR_T_STR ? IR_EVAL_MAX_STR : IR_EVAL_MAX_ITEMS;
    struct ir_val l;
    char *buf;
    cn_err rv;

    cnt = n <= 0 || len == 0 ? 0 : (uint64_t) n;
    if (cnt > 0 && cnt > limit / len) {
        if (seq.type == IR_T_STR) {
            return raise_str_too_long(out);
        }
        return raise_too_many(out);
    }
    if (seq.type == IR_T_STR) {
        if ((buf = malloc(len * cnt + 1)) == NULL) {
            return CN_NOMEM;
        }
        for (i = 0; i < cnt; i++) {
            memcpy(buf + i * len, ir_str_data(seq), len);
        }
        rv = str_make(buf, len * cnt, out);
        free(buf);
        return rv;
    }
    if ((rv = list_alloc(len * cnt, &l, out)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < cnt; i++) {
        for (k = 0; k < len; k++) {
            ir_list_items(l)[i * len + k] = ir_val_retain(ir_list_items(seq)[k]);
        }
    }
    *out = l;
    return CN_OK;
}

/* a | b for two dicts: a new plain dict, a's order, b's values win. */
static cn_err
merge(struct ir_val a, struct ir_val b, struct ir_val *out)
{
    struct ir_val m;
    size_t i, na = ir_map_len(a), nb = ir_map_len(b);
    cn_err rv;

    if ((rv = ir_map_new(na + nb, &m)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < na + nb; i++) {
        struct ir_val src = i < na ? a : b;
        size_t k = i < na ? i : i - na;
        if ((rv = ir_map_set(&m, ir_val_retain(ir_map_key_at(src, k)),
                             ir_val_retain(ir_map_val_at(src, k)))) != CN_OK) {
            ir_val_release(m);
            return rv;
        }
    }
    *out = m;
    return CN_OK;
}

static bool
is_seq(struct ir_val v)
{
    return v.type == IR_T_STR || v.type == IR_T_LIST;
}

cn_err
ir_ev_binop(enum ir_binop op, struct ir_val a, struct ir_val b, struct ir_val *out)
{
    if (op == IR_OP_MERGE) {
        if (a.type == IR_T_MAP && b.type == IR_T_MAP) {
            return merge(a, b, out);
        }
        return raise_unsupported(out, "|", a, b);
    }
    if (is_num(a) && is_num(b)) {
        return num_binop(op, a, b, out);
    }
    switch (op) {
    case IR_OP_ADD:
        if (is_seq(a) && a.type == b.type) {
            return concat(a, b, out);
        }
        if (is_seq(a)) {
            return ir_raise(out, "TypeError", "can only concatenate %s (not \"%s\") to %s",
                            tname(a), tname(b), tname(a));
        }
        break;
    case IR_OP_MUL:
        /* CPython: the left operand's repeat first, then the right's; the count must be an
         * int (a bool is one). */
        if (is_seq(a) || is_seq(b)) {
            struct ir_val seq = is_seq(a) ? a : b, cnt = is_seq(a) ? b : a;
            if (!is_intlike(cnt)) {
                return ir_raise(out, "TypeError", "can't multiply sequence by non-int of type '%s'",
                                tname(cnt));
            }
            return repeat(seq, as_int(cnt), out);
        }
        break;
    default:
        break;
    }
    return raise_unsupported(out, binop_sym(op), a, b);
}

cn_err
ir_ev_sign(struct ir_val v, bool absolute, struct ir_val *out)
{
    int64_t i;

    if (is_intlike(v)) {
        if ((i = as_int(v)) == INT64_MIN) {
            return raise_overflow(out);
        }
        *out = ir_int(absolute && i >= 0 ? i : -i);
        return CN_OK;
    }
    if (v.type == IR_T_FLOAT) {
        *out = ir_float(absolute ? fabs(v.u.f) : -v.u.f);
        return CN_OK;
    }
    return ir_raise(out, "TypeError", "bad operand type for %s: '%s'",
                    absolute ? "abs()" : "unary -", tname(v));
}

/* ---- comparisons ---- */

static const char *
cmpop_sym(enum ir_cmpop op)
{
    static const char *const sym[] = {"==", "!=", "<", "<=", ">", ">=", "in", "not in"};

    return op < IR_CMP_COUNT_ ? sym[op] : "?";
}

static bool
apply_order(enum ir_cmpop op, int c)
{
    switch (op) {
    case IR_CMP_LT:
        return c == -1;
    case IR_CMP_LE:
        return c == -1 || c == 0;
    case IR_CMP_GT:
        return c == 1;
    case IR_CMP_GE:
        return c == 1 || c == 0;
    default:
        return false;
    }
}

/* a OP b for an ordering operator, as Python's rich comparison: numbers, strings (code point
 * order, which UTF-8 byte order is), lists (first unequal item decides, else the lengths). */
cn_err
ir_ev_order(struct ir_val a, struct ir_val b, enum ir_cmpop op, unsigned depth, bool *res,
            struct ir_val *out)
{
    size_t na, nb, i;
    int c;

    if (is_num(a) && is_num(b)) {
        *res = apply_order(op, num_cmp(a, b));
        return CN_OK;
    }
    if (a.type == IR_T_STR && b.type == IR_T_STR) {
        na = ir_str_len(a);
        nb = ir_str_len(b);
        c = memcmp(ir_str_data(a), ir_str_data(b), na < nb ? na : nb);
        if (c == 0) {
            c = na < nb ? -1 : na > nb ? 1 : 0;
        }
        *res = apply_order(op, c < 0 ? -1 : c > 0 ? 1 : 0);
        return CN_OK;
    }
    if (a.type == IR_T_LIST && b.type == IR_T_LIST) {
        na = ir_list_len(a);
        nb = ir_list_len(b);
        for (i = 0; i < na && i < nb; i++) {
            if (!ir_val_equal(ir_list_items(a)[i], ir_list_items(b)[i])) {
                break;
            }
        }
        if (i >= na || i >= nb) {
            *res = apply_order(op, na < nb ? -1 : na > nb ? 1 : 0);
            return CN_OK;
        }
        if (depth >= IR_REPR_MAX_DEPTH) {
            return raise_recursion(out, "in comparison");
        }
        return ir_ev_order(ir_list_items(a)[i], ir_list_items(b)[i], op, depth + 1, res, out);
    }
    return ir_raise(out, "TypeError", "'%s' not supported between instances of '%s' and '%s'",
                    cmpop_sym(op), tname(a), tname(b));
}

static cn_err
raise_unhashable(struct ir_val *out, struct ir_val v)
{
    return ir_raise(out, "TypeError", "unhashable type: '%s'", tname(v));
}

/* x in c */
static cn_err
contains(struct ir_val c, struct ir_val x, bool *res, struct ir_val *out)
{
    size_t i;

    switch (c.type) {
    case IR_T_LIST:
        *res = false;
        for (i = 0; i < ir_list_len(c) && !*res; i++) {
            *res = ir_val_equal(ir_list_items(c)[i], x);
        }
        return CN_OK;
    case IR_T_MAP:
        if (is_container(x)) {
            return raise_unhashable(out, x);
        }
        *res = x.type == IR_T_STR && ir_map_get(c, ir_str_data(x), ir_str_len(x)) != NULL;
        return CN_OK;
    case IR_T_STR:
        if (x.type != IR_T_STR) {
            return ir_raise(out, "TypeError",
                            "'in <string>' requires string as left operand, not %s", tname(x));
        }
        /* Byte search is code point search on valid UTF-8. */
        *res = memmem(ir_str_data(c), ir_str_len(c), ir_str_data(x), ir_str_len(x)) != NULL;
        return CN_OK;
    default:
        return ir_raise(out, "TypeError", "argument of type '%s' is not iterable", tname(c));
    }
}

static cn_err
compare(enum ir_cmpop op, struct ir_val a, struct ir_val b, bool *res, struct ir_val *out)
{
    cn_err rv;

    switch (op) {
    case IR_CMP_EQ:
        *res = ir_val_equal(a, b);
        return CN_OK;
    case IR_CMP_NE:
        *res = !ir_val_equal(a, b);
        return CN_OK;
    case IR_CMP_LT:
    case IR_CMP_LE:
    case IR_CMP_GT:
    case IR_CMP_GE:
        return ir_ev_order(a, b, op, 0, res, out);
    case IR_CMP_IN:
        return contains(b, a, res, out);
    case IR_CMP_NOTIN:
        if ((rv = contains(b, a, res, out)) == CN_OK) {
            *res = !*res;
        }
        return rv;
    default:
        return CN_INVAL;
    }
}

/* ---- indexing ---- */

/* Python's index normalisation: negative counts from the end; false when out of range. */
static bool
norm_index(int64_t i, size_t len, size_t *at)
{
    if (i < 0) {
        if ((uint64_t) 0 - (uint64_t) i > len) {
            return false;
        }
        *at = len - (size_t) ((uint64_t) 0 - (uint64_t) i);
        return true;
    }
    if ((uint64_t) i >= len) {
        return false;
    }
    *at = (size_t) i;
    return true;
}

static cn_err
raise_key(struct ir_val key, struct ir_val *out)
{
    struct cn_buf b = CN_BUF_INIT;
    cn_err rv;

    if ((rv = ir_val_repr(key, &b)) == CN_OK) {
        rv = ir_raise(out, "KeyError", "%s", b.data);
    }
    cn_buf_fini(&b);
    return rv;
}

static cn_err
dict_get(struct ir_val d, struct ir_val key, struct ir_val *out)
{
    const struct ir_val *v = NULL;

    if (is_container(key)) {
        return raise_unhashable(out, key);
    }
    if (key.type == IR_T_STR) {
        v = ir_map_get(d, ir_str_data(key), ir_str_len(key));
    }
    if (v == NULL) {
        return raise_key(key, out);
    }
    *out = ir_val_retain(*v);
    return CN_OK;
}

static cn_err
index_op(struct ir_val c, struct ir_val i, struct ir_val *out)
{
    size_t at, off;

    switch (c.type) {
    case IR_T_LIST:
        if (!is_intlike(i)) {
            return ir_raise(out, "TypeError", "list indices must be integers or slices, not %s",
                            tname(i));
        }
        if (!norm_index(as_int(i), ir_list_len(c), &at)) {
            return ir_raise(out, "IndexError", "list index out of range");
        }
        *out = ir_val_retain(ir_list_items(c)[at]);
        return CN_OK;
    case IR_T_STR:
        if (!is_intlike(i)) {
            return ir_raise(out, "TypeError", "string indices must be integers, not '%s'",
                            tname(i));
        }
        if (!norm_index(as_int(i), ir_str_cplen(c), &at)) {
            return ir_raise(out, "IndexError", "string index out of range");
        }
        off = utf8_offset(c, at);
        return str_make(ir_str_data(c) + off, utf8_seqlen((unsigned char) ir_str_data(c)[off]),
                        out);
    case IR_T_MAP:
        return dict_get(c, i, out);
    default:
        return ir_raise(out, "TypeError", "'%s' object is not subscriptable", tname(c));
    }
}

/* Python's slice bound (PySlice_AdjustIndices, step 1). */
static size_t
slice_bound(struct ir_val v, size_t len, size_t dflt)
{
    int64_t i;

    if (v.type == IR_T_NULL) {
        return dflt;
    }
    i = as_int(v);
    if (i < 0) {
        return (uint64_t) 0 - (uint64_t) i >= len ? 0
                                                  : len - (size_t) ((uint64_t) 0 - (uint64_t) i);
    }
    return (uint64_t) i > len ? len : (size_t) i;
}

static cn_err
slice_op(struct ir_val c, struct ir_val lo, struct ir_val hi, struct ir_val *out)
{
    size_t len, a, b, i, boff, eoff;
    struct ir_val l;
    cn_err rv;

    if (c.type == IR_T_MAP) {
        return ir_raise(out, "TypeError", "unhashable type: 'slice'"); /* Python 3.11 */
    }
    if (!is_seq(c)) {
        return ir_raise(out, "TypeError", "'%s' object is not subscriptable", tname(c));
    }
    if ((lo.type != IR_T_NULL && !is_intlike(lo)) || (hi.type != IR_T_NULL && !is_intlike(hi))) {
        return ir_raise(out, "TypeError",
                        "slice indices must be integers or None or have an __index__ method");
    }
    len = c.type == IR_T_STR ? ir_str_cplen(c) : ir_list_len(c);
    a = slice_bound(lo, len, 0);
    b = slice_bound(hi, len, len);
    if (b < a) {
        b = a;
    }
    if (c.type == IR_T_STR) {
        if (a == 0 && b == len) {
            *out = ir_val_retain(c);
            return CN_OK;
        }
        boff = utf8_offset(c, a);
        eoff = boff + utf8_offset(c, b) - utf8_offset(c, a);
        return str_make(ir_str_data(c) + boff, eoff - boff, out);
    }
    if ((rv = list_alloc(b - a, &l, out)) != CN_OK) {
        return rv;
    }
    for (i = a; i < b; i++) {
        ir_list_items(l)[i - a] = ir_val_retain(ir_list_items(c)[i]);
    }
    *out = l;
    return CN_OK;
}

static cn_err
attr_op(struct ir_val c, const char *name, struct ir_val *out)
{
    const struct ir_val *v;

    if (c.type != IR_T_MAP) {
        return ir_raise(out, "TypeError", "'%s' object has no attribute '%s'", tname(c), name);
    }
    v = ir_map_get(c, name, strlen(name));
    if (v == NULL) {
        return ir_raise(out, "KeyError", "'%s'", name);
    }
    *out = ir_val_retain(*v);
    return CN_OK;
}

/* ---- the tree walk ---- */

/* Evaluates child k of e into *v; a raised error is also handed to the caller's result, *out. */
static cn_err
ev_child(const struct ev *x, const struct ir_expr *e, uint32_t k, struct ir_val *v,
         struct ir_val *out)
{
    cn_err rv = ev_expr(x, ir_xchild(x->p, e, k), v);

    if (rv == CN_RAISED) {
        *out = *v;
    }
    return rv;
}

/* Evaluates children [0, n) of e into vals (all or nothing). */
static cn_err
ev_children(const struct ev *x, const struct ir_expr *e, uint32_t n, struct ir_val *vals,
            struct ir_val *out)
{
    uint32_t i;
    cn_err rv;

    for (i = 0; i < n; i++) {
        if ((rv = ev_child(x, e, i, &vals[i], out)) != CN_OK) {
            release_all(vals, i);
            return rv;
        }
    }
    return CN_OK;
}

static cn_err
ev_list(const struct ev *x, const struct ir_expr *e, struct ir_val *out)
{
    struct ir_val l;
    cn_err rv;

    if ((rv = list_alloc(e->nargs, &l, out)) != CN_OK) {
        return rv;
    }
    if ((rv = ev_children(x, e, e->nargs, ir_list_items(l), out)) != CN_OK) {
        /* ev_children released what it made; the rest are nulls. */
        memset(ir_list_items(l), 0, e->nargs * sizeof(struct ir_val));
        ir_val_release(l);
        return rv;
    }
    *out = l;
    return CN_OK;
}

static cn_err
ev_dict(const struct ev *x, const struct ir_expr *e, struct ir_val *out)
{
    struct ir_val *vals, m;
    uint32_t i;
    cn_err rv;

    if ((vals = calloc(e->nargs ? e->nargs : 1, sizeof(*vals))) == NULL) {
        return CN_NOMEM;
    }
    if ((rv = ev_children(x, e, e->nargs, vals, out)) != CN_OK) {
        free(vals);
        return rv;
    }
    for (i = 0; i < e->nargs; i += 2) {
        if (vals[i].type != IR_T_STR) {
            rv = ir_raise(out, "TypeError", "dict keys must be strings, not %s", tname(vals[i]));
            release_all(vals, e->nargs);
            free(vals);
            return rv;
        }
    }
    if ((rv = ir_map_new(e->nargs / 2, &m)) != CN_OK) {
        release_all(vals, e->nargs);
        free(vals);
        return rv;
    }
    for (i = 0; i < e->nargs; i += 2) {
        /* ir_map_set takes both; a repeated key keeps its first position, as in Python. */
        if ((rv = ir_map_set(&m, vals[i], vals[i + 1])) != CN_OK) {
            release_all(vals + i + 2, e->nargs - i - 2);
            ir_val_release(m);
            free(vals);
            return rv;
        }
    }
    free(vals);
    *out = m;
    return CN_OK;
}

static cn_err
ev_cmp(const struct ev *x, const struct ir_expr *e, struct ir_val *out)
{
    struct ir_val left, right;
    uint32_t k, op;
    bool res = true;
    cn_err rv;

    if ((rv = ev_child(x, e, 0, &left, out)) != CN_OK) {
        return rv;
    }
    /* a < b < c: each middle operand is evaluated once; the chain stops at the first false. */
    for (k = 0; k + 1 < e->nargs && res; k++) {
        if ((rv = ev_child(x, e, k + 1, &right, out)) != CN_OK) {
            ir_val_release(left);
            return rv;
        }
        op = x->p->args[e->ops + k];
        rv = compare((enum ir_cmpop) op, left, right, &res, out);
        ir_val_release(left);
        left = right;
        if (rv != CN_OK) {
            ir_val_release(left);
            return rv;
        }
    }
    ir_val_release(left);
    *out = ir_bool(res);
    return CN_OK;
}

static cn_err
ev_call(const struct ev *x, const struct ir_expr *e, struct ir_val *out)
{
    struct ir_val small[4], *vals = small;
    unsigned lo, hi;
    cn_err rv;

    /* Builtins take positional arguments only and their arity is checked at compile time; a
     * pool that breaks either (a helper call, a corrupt DAG) is malformed. */
    if (e->op >= IR_B_COUNT_ || e->nkw != 0) {
        return CN_INVAL;
    }
    ir_builtin_arity((enum ir_builtin) e->op, &lo, &hi);
    if (e->nargs < lo || e->nargs > hi) {
        return CN_INVAL;
    }
    if (e->op == IR_B_NOW || e->op == IR_B_UUID || e->op == IR_B_INSTANCE_ID ||
        e->op == IR_B_WORKFLOW_NAME) {
        if (x->env->host != NULL) {
            return x->env->host(x->env->ctx, (enum ir_builtin) e->op, out);
        }
        return ir_raise(out, "RuntimeError", "%s() has no instance to run in here",
                        ir_builtin_name((enum ir_builtin) e->op));
    }
    if (e->nargs > 4 && (vals = calloc(e->nargs, sizeof(*vals))) == NULL) {
        return CN_NOMEM;
    }
    if ((rv = ev_children(x, e, e->nargs, vals, out)) == CN_OK) {
        rv = ir_builtin_call((enum ir_builtin) e->op, vals, e->nargs, out);
        release_all(vals, e->nargs);
    }
    if (vals != small) {
        free(vals);
    }
    return rv;
}

/* x[a:b]: either bound may be absent (None). */
static cn_err
ev_slice(const struct ev *x, const struct ir_expr *e, struct ir_val *out)
{
    struct ir_val v[3];
    uint32_t ci;
    cn_err rv;

    if ((rv = ev_children(x, e, 1, v, out)) != CN_OK) {
        return rv;
    }
    v[1] = v[2] = ir_null();
    for (ci = 1; ci < 3; ci++) {
        if (ir_xchild(x->p, e, ci) == IR_NO_EXPR) {
            continue;
        }
        if ((rv = ev_child(x, e, ci, &v[ci], out)) != CN_OK) {
            release_all(v, ci);
            return rv;
        }
    }
    rv = slice_op(v[0], v[1], v[2], out);
    release_all(v, 3);
    return rv;
}

/* a if c else b: only the branch chosen is evaluated. */
static cn_err
ev_cond(const struct ev *x, const struct ir_expr *e, struct ir_val *out)
{
    struct ir_val c;
    uint32_t ci;
    cn_err rv;

    if ((rv = ev_child(x, e, 1, &c, out)) != CN_OK) {
        return rv;
    }
    ci = ir_xchild(x->p, e, ir_truthy(c) ? 0 : 2);
    ir_val_release(c);
    return ev_expr(x, ci, out);
}

static cn_err
ev_expr(const struct ev *x, uint32_t ei, struct ir_val *out)
{
    const struct ir_expr *e;
    struct ir_val v[2];
    const struct ir_val *bound;
    cn_err rv;

    if (ei >= x->p->len) {
        return CN_INVAL;
    }
    e = &x->p->items[ei];
    switch ((enum ir_xkind) e->kind) {
    case IR_X_CONST:
        *out = ir_val_retain(e->val);
        return CN_OK;
    case IR_X_NAME:
        bound = x->env->lookup(x->env->ctx, e->name);
        if (bound == NULL) {
            return ir_raise(out, "NameError", "name '%s' is not defined", e->name);
        }
        *out = ir_val_retain(*bound);
        return CN_OK;
    case IR_X_LIST:
        return ev_list(x, e, out);
    case IR_X_DICT:
        return ev_dict(x, e, out);
    case IR_X_NEG:
    case IR_X_NOT:
    case IR_X_ATTR:
        if ((rv = ev_children(x, e, 1, v, out)) != CN_OK) {
            return rv;
        }
        if (e->kind == IR_X_NEG) {
            rv = ir_ev_sign(v[0], false, out);
        } else if (e->kind == IR_X_NOT) {
            *out = ir_bool(!ir_truthy(v[0]));
        } else {
            rv = attr_op(v[0], e->name, out);
        }
        ir_val_release(v[0]);
        return rv;
    case IR_X_BIN:
    case IR_X_INDEX:
        if (e->kind == IR_X_BIN && e->op >= IR_OP_COUNT_) {
            return CN_INVAL;
        }
        if ((rv = ev_children(x, e, 2, v, out)) != CN_OK) {
            return rv;
        }
        if (e->kind == IR_X_BIN) {
            rv = ir_ev_binop((enum ir_binop) e->op, v[0], v[1], out);
        } else {
            rv = index_op(v[0], v[1], out);
        }
        release_all(v, 2);
        return rv;
    case IR_X_SLICE:
        return ev_slice(x, e, out);
    case IR_X_AND:
    case IR_X_OR:
        if ((rv = ev_children(x, e, 1, v, out)) != CN_OK) {
            return rv;
        }
        if (ir_truthy(v[0]) == (e->kind == IR_X_OR)) {
            *out = v[0];
            return CN_OK;
        }
        ir_val_release(v[0]);
        return ev_expr(x, ir_xchild(x->p, e, 1), out);
    case IR_X_COND:
        return ev_cond(x, e, out);
    case IR_X_CMP:
        return ev_cmp(x, e, out);
    case IR_X_CALL:
        return ev_call(x, e, out);
    default:
        return CN_INVAL;
    }
}

static const struct ir_val *
no_names(void *ctx, const char *name)
{
    (void) ctx;
    (void) name;
    return NULL;
}

cn_err
ir_eval_const(const struct ir_xpool *p, uint32_t e, struct ir_val *out)
{
    const struct ir_eval_env env = {no_names, NULL, NULL};

    return ir_eval(p, e, &env, out);
}

cn_err
ir_eval(const struct ir_xpool *p, uint32_t e, const struct ir_eval_env *env, struct ir_val *out)
{
    struct ev x;

    assert(p != NULL && env != NULL && env->lookup != NULL && out != NULL);
    x.p = p;
    x.env = env;
    return ev_expr(&x, e, out);
}
