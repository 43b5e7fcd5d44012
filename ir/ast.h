/* SPDX-License-Identifier: MIT */
/*
 * The syntax tree of one source file: functions, their statements, and the policies attached to
 * action calls. Statements are a tree in an arena; expressions are indices into the program's
 * expression pool (ir/expr.h). Built by the parser, annotated by the checker (which resolves
 * builtins and marks helper calls), read by the compiler. Not thread-safe; immutable once
 * checked.
 */
#ifndef IR_AST_H
#define IR_AST_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/base/arena.h"
#include "ir/dag.h"
#include "ir/expr.h"

struct ir_pos {
    uint32_t line;
    uint32_t col;
};

/* A list of identifiers with their positions (targets, parameters, exception types). */
struct ir_names {
    const char **items;
    struct ir_pos *pos;
    uint32_t len;
    bool unpack; /* targets written as a list (`a, b = x`, `a, = x`): x is unpacked, even into
                    one name */
};

enum ir_policy_kind {
    IR_POLICY_RETRY = 0,
    IR_POLICY_TIMEOUT,
    IR_POLICY_DEADLINE,
    IR_POLICY_VERSION
};

struct ir_policy {
    enum ir_policy_kind kind;
    struct ir_pos pos;
    struct ir_names types;    /* RETRY: error types it applies to; empty = any except timeouts */
    int64_t retries;          /* RETRY */
    int64_t backoff_ms;       /* RETRY: the first delay */
    int64_t max_backoff_ms;   /* RETRY: the delay grows up to this (IR_MAX_BACKOFF_MS) */
    int64_t multiplier_milli; /* RETRY: growth per retry, in thousandths (2000: doubles) */
    int64_t max_elapsed_ms;   /* RETRY: no retry starts past this since the first attempt;
                                 0 = no bound */
    int64_t timeout_ms;       /* TIMEOUT, DEADLINE */
    const char *version;      /* VERSION (validated by the parser) */
};

struct ir_kwarg {
    const char *name;
    struct ir_pos pos;
    uint32_t expr;
};

/* `@mod.action(k=v, ...) [policy]...`, or a child workflow call `run wf(k=v, ...) [policy]...`
 * / `start wf(...)` (call RUN/START). */
struct ir_action_call {
    const char *name;  /* "mod.action", or the workflow's name ("billing.refund") */
    struct ir_pos pos; /* the '@', or the `run`/`start` keyword */
    uint8_t call;      /* enum ir_call_kind */
    struct ir_kwarg *kwargs;
    uint32_t nkwargs;
    struct ir_policy *policies; /* RETRY, TIMEOUT and DEADLINE only; a VERSION goes to `version` */
    uint32_t npolicies;
    const char *version; /* RUN/START: [version: "v"], or NULL */
};

enum ir_stmt_kind {
    IR_S_ASSIGN = 0, /* targets = expr (no targets: expression statement) */
    IR_S_ACTION,     /* [targets =] @action(...), run wf(...) or start wf(...) */
    IR_S_CALL,       /* [targets =] helper(...): set by the checker on an ASSIGN */
    IR_S_SPREAD,     /* targets = spread coll:item -> @action(...) (or run/start wf(...)) */
    IR_S_PARALLEL,   /* targets = parallel: calls */
    IR_S_IF,
    IR_S_FOR,
    IR_S_WHILE,
    IR_S_BREAK,
    IR_S_CONTINUE,
    IR_S_PASS,
    IR_S_TRY,
    IR_S_RETURN,
    IR_S_SLEEP,
    IR_S_PUBLISH, /* publish item = expr */
    IR_S_RAISE,   /* raise T(message[, details]) (item T, args), raise expr (expr), bare raise */
    IR_S_KIND_COUNT_
};

struct ir_stmt;

struct ir_block {
    struct ir_stmt **items;
    uint32_t len;
};

/* One arm of an `if`/`elif`; the `else` arm has cond == IR_NO_EXPR. */
struct ir_arm {
    uint32_t cond;
    struct ir_pos pos;
    struct ir_block body;
};

struct ir_handler {
    struct ir_pos pos;
    struct ir_names types; /* empty: bare `except:` */
    const char *bind;      /* `as e`, or NULL */
    struct ir_pos bind_pos;
    struct ir_block body;
};

/* A branch of a `parallel:` block: an action call (or `run wf(...)`) or a helper call (expr is
 * an IR_X_CALL). */
