/* SPDX-License-Identifier: MIT */
/*
 * Executor tests: workflows run to completion against C actions (tests/support/exec_driver.c)
 * with a simulated clock. Every example from examples/ with several inputs; each control-flow
 * form; retries, backoff bounds, timeouts; errors in fan-outs; sleep; state size; and crash
 * replay (rebuild from the last snapshot plus recorded results after any step: same outcome,
 * no completed action requested again).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <jansson.h>
#include <msgpack.h>

#include "ir/base/buf.h"
#include "ir/error.h"
#include "runner/errors.h"
#include "tests/support/compile_util.h"
#include "tests/support/exec_driver.h"
#include "tests/support/leak.h"

TestSuite(exec, .fini = t_leak_check, .timeout = 120);

static const struct t_opts plain = {0};

static char *
example(const char *name)
{
    char rel[128];
    char *src;

    (void) snprintf(rel, sizeof(rel), "examples/%s.cairn", name);
    src = t_read_source_file(rel, NULL);
    cr_assert_not_null(src, "cannot read %s", rel);
    return src;
}

/* Runs src and asserts it completes with exactly `want` (JSON text). */
static void
expect_result_opts(const char *src, const char *input, const char *want, const struct t_opts *o)
{
    struct t_result r = t_run(src, input, o);

    cr_expect_eq(r.outcome, RN_COMPLETED, "outcome %d (%s) for input %s", r.outcome,
                 r.json ? r.json : "-", input);
    if (r.outcome == RN_COMPLETED) {
        cr_expect_str_eq(r.json, want, "input %s", input);
    }
    cr_expect_eq(r.duplicate_done, 0, "a completed action was requested again");
    t_result_free(&r);
}

static void
expect_result(const char *src, const char *input, const char *want)
{
    expect_result_opts(src, input, want, &plain);
}

/* Runs src and asserts it fails with an error of type `type`. */
static void
expect_failure(const char *src, const char *input, const char *type)
{
    struct t_result r = t_run(src, input, &plain);

    cr_expect_eq(r.outcome, RN_FAILED, "outcome %d (%s)", r.outcome, r.json ? r.json : "-");
    if (r.outcome == RN_FAILED) {
        cr_expect_str_eq(r.error_type, type, "error %s", r.json);
    }
    t_result_free(&r);
}

/* Starts an instance of dag with an empty input at t = 1000 ms into a fresh output *o. */
static void
start_empty(const struct ir_dag *dag, struct rn_iid id, const struct rn_exec_cfg *cfg,
            struct rn_instance **in, struct rn_step_out *o)
{
    struct ir_val input;

    memset(o, 0, sizeof(*o));
    o->result = ir_null();
    cr_assert_eq(ir_map_new(0, &input), CN_OK);
    cr_assert_eq(rn_instance_start(dag, id, input, cfg, 1000, in, o), CN_OK);
    ir_val_release(input);
}

/* ---- the examples ------------------------------------------------------------------------- */

/* The example cases (workflow, input, exact result) live in tests/fixtures/example_cases.json,
 * shared with the end-to-end test that runs them through cairn-runner and real workers. */
struct example_case {
    const char *name, *input, *want;
};

static json_t *
example_cases(size_t *n)
{
    char *text = t_read_source_file("tests/fixtures/example_cases.json", NULL);
    json_error_t je;
    json_t *cases;

    cr_assert_not_null(text, "cannot read tests/fixtures/example_cases.json");
    cases = json_loads(text, 0, &je);
    free(text);
    cr_assert_not_null(cases, "example_cases.json: %s (line %d)", je.text, je.line);
    cr_assert(json_is_array(cases) && json_array_size(cases) > 0);
    *n = json_array_size(cases);
    return cases;
}

static struct example_case
example_case(json_t *cases, size_t i)
{
    json_t *c = json_array_get(cases, i);
    struct example_case ec;

    ec.name = json_string_value(json_object_get(c, "workflow"));
    ec.input = json_string_value(json_object_get(c, "input"));
    ec.want = json_string_value(json_object_get(c, "want"));
    cr_assert(ec.name != NULL && ec.input != NULL && ec.want != NULL, "case %zu is incomplete", i);
    return ec;
}

Test(exec, examples_with_several_inputs)
{
    size_t i, n;
    json_t *cases = example_cases(&n);

    for (i = 0; i < n; i++) {
        struct example_case ec = example_case(cases, i);
        char *src = example(ec.name);
        expect_result(src, ec.input, ec.want);
        free(src);
    }
    json_decref(cases);
}

Test(exec, examples_answering_one_action_per_step)
{
    struct t_opts o = {0};
    size_t i;

    size_t n;
    json_t *cases = example_cases(&n);

    o.one_at_a_time = true;
    for (i = 0; i < n; i++) {
        struct example_case ec = example_case(cases, i);
        char *src = example(ec.name);
        expect_result_opts(src, ec.input, ec.want, &o);
        free(src);
    }
    json_decref(cases);
}

/* ---- crash replay -------------------------------------------------------------------------- */

/* Crashes after step k for every k the uninterrupted run has, and after every step. */
static void
replay_everywhere(const char *src, const char *input)
{
    struct t_result base = t_run(src, input, &plain), r;
    struct t_opts o = {0};
    int k;

    cr_assert(base.outcome == RN_COMPLETED || base.outcome == RN_FAILED);
    for (k = 1; k <= base.steps + 1; k++) {
        o.crash_after_step = k;
        r = t_run(src, input, &o);
        cr_expect_eq(r.outcome, base.outcome, "crash after step %d changed the outcome", k);
        cr_expect_str_eq(r.json, base.json, "crash after step %d changed the result", k);
        cr_expect_eq(r.duplicate_done, 0, "crash after step %d: a completed action ran again", k);
        t_result_free(&r);
    }
    o.crash_after_step = 0;
    o.crash_every_step = true;
    r = t_run(src, input, &o);
    cr_expect_eq(r.outcome, base.outcome, "crashing after every step changed the outcome");
    cr_expect_str_eq(r.json, base.json, "crashing after every step changed the result");
    cr_expect_eq(r.duplicate_done, 0);
    if (base.steps > 1) {
        cr_expect_geq(r.crashes, 1);
    }
    t_result_free(&r);
    t_result_free(&base);
}

Test(exec, crash_replay_of_every_example)
{
    size_t i, n;
    json_t *cases = example_cases(&n);

    for (i = 0; i < n; i++) {
        struct example_case ec = example_case(cases, i);
        char *src = example(ec.name);
        replay_everywhere(src, ec.input);
        free(src);
    }
    json_decref(cases);
}

Test(exec, crash_replay_of_retries_sleeps_fanout_and_failures)
{
    replay_everywhere("fn main():\n"
                      "    a = @std.flaky(key=\"k\", failures=2) [retry: 3, backoff: 50ms]\n"
                      "    sleep 1\n"
                      "    xs = spread [1, 2, 3, 4]:v -> @std.fail_if(value=v, bad=[])\n"
                      "    b, c = parallel:\n"
                      "        @std.echo(value=a)\n"
                      "        @std.add(a=1, b=2)\n"
                      "    return [a, xs, b, c]\n",
                      "{}");
    replay_everywhere("fn main():\n"
                      "    xs = spread [1, 2, 3]:v -> @std.fail_if(value=v, bad=[2, 3])\n"
                      "    return xs\n",
                      "{}");
    replay_everywhere("fn main():\n    r = @std.hang() [timeout: 2s] [ActionTimeout -> retry: 1]\n",
                      "{}");
}

/* ---- control flow -------------------------------------------------------------------------- */

Test(exec, branches_loops_break_continue)
{
    const char *src = "fn main(input: [n]):\n"
                      "    out = []\n"
                      "    for i in range(n):\n"
                      "        if i == 2:\n"
                      "            continue\n"
                      "        elif i > 5:\n"
                      "            break\n"
                      "        else:\n"
                      "            out = out + [i]\n"
                      "    j = 0\n"
                      "    while True:\n"
                      "        j += 1\n"
                      "        if j >= 3:\n"
                      "            break\n"
                      "    return [out, j]\n";

    expect_result(src, "{\"n\": 10}", "[[0, 1, 3, 4, 5], 3]");
    expect_result(src, "{\"n\": 0}", "[[], 3]");
}

Test(exec, for_over_dict_string_and_unpacking)
{
    expect_result("fn main(input: [d, s]):\n"
                  "    ks = []\n"
                  "    for k in d:\n"
                  "        ks = ks + [k]\n"
                  "    cs = []\n"
                  "    for i, c in enumerate(s):\n"
                  "        cs = cs + [str(i) + c]\n"
                  "    t = 0\n"
                  "    for a, b in items(d):\n"
                  "        t = t + b\n"
                  "    return [ks, cs, t]\n",
                  "{\"d\": {\"x\": 1, \"y\": 2}, \"s\": \"h\u00e9\"}",
                  "[[\"x\", \"y\"], [\"0h\", \"1\u00e9\"], 3]");
}

