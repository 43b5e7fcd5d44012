/* SPDX-License-Identifier: MIT */
/* Parser tests: every statement and expression form, and every syntax error class with its
 * exact line:col. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/parser.h"
#include "tests/support/compile_util.h"
#include "tests/support/leak.h"
#include "tests/unit/ir/src_util.h"

TestSuite(ir_parser, .fini = t_leak_check, .timeout = 30);

struct parsed {
    struct ir_diags diags;
    struct ir_program *prog;
    cn_err rv;
};

static void
parse(struct parsed *p, const char *src)
{
    memset(p, 0, sizeof(*p));
    ir_diags_init(&p->diags, "t.cairn", src, strlen(src));
    p->rv = ir_parse(src, strlen(src), &p->diags, &p->prog);
}

static void
parsed_free(struct parsed *p)
{
    ir_program_free(p->prog);
    ir_diags_fini(&p->diags);
}

static void
parse_ok(struct parsed *p, const char *src)
{
    parse(p, src);
    cr_assert_eq(
        p->rv, CN_OK, "parse failed: %s at %u:%u", p->diags.len ? p->diags.items[0].msg : "?",
        p->diags.len ? p->diags.items[0].line : 0, p->diags.len ? p->diags.items[0].col : 0);
}

/* Parses `x = <expr>` in a function and returns the printed expression (malloc'd). */
static char *
reprint(const char *expr)
{
    struct parsed p;
    struct cn_buf src = CN_BUF_INIT, out = CN_BUF_INIT;
    const struct ir_stmt *s;
    char *r = NULL;

    t_printf(&src, "fn main():\n    x = %s\n", expr);
    parse_ok(&p, src.data);
    s = p.prog->funcs[0].body.items[0];
    cr_assert_eq(s->kind, IR_S_ASSIGN);
    cr_assert_eq(ir_expr_print(&p.prog->exprs, s->expr, &out), CN_OK);
    cr_assert_eq(cn_buf_take(&out, &r, NULL), CN_OK);
    parsed_free(&p);
    cn_buf_fini(&src);
    return r;
}

static void
expect_print(const char *expr, const char *want)
{
    char *got = reprint(expr);
    cr_expect_str_eq(got, want, "%s printed as %s, want %s", expr, got, want);
    free(got);
}

Test(ir_parser, expression_forms_print_back)
{
    static const char *const same[] = {
        "1 + 2 * 3",
        "(1 + 2) * 3",
        "a - (b - c)",
        "a - b - c",
        "a // b % c * d / e",
        "not a and b or c",
        "not (a and b)",
        "a < b <= c",
        "a == b != c",
        "a in b",
        "a not in b",
        "x if c else y if d else z",
        "(x if c else y) if d else z",
        "d | {'k': 1} | e",
        "xs[1:]",
        "xs[:-1]",
        "xs[a:b]",
        "xs[:]",
        "xs[-1]",
        "x.field.sub",
        "x['k'].f[0]",
        "len(xs) + max(1, 2)",
        "[1, 2.5, 'a', True, False, None]",
        "{}",
        "[]",
        "{'a': [1], 'b': {'c': 2}}",
        "-x",
        "-(a + b)",
        "-5",
        "-9223372036854775808",
        "9223372036854775807",
        "1e+16",
        "0.1",
        "h(a, b=2, c=x + 1)",
        "(a or b) and c",
        "a or b and c",
        "(a < b) == c",
        "-2.5",
    };
    size_t i;

    for (i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        expect_print(same[i], same[i]);
    }
}

Test(ir_parser, expression_normalisations)
{
    expect_print("(1, 2)", "[1, 2]");
    expect_print("a, b", "[a, b]");
    expect_print("a,", "[a]"); /* a trailing comma makes a one-item tuple, as in Python */
    expect_print("a, b,", "[a, b]");
    expect_print("1.e3", "1000.0");
    expect_print("((a))", "a");
    expect_print("\"dq\"", "'dq'");
    expect_print("2e3", "2000.0");
    expect_print(".5", "0.5");
    expect_print("- - x", "--x");
    expect_print("[1,\n        2,\n]", "[1, 2]");
}

Test(ir_parser, chained_comparison_is_one_node)
{
    struct parsed p;
    const struct ir_expr *e;

    parse_ok(&p, "fn main():\n    x = 1 < a <= b < 9\n");
    e = &p.prog->exprs.items[p.prog->funcs[0].body.items[0]->expr];
    cr_assert_eq(e->kind, IR_X_CMP);
    cr_assert_eq(e->nargs, 4);
    cr_assert_eq(p.prog->exprs.args[e->ops], IR_CMP_LT);
    cr_assert_eq(p.prog->exprs.args[e->ops + 1], IR_CMP_LE);
    parsed_free(&p);
}

Test(ir_parser, function_signatures)
{
    struct parsed p;

    parse_ok(&p, "fn a(input: [x, y], output: [z]):\n    pass\n"
                 "fn b(output: [z]):\n    pass\n"
                 "fn main():\n    pass\n");
    cr_assert_eq(p.prog->nfuncs, 3);
    cr_assert_str_eq(p.prog->funcs[0].name, "a");
    cr_assert_eq(p.prog->funcs[0].inputs.len, 2);
    cr_assert_str_eq(p.prog->funcs[0].inputs.items[1], "y");
    cr_assert_eq(p.prog->funcs[0].outputs.len, 1);
    cr_assert_eq(p.prog->funcs[1].inputs.len, 0);
    cr_assert_eq(p.prog->funcs[1].outputs.len, 1);
    cr_assert_str_eq(ir_program_entry(p.prog)->name, "main");
    parsed_free(&p);
}

