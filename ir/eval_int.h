/* SPDX-License-Identifier: MIT */
/*
 * Internals shared by the evaluator's files, and only by them: eval.c (the tree walk,
 * operators, comparison, indexing), builtins.c (the builtin functions), numtext.c (Python
 * number text) and error.c (error values). Nothing outside ir/ includes it.
 *
 * Every operation here and in those files has the shape `cn_err op(..., struct ir_val *out)`:
 * CN_OK with a new value in *out, CN_RAISED with a new error value in *out, or CN_NOMEM (also
 * CN_INVAL for a malformed pool) with *out untouched. Operands are borrowed.
 */
#ifndef IR_EVAL_INT_H
#define IR_EVAL_INT_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/error.h"
#include "ir/eval.h"
#include "ir/expr.h"
#include "ir/value.h"

#define IR_EV_OVERFLOW_MSG "integer overflow: result does not fit in 64 bits"

/* ---- small helpers ---- */

static inline bool
is_intlike(struct ir_val v)
{
    return v.type == IR_T_INT || v.type == IR_T_BOOL;
}

static inline bool
is_num(struct ir_val v)
{
    return is_intlike(v) || v.type == IR_T_FLOAT;
}

static inline int64_t
as_int(struct ir_val v)
{
    return v.type == IR_T_BOOL ? (int64_t) v.u.b : v.u.i;
}

static inline double
as_double(struct ir_val v)
{
    return v.type == IR_T_FLOAT ? v.u.f : (double) as_int(v);
}

static inline const char *
tname(struct ir_val v)
{
    return ir_type_name(v.type);
}

static inline bool
is_container(struct ir_val v)
{
    return v.type == IR_T_LIST || v.type == IR_T_MAP;
}

static inline void
release_all(struct ir_val *vals, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        ir_val_release(vals[i]);
    }
}

static inline cn_err
raise_overflow(struct ir_val *out)
{
    return ir_raise(out, "OverflowError", "%s", IR_EV_OVERFLOW_MSG);
}

static inline cn_err
raise_not_iterable(struct ir_val *out, struct ir_val v)
{
    return ir_raise(out, "TypeError", "'%s' object is not iterable", tname(v));
}

static inline cn_err
raise_recursion(struct ir_val *out, const char *what)
{
    return ir_raise(out, "RecursionError", "maximum recursion depth exceeded %s", what);
}

static inline cn_err
raise_too_many(struct ir_val *out)
{
    return ir_raise(out, "ValueError", "result too large: more than %u items", IR_EVAL_MAX_ITEMS);
}

/* New list of n nulls in *list, refusing sizes above the limit (raised into *out). */
static inline cn_err
list_alloc(size_t n, struct ir_val *list, struct ir_val *out)
{
    if (n > IR_EVAL_MAX_ITEMS) {
        return raise_too_many(out);
    }
    return ir_list_new(n, list);
}

static inline cn_err
raise_str_too_long(struct ir_val *out)
{
    return ir_raise(out, "ValueError", "result too large: more than %u bytes", IR_EVAL_MAX_STR);
}

/* A string from bytes that are valid UTF-8 by construction (slices at code point boundaries,
 * concatenations, ASCII text). */
static inline cn_err
str_make(const char *s, size_t n, struct ir_val *out)
{
    cn_err rv;

    if (n > IR_EVAL_MAX_STR) {
        return raise_str_too_long(out);
    }
    rv = ir_str_new(s, n, out);
    assert(rv != CN_UTF8);
    return rv == CN_UTF8 ? CN_INVAL : rv;
}

/* ---- UTF-8 ---- */

/* Length of the sequence a valid lead byte starts. */
static inline size_t
utf8_seqlen(unsigned char c)
{
    if (c < 0x80) {
        return 1;
    }
    if (c < 0xe0) {
        return 2;
    }
    return c < 0xf0 ? 3 : 4;
}

/* Decodes the code point at p (valid UTF-8) and stores its byte length in *n. */
static inline uint32_t
utf8_decode(const unsigned char *p, size_t *n)
{
    size_t len = utf8_seqlen(p[0]), i;
    uint32_t c;

    if (len == 1) {
        *n = 1;
        return p[0];
    }
    c = (uint32_t) p[0] & (len == 2 ? 0x1fu : len == 3 ? 0x0fu : 0x07u);
    for (i = 1; i < len; i++) {
        c = (c << 6) | ((uint32_t) p[i] & 0x3fu);
    }
    *n = len;
    return c;
}

/* ---- iteration ---- */

static inline bool
is_iterable(struct ir_val v)
{
    return v.type == IR_T_LIST || v.type == IR_T_STR || v.type == IR_T_MAP;
}

/* Number of items iterating v yields (v iterable). */
static inline size_t
iter_len(struct ir_val v)
{
    if (v.type == IR_T_LIST) {
        return ir_list_len(v);
    }
    return v.type == IR_T_STR ? ir_str_cplen(v) : ir_map_len(v);
}


/* ---- shared between eval.c and builtins.c ---- */

/* -v, or abs(v) when absolute: numbers only (a bool counts as its int), and both overflow only at
 * INT64_MIN; anything else raises TypeError naming the operation. (eval.c) */
CN_MUST_CHECK cn_err ir_ev_sign(struct ir_val v, bool absolute, struct ir_val *out);

/* The items of an iterable as a list in *list: a list itself (a new reference), a string's
 * characters, a dict's keys. v must be iterable (is_iterable); the size limit raises into
 * *out. Returns CN_OK, CN_RAISED or CN_NOMEM. (eval.c) */
CN_MUST_CHECK cn_err ir_ev_iter_items(struct ir_val v, struct ir_val *list, struct ir_val *out);

/* a OP b for an ordering operator (<, <=, >, >=) as Python's rich comparison, in *res; depth
 * is the list nesting already walked (0 at the top). Raises TypeError for unorderable types
 * and RecursionError for lists nested deeper than IR_REPR_MAX_DEPTH. (eval.c) */
CN_MUST_CHECK cn_err ir_ev_order(struct ir_val a, struct ir_val b, enum ir_cmpop op, unsigned depth,
                                 bool *res, struct ir_val *out);

/* a OP b for a binary operator (+, -, *, /, //, %, |). (eval.c) */
CN_MUST_CHECK cn_err ir_ev_binop(enum ir_binop op, struct ir_val a, struct ir_val b,
                                 struct ir_val *out);

/* Calls builtin b on n evaluated arguments (borrowed); n is within b's arity (the caller
 * checks). CN_INVAL for an unknown builtin. (builtins.c) */
CN_MUST_CHECK cn_err ir_builtin_call(enum ir_builtin b, const struct ir_val *a, size_t n,
                                     struct ir_val *out);

#endif