/* `a, = x` unpacks, as in Python: exactly one item, not the whole list (issue found by
 * differential testing against Python). Each binding form: assignment, for, action, spread,
 * parallel, helper call. */
Test(exec, a_trailing_comma_target_unpacks_exactly_one_item)
{
    const char *src = "fn main(input: [x]):\n"
                      "    a, = x\n"
                      "    return a\n";

    expect_result(src, "{\"x\": [5]}", "5");
    expect_result(src, "{\"x\": [[5, 6]]}", "[5, 6]");
    expect_result(src, "{\"x\": \"z\"}", "\"z\"");
    expect_failure(src, "{\"x\": [1, 2]}", "ValueError");
    expect_failure(src, "{\"x\": []}", "ValueError");
    expect_failure(src, "{\"x\": 5}", "TypeError");
    expect_result("fn main(input: [x]):\n"
                  "    t = []\n"
                  "    for a, in x:\n"
                  "        t = t + [a]\n"
                  "    for (b,) in x:\n"
                  "        t = t + [b]\n"
                  "    return t\n",
                  "{\"x\": [[1], [2]]}", "[1, 2, 1, 2]");
    expect_failure("fn main(input: [x]):\n"
                   "    for a, in x:\n"
                   "        pass\n",
                   "{\"x\": [[1, 2]]}", "ValueError");
    expect_result("fn one(input: [v]):\n"
                  "    return [v]\n"
                  "fn main():\n"
                  "    a, = @std.echo(value=[7])\n"
                  "    b, = parallel:\n"
                  "        @std.add(a=1, b=2)\n"
                  "    c, = spread [4]:i -> @std.add(a=i, b=i)\n"
                  "    d, = one(v=9)\n"
                  "    return [a, b, c, d]\n",
                  "{}", "[7, 3, 8, 9]");
    expect_failure("fn main():\n"
                   "    a, = @std.echo(value=[7, 8])\n",
                   "{}", "ValueError");
    expect_failure("fn main():\n"
                   "    c, = spread [1, 2]:i -> @std.noop()\n",
                   "{}", "ValueError");
}

Test(exec, return_from_nested_blocks)
{
    const char *src = "fn find(input: [xs, want]):\n"
                      "    for x in xs:\n"
                      "        if x == want:\n"
                      "            return \"found\"\n"
                      "    return \"missing\"\n"
                      "fn main(input: [xs]):\n"
                      "    for x in xs:\n"
                      "        while True:\n"
                      "            if x > 10:\n"
                      "                return find(xs, want=x)\n"
                      "            break\n"
                      "    return None\n";

    expect_result(src, "{\"xs\": [1, 20, 3]}", "\"found\"");
    expect_result(src, "{\"xs\": [1, 2]}", "null");
}

Test(exec, helpers_have_their_own_scope)
{
    expect_result("fn h(input: [a]):\n"
                  "    x = a * 10\n"
                  "    return x\n"
                  "fn nothing():\n"
                  "    y = 1\n"
                  "fn main():\n"
                  "    x = 1\n"
                  "    y = h(2)\n"
                  "    z = nothing()\n"
                  "    return [x, y, z]\n",
                  "{}", "[1, 20, null]");
}

Test(exec, parallel_with_helpers_list_and_unpacked)
{
    const char *src = "fn twice(input: [v]):\n"
                      "    r = @std.add(a=v, b=v)\n"
                      "    return r\n"
                      "fn main():\n"
                      "    all = parallel:\n"
                      "        @std.echo(value=\"a\")\n"
                      "        twice(v=5)\n"
                      "        twice(v=7)\n"
                      "    x, y = parallel:\n"
                      "        twice(v=1)\n"
                      "        @std.noop()\n"
                      "    return [all, x, y]\n";

    expect_result(src, "{}", "[[\"a\", 10, 14], 2, null]");
}

Test(exec, spread_results_in_input_order_and_empty)
{
    expect_result("fn main(input: [xs]):\n"
                  "    ys = spread xs:x -> @std.add(a=x, b=100)\n"
                  "    zs = spread []:x -> @std.add(a=x, b=1)\n"
                  "    ws = spread \"ab\":c -> @std.echo(value=c + c)\n"
                  "    return [ys, zs, ws]\n",
                  "{\"xs\": [3, 1, 2]}", "[[103, 101, 102], [], [\"aa\", \"bb\"]]");
}

Test(exec, spread_error_is_the_lowest_index_after_all_finish)
{
    struct t_result r =
        t_run("fn main():\n"
              "    xs = spread [1, 2, 3, 4]:v -> @std.fail_if(value=v, bad=[3, 2])\n"
              "    return xs\n",
              "{}", &plain);

    cr_assert_eq(r.outcome, RN_FAILED);
    cr_assert_str_eq(r.error_type, "BadValue");
    cr_assert(strstr(r.json, "\"message\": \"2\"") != NULL, "%s", r.json);
    cr_assert_eq(r.dispatches, 4); /* every element ran */
    t_result_free(&r);
}

Test(exec, try_except_first_match_bases_and_binding)
{
    const char *src = "fn main(input: [t, bases]):\n"
                      "    try:\n"
                      "        @std.fail(type=t, message=\"boom\", bases=bases)\n"
                      "        r = \"no error\"\n"
                      "    except KeyError as e:\n"
                      "        r = \"key:\" + e[\"message\"]\n"
                      "    except (IOError, ValueError) as e:\n"
                      "        r = \"io-or-value:\" + e.type\n"
                      "    except Exception as e:\n"
                      "        r = \"any:\" + e[\"type\"] + \":\" + str(isexception(e))\n"
                      "    return r\n";

    expect_result(src, "{\"t\": \"KeyError\", \"bases\": []}", "\"key:boom\"");
    expect_result(src, "{\"t\": \"HttpError\", \"bases\": [\"IOError\"]}",
                  "\"io-or-value:HttpError\"");
    expect_result(src, "{\"t\": \"ValueError\", \"bases\": []}", "\"io-or-value:ValueError\"");
    expect_result(src, "{\"t\": \"Odd\", \"bases\": []}", "\"any:Odd:True\"");
}

Test(exec, nested_try_rethrows_to_outer_and_through_helpers)
{
    const char *src = "fn risky(input: [t]):\n"
                      "    try:\n"
                      "        @std.fail(type=t, message=\"m\")\n"
                      "    except KeyError:\n"
                      "        return \"inner\"\n"
                      "    return \"unreached\"\n"
                      "fn main(input: [t]):\n"
                      "    try:\n"
                      "        try:\n"
                      "            r = risky(t)\n"
                      "        except IndexError:\n"
                      "            r = \"middle\"\n"
                      "    except ValueError:\n"
                      "        r = \"outer\"\n"
                      "    return r\n";

    expect_result(src, "{\"t\": \"KeyError\"}", "\"inner\"");
    expect_result(src, "{\"t\": \"IndexError\"}", "\"middle\"");
    expect_result(src, "{\"t\": \"ValueError\"}", "\"outer\"");
    expect_failure(src, "{\"t\": \"TypeError\"}", "TypeError");
}

Test(exec, inline_errors_are_catchable_and_uncaught_ones_fail)
{
    expect_result("fn main(input: [d]):\n"
                  "    try:\n"
                  "        x = 1 // 0\n"
                  "    except ArithmeticError as e:\n"
                  "        x = e[\"type\"]\n"
                  "    try:\n"
                  "        y = d[\"missing\"]\n"
                  "    except LookupError as e:\n"
                  "        y = e.type\n"
                  "    return [x, y]\n",
                  "{\"d\": {}}", "[\"ZeroDivisionError\", \"KeyError\"]");
    expect_failure("fn main():\n    x = [1][5]\n", "{}", "IndexError");
    expect_failure("fn main():\n    a, b = [1, 2, 3]\n", "{}", "ValueError");
}

Test(exec, input_must_be_an_object_with_every_input)
{
    expect_failure("fn main(input: [a]):\n    return a\n", "[1]", "TypeError");
    expect_failure("fn main(input: [a, b]):\n    return a\n", "{\"a\": 1}", "TypeError");
    expect_result("fn main(input: [a]):\n    return a\n", "{\"a\": 1, \"extra\": 2}", "1");
}

/* ---- retries, backoff, timeouts, sleep ----------------------------------------------------- */

