/* SPDX-License-Identifier: MIT */
/* The one grow routine behind every typed vector. */
#include "ir/base/vec.h"

#include <stdint.h>
#include <stdlib.h>

cn_err
cn_vec_grow(void **items, size_t *cap, size_t elem_size, size_t need)
{
    size_t ncap;
    void *p;

    if (need <= *cap) {
        return CN_OK;
    }
    ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) {
            return CN_NOMEM;
        }
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elem_size) {
        return CN_NOMEM;
    }
    p = realloc(*items, ncap * elem_size);
    if (p == NULL) {
        return CN_NOMEM;
    }
    *items = p;
    *cap = ncap;
    return CN_OK;
}