static const struct ir_stmt *
stmt(const struct parsed *p, uint32_t i)
{
    cr_assert_lt(i, p->prog->funcs[0].body.len);
    return p->prog->funcs[0].body.items[i];
}

Test(ir_parser, every_statement_form)
{
    struct parsed p;
    const struct ir_stmt *s;
    const char *src = "fn main(input: [xs]):\n"
                      "    a = 1\n"                                         /* 0 */
                      "    b, c = [1, 2]\n"                                 /* 1 */
                      "    r = @m.act(k=a, j=b) [retry: 2] [timeout: 5s]\n" /* 2 */
                      "    @m.fire(k=1)\n"                                  /* 3 */
                      "    ys = spread xs:x -> @m.each(v=x)\n"              /* 4 */
                      "    p, q = parallel:\n"                              /* 5 */
                      "        @m.one()\n"
                      "        h(1)\n"
                      "    if a:\n" /* 6 */
                      "        pass\n"
                      "    elif b:\n"
                      "        pass\n"
                      "    else:\n"
                      "        pass\n"
                      "    for i, v in enumerate(xs):\n" /* 7 */
                      "        continue\n"
                      "    while a < 3:\n" /* 8 */
                      "        a += 1\n"
                      "        break\n"
                      "    try:\n" /* 9 */
                      "        pass\n"
                      "    except ValueError:\n"
                      "        pass\n"
                      "    except (A, b.C) as e:\n"
                      "        pass\n"
                      "    except:\n"
                      "        pass\n"
                      "    sleep 1.5\n"    /* 10 */
                      "    if a: return\n" /* 11 */
                      "    try:\n"         /* 12 */
                      "        pass\n"
                      "    except ValueError:\n"
                      "        pass\n"
                      "    finally:\n"
                      "        a = 2\n"
                      "        a = 3\n"
                      "    try:\n" /* 13 */
                      "        pass\n"
                      "    finally: pass\n"
                      "    return a\n" /* 14 */
                      "fn h(input: [z]):\n"
                      "    return z\n";

    parse_ok(&p, src);
    cr_assert_eq(p.prog->funcs[0].body.len, 15);
    cr_assert_eq(stmt(&p, 0)->kind, IR_S_ASSIGN);
    s = stmt(&p, 1);
    cr_assert_eq(s->targets.len, 2);
    cr_assert_str_eq(s->targets.items[1], "c");
    s = stmt(&p, 2);
    cr_assert_eq(s->kind, IR_S_ACTION);
    cr_assert_str_eq(s->action.name, "m.act");
    cr_assert_eq(s->action.nkwargs, 2);
    cr_assert_str_eq(s->action.kwargs[1].name, "j");
    cr_assert_eq(s->action.npolicies, 2);
    cr_assert_eq(s->action.policies[0].kind, IR_POLICY_RETRY);
    cr_assert_eq(s->action.policies[0].retries, 2);
    cr_assert_eq(s->action.policies[0].backoff_ms, IR_DEFAULT_BACKOFF_MS);
    cr_assert_eq(s->action.policies[1].kind, IR_POLICY_TIMEOUT);
    cr_assert_eq(s->action.policies[1].timeout_ms, 5000);
    s = stmt(&p, 3);
    cr_assert_eq(s->kind, IR_S_ACTION);
    cr_assert_eq(s->targets.len, 0);
    s = stmt(&p, 4);
    cr_assert_eq(s->kind, IR_S_SPREAD);
    cr_assert_str_eq(s->item, "x");
    cr_assert_str_eq(s->action.name, "m.each");
    s = stmt(&p, 5);
    cr_assert_eq(s->kind, IR_S_PARALLEL);
    cr_assert_eq(s->nbranches, 2);
    cr_assert(s->branches[0].is_action);
    cr_assert(!s->branches[1].is_action);
    s = stmt(&p, 6);
    cr_assert_eq(s->kind, IR_S_IF);
    cr_assert_eq(s->narms, 3);
    cr_assert_eq(s->arms[2].cond, IR_NO_EXPR);
    s = stmt(&p, 7);
    cr_assert_eq(s->kind, IR_S_FOR);
    cr_assert_eq(s->targets.len, 2);
    cr_assert_eq(s->body.items[0]->kind, IR_S_CONTINUE);
    s = stmt(&p, 8);
    cr_assert_eq(s->kind, IR_S_WHILE);
    cr_assert_eq(s->body.len, 2);
    cr_assert_eq(s->body.items[0]->kind, IR_S_ASSIGN); /* a += 1 is a = a + 1 */
    cr_assert_eq(p.prog->exprs.items[s->body.items[0]->expr].kind, IR_X_BIN);
    cr_assert_eq(s->body.items[1]->kind, IR_S_BREAK);
    s = stmt(&p, 9);
    cr_assert_eq(s->kind, IR_S_TRY);
    cr_assert_eq(s->nhandlers, 3);
    cr_assert_eq(s->handlers[0].types.len, 1);
    cr_assert_str_eq(s->handlers[1].types.items[1], "b.C");
    cr_assert_str_eq(s->handlers[1].bind, "e");
    cr_assert_eq(s->handlers[2].types.len, 0);
    cr_assert(!s->has_final);
    cr_assert_eq(stmt(&p, 10)->kind, IR_S_SLEEP);
    s = stmt(&p, 11);
    cr_assert_eq(s->kind, IR_S_IF);
    cr_assert_eq(s->arms[0].body.items[0]->kind, IR_S_RETURN);
    cr_assert_eq(s->arms[0].body.items[0]->expr, IR_NO_EXPR);
    s = stmt(&p, 12);
    cr_assert_eq(s->kind, IR_S_TRY);
    cr_assert_eq(s->nhandlers, 1);
    cr_assert(s->has_final);
    cr_assert_eq(s->final.len, 2);
    cr_assert_eq(s->final_pos.line, 35);
    cr_assert_eq(s->final_pos.col, 5);
    s = stmt(&p, 13);
    cr_assert_eq(s->kind, IR_S_TRY);
    cr_assert_eq(s->nhandlers, 0);
    cr_assert(s->has_final);
    cr_assert_eq(s->final.items[0]->kind, IR_S_PASS);
    cr_assert_eq(stmt(&p, 14)->kind, IR_S_RETURN);
    parsed_free(&p);
}