Test(exec, retry_succeeds_on_attempt_k)
{
    struct t_result r =
        t_run("fn main():\n"
              "    r = @std.flaky(key=\"k\", failures=3) [retry: 5, backoff: 10ms]\n"
              "    return r\n",
              "{}", &plain);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_str_eq(r.json, "{\"key\": \"k\", \"attempt\": 4}");
    cr_assert_eq(r.dispatches, 4);
    cr_assert_eq(r.nbackoff, 3);
    t_result_free(&r);
}

Test(exec, retry_exhausts_and_fails_with_the_last_error)
{
    struct t_result r =
        t_run("fn main():\n"
              "    r = @std.flaky(key=\"k\", failures=9) [retry: 2, backoff: 10ms]\n"
              "    return r\n",
              "{}", &plain);

    cr_assert_eq(r.outcome, RN_FAILED);
    cr_assert_str_eq(r.error_type, "FlakyError");
    cr_assert(strstr(r.json, "attempt 3 failed") != NULL, "%s", r.json);
    cr_assert_eq(r.dispatches, 3);
    t_result_free(&r);
}

/* An error its worker marked not retryable ends the retries at once, whatever the policy; it
 * reaches the workflow with the mark, and an unmarked one is retried as before. */
Test(exec, an_error_marked_not_retryable_is_never_retried)
{
    struct t_result r = t_run("fn main():\n"
                              "    try:\n"
                              "        @std.fail(type=\"Declined\", retryable=False) "
                              "[retry: 5, backoff: 10ms] [Declined -> retry: 9]\n"
                              "    except Declined as e:\n"
                              "        return e[\"retryable\"]\n",
                              "{}", &plain);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_str_eq(r.json, "false");
    cr_assert_eq(r.dispatches, 1);
    t_result_free(&r);
    r = t_run("fn main():\n"
              "    @std.fail(type=\"Declined\", retryable=True) [retry: 2, backoff: 10ms]\n",
              "{}", &plain);
    cr_assert_eq(r.outcome, RN_FAILED);
    cr_assert_eq(r.dispatches, 3);
    t_result_free(&r);
}

Test(exec, typed_retry_policies_match_type_or_base_and_largest_count_wins)
{
    struct t_result r;

    /* A ValueError is not a KeyError: no retry. */
    r = t_run(
        "fn main():\n"
        "    @std.fail(type=\"ValueError\", message=\"v\") [KeyError -> retry: 5, backoff: 1ms]\n",
        "{}", &plain);
    cr_expect_eq(r.dispatches, 1);
    t_result_free(&r);
    /* A base matches; the larger of two matching brackets applies. */
    r = t_run(
        "fn main():\n"
        "    @std.fail(type=\"HttpError\", message=\"h\", bases=[\"IOError\"]) [retry: 1, backoff: "
        "1ms] [IOError -> retry: 4, backoff: 1ms]\n",
        "{}", &plain);
    cr_expect_eq(r.outcome, RN_FAILED);
    cr_expect_eq(r.dispatches, 5);
    t_result_free(&r);
}

Test(exec, backoff_is_exponential_with_full_jitter_within_bounds)
{
    struct t_result r = t_run("fn main():\n"
                              "    r = @std.flaky(key=\"k\", failures=8) [retry: 8, backoff: 1s]\n"
                              "    return r\n",
                              "{}", &plain);
    int i, nonzero = 0, below_half = 0;

    cr_assert_eq(r.outcome, RN_COMPLETED);
    cr_assert_eq(r.nbackoff, 8);
    for (i = 0; i < r.nbackoff; i++) {
        int64_t cap = 1000LL << i; /* after attempt i+1: base * 2^i */
        cr_expect_geq(r.backoff_ms[i], 0);
        cr_expect_leq(r.backoff_ms[i], cap, "retry %d waited %lld ms, cap %lld", i + 1,
                      (long long) r.backoff_ms[i], (long long) cap);
        nonzero += r.backoff_ms[i] > 0;
        below_half += r.backoff_ms[i] < cap / 2;
    }
    cr_expect_geq(nonzero, 7, "jitter collapsed to zero");
    cr_expect_geq(below_half, 1, "no delay below half its cap: not full jitter");
    t_result_free(&r);
}

Test(exec, backoff_grows_by_the_multiplier_up_to_max_backoff)
{
    /* caps: 100, 150, 225, 337 (thousandths, truncated), then 400 for good */
    static const int64_t caps[] = {100, 150, 225, 337, 400, 400, 400};
    struct t_result r = t_run("fn main():\n"
                              "    r = @std.flaky(key=\"k\", failures=7) "
                              "[retry: 7, backoff: 100ms, multiplier: 1.5, max_backoff: 400ms]\n"
                              "    c = @std.flaky(key=\"c\", failures=5) "
                              "[retry: 5, backoff: 50ms, multiplier: 1]\n"
                              "    return r\n",
                              "{}", &plain);
    int i, above_first = 0;

    cr_assert_eq(r.outcome, RN_COMPLETED);
    cr_assert_eq(r.nbackoff, 12);
    for (i = 0; i < 7; i++) {
        cr_expect_leq(r.backoff_ms[i], caps[i], "retry %d waited %lld ms, cap %lld", i + 1,
                      (long long) r.backoff_ms[i], (long long) caps[i]);
        above_first += r.backoff_ms[i] > 100;
    }
    cr_expect_geq(above_first, 1, "the delay never grew past the base");
    for (i = 7; i < 12; i++) { /* multiplier 1: the base delay every time */
        cr_expect_leq(r.backoff_ms[i], 50, "constant backoff waited %lld ms",
                      (long long) r.backoff_ms[i]);
    }
    t_result_free(&r);
}

Test(exec, backoff_is_capped_at_one_hour)
{
    struct t_result r = t_run("fn main():\n"
                              "    r = @std.flaky(key=\"k\", failures=3) [retry: 3, backoff: 50m]\n"
                              "    return r\n",
                              "{}", &plain);
    int i;

    cr_assert_eq(r.outcome, RN_COMPLETED);
    for (i = 0; i < r.nbackoff; i++) {
        cr_expect_leq(r.backoff_ms[i], 3600 * 1000);
    }
    t_result_free(&r);
}

Test(exec, timeouts_fail_the_attempt_and_are_retried_only_when_named)
{
    struct t_result r;

    r = t_run("fn main():\n    r = @std.hang() [timeout: 2s] [retry: 3, backoff: 1ms]\n", "{}",
              &plain);
    cr_expect_eq(r.outcome, RN_FAILED);
    cr_expect_str_eq(r.error_type, "ActionTimeout");
    cr_expect_eq(r.dispatches, 1, "an unnamed retry must not retry a timeout");
    cr_expect_geq(r.elapsed_ms, 2000);
    t_result_free(&r);
    r = t_run("fn main():\n"
              "    r = @std.hang() [timeout: 2s] [ActionTimeout -> retry: 2, backoff: 1ms]\n",
              "{}", &plain);
    cr_expect_eq(r.dispatches, 3);
    t_result_free(&r);
    r = t_run("fn main():\n"
              "    r = @std.hang() [timeout: 1s] [TimeoutError -> retry: 1, backoff: 1ms]\n",
              "{}", &plain);
    cr_expect_eq(r.dispatches, 2, "ActionTimeout is a TimeoutError");
    t_result_free(&r);
    expect_result("fn main():\n"
                  "    try:\n"
                  "        r = @std.hang() [timeout: 500ms]\n"
                  "    except ActionTimeout as e:\n"
                  "        r = \"timed out: \" + e.type\n"
                  "    return r\n",
                  "{}", "\"timed out: ActionTimeout\"");
}

/* The runner's own error types carry their bases from runner/errors.h (ir/ knows none of
 * them): an ActionTimeout is a TimeoutError whichever timer raised it. */
static void
expect_bases(struct ir_val err, const char *type, const char *want)
{
    struct cn_buf b = CN_BUF_INIT;
    const struct ir_val *bases = ir_map_get(err, "bases", 5);

    cr_assert(ir_is_error(err));
    cr_expect_str_eq(ir_error_type(err), type);
    cr_assert_not_null(bases);
    T_OK(ir_val_repr(*bases, &b));
    cr_expect_str_eq(b.data, want, "%s", type);
    cn_buf_fini(&b);
}

