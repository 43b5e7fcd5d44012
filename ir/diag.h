/* SPDX-License-Identifier: MIT */
/*
 * Compile diagnostics: each error has a 1-based line and column (columns count code points) and
 * a message saying what was expected. Formatting prints them in source order as
 *   file:line:col: error: message
 *       offending line
 *       ^
 * Collection is capped (IR_DIAG_MAX) so a garbage file cannot produce megabytes of errors.
 * Not thread-safe: one compile at a time per diags object.
 */
#ifndef IR_DIAG_H
#define IR_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"

#define IR_DIAG_MAX 50

struct ir_diag {
    uint32_t line;
    uint32_t col;
    char *msg; /* owned */
};

struct ir_diags {
    const char *file; /* borrowed */
    const char *src;  /* borrowed */
    size_t src_len;
    struct ir_diag *items;
    size_t len, cap;
    bool truncated; /* more than IR_DIAG_MAX errors were reported */
    bool oom;       /* a message could not be stored */
};

/* Prepares d for a compile of src (both borrowed; they must outlive d's use). */
void ir_diags_init(struct ir_diags *d, const char *file, const char *src, size_t src_len);
/* Frees the messages. */
void ir_diags_fini(struct ir_diags *d);

/* Records an error at line:col. Never fails: on OOM it sets d->oom. */
void ir_diags_add(struct ir_diags *d, uint32_t line, uint32_t col, const char *fmt, ...)
    CN_PRINTF(4, 5);

/* True when an error has already been recorded at exactly line:col (avoids cascades). */
bool ir_diags_has_at(const struct ir_diags *d, uint32_t line, uint32_t col);

/* Sorts by position (stable) and appends every error in the format above.
 * Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_diags_format(struct ir_diags *d, struct cn_buf *out);

#endif