Test(ir_parser, policies)
{
    struct parsed p;
    const struct ir_action_call *a;

    parse_ok(&p, "fn main():\n"
                 "    r = @m.a() [retry: 3, backoff: 250ms] [(E1, E2) -> retry: 5, backoff: 2m] "
                 "[ActionTimeout -> retry: 1] [timeout: 1h] [retry: 0]\n");
    a = &stmt(&p, 0)->action;
    cr_assert_eq(a->npolicies, 5);
    cr_assert_eq(a->policies[0].retries, 3);
    cr_assert_eq(a->policies[0].backoff_ms, 250);
    cr_assert_eq(a->policies[0].types.len, 0);
    cr_assert_eq(a->policies[1].types.len, 2);
    cr_assert_str_eq(a->policies[1].types.items[1], "E2");
    cr_assert_eq(a->policies[1].backoff_ms, 120000);
    cr_assert_str_eq(a->policies[2].types.items[0], "ActionTimeout");
    cr_assert_eq(a->policies[3].timeout_ms, 3600000);
    cr_assert_eq(a->policies[4].retries, 0);
    parsed_free(&p);
}

Test(ir_parser, timeout_and_deadline_are_separate_brackets)
{
    struct parsed p;
    const struct ir_action_call *a;

    parse_ok(&p, "fn main():\n    r = @m.a() [deadline: 2m] [timeout: 30s]\n");
    a = &stmt(&p, 0)->action;
    cr_assert_eq(a->npolicies, 2);
    cr_assert_eq(a->policies[0].kind, IR_POLICY_DEADLINE);
    cr_assert_eq(a->policies[0].timeout_ms, 120000);
    cr_assert_eq(a->policies[1].kind, IR_POLICY_TIMEOUT);
    cr_assert_eq(a->policies[1].timeout_ms, 30000);
    parsed_free(&p);
}

Test(ir_parser, retry_options_in_any_order_with_their_defaults)
{
    struct parsed p;
    const struct ir_action_call *a;

    parse_ok(&p, "fn main():\n"
                 "    r = @m.a() [retry: 3, multiplier: 1.5, max_backoff: 2s, backoff: 100ms] "
                 "[E -> retry: 2, multiplier: 1] [retry: 1]\n");
    a = &stmt(&p, 0)->action;
    cr_assert_eq(a->policies[0].backoff_ms, 100);
    cr_assert_eq(a->policies[0].max_backoff_ms, 2000);
    cr_assert_eq(a->policies[0].multiplier_milli, 1500);
    cr_assert_eq(a->policies[1].multiplier_milli, 1000);
    cr_assert_eq(a->policies[1].max_backoff_ms, IR_MAX_BACKOFF_MS);
    cr_assert_eq(a->policies[2].backoff_ms, IR_DEFAULT_BACKOFF_MS);
    cr_assert_eq(a->policies[2].max_backoff_ms, IR_MAX_BACKOFF_MS);
    cr_assert_eq(a->policies[2].multiplier_milli, IR_DEFAULT_BACKOFF_MULTIPLIER_MILLI);
    parsed_free(&p);
}

Test(ir_parser, bare_integer_duration_means_seconds)
{
    struct parsed p;

    parse_ok(&p, "fn main():\n    r = @m.a() [timeout: 30] [retry: 1, backoff: 2]\n");
    cr_assert_eq(stmt(&p, 0)->action.policies[0].timeout_ms, 30000);
    cr_assert_eq(stmt(&p, 0)->action.policies[1].backoff_ms, 2000);
    parsed_free(&p);
}

