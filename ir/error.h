/* SPDX-License-Identifier: MIT */
/*
 * Error values: the errors workflow code raises and catches (docs/language.md "Errors"; how
 * they travel through a workflow: docs/semantics.md "Errors"). An error is a map {"type",
 * "message", "bases", "details"} with the error flag set (ir_map_is_error). Raising one is
 * not a C failure: functions that raise return CN_RAISED and hand the error value back. Pure:
 * no I/O, no global state; safe from any thread.
 *
 * The bases of the errors inline code raises (ir_raise fills them in):
 *   KeyError, IndexError             -> ["LookupError", "Exception"]
 *   ZeroDivisionError, OverflowError -> ["ArithmeticError", "Exception"]
 *   RecursionError                   -> ["RuntimeError", "Exception"]
 *   TypeError, ValueError, NameError -> ["Exception"], as any other type
 * Errors raised outside expressions (by the runner, by workers) carry their own bases and are
 * built with ir_error_new; ir/ knows none of their names.
 */
#ifndef IR_ERROR_H
#define IR_ERROR_H

#include <stdbool.h>

#include "ir/base/err.h"
#include "ir/value.h"

/* Builds an error value of `type` with `message` (printf-style) and the bases listed above;
 * details is None. Returns CN_RAISED with *out set, so a raising path is
 * `return ir_raise(out, "KeyError", "'%s'", k);`, or CN_NOMEM (*out untouched).
 * Bytes of the type or message that are not valid UTF-8 become U+FFFD. */
cn_err ir_raise(struct ir_val *out, const char *type, const char *fmt, ...) CN_PRINTF(3, 4);

/* Builds an error value from its parts (as a worker reports it, or as the runner raises its
 * own types). bases is a list of strings or None (stored as ["Exception"]); details any value;
 * message NULL means "". Takes ownership of bases and details always; borrows the strings.
 * Returns CN_OK or CN_NOMEM (CN_TYPE if bases is not a list of strings, CN_UTF8 if type or
 * message is not valid UTF-8). */
CN_MUST_CHECK cn_err ir_error_new(const char *type, const char *message, struct ir_val bases,
                                  struct ir_val details, struct ir_val *out);

/* The bases of Python's built-in error type `type` that a workflow may raise, as Python's MRO
 * lists them (ending with "Exception"; empty for Exception itself), NULL-terminated; NULL when
 * `type` is not one of them. Static. */
const char *const *ir_error_builtin_bases(const char *type);

/* True when v is an error value (a map with the error flag; what isexception() tests). */
bool ir_is_error(struct ir_val v);

/* The error's type (borrowed C string) or "" when err is not an error value. */
const char *ir_error_type(struct ir_val err);

/* An error its worker marked as not worth retrying carries `"retryable": False` (after the
 * four usual keys): the runner never retries it, whatever the policy (docs/protocol.md). */
#define IR_ERROR_RETRYABLE_KEY "retryable"

/* Replaces the error *err (an unshared error value, as ir_error_new returns) by the same error
 * marked not retryable. Returns CN_OK, CN_NOMEM (*err unchanged), or CN_TYPE (not an error
 * value: untouched). */
CN_MUST_CHECK cn_err ir_error_set_final(struct ir_val *err);

/* False when err is marked not retryable (ir_error_set_final), else true. */
bool ir_error_retryable(struct ir_val err);

/* True when error `err` matches `type`: its type is `type`, `type` is one of its bases, or
 * `type` is "Exception" (which matches every error). */
bool ir_error_matches(struct ir_val err, const char *type);

#endif
