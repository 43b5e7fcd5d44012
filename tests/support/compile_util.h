/* SPDX-License-Identifier: MIT */
/*
 * Helpers for compiler tests: compile a source string and get back either the DAG or the
 * formatted diagnostics, read files relative to the source tree (CAIRN_SOURCE_ROOT, set by
 * meson), and assertion macros that name the cn_err on mismatch.
 */
#ifndef TESTS_SUPPORT_COMPILE_UTIL_H
#define TESTS_SUPPORT_COMPILE_UTIL_H

#include <stddef.h>

#include "ir/compile.h"

#define T_OK(expr)                                                            \
    do {                                                                      \
        cn_err t_rv_ = (expr);                                                \
        cr_assert(t_rv_ == CN_OK, "%s failed: %s", #expr, cn_errname(t_rv_)); \
    } while (0)

#define T_ERR(expr, want)                                                               \
    do {                                                                                \
        cn_err t_rv_ = (expr);                                                          \
        cr_assert(t_rv_ == (want), "%s returned %s, want %s", #expr, cn_errname(t_rv_), \
                  cn_errname(want));                                                    \
    } while (0)

/* Result of compiling a source string. */
struct t_compiled {
    cn_err rv;
    struct ir_dag *dag; /* on CN_OK */
    char *errors;       /* formatted diagnostics ("" when none); malloc'd */
    size_t nerrors;
};

/* Compiles src as file "test.cairn". Free with t_compiled_free. */
struct t_compiled t_compile(const char *src);
void t_compiled_free(struct t_compiled *c);

/* Compiles src, asserts success and returns the canonical DAG text (malloc'd). */
char *t_dag_text(const char *src);

/* Reads a file under the source root (CAIRN_SOURCE_ROOT); NULL if missing. malloc'd. */
char *t_read_source_file(const char *rel, size_t *len);

/* Writes a file under the source root (used to refresh golden files). Returns 0 on success. */
int t_write_source_file(const char *rel, const char *data, size_t len);

#endif
