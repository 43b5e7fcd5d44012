/* SPDX-License-Identifier: MIT */
/*
 * Internals shared by the parser's files, and only by them: parser.c (the file and its `fn`
 * declarations), parser_stmt.c (statements and blocks), parser_expr.c (expressions),
 * parser_call.c (action and child workflow calls), parser_policy.c (policy brackets and error
 * types) and parser_util.c (errors, recovery, name lists). Nothing outside them includes it.
 *
 * ir_parse_X parses the construct X at the current token; ir_ps_* are the helpers they share.
 * Every function reports a syntax error through ir_ps_error_at, which puts the parser in panic
 * mode (ps->panic) until the statement is skipped; out of memory is sticky in ps->rv. Pure; no
 * global state, no threads or locks.
 */
#ifndef IR_PARSER_INT_H
#define IR_PARSER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ir/ast.h"
#include "ir/base/buf.h"
#include "ir/base/strmap.h"
#include "ir/diag.h"
#include "ir/lexer.h"
#include "ir/parser.h"

struct parser {
    struct ir_tokens toks;
    size_t i;
    struct ir_program *prog;
    struct ir_diags *d;
    bool panic;
    bool synced;     /* a failed statement already skipped its own block */
    int depth;       /* expression nesting */
    int block_depth; /* block nesting */
    cn_err rv;       /* sticky CN_NOMEM */
};

struct u32_vec {
    uint32_t *items;
    size_t len, cap;
};

struct name_vec {
    const char **items;
    size_t len, cap;
};

struct pos_vec {
    struct ir_pos *items;
    size_t len, cap;
};

/* The names of an ir_names being collected (assignment targets, loop variables, signature
 * lists, error types), with their positions; dup is for the lists that refuse a name twice
 * (ir_ps_seen). Start it as {{0}, {0}, CN_STRMAP_INIT}; end it with ir_ps_names_finish or, on
 * failure, ir_ps_names_drop. */
struct name_list {
    struct name_vec names;
    struct pos_vec pos;
    struct cn_strmap dup;
};

/* ---- token access: small and on every path, so inline ---- */

static inline const struct ir_token *
peek(const struct parser *ps)
{
    return &ps->toks.items[ps->i];
}

static inline const struct ir_token *
peek_at(const struct parser *ps, size_t ahead)
{
    size_t j = ps->i + ahead;
    return &ps->toks.items[j < ps->toks.len ? j : ps->toks.len - 1];
}

static inline bool
at(const struct parser *ps, enum ir_tok k)
{
    return peek(ps)->kind == k;
}

static inline const struct ir_token *
advance(struct parser *ps)
{
    const struct ir_token *t = peek(ps);

    if (t->kind != IR_TK_EOF) {
        ps->i++;
    }
    return t;
}

static inline bool
accept(struct parser *ps, enum ir_tok k)
{
    if (at(ps, k)) {
        advance(ps);
        return true;
    }
    return false;
}

static inline bool
is_name_tok(const struct ir_token *t, const char *word)
{
    return t->kind == IR_TK_NAME && strcmp(t->str, word) == 0;
}

static inline struct ir_pos
tok_pos(const struct ir_token *t)
{
    struct ir_pos p = {t->line, t->col};
    return p;
}

/* True at the word `run`, `start`, `wait` or `signal` (a NAME token: they are not reserved). */
static inline bool
is_child_word(const struct ir_token *t)
{
    return is_name_tok(t, "run") || is_name_tok(t, "start") || is_name_tok(t, "wait") ||
           is_name_tok(t, "signal");
}

/* `run` and `start` begin a child workflow call, `wait` a wait, and `signal` a send, only when
 * a name follows (`run billing.refund(`, `wait approve`, `signal approve(`), or for `wait` the
 * keyword `for` (`wait for child_id`, a wait for a started child):
 * no expression has two names in a row, so `run = 3`, `f(run)`, `start + 1` and a helper called
 * `run(...)` keep them ordinary names. A string after them counts too, so that a quoted workflow
 * name gets an explanation instead of "expected end of line". Returns the call kind there,
 * IR_CALL_ACTION anywhere else. */
static inline enum ir_call_kind
child_call_at(const struct parser *ps)
{
    enum ir_tok next = peek_at(ps, 1)->kind;

    if (is_name_tok(peek(ps), "wait") && next == IR_TK_FOR) {
        return IR_CALL_JOIN;
    }
    if (!is_child_word(peek(ps)) || (next != IR_TK_NAME && next != IR_TK_STRING)) {
        return IR_CALL_ACTION;
    }
    if (is_name_tok(peek(ps), "wait")) {
        /* `wait event NAME` waits for an event; `wait event` alone for a signal called event. */
        return is_name_tok(peek_at(ps, 1), "event") && peek_at(ps, 2)->kind == IR_TK_NAME
                   ? IR_CALL_EVENT
                   : IR_CALL_WAIT;
    }
    if (is_name_tok(peek(ps), "signal")) {
        return IR_CALL_SIGNAL;
    }
    return is_name_tok(peek(ps), "run") ? IR_CALL_RUN : IR_CALL_START;
}

static inline void
nomem(struct parser *ps)
{
    ps->rv = CN_NOMEM;
    ps->panic = true;
}

/* The result of an allocation (CN_VEC_PUSH): true on CN_OK, else the parser is out of memory. */
static inline bool
ps_alloc_ok(struct parser *ps, cn_err rv)
{
    if (rv != CN_OK) {
        nomem(ps);
        return false;
    }
    return true;
}

