/* SPDX-License-Identifier: MIT */
/* Compile diagnostics: collection and caret-style formatting. */
#include "ir/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"

void
ir_diags_init(struct ir_diags *d, const char *file, const char *src, size_t src_len)
{
    memset(d, 0, sizeof(*d));
    d->file = file;
    d->src = src;
    d->src_len = src_len;
}

void
ir_diags_fini(struct ir_diags *d)
{
    size_t i;

    for (i = 0; i < d->len; i++) {
        free(d->items[i].msg);
    }
    free(d->items);
    d->items = NULL;
    d->len = d->cap = 0;
}

void
ir_diags_add(struct ir_diags *d, uint32_t line, uint32_t col, const char *fmt, ...)
{
    va_list ap;
    char tmp[512];
    struct ir_diag e;

    if (d->len >= IR_DIAG_MAX) {
        d->truncated = true;
        return;
    }
    va_start(ap, fmt);
    (void) vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    e.line = line;
    e.col = col;
    e.msg = strdup(tmp);
    if (e.msg == NULL) {
        d->oom = true;
        return;
    }
    if (CN_VEC_PUSH(d, e) != CN_OK) {
        free(e.msg);
        d->oom = true;
    }
}

bool
ir_diags_has_at(const struct ir_diags *d, uint32_t line, uint32_t col)
{
    size_t i;

    for (i = 0; i < d->len; i++) {
        if (d->items[i].line == line && d->items[i].col == col) {
            return true;
        }
    }
    return false;
}

/* Finds the bytes of 1-based line `line`; returns false past the end. */
static bool
diag_line(const struct ir_diags *d, uint32_t line, const char **start, size_t *len)
{
    const char *p = d->src, *end = d->src + d->src_len, *nl;
    uint32_t n = 1;

    if (p == NULL) {
        return false;
    }
    while (n < line) {
        nl = memchr(p, '\n', (size_t) (end - p));
        if (nl == NULL) {
            return false;
        }
        p = nl + 1;
        n++;
    }
    nl = memchr(p, '\n', (size_t) (end - p));
    *start = p;
    *len = nl ? (size_t) (nl - p) : (size_t) (end - p);
    if (*len > 0 && p[*len - 1] == '\r') {
        (*len)--;
    }
    return true;
}

static int
diag_cmp(const void *a, const void *b)
{
    const struct ir_diag *x = a, *y = b;

    if (x->line != y->line) {
        return x->line < y->line ? -1 : 1;
    }
    if (x->col != y->col) {
        return x->col < y->col ? -1 : 1;
    }
    /* Stable on equal positions: messages were allocated in report order, but pointer order is
     * not report order, so fall back to the message text for determinism. */
    return strcmp(x->msg, y->msg);
}

cn_err
ir_diags_format(struct ir_diags *d, struct cn_buf *out)
{
    size_t i, llen, k;
    const char *l;
    uint32_t c;
    cn_err rv = CN_OK;

    if (d->len > 1) {
        qsort(d->items, d->len, sizeof(d->items[0]), diag_cmp);
    }
    for (i = 0; i < d->len && rv == CN_OK; i++) {
        const struct ir_diag *e = &d->items[i];

        rv = cn_buf_printf(out, "%s:%u:%u: error: %s\n", d->file, e->line, e->col, e->msg);
        if (rv != CN_OK || !diag_line(d, e->line, &l, &llen)) {
            continue;
        }
        rv = cn_buf_puts(out, "    ");
        if (rv == CN_OK) {
            rv = cn_buf_append(out, l, llen);
        }
        if (rv == CN_OK) {
            rv = cn_buf_puts(out, "\n    ");
        }
        /* The caret sits under code point `col`; tabs are echoed so the caret lines up. */
        for (k = 0, c = 1; rv == CN_OK && k < llen && c < e->col; k++) {
            unsigned char ch = (unsigned char) l[k];
            if ((ch & 0xC0) == 0x80) {
                continue;
            }
            rv = cn_buf_putc(out, ch == '\t' ? '\t' : ' ');
            c++;
        }
        while (rv == CN_OK && c < e->col) { /* column past end of line (e.g. at EOF) */
            rv = cn_buf_putc(out, ' ');
            c++;
        }
        if (rv == CN_OK) {
            rv = cn_buf_puts(out, "^\n");
        }
    }
    if (rv == CN_OK && d->truncated) {
        rv = cn_buf_printf(out, "%s: error: too many errors; stopped after %d\n", d->file,
                           IR_DIAG_MAX);
    }
    if (rv == CN_OK && d->oom) {
        rv = cn_buf_printf(out, "%s: error: out of memory while reporting errors\n", d->file);
    }
    return rv;
}