struct ir_pbranch {
    struct ir_pos pos;
    bool is_action; /* also for `run` (action.call says which) */
    struct ir_action_call action;
    uint32_t call; /* helper call expression when !is_action */
};

struct ir_stmt {
    enum ir_stmt_kind kind;
    struct ir_pos pos;
    struct ir_names targets; /* ASSIGN, ACTION, CALL, SPREAD, PARALLEL, FOR (loop variables) */
    uint32_t expr; /* ASSIGN value, CALL call, SPREAD collection, FOR iterable, WHILE condition,
                      RETURN value (or IR_NO_EXPR), SLEEP duration, PUBLISH value */
    struct ir_action_call action; /* ACTION, SPREAD */
    const char *item;             /* SPREAD item variable; PUBLISH the value's name */
    struct ir_pos item_pos;
    struct ir_pbranch *branches; /* PARALLEL */
    uint32_t nbranches;
    struct ir_arm *arms; /* IF (last arm may be the else) */
    uint32_t narms;
    struct ir_block body;        /* FOR, WHILE, TRY */
    struct ir_handler *handlers; /* TRY */
    uint32_t nhandlers;
    bool has_final;          /* TRY: a `finally:` block (final, at final_pos) */
    struct ir_block final;   /* TRY */
    struct ir_pos final_pos; /* TRY: the `finally` keyword */
    bool helper_call;        /* RETURN: expr is a helper call (set by the checker) */
    bool fail_fast; /* SPREAD, PARALLEL: `[fail_fast]`, the first failure cancels the rest */
    /* RAISE of an error type (set by the checker when expr calls one): the message and the
     * details (IR_NO_EXPR when not given); item is the type, expr IR_NO_EXPR */
    uint32_t raise_args[2];
};

/* `class Name(Base, ...): pass`: an error type the workflow raises, with its bases. */
struct ir_errclass {
    const char *name;
    struct ir_pos pos;
    struct ir_names bases;
};

/* An input's declared type (`order: dict`, `qty: int`, `note: str | None`,
 * `items: list[dict[str, int]]`): what a value must be to be accepted for it. */
enum ir_tykind {
    IR_TY_ANY,   /* `any`, or no type written */
    IR_TY_NONE,  /* `None` */
    IR_TY_STR,   /* `str` */
    IR_TY_INT,   /* `int`: an integer (JSON without a fraction or an exponent) */
    IR_TY_FLOAT, /* `float`: any number, as Python accepts an int for a float */
    IR_TY_BOOL,  /* `bool` */
    IR_TY_LIST,  /* `list`, `list[T]` (elem) */
    IR_TY_DICT,  /* `dict`, `dict[str, T]` (elem: the values') */
    IR_TY_UNION  /* `A | B | ...` (alts) */
};

struct ir_ty {
    enum ir_tykind kind;
    struct ir_pos pos;
    const struct ir_ty *elem;        /* LIST, DICT: NULL when the items are not typed */
    const struct ir_ty *const *alts; /* UNION */
    uint32_t nalts;
};

/* What a function says of one input beyond its name: its type and its default. */
struct ir_param {
    const struct ir_ty *type; /* NULL: none written (any) */
    uint32_t dflt;            /* a constant expression, or IR_NO_EXPR: required */
    struct ir_pos dflt_pos;
};

struct ir_func {
    const char *name;
    struct ir_pos pos;
    struct ir_names inputs;
    struct ir_param *params; /* one per input; NULL when no input has a type or a default */
    struct ir_names outputs;
    struct ir_block body;
    int64_t timeout_ms; /* `[timeout: D]` after the signature (entry function only); 0 = none */
    struct ir_pos timeout_pos;
};

/* A parsed source file. Owns its arena and expression pool. */
struct ir_program {
    struct cn_arena *arena;
    struct ir_xpool exprs;
    struct ir_func *funcs;
    uint32_t nfuncs;
    struct ir_errclass *classes; /* in source order */
    uint32_t nclasses;
};

/* Frees the program and everything it owns. NULL is a no-op. */
void ir_program_free(struct ir_program *p);

/* Returns the function called name, or NULL. */
const struct ir_func *ir_program_func(const struct ir_program *p, const char *name);

/* The entry function: `main`, or the only function. NULL if neither exists. */
const struct ir_func *ir_program_entry(const struct ir_program *p);

const char *ir_stmt_kind_name(enum ir_stmt_kind k);

#endif