Test(ir_parser, child_workflow_calls)
{
    struct parsed p;
    const struct ir_stmt *s;
    const struct ir_action_call *a;

    parse_ok(&p, "fn main(input: [xs, o]):\n"
                 "    r = run billing.refund(order=o, n=1) [E -> retry: 3] [timeout: 10m] "
                 "[version: \"v2.1-rc_1\"]\n"                                     /* 0 */
                 "    run audit(what=o)\n"                                        /* 1 */
                 "    a, b = run pair()\n"                                        /* 2 */
                 "    id = start notify(o=o) [version: \"v2\"]\n"                 /* 3 */
                 "    start fire()\n"                                             /* 4 */
                 "    ys = spread xs:x -> run each(v=x) [retry: 2] [fail_fast]\n" /* 5 */
                 "    ids = spread xs:x -> start each(v=x)\n"                     /* 6 */
                 "    p, q = parallel [fail_fast]:\n"                             /* 7 */
                 "        run one.two.three(k=1) [timeout: 30s] [version: \"v3\"]\n"
                 "        @m.act()\n"
                 "    c = run billing.input(x=1)\n"); /* 8: keywords are fine after a dot */
    s = stmt(&p, 0);
    a = &s->action;
    cr_assert_eq(s->kind, IR_S_ACTION);
    cr_assert_eq(a->call, IR_CALL_RUN);
    cr_assert_str_eq(a->name, "billing.refund");
    cr_assert_eq(a->pos.line, 2);
    cr_assert_eq(a->pos.col, 9); /* the `run` keyword */
    cr_assert_eq(a->nkwargs, 2);
    cr_assert_str_eq(a->kwargs[1].name, "n");
    cr_assert_eq(a->npolicies, 2); /* the version is kept apart */
    cr_assert_eq(a->policies[0].kind, IR_POLICY_RETRY);
    cr_assert_str_eq(a->policies[0].types.items[0], "E");
    cr_assert_eq(a->policies[1].kind, IR_POLICY_TIMEOUT);
    cr_assert_eq(a->policies[1].timeout_ms, 600000);
    cr_assert_str_eq(a->version, "v2.1-rc_1");
    s = stmt(&p, 1);
    cr_assert_eq(s->kind, IR_S_ACTION);
    cr_assert_eq(s->action.call, IR_CALL_RUN);
    cr_assert_eq(s->targets.len, 0);
    cr_assert_eq(s->pos.col, 5);
    s = stmt(&p, 2);
    cr_assert_eq(s->action.call, IR_CALL_RUN);
    cr_assert(s->targets.unpack);
    cr_assert_eq(s->targets.len, 2);
    s = stmt(&p, 3);
    cr_assert_eq(s->action.call, IR_CALL_START);
    cr_assert_str_eq(s->action.name, "notify");
    cr_assert_str_eq(s->action.version, "v2");
    cr_assert_eq(s->action.pos.col, 10);
    s = stmt(&p, 4);
    cr_assert_eq(s->action.call, IR_CALL_START);
    cr_assert_null(s->action.version);
    cr_assert_eq(s->targets.len, 0);
    s = stmt(&p, 5);
    cr_assert_eq(s->kind, IR_S_SPREAD);
    cr_assert_eq(s->action.call, IR_CALL_RUN);
    cr_assert_str_eq(s->action.name, "each");
    cr_assert(s->fail_fast);
    cr_assert_eq(s->action.npolicies, 1);
    s = stmt(&p, 6);
    cr_assert_eq(s->kind, IR_S_SPREAD);
    cr_assert_eq(s->action.call, IR_CALL_START);
    s = stmt(&p, 7);
    cr_assert_eq(s->kind, IR_S_PARALLEL);
    cr_assert(s->fail_fast);
    cr_assert_eq(s->nbranches, 2);
    cr_assert(s->branches[0].is_action);
    cr_assert_eq(s->branches[0].action.call, IR_CALL_RUN);
    cr_assert_str_eq(s->branches[0].action.name, "one.two.three");
    cr_assert_str_eq(s->branches[0].action.version, "v3");
    cr_assert_eq(s->branches[1].action.call, IR_CALL_ACTION);
    cr_assert_null(s->branches[1].action.version);
    cr_assert_str_eq(stmt(&p, 8)->action.name, "billing.input");
    parsed_free(&p);
}

/* `run` and `start` are keywords only before a workflow name: elsewhere they are names. */
Test(ir_parser, run_and_start_stay_ordinary_names)
{
    struct parsed p;
    const struct ir_stmt *s;
    uint32_t i;

    parse_ok(&p, "fn main(input: [run, start]):\n"
                 "    run = 3\n"
                 "    start = run + 1\n"
                 "    x = f(run)\n"
                 "    run, start = [start, run]\n"
                 "    run += 1\n"
                 "    y = run(start)\n"
                 "    z = [run, start] if run else start\n"
                 "    for run in [start]:\n"
                 "        pass\n"
                 "    run\n"
                 "    a = parallel:\n"
                 "        run(1)\n"
                 "        start(k=2)\n"
                 "    b = spread start:run -> @m.a(v=run)\n"
                 "    return run\n");
    for (i = 0; i < 7; i++) {
        s = stmt(&p, i);
        cr_assert_eq(s->kind, IR_S_ASSIGN, "statement %u is %s", i, ir_stmt_kind_name(s->kind));
    }
    cr_assert_str_eq(stmt(&p, 0)->targets.items[0], "run");
    cr_assert_eq(p.prog->exprs.items[stmt(&p, 5)->expr].kind, IR_X_CALL); /* a helper `run` */
    cr_assert_eq(stmt(&p, 7)->kind, IR_S_FOR);
    cr_assert_str_eq(stmt(&p, 7)->targets.items[0], "run");
    cr_assert_eq(stmt(&p, 8)->kind, IR_S_ASSIGN); /* an expression statement */
    s = stmt(&p, 9);
    cr_assert_eq(s->kind, IR_S_PARALLEL);
    cr_assert(!s->branches[0].is_action); /* helper calls named run and start */
    cr_assert(!s->branches[1].is_action);
    s = stmt(&p, 10);
    cr_assert_eq(s->kind, IR_S_SPREAD);
    cr_assert_str_eq(s->item, "run");
    cr_assert_eq(s->action.call, IR_CALL_ACTION);
    parsed_free(&p);
}

struct err_case {
    const char *src;
    uint32_t line, col;
    const char *needle;
};

