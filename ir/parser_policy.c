/* SPDX-License-Identifier: MIT */
/*
 * Policy brackets after a call, `[retry: N, backoff: D, ...]`, `[T -> retry: N]`,
 * `[timeout: D]`, `[deadline: D]`, `[version: "v"]` and `[fail_fast]`, with the limits that
 * make a policy replay the same everywhere (durations, counts, a multiplier in thousandths);
 * and the error types that retries and `except` clauses name. Whether a policy fits the call it
 * is on is parser_call.c's to say. Pure; no global state, no threads or locks.
 */
#include <string.h>

#include "ir/parser_int.h"
#include "ir/wfname.h"

bool
ir_ps_at_option(const struct parser *ps, const char *word)
{
    return is_name_tok(peek(ps), word) && peek_at(ps, 1)->kind == IR_TK_COLON;
}

/* A dotted name (error type): NAME ('.' NAME)*, interned into the arena. */
static const char *
parse_dotted(struct parser *ps, const char *what)
{
    const struct ir_token *t = ir_ps_expect_name(ps, "expected %s", what);
    struct cn_buf b = CN_BUF_INIT;
    const char *r = NULL;

    if (t == NULL) {
        return NULL;
    }
    if (cn_buf_puts(&b, t->str) != CN_OK) {
        goto oom;
    }
    while (at(ps, IR_TK_DOT) && peek_at(ps, 1)->kind == IR_TK_NAME) {
        advance(ps);
        if (cn_buf_putc(&b, '.') != CN_OK || cn_buf_puts(&b, advance(ps)->str) != CN_OK) {
            goto oom;
        }
    }
    r = cn_arena_strndup(ps->prog->arena, b.data, b.len);
    if (r == NULL) {
        goto oom;
    }
    cn_buf_fini(&b);
    return r;
oom:
    cn_buf_fini(&b);
    nomem(ps);
    return NULL;
}

bool
ir_parse_types(struct parser *ps, struct ir_names *out, const char *what)
{
    struct name_list nl = {{0}, {0}, CN_STRMAP_INIT};
    bool paren = accept(ps, IR_TK_LPAREN);

    do {
        const struct ir_token *t = peek(ps);
        const char *n = parse_dotted(ps, what);
        if (n == NULL || !ir_ps_names_push(ps, &nl, n, tok_pos(t))) {
            ir_ps_names_drop(&nl);
            return false;
        }
    } while (paren && accept(ps, IR_TK_COMMA) && !at(ps, IR_TK_RPAREN));
    if (paren && !ir_ps_expect(ps, IR_TK_RPAREN, "to close the list of error types")) {
        ir_ps_names_drop(&nl);
        return false;
    }
    *out = ir_ps_names_finish(ps, &nl);
    return true;
}

bool
ir_parse_duration(struct parser *ps, const char *what, int64_t *ms)
{
    const struct ir_token *t = peek(ps);
    bool neg = false;

    if (t->kind == IR_TK_MINUS) {
        neg = true;
        advance(ps);
    }
    t = peek(ps);
    if (t->kind == IR_TK_DURATION) {
        *ms = t->v.dur_ms;
    } else if (t->kind == IR_TK_INT) {
        if (t->v.i > (uint64_t) INT64_MAX / 1000) {
            ir_ps_error_at(ps, t, "%s is too large", what);
            return false;
        }
        *ms = (int64_t) t->v.i * 1000;
    } else if (t->kind == IR_TK_FLOAT) {
        ir_ps_error_at(
            ps, t, "%s must be a whole number with a unit (ms, s, m, h or d), e.g. 1500ms", what);
        return false;
    } else {
        ir_ps_error_at(ps, t, "expected a duration for %s (e.g. 30s, 500ms, 2m)", what);
        return false;
    }
    advance(ps);
    if (neg || *ms <= 0) {
        ir_ps_error_at(ps, t, "%s must be a positive duration", what);
        return false;
    }
    if (*ms > IR_MAX_POLICY_DURATION_MS) {
        ir_ps_error_at(ps, t, "%s is too long (at most 366 days)", what);
        return false;
    }
    return true;
}

/* A growth factor: a number from 1 to 100, kept in thousandths (exact, and the same on every
 * machine that replays the backoff). */
