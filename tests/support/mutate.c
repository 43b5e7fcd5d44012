/* SPDX-License-Identifier: MIT */
#include "tests/support/mutate.h"

#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

char *
t_flip_copy(const char *data, size_t len, unsigned *seed)
{
    char *copy = malloc(len);
    size_t at;

    cr_assert_not_null(copy);
    memcpy(copy, data, len);
    *seed = *seed * 1103515245u + 12345u;
    at = (*seed >> 8) % len;
    *seed = *seed * 1103515245u + 12345u;
    copy[at] = (char) (copy[at] ^ (char) (1 + (*seed >> 16) % 255));
    return copy;
}