static const struct err_case syntax_errors[] = {
    {"fn main():\n    if x > 1\n        y = 2\n", 2, 13, "expected ':' after if condition"},
    {"fn main():\n    if x:\n        y = 1\n    elif y\n        z = 1\n", 4, 11,
     "expected ':' after elif condition"},
    {"fn main():\n    for x in xs\n        y = 2\n", 2, 16, "expected ':' after for loop header"},
    {"fn main():\n    for 1 in xs:\n        y = 2\n", 2, 9, "expected a loop variable name"},
    {"fn main():\n    for x of xs:\n        y = 2\n", 2, 11,
     "expected 'in' after the loop variable"},
    {"fn main():\n    while x\n        y = 2\n", 2, 12, "expected ':' after while condition"},
    {"fn main():\n    try\n        y = 2\n", 2, 8, "expected ':' after 'try'"},
    {"fn main():\n    try:\n        y = 2\n    z = 1\n", 4, 5,
     "expected 'except' or 'finally' after the try block"},
    {"fn main():\n    try:\n        y = 2\n    except E\n        z = 1\n", 4, 13,
     "expected ':' after except clause"},
    {"fn main():\n    try:\n        y = 2\n    except as e:\n        z = 1\n", 4, 12,
     "needs an error type before 'as'"},
    {"fn main():\n    try:\n        y = 2\n    except:\n        z = 1\n    except E:\n        z = "
     "2\n",
     6, 5, "bare 'except:' must be the last handler"},
    {"fn main():\n    if x:\n    y = 1\n", 3, 5, "expected an indented block after 'if'"},
    {"fn main()\n    y = 1\n", 1, 10, "expected ':' after function signature"},
    {"fn main(x):\n    y = 1\n", 1, 9, "parameters are declared as fn main(input: [a, b]"},
    {"fn (input: [x]):\n    y = 1\n", 1, 4, "expected a function name after 'fn'"},
    {"fn main(input: [x, x]):\n    y = 1\n", 1, 20, "duplicate name 'x'"},
    {"fn main():\n    x = 1\n        y = 2\n", 3, 9, "unexpected indent"},
    {"fn main():\n    else:\n        pass\n", 2, 5, "'else' without a matching 'if'"},
    {"fn main():\n    except:\n        pass\n", 2, 5, "'except' without a matching 'try'"},
    {"fn main():\n    fn inner():\n        pass\n", 2, 5, "functions must be defined at top level"},
    {"x = 1\n", 1, 1, "expected 'fn' or 'class' at top level"},
    {"class E:\n    pass\nfn main():\n    pass\n", 1, 8, "names its bases: class E(Exception)"},
    {"class E(Exception):\n    x = 1\nfn main():\n    pass\n", 2, 5,
     "an error type's body is `pass` or a docstring"},
    {"class E(Exception): pass\nfn main():\n    raise E(\"a\") from ValueError\n", 3, 18,
     "raise ... from ... is not supported"},
    {"", 1, 1, "no function defined"},
    {"# just a comment\n", 1, 1, "no function defined"},
    {"fn main():\n    d = {}\n    d['k'] = 1\n", 3, 5,
     "item assignment is not supported: values are immutable; build a new value instead, e.g. "
     "d = d | {'k': ...}"},
    {"fn main():\n    d = {}\n    d.k = 1\n", 3, 5, "attribute assignment is not supported"},
    {"fn main():\n    f(x) = 1\n", 2, 5, "cannot assign to an expression"},
    {"fn main():\n    a, a = [1, 2]\n", 2, 8, "appears twice in the assignment targets"},
    {"fn main():\n    a = b = 1\n", 2, 11, "chained assignment"},
    {"fn main():\n    a, b += 1\n", 2, 10, "augmented assignment takes exactly one name"},
    {"fn main():\n    a, += 1\n", 2, 8, "augmented assignment takes exactly one name"},
    {"fn main():\n    for , in x:\n        pass\n", 2, 9, "expected a loop variable name"},
    {"fn main():\n    x = )\n", 2, 9, "expected an expression"},
    {"fn main():\n    x = (1 + 2\n", 3, 1, "expected ')' to close '('"},
    {"fn main():\n    x = [1, 2\n", 3, 1, "expected ']' to close the list"},
    {"fn main():\n    x = {'a' 1}\n", 2, 14, "expected ':' after dict key"},
    {"fn main():\n    x = 1 +\n", 2, 12, "expected an expression"},
    {"fn main():\n    x = a b\n", 2, 11, "expected end of line after statement"},
    {"fn main():\n    x = 5s\n", 2, 9, "durations like '5s' are only allowed in policy brackets"},
    {"fn main():\n    x = [y for y in z]\n", 2, 12, "comprehensions are not supported"},
    {"fn main():\n    x = xs[1:2:3]\n", 2, 15, "slice steps"},
    {"fn main():\n    x = a.b()\n", 2, 12, "method calls are not supported"},
    {"fn main():\n    x = f(a=1, 2)\n", 2, 16, "positional argument follows keyword argument"},
    {"fn main():\n    x = f(a=1, a=2)\n", 2, 16, "keyword argument 'a' repeated"},
    {"fn main():\n    x = +1\n", 2, 9, "unary '+' is not supported"},
    {"fn main():\n    x = ()\n", 2, 10, "empty tuple"},
    {"fn main():\n    x = 1 + @m.a()\n", 2, 13, "an action call must be a statement of its own"},
    {"fn main():\n    r = @m.a(1)\n", 2, 14, "actions take keyword arguments only"},
    {"fn main():\n    r = @send(x=1)\n", 2, 9, "action names are module-qualified"},
    {"fn main():\n    r = @m.a(x=1, x=2)\n", 2, 19, "keyword argument 'x' repeated"},
    {"fn main():\n    r = @m.a() [retry: -1]\n", 2, 24, "retry count must be 0 or more"},
    {"fn main():\n    r = @m.a() [retry: x]\n", 2, 24, "expected a whole number of retries"},
    {"fn main():\n    r = @m.a() [timeout: 0s]\n", 2, 26, "timeout must be a positive duration"},
    {"fn main():\n    r = @m.a() [timeout: -5s]\n", 2, 27, "timeout must be a positive duration"},
    {"fn main():\n    r = @m.a() [timeout: 1.5s]\n", 2, 26, "whole number with a unit"},
    {"fn main():\n    r = @m.a() [retry: 1, backoff: 0ms]\n", 2, 36,
     "backoff must be a positive duration"},
    {"fn main():\n    r = @m.a() [timeout: 1s] [timeout: 2s]\n", 2, 30, "timeout given twice"},
    {"fn main():\n    r = @m.a() [deadline: 1s] [timeout: 2s] [deadline: 3s]\n", 2, 45,
     "deadline given twice"},
    {"fn main():\n    r = @m.a() [E -> deadline: 1s]\n", 2, 22,
     "a deadline applies to every attempt"},
    {"fn main():\n    r = @m.a() [deadline: 0s]\n", 2, 27, "deadline must be a positive duration"},
    {"fn main():\n    r = @m.a() [foo: 1]\n", 2, 20, "expected '->' after error types in policy"},
    {"fn main():\n    r = @m.a() [E -> timeout: 1s]\n", 2, 22, "cannot be limited to error types"},
    {"fn main():\n    r = @m.a() [retry: 1, jitter: 2]\n", 2, 27, "expected 'backoff:'"},
    {"fn main():\n    r = @m.a() [retry: 1, backoff: 1s, backoff: 2s]\n", 2, 40,
     "'backoff' appears twice in this policy"},
    {"fn main():\n    r = @m.a() [retry: 1, multiplier: 0.5]\n", 2, 39,
     "multiplier must be between 1 and 100"},
    {"fn main():\n    r = @m.a() [retry: 1, multiplier: 101]\n", 2, 39,
     "multiplier must be between 1 and 100"},
    {"fn main():\n    r = @m.a() [retry: 1, multiplier: 2s]\n", 2, 39,
     "expected a number for multiplier"},
    {"fn main():\n    r = @m.a() [retry: 1, max_backoff: 2h]\n", 2, 27,
     "max_backoff is at most 1h"},
    {"fn main():\n    r = @m.a() [retry: 1, max_backoff: 500ms]\n", 2, 16,
     "backoff is larger than max_backoff"},
    {"fn main():\n    r = @m.a() [retry: 2\n", 3, 1, "expected ']' to close the policy"},
    {"fn main():\n    r = @m.a() [timeout: 400d]\n", 2, 26,
     "timeout is too long (at most 366 days)"},
    {"fn main():\n    r = @m.a() [timeout: 4w]\n", 2, 26, "unit must be ms, s, m, h or d"},
    {"fn main():\n    x = wait \"a\"\n", 2, 14, "a signal name is written without quotes"},
    {"fn main():\n    x = wait a [retry: 3]\n", 2, 17, "a wait takes [timeout: D] and [default"},
    {"fn main():\n    x = wait a [default: 1]\n", 2, 17, "add [timeout: D]"},
    {"fn main():\n    x = wait a [timeout: 1s, timeout: 2s]\n", 2, 30,
     "timeout given twice for the same wait"},
    {"fn main():\n    x = wait a [key: 1]\n", 2, 17, "a wait takes [timeout: D]"},
    {"fn main():\n    x = wait event e\n", 2, 9, "wait event e needs [key: value]"},
    {"fn main():\n    x = wait event e, f [key: 1]\n", 2, 21,
     "a wait for an event waits for one event name"},
    {"fn main():\n    x = 1 + wait a\n", 2, 13, "a wait must be a statement of its own"},
    {"fn main():\n    x = wait a, a\n", 2, 17, "signal 'a' named twice in the same wait"},
    {"fn main():\n    h = start w()\n    x = 1 + wait for h\n", 3, 13,
     "a wait must be a statement of its own"},
    {"fn main():\n    h = start w()\n    x = wait for h [timeout: 1s]\n", 3, 20,
     "a wait for a child takes no brackets"},
    {"fn main():\n    x = wait for\n", 2, 17, "expected"},
    {"fn main():\n    x = wait a [timeout: 1s\n", 3, 1, "expected ']' to close the wait's options"},
    {"fn main():\n    signal a(payload=1)\n", 2, 5, "a signal needs to=instance_id"},
    {"fn main():\n    signal a(to=\"x\", by=1)\n", 2, 22,
     "a signal takes to=instance_id and optionally payload=value, not 'by'"},
    {"fn main():\n    signal a(\"x\")\n", 2, 14, "a signal takes keyword arguments only"},
    {"fn main():\n    signal \"a\"(to=1)\n", 2, 12, "a signal name is written without quotes"},
    {"fn main():\n    signal a.b(to=1)\n", 2, 13, "a signal name is one name"},
    {"fn main():\n    signal a(to=1) [retry: 2]\n", 2, 20, "[retry: N] does not apply to signal"},
    {"fn main():\n    signal a(to=1) [version: \"v\"]\n", 2, 20,
     "[version: ...] does not apply to signal"},
    {"fn main():\n    x = 1 + signal a(to=1)\n", 2, 13, "a signal must be a statement of its own"},
    {"fn main():\n    a, b = signal s(to=1)\n", 2, 5, "signal gives one value"},
    {"fn main():\n    parallel:\n        signal a(to=1)\n        @m.b()\n", 3, 9,
     "signal returns at once, so it does not belong in a parallel block"},
    {"fn main():\n    r = @m.a() [timeout: 9000h]\n", 2, 26,
     "timeout is too long (at most 366 days)"},
    {"fn main():\n    r = @m.a() [retry: 3, backoff: 2s, max_elapsed: 1s]\n", 2, 16,
     "max_elapsed is shorter than backoff"},
    {"fn main():\n    r = @m.a() [retry: 3, max_elapsed: 0s]\n", 2, 40,
     "max_elapsed must be a positive duration"},
    {"fn main():\n    r = @m.a() [retry: 3, max_elapsed: 1m, max_elapsed: 2m]\n", 2, 44,
     "'max_elapsed' appears twice"},
    {"fn main():\n    r = @m.a() [fail_fast]\n", 2, 16,
     "[fail_fast] applies to a spread or a parallel block"},
    {"fn main():\n    r = spread xs:x -> @m.a(v=x) [fail_fast] [fail_fast]\n", 2, 46,
     "[fail_fast] given twice"},
    {"fn main():\n    r = parallel [fail_fast] [fail_fast]:\n        @m.a()\n", 2, 30,
     "[fail_fast] given twice"},
    {"fn main():\n    a, b = parallel:\n        @m.a() [fail_fast]\n        @m.b()\n", 3, 16,
     "[fail_fast] applies to a spread or a parallel block"},
    {"fn main() [retry: 3]:\n    pass\n", 1, 11, "a function takes only [timeout: D]"},
    {"fn main() [timeout: 1s] [timeout: 2s]:\n    pass\n", 1, 25, "timeout given twice"},
    {"fn main() [timeout: 0s]:\n    pass\n", 1, 21, "timeout must be a positive duration"},
    {"fn main():\n    r = spread xs:x @m.a(v=x)\n", 2, 21, "expected '->' after the spread item"},
    {"fn main():\n    r = spread xs:x -> f(x)\n", 2, 24, "expected '@module.action(...)'"},
    {"fn main():\n    r = spread xs -> @m.a(v=x)\n", 2, 19,
     "expected ':' after the spread collection"},
    {"fn main():\n    r = parallel:\n        x = 1\n", 3, 9, "a parallel block holds only calls"},
    {"fn main():\n    r = parallel: @m.a()\n", 2, 19, "expected an indented block of calls"},
    /* child workflows */
    {"fn main():\n    x = start foo() [retry: 3]\n", 2, 21,
     "[retry: N] does not apply to start: start returns the child's id at once"},
    {"fn main():\n    x = start foo() [timeout: 5s]\n", 2, 21,
     "[timeout: D] does not apply to start"},
    {"fn main():\n    start foo() [deadline: 5s]\n", 2, 17,
     "[deadline: D] does not apply to start"},
    {"fn main():\n    x = spread xs:v -> start foo(v=v) [E -> retry: 1]\n", 2, 39,
     "[retry: N] does not apply to start"},
    {"fn main():\n    x = run foo() [deadline: 5s]\n", 2, 19,
     "[deadline: D] does not apply to run: use [timeout: D], which for a child workflow counts "
     "from when the child is started"},
    {"fn main():\n    x = @m.a() [version: \"v1\"]\n", 2, 16,
     "[version: ...] pins the version of a child workflow (run or start); an action has no "
     "version"},
    {"fn main():\n    x = run foo() [version: \"v 1\"]\n", 2, 29,
     "a version is 1 to 64 letters, digits, '_', '.' or '-'"},
    {"fn main():\n    x = run foo() [version: \"\"]\n", 2, 29, "a version is 1 to 64"},
    {"fn main():\n    x = run foo() [version: "
     "\"v12345678901234567890123456789012345678901234567890123456789012345\"]\n",
     2, 29, "a version is 1 to 64"},
    {"fn main():\n    x = start foo() [version: v2]\n", 2, 31,
     "expected a version string after 'version:'"},
    {"fn main():\n    x = run foo() [version: \"a\"] [version: \"b\"]\n", 2, 34,
     "version given twice for the same call"},
    {"fn main():\n    x = run foo() [E -> version: \"a\"]\n", 2, 25,
     "a version applies to the whole call"},
    {"fn main():\n    x = run foo() [timeout: 1s] [timeout: 2s]\n", 2, 33,
     "timeout given twice for the same call"},
    {"fn main():\n    x = run foo(1)\n", 2, 17, "child workflows take keyword arguments only"},
    {"fn main():\n    x = run foo(a=1, b)\n", 2, 22, "child workflows take keyword arguments only"},
    {"fn main():\n    x = start foo(a=1, a=2)\n", 2, 24, "keyword argument 'a' repeated"},
    {"fn main():\n    x = spread xs:v -> run (a=v)\n", 2, 28,
     "expected a workflow name after 'run'"},
    {"fn main():\n    x = spread xs:v -> start\n", 2, 29, "expected a workflow name after 'start'"},
    {"fn main():\n    x = run \"billing-refund\"(a=1)\n", 2, 13,
     "a workflow name is written without quotes"},
    {"fn main():\n    x = run foo\n", 2, 16, "expected '(' after the workflow name"},
    {"fn main():\n    x = run foo.(a=1)\n", 2, 17, "expected a name after '.' in workflow name"},
    {"fn main():\n    x = run "
     "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.a.b.c.d.e.f.g.h.i.j.k"
     ".l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z()\n",
     2, 13, "workflow name is too long (at most 128 characters)"},
    {"fn main():\n    y = 1 + run foo(x=1)\n", 2, 13,
     "a child workflow call must be a statement of its own"},
    {"fn main():\n    y = f(start foo())\n", 2, 11,
     "a child workflow call must be a statement of its own"},
    {"fn main():\n    return run foo()\n", 2, 12,
     "a child workflow call must be a statement of its own"},
    {"fn main():\n    a, b = parallel:\n        start foo()\n        @m.b()\n", 3, 9,
     "start returns at once, so it does not belong in a parallel block"},
    {"fn main():\n    a, b = start foo()\n", 2, 5,
     "start gives one value, the child's id (a string): it cannot be unpacked"},
    {"fn main():\n    a, = start foo()\n", 2, 5, "it cannot be unpacked"},
    {"fn main():\n    x = run foo() [fail_fast]\n", 2, 19,
     "[fail_fast] applies to a spread or a parallel block"},
    {"fn main():\n    run foo() + 1\n", 2, 15, "expected end of line after statement"},
    {"fn main():\n    x = " /* 150 nested parentheses */
     "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
     "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1",
     2, 0, "nested too deeply"},
};