static bool
parse_multiplier(struct parser *ps, int64_t *milli)
{
    const struct ir_token *t = peek(ps);
    double v;

    if (t->kind == IR_TK_INT) {
        v = (double) t->v.i;
    } else if (t->kind == IR_TK_FLOAT) {
        v = t->v.f;
    } else {
        ir_ps_error_at(ps, t, "expected a number for multiplier (e.g. 1.5)");
        return false;
    }
    if (!(v >= IR_MIN_BACKOFF_MULTIPLIER_MILLI / 1000.0 &&
          v <= IR_MAX_BACKOFF_MULTIPLIER_MILLI / 1000.0)) {
        ir_ps_error_at(ps, t, "multiplier must be between 1 and 100");
        return false;
    }
    *milli = (int64_t) (v * 1000.0 + 0.5);
    advance(ps);
    return true;
}

/* One `name: value` after a retry count: backoff, max_backoff or multiplier, each at most
 * once (seen: a bit per option). */
static bool
parse_retry_option(struct parser *ps, struct ir_policy *pol, unsigned *seen)
{
    static const char *const names[] = {"backoff", "max_backoff", "multiplier", "max_elapsed"};
    const struct ir_token *t = peek(ps);
    unsigned k;

    for (k = 0; k < 4; k++) {
        if (ir_ps_at_option(ps, names[k])) {
            break;
        }
    }
    if (k == 4) {
        ir_ps_error_at(
            ps, t,
            "expected 'backoff:', 'max_backoff:', 'multiplier:' or 'max_elapsed:' after the "
            "retry count");
        return false;
    }
    if (*seen & (1u << k)) {
        ir_ps_error_at(ps, t, "'%s' appears twice in this policy", names[k]);
        return false;
    }
    *seen |= 1u << k;
    advance(ps);
    advance(ps);
    if (k == 2) {
        return parse_multiplier(ps, &pol->multiplier_milli);
    }
    if (k == 3) {
        return ir_parse_duration(ps, names[k], &pol->max_elapsed_ms);
    }
    if (!ir_parse_duration(ps, names[k], k == 0 ? &pol->backoff_ms : &pol->max_backoff_ms)) {
        return false;
    }
    if ((k == 0 ? pol->backoff_ms : pol->max_backoff_ms) > IR_MAX_BACKOFF_MS) {
        ir_ps_error_at(ps, t,
                       k == 0 ? "backoff is capped at 1h; use a smaller base delay"
                              : "max_backoff is at most 1h");
        return false;
    }
    return true;
}

/* `timeout: D` or `deadline: D`; the word is current. */
static bool
parse_time_limit(struct parser *ps, struct ir_policy *pol)
{
    bool deadline = is_name_tok(peek(ps), "deadline");

    advance(ps);
    advance(ps);
    pol->kind = deadline ? IR_POLICY_DEADLINE : IR_POLICY_TIMEOUT;
    return ir_parse_duration(ps, deadline ? "deadline" : "timeout", &pol->timeout_ms);
}

/* `version: "v"`; the word is current. */
static bool
parse_version(struct parser *ps, struct ir_policy *pol)
{
    const struct ir_token *v;

    advance(ps);
    advance(ps);
    v = peek(ps);
    pol->kind = IR_POLICY_VERSION;
    if (v->kind != IR_TK_STRING) {
        ir_ps_error_at(ps, v,
                       "expected a version string after 'version:' (e.g. [version: \"v2\"])");
        return false;
    }
    /* The registry's rule, checked here so that a typo fails at registration, not when
     * the call runs and finds no such version. */
    if (!ir_workflow_version_ok(v->str, v->str_len)) {
        ir_ps_error_at(ps, v,
                       "a version is 1 to %d letters, digits, '_', '.' or '-' (as registered with "
                       "cairnctl register --version)",
                       IR_WORKFLOW_VERSION_MAX);
        return false;
    }
    advance(ps);
    pol->version = v->str;
    return true;
}

/* The error types a retry is limited to, `T ->` or `(T1, T2) ->`, into pol->types; on success
 * `retry` is current. */
