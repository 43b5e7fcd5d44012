/* SPDX-License-Identifier: MIT */
/* The allocation wrappers that abort (see xalloc.h for why). */
#include "ir/base/xalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void
cn_oom(const char *what)
{
    char line[160];
    int n = snprintf(line, sizeof(line), "cairn: out of memory (%s): aborting\n", what);

    /* write(2), not stdio: the message must not need memory of its own. */
    if (n > 0) {
        ssize_t w =
            write(STDERR_FILENO, line, (size_t) n < sizeof(line) ? (size_t) n : sizeof(line) - 1);
        (void) w;
    }
    abort();
}

void *
cn_xmalloc(size_t n)
{
    void *p = malloc(n != 0 ? n : 1);

    if (p == NULL) {
        cn_oom("malloc");
    }
    return p;
}

void *
cn_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n != 0 ? n : 1, size != 0 ? size : 1);

    if (p == NULL) {
        cn_oom("calloc");
    }
    return p;
}

void *
cn_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n != 0 ? n : 1);

    if (q == NULL) {
        cn_oom("realloc");
    }
    return q;
}

void *
cn_xreallocarray(void *p, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size) {
        cn_oom("array size overflow");
    }
    return cn_xrealloc(p, n * size);
}

char *
cn_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = cn_xmalloc(n);

    memcpy(d, s, n);
    return d;
}

char *
cn_xstrndup(const char *s, size_t n)
{
    char *d = cn_xmalloc(n + 1);

    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}
