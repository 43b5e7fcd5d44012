/* SPDX-License-Identifier: MIT */
/* Bump allocator: a singly linked list of blocks, newest first. */
#include "ir/base/arena.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct arena_block {
    struct arena_block *next;
    size_t cap;
    size_t used;
    alignas(max_align_t) unsigned char data[];
};

struct cn_arena {
    struct arena_block *head;
    size_t block_size;
    size_t total;
};

struct cn_arena *
cn_arena_new(size_t block_size)
{
    struct cn_arena *a = calloc(1, sizeof(*a));

    if (a == NULL) {
        return NULL;
    }
    a->block_size = block_size < 256 ? 256 : block_size;
    return a;
}

void
cn_arena_free(struct cn_arena *a)
{
    struct arena_block *b, *next;

    if (a == NULL) {
        return;
    }
    for (b = a->head; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

void *
cn_arena_alloc(struct cn_arena *a, size_t n)
{
    const size_t align = alignof(max_align_t);
    struct arena_block *b = a->head;
    size_t off, cap;
    void *p;

    if (n > SIZE_MAX / 2) {
        return NULL;
    }
    n = (n + align - 1) & ~(align - 1);
    if (n == 0) {
        n = align;
    }
    if (b == NULL || b->cap - b->used < n) {
        cap = n > a->block_size ? n : a->block_size;
        b = malloc(sizeof(*b) + cap);
        if (b == NULL) {
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    off = b->used;
    b->used += n;
    a->total += n;
    p = b->data + off;
    memset(p, 0, n);
    return p;
}

void *
cn_arena_calloc(struct cn_arena *a, size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size) {
        return NULL;
    }
    return cn_arena_alloc(a, count * size);
}

char *
cn_arena_strndup(struct cn_arena *a, const char *s, size_t n)
{
    char *p = cn_arena_alloc(a, n + 1);

    if (p == NULL) {
        return NULL;
    }
    if (n > 0) {
        memcpy(p, s, n);
    }
    p[n] = '\0';
    return p;
}

size_t
cn_arena_used(const struct cn_arena *a)
{
    return a->total;
}
