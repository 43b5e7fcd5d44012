/* SPDX-License-Identifier: MIT */
/*
 * The builtin functions of expressions (the IR_BUILTINS table in expr.h: len, range,
 * enumerate, zip, min, max, sum, abs, round, str, int, float, bool, sorted, list, keys, values,
 * items, isexception): argument checks, Python's messages, and the work itself, except what
 * numtext.c does (number text and rounding) and what the evaluator shares (iteration,
 * ordering, +). The evaluator calls them through ir_builtin_call once the arguments are
 * evaluated; the compiler has already checked the arity.
 *
 * DESIGN
 * - Results are built under the size limits like every other expression result: a list or
 *   string is allocated only after its size is known to be within IR_EVAL_MAX_ITEMS /
 *   IR_EVAL_MAX_STR (range counts first; str() of a container stops as soon as its text passes
 *   the limit).
 * - sorted() runs CPython's own count_run + binary insertion sort below 64 items, so the
 *   comparison sequence (and therefore the TypeError wording and the order NaNs end up in) is
 *   the same as Python's; longer lists use a stable merge sort. It sorts borrowed copies, so a
 *   comparison that raises leaves no reference to fix.
 */
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

static cn_err
raise_not_index(struct ir_val *out, struct ir_val v)
{
    return ir_raise(out, "TypeError", "'%s' object cannot be interpreted as an integer", tname(v));
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
    if ((rv = ir_ev_iter_items(a[0], &items, out)) != CN_OK) {
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
        if ((rv = ir_ev_iter_items(a[done], &lists[done], out)) != CN_OK) {
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
        if ((rv = ir_ev_iter_items(a[0], &items, out)) != CN_OK) {
            return rv;
        }
        xs = ir_list_items(items);
        cnt = ir_list_len(items);
    }
    best = xs[0];
    for (i = 1; i < cnt; i++) {
        if ((rv = ir_ev_order(xs[i], best, op, 0, &better, out)) != CN_OK) {
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
    if ((rv = ir_ev_iter_items(a[0], &items, out)) != CN_OK) {
        return rv;
    }
    acc = n == 2 ? ir_val_retain(a[1]) : ir_int(0);
    for (i = 0; i < ir_list_len(items); i++) {
        rv = ir_ev_binop(IR_OP_ADD, acc, ir_list_items(items)[i], &next);
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
            if ((rv = ir_ev_order(pivot, a[p], IR_CMP_LT, 0, &lt, out)) != CN_OK) {
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
        if ((rv = ir_ev_order(a[1], a[0], IR_CMP_LT, 0, &lt, out)) != CN_OK) {
            return rv;
        }
        desc = lt;
        for (run = 2; run < n; run++) {
            if ((rv = ir_ev_order(a[run], a[run - 1], IR_CMP_LT, 0, &lt, out)) != CN_OK) {
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
                if ((rv = ir_ev_order(tmp[j], tmp[i], IR_CMP_LT, 0, &lt, out)) != CN_OK) {
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
    if ((rv = ir_ev_iter_items(v, &items, out)) != CN_OK) {
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

cn_err
ir_builtin_call(enum ir_builtin b, const struct ir_val *a, size_t n, struct ir_val *out)
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
        return ir_ev_sign(a[0], true, out);
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
        return ir_ev_iter_items(a[0], out, out);
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
