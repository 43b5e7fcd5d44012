/* SPDX-License-Identifier: MIT */
/*
 * Expression evaluation with the semantics docs/language.md ("Expressions", "Builtins",
 * "Differences from Python") gives users, and Python 3 where it is silent. Pure: no I/O, no
 * global state; safe to call from any number of threads on distinct environments.
 *
 * Errors raised by expressions are not C failures: evaluation returns CN_RAISED and hands
 * back an error value (error.h, which lists the bases of the types expressions raise).
 *
 * SEMANTICS (Python 3.11 otherwise; messages are Python's word for word unless listed here)
 * - ints are int64: a result outside it raises OverflowError "integer overflow: result does not
 *   fit in 64 bits" (arithmetic, unary -, abs, sum, round, int(float), int(str), enumerate's
 *   counter). Intermediate results count: sum([MAX, 1, -1]) raises, Python gives MAX.
 * - Size limits (IR_EVAL_MAX_ITEMS, IR_EVAL_MAX_STR) raise ValueError "result too large: more
 *   than N items" / "result too large: more than N bytes" before anything is allocated; they
 *   apply to every list and string an expression builds (+, *, range, list, str() of a
 *   container, ...). Python would raise MemoryError, which Cairn has no use for.
 * - Nesting: ordering nested lists and str() of containers deeper than IR_REPR_MAX_DEPTH
 *   raise RecursionError, as Python does (its limit differs).
 * - Differences from Python, all deliberate:
 *   `|` is dict merge only (TypeError "unsupported operand type(s) for |" on ints and bools);
 *   `%` on a string is not formatting (TypeError "unsupported operand type(s) for %");
 *   dict displays need str keys (TypeError "dict keys must be strings, not int", the
 *   compiler's wording; it rejects constant keys before run time);
 *   x.f on a dict is x["f"] (KeyError "'f'"), on anything else TypeError "'int' object has no
 *   attribute 'f'" (Cairn has no AttributeError);
 *   keys(), values(), items() of a non-dict raise TypeError "keys() argument must be a dict,
 *   not 'int'";
 *   == and `in` never use Python's identity shortcut, so a NaN inside a list never equals
 *   itself;
 *   sorted() of 64 or more items may order NaNs (or word a TypeError) differently from
 *   CPython, whose merge strategy it does not replicate (shorter lists match CPython exactly);
 *   d | e of an error value e gives a plain dict (as dict.__or__ of a dict subclass does).
 */
#ifndef IR_EVAL_H
#define IR_EVAL_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/base/err.h"
#include "ir/error.h"
#include "ir/expr.h"
#include "ir/value.h"

/* Variable lookup for evaluation: returns a borrowed pointer to the value bound to `name`, or
 * NULL when the name is unbound (evaluation then raises NameError). */
typedef const struct ir_val *(*ir_lookup_fn)(void *ctx, const char *name);

/* The builtins whose value is the running instance's, not a function of their arguments
 * (now(), uuid(), instance_id(), workflow_name()): the host computes them. Returns what
 * ir_eval does. */
typedef cn_err (*ir_host_fn)(void *ctx, enum ir_builtin b, struct ir_val *out);

struct ir_eval_env {
    ir_lookup_fn lookup;
    void *ctx;
    ir_host_fn host; /* NULL: those builtins raise RuntimeError (no instance runs them) */
};

/* Evaluates expression `e` of pool `p`.
 * Returns CN_OK with *out a new value (release it), CN_RAISED with *out a new error value
 * (the expression raised, e.g. KeyError or ZeroDivisionError; release it), or CN_NOMEM.
 * Limits: results larger than IR_EVAL_MAX_ITEMS elements or IR_EVAL_MAX_STR bytes raise
 * MemoryError-like ValueError instead of exhausting memory (e.g. range(10**12), "x" * 10**12).
 * Borrows p and env; the values env->lookup returns are retained, never stolen. Operands are
 * evaluated left to right, all of them before the operation (so `{[1]: 1 // 0}` raises
 * ZeroDivisionError); and/or, `x if c else y` and chained comparisons skip as Python does.
 * An unbound name raises NameError "name 'x' is not defined".
 * CN_INVAL: the pool is malformed (an index out of range, an unresolved or keyword call, a
 * builtin with the wrong number of arguments); the compiler never produces one, a corrupt
 * stored DAG might. *out is untouched on CN_NOMEM and CN_INVAL. */
#define IR_EVAL_MAX_ITEMS (10u * 1000 * 1000)
#define IR_EVAL_MAX_STR   (64u << 20)
CN_MUST_CHECK cn_err ir_eval(const struct ir_xpool *p, uint32_t e, const struct ir_eval_env *env,
                             struct ir_val *out);

/* ir_eval of e as a constant: no name is bound (a name raises NameError) and no instance runs
 * it (now(), uuid() ... raise RuntimeError). What an input's default and a child call's
 * argument checked at register are. */
CN_MUST_CHECK cn_err ir_eval_const(const struct ir_xpool *p, uint32_t e, struct ir_val *out);

/* Python truthiness: None, False, 0, 0.0, "", [], {} are false; everything else is true. */
bool ir_truthy(struct ir_val v);

/* Unpacks v into n values like Python's `a, b = v` (lists, strings, dicts' keys).
 * On CN_OK items[0..n) are new values. Raises (CN_RAISED, *err set) ValueError for a length
 * mismatch ("not enough values to unpack (expected 2, got 1)", "too many values to unpack
 * (expected 2)") and TypeError for a non-iterable. CN_NOMEM on OOM. */
CN_MUST_CHECK cn_err ir_unpack(struct ir_val v, size_t n, struct ir_val *items, struct ir_val *err);

/* What `for x in v` iterates over, as a list: v itself when it is a list (a new reference), a
 * string's characters, a dict's keys. Returns CN_OK with *out a new list, CN_RAISED with *out a
 * new error (TypeError "'int' object is not iterable", or the size limit for a string of more
 * than IR_EVAL_MAX_ITEMS characters), or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_iter_items(struct ir_val v, struct ir_val *out);

#endif