/* ---- errors, recovery and builders (parser_util.c) ---- */

/* Records the statement's first error, at t; later ones are dropped until it is skipped. */
void ir_ps_error_at(struct parser *ps, const struct ir_token *t, const char *fmt, ...)
    CN_PRINTF(3, 4);

/* ir_ps_error_at at a position that no token at hand carries (a target, a policy bracket). */
void ir_ps_error_pos(struct parser *ps, struct ir_pos pos, const char *fmt, ...) CN_PRINTF(3, 4);

/* Consumes a token of kind k or reports "expected <k> <context>". */
bool ir_ps_expect(struct parser *ps, enum ir_tok k, const char *context);

/* Consumes a NAME and returns its token; anything else is reported at it with fmt (what was
 * expected, printf-style) and gives NULL. */
const struct ir_token *ir_ps_expect_name(struct parser *ps, const char *fmt, ...) CN_PRINTF(2, 3);

/* True when `name` was already added to `m` (a per-list duplicate check: hashing keeps a
 * hostile 100 000-argument call linear). Adds it otherwise. */
bool ir_ps_seen(struct parser *ps, struct cn_strmap *m, const char *name);

/* Appends the `size`-byte *item to the malloc'd array *items (*n used, *cap allocated), for the
 * clauses collected before ir_ps_arena_copy; false (out of memory, reported) otherwise. */
bool ir_ps_append(struct parser *ps, void **items, size_t *cap, size_t *n, const void *item,
                  size_t size);

/* n items of `size` bytes copied into the program's arena; NULL for none (or out of memory). */
void *ir_ps_arena_copy(struct parser *ps, const void *items, size_t n, size_t size);

/* Skips the rest of a broken statement: to the end of its line and over any block it opened. */
void ir_ps_sync_stmt(struct parser *ps);

/* Appends name at pos to nl; false (out of memory) otherwise. */
bool ir_ps_names_push(struct parser *ps, struct name_list *nl, const char *name, struct ir_pos pos);

/* ir_ps_names_push for a list whose names must differ: a name already in nl is reported at pos
 * with fmt (printf-style) instead. False on that or when out of memory. */
bool ir_ps_names_add(struct parser *ps, struct name_list *nl, const char *name, struct ir_pos pos,
                     const char *fmt, ...) CN_PRINTF(5, 6);

/* The collected names, copied into the arena (unpack false); nl is emptied. */
struct ir_names ir_ps_names_finish(struct parser *ps, struct name_list *nl);

/* Frees what nl collected, for a list that failed. */
void ir_ps_names_drop(struct name_list *nl);

/* ---- expressions (parser_expr.c) ---- */

/* An expression: `or ['if' or 'else' expr]`. IR_NO_EXPR after an error. */
uint32_t ir_parse_expr(struct parser *ps);

/* An `or` chain: an expression without a conditional (a spread's collection). */
uint32_t ir_parse_or(struct parser *ps);

/* expr (',' expr)* [','] into items: a bare tuple becomes a list, a single expression itself. */
uint32_t ir_parse_exprs(struct parser *ps, struct u32_vec *items);

/* A new pool expression at t with the children kids, or IR_NO_EXPR (too deep, or out of
 * memory). */
uint32_t ir_ps_mk(struct parser *ps, enum ir_xkind kind, unsigned op, const struct ir_token *t,
                  const uint32_t *kids, uint32_t nkids);

/* The operator of an augmented assignment token (`+=` -> IR_OP_ADD); *ok false for any other
 * token. */
enum ir_binop ir_ps_aug_op(enum ir_tok k, bool *ok);

/* ---- calls (parser_call.c) ---- */

/* An action call `'@' NAME ('.' NAME)+ '(' kwargs ')' policies` (the '@' is current), or a
 * child workflow call `run|start NAME ('.' NAME)* '(' kwargs ')' policies` (the word is
 * current). fail_fast: where a spread's `[fail_fast]` goes (among its call's policies), NULL
 * elsewhere. */
bool ir_parse_action(struct parser *ps, struct ir_action_call *ac, bool *fail_fast);

/* ---- policies and error types (parser_policy.c) ---- */

/* True at `word:` (a bracket's option). */
bool ir_ps_at_option(const struct parser *ps, const char *word);

/* A duration (30s, 500ms, 2m, 1h, 3d, or whole seconds) for `what`, into *ms: positive and at
 * most IR_MAX_POLICY_DURATION_MS. */
bool ir_parse_duration(struct parser *ps, const char *what, int64_t *ms);

/* One policy bracket `[...]` into *pol (the '[' is current). */
bool ir_parse_policy(struct parser *ps, struct ir_policy *pol);

/* Error types: T or (T1, T2, ...); `what` names what was expected, for the error. */
bool ir_parse_types(struct parser *ps, struct ir_names *out, const char *what);

/* True at `[fail_fast]`. */
bool ir_ps_at_fail_fast(struct parser *ps);

/* Consumes `[fail_fast]` into *flag (NULL: not allowed here, an error). */
bool ir_parse_fail_fast(struct parser *ps, bool *flag);

/* ---- statements (parser_stmt.c) ---- */

/* After a header's ':' : an indented block, or one simple statement on the same line; `what`
 * names the header for the error. */
struct ir_block ir_parse_block(struct parser *ps, const char *what);

#endif
