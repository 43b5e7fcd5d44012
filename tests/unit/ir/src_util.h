/* SPDX-License-Identifier: MIT */
/*
 * Building test sources too large to write out (deep nesting, thousands of items) in a cn_buf:
 * each append asserts (Criterion) that it worked. Shared by the lexer, parser and compiler tests;
 * header-only (static inline).
 */
#ifndef TESTS_UNIT_IR_SRC_UTIL_H
#define TESTS_UNIT_IR_SRC_UTIL_H

#include <stdarg.h>

#include <criterion/criterion.h>

#include "ir/base/buf.h"

static inline void
t_puts(struct cn_buf *b, const char *s)
{
    cr_assert_eq(cn_buf_puts(b, s), CN_OK);
}

/* Appends s n times. */
static inline void
t_put_n(struct cn_buf *b, const char *s, int n)
{
    int i;

    for (i = 0; i < n; i++) {
        t_puts(b, s);
    }
}

static inline void CN_PRINTF(2, 3) t_printf(struct cn_buf *b, const char *fmt, ...)
{
    va_list ap;
    cn_err rv;

    va_start(ap, fmt);
    rv = cn_buf_vprintf(b, fmt, ap);
    va_end(ap);
    cr_assert_eq(rv, CN_OK);
}

#endif