static void
check_error(const struct err_case *c)
{
    struct parsed p;
    bool found = false;
    size_t i;

    parse(&p, c->src);
    cr_assert_eq(p.rv, CN_COMPILE, "accepted: %s", c->src);
    for (i = 0; i < p.diags.len; i++) {
        const struct ir_diag *d = &p.diags.items[i];
        if (strstr(d->msg, c->needle) != NULL) {
            found = true;
            cr_expect_eq(d->line, c->line, "'%s': line %u, want %u", c->needle, d->line, c->line);
            if (c->col != 0) {
                cr_expect_eq(d->col, c->col, "'%s': col %u, want %u", c->needle, d->col, c->col);
            }
        }
    }
    cr_expect(found, "no error containing '%s' for:\n%s\n(first error: %s)", c->needle, c->src,
              p.diags.len ? p.diags.items[0].msg : "none");
    parsed_free(&p);
}

Test(ir_parser, syntax_errors_with_positions)
{
    size_t i;

    for (i = 0; i < sizeof(syntax_errors) / sizeof(syntax_errors[0]); i++) {
        check_error(&syntax_errors[i]);
    }
}

/* Parses head, then unit n times, then tail. */
static void
parse_repeated(struct parsed *p, const char *head, const char *unit, int n, const char *tail)
{
    struct cn_buf src = CN_BUF_INIT;

    t_puts(&src, head);
    t_put_n(&src, unit, n);
    t_puts(&src, tail);
    parse(p, src.data);
    cn_buf_fini(&src);
}