static bool
parse_retry_types(struct parser *ps, struct ir_policy *pol)
{
    const struct ir_token *t = peek(ps);

    if (t->kind != IR_TK_NAME && t->kind != IR_TK_LPAREN) {
        ir_ps_error_at(ps, t, "expected 'retry', 'timeout', 'deadline' or error types in policy");
        return false;
    }
    if (!ir_parse_types(ps, &pol->types, "an error type")) {
        return false;
    }
    if (!at(ps, IR_TK_ARROW)) {
        ir_ps_error_at(
            ps, peek(ps),
            "expected '->' after error types in policy (e.g. [TimeoutError -> retry: 3])");
        return false;
    }
    advance(ps);
    t = peek(ps);
    if (is_name_tok(t, "timeout") || is_name_tok(t, "deadline")) {
        ir_ps_error_at(ps, t, "a %s applies to every attempt; it cannot be limited to error types",
                       is_name_tok(t, "timeout") ? "timeout" : "deadline");
        return false;
    }
    if (is_name_tok(t, "version")) {
        ir_ps_error_at(ps, t,
                       "a version applies to the whole call; it cannot be limited to error types");
        return false;
    }
    if (!is_name_tok(t, "retry")) {
        ir_ps_error_at(ps, t, "expected 'retry' after '->' in policy");
        return false;
    }
    return true;
}

/* `retry: N` and its options; the word is current, open is the policy's '['. */
static bool
parse_retry(struct parser *ps, struct ir_policy *pol, const struct ir_token *open)
{
    const struct ir_token *t;
    unsigned seen = 0;

    advance(ps); /* retry */
    if (!ir_ps_expect(ps, IR_TK_COLON, "after 'retry'")) {
        return false;
    }
    pol->kind = IR_POLICY_RETRY;
    pol->backoff_ms = IR_DEFAULT_BACKOFF_MS;
    t = peek(ps);
    if (t->kind == IR_TK_MINUS && peek_at(ps, 1)->kind == IR_TK_INT) {
        ir_ps_error_at(ps, t, "retry count must be 0 or more");
        return false;
    }
    if (t->kind != IR_TK_INT) {
        ir_ps_error_at(ps, t, "expected a whole number of retries after 'retry:'");
        return false;
    }
    if (t->v.i > 1000000) {
        ir_ps_error_at(ps, t, "retry count %.*s is too large (limit 1000000)", (int) t->len,
                       t->start);
        return false;
    }
    pol->retries = (int64_t) advance(ps)->v.i;
    pol->max_backoff_ms = IR_MAX_BACKOFF_MS;
    pol->multiplier_milli = IR_DEFAULT_BACKOFF_MULTIPLIER_MILLI;
    while (accept(ps, IR_TK_COMMA)) {
        if (!parse_retry_option(ps, pol, &seen)) {
            return false;
        }
    }
    if (pol->backoff_ms > pol->max_backoff_ms) {
        ir_ps_error_at(ps, open,
                       "backoff is larger than max_backoff: the first delay would exceed the cap");
        return false;
    }
    if (pol->max_elapsed_ms != 0 && pol->max_elapsed_ms < pol->backoff_ms) {
        ir_ps_error_at(ps, open,
                       "max_elapsed is shorter than backoff: no retry could ever start in time");
        return false;
    }
    return true;
}

bool
ir_parse_policy(struct parser *ps, struct ir_policy *pol)
{
    const struct ir_token *open = advance(ps); /* '[' */
    bool ok;

    memset(pol, 0, sizeof(*pol));
    pol->pos = tok_pos(open);
    if (ir_ps_at_option(ps, "timeout") || ir_ps_at_option(ps, "deadline")) {
        ok = parse_time_limit(ps, pol);
    } else if (ir_ps_at_option(ps, "version")) {
        ok = parse_version(ps, pol);
    } else {
        ok = (ir_ps_at_option(ps, "retry") || parse_retry_types(ps, pol)) &&
             parse_retry(ps, pol, open);
    }
    return ok && ir_ps_expect(ps, IR_TK_RBRACK, "to close the policy");
}

bool
ir_ps_at_fail_fast(struct parser *ps)
{
    return at(ps, IR_TK_LBRACK) && is_name_tok(peek_at(ps, 1), "fail_fast") &&
           peek_at(ps, 2)->kind == IR_TK_RBRACK;
}

bool
ir_parse_fail_fast(struct parser *ps, bool *flag)
{
    const struct ir_token *t = advance(ps); /* '[' */

    if (flag == NULL) {
        ir_ps_error_at(ps, t,
                       "[fail_fast] applies to a spread or a parallel block, not to one call");
        return false;
    }
    if (*flag) {
        ir_ps_error_at(ps, t, "[fail_fast] given twice");
        return false;
    }
    *flag = true;
    advance(ps);
    advance(ps);
    return true;
}
