/* SPDX-License-Identifier: MIT */
/*
 * Bump allocator with a lifespan: the AST of one source file, or one DAG template,
 * lives in one arena and is released by one cn_arena_free. Individual frees do not exist.
 * Not thread-safe: one owner at a time.
 */
#ifndef IR_BASE_ARENA_H
#define IR_BASE_ARENA_H

#include <stddef.h>

#include "ir/base/err.h"

struct cn_arena;

/* Returns a new arena whose blocks are at least block_size bytes, or NULL on OOM. */
struct cn_arena *cn_arena_new(size_t block_size);

/* Frees every allocation made from a, then a itself. NULL is a no-op. */
void cn_arena_free(struct cn_arena *a);

/* Returns n zeroed bytes aligned for any object, or NULL on OOM. */
void *cn_arena_alloc(struct cn_arena *a, size_t n);

/* Returns a zeroed array of count elements of size each, or NULL on OOM or overflow. */
void *cn_arena_calloc(struct cn_arena *a, size_t count, size_t size);

/* Copies n bytes and appends a NUL; returns the copy or NULL on OOM. */
char *cn_arena_strndup(struct cn_arena *a, const char *s, size_t n);

/* Total bytes handed out so far (for tests and memory reports). */
size_t cn_arena_used(const struct cn_arena *a);

#endif
