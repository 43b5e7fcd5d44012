/* SPDX-License-Identifier: MIT */
/* Growable byte buffer; doubling growth so appends are amortised O(1). */
#include "ir/base/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cn_err
cn_buf_reserve(struct cn_buf *b, size_t extra)
{
    size_t need, cap;
    char *p;

    /* +1 keeps room for the terminating NUL. */
    if (extra > SIZE_MAX - b->len - 1) {
        return CN_NOMEM;
    }
    need = b->len + extra + 1;
    if (need <= b->cap) {
        return CN_OK;
    }
    cap = b->cap ? b->cap : 64;
    while (cap < need) {
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    }
    p = realloc(b->data, cap);
    if (p == NULL) {
        return CN_NOMEM;
    }
    b->data = p;
    b->cap = cap;
    return CN_OK;
}

cn_err
cn_buf_append(struct cn_buf *b, const void *p, size_t n)
{
    cn_err rv;

    if ((rv = cn_buf_reserve(b, n)) != CN_OK) {
        return rv;
    }
    if (n > 0) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return CN_OK;
}

cn_err
cn_buf_puts(struct cn_buf *b, const char *s)
{
    return cn_buf_append(b, s, strlen(s));
}

cn_err
cn_buf_putc(struct cn_buf *b, char c)
{
    return cn_buf_append(b, &c, 1);
}

cn_err
cn_buf_vprintf(struct cn_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    int n;
    cn_err rv;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        return CN_INVAL;
    }
    if ((rv = cn_buf_reserve(b, (size_t) n)) != CN_OK) {
        return rv;
    }
    (void) vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
    b->len += (size_t) n;
    return CN_OK;
}

cn_err
cn_buf_printf(struct cn_buf *b, const char *fmt, ...)
{
    va_list ap;
    cn_err rv;

    va_start(ap, fmt);
    rv = cn_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rv;
}

void
cn_buf_clear(struct cn_buf *b)
{
    b->len = 0;
    if (b->data != NULL) {
        b->data[0] = '\0';
    }
}

void
cn_buf_fini(struct cn_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

cn_err
cn_buf_take(struct cn_buf *b, char **out, size_t *len_out)
{
    cn_err rv;

    if ((rv = cn_buf_reserve(b, 0)) != CN_OK) {
        return rv;
    }
    b->data[b->len] = '\0';
    *out = b->data;
    if (len_out != NULL) {
        *len_out = b->len;
    }
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return CN_OK;
}

int
cn_hex_digit(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

size_t
cn_utf8_put(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char) cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char) (0xC0 | (cp >> 6));
        out[1] = (char) (0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char) (0xE0 | (cp >> 12));
        out[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char) (0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char) (0xF0 | (cp >> 18));
    out[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char) (0x80 | (cp & 0x3F));
    return 4;
}
