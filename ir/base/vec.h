/* SPDX-License-Identifier: MIT */
/*
 * Typed growable arrays on the heap: `struct { T *items; size_t len, cap; }` plus one generic
 * grow function, so each user declares its own element type without macros that generate code.
 * The vector does not own what its elements point to unless its user says so.
 */
#ifndef IR_BASE_VEC_H
#define IR_BASE_VEC_H

#include <stddef.h>

#include "ir/base/err.h"

/* Ensures *items can hold `need` elements of elem_size bytes, doubling capacity.
 * Returns CN_OK or CN_NOMEM (then *items and *cap are unchanged). */
CN_MUST_CHECK cn_err cn_vec_grow(void **items, size_t *cap, size_t elem_size, size_t need);

/* Appends one element to a vector declared as struct { T *items; size_t len, cap; }.
 * Evaluates to a cn_err. */
#define CN_VEC_PUSH(v, elem)                                                                   \
    (cn_vec_grow((void **) &(v)->items, &(v)->cap, sizeof(*(v)->items), (v)->len + 1) != CN_OK \
         ? CN_NOMEM                                                                            \
         : ((v)->items[(v)->len++] = (elem), CN_OK))

#endif
