/* SPDX-License-Identifier: MIT */
/*
 * The expression evaluator: expressions and builtins with Python 3.11 semantics on
 * int64/float64 values. The contract, including every deliberate difference from Python, is in
 * eval.h; this file says how. Error values live in error.c.
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
 *   are exact. Number text and rounding (int()/float() of strings, round(), a float's repr)
 *   are numtext.c's.
 * - sorted() runs CPython's own count_run + binary insertion sort below 64 items, so the
 *   comparison sequence (and therefore the TypeError wording and the order NaNs end up in) is
 *   the same as Python's; longer lists use a stable merge sort.
 */
/* memmem: POSIX.1-2024, linear time and constant space in glibc (two-way), which still
 * declares it only for _GNU_SOURCE. Must precede every include. */
#define _GNU_SOURCE

#include "ir/eval.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/buf.h"
#include "ir/eval_int.h"
#include "ir/numtext.h"

/* Below this many items sorted() runs CPython's exact algorithm (timsort's minrun). */
#define EV_SORT_EXACT_MAX 64

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

static cn_err
raise_not_index(struct ir_val *out, struct ir_val v)
{
    return ir_raise(out, "TypeError", "'%s' object cannot be interpreted as an integer", tname(v));
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
static cn_err
iter_items(struct ir_val v, struct ir_val *list, struct ir_val *out)
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
    return iter_items(v, out, out);
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
    if ((rv = iter_items(v, &l, err)) != CN_OK) {
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

static cn_err
binop(enum ir_binop op, struct ir_val a, struct ir_val b, struct ir_val *out)
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

static cn_err
negate(struct ir_val a, struct ir_val *out)
{
    if (is_intlike(a)) {
        if (as_int(a) == INT64_MIN) {
            return raise_overflow(out);
        }
        *out = ir_int(-as_int(a));
        return CN_OK;
    }
    if (a.type == IR_T_FLOAT) {
        *out = ir_float(-a.u.f);
        return CN_OK;
    }
    return ir_raise(out, "TypeError", "bad operand type for unary -: '%s'", tname(a));
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
static cn_err
order(struct ir_val a, struct ir_val b, enum ir_cmpop op, unsigned depth, bool *res,
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
        return order(ir_list_items(a)[i], ir_list_items(b)[i], op, depth + 1, res, out);
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
        return order(a, b, op, 0, res, out);
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

/* ---- str() ---- */

/* Python's repr of v into b, refusing output above IR_EVAL_MAX_STR (CN_TOOBIG) or nesting
 * above IR_REPR_MAX_DEPTH (CN_DEPTH). Containers are walked here so that a small value holding
 * many references to one big string cannot make an enormous text. */
static cn_err
repr_bounded(struct ir_val v, struct cn_buf *b, unsigned depth)
{
    size_t i, n;
    cn_err rv;

    if (!is_container(v)) {
        if (v.type == IR_T_STR && b->len + ir_str_len(v) + 2 > IR_EVAL_MAX_STR) {
            return CN_TOOBIG;
        }
        if ((rv = ir_val_repr(v, b)) != CN_OK) {
            return rv;
        }
        return b->len > IR_EVAL_MAX_STR ? CN_TOOBIG : CN_OK;
    }
    if (depth >= IR_REPR_MAX_DEPTH) {
        return CN_DEPTH;
    }
    n = v.type == IR_T_LIST ? ir_list_len(v) : ir_map_len(v);
    if ((rv = cn_buf_putc(b, v.type == IR_T_LIST ? '[' : '{')) != CN_OK) {
        return rv;
    }
    for (i = 0; i < n; i++) {
        if (i > 0 && (rv = cn_buf_append(b, ", ", 2)) != CN_OK) {
            return rv;
        }
        if (v.type == IR_T_LIST) {
            rv = repr_bounded(ir_list_items(v)[i], b, depth + 1);
        } else if ((rv = repr_bounded(ir_map_key_at(v, i), b, depth + 1)) == CN_OK &&
                   (rv = cn_buf_append(b, ": ", 2)) == CN_OK) {
            rv = repr_bounded(ir_map_val_at(v, i), b, depth + 1);
        }
        if (rv != CN_OK) {
            return rv;
        }
    }
    if ((rv = cn_buf_putc(b, v.type == IR_T_LIST ? ']' : '}')) != CN_OK) {
        return rv;
    }
    return b->len > IR_EVAL_MAX_STR ? CN_TOOBIG : CN_OK;
}

static cn_err
builtin_str(struct ir_val v, struct ir_val *out)
{
    struct cn_buf b = CN_BUF_INIT;
    char fb[IR_FLOAT_REPR_MAX];
    size_t n;
    cn_err rv;

    switch (v.type) {
    case IR_T_STR:
        *out = ir_val_retain(v);
        return CN_OK;
    case IR_T_FLOAT:
        n = ir_float_repr(v.u.f, fb);
        return str_make(fb, n, out);
    case IR_T_INT:
        n = (size_t) snprintf(fb, sizeof(fb), "%" PRId64, v.u.i);
        return str_make(fb, n, out);
    case IR_T_LIST:
    case IR_T_MAP:
        rv = repr_bounded(v, &b, 0);
        if (rv == CN_OK) {
            rv = str_make(b.data, b.len, out);
        } else if (rv == CN_TOOBIG) {
            rv = raise_str_too_long(out);
        } else if (rv == CN_DEPTH) {
            rv = raise_recursion(out, "while getting the repr of an object");
        }
        cn_buf_fini(&b);
        return rv;
    default: /* None, bool: their repr */
        if ((rv = ir_val_repr(v, &b)) == CN_OK) {
            rv = str_make(b.data, b.len, out);
        }
        cn_buf_fini(&b);
        return rv;
    }
}

/* ---- round() ---- */

static cn_err
builtin_round(const struct ir_val *a, size_t n, struct ir_val *out)
{
    if (!is_num(a[0])) {
        return ir_raise(out, "TypeError", "type %s doesn't define __round__ method", tname(a[0]));
    }
    if (n == 1 || a[1].type == IR_T_NULL) {
        if (is_intlike(a[0])) {
            *out = ir_int(as_int(a[0]));
            return CN_OK;
        }
        return ir_float_round_to_int(a[0].u.f, out);
    }
    if (!is_intlike(a[1])) {
        return raise_not_index(out, a[1]);
    }
    if (is_intlike(a[0])) {
        return ir_int_round(as_int(a[0]), as_int(a[1]), out);
    }
    return ir_float_round(a[0].u.f, as_int(a[1]), out);
}

/* ---- the other builtins ---- */

static cn_err
builtin_len(struct ir_val v, struct ir_val *out)
{
    if (!is_iterable(v)) {
        return ir_raise(out, "TypeError", "object of type '%s' has no len()", tname(v));
    }
    *out = ir_int((int64_t) iter_len(v));
    return CN_OK;
}

static cn_err
builtin_range(const struct ir_val *a, size_t n, struct ir_val *out)
{
    int64_t lo = 0, hi, step = 1, v;
    uint64_t cnt = 0, span;
    struct ir_val l;
    size_t i;
    cn_err rv;

    for (i = 0; i < n; i++) {
        if (!is_intlike(a[i])) {
            return raise_not_index(out, a[i]);
        }
    }
    if (n == 1) {
        hi = as_int(a[0]);
    } else {
        lo = as_int(a[0]);
        hi = as_int(a[1]);
        step = n == 3 ? as_int(a[2]) : 1;
    }
    if (step == 0) {
        return ir_raise(out, "ValueError", "range() arg 3 must not be zero");
    }
    if (step > 0 && lo < hi) {
        span = (uint64_t) hi - (uint64_t) lo;
        cnt = (span - 1) / (uint64_t) step + 1;
    } else if (step < 0 && lo > hi) {
        span = (uint64_t) lo - (uint64_t) hi;
        cnt = (span - 1) / ((uint64_t) 0 - (uint64_t) step) + 1;
    }
    if (cnt > IR_EVAL_MAX_ITEMS) {
        return raise_too_many(out);
    }
    if ((rv = list_alloc((size_t) cnt, &l, out)) != CN_OK) {
        return rv;
    }
    v = lo;
    for (i = 0; i < cnt; i++) {
        ir_list_items(l)[i] = ir_int(v);
        if (i + 1 < cnt) {
            v += step; /* stays inside [lo, hi) */
        }
    }
    *out = l;
    return CN_OK;
}

/* A 2-element list [a, b]; takes ownership of both. */
static cn_err
pair_new(struct ir_val a, struct ir_val b, struct ir_val *out)
{
    cn_err rv;

    if ((rv = ir_list_new(2, out)) != CN_OK) {
        ir_val_release(a);
        ir_val_release(b);
        return rv;
    }
    ir_list_items(*out)[0] = a;
    ir_list_items(*out)[1] = b;
    return CN_OK;
}

static cn_err
builtin_enumerate(const struct ir_val *a, size_t n, struct ir_val *out)
{
    struct ir_val items, l;
    int64_t start = 0, idx;
    size_t i, cnt;
    cn_err rv;

    if (n == 2) {
        if (!is_intlike(a[1])) {
            return raise_not_index(out, a[1]);
        }
        start = as_int(a[1]);
    }
    if (!is_iterable(a[0])) {
        return raise_not_iterable(out, a[0]);
    }
    cnt = iter_len(a[0]);
    if (cnt > 0 && __builtin_add_overflow(start, (int64_t) (cnt - 1), &idx)) {
        return raise_overflow(out);
    }
    if ((rv = list_alloc(cnt, &l, out)) != CN_OK) {
        return rv;
    }
    if ((rv = iter_items(a[0], &items, out)) != CN_OK) {
        ir_val_release(l);
        return rv;
    }
    for (i = 0; i < cnt; i++) {
        rv = pair_new(ir_int(start + (int64_t) i), ir_val_retain(ir_list_items(items)[i]),
                      &ir_list_items(l)[i]);
        if (rv != CN_OK) {
            break;
        }
    }
    ir_val_release(items);
    if (rv != CN_OK) {
        ir_val_release(l);
        return rv;
    }
    *out = l;
    return CN_OK;
}

static cn_err
builtin_zip(const struct ir_val *a, size_t n, struct ir_val *out)
{
    struct ir_val *lists = NULL, l = ir_null(), t;
    size_t i, k, cnt = SIZE_MAX, done = 0;
    cn_err rv = CN_OK;

    for (i = 0; i < n; i++) {
        if (!is_iterable(a[i])) {
            return raise_not_iterable(out, a[i]);
        }
        if (iter_len(a[i]) < cnt) {
            cnt = iter_len(a[i]);
        }
    }
    if (n == 0) {
        cnt = 0;
    }
    if ((rv = list_alloc(cnt, &l, out)) != CN_OK) {
        return rv;
    }
    if (n > 0 && (lists = calloc(n, sizeof(*lists))) == NULL) {
        rv = CN_NOMEM;
        goto fail;
    }
    for (done = 0; done < n; done++) {
        if ((rv = iter_items(a[done], &lists[done], out)) != CN_OK) {
            goto fail;
        }
    }
    for (i = 0; i < cnt; i++) {
        if ((rv = ir_list_new(n, &t)) != CN_OK) {
            goto fail;
        }
        for (k = 0; k < n; k++) {
            ir_list_items(t)[k] = ir_val_retain(ir_list_items(lists[k])[i]);
        }
        ir_list_items(l)[i] = t;
    }
    release_all(lists, done);
    free(lists);
    *out = l;
    return CN_OK;
fail: /* CN_NOMEM, or CN_RAISED with the error already in *out */
    if (lists != NULL) {
        release_all(lists, done);
    }
    free(lists);
    ir_val_release(l);
    return rv;
}

static cn_err
builtin_minmax(enum ir_builtin b, const struct ir_val *a, size_t n, struct ir_val *out)
{
    enum ir_cmpop op = b == IR_B_MIN ? IR_CMP_LT : IR_CMP_GT;
    const char *name = b == IR_B_MIN ? "min" : "max";
    struct ir_val items = ir_null(), best;
    const struct ir_val *xs = a;
    size_t cnt = n, i;
    bool better;
    cn_err rv;

    if (n == 1) {
        if (!is_iterable(a[0])) {
            return raise_not_iterable(out, a[0]);
        }
        if (iter_len(a[0]) == 0) {
            return ir_raise(out, "ValueError", "%s() arg is an empty sequence", name);
        }
        if ((rv = iter_items(a[0], &items, out)) != CN_OK) {
            return rv;
        }
        xs = ir_list_items(items);
        cnt = ir_list_len(items);
    }
    best = xs[0];
    for (i = 1; i < cnt; i++) {
        if ((rv = order(xs[i], best, op, 0, &better, out)) != CN_OK) {
            ir_val_release(items);
            return rv;
        }
        if (better) {
            best = xs[i];
        }
    }
    *out = ir_val_retain(best);
    ir_val_release(items);
    return CN_OK;
}

static cn_err
builtin_sum(const struct ir_val *a, size_t n, struct ir_val *out)
{
    struct ir_val items, acc, next;
    size_t i;
    cn_err rv;

    if (!is_iterable(a[0])) {
        return raise_not_iterable(out, a[0]);
    }
    if (n == 2 && a[1].type == IR_T_STR) {
        return ir_raise(out, "TypeError", "sum() can't sum strings [use ''.join(seq) instead]");
    }
    if ((rv = iter_items(a[0], &items, out)) != CN_OK) {
        return rv;
    }
    acc = n == 2 ? ir_val_retain(a[1]) : ir_int(0);
    for (i = 0; i < ir_list_len(items); i++) {
        rv = binop(IR_OP_ADD, acc, ir_list_items(items)[i], &next);
        ir_val_release(acc);
        if (rv != CN_OK) {
            ir_val_release(items);
            if (rv == CN_RAISED) {
                *out = next;
            }
            return rv;
        }
        acc = next;
    }
    ir_val_release(items);
    *out = acc;
    return CN_OK;
}

static cn_err
builtin_abs(struct ir_val v, struct ir_val *out)
{
    if (is_intlike(v)) {
        if (as_int(v) == INT64_MIN) {
            return raise_overflow(out);
        }
        *out = ir_int(as_int(v) < 0 ? -as_int(v) : as_int(v));
        return CN_OK;
    }
    if (v.type == IR_T_FLOAT) {
        *out = ir_float(fabs(v.u.f));
        return CN_OK;
    }
    return ir_raise(out, "TypeError", "bad operand type for abs(): '%s'", tname(v));
}

static cn_err
builtin_int(const struct ir_val *a, size_t n, struct ir_val *out)
{
    int64_t base;

    if (n == 0) {
        *out = ir_int(0);
        return CN_OK;
    }
    if (n == 2) {
        if (!is_intlike(a[1])) {
            return raise_not_index(out, a[1]);
        }
        base = as_int(a[1]);
        if ((base != 0 && base < 2) || base > 36) {
            return ir_raise(out, "ValueError", "int() base must be >= 2 and <= 36, or 0");
        }
        if (a[0].type != IR_T_STR) {
            return ir_raise(out, "TypeError", "int() can't convert non-string with explicit base");
        }
        return ir_int_from_str(a[0], base, out);
    }
    switch (a[0].type) {
    case IR_T_BOOL:
    case IR_T_INT:
        *out = ir_int(as_int(a[0]));
        return CN_OK;
    case IR_T_FLOAT:
        return ir_int_from_double(a[0].u.f, out);
    case IR_T_STR:
        return ir_int_from_str(a[0], 10, out);
    default:
        return ir_raise(out, "TypeError",
                        "int() argument must be a string, a bytes-like object or a real number, "
                        "not '%s'",
                        tname(a[0]));
    }
}

static cn_err
builtin_float(const struct ir_val *a, size_t n, struct ir_val *out)
{
    if (n == 0) {
        *out = ir_float(0.0);
        return CN_OK;
    }
    if (is_num(a[0])) {
        *out = ir_float(as_double(a[0]));
        return CN_OK;
    }
    if (a[0].type == IR_T_STR) {
        return ir_float_from_str(a[0], out);
    }
    return ir_raise(out, "TypeError",
                    "float() argument must be a string or a real number, not '%s'", tname(a[0]));
}

/* CPython's binarysort: sorts a[lo..hi) given that a[lo..start) is sorted, with `<` only. */
static cn_err
binary_insertion(struct ir_val *a, size_t lo, size_t hi, size_t start, struct ir_val *out)
{
    size_t l, r, p;
    struct ir_val pivot;
    bool lt;
    cn_err rv;

    if (lo == start) {
        start++;
    }
    for (; start < hi; start++) {
        l = lo;
        r = start;
        pivot = a[r];
        do {
            p = l + ((r - l) >> 1);
            if ((rv = order(pivot, a[p], IR_CMP_LT, 0, &lt, out)) != CN_OK) {
                return rv;
            }
            if (lt) {
                r = p;
            } else {
                l = p + 1;
            }
        } while (l < r);
        memmove(&a[l + 1], &a[l], (start - l) * sizeof(*a));
        a[l] = pivot;
    }
    return CN_OK;
}

/* Sorts n borrowed values in place, stably, with Python's `<`. */
static cn_err
sort_vals(struct ir_val *a, size_t n, struct ir_val *out)
{
    struct ir_val *tmp, t;
    size_t run, i, j, width, lo, mid, hi, k;
    bool lt, desc = false;
    cn_err rv;

    if (n < 2) {
        return CN_OK;
    }
    if (n < EV_SORT_EXACT_MAX) {
        /* timsort on a short list: count_run, reverse a strictly descending run, then binary
         * insertion of the rest; same comparisons in the same order as CPython. */
        if ((rv = order(a[1], a[0], IR_CMP_LT, 0, &lt, out)) != CN_OK) {
            return rv;
        }
        desc = lt;
        for (run = 2; run < n; run++) {
            if ((rv = order(a[run], a[run - 1], IR_CMP_LT, 0, &lt, out)) != CN_OK) {
                return rv;
            }
            if (lt != desc) {
                break;
            }
        }
        if (desc) {
            for (i = 0, j = run - 1; i < j; i++, j--) {
                t = a[i];
                a[i] = a[j];
                a[j] = t;
            }
        }
        return binary_insertion(a, 0, n, run, out);
    }
    /* Longer lists: sorted chunks of 32 by binary insertion, then stable bottom-up merges. */
    for (lo = 0; lo < n; lo += 32) {
        hi = lo + 32 < n ? lo + 32 : n;
        if ((rv = binary_insertion(a, lo, hi, lo, out)) != CN_OK) {
            return rv;
        }
    }
    if ((tmp = malloc(n * sizeof(*tmp))) == NULL) {
        return CN_NOMEM;
    }
    for (width = 32; width < n; width *= 2) {
        for (lo = 0; lo + width < n; lo += 2 * width) {
            mid = lo + width;
            hi = mid + width < n ? mid + width : n;
            memcpy(tmp + lo, a + lo, (hi - lo) * sizeof(*a));
            i = lo;
            j = mid;
            k = lo;
            while (i < mid && j < hi) {
                if ((rv = order(tmp[j], tmp[i], IR_CMP_LT, 0, &lt, out)) != CN_OK) {
                    free(tmp);
                    return rv; /* a holds borrowed copies only: nothing to undo */
                }
                a[k++] = lt ? tmp[j++] : tmp[i++];
            }
            while (i < mid) {
                a[k++] = tmp[i++];
            }
            while (j < hi) {
                a[k++] = tmp[j++];
            }
        }
    }
    free(tmp);
    return CN_OK;
}

static cn_err
builtin_sorted(struct ir_val v, struct ir_val *out)
{
    struct ir_val items, l;
    struct ir_val *work;
    size_t n, i;
    cn_err rv;

    if (!is_iterable(v)) {
        return raise_not_iterable(out, v);
    }
    if ((rv = iter_items(v, &items, out)) != CN_OK) {
        return rv;
    }
    n = ir_list_len(items);
    if ((rv = list_alloc(n, &l, out)) != CN_OK) {
        ir_val_release(items);
        return rv;
    }
    /* Sort borrowed copies, so a comparison that raises leaves no reference to fix. */
    if ((work = malloc((n ? n : 1) * sizeof(*work))) == NULL) {
        ir_val_release(items);
        ir_val_release(l);
        return CN_NOMEM;
    }
    memcpy(work, ir_list_items(items), n * sizeof(*work));
    if ((rv = sort_vals(work, n, out)) != CN_OK) {
        free(work);
        ir_val_release(items);
        ir_val_release(l);
        return rv;
    }
    for (i = 0; i < n; i++) {
        ir_list_items(l)[i] = ir_val_retain(work[i]);
    }
    free(work);
    ir_val_release(items);
    *out = l;
    return CN_OK;
}

static cn_err
builtin_dict_view(enum ir_builtin b, struct ir_val d, struct ir_val *out)
{
    struct ir_val l;
    size_t i, n;
    cn_err rv;

    if (d.type != IR_T_MAP) {
        return ir_raise(out, "TypeError", "%s() argument must be a dict, not '%s'",
                        ir_builtin_name(b), tname(d));
    }
    n = ir_map_len(d);
    if ((rv = list_alloc(n, &l, out)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < n; i++) {
        struct ir_val k = ir_map_key_at(d, i), v = ir_map_val_at(d, i);
        if (b == IR_B_KEYS) {
            ir_list_items(l)[i] = ir_val_retain(k);
        } else if (b == IR_B_VALUES) {
            ir_list_items(l)[i] = ir_val_retain(v);
        } else if ((rv = pair_new(ir_val_retain(k), ir_val_retain(v), &ir_list_items(l)[i])) !=
                   CN_OK) {
            ir_val_release(l);
            return rv;
        }
    }
    *out = l;
    return CN_OK;
}

static cn_err
call_builtin(enum ir_builtin b, const struct ir_val *a, size_t n, struct ir_val *out)
{
    switch (b) {
    case IR_B_LEN:
        return builtin_len(a[0], out);
    case IR_B_RANGE:
        return builtin_range(a, n, out);
    case IR_B_ENUMERATE:
        return builtin_enumerate(a, n, out);
    case IR_B_ZIP:
        return builtin_zip(a, n, out);
    case IR_B_MIN:
    case IR_B_MAX:
        return builtin_minmax(b, a, n, out);
    case IR_B_SUM:
        return builtin_sum(a, n, out);
    case IR_B_ABS:
        return builtin_abs(a[0], out);
    case IR_B_ROUND:
        return builtin_round(a, n, out);
    case IR_B_STR:
        if (n == 0) {
            return ir_str_new("", 0, out);
        }
        return builtin_str(a[0], out);
    case IR_B_INT:
        return builtin_int(a, n, out);
    case IR_B_FLOAT:
        return builtin_float(a, n, out);
    case IR_B_BOOL:
        *out = ir_bool(n == 1 && ir_truthy(a[0]));
        return CN_OK;
    case IR_B_SORTED:
        return builtin_sorted(a[0], out);
    case IR_B_LIST:
        if (n == 0) {
            return ir_list_new(0, out);
        }
        if (!is_iterable(a[0])) {
            return raise_not_iterable(out, a[0]);
        }
        return iter_items(a[0], out, out);
    case IR_B_KEYS:
    case IR_B_VALUES:
    case IR_B_ITEMS:
        return builtin_dict_view(b, a[0], out);
    case IR_B_ISEXCEPTION:
        *out = ir_bool(ir_is_error(a[0]));
        return CN_OK;
    default:
        return CN_INVAL;
    }
}

/* ---- the tree walk ---- */

/* Evaluates children [0, n) of e into vals (all or nothing). */
static cn_err
ev_children(const struct ev *x, const struct ir_expr *e, uint32_t n, struct ir_val *vals,
            struct ir_val *out)
{
    uint32_t i;
    cn_err rv;

    for (i = 0; i < n; i++) {
        if ((rv = ev_expr(x, ir_xchild(x->p, e, i), &vals[i])) != CN_OK) {
            if (rv == CN_RAISED) {
                *out = vals[i];
            }
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

    if ((rv = ev_expr(x, ir_xchild(x->p, e, 0), &left)) != CN_OK) {
        if (rv == CN_RAISED) {
            *out = left;
        }
        return rv;
    }
    /* a < b < c: each middle operand is evaluated once; the chain stops at the first false. */
    for (k = 0; k + 1 < e->nargs && res; k++) {
        if ((rv = ev_expr(x, ir_xchild(x->p, e, k + 1), &right)) != CN_OK) {
            ir_val_release(left);
            if (rv == CN_RAISED) {
                *out = right;
            }
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
    if (e->nargs > 4 && (vals = calloc(e->nargs, sizeof(*vals))) == NULL) {
        return CN_NOMEM;
    }
    if ((rv = ev_children(x, e, e->nargs, vals, out)) == CN_OK) {
        rv = call_builtin((enum ir_builtin) e->op, vals, e->nargs, out);
        release_all(vals, e->nargs);
    }
    if (vals != small) {
        free(vals);
    }
    return rv;
}

static cn_err
ev_expr(const struct ev *x, uint32_t ei, struct ir_val *out)
{
    const struct ir_expr *e;
    struct ir_val v[3];
    const struct ir_val *bound;
    uint32_t ci;
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
            rv = negate(v[0], out);
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
            rv = binop((enum ir_binop) e->op, v[0], v[1], out);
        } else {
            rv = index_op(v[0], v[1], out);
        }
        release_all(v, 2);
        return rv;
    case IR_X_SLICE:
        if ((rv = ev_children(x, e, 1, v, out)) != CN_OK) {
            return rv;
        }
        v[1] = v[2] = ir_null();
        for (ci = 1; ci < 3; ci++) {
            if (ir_xchild(x->p, e, ci) == IR_NO_EXPR) {
                continue;
            }
            if ((rv = ev_expr(x, ir_xchild(x->p, e, ci), &v[ci])) != CN_OK) {
                if (rv == CN_RAISED) {
                    *out = v[ci];
                }
                release_all(v, ci);
                return rv;
            }
        }
        rv = slice_op(v[0], v[1], v[2], out);
        release_all(v, 3);
        return rv;
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
        if ((rv = ev_expr(x, ir_xchild(x->p, e, 1), &v[0])) != CN_OK) {
            if (rv == CN_RAISED) {
                *out = v[0];
            }
            return rv;
        }
        ci = ir_xchild(x->p, e, ir_truthy(v[0]) ? 0 : 2);
        ir_val_release(v[0]);
        return ev_expr(x, ci, out);
    case IR_X_CMP:
        return ev_cmp(x, e, out);
    case IR_X_CALL:
        return ev_call(x, e, out);
    default:
        return CN_INVAL;
    }
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
