/* SPDX-License-Identifier: MIT */
/*
 * A growable byte buffer (used for text output, JSON encoding and msgpack packing). Always
 * NUL-terminated after a successful append so it can be printed as a C string. Not thread-safe:
 * one owner at a time. Also the two character helpers every reader and writer of text shares
 * (a hex digit's value, a code point as UTF-8), which are pure.
 */
#ifndef IR_BASE_BUF_H
#define IR_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"

struct cn_buf {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap;
};

#define CN_BUF_INIT \
    {               \
        NULL, 0, 0  \
    }

/* Makes room for at least `extra` more bytes. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err cn_buf_reserve(struct cn_buf *b, size_t extra);

/* Appends bytes (copies). Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err cn_buf_append(struct cn_buf *b, const void *p, size_t n);

/* Appends a NUL-terminated string. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err cn_buf_puts(struct cn_buf *b, const char *s);

/* Appends one byte. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err cn_buf_putc(struct cn_buf *b, char c);

/* Appends formatted text. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err cn_buf_printf(struct cn_buf *b, const char *fmt, ...) CN_PRINTF(2, 3);
/* The same from a va_list (ap is used up). */
CN_MUST_CHECK cn_err cn_buf_vprintf(struct cn_buf *b, const char *fmt, va_list ap) CN_PRINTF(2, 0);

/* Empties the buffer, keeping its storage. */
void cn_buf_clear(struct cn_buf *b);

/* Releases the storage; the buffer is empty and reusable afterwards. Accepts a zeroed buffer. */
void cn_buf_fini(struct cn_buf *b);

/* Hands the storage to the caller (free with free()); the buffer becomes empty. Never NULL on
 * CN_OK: an empty buffer yields "". Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err cn_buf_take(struct cn_buf *b, char **out, size_t *len_out);

/* The value of a hex digit of either case, or -1 if c is not one. */
int cn_hex_digit(char c);

/* Writes code point cp (at most 0x10FFFF; surrogates are the caller's to refuse) as UTF-8 into
 * out (room for 4 bytes) and returns how many bytes (1 to 4) it took. */
size_t cn_utf8_put(char *out, uint32_t cp);

#endif
