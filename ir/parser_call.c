/* SPDX-License-Identifier: MIT */
/*
 * Calls that a statement waits on: an action, `@module.action(name=value, ...)`, a child
 * workflow, `run wf(...)` or `start wf(...)`, a wait for the outside world, `wait a, b
 * [timeout: D, default: v]` or `wait event e [key: k]`, and a signal to another instance,
 * `signal s(to=id, payload=v)`; their names, keyword arguments and policy brackets, and which
 * policies each kind of call accepts. The brackets themselves are parsed in
 * parser_policy.c. Pure; no global state, no threads or locks.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"
#include "ir/parser_int.h"
#include "ir/wfname.h"

struct kwarg_vec {
    struct ir_kwarg *items;
    size_t len, cap;
};

struct policy_vec {
    struct ir_policy *items;
    size_t len, cap;
};

/* Whether policy p may go on call ac, else an error at its bracket: a child started with
 * `start` has nobody waiting for it, and only children have versions. */
static bool
policy_fits(struct parser *ps, const struct ir_action_call *ac, const struct ir_policy *p)
{
    const char *what = p->kind == IR_POLICY_RETRY     ? "retry: N"
                       : p->kind == IR_POLICY_TIMEOUT ? "timeout: D"
                                                      : "deadline: D";

    if (p->kind == IR_POLICY_VERSION && ac->call != IR_CALL_SIGNAL) {
        if (ac->call == IR_CALL_ACTION) {
            ir_ps_error_pos(
                ps, p->pos,
                "[version: ...] pins the version of a child workflow (run or start); an "
                "action has no version");
            return false;
        }
        if (ac->version != NULL) {
            ir_ps_error_pos(ps, p->pos, "version given twice for the same call");
            return false;
        }
        return true;
    }
    if (ac->call == IR_CALL_SIGNAL) {
        ir_ps_error_pos(ps, p->pos,
                        "[%s] does not apply to signal: a signal is sent in the write that "
                        "records the step, at once and once, and nothing retries it",
                        p->kind == IR_POLICY_VERSION ? "version: ..." : what);
        return false;
    }
    if (ac->call == IR_CALL_START) {
        ir_ps_error_pos(
            ps, p->pos,
            "[%s] does not apply to start: start returns the child's id at once and nothing "
            "waits for the child; use run to wait for it (with retries and a timeout), or "
            "put the policy inside the child workflow",
            what);
        return false;
    }
    if (ac->call == IR_CALL_RUN && p->kind == IR_POLICY_DEADLINE) {
        ir_ps_error_pos(ps, p->pos,
                        "[deadline: D] does not apply to run: use [timeout: D], which for a child "
                        "workflow counts from when the child is started");
        return false;
    }
    return true;
}

/* A dotted name, `NAME ('.' NAME)*` (the caller has checked the first NAME), appended to *name;
 * *dots counts the dots. Keywords are fine after a dot (@db.input, @queue.sleep, billing.input).
 * `what` names the kind of name for the error. */
static bool
parse_call_name(struct parser *ps, const char *what, struct cn_buf *name, int *dots)
{
    if (cn_buf_puts(name, advance(ps)->str) != CN_OK) {
        nomem(ps);
        return false;
    }
    while (accept(ps, IR_TK_DOT)) {
        if (!at(ps, IR_TK_NAME) && !(peek(ps)->kind >= IR_TK_FN && peek(ps)->kind <= IR_TK_PASS)) {
            ir_ps_error_at(ps, peek(ps), "expected a name after '.' in %s name", what);
            return false;
        }
        if (cn_buf_putc(name, '.') != CN_OK || cn_buf_puts(name, advance(ps)->str) != CN_OK) {
            nomem(ps);
            return false;
        }
        (*dots)++;
    }
    return true;
}

