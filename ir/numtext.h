/* SPDX-License-Identifier: MIT */
/*
 * Python's number text and rounding: repr() of a float, int() and float() of a string,
 * int() of a float, and round(). Each follows CPython's algorithm, not "close enough" C, so
 * results and error messages are Python 3.11's (docs/values.md, docs/language.md "Builtins").
 * Pure: no I/O, no global state; safe from any thread. Uses snprintf/strtod, so LC_NUMERIC
 * must be "C" (the engine never calls setlocale).
 *
 * The functions that build values return CN_OK with *out a new value, CN_RAISED with *out a
 * new error value (error.h), or CN_NOMEM with *out untouched.
 */
#ifndef IR_NUMTEXT_H
#define IR_NUMTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "ir/value.h"

/* Python's repr() of a float: shortest text that round-trips ("0.1", "1e+16", "3.0", "inf",
 * "nan"). buf must hold at least IR_FLOAT_REPR_MAX bytes. Returns the length written. */
#define IR_FLOAT_REPR_MAX 32
size_t ir_float_repr(double f, char *buf);

/* int(s, base) for a string s and base 0 or 2..36 (the caller checks both), as CPython's
 * PyLong_FromString: surrounding whitespace, a sign, a base prefix, single underscores between
 * digits, and Unicode decimal digits and spaces. Raises ValueError "invalid literal for int()
 * with base 10: 'x'" (the repr cut to 200 code points), ValueError for more than 4300 digits
 * in a base that is not a power of two (Python's default limit), and OverflowError when the
 * value does not fit in int64. */
CN_MUST_CHECK cn_err ir_int_from_str(struct ir_val s, int64_t base, struct ir_val *out);

/* float(s) for a string s, as CPython's PyFloat_FromString: surrounding whitespace, single
 * underscores between digits, "inf", "infinity" and "nan" in any case with a sign, Unicode
 * decimal digits and spaces; correctly rounded, +-inf beyond the range. Raises ValueError
 * "could not convert string to float: 'x'". */
CN_MUST_CHECK cn_err ir_float_from_str(struct ir_val s, struct ir_val *out);

/* int(f) of a float: truncates toward zero. Raises ValueError for NaN, OverflowError for an
 * infinity or a value outside int64. */
CN_MUST_CHECK cn_err ir_int_from_double(double f, struct ir_val *out);

/* round(x) of a float: the nearest int, halves to even; raises as ir_int_from_double. */
CN_MUST_CHECK cn_err ir_float_round_to_int(double x, struct ir_val *out);

/* round(x, nd) of a float, as CPython's double_round: rounds the exact decimal expansion of x
 * half to even at nd decimal places (nd may be negative), then back to the nearest float.
 * Raises OverflowError "rounded value too large to represent". */
CN_MUST_CHECK cn_err ir_float_round(double x, int64_t nd, struct ir_val *out);

/* round(v, nd) of an int: v itself for nd >= 0, else the nearest multiple of 10^-nd, halves
 * to even. Raises OverflowError when that multiple does not fit in int64. */
CN_MUST_CHECK cn_err ir_int_round(int64_t v, int64_t nd, struct ir_val *out);

#endif