Test(ir_parser, very_tall_expression_is_an_error_not_a_crash)
{
    struct parsed p;

    parse_repeated(&p, "fn main():\n    x = 1", " + 1", 5000, "\n");
    cr_assert_eq(p.rv, CN_COMPILE);
    cr_assert(strstr(p.diags.items[0].msg, "too deeply nested") != NULL, "%s",
              p.diags.items[0].msg);
    parsed_free(&p);
}

Test(ir_parser, deep_unary_chain_is_an_error_not_a_crash)
{
    struct parsed p;

    parse_repeated(&p, "fn main():\n    x = ", "not ", 100000, "a\n");
    cr_assert_eq(p.rv, CN_COMPILE);
    parsed_free(&p);
}

Test(ir_parser, depth_limit_does_not_shrink_after_errors)
{
    struct cn_buf src = CN_BUF_INIT;
    struct parsed p;
    int line, i;

    t_puts(&src, "fn main():\n");
    for (line = 0; line < 10; line++) { /* ten lines nested deeper than the limit */
        t_puts(&src, "    x = ");
        t_put_n(&src, "(", 120);
        t_puts(&src, "1");
        t_put_n(&src, ")", 120);
        t_puts(&src, "\n");
    }
    t_puts(&src, "    y = "); /* then one within it */
    t_put_n(&src, "[", 90);
    t_put_n(&src, "]", 90);
    t_puts(&src, "\n");
    parse(&p, src.data);
    cr_assert_eq(p.rv, CN_COMPILE);
    cr_assert_eq(p.diags.len, 10, "%zu errors", p.diags.len);
    for (i = 0; i < 10; i++) {
        cr_assert_neq(p.diags.items[i].line, 12, "the valid line was rejected");
    }
    parsed_free(&p);
    cn_buf_fini(&src);
}

