/* SPDX-License-Identifier: MIT */
/*
 * Corrupted copies of an encoding, for the tests that check a decoder rejects or survives
 * damage: one byte flipped at a place and by a mask drawn from a caller's seed (an LCG, so a
 * failure reproduces). No state besides the caller's seed.
 */
#ifndef TESTS_SUPPORT_MUTATE_H
#define TESTS_SUPPORT_MUTATE_H

#include <stddef.h>

/* A malloc'd copy of data[0..len) (len > 0) with one byte XORed with a non-zero mask; the
 * place and the mask come from *seed, which is stepped twice. Free with free(). */
char *t_flip_copy(const char *data, size_t len, unsigned *seed);

#endif