/* The action name after '@' (consumed, at): NAME ('.' NAME)+, into *name. */
static bool
parse_action_name(struct parser *ps, const struct ir_token *at_tok, struct cn_buf *name)
{
    int dots = 0;

    if (!at(ps, IR_TK_NAME)) {
        ir_ps_error_at(ps, peek(ps), "expected an action name after '@' (e.g. @mail.send)");
        return false;
    }
    if (!parse_call_name(ps, "action", name, &dots)) {
        return false;
    }
    if (dots == 0) {
        ir_ps_error_at(ps, at_tok, "action names are module-qualified: write @module.%s(...)",
                       name->data);
        return false;
    }
    return true;
}

/* The workflow name after `run`/`start` (consumed, kw): NAME ('.' NAME)*, into *name. It is
 * never resolved against the file's functions: `run f(...)` starts the registered workflow f,
 * whatever helpers the file defines. */
static bool
parse_workflow_name(struct parser *ps, const struct ir_token *kw, struct cn_buf *name)
{
    const struct ir_token *first = peek(ps);
    int dots = 0;

    if (first->kind == IR_TK_STRING) {
        ir_ps_error_at(ps, first,
                       "a workflow name is written without quotes (%s billing.refund(...)); names "
                       "with '-' cannot be called",
                       kw->str);
        return false;
    }
    if (first->kind != IR_TK_NAME) {
        ir_ps_error_at(ps, first,
                       "expected a workflow name after '%s' (e.g. %s billing.refund(order=o))",
                       kw->str, kw->str);
        return false;
    }
    if (!parse_call_name(ps, "workflow", name, &dots)) {
        return false;
    }
    if (!ir_workflow_name_ok(name->data)) {
        ir_ps_error_at(ps, first, "workflow name is too long (at most %d characters)",
                       IR_WORKFLOW_NAME_MAX);
        return false;
    }
    return true;
}

/* `NAME '=' expr` or `NAME ':' expr` (NAME is current, the separator after it): the value
 * parsed and pushed onto kw under the name. */
static bool
parse_kwarg_value(struct parser *ps, const struct ir_token *name, struct kwarg_vec *kw)
{
    struct ir_kwarg a;

    advance(ps);
    advance(ps);
    a.name = name->str;
    a.pos = tok_pos(name);
    a.expr = ir_parse_expr(ps);
    return !ps->panic && ps_alloc_ok(ps, CN_VEC_PUSH(kw, a));
}