Test(ir_parser, blocks_and_expressions_have_separate_limits)
{
    struct cn_buf src = CN_BUF_INIT;
    struct parsed p;
    int i;

    /* 60 nested ifs with a 60-deep expression inside: each within its own limit. */
    t_puts(&src, "fn main(input: [a]):\n");
    for (i = 1; i <= 60; i++) {
        t_put_n(&src, "    ", i);
        t_puts(&src, "if a:\n");
    }
    t_put_n(&src, "    ", 61);
    t_puts(&src, "x = ");
    t_put_n(&src, "[", 60);
    t_put_n(&src, "]", 60);
    t_puts(&src, "\n");
    parse_ok(&p, src.data);
    parsed_free(&p);
    cn_buf_fini(&src);
}

Test(ir_parser, several_errors_per_file)
{
    struct parsed p;

    parse(&p, "fn main():\n"
              "    if x\n"      /* missing ':' (line 2) */
              "        y = 1\n" /* skipped with its header */
              "    z = 1 +\n"   /* incomplete expression (line 4) */
              "    w = 2\n"
              "    @m.a(1)\n" /* positional action argument (line 6) */
              "fn other(:\n"  /* bad signature (line 7) */
              "    pass\n"
              "fn third():\n"
              "    d = {}\n"
              "    d['a'] = 1\n"); /* item assignment (line 11) */
    cr_assert_eq(p.rv, CN_COMPILE);
    cr_assert_eq(p.diags.len, 6, "%zu errors", p.diags.len);
    {
        /* One error on each broken line; lexer errors are reported before parser errors and
         * everything is sorted when formatted, so compare the set of lines. */
        const uint32_t want[] = {2, 4, 6, 7, 7, 11};
        uint32_t got[6];
        size_t i, j;
        for (i = 0; i < 6; i++) {
            got[i] = p.diags.items[i].line;
        }
        for (i = 0; i < 6; i++) {
            for (j = i + 1; j < 6; j++) {
                if (got[j] < got[i]) {
                    uint32_t t = got[i];
                    got[i] = got[j];
                    got[j] = t;
                }
            }
            cr_assert_eq(got[i], want[i], "error %zu on line %u, want %u", i, got[i], want[i]);
        }
    }
    parsed_free(&p);
}

Test(ir_parser, formatted_error_has_file_line_col_echo_and_caret)
{
    struct t_compiled c = t_compile("fn main():\n    if x > 1\n        y = 2\n");

    cr_assert_eq(c.rv, CN_COMPILE);
    cr_assert_str_eq(c.errors, "test.cairn:2:13: error: expected ':' after if condition\n"
                               "        if x > 1\n"
                               "                ^\n");
    t_compiled_free(&c);
}
