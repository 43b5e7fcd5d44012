/* SPDX-License-Identifier: MIT */
/*
 * What value.c shares with its codecs (value_json.c): the one writer of values as text. Python's
 * repr() and JSON print lists and maps alike ("[a, b]", "{k: v}") and differ only in what a
 * style names here. Pure; thread-safe as the values are.
 */
#ifndef IR_VALUE_INT_H
#define IR_VALUE_INT_H

#include <stdbool.h>

#include "ir/value.h"

struct ir_text_style {
    const char *none, *yes, *no; /* None/True/False or null/true/false */
    int max_depth;               /* deeper nesting is CN_DEPTH */
    bool finite_only;            /* NaN and the infinities are CN_RANGE (JSON cannot carry them) */
    const char *what;            /* names the format in err's texts */
    cn_err (*put_str)(struct ir_val s, struct cn_buf *out); /* a string, quoted and escaped */
};

/* Appends v, at nesting depth `depth` (1 for a whole value), in style st. Returns CN_OK,
 * CN_NOMEM, CN_DEPTH, CN_RANGE (finite_only) or CN_INVAL (a bad type); err (may be NULL) gets
 * the text of the last three. */
CN_MUST_CHECK cn_err ir_val_write_text(struct ir_val v, const struct ir_text_style *st, int depth,
                                       struct cn_buf *out, struct cn_errmsg *err);

#endif
