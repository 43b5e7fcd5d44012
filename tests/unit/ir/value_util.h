/* SPDX-License-Identifier: MIT */
/*
 * Value helpers shared by the value and evaluator tests (test_value.c, test_eval.c): build a
 * string, a value from JSON or a deep list, and print a repr, each asserting (Criterion) that
 * the call worked. Header-only (static inline) so each test binary takes what it uses.
 */
#ifndef TESTS_UNIT_IR_VALUE_UTIL_H
#define TESTS_UNIT_IR_VALUE_UTIL_H

#include <string.h>

#include <criterion/criterion.h>

#include "ir/value.h"
#include "tests/support/compile_util.h"

static inline struct ir_val
t_str(const char *s)
{
    struct ir_val v;

    T_OK(ir_str_from_cstr(s, &v));
    return v;
}

static inline struct ir_val
t_json(const char *text)
{
    struct ir_val v;
    struct cn_errmsg em = {{0}};
    cn_err rv = ir_val_from_json(text, strlen(text), &v, &em);

    cr_assert_eq(rv, CN_OK, "json %s: %s %s", text, cn_errname(rv), em.text);
    return v;
}

/* repr() of v as a malloc'd string. */
static inline char *
t_repr(struct ir_val v)
{
    struct cn_buf b = CN_BUF_INIT;
    char *s = NULL;

    T_OK(ir_val_repr(v, &b));
    T_OK(cn_buf_take(&b, &s, NULL));
    return s;
}

/* A list nested `lists` deep around `inner` (takes ownership of inner): deeper than any decoder
 * accepts, which only a loop like this can build. */
static inline struct ir_val
t_nest(int lists, struct ir_val inner)
{
    struct ir_val l;
    int i;

    for (i = 0; i < lists; i++) {
        T_OK(ir_list_new(1, &l));
        ir_list_items(l)[0] = inner;
        inner = l;
    }
    return inner;
}

#endif
