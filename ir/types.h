/* SPDX-License-Identifier: MIT */
/*
 * Typed inputs (docs/language.md "Typed inputs"): whether a value is what an input's declared
 * type (ast.h, struct ir_ty) says, with the path and the reason when it is not, and the JSON
 * Schema (2020-12) of a function's inputs, which `cairnctl register` stores with the version
 * and cairn.enqueue checks inputs against. The two agree: an integer is a JSON number written
 * without a fraction or an exponent (what the runner reads as an int), a float any number.
 * Pure: no I/O, no global state.
 */
#ifndef IR_TYPES_H
#define IR_TYPES_H

#include <stdbool.h>

#include "ir/ast.h"
#include "ir/base/buf.h"
#include "ir/value.h"

/* Appends t as written (`str | None`, `list[dict[str, int]]`; NULL: `any`). */
CN_MUST_CHECK cn_err ir_ty_text(const struct ir_ty *t, struct cn_buf *out);

/* Whether v is of type t (NULL: anything). When not, appends to why where and what:
 * "PATH.items[2]: expected int, got str", PATH the caller's (e.g. "input.order"). */
CN_MUST_CHECK cn_err ir_ty_check(const struct ir_ty *t, struct ir_val v, const char *path, bool *ok,
                                 struct cn_buf *why);

/* Appends the JSON Schema of f's inputs (exprs: the pool of its defaults), titled title:
 * {"$schema": ..., "title": ..., "type": "object", "properties": {NAME: TYPE + "default"},
 * "required": [the inputs without a default], "additionalProperties": false}. CN_OK, CN_NOMEM,
 * or CN_INVAL when a default is not a constant (the checker refuses those first). */
CN_MUST_CHECK cn_err ir_inputs_schema(const struct ir_func *f, const struct ir_xpool *exprs,
                                      const char *title, struct cn_buf *out);

#endif