Test(exec, runner_errors_carry_their_bases)
{
    struct ir_val err;

    T_OK(rn_error_new(RN_ERR_ACTION_TIMEOUT, "late", &err));
    expect_bases(err, "ActionTimeout", "['TimeoutError', 'Exception']");
    cr_expect(ir_error_matches(err, "TimeoutError"));
    cr_expect(ir_error_matches(err, "ActionTimeout"));
    cr_expect_str_eq(ir_str_data(*ir_map_get(err, "message", 7)), "late");
    ir_val_release(err);
    T_OK(rn_error_new(RN_ERR_WORKER_LOST, NULL, &err));
    expect_bases(err, "WorkerLost", "['Exception']");
    cr_expect(!ir_error_matches(err, "TimeoutError"));
    ir_val_release(err);
    cr_expect_str_eq(rn_error_name(RN_ERR_STATE), "StateError");
    cr_expect_str_eq(rn_error_name(RN_ERR_WORKFLOW), "WorkflowError");
    T_OK(rn_error_new(RN_ERR_STEP_LIMIT, "spinning", &err));
    expect_bases(err, "StepLimitExceeded", "['Exception']"); /* nothing to catch it by */
    ir_val_release(err);
    T_ERR(rn_error_new(RN_ERR_STATE, "bad \xff", &err), CN_UTF8);

    /* By name: the table's types get its bases, others ir_raise's. */
    T_ERR(rn_error_raise(&err, "ActionTimeout", "late"), CN_RAISED);
    expect_bases(err, "ActionTimeout", "['TimeoutError', 'Exception']");
    ir_val_release(err);
    T_ERR(rn_error_raise(&err, "ValueError", "too large"), CN_RAISED);
    expect_bases(err, "ValueError", "['Exception']");
    ir_val_release(err);
    T_ERR(rn_error_raise(&err, "KeyError", "'k'"), CN_RAISED);
    expect_bases(err, "KeyError", "['LookupError', 'Exception']");
    ir_val_release(err);
}

/* One table names the outcomes: the words the database's status column and cairnctl use. */
Test(exec, outcome_names_round_trip)
{
    static const char *const want[] = {"running", "completed", "failed", "cancelled", "timed_out"};
    enum rn_outcome o;
    size_t i;

    cr_assert_eq(RN_OUTCOME_COUNT_, 5);
    cr_expect_eq(RN_RUNNING, 0, "snapshots store the number");
    for (i = 0; i < 5; i++) {
        cr_expect_str_eq(rn_outcome_name((enum rn_outcome) i), want[i]);
        cr_assert(rn_outcome_parse(want[i], &o));
        cr_expect_eq(o, (enum rn_outcome) i);
        cr_expect(rn_status_valid(want[i]));
    }
    cr_expect(!rn_outcome_parse("queued", &o));
    cr_expect(rn_status_valid("queued"));
    cr_expect(!rn_status_valid("Completed"));
    cr_expect(!rn_status_valid(""));
    cr_expect_str_eq(rn_outcome_name(RN_OUTCOME_COUNT_), "");
}

Test(exec, default_timeout_applies_without_a_bracket)
{
    struct t_opts o = {0};
    struct t_result r;

    o.default_timeout_ms = 1234;
    r = t_run("fn main():\n    r = @std.hang()\n", "{}", &o);
    cr_assert_eq(r.outcome, RN_FAILED);
    cr_assert_str_eq(r.error_type, "ActionTimeout");
    cr_assert_geq(r.elapsed_ms, 1234);
    cr_assert_lt(r.elapsed_ms, 1300);
    t_result_free(&r);
}

Test(exec, sleep_is_a_durable_timer)
{
    struct t_result r = t_run("fn main(input: [s]):\n    sleep s\n    sleep 0\n    return 1\n",
                              "{\"s\": 2.5}", &plain);

    cr_assert_eq(r.outcome, RN_COMPLETED);
    cr_assert_geq(r.elapsed_ms, 2500);
    cr_assert_lt(r.elapsed_ms, 2600);
    t_result_free(&r);
    expect_failure("fn main():\n    sleep -1\n", "{}", "ValueError");
    expect_failure("fn main():\n    sleep \"x\"\n", "{}", "TypeError");
}

/* ---- state size ---------------------------------------------------------------------------- */

Test(exec, loop_and_sequence_snapshots_do_not_grow_with_completed_steps)
{
    struct t_result r = t_run("fn main(input: [n]):\n"
                              "    total = 0\n"
                              "    for i in range(n):\n"
                              "        v = @std.add(a=i, b=1)\n"
                              "        total = total + v\n"
                              "    return total\n",
                              "{\"n\": 2000}", &plain);

    cr_assert_eq(r.outcome, RN_COMPLETED);
    cr_assert_str_eq(r.json, "2001000");
    cr_assert_leq(r.max_live_nodes, 2);
    /* The range list is the input's size; the rest stays constant: compare the first and the
     * largest snapshot of the run (counters grow from 1 to 3 bytes in msgpack). */
    cr_assert_leq(r.max_snapshot_bytes, r.first_snapshot_bytes + 64,
                  "snapshot grew from %zu to %zu bytes", r.first_snapshot_bytes,
                  r.max_snapshot_bytes);
    t_result_free(&r);
}

/* An attempt without [deadline] has no timer of its own (its timeout is the pool's, counted
 * from its start): a timer event that reaches it anyway (a stale one, e.g. the backoff timer
 * that dispatched it, delivered again after a restart) changes nothing. The race program found
 * attempts timed out "within a deadline of 0 ms" before this was checked. */
