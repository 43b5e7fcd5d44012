/* SPDX-License-Identifier: MIT */
/*
 * Allocation that cannot fail: on exhaustion the process logs one line naming what it was
 * allocating and aborts. The runner, the pool and the worker SDK use these instead of handling
 * CN_NOMEM, because a "recovery" branch there can only drop something that must not be dropped
 * (a timer, an event, a pointer to an instance) and leave the process half alive; a supervisor
 * restarting the process resumes every instance from its last committed state instead.
 * The pure libraries (values, compiler, evaluator, executor) keep returning CN_NOMEM, tested by
 * allocation-failure injection; their callers in the runner turn it into cn_oom().
 * Thread-safe; no state.
 */
#ifndef IR_BASE_XALLOC_H
#define IR_BASE_XALLOC_H

#include <stddef.h>

#include "ir/base/vec.h"

/* Logs "out of memory: WHAT" on stderr and aborts. The one place the process dies of OOM. */
_Noreturn void cn_oom(const char *what);

void *cn_xmalloc(size_t n);
void *cn_xcalloc(size_t n, size_t size);
void *cn_xrealloc(void *p, size_t n);
/* n elements of size bytes, checked for overflow. */
void *cn_xreallocarray(void *p, size_t n, size_t size);
char *cn_xstrdup(const char *s);
/* The first n bytes of s (which need not be NUL-terminated), NUL-terminated. */
char *cn_xstrndup(const char *s, size_t n);

/* Appends one element to a vector declared as struct { T *items; size_t len, cap; } (the shape
 * of ir/base/vec.h), aborting on exhaustion: a statement, nothing to check. */
#define CN_VEC_XPUSH(v, elem)                                                                   \
    do {                                                                                        \
        if (cn_vec_grow((void **) &(v)->items, &(v)->cap, sizeof(*(v)->items), (v)->len + 1) != \
            CN_OK) {                                                                            \
            cn_oom("vector");                                                                   \
        }                                                                                       \
        (v)->items[(v)->len++] = (elem);                                                        \
    } while (0)

/* Ensures room for `need` elements in such a vector, aborting on exhaustion. */
#define CN_VEC_XRESERVE(v, need)                                                                   \
    do {                                                                                           \
        if (cn_vec_grow((void **) &(v)->items, &(v)->cap, sizeof(*(v)->items), (need)) != CN_OK) { \
            cn_oom("vector");                                                                      \
        }                                                                                          \
    } while (0)

#endif