/* The keyword arguments of a call, `NAME '=' expr, ...`, into kw, through the closing ')'. */
static bool
parse_call_kwargs(struct parser *ps, const struct ir_action_call *ac, struct kwarg_vec *kw)
{
    struct cn_strmap kwseen = CN_STRMAP_INIT;
    uint32_t seen;
    bool ok = false;

    while (!at(ps, IR_TK_RPAREN)) {
        const struct ir_token *k = peek(ps);
        if (k->kind != IR_TK_NAME || peek_at(ps, 1)->kind != IR_TK_ASSIGN) {
            ir_ps_error_at(ps, k,
                           ac->call == IR_CALL_ACTION
                               ? "actions take keyword arguments only (write name=value)"
                           : ac->call == IR_CALL_SIGNAL
                               ? "a signal takes keyword arguments only: to=instance_id and "
                                 "optionally payload=value"
                               : "child workflows take keyword arguments only (write name=value, "
                                 "one per input of the child's main)");
            goto out;
        }
        if (ac->call == IR_CALL_SIGNAL && strcmp(k->str, "to") != 0 &&
            strcmp(k->str, "payload") != 0) {
            ir_ps_error_at(ps, k,
                           "a signal takes to=instance_id and optionally payload=value, not '%s'",
                           k->str);
            goto out;
        }
        if (ir_ps_seen(ps, &kwseen, k->str)) {
            ir_ps_error_at(ps, k, "keyword argument '%s' repeated", k->str);
            goto out;
        }
        if (!parse_kwarg_value(ps, k, kw)) {
            goto out;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    ok = ir_ps_expect(ps, IR_TK_RPAREN,
                      ac->call == IR_CALL_ACTION   ? "to close the action's arguments"
                      : ac->call == IR_CALL_SIGNAL ? "to close the signal's arguments"
                                                   : "to close the child workflow's arguments");
    if (ok && ac->call == IR_CALL_SIGNAL && !cn_strmap_get(&kwseen, "to", &seen)) {
        ir_ps_error_pos(ps, ac->pos,
                        "a signal needs to=instance_id: the instance to send it to (the id "
                        "`start` gives, or one passed in the input)");
        ok = false;
    }
out:
    cn_strmap_fini(&kwseen);
    return ok;
}

/* True (and an error at p) when a timeout or deadline p is already among pols: unlike retries,
 * which apply to different error types, there is one of each per call. */
static bool
policy_repeated(struct parser *ps, const struct ir_action_call *ac, const struct policy_vec *pols,
                const struct ir_policy *p)
{
    size_t i;

    for (i = 0; i < pols->len; i++) {
        if (pols->items[i].kind == p->kind) {
            ir_diags_add(ps->d, p->pos.line, p->pos.col, "%s given twice for the same %s",
                         p->kind == IR_POLICY_TIMEOUT ? "timeout" : "deadline",
                         ac->call == IR_CALL_ACTION ? "action" : "call");
            ps->panic = true;
            return true;
        }
    }
    return false;
}

/* The policy brackets after a call's ')' into pols (a version into ac), and `[fail_fast]` into
 * *fail_fast where that may go (see ir_parse_action). */
static bool
parse_call_policies(struct parser *ps, struct ir_action_call *ac, bool *fail_fast,
                    struct policy_vec *pols)
{
    while (at(ps, IR_TK_LBRACK)) {
        struct ir_policy p;
        if (ir_ps_at_fail_fast(ps)) {
            if (!ir_parse_fail_fast(ps, fail_fast)) {
                return false;
            }
            continue;
        }
        if (!ir_parse_policy(ps, &p) || !policy_fits(ps, ac, &p)) {
            return false;
        }
        if (p.kind == IR_POLICY_VERSION) {
            ac->version = p.version;
            continue;
        }
        if (p.kind != IR_POLICY_RETRY && policy_repeated(ps, ac, pols, &p)) {
            return false;
        }
        if (!ps_alloc_ok(ps, CN_VEC_PUSH(pols, p))) {
            return false;
        }
    }
    return true;
}

/* One option of a wait's bracket (its word is current): `timeout: D`, `default: expr`, and
 * for an event `key: expr`. */
static bool
parse_wait_option(struct parser *ps, struct ir_action_call *ac, struct kwarg_vec *kw,
                  struct policy_vec *pols)
{
    const struct ir_token *w = peek(ps);
    size_t k;

    if (ir_ps_at_option(ps, "timeout")) {
        struct ir_policy p;
        memset(&p, 0, sizeof(p));
        p.kind = IR_POLICY_TIMEOUT;
        p.pos = tok_pos(w);
        if (pols->len > 0) {
            ir_ps_error_at(ps, w, "timeout given twice for the same wait");
            return false;
        }
        advance(ps);
        advance(ps);
        return ir_parse_duration(ps, "timeout", &p.timeout_ms) &&
               ps_alloc_ok(ps, CN_VEC_PUSH(pols, p));
    }
    if (!ir_ps_at_option(ps, "default") &&
        !(ac->call == IR_CALL_EVENT && ir_ps_at_option(ps, "key"))) {
        ir_ps_error_at(ps, w,
                       ac->call == IR_CALL_EVENT
                           ? "a wait for an event takes [key: value], [timeout: D] and "
                             "[default: value] (the value on timeout)"
                           : "a wait takes [timeout: D] and [default: value] (the value on "
                             "timeout); retries and deadlines do not apply");
        return false;
    }
    for (k = 0; k < kw->len; k++) {
        if (strcmp(kw->items[k].name, w->str) == 0) {
            ir_ps_error_at(ps, w, "%s given twice for the same wait", w->str);
            return false;
        }
    }
    return parse_kwarg_value(ps, w, kw);
}

/* `wait NAME (',' NAME)*` or `wait event NAME` (the word `wait` consumed; ac->call set), then
 * option brackets: the names joined by ',' into *name, the options into kw and pols. */
static bool
parse_wait(struct parser *ps, struct ir_action_call *ac, struct cn_buf *name, struct kwarg_vec *kw,
           struct policy_vec *pols)
{
    const struct ir_token *t;
    uint32_t n = 0;
    size_t k;

    if (ac->call == IR_CALL_EVENT) {
        advance(ps); /* event */
    }
    do {
        t = peek(ps);
        if (t->kind == IR_TK_STRING) {
            ir_ps_error_at(ps, t, "a %s name is written without quotes (wait %sapproved)",
                           ac->call == IR_CALL_EVENT ? "event" : "signal",
                           ac->call == IR_CALL_EVENT ? "event " : "");
            return false;
        }
        if (ir_ps_expect_name(ps, "expected the name of a %s to wait for",
                              ac->call == IR_CALL_EVENT ? "event" : "signal") == NULL) {
            return false;
        }
        if (strlen(t->str) > IR_MAX_WAIT_NAME) {
            ir_ps_error_at(ps, t, "a signal or event name has at most %d characters",
                           IR_MAX_WAIT_NAME);
            return false;
        }
        for (k = 0; k < name->len;) {
            size_t e = k;
            while (e < name->len && name->data[e] != ',') {
                e++;
            }
            if (e - k == strlen(t->str) && memcmp(name->data + k, t->str, e - k) == 0) {
                ir_ps_error_at(ps, t, "signal '%s' named twice in the same wait", t->str);
                return false;
            }
            k = e + 1;
        }
        if (++n > IR_MAX_WAIT_NAMES) {
            ir_ps_error_at(ps, t, "a wait takes at most %d signal names", IR_MAX_WAIT_NAMES);
            return false;
        }
        if ((n > 1 && cn_buf_putc(name, ',') != CN_OK) || cn_buf_puts(name, t->str) != CN_OK) {
            nomem(ps);
            return false;
        }
    } while (ac->call == IR_CALL_WAIT && accept(ps, IR_TK_COMMA));
    if (ac->call == IR_CALL_EVENT && at(ps, IR_TK_COMMA)) {
        ir_ps_error_at(ps, peek(ps), "a wait for an event waits for one event name");
        return false;
    }
    while (at(ps, IR_TK_LBRACK)) {
        advance(ps);
        do {
            if (!parse_wait_option(ps, ac, kw, pols)) {
                return false;
            }
        } while (accept(ps, IR_TK_COMMA));
        if (!ir_ps_expect(ps, IR_TK_RBRACK, "to close the wait's options")) {
            return false;
        }
    }
    for (k = 0; k < kw->len; k++) {
        if (strcmp(kw->items[k].name, "default") == 0 && pols->len == 0) {
            ir_ps_error_pos(ps, kw->items[k].pos,
                            "[default: value] is what the wait gives on timeout: add "
                            "[timeout: D]");
            return false;
        }
    }
    if (ac->call == IR_CALL_EVENT && (kw->len == 0 || strcmp(kw->items[0].name, "key") != 0)) {
        bool key = false;
        for (k = 0; k < kw->len; k++) {
            key = key || strcmp(kw->items[k].name, "key") == 0;
        }
        if (!key) {
            ir_ps_error_pos(ps, ac->pos,
                            "wait event %s needs [key: value]: the key the event is published "
                            "under (an order id, say)",
                            name->data);
            return false;
        }
    }
    return true;
}

/* The signal's name after `signal` (consumed, kw): one NAME, as a wait names it. */
static bool
parse_signal_name(struct parser *ps, struct cn_buf *name)
{
    const struct ir_token *t = peek(ps);

    if (t->kind == IR_TK_STRING) {
        ir_ps_error_at(ps, t, "a signal name is written without quotes (signal approve(to=id))");
        return false;
    }
    if (ir_ps_expect_name(ps, "expected the name of the signal to send") == NULL) {
        return false;
    }
    if (strlen(t->str) > IR_MAX_WAIT_NAME) {
        ir_ps_error_at(ps, t, "a signal or event name has at most %d characters", IR_MAX_WAIT_NAME);
        return false;
    }
    if (at(ps, IR_TK_DOT)) {
        ir_ps_error_at(ps, peek(ps),
                       "a signal name is one name (letters, digits, _), as its wait writes it");
        return false;
    }
    if (cn_buf_puts(name, t->str) != CN_OK) {
        nomem(ps);
        return false;
    }
    return true;
}

bool
ir_parse_action(struct parser *ps, struct ir_action_call *ac, bool *fail_fast)
{
    const struct ir_token *t = advance(ps);
    struct cn_buf name = CN_BUF_INIT;
    struct kwarg_vec kw = {0};
    struct policy_vec pols = {0};
    bool named, ok = false;

    memset(ac, 0, sizeof(*ac));
    ac->pos = tok_pos(t);
    if (t->kind == IR_TK_AT) {
        named = parse_action_name(ps, t, &name);
    } else if (is_name_tok(t, "wait") && at(ps, IR_TK_FOR)) {
        /* `wait for EXPR`: a child this instance started; EXPR is its id. */
        struct ir_kwarg a;
        advance(ps); /* for */
        ac->call = IR_CALL_JOIN;
        a.name = "child";
        a.pos = tok_pos(peek(ps));
        if (peek(ps)->kind == IR_TK_NAME && peek_at(ps, 1)->kind == IR_TK_LBRACK &&
            peek_at(ps, 2)->kind == IR_TK_NAME && peek_at(ps, 3)->kind == IR_TK_COLON) {
            /* `wait for h [timeout: D]` would read as a subscript of h */
            ir_ps_error_at(ps, peek_at(ps, 1),
                           "a wait for a child takes no brackets: its retries and timeout are "
                           "the child's own");
            goto out;
        }
        a.expr = ir_parse_or(ps);
        if (ps->panic || !ps_alloc_ok(ps, CN_VEC_PUSH(&kw, a))) {
            goto out;
        }
        if (at(ps, IR_TK_LBRACK)) {
            ir_ps_error_at(ps, peek(ps),
                           "a wait for a child takes no brackets: its retries and timeout are "
                           "the child's own");
            goto out;
        }
        goto done;
    } else if (is_name_tok(t, "wait")) {
        ac->call = (uint8_t) (is_name_tok(peek(ps), "event") && peek_at(ps, 1)->kind == IR_TK_NAME
                                  ? IR_CALL_EVENT
                                  : IR_CALL_WAIT);
        if (!parse_wait(ps, ac, &name, &kw, &pols)) {
            goto out;
        }
        goto done;
    } else if (is_name_tok(t, "signal")) {
        ac->call = IR_CALL_SIGNAL;
        named = parse_signal_name(ps, &name);
    } else {
        ac->call = (uint8_t) (is_name_tok(t, "run") ? IR_CALL_RUN : IR_CALL_START);
        named = parse_workflow_name(ps, t, &name);
    }
    if (!named ||
        !ir_ps_expect(ps, IR_TK_LPAREN,
                      ac->call == IR_CALL_ACTION   ? "after action name"
                      : ac->call == IR_CALL_SIGNAL ? "after the signal name (signal name(to=id))"
                                                   : "after the workflow name") ||
        !parse_call_kwargs(ps, ac, &kw) || !parse_call_policies(ps, ac, fail_fast, &pols)) {
        goto out;
    }
done:
    ac->name = cn_arena_strndup(ps->prog->arena, name.data, name.len);
    ac->kwargs = ir_ps_arena_copy(ps, kw.items, kw.len, sizeof(kw.items[0]));
    ac->nkwargs = (uint32_t) kw.len;
    ac->policies = ir_ps_arena_copy(ps, pols.items, pols.len, sizeof(pols.items[0]));
    ac->npolicies = (uint32_t) pols.len;
    if (ac->name == NULL) {
        nomem(ps);
        goto out;
    }
    ok = true;
out:
    cn_buf_fini(&name);
    free(kw.items);
    free(pols.items);
    return ok;
}