Test(exec, a_stale_timer_does_not_time_out_an_attempt_without_a_deadline)
{
    struct t_compiled c = t_compile("fn main():\n    r = @std.hang() [timeout: 1s]\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_event ev;
    struct rn_instance_stats st;
    struct rn_iid id = {{4}};

    start_empty(c.dag, id, &cfg, &in, &o);
    cr_assert_eq(o.actions.len, 1);
    cr_assert_eq(o.actions.items[0].timeout_ms, 1000, "the timeout goes with the request");
    cr_assert_eq(o.actions.items[0].deadline_ms, 0);
    cr_assert_eq(o.timers.len, 0, "no deadline timer without [deadline]");
    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_TIMER;
    ev.exec_id = o.actions.items[0].exec_id;
    ev.value = ir_null();
    rn_step_out_clear(&o);
    cr_assert_eq(rn_instance_step(in, &ev, 1, 999999, &o), CN_OK);
    cr_assert_eq(o.outcome, RN_RUNNING);
    rn_instance_stats(in, &st);
    cr_assert_eq(st.stale_events, 1);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

Test(exec, cancel_stops_the_instance)
{
    struct t_compiled c = t_compile("fn main():\n    r = @std.hang()\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_event ev;
    struct rn_iid id = {{1}};

    memset(&o, 0, sizeof(o));
    o.result = ir_null();
    cr_assert_eq(c.rv, CN_OK);
    cr_assert_eq(rn_instance_start(c.dag, id, ir_null(), &cfg, 1000, &in, &o), CN_OK);
    cr_assert_eq(o.outcome, RN_FAILED); /* null input: not an object */
    rn_instance_free(in);
    rn_step_out_clear(&o);
    {
        struct ir_val input;
        cr_assert_eq(ir_map_new(0, &input), CN_OK);
        cr_assert_eq(rn_instance_start(c.dag, id, input, &cfg, 1000, &in, &o), CN_OK);
        ir_val_release(input);
    }
    cr_assert_eq(o.actions.len, 1);
    ev.exec_id = o.actions.items[0].exec_id;
    rn_step_out_clear(&o);
    ev.kind = RN_EV_CANCEL;
    ev.attempt = 0;
    ev.value = ir_null();
    cr_assert_eq(rn_instance_step(in, &ev, 1, 2000, &o), CN_OK);
    cr_assert_eq(o.outcome, RN_CANCELLED);
    cr_assert_eq(o.cancels.len, 1);
    cr_assert(rn_xid_eq(o.cancels.items[0], ev.exec_id));
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

Test(exec, stale_and_duplicate_results_are_dropped)
{
    struct t_compiled c = t_compile("fn main():\n    r = @std.echo(value=1)\n    return r\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_event ev;
    struct rn_instance_stats st;
    struct rn_iid id = {{2}};

    start_empty(c.dag, id, &cfg, &in, &o);
    ev.exec_id = o.actions.items[0].exec_id;
    rn_step_out_clear(&o);
    ev.kind = RN_EV_RESULT;
    ev.attempt = 7; /* not the attempt that was dispatched */
    ev.value = ir_int(5);
    cr_assert_eq(rn_instance_step(in, &ev, 1, 1001, &o), CN_OK);
    cr_assert_eq(o.outcome, RN_RUNNING);
    ev.attempt = 1;
    cr_assert_eq(rn_instance_step(in, &ev, 1, 1002, &o), CN_OK);
    cr_assert_eq(o.outcome, RN_COMPLETED);
    rn_instance_stats(in, &st);
    cr_assert_eq(st.stale_events, 1);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* After a crash, an attempt whose deadline passed while no runner held the instance is not sent
 * to a worker again: hydration sets its deadline timer, due at once, which fails it with
 * ActionTimeout. One with time left is sent again with the deadline it had. */
Test(exec, hydration_times_out_attempts_past_their_deadline)
{
    struct t_compiled c = t_compile("fn main():\n"
                                    "    try:\n"
                                    "        r = @std.hang() [deadline: 1s]\n"
                                    "    except ActionTimeout:\n"
                                    "        r = \"timed out\"\n"
                                    "    return r\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL, *back = NULL;
    struct rn_step_out o;
    struct cn_buf snap = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    struct rn_iid id = {{3}};

    cr_assert_eq(c.rv, CN_OK);
    start_empty(c.dag, id, &cfg, &in, &o);
    cr_assert_eq(o.actions.len, 1);
    cr_assert_eq(rn_instance_snapshot(in, &snap), CN_OK);
    rn_step_out_clear(&o);

    cr_assert_eq(
        rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &cfg, 1500, &back, &o, &em), CN_OK,
        "%s", em.text);
    cr_assert_eq(o.actions.len, 1);
    cr_assert_eq(o.actions.items[0].deadline_ms, 2000);
    cr_assert_eq(o.outcome, RN_RUNNING);
    rn_instance_free(back);
    back = NULL;
    rn_step_out_clear(&o);

    cr_assert_eq(
        rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &cfg, 2500, &back, &o, &em), CN_OK,
        "%s", em.text);
    cr_assert_eq(o.actions.len, 0, "an attempt past its deadline was sent again");
    cr_assert_eq(o.timers.len, 1);
    cr_assert_eq(o.timers.items[0].at_ms, 2000);
    {
        struct rn_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.kind = RN_EV_TIMER;
        ev.exec_id = o.timers.items[0].exec_id;
        ev.value = ir_null();
        rn_step_out_clear(&o);
        cr_assert_eq(rn_instance_step(back, &ev, 1, 2500, &o), CN_OK);
    }
    cr_assert_eq(o.actions.len, 0);
    cr_assert_eq(o.done.len, 1); /* the timeout is recorded as the attempt's outcome */
    cr_assert(!o.done.items[0].ok);
    cr_assert_eq(o.outcome, RN_COMPLETED);
    cr_assert_str_eq(ir_str_data(o.result), "timed out");
    rn_step_out_fini(&o);
    rn_instance_free(back);
    rn_instance_free(in);
    cn_buf_fini(&snap);
    t_compiled_free(&c);
}

/* A snapshot taken mid-run of a workflow with a helper, a try, a sleep and a spread. */
static const char snapshot_src[] = "fn h(input: [v]):\n"
                                   "    try:\n"
                                   "        r = @std.echo(value=v)\n"
                                   "    except KeyError as e:\n"
                                   "        r = 0\n"
                                   "    return r\n"
                                   "fn main(input: [xs]):\n"
                                   "    a = h(1)\n"
                                   "    ys = spread xs:x -> @std.echo(value=x)\n"
                                   "    sleep 1\n"
                                   "    return [a, ys]\n";

Test(exec, corrupt_snapshots_are_rejected_not_crashed)
{
    struct t_compiled c = t_compile(snapshot_src);
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL, *back = NULL;
    struct rn_step_out o;
    struct cn_buf snap = CN_BUF_INIT;
    struct cn_errmsg em;
    struct ir_val input;
    struct cn_errmsg jem;
    struct rn_iid id = {{9, 9}};
    size_t n, i;
    unsigned seed = 99;
    int accepted = 0;

    memset(&o, 0, sizeof(o));
    o.result = ir_null();
    cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
    cr_assert_eq(ir_val_from_json("{\"xs\": [1, 2, 3]}", 17, &input, &jem), CN_OK);
    cr_assert_eq(rn_instance_start(c.dag, id, input, &cfg, 1000, &in, &o), CN_OK);
    ir_val_release(input);
    {
        /* Answer the helper's action so the spread starts: three running branches. */
        struct rn_event ev;
        ev.exec_id = o.actions.items[0].exec_id;
        ev.kind = RN_EV_RESULT;
        ev.attempt = 1;
        ev.value = ir_int(1);
        rn_step_out_clear(&o);
        cr_assert_eq(rn_instance_step(in, &ev, 1, 1001, &o), CN_OK);
        cr_assert_eq(o.actions.len, 3);
    }
    cr_assert_eq(rn_instance_snapshot(in, &snap), CN_OK);
    rn_step_out_clear(&o);
    /* The intact snapshot hydrates and re-requests the three running actions. */
    cr_assert_eq(
        rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &cfg, 2000, &back, &o, &em), CN_OK,
        "%s", em.text);
    cr_assert_eq(o.actions.len, 3);
    rn_instance_free(back);
    rn_step_out_clear(&o);
    for (n = 0; n < snap.len; n++) {
        cr_assert_neq(rn_instance_hydrate(c.dag, snap.data, n, NULL, 0, &cfg, 2000, &back, &o, &em),
                      CN_OK, "a %zu-byte prefix was accepted", n);
        rn_step_out_clear(&o);
    }
    for (i = 0; i < 4000; i++) {
        char *copy = malloc(snap.len);
        size_t at;
        cr_assert_not_null(copy);
        memcpy(copy, snap.data, snap.len);
        seed = seed * 1103515245u + 12345u;
        at = (seed >> 8) % snap.len;
        seed = seed * 1103515245u + 12345u;
        copy[at] = (char) (copy[at] ^ (char) (1 + (seed >> 16) % 255));
        if (rn_instance_hydrate(c.dag, copy, snap.len, NULL, 0, &cfg, 2000, &back, &o, &em) ==
            CN_OK) {
            struct cn_buf again = CN_BUF_INIT;
            accepted++;
            /* Whatever was accepted must be a usable instance. */
            cr_assert_eq(rn_instance_snapshot(back, &again), CN_OK);
            cn_buf_fini(&again);
            rn_instance_free(back);
        }
        rn_step_out_clear(&o);
        free(copy);
    }
    cr_assert_lt(accepted, 4000);
    /* Another format version is refused as such. */
    cr_assert_eq(rn_instance_hydrate(c.dag,
                                     "\x81\xa6"
                                     "format\x07",
                                     9, NULL, 0, &cfg, 2000, &back, &o, &em),
                 CN_VERSION);
    cn_buf_fini(&snap);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

Test(exec, values_too_deep_to_store_are_refused_where_they_would_be_stored)
{
    /* 31 wraps are storable (depth 32), the 32nd is not. */
    expect_result("fn main():\n"
                  "    x = []\n"
                  "    n = 0\n"
                  "    try:\n"
                  "        for i in range(100000):\n"
                  "            x = [x]\n"
                  "            n = n + 1\n"
                  "    except ValueError as e:\n"
                  "        return [n, e.message]\n",
                  "{}", "[31, \"value nested more than 32 levels deep cannot be stored\"]");
    expect_failure(
        "fn h(input: [v]):\n"
        "    return [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[v]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n"
        "fn main():\n    y = h(1)\n",
        "{}", "ValueError");
    expect_failure(
        "fn main():\n"
        "    "
        "@std.echo(value=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])\n",
        "{}", "ValueError");
}

/* ---- the inline budget --------------------------------------------------------------------- */

/* Runs src with a budget of `budget` inline nodes per step (0: the default) and asserts it
 * fails with StepLimitExceeded whose message names that budget and `line`. */
static void
expect_step_limit(const char *src, const char *input, uint64_t budget, unsigned line)
{
    struct t_opts o = {0};
    struct t_result r;
    char want[160];

    o.max_inline_steps = budget;
    r = t_run(src, input, &o);
    (void) snprintf(want, sizeof(want),
                    "\"more than %llu inline steps without waiting for an action, a sleep or a "
                    "timer (line %u)\"",
                    (unsigned long long) (budget ? budget : RN_EXEC_DEFAULT_MAX_INLINE_STEPS),
                    line);
    cr_assert_eq(r.outcome, RN_FAILED, "outcome %d (%s)", r.outcome, r.json ? r.json : "-");
    cr_expect_str_eq(r.error_type, "StepLimitExceeded", "%s", r.json);
    cr_expect_not_null(strstr(r.json, want), "%s lacks %s", r.json, want);
    cr_expect_not_null(strstr(r.json, "\"bases\": [\"Exception\"]"), "%s", r.json);
    t_result_free(&r);
}

Test(exec, an_inline_infinite_loop_fails_with_step_limit_exceeded_at_its_line)
{
    /* After the entry and `x = 0`, nodes alternate between the condition (line 3, odd counts)
     * and the body (line 4): the first node over the default 5 000 000 is the condition, the
     * first over 1001 the body. */
    expect_step_limit("fn main():\n    x = 0\n    while True:\n        x = x + 1\n", "{}", 0, 3);
    expect_step_limit("fn main():\n    x = 0\n    while True:\n        x = x + 1\n", "{}", 1001, 4);
    /* sleep 0 does not wait, so it does not end the step either. */
    expect_step_limit("fn main():\n    while True:\n        sleep 0\n", "{}", 1000, 3);
}

Test(exec, the_step_limit_cannot_be_caught)
{
    /* A catch-all inside the loop that swallows an inline error on every turn. */
    expect_step_limit("fn main():\n"
                      "    n = 0\n"
                      "    while True:\n"
                      "        try:\n"
                      "            n = n + 1\n"
                      "            x = 1 / 0\n"
                      "        except:\n"
                      "            n = n + 1\n",
                      "{}", 1000, 4);
    /* Handlers around the loop, naming it or anything, do not see it either. */
    expect_step_limit("fn main():\n"
                      "    try:\n"
                      "        while True:\n"
                      "            pass\n"
                      "    except StepLimitExceeded:\n"
                      "        return \"caught by name\"\n"
                      "    except Exception as e:\n"
                      "        return e.type\n"
                      "    except:\n"
                      "        return \"caught\"\n",
                      "{}", 1000, 3);
    /* Nor does a fan-out's aggregate: a spinning parallel branch fails the whole instance. */
    expect_step_limit("fn spin(input: [n]):\n"
                      "    while n > 0:\n"
                      "        n = n + 1\n"
                      "    return n\n"
                      "fn main():\n"
                      "    try:\n"
                      "        a, b = parallel:\n"
                      "            spin(1)\n"
                      "            @std.echo(value=2)\n"
                      "    except Exception as e:\n"
                      "        return e.type\n",
                      "{}", 1000, 3);
}

Test(exec, the_budget_is_per_step_so_a_loop_with_an_action_runs_on)
{
    struct t_opts o = {0};
    struct t_result r;

    /* 2 000 iterations of 6 nodes: 12 000 inline nodes in all, 12 times the budget, but the
     * action ends every step after 6 of them. */
    o.max_inline_steps = 1000;
    r = t_run("fn main(input: [n]):\n"
              "    total = 0\n"
              "    for i in range(n):\n"
              "        v = @std.add(a=i, b=1)\n"
              "        total = total + v\n"
              "        total = total + 0\n"
              "    return total\n",
              "{\"n\": 2000}", &o);
    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json ? r.json : "-");
    cr_expect_str_eq(r.json, "2001000");
    cr_expect_eq(r.dispatches, 2000);
    t_result_free(&r);
    /* The same loop without the action is over that budget. */
    expect_step_limit("fn main(input: [n]):\n"
                      "    total = 0\n"
                      "    for i in range(n):\n"
                      "        v = i + 1\n"
                      "        total = total + v\n"
                      "        total = total + 0\n"
                      "    return total\n",
                      "{\"n\": 2000}", 1000, 3);
}

Test(exec, a_workflow_at_its_budget_completes_and_one_node_over_fails)
{
    /* entry, x = 0, ten turns of (condition, body), the last condition, the loop exit, return
     * and output: 26 inline nodes in the one step. */
    static const char src[] = "fn main():\n"
                              "    x = 0\n"
                              "    while x < 10:\n"
                              "        x = x + 1\n"
                              "    return x\n";
    struct t_opts o = {0};

    o.max_inline_steps = 26;
    expect_result_opts(src, "{}", "10", &o);
    expect_step_limit(src, "{}", 25, 1); /* the 26th node is the output, at `fn main` */
}

Test(exec, ordinary_workflows_stay_far_below_the_default_budget)
{
    struct t_opts o = {0};
    size_t i, n;
    json_t *cases = example_cases(&n);

    /* Every example within 1% of the default... */
    o.max_inline_steps = RN_EXEC_DEFAULT_MAX_INLINE_STEPS / 100;
    for (i = 0; i < n; i++) {
        struct example_case ec = example_case(cases, i);
        char *src = example(ec.name);
        expect_result_opts(src, ec.input, ec.want, &o);
        free(src);
    }
    json_decref(cases);
    /* ...and a 10 000-item loop with a few statements each (about 80 000 nodes) within 2%. */
    o.max_inline_steps = RN_EXEC_DEFAULT_MAX_INLINE_STEPS / 50;
    expect_result_opts("fn main(input: [n]):\n"
                       "    d = {\"qty\": 3, \"name\": \"abc\"}\n"
                       "    total = 0\n"
                       "    for i in range(n):\n"
                       "        q = d[\"qty\"] * i\n"
                       "        total = total + q\n"
                       "        s = \"item \" + d[\"name\"]\n"
                       "        if total % 7 == 0:\n"
                       "            total = total + 1\n"
                       "    return total\n",
                       "{\"n\": 10000}", "149985001", &o);
}

/* The decision is a count, not a clock: replay from a snapshot taken before the loop (with or
 * without the result that started it) fails at the same node with the same error. */
Test(exec, replay_from_a_snapshot_before_the_loop_fails_the_same_way)
{
    struct t_compiled c = t_compile("fn main():\n"
                                    "    a = @std.echo(value=1)\n"
                                    "    x = 0\n"
                                    "    while True:\n"
                                    "        x = x + a\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000, .max_inline_steps = 1001};
    struct rn_instance *in = NULL, *back = NULL;
    struct rn_step_out o;
    struct cn_buf snap = CN_BUF_INIT, first = CN_BUF_INIT, again = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    struct ir_val input;
    struct rn_event ev;
    struct rn_done done;
    struct rn_iid id = {{4, 2}};

    memset(&o, 0, sizeof(o));
    o.result = ir_null();
    cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
    T_OK(ir_map_new(0, &input));
    T_OK(rn_instance_start(c.dag, id, input, &cfg, 1000, &in, &o));
    ir_val_release(input);
    cr_assert_eq(o.actions.len, 1);
    cr_assert(o.snapshot_needed);
    T_OK(rn_instance_snapshot(in, &snap));
    ev.kind = RN_EV_RESULT;
    ev.exec_id = o.actions.items[0].exec_id;
    ev.attempt = 1;
    ev.value = ir_int(1);
    rn_step_out_clear(&o);
    T_OK(rn_instance_step(in, &ev, 1, 1001, &o));
    cr_assert_eq(o.outcome, RN_FAILED);
    cr_assert_eq(o.done.len, 1);
    T_OK(ir_val_repr(o.result, &first));
    cr_assert_not_null(strstr(first.data, "StepLimitExceeded"), "%s", first.data);
    cr_assert_not_null(strstr(first.data, "more than 1001 inline steps"), "%s", first.data);
    done = o.done.items[0];
    done.value = ir_val_retain(done.value);
    rn_step_out_clear(&o);
    rn_instance_free(in);

    /* The result was recorded: hydration replays it and fails in the same call. */
    T_OK(rn_instance_hydrate(c.dag, snap.data, snap.len, &done, 1, &cfg, 5000, &back, &o, &em));
    cr_assert_eq(o.outcome, RN_FAILED);
    T_OK(ir_val_repr(o.result, &again));
    cr_expect_str_eq(again.data, first.data);
    rn_step_out_clear(&o);
    rn_instance_free(back);

    /* The result was lost: the action is asked for again, and its result fails the same way. */
    T_OK(rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &cfg, 5000, &back, &o, &em));
    cr_assert_eq(o.outcome, RN_RUNNING);
    cr_assert_eq(o.actions.len, 1);
    cr_assert(rn_xid_eq(o.actions.items[0].exec_id, ev.exec_id));
    rn_step_out_clear(&o);
    T_OK(rn_instance_step(back, &ev, 1, 5001, &o));
    cr_assert_eq(o.outcome, RN_FAILED);
    cn_buf_clear(&again);
    T_OK(ir_val_repr(o.result, &again));
    cr_expect_str_eq(again.data, first.data);

    ir_val_release(done.value);
    cn_buf_fini(&snap);
    cn_buf_fini(&first);
    cn_buf_fini(&again);
    rn_step_out_fini(&o);
    rn_instance_free(back);
    t_compiled_free(&c);
}

/* ---- fail_fast, max_elapsed, the previous error, workflow timeouts -------------------------- */

/* Without [fail_fast] every element runs; with it the first failure cancels the elements still
 * running and is raised at once (answering one action per step: 1 ok, 2 fails, 3 and 4 are
 * still out). */
Test(exec, fail_fast_cancels_the_running_siblings_and_raises_at_once)
{
    static const char *const src = "fn main():\n"
                                   "    xs = spread [1, 2, 3, 4]:v -> @std.fail_if(value=v, "
                                   "bad=[2, 3]) [fail_fast]\n"
                                   "    return xs\n";
    struct t_opts one = {.one_at_a_time = true};
    struct t_result r = t_run(src, "{}", &one);

    cr_assert_eq(r.outcome, RN_FAILED, "%s", r.json);
    cr_assert_str_eq(r.error_type, "BadValue");
    cr_assert(strstr(r.json, "\"message\": \"2\"") != NULL, "%s", r.json);
    cr_assert_eq(r.dispatches, 4);
    cr_assert_eq(r.cancels, 2, "elements 3 and 4 were still running");
    t_result_free(&r);

    /* A parallel block: the failing branch does not wait for the hanging one (whose attempt
     * would time out only after a minute), nor for the hangs in a helper's spread. */
    r = t_run("fn hangs(input: [n]):\n"
              "    xs = spread range(n):i -> @std.hang()\n"
              "    return xs\n"
              "fn main():\n"
              "    a, b, c = parallel [fail_fast]:\n"
              "        @std.hang()\n"
              "        hangs(n=3)\n"
              "        @std.fail(type=\"Declined\")\n"
              "    return a\n",
              "{}", &plain);
    cr_assert_eq(r.outcome, RN_FAILED, "%s", r.json);
    cr_assert_str_eq(r.error_type, "Declined");
    /* The driver's clock moves 1 ms a step; the hangs would time out after 60 s. */
    cr_assert_lt(r.elapsed_ms, 10, "raised at once, not after the hangs' timeouts: %lld ms",
                 (long long) r.elapsed_ms);
    cr_assert_eq(r.cancels, 4, "the hang and the helper's three hangs are cancelled");
    t_result_free(&r);
}

/* The error raised by [fail_fast] is an ordinary error: caught, the workflow goes on, and the
 * cancelled siblings' late answers change nothing. Crash replay gives the same outcome. */
Test(exec, a_fail_fast_error_can_be_caught_and_replays_the_same)
{
    static const char *const src = "fn main():\n"
                                   "    try:\n"
                                   "        xs = spread [1, 2, 3]:v -> @std.fail_if(value=v, "
                                   "bad=[1]) [retry: 1, backoff: 5ms] [fail_fast]\n"
                                   "    except BadValue as e:\n"
                                   "        three = @std.add(a=1, b=2)\n"
                                   "        return [\"caught\", e[\"message\"], three]\n";
    struct t_opts one = {.one_at_a_time = true};
    struct t_result r = t_run(src, "{}", &one);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_str_eq(r.json, "[\"caught\", \"1\", 3]");
    t_result_free(&r);
    replay_everywhere(src, "{}");
    replay_everywhere("fn main():\n"
                      "    a, b = parallel [fail_fast]:\n"
                      "        @std.flaky(key=\"k\", failures=1) [retry: 2, backoff: 10ms]\n"
                      "        @std.fail(type=\"Declined\")\n",
                      "{}");
}

/* max_elapsed bounds the time for retries from the first attempt's dispatch: the last retry
 * starts at the bound at the latest, and none after it, however many the count allows. */
Test(exec, max_elapsed_stops_retrying_at_its_bound)
{
    struct t_result r = t_run("fn main():\n"
                              "    r = @std.flaky(key=\"k\", failures=1000) "
                              "[retry: 1000, backoff: 1s, multiplier: 1, max_elapsed: 5s]\n",
                              "{}", &plain);
    int k;

    cr_assert_eq(r.outcome, RN_FAILED, "%s", r.json);
    cr_assert_str_eq(r.error_type, "FlakyError");
    /* The last attempt starts at the bound (its answer comes a driver step, 1 ms, later). */
    cr_assert(r.elapsed_ms >= 5000 && r.elapsed_ms <= 5002,
              "the last retry starts at the bound: %lld ms", (long long) r.elapsed_ms);
    cr_assert_lt(r.dispatches, 1000);
    cr_assert_geq(r.dispatches, 5);
    for (k = 0; k < r.nbackoff; k++) {
        cr_assert_leq(r.backoff_ms[k], 1000);
    }
    t_result_free(&r);
    /* Within the bound the retries go on as before. */
    r = t_run("fn main():\n"
              "    r = @std.flaky(key=\"k\", failures=2) [retry: 5, backoff: 10ms, "
              "max_elapsed: 1m]\n",
              "{}", &plain);
    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_eq(r.dispatches, 3);
    t_result_free(&r);
}

/* A retry's request carries the previous attempt's error; the first attempt's carries none.
 * The error survives a crash while the retry waits (it is in the snapshot). */
Test(exec, a_retry_sees_the_previous_attempts_error)
{
    static const char *const src = "fn main():\n"
                                   "    first = @std.recall(failures=0)\n"
                                   "    again = @std.recall(failures=2) [retry: 3, backoff: 10ms]\n"
                                   "    return [first, again]\n";
    struct t_result r = t_run(src, "{}", &plain);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_str_eq(r.json, "[null, \"attempt 2 failed\"]");
    t_result_free(&r);
    replay_everywhere(src, "{}");
}

/* RN_EV_TIMEOUT ends the instance timed_out with a WorkflowTimeout (a TimeoutError), and its
 * running attempts are cancelled. */
Test(exec, a_workflow_timeout_ends_the_instance_timed_out)
{
    struct t_compiled c = t_compile("fn main() [timeout: 30s]:\n    r = @std.hang()\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_event ev;
    struct rn_iid id = {{7}};
    struct cn_buf snap = CN_BUF_INIT;

    cr_assert_eq(c.rv, CN_OK);
    cr_assert_eq(c.dag->timeout_ms, 30000);
    start_empty(c.dag, id, &cfg, &in, &o);
    cr_assert_eq(o.actions.len, 1);
    memset(&ev, 0, sizeof(ev));
    ev.exec_id = o.actions.items[0].exec_id;
    rn_step_out_clear(&o);
    ev.kind = RN_EV_TIMEOUT;
    cr_assert_eq(ir_str_from_cstr("past 30 s", &ev.value), CN_OK);
    cr_assert_eq(rn_instance_step(in, &ev, 1, 31000, &o), CN_OK);
    ir_val_release(ev.value);
    cr_assert_eq(o.outcome, RN_TIMED_OUT);
    cr_assert_str_eq(rn_outcome_name(o.outcome), "timed_out");
    cr_assert_str_eq(ir_error_type(o.result), "WorkflowTimeout");
    cr_assert(ir_error_matches(o.result, "TimeoutError"));
    cr_assert_eq(o.cancels.len, 1);
    cr_assert(rn_xid_eq(o.cancels.items[0], ev.exec_id));
    cr_assert_eq(rn_instance_snapshot(in, &snap), CN_OK); /* a finished snapshot decodes */
    rn_instance_free(in);
    in = NULL;
    rn_step_out_clear(&o);
    cr_assert_eq(
        rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &cfg, 32000, &in, &o, NULL),
        CN_OK);
    cr_assert_eq(rn_instance_outcome(in), RN_TIMED_OUT);
    cn_buf_fini(&snap);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

static int
buf_write(void *data, const char *p, size_t n)
{
    return cn_buf_append(data, p, n) == CN_OK ? 0 : -1;
}

/* Rewrites a snapshot: as the previous release wrote it (format 1, nodes of 11 fields) when v1,
 * and with another outcome when outcome >= 0. */
static void
rewrite_snapshot(const struct cn_buf *snap, struct cn_buf *out, bool v1, int outcome)
{
    msgpack_unpacked u;
    msgpack_packer pk;
    const msgpack_object *root;
    uint32_t i, k;

    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, snap->data, snap->len, NULL), MSGPACK_UNPACK_SUCCESS);
    root = &u.data;
    msgpack_packer_init(&pk, out, buf_write);
    msgpack_pack_map(&pk, root->via.map.size);
    for (i = 0; i < root->via.map.size; i++) {
        const msgpack_object_kv *kv = &root->via.map.ptr[i];
        const char *key = kv->key.via.str.ptr;
        size_t kl = kv->key.via.str.size;
        msgpack_pack_object(&pk, kv->key);
        if (v1 && kl == 6 && memcmp(key, "format", 6) == 0) {
            msgpack_pack_uint32(&pk, 1);
        } else if (outcome >= 0 && kl == 7 && memcmp(key, "outcome", 7) == 0) {
            msgpack_pack_uint32(&pk, (uint32_t) outcome);
        } else if (v1 && kl == 5 && memcmp(key, "nodes", 5) == 0) {
            msgpack_pack_array(&pk, kv->val.via.array.size);
            for (k = 0; k < kv->val.via.array.size; k++) {
                const msgpack_object *n = &kv->val.via.array.ptr[k];
                uint32_t f;
                cr_assert_eq(n->via.array.size, 13);
                msgpack_pack_array(&pk, 11);
                for (f = 0; f < 11; f++) {
                    msgpack_pack_object(&pk, n->via.array.ptr[f]);
                }
            }
        } else {
            msgpack_pack_object(&pk, kv->val);
        }
    }
    msgpack_unpacked_destroy(&u);
}

static void
as_format_1(const struct cn_buf *snap, struct cn_buf *out)
{
    rewrite_snapshot(snap, out, true, -1);
}

/* An instance the previous release left running (a format 1 snapshot) resumes: its attempt is
 * sent again, and a retry waiting in backoff goes on without a previous error or bound. */
Test(exec, snapshots_of_the_previous_format_still_resume)
{
    struct t_compiled c = t_compile("fn main():\n"
                                    "    a = @std.hang()\n"
                                    "    b = @std.flaky(key=\"k\", failures=5) [retry: 9, "
                                    "max_elapsed: 1h]\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct cn_buf snap = CN_BUF_INIT, old = CN_BUF_INIT;
    struct rn_iid id = {{3}};
    struct cn_errmsg em = {{0}};
    struct rn_xid first;

    cr_assert_eq(c.rv, CN_OK);
    start_empty(c.dag, id, &cfg, &in, &o);
    cr_assert_eq(o.actions.len, 1);
    first = o.actions.items[0].exec_id;
    cr_assert_eq(rn_instance_snapshot(in, &snap), CN_OK);
    as_format_1(&snap, &old);
    rn_instance_free(in);
    in = NULL;
    rn_step_out_clear(&o);
    cr_assert_eq(rn_instance_hydrate(c.dag, old.data, old.len, NULL, 0, &cfg, 2000, &in, &o, &em),
                 CN_OK, "%s", em.text);
    cr_assert_eq(o.actions.len, 1, "the running attempt is sent again");
    cr_assert(rn_xid_eq(o.actions.items[0].exec_id, first));
    cr_assert_eq(o.actions.items[0].prev_error.type, IR_T_NULL);
    cn_buf_clear(&snap);
    cr_assert_eq(rn_instance_snapshot(in, &snap), CN_OK);
    cn_buf_clear(&old);
    as_format_1(&snap, &old); /* asserts the nodes are written back with 13 fields */
    rn_step_out_fini(&o);
    rn_instance_free(in);
    cn_buf_fini(&snap);
    cn_buf_fini(&old);
    t_compiled_free(&c);
}

/* ---- redrive ------------------------------------------------------------------------------- */

/* A run that failed after its retries is redriven: the failed action starts over with a fresh
 * budget (a new execution id, attempt 1) and the completed one is not run again. */
Test(exec, a_redrive_reruns_the_failed_action_with_a_fresh_budget_only)
{
    static const char *const src =
        "fn main():\n"
        "    a = @std.add(a=1, b=2)\n"
        "    b = @std.until(key=1, failures=3) [retry: 1, backoff: 10ms]\n"
        "    return [a, b]\n";
    struct t_opts o = {.redrives = 1};
    struct t_result r = t_run(src, "{}", &o);

    /* Calls 1 and 2 use up the first run's budget; the redrive's attempt 1 is call 3, which
     * still fails, and its fresh retry (call 4) succeeds. */
    cr_assert_eq(r.redrives, 1);
    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_str_eq(r.json, "[3, 4]");
    cr_assert_eq(r.dispatches, 5, "add once, until twice per run");
    cr_assert_eq(r.duplicate_done, 0, "no attempt with a recorded result was sent again");
    t_result_free(&r);
}

/* A fan-out branch that had already failed into its aggregate (the snapshot holds the error in
 * the slot) runs again; the branch that completed keeps its result. */
Test(exec, a_redrive_reruns_failed_branches_and_keeps_completed_ones)
{
    static const char *const src = "fn two(input: [k]):\n"
                                   "    a = @std.echo(value=k)\n"
                                   "    b = @std.echo(value=a)\n"
                                   "    return b\n"
                                   "fn main():\n"
                                   "    x, y = parallel:\n"
                                   "        @std.until(key=7, failures=1)\n"
                                   "        two(k=5)\n"
                                   "    zs = spread [1, 2]:v -> @std.until(key=v, failures=1)\n"
                                   "    return [x, y, zs]\n";
    struct t_opts o = {.redrives = 2, .one_at_a_time = true};
    struct t_result r = t_run(src, "{}", &o);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_eq(r.redrives, 2, "once for the parallel block, once for the spread");
    cr_assert_str_eq(r.json, "[2, 5, [2, 2]]");
    cr_assert_eq(r.dispatches, 8, "until x2, echo x2, then each spread element twice");
    cr_assert_eq(r.duplicate_done, 0);
    t_result_free(&r);
}

/* A redriven run replays like any other: a crash after any of its steps changes nothing. */
Test(exec, a_redriven_run_survives_crashes)
{
    static const char *const src = "fn main():\n"
                                   "    a = @std.echo(value=1)\n"
                                   "    b = @std.until(key=1, failures=1)\n"
                                   "    sleep 1\n"
                                   "    return [a, b]\n";
    int k;

    for (k = 1; k <= 6; k++) {
        struct t_opts o = {.redrives = 1, .crash_after_step = k};
        struct t_result r;
        t_until_reset();
        r = t_run(src, "{}", &o);
        cr_expect_eq(r.outcome, RN_COMPLETED, "crash after step %d: %s", k, r.json);
        cr_expect_str_eq(r.json, "[1, 2]", "crash after step %d", k);
        cr_expect_eq(r.duplicate_done, 0, "crash after step %d", k);
        t_result_free(&r);
    }
}

/* Found by fuzzing the redrive: a snapshot that says the instance finished but still lists live
 * nodes is refused, by hydration and redrive alike (finish() leaves none). */
Test(exec, a_finished_snapshot_with_live_nodes_is_refused)
{
    struct t_compiled c = t_compile("fn main():\n    a = @std.hang()\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct cn_buf snap = CN_BUF_INIT, bad = CN_BUF_INIT;
    struct rn_iid id = {{4}};
    struct cn_errmsg em = {{0}};

    cr_assert_eq(c.rv, CN_OK);
    start_empty(c.dag, id, &cfg, &in, &o);
    cr_assert_eq(rn_instance_snapshot(in, &snap), CN_OK);
    rn_instance_free(in);
    in = NULL;
    rewrite_snapshot(&snap, &bad, false, RN_COMPLETED);
    rn_step_out_clear(&o);
    cr_assert_eq(rn_instance_hydrate(c.dag, bad.data, bad.len, NULL, 0, &cfg, 2000, &in, &o, &em),
                 CN_RANGE);
    cr_assert(strstr(em.text, "a finished instance has live nodes") != NULL, "%s", em.text);
    cr_assert_eq(rn_instance_redrive(c.dag, bad.data, bad.len, NULL, 0, &cfg, 2000, &in, &o, &em),
                 CN_RANGE);
    rn_step_out_fini(&o);
    cn_buf_fini(&snap);
    cn_buf_fini(&bad);
    t_compiled_free(&c);
}

/* Found by review: a fail_fast block inside a helper that is itself a fan-out branch (its
 * aggregate is not node 0) drops the nested fan-out's branches too, and the snapshot it leaves
 * hydrates (crash replay after every step). */
Test(exec, fail_fast_in_a_nested_branch_drops_everything_under_it)
{
    static const char *const src = "fn inner2():\n"
                                   "    xs = spread [1, 2]:i -> @std.hang()\n"
                                   "    return xs\n"
                                   "fn inner():\n"
                                   "    a, b = parallel [fail_fast]:\n"
                                   "        inner2()\n"
                                   "        @std.fail(type=\"Declined\")\n"
                                   "    return a\n"
                                   "fn waits():\n"
                                   "    r = @std.echo(value=1)\n"
                                   "    return r\n"
                                   "fn main():\n"
                                   "    try:\n"
                                   "        x, y = parallel:\n"
                                   "            waits()\n"
                                   "            inner()\n"
                                   "    except Declined:\n"
                                   "        return \"caught\"\n";
    struct t_result r = t_run(src, "{}", &plain);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_str_eq(r.json, "\"caught\"");
    cr_assert_eq(r.cancels, 2, "both nested hangs are cancelled");
    cr_assert_lt(r.elapsed_ms, 10, "not after the hangs' timeouts: %lld ms",
                 (long long) r.elapsed_ms);
    t_result_free(&r);
    replay_everywhere(src, "{}");
}

/* Found by review: a sibling whose request this same step made is dropped from the step's
 * output (a cancel would reach the pool before the request and miss it). */
Test(exec, fail_fast_drops_requests_made_in_the_same_step)
{
    struct t_result r = t_run("fn main():\n"
                              "    try:\n"
                              "        xs = spread [1, 0, 2]:v -> @std.echo(value=10 // v) "
                              "[fail_fast]\n"
                              "    except ZeroDivisionError:\n"
                              "        return \"zero\"\n",
                              "{}", &plain);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json);
    cr_assert_str_eq(r.json, "\"zero\"");
    cr_assert_eq(r.dispatches, 0, "the element before the failing one was never sent");
    t_result_free(&r);
}
