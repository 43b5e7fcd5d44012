/* SPDX-License-Identifier: MIT */
/*
 * Expression evaluation with the semantics of IR.md (Python 3 where IR.md is silent), and the
 * error values workflow code raises and catches. Pure: no I/O, no global state; safe to call
 * from any number of threads on distinct environments.
 *
 * Errors raised by expressions (IR.md "Errors") are not C failures: evaluation returns
 * CN_RAISED and hands back an error value, a map {"type", "message", "bases", "details"} with
 * the error flag set (ir_map_is_error). Inline error types and their bases:
 *   KeyError, IndexError            -> ["LookupError", "Exception"]
 *   ZeroDivisionError, OverflowError -> ["ArithmeticError", "Exception"]
 *   TypeError, ValueError, NameError -> ["Exception"]
 * (ActionTimeout, raised by the runner, has ["TimeoutError", "Exception"].)
 */
#ifndef IR_EVAL_H
#define IR_EVAL_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/base/err.h"
#include "ir/expr.h"
#include "ir/value.h"

/* Variable lookup for evaluation: returns a borrowed pointer to the value bound to `name`, or
 * NULL when the name is unbound (evaluation then raises NameError). */
typedef const struct ir_val *(*ir_lookup_fn)(void *ctx, const char *name);

struct ir_eval_env {
    ir_lookup_fn lookup;
    void *ctx;
};

/* Evaluates expression `e` of pool `p`.
 * Returns CN_OK with *out a new value (release it), CN_RAISED with *out a new error value
 * (the expression raised, e.g. KeyError or ZeroDivisionError; release it), or CN_NOMEM.
 * Limits: results larger than IR_EVAL_MAX_ITEMS elements or IR_EVAL_MAX_STR bytes raise
 * MemoryError-like ValueError instead of exhausting memory (e.g. range(10**12), "x" * 10**12). */
#define IR_EVAL_MAX_ITEMS (10u * 1000 * 1000)
#define IR_EVAL_MAX_STR (64u << 20)
CN_MUST_CHECK cn_err ir_eval(const struct ir_xpool *p, uint32_t e, const struct ir_eval_env *env,
                             struct ir_val *out);

/* Python truthiness: None, False, 0, 0.0, "", [], {} are false; everything else is true. */
bool ir_truthy(struct ir_val v);

/* Builds an error value of `type` with `message` (printf-style) and the bases listed above for
 * the inline types (others get ["Exception"]); details is None. Returns CN_RAISED with *out
 * set, so a raising path is `return ir_raise(out, "KeyError", "'%s'", k);`, or CN_NOMEM. */
cn_err ir_raise(struct ir_val *out, const char *type, const char *fmt, ...) CN_PRINTF(3, 4);

/* Builds an error value from its parts (as a worker reports it). bases is a list of strings or
 * None; details any value. Takes ownership of bases and details always. Returns CN_OK or
 * CN_NOMEM (CN_TYPE if bases is not a list of strings). */
CN_MUST_CHECK cn_err ir_error_new(const char *type, const char *message, struct ir_val bases,
                                  struct ir_val details, struct ir_val *out);

/* The error's type (borrowed C string) or "" when err is not an error value. */
const char *ir_error_type(struct ir_val err);

/* True when error `err` matches `type`: its type is `type`, `type` is one of its bases, or
 * `type` is "Exception" (which matches every error). */
bool ir_error_matches(struct ir_val err, const char *type);

/* Unpacks v into n values like Python's `a, b = v` (lists, strings, dicts' keys).
 * On CN_OK items[0..n) are new values. Raises (CN_RAISED, *err set) ValueError for a length
 * mismatch ("not enough values to unpack (expected 2, got 1)", "too many values to unpack
 * (expected 2)") and TypeError for a non-iterable. CN_NOMEM on OOM. */
CN_MUST_CHECK cn_err ir_unpack(struct ir_val v, size_t n, struct ir_val *items,
                               struct ir_val *err);

#endif
