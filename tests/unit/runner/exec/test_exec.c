/* SPDX-License-Identifier: MIT */
/*
 * Executor tests: workflows run to completion against C actions (tests/support/exec_driver.c)
 * with a simulated clock. Every example from examples/ with several inputs; each control-flow
 * form; retries, backoff bounds, timeouts; errors in fan-outs; sleep; state size; and crash
 * replay (rebuild from the last snapshot plus recorded results after any step: same outcome,
 * no completed action requested again).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <jansson.h>
#include <msgpack.h>

#include "ir/base/buf.h"
#include "ir/error.h"
#include "runner/exec/errors.h"
#include "runner/exec/exec_int.h"
#include "tests/support/compile_util.h"
#include "tests/support/exec_driver.h"
#include "tests/support/leak.h"
#include "tests/support/mutate.h"
#include "tests/support/snapshot_workflow.h"

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

/* What replay_everywhere saw of the shard's ways of writing less. */
struct replay_seen {
    int unwritten; /* runs whose first step went unwritten (recorded by the claim) */
    int replayed;  /* resumes that replayed steps recorded by their results */
};

/* Crashes after step k for every k the uninterrupted run has, and after every step: with every
 * step written; as the shard runs a new instance (a first step that reads no clock is recorded
 * by its claim, not a snapshot), then also right after that first step; and as the shard runs
 * every step (a step that reads no clock and consumes only its own results is recorded by them,
 * at most three in a row here, so that the snapshots in between are crossed too). */
static void
replay_everywhere(const char *src, const char *input, struct replay_seen *seen)
{
    static const char *const modes[] = {"", " (first step recorded by the claim)",
                                        " (steps recorded by their results)"};
    struct t_result base = t_run(src, input, &plain), r;
    int k, mode;

    cr_assert(base.outcome == RN_COMPLETED || base.outcome == RN_FAILED);
    for (mode = 0; mode < 3; mode++) {
        struct t_opts o = {
            .first_step_by_claim = mode > 0, .steps_by_results = mode == 2, .replay_max = 3};
        const char *m = modes[mode];

        for (k = 0; k <= base.steps + 1; k++) {
            o.crash_after_start = k == 0;
            o.crash_after_step = k;
            if (k == 0 && mode == 0) {
                continue;
            }
            r = t_run(src, input, &o);
            cr_expect_eq(r.outcome, base.outcome, "crash after step %d changed the outcome%s", k,
                         m);
            cr_expect_str_eq(r.json, base.json, "crash after step %d changed the result%s", k, m);
            cr_expect_eq(r.duplicate_done, 0, "crash after step %d: a completed action ran again%s",
                         k, m);
            if (seen != NULL) {
                seen->unwritten += r.first_unwritten;
                seen->replayed += r.replayed;
            }
            t_result_free(&r);
        }
        o.crash_after_start = false;
        o.crash_after_step = 0;
        o.crash_every_step = true;
        r = t_run(src, input, &o);
        cr_expect_eq(r.outcome, base.outcome, "crashing after every step changed the outcome%s", m);
        cr_expect_str_eq(r.json, base.json, "crashing after every step changed the result%s", m);
        cr_expect_eq(r.duplicate_done, 0);
        if (base.steps > 1) {
            cr_expect_geq(r.crashes, 1);
        }
        t_result_free(&r);
    }
    t_result_free(&base);
}

Test(exec, crash_replay_of_every_example)
{
    size_t i, n;
    struct replay_seen seen = {0, 0};
    json_t *cases = example_cases(&n);

    for (i = 0; i < n; i++) {
        struct example_case ec = example_case(cases, i);
        char *src = example(ec.name);
        replay_everywhere(src, ec.input, &seen);
        free(src);
    }
    json_decref(cases);
    /* Most examples start with an action and no deadline: their first step went unwritten.
     * They are short, so few go on to a step recorded by its result before a crash; some do. */
    cr_expect_gt(seen.unwritten, (int) n, "%d runs resumed without a snapshot", seen.unwritten);
    cr_expect_gt(seen.replayed, 0, "%d resumes replayed steps", seen.replayed);
}

/* Steps recorded by their results in loops, caught errors and parallel branches answered
 * together (several results in one write, each its own step), crossed by crashes everywhere. */
Test(exec, crash_replay_of_steps_recorded_by_their_results)
{
    struct replay_seen seen = {0, 0};

    replay_everywhere("fn main(input: [xs]):\n"
                      "    total = 0\n"
                      "    for x in xs:\n"
                      "        y = @std.add(a=x, b=total)\n"
                      "        try:\n"
                      "            z = @std.fail_if(value=y, bad=[3, 10])\n"
                      "        except BadValue:\n"
                      "            z = 0\n"
                      "        total = total + z\n"
                      "    a, b = parallel:\n"
                      "        @std.echo(value=total)\n"
                      "        @std.add(a=total, b=1)\n"
                      "    c = @std.echo(value=a + b)\n"
                      "    return [total, a, b, c]\n",
                      "{\"xs\": [1, 2, 3, 4, 5]}", &seen);
    cr_expect_geq(seen.replayed, 5, "%d resumes replayed steps", seen.replayed);
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
                      "{}", NULL);
    replay_everywhere("fn main():\n"
                      "    xs = spread [1, 2, 3]:v -> @std.fail_if(value=v, bad=[2, 3])\n"
                      "    return xs\n",
                      "{}", NULL);
    replay_everywhere("fn main():\n    r = @std.hang() [timeout: 2s] [ActionTimeout -> retry: 1]\n",
                      "{}", NULL);
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

/* raise: a declared error type with its bases (declared and built in, Python's order),
 * message as str(), details; caught by a base; a bare raise re-raises the caught error even
 * after its `as` name is rebound, also from inside a nested try's body; raise e of a caught
 * value; raise of something else is a TypeError; an uncaught one fails the instance; raised in
 * a helper, it reaches the caller's handler. */
Test(exec, raise_makes_and_re_raises_errors_as_python_does)
{
    const char *decl = "class Declined(ValueError):\n"
                       "    pass\n"
                       "class Expired(Declined, LookupError):\n"
                       "    'the card expired'\n";
    char src[1024];

    (void) snprintf(src, sizeof(src),
                    "%sfn main(input: [n]):\n"
                    "    try:\n"
                    "        raise Expired(n, {\"n\": n})\n"
                    "    except LookupError as e:\n"
                    "        return [e.type, e[\"message\"], e[\"bases\"], e[\"details\"]]\n",
                    decl);
    expect_result(src, "{\"n\": 7}",
                  "[\"Expired\", \"7\", [\"Declined\", \"ValueError\", \"LookupError\", "
                  "\"Exception\"], {\"n\": 7}]");
    (void) snprintf(src, sizeof(src),
                    "%sfn main():\n"
                    "    try:\n"
                    "        try:\n"
                    "            raise Declined()\n"
                    "        except ValueError as e:\n"
                    "            e = 5\n"
                    "            try:\n"
                    "                x = 1\n"
                    "                raise\n"
                    "            except KeyError:\n"
                    "                pass\n"
                    "    except Declined as f:\n"
                    "        return [f.type, f[\"message\"]]\n",
                    decl);
    expect_result(src, "{}", "[\"Declined\", \"\"]");
    expect_result("fn main():\n"
                  "    try:\n"
                  "        x = {}[\"k\"]\n"
                  "    except KeyError as e:\n"
                  "        try:\n"
                  "            raise e\n"
                  "        except LookupError as g:\n"
                  "            return g[\"message\"]\n",
                  "{}", "\"'k'\"");
    expect_failure("fn main():\n    raise 5\n", "{}", "TypeError");
    expect_failure("class Stop(RuntimeError): pass\nfn main():\n    raise Stop(\"no\")\n", "{}",
                   "Stop");
    expect_result("fn check(input: [v]):\n"
                  "    if v < 0:\n"
                  "        raise ValueError(\"negative\")\n"
                  "    return v\n"
                  "fn main(input: [v]):\n"
                  "    try:\n"
                  "        r = check(v)\n"
                  "    except ValueError as e:\n"
                  "        r = e[\"message\"]\n"
                  "    return r\n",
                  "{\"v\": -1}", "\"negative\"");
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

/* The runner's own error types carry their bases from runner/exec/errors.h (ir/ knows none of
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
    memset(&ev, 0, sizeof(ev)); /* every field: `recorded` too */
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

Test(exec, corrupt_snapshots_are_rejected_not_crashed)
{
    struct t_compiled c = t_compile(t_snapshot_src);
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
        memset(&ev, 0, sizeof(ev));
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
        char *copy = t_flip_copy(snap.data, snap.len, &seed);

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
    memset(&ev, 0, sizeof(ev));
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
    replay_everywhere(src, "{}", NULL);
    replay_everywhere("fn main():\n"
                      "    a, b = parallel [fail_fast]:\n"
                      "        @std.flaky(key=\"k\", failures=1) [retry: 2, backoff: 10ms]\n"
                      "        @std.fail(type=\"Declined\")\n",
                      "{}", NULL);
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
    replay_everywhere(src, "{}", NULL);
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
    replay_everywhere(src, "{}", NULL);
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

/* ---- child workflows ------------------------------------------------------------------------ */

/* The executor's side of `run wf(...)` and `start wf(...)`: the request it makes (a child call,
 * not a worker's action), the outcome that comes back (recorded by the child, so no done
 * record), the child's errors as exceptions, retries that start a new child per attempt,
 * fan-outs, what a cancel or fail_fast stops, crash replay, and what an instance waits for. */

static const struct rn_exec_cfg child_cfg = {.default_timeout_ms = 60000};

/* Compiles src (it must compile) and starts it with an empty input at t = 1000 ms. */
static struct t_compiled
child_start(const char *src, struct rn_iid id, struct rn_instance **in, struct rn_step_out *o)
{
    struct t_compiled c = t_compile(src);

    cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
    start_empty(c.dag, id, &child_cfg, in, o);
    return c;
}

/* Applies one event to in at now_ms into the cleared output *o. */
static void
child_step(struct rn_instance *in, const struct rn_event *ev, int64_t now_ms, struct rn_step_out *o)
{
    rn_step_out_clear(o);
    T_OK(rn_instance_step(in, ev, 1, now_ms, o));
}

/* Answers attempt `attempt` of call exec_id with v (borrowed): a RESULT, or an ERROR. */
static void
child_answer(struct rn_instance *in, struct rn_xid exec_id, uint32_t attempt, bool ok,
             struct ir_val v, bool recorded, int64_t now_ms, struct rn_step_out *o)
{
    struct rn_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.kind = ok ? RN_EV_RESULT : RN_EV_ERROR;
    ev.exec_id = exec_id;
    ev.attempt = attempt;
    ev.value = v;
    ev.recorded = recorded;
    child_step(in, &ev, now_ms, o);
}

/* The value v as JSON text, in *b (cleared first). */
static const char *
child_json(struct ir_val v, struct cn_buf *b)
{
    cn_buf_clear(b);
    T_OK(ir_val_to_json(v, b, NULL));
    return b->data;
}

/* The error a parent's `run` gets when its child `workflow` failed with `type` (bases_json: the
 * child error's bases) or ended `o` (RN_CANCELLED, RN_TIMED_OUT): what rn_child_outcome makes
 * for the child's final write. */
static struct ir_val
child_error(enum rn_outcome o, const char *workflow, const char *type, const char *bases_json)
{
    struct ir_val bases, cause, out;
    struct rn_iid child = {{0xcc, 1}};
    bool ok = true;

    T_OK(ir_val_from_json(bases_json, strlen(bases_json), &bases, NULL));
    T_OK(ir_error_new(type, "card refused", bases, ir_null(), &cause));
    T_OK(rn_child_outcome(o, cause, child, workflow, &ok, &out));
    cr_assert_not(ok);
    ir_val_release(cause);
    return out;
}

/* The declined payment of the examples: a child's PaymentDeclined (a ValueError). */
static struct ir_val
declined(void)
{
    return child_error(RN_FAILED, "billing.charge", "PaymentDeclined",
                       "[\"ValueError\", \"Exception\"]");
}

/* The string value of map key k in v (a map). */
static const char *
kwarg_str(struct ir_val kw, const char *k)
{
    const struct ir_val *v = ir_map_get(kw, k, strlen(k));

    cr_assert_not_null(v, "no kwarg %s", k);
    cr_assert_eq(v->type, IR_T_STR, "kwarg %s is not a string", k);
    return ir_str_data(*v);
}

static int64_t
kwarg_int(struct ir_val kw, const char *k)
{
    const struct ir_val *v = ir_map_get(kw, k, strlen(k));

    cr_assert_not_null(v, "no kwarg %s", k);
    cr_assert_eq(v->type, IR_T_INT, "kwarg %s is not an int", k);
    return v->u.i;
}

/* A `run` call is a request for a child, not a worker: its workflow name, its pinned version
 * (NULL without one), its inputs as kwargs, the call's own [timeout] (0 without: the runner's
 * default action timeout is not a child's), no deadline. Its outcome, recorded by the child,
 * makes no done record; one that was not recorded makes one. */
Test(exec, a_run_call_requests_its_child_with_inputs_version_and_timeout)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xc1}};
    struct cn_buf b = CN_BUF_INIT;
    struct rn_xid first, second;
    struct ir_val v;
    struct t_compiled c = child_start(
        "fn main():\n"
        "    x = run billing.charge(order=\"o-1\", amount=2 * 21) [timeout: 10m] [version: "
        "\"v2\"]\n"
        "    y = run audit.note(x=x)\n"
        "    return [x, y]\n",
        id, &in, &o);
    const struct rn_action_req *a;

    cr_assert_eq(o.outcome, RN_RUNNING);
    cr_assert_eq(o.actions.len, 1);
    a = &o.actions.items[0];
    cr_expect_eq(a->call, IR_CALL_RUN);
    cr_expect_str_eq(a->action, "billing.charge");
    cr_assert_not_null(a->version);
    cr_expect_str_eq(a->version, "v2");
    cr_expect_eq(a->attempt, 1);
    cr_expect_eq(a->timeout_ms, 600000, "the call's [timeout] goes with the request");
    cr_expect_eq(a->deadline_ms, 0);
    cr_expect_eq(ir_map_len(a->kwargs), 2);
    cr_expect_str_eq(kwarg_str(a->kwargs, "order"), "o-1");
    cr_expect_eq(kwarg_int(a->kwargs, "amount"), 42);
    cr_expect_eq(a->prev_error.type, IR_T_NULL);
    cr_expect(o.snapshot_needed, "a child call must be durable before it starts");
    cr_expect_eq(o.timers.len, 0, "no timer for a child call without a deadline");
    cr_expect_eq(o.done.len + o.cancels.len + o.child_cancels.len, 0);
    first = a->exec_id;

    /* Recorded by the child's final write: applied, nothing recorded again. */
    T_OK(ir_str_from_cstr("receipt-1", &v));
    child_answer(in, first, 1, true, v, true, 2000, &o);
    ir_val_release(v);
    cr_assert_eq(o.outcome, RN_RUNNING);
    cr_expect_eq(o.done.len, 0, "a child's recorded outcome got a done record");
    cr_assert_eq(o.actions.len, 1);
    a = &o.actions.items[0];
    cr_expect_eq(a->call, IR_CALL_RUN);
    cr_expect_str_eq(a->action, "audit.note");
    cr_expect_null(a->version, "no [version]: the newest");
    cr_expect_eq(a->timeout_ms, 0, "no [timeout]: the default action timeout is not a child's");
    cr_expect_eq(a->deadline_ms, 0);
    cr_expect_str_eq(kwarg_str(a->kwargs, "x"), "receipt-1");
    cr_expect_not(rn_xid_eq(a->exec_id, first));
    cr_expect(o.snapshot_needed);
    second = a->exec_id;

    /* Not recorded (an answer that came some other way): the step records it. */
    child_answer(in, second, 1, true, ir_int(7), false, 3000, &o);
    cr_assert_eq(o.outcome, RN_COMPLETED);
    cr_assert_eq(o.done.len, 1);
    cr_expect(rn_xid_eq(o.done.items[0].exec_id, second));
    cr_expect_eq(o.done.items[0].attempt, 1);
    cr_expect(o.done.items[0].ok);
    cr_expect_eq(o.done.items[0].value.u.i, 7);
    cr_expect_str_eq(child_json(o.result, &b), "[\"receipt-1\", 7]");

    cn_buf_fini(&b);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* A failed child raises a ChildWorkflowError in its parent, caught by the child's own error
 * type, by that type's bases and by ChildWorkflowError; uncaught it fails the parent with it. */
Test(exec, a_failed_child_is_caught_by_its_type_its_bases_and_child_workflow_error)
{
    static const char *const handlers[] = {"PaymentDeclined", "ValueError", "ChildWorkflowError",
                                           "Exception"};
    struct cn_buf b = CN_BUF_INIT;
    struct ir_val err = declined();
    size_t i;

    cr_expect_str_eq(ir_error_type(err), "ChildWorkflowError");
    for (i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
        struct rn_instance *in = NULL;
        struct rn_step_out o;
        struct rn_iid id = {{0xc2, (uint8_t) i}};
        char src[512];
        struct t_compiled c;

        (void) snprintf(src, sizeof(src),
                        "fn main():\n"
                        "    try:\n"
                        "        r = run billing.charge(n=1)\n"
                        "    except %s as e:\n"
                        "        r = [\"caught\", e.type, e[\"details\"][\"workflow\"], "
                        "e[\"details\"][\"error\"][\"type\"]]\n"
                        "    return r\n",
                        handlers[i]);
        c = child_start(src, id, &in, &o);
        cr_assert_eq(o.actions.len, 1);
        child_answer(in, o.actions.items[0].exec_id, 1, false, err, true, 2000, &o);
        cr_expect_eq(o.outcome, RN_COMPLETED, "except %s: outcome %d (%s)", handlers[i], o.outcome,
                     child_json(o.result, &b));
        cr_expect_str_eq(child_json(o.result, &b),
                         "[\"caught\", \"ChildWorkflowError\", \"billing.charge\", "
                         "\"PaymentDeclined\"]",
                         "except %s", handlers[i]);
        cr_expect_eq(o.done.len, 0, "the child recorded its outcome");
        rn_step_out_fini(&o);
        rn_instance_free(in);
        t_compiled_free(&c);
    }

    /* A handler for another type does not catch it; uncaught it fails the parent with it. */
    {
        struct rn_instance *in = NULL;
        struct rn_step_out o;
        struct rn_iid id = {{0xc2, 0xff}};
        struct t_compiled c = child_start("fn main():\n"
                                          "    try:\n"
                                          "        r = run billing.charge(n=1)\n"
                                          "    except (KeyError, TimeoutError):\n"
                                          "        r = \"wrong handler\"\n"
                                          "    return r\n",
                                          id, &in, &o);
        cr_assert_eq(o.actions.len, 1);
        child_answer(in, o.actions.items[0].exec_id, 1, false, err, true, 2000, &o);
        cr_assert_eq(o.outcome, RN_FAILED, "%s", child_json(o.result, &b));
        cr_expect_str_eq(ir_error_type(o.result), "ChildWorkflowError");
        cr_expect(ir_error_matches(o.result, "PaymentDeclined"));
        cr_expect(ir_error_matches(o.result, "ValueError"));
        cr_expect_str_eq(ir_str_data(*ir_map_get(o.result, "message", 7)),
                         ir_str_data(*ir_map_get(err, "message", 7)));
        rn_step_out_fini(&o);
        rn_instance_free(in);
        t_compiled_free(&c);
    }
    ir_val_release(err);
    cn_buf_fini(&b);
}

/* rn_child_id names the child of one attempt of one call: the same inputs give the same id (a
 * replay starts nothing new), another attempt or call another; a version 8 UUID. */
Test(exec, child_ids_are_deterministic_per_call_and_attempt)
{
    struct rn_xid x1 = {{1, 2, 3, 4, 5, 6, 0x47, 8, 0x89, 10, 11, 12, 13, 14, 15, 16}};
    struct rn_xid x2 = x1;
    struct rn_iid a = rn_child_id(x1, 1), b = rn_child_id(x1, 1);
    uint32_t k;

    x2.b[15] ^= 1; /* differs in the second half only */
    cr_expect(rn_iid_eq(a, b));
    cr_expect_not(rn_iid_eq(a, rn_child_id(x1, 2)));
    cr_expect_not(rn_iid_eq(a, rn_child_id(x2, 1)));
    cr_expect_not(rn_iid_eq(rn_child_id(x1, 2), rn_child_id(x2, 2)));
    x2 = x1;
    x2.b[0] ^= 0x80; /* and in the first half only */
    cr_expect_not(rn_iid_eq(a, rn_child_id(x2, 1)));
    for (k = 1; k <= 64; k++) {
        struct rn_iid id = rn_child_id(x1, k);
        cr_expect_eq(id.b[6] >> 4, 8, "attempt %u: version nibble %x", k, id.b[6] >> 4);
        cr_expect_eq(id.b[8] & 0xc0, 0x80, "attempt %u: not the RFC 4122 variant", k);
        if (k > 1) {
            cr_expect_not(rn_iid_eq(id, rn_child_id(x1, k - 1)), "attempts %u and %u", k - 1, k);
        }
    }
}

/* `[retry: N]` on a run: a failed child is followed, after the backoff, by a new attempt of the
 * same call, which names a new child; the last attempt's error is raised. */
Test(exec, a_retried_run_starts_a_new_child_per_attempt)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xc3}};
    struct ir_val err = declined();
    struct rn_event ev;
    struct rn_xid x;
    struct rn_iid child1, child2;
    int64_t at;
    struct t_compiled c = child_start("fn main():\n"
                                      "    r = run billing.charge(n=1) [retry: 2, backoff: 1s]\n"
                                      "    return r\n",
                                      id, &in, &o);

    cr_assert_eq(o.actions.len, 1);
    x = o.actions.items[0].exec_id;
    cr_assert_eq(o.actions.items[0].attempt, 1);
    child1 = rn_child_id(x, 1);

    child_answer(in, x, 1, false, err, true, 2000, &o);
    cr_assert_eq(o.outcome, RN_RUNNING);
    cr_expect_eq(o.actions.len, 0, "retried before its backoff");
    cr_expect_eq(o.done.len, 0);
    cr_expect(o.snapshot_needed);
    cr_assert_eq(o.timers.len, 1);
    cr_expect_eq(o.timers.items[0].kind, RN_TIMER_BACKOFF);
    cr_expect(rn_xid_eq(o.timers.items[0].exec_id, x));
    at = o.timers.items[0].at_ms;
    cr_expect(at >= 2000 && at <= 3000, "backoff timer at %lld", (long long) at);

    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_TIMER;
    ev.exec_id = x;
    ev.value = ir_null();
    child_step(in, &ev, at, &o);
    cr_assert_eq(o.actions.len, 1);
    cr_expect(rn_xid_eq(o.actions.items[0].exec_id, x), "a retry is the same call");
    cr_expect_eq(o.actions.items[0].attempt, 2);
    cr_expect_eq(o.actions.items[0].call, IR_CALL_RUN);
    cr_expect_str_eq(o.actions.items[0].action, "billing.charge");
    cr_expect_str_eq(ir_error_type(o.actions.items[0].prev_error), "ChildWorkflowError");
    child2 = rn_child_id(x, 2);
    cr_expect_not(rn_iid_eq(child1, child2), "a retry must start a new child");

    /* The second child fails too: a third attempt; the stale answer of the first is dropped. */
    child_answer(in, x, 1, true, ir_int(1), true, at + 1, &o);
    cr_expect_eq(o.outcome, RN_RUNNING);
    cr_expect_eq(o.actions.len + o.timers.len + o.done.len, 0, "a stale answer was applied");
    child_answer(in, x, 2, false, err, true, at + 2, &o);
    cr_assert_eq(o.timers.len, 1);
    ev.exec_id = x;
    child_step(in, &ev, o.timers.items[0].at_ms, &o);
    cr_assert_eq(o.actions.len, 1);
    cr_expect_eq(o.actions.items[0].attempt, 3);
    child_answer(in, x, 3, false, err, true, at + 5000, &o);
    cr_assert_eq(o.outcome, RN_FAILED);
    cr_expect_str_eq(ir_error_type(o.result), "ChildWorkflowError");
    cr_expect_eq(o.timers.len, 0);

    ir_val_release(err);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* A child that timed out raises ChildWorkflowTimeout, which an untyped [retry: N] does not
 * retry (like ActionTimeout), one that names it (or TimeoutError) does; a child's cancel
 * raises ChildWorkflowCancelled. */
Test(exec, child_workflow_timeout_is_retried_only_when_named)
{
    static const struct {
        const char *policy;
        bool retried;
    } cases[] = {
        {"[retry: 2, backoff: 1ms]", false},
        {"[ChildWorkflowTimeout -> retry: 2, backoff: 1ms]", true},
        {"[TimeoutError -> retry: 1, backoff: 1ms]", true},
        {"[ChildWorkflowError -> retry: 1, backoff: 1ms]", true},
        {"[ValueError -> retry: 1, backoff: 1ms]", false},
    };
    struct ir_val late = child_error(RN_TIMED_OUT, "billing.charge", "WorkflowTimeout",
                                     "[\"TimeoutError\", \"Exception\"]");
    struct cn_buf b = CN_BUF_INIT;
    size_t i;

    cr_expect_str_eq(ir_error_type(late), "ChildWorkflowTimeout");
    cr_expect(ir_error_matches(late, "TimeoutError"));
    cr_expect(ir_error_matches(late, "ChildWorkflowError"));
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rn_instance *in = NULL;
        struct rn_step_out o;
        struct rn_iid id = {{0xc4, (uint8_t) i}};
        char src[256];
        struct t_compiled c;

        (void) snprintf(src, sizeof(src),
                        "fn main():\n    r = run billing.charge(n=1) [timeout: 5s] %s\n"
                        "    return r\n",
                        cases[i].policy);
        c = child_start(src, id, &in, &o);
        cr_assert_eq(o.actions.len, 1);
        cr_expect_eq(o.actions.items[0].timeout_ms, 5000);
        child_answer(in, o.actions.items[0].exec_id, 1, false, late, true, 6001, &o);
        if (cases[i].retried) {
            cr_expect_eq(o.outcome, RN_RUNNING, "%s: not retried", cases[i].policy);
            cr_expect_eq(o.timers.len, 1, "%s: no backoff timer", cases[i].policy);
        } else {
            cr_expect_eq(o.outcome, RN_FAILED, "%s: retried", cases[i].policy);
            cr_expect_eq(o.timers.len, 0, "%s: a backoff timer", cases[i].policy);
            if (o.outcome == RN_FAILED) {
                cr_expect_str_eq(ir_error_type(o.result), "ChildWorkflowTimeout");
            }
        }
        rn_step_out_fini(&o);
        rn_instance_free(in);
        t_compiled_free(&c);
    }

    /* Caught as a timeout; a cancelled child as ChildWorkflowCancelled. */
    {
        struct rn_instance *in = NULL;
        struct rn_step_out o;
        struct rn_iid id = {{0xc4, 0xff}};
        struct ir_val gone = child_error(RN_CANCELLED, "billing.charge", "Cancelled", "[]");
        struct t_compiled c = child_start("fn main():\n"
                                          "    out = []\n"
                                          "    try:\n"
                                          "        r = run billing.charge(n=1)\n"
                                          "    except TimeoutError as e:\n"
                                          "        out = out + [e.type]\n"
                                          "    try:\n"
                                          "        r = run billing.charge(n=2)\n"
                                          "    except ChildWorkflowCancelled as e:\n"
                                          "        out = out + [e.type]\n"
                                          "    return out\n",
                                          id, &in, &o);
        cr_assert_eq(o.actions.len, 1);
        child_answer(in, o.actions.items[0].exec_id, 1, false, late, true, 2000, &o);
        cr_assert_eq(o.actions.len, 1);
        child_answer(in, o.actions.items[0].exec_id, 1, false, gone, true, 3000, &o);
        cr_assert_eq(o.outcome, RN_COMPLETED, "%s", child_json(o.result, &b));
        cr_expect_str_eq(child_json(o.result, &b),
                         "[\"ChildWorkflowTimeout\", \"ChildWorkflowCancelled\"]");
        ir_val_release(gone);
        rn_step_out_fini(&o);
        rn_instance_free(in);
        t_compiled_free(&c);
    }
    ir_val_release(late);
    cn_buf_fini(&b);
}

/* `start` asks for a child too (call START) and waits until it exists: its result, the
 * child's id, binds and the instance goes on. */
Test(exec, a_start_call_waits_for_the_child_id_and_binds_it)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xc5}};
    struct rn_instance_waits w;
    struct cn_buf b = CN_BUF_INIT;
    struct ir_val v;
    char text[37];
    struct t_compiled c = child_start("fn main():\n"
                                      "    cid = start audit.record(order=\"o-1\") [version: "
                                      "\"v3\"]\n"
                                      "    n = @t.count(id=cid)\n"
                                      "    return [cid, n]\n",
                                      id, &in, &o);
    struct rn_xid x;

    cr_assert_eq(o.outcome, RN_RUNNING);
    cr_assert_eq(o.actions.len, 1);
    cr_expect_eq(o.actions.items[0].call, IR_CALL_START);
    cr_expect_str_eq(o.actions.items[0].action, "audit.record");
    cr_expect_str_eq(o.actions.items[0].version, "v3");
    cr_expect_eq(o.actions.items[0].timeout_ms, 0);
    cr_expect_str_eq(kwarg_str(o.actions.items[0].kwargs, "order"), "o-1");
    cr_expect(o.snapshot_needed);
    x = o.actions.items[0].exec_id;
    rn_instance_waits(in, &w);
    cr_expect_eq(w.children, 1, "a start waits for its child to exist");
    cr_expect_eq(w.actions, 0);

    cn_uuid_format(rn_child_id(x, 1).b, text);
    T_OK(ir_str_from_cstr(text, &v));
    child_answer(in, x, 1, true, v, false, 2000, &o);
    ir_val_release(v);
    cr_assert_eq(o.outcome, RN_RUNNING);
    cr_expect_eq(o.done.len, 1, "the id is recorded as the call's result");
    cr_assert_eq(o.actions.len, 1);
    cr_expect_eq(o.actions.items[0].call, IR_CALL_ACTION);
    cr_expect_str_eq(kwarg_str(o.actions.items[0].kwargs, "id"), text);
    rn_instance_waits(in, &w);
    cr_expect_eq(w.children, 0);
    cr_expect_eq(w.actions, 1);
    child_answer(in, o.actions.items[0].exec_id, 1, true, ir_int(3), false, 3000, &o);
    cr_assert_eq(o.outcome, RN_COMPLETED);
    {
        char want[64];
        (void) snprintf(want, sizeof(want), "[\"%s\", 3]", text);
        cr_expect_str_eq(child_json(o.result, &b), want);
    }
    cn_buf_fini(&b);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* A spread over `run` asks for one child per item; their outcomes, in any order, fill the
 * aggregate in item order. */
Test(exec, a_spread_over_run_completes_in_item_order_whatever_the_arrival_order)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xc6}};
    struct cn_buf b = CN_BUF_INIT;
    struct rn_xid xs[3];
    static const int order[3] = {2, 0, 1};
    size_t i;
    struct t_compiled c =
        child_start("fn main():\n"
                    "    xs = spread [10, 20, 30]:i -> run calc.square(v=i) [version: \"v1\"]\n"
                    "    return xs\n",
                    id, &in, &o);

    cr_assert_eq(o.actions.len, 3);
    for (i = 0; i < 3; i++) {
        const struct rn_action_req *a = &o.actions.items[i];
        int64_t v = kwarg_int(a->kwargs, "v");
        cr_assert(v == 10 || v == 20 || v == 30, "v=%lld", (long long) v);
        cr_expect_eq(a->call, IR_CALL_RUN);
        cr_expect_str_eq(a->action, "calc.square");
        cr_expect_str_eq(a->version, "v1");
        cr_expect_eq(a->attempt, 1);
        xs[v / 10 - 1] = a->exec_id;
    }
    cr_expect_not(rn_xid_eq(xs[0], xs[1]));
    cr_expect_not(rn_xid_eq(xs[1], xs[2]));
    cr_expect_not(rn_xid_eq(xs[0], xs[2]));
    cr_expect(o.snapshot_needed);
    for (i = 0; i < 3; i++) {
        int k = order[i];
        child_answer(in, xs[k], 1, true, ir_int((k + 1) * 10 + 1), true, 2000 + (int64_t) i, &o);
        cr_expect_eq(o.done.len, 0, "a recorded child outcome got a done record");
        cr_expect_eq(o.actions.len, 0);
        if (i < 2) {
            cr_expect_eq(o.outcome, RN_RUNNING);
        }
    }
    cr_assert_eq(o.outcome, RN_COMPLETED);
    cr_expect_str_eq(child_json(o.result, &b), "[11, 21, 31]");
    cn_buf_fini(&b);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* True when ids[0..n) holds exactly want[0..nwant) in some order. */
static bool
same_xids(const struct rn_xid *ids, size_t n, const struct rn_xid *want, size_t nwant)
{
    size_t i, j;

    if (n != nwant) {
        return false;
    }
    for (i = 0; i < nwant; i++) {
        bool found = false;
        for (j = 0; j < n && !found; j++) {
            found = rn_xid_eq(ids[j], want[i]);
        }
        if (!found) {
            return false;
        }
    }
    return true;
}

/* [fail_fast] over run children: the first failure stops waiting for the others, whose calls
 * are listed in child_cancels (their children are cancelled), not in cancels (which go to
 * workers); caught or not. */
Test(exec, fail_fast_over_run_children_lists_the_others_in_child_cancels)
{
    static const char *const srcs[] = {
        "fn main():\n"
        "    xs = spread [1, 2, 3]:i -> run billing.charge(n=i) [fail_fast]\n"
        "    return xs\n",
        "fn main():\n"
        "    try:\n"
        "        xs = spread [1, 2, 3]:i -> run billing.charge(n=i) [fail_fast]\n"
        "    except PaymentDeclined:\n"
        "        xs = \"declined\"\n"
        "    return xs\n",
    };
    struct ir_val err = declined();
    struct cn_buf b = CN_BUF_INIT;
    size_t s;

    for (s = 0; s < 2; s++) {
        struct rn_instance *in = NULL;
        struct rn_step_out o;
        struct rn_iid id = {{0xc7, (uint8_t) s}};
        struct rn_xid xs[3], others[2];
        struct rn_instance_waits w;
        size_t i;
        struct t_compiled c = child_start(srcs[s], id, &in, &o);

        cr_assert_eq(o.actions.len, 3);
        for (i = 0; i < 3; i++) {
            xs[kwarg_int(o.actions.items[i].kwargs, "n") - 1] = o.actions.items[i].exec_id;
        }
        child_answer(in, xs[0], 1, true, ir_int(1), true, 2000, &o); /* one succeeded */
        cr_expect_eq(o.child_cancels.len, 0);
        child_answer(in, xs[1], 1, false, err, true, 2001, &o);
        cr_expect_eq(o.outcome, s == 0 ? RN_FAILED : RN_COMPLETED);
        cr_expect_eq(o.cancels.len, 0, "a child call went to the workers' cancels");
        others[0] = xs[2];
        cr_expect(same_xids(o.child_cancels.items, o.child_cancels.len, others, 1),
                  "child_cancels has %zu ids, want the third call's", o.child_cancels.len);
        cr_expect(o.snapshot_needed);
        if (s == 1) {
            cr_expect_str_eq(child_json(o.result, &b), "\"declined\"");
        }
        rn_step_out_fini(&o);
        rn_instance_free(in);
        t_compiled_free(&c);

        /* The first answer is the failure: both others are dropped. */
        id.b[2] = 1;
        c = child_start(srcs[s], id, &in, &o);
        cr_assert_eq(o.actions.len, 3);
        for (i = 0; i < 3; i++) {
            xs[kwarg_int(o.actions.items[i].kwargs, "n") - 1] = o.actions.items[i].exec_id;
        }
        child_answer(in, xs[2], 1, false, err, true, 2000, &o);
        others[0] = xs[0];
        others[1] = xs[1];
        cr_expect(same_xids(o.child_cancels.items, o.child_cancels.len, others, 2),
                  "child_cancels has %zu ids, want the first two calls'", o.child_cancels.len);
        cr_expect_eq(o.cancels.len, 0);
        if (s == 1) {
            rn_instance_waits(in, &w);
            cr_expect_eq(w.children, 0, "dropped calls are still waited for");
        }
        rn_step_out_fini(&o);
        rn_instance_free(in);
        t_compiled_free(&c);
    }

    /* A parallel block mixing children and actions: each goes where it is stopped. */
    {
        struct rn_instance *in = NULL;
        struct rn_step_out o;
        struct rn_iid id = {{0xc7, 9}};
        struct rn_xid run1 = {{0}}, act = {{0}}, run3 = {{0}};
        size_t i;
        struct t_compiled c = child_start("fn main():\n"
                                          "    a, b, c = parallel [fail_fast]:\n"
                                          "        run billing.charge(n=1)\n"
                                          "        @t.work(n=2)\n"
                                          "        run billing.charge(n=3)\n"
                                          "    return a\n",
                                          id, &in, &o);
        cr_assert_eq(o.actions.len, 3);
        for (i = 0; i < 3; i++) {
            const struct rn_action_req *a = &o.actions.items[i];
            int64_t n = kwarg_int(a->kwargs, "n");
            if (n == 2) {
                cr_expect_eq(a->call, IR_CALL_ACTION);
                cr_expect_eq(a->timeout_ms, 60000, "an action gets the default timeout");
                act = a->exec_id;
            } else {
                cr_expect_eq(a->call, IR_CALL_RUN);
                *(n == 1 ? &run1 : &run3) = a->exec_id;
            }
        }
        child_answer(in, run3, 1, false, err, true, 2000, &o);
        cr_assert_eq(o.outcome, RN_FAILED);
        cr_expect(same_xids(o.child_cancels.items, o.child_cancels.len, &run1, 1),
                  "child_cancels: %zu", o.child_cancels.len);
        cr_expect(same_xids(o.cancels.items, o.cancels.len, &act, 1), "cancels: %zu",
                  o.cancels.len);
        rn_step_out_fini(&o);
        rn_instance_free(in);
        t_compiled_free(&c);
    }
    ir_val_release(err);
    cn_buf_fini(&b);
}

/* An instance cancelled while children run lists their calls in child_cancels; its running
 * actions still go to cancels. */
Test(exec, a_cancel_lists_running_children_apart_from_running_actions)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xc8}};
    struct rn_xid runs[2], act = {{0}};
    struct rn_event ev;
    size_t i, nruns = 0;
    struct t_compiled c = child_start("fn main():\n"
                                      "    a, b, c = parallel:\n"
                                      "        run billing.charge(n=1)\n"
                                      "        @t.work(n=2)\n"
                                      "        run audit.note(n=3)\n"
                                      "    return a\n",
                                      id, &in, &o);

    cr_assert_eq(o.actions.len, 3);
    for (i = 0; i < 3; i++) {
        if (o.actions.items[i].call == IR_CALL_ACTION) {
            act = o.actions.items[i].exec_id;
        } else {
            cr_assert_lt(nruns, 2);
            runs[nruns++] = o.actions.items[i].exec_id;
        }
    }
    cr_assert_eq(nruns, 2);
    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_CANCEL;
    T_OK(ir_str_from_cstr("operator", &ev.value));
    child_step(in, &ev, 2000, &o);
    ir_val_release(ev.value);
    cr_assert_eq(o.outcome, RN_CANCELLED);
    cr_expect(same_xids(o.child_cancels.items, o.child_cancels.len, runs, 2),
              "child_cancels: %zu ids", o.child_cancels.len);
    cr_expect(same_xids(o.cancels.items, o.cancels.len, &act, 1), "cancels: %zu ids",
              o.cancels.len);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* Crash replay: a snapshot taken after a child call hydrates to the same request (same call and
 * attempt, so the same child id: starting it again changes nothing); with the child's recorded
 * outcome it goes on. A retry's backoff and its attempt replay the same way. */
Test(exec, a_run_call_replays_from_its_snapshot_with_the_same_child_id)
{
    struct rn_instance *in = NULL, *back = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xc9}};
    struct cn_buf snap = CN_BUF_INIT, b = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    struct ir_val err = declined();
    struct rn_done done;
    struct rn_xid x;
    struct rn_event ev;
    int64_t at;
    struct t_compiled c =
        child_start("fn main():\n"
                    "    a = run billing.charge(n=1) [retry: 1, backoff: 1s] [timeout: 1h]\n"
                    "    b = run billing.refund(n=a)\n"
                    "    return [a, b]\n",
                    id, &in, &o);

    cr_assert_eq(o.actions.len, 1);
    cr_assert(o.snapshot_needed);
    x = o.actions.items[0].exec_id;
    T_OK(rn_instance_snapshot(in, &snap));

    /* No outcome recorded: the same request again. */
    rn_step_out_clear(&o);
    T_OK(
        rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &child_cfg, 5000, &back, &o, &em));
    cr_assert_eq(o.outcome, RN_RUNNING);
    cr_assert_eq(o.actions.len, 1);
    cr_expect(rn_xid_eq(o.actions.items[0].exec_id, x));
    cr_expect_eq(o.actions.items[0].attempt, 1);
    cr_expect_eq(o.actions.items[0].call, IR_CALL_RUN);
    cr_expect_str_eq(o.actions.items[0].action, "billing.charge");
    cr_expect_eq(o.actions.items[0].timeout_ms, 3600000);
    cr_expect_eq(kwarg_int(o.actions.items[0].kwargs, "n"), 1);
    cr_expect(rn_iid_eq(rn_child_id(o.actions.items[0].exec_id, o.actions.items[0].attempt),
                        rn_child_id(x, 1)));
    rn_instance_free(back);
    back = NULL;

    /* Its outcome recorded meanwhile: applied, and the next call asked for. */
    memset(&done, 0, sizeof(done));
    done.exec_id = x;
    done.attempt = 1;
    done.ok = true;
    done.value = ir_int(5);
    rn_step_out_clear(&o);
    T_OK(rn_instance_hydrate(c.dag, snap.data, snap.len, &done, 1, &child_cfg, 5000, &back, &o,
                             &em));
    cr_assert_eq(o.outcome, RN_RUNNING);
    cr_assert_eq(o.actions.len, 1);
    cr_expect_str_eq(o.actions.items[0].action, "billing.refund");
    cr_expect_eq(kwarg_int(o.actions.items[0].kwargs, "n"), 5);
    child_answer(back, o.actions.items[0].exec_id, 1, true, ir_int(6), true, 6000, &o);
    cr_assert_eq(o.outcome, RN_COMPLETED);
    cr_expect_str_eq(child_json(o.result, &b), "[5, 6]");
    rn_instance_free(back);
    back = NULL;

    /* A failed first child, snapshot in the backoff: the timer is set again, and the retry's
     * request (attempt 2, a new child) replays as itself. */
    child_answer(in, x, 1, false, err, true, 2000, &o);
    cr_assert_eq(o.timers.len, 1);
    at = o.timers.items[0].at_ms;
    cn_buf_clear(&snap);
    T_OK(rn_instance_snapshot(in, &snap));
    rn_step_out_clear(&o);
    T_OK(
        rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &child_cfg, 2001, &back, &o, &em));
    cr_expect_eq(o.actions.len, 0);
    cr_assert_eq(o.timers.len, 1);
    cr_expect_eq(o.timers.items[0].at_ms, at);
    rn_instance_free(back);
    back = NULL;
    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_TIMER;
    ev.exec_id = x;
    ev.value = ir_null();
    child_step(in, &ev, at, &o);
    cr_assert_eq(o.actions.len, 1);
    cr_assert_eq(o.actions.items[0].attempt, 2);
    cn_buf_clear(&snap);
    T_OK(rn_instance_snapshot(in, &snap));
    rn_step_out_clear(&o);
    T_OK(rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &child_cfg, at + 10, &back, &o,
                             &em));
    cr_assert_eq(o.actions.len, 1);
    cr_expect(rn_xid_eq(o.actions.items[0].exec_id, x));
    cr_expect_eq(o.actions.items[0].attempt, 2, "the replay asked for another attempt's child");
    cr_expect_str_eq(ir_error_type(o.actions.items[0].prev_error), "ChildWorkflowError");
    /* The recorded outcome of attempt 1 is stale now; attempt 2's is applied. */
    done.attempt = 1;
    rn_instance_free(back);
    back = NULL;
    rn_step_out_clear(&o);
    {
        struct rn_done two[2];
        two[0] = done;
        two[1] = done;
        two[1].attempt = 2;
        two[1].value = ir_int(9);
        T_OK(rn_instance_hydrate(c.dag, snap.data, snap.len, two + 1, 1, &child_cfg, at + 10, &back,
                                 &o, &em));
        cr_assert_eq(o.actions.len, 1);
        cr_expect_str_eq(o.actions.items[0].action, "billing.refund");
        cr_expect_eq(kwarg_int(o.actions.items[0].kwargs, "n"), 9);
        rn_instance_free(back);
        back = NULL;
        rn_step_out_clear(&o);
        T_OK(rn_instance_hydrate(c.dag, snap.data, snap.len, two, 1, &child_cfg, at + 10, &back, &o,
                                 &em));
        cr_assert_eq(o.actions.len, 1, "a stale attempt's outcome was applied");
        cr_expect_eq(o.actions.items[0].attempt, 2);
        cr_expect_str_eq(o.actions.items[0].action, "billing.charge");
    }

    ir_val_release(err);
    cn_buf_fini(&snap);
    cn_buf_fini(&b);
    rn_step_out_fini(&o);
    rn_instance_free(back);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* A `start` replays the same way: the same child id, which the backend finds already there. */
Test(exec, a_start_call_replays_with_the_same_child_id)
{
    struct rn_instance *in = NULL, *back = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xca}};
    struct cn_buf snap = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    struct rn_xid x;
    struct t_compiled c = child_start("fn main():\n"
                                      "    cid = start audit.record(n=1)\n"
                                      "    return cid\n",
                                      id, &in, &o);

    cr_assert_eq(o.actions.len, 1);
    x = o.actions.items[0].exec_id;
    T_OK(rn_instance_snapshot(in, &snap));
    rn_step_out_clear(&o);
    T_OK(
        rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &child_cfg, 9000, &back, &o, &em));
    cr_assert_eq(o.actions.len, 1);
    cr_expect_eq(o.actions.items[0].call, IR_CALL_START);
    cr_expect(rn_xid_eq(o.actions.items[0].exec_id, x));
    cr_expect_eq(o.actions.items[0].attempt, 1);
    cn_buf_fini(&snap);
    rn_step_out_fini(&o);
    rn_instance_free(back);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* rn_instance_waits tells running child calls from running actions, and gives the earliest
 * timer (a sleep, an action's deadline, a backoff); INT64_MAX without one. */
Test(exec, instance_waits_counts_children_actions_and_the_earliest_timer)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xcb}};
    struct rn_instance_waits w;
    struct rn_xid runs[2], act = {{0}}, sleeper = {{0}}, e;
    struct ir_val err = declined();
    struct rn_event ev;
    size_t i, nruns = 0;
    struct t_compiled c = child_start("fn nap():\n"
                                      "    sleep 5\n"
                                      "    return 0\n"
                                      "fn main():\n"
                                      "    a, b, c, d = parallel:\n"
                                      "        run billing.charge(n=1)\n"
                                      "        run audit.note(n=2) [timeout: 2s]\n"
                                      "        @t.work(n=3) [deadline: 30s]\n"
                                      "        nap()\n"
                                      "    e = run billing.refund(n=4) [retry: 1, backoff: 10s]\n"
                                      "    return e\n",
                                      id, &in, &o);

    cr_assert_eq(o.actions.len, 3);
    for (i = 0; i < 3; i++) {
        if (o.actions.items[i].call == IR_CALL_ACTION) {
            act = o.actions.items[i].exec_id;
        } else {
            runs[nruns++] = o.actions.items[i].exec_id;
        }
    }
    cr_assert_eq(nruns, 2);
    for (i = 0; i < o.timers.len; i++) {
        if (o.timers.items[i].kind == RN_TIMER_SLEEP) {
            sleeper = o.timers.items[i].exec_id;
        }
    }
    rn_instance_waits(in, &w);
    cr_expect_eq(w.children, 2);
    cr_expect_eq(w.actions, 1);
    cr_expect_eq(w.next_ms, 6000, "the sleep (t = 6 s) comes before the deadline (31 s): %lld",
                 (long long) w.next_ms);

    child_answer(in, runs[0], 1, true, ir_int(1), true, 2000, &o);
    rn_instance_waits(in, &w);
    cr_expect_eq(w.children, 1);
    cr_expect_eq(w.actions, 1);
    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_TIMER;
    ev.exec_id = sleeper;
    ev.value = ir_null();
    child_step(in, &ev, 6000, &o);
    rn_instance_waits(in, &w);
    cr_expect_eq(w.next_ms, 31000, "then the action's deadline: %lld", (long long) w.next_ms);
    child_answer(in, act, 1, true, ir_int(3), false, 7000, &o);
    rn_instance_waits(in, &w);
    cr_expect_eq(w.children, 1);
    cr_expect_eq(w.actions, 0);
    cr_expect_eq(w.next_ms, INT64_MAX, "a child call has no timer here: %lld",
                 (long long) w.next_ms);

    child_answer(in, runs[1], 1, true, ir_int(2), true, 8000, &o);
    cr_assert_eq(o.actions.len, 1);
    e = o.actions.items[0].exec_id;
    rn_instance_waits(in, &w);
    cr_expect_eq(w.children, 1);
    cr_expect_eq(w.actions, 0);
    child_answer(in, e, 1, false, err, true, 9000, &o);
    cr_assert_eq(o.timers.len, 1);
    rn_instance_waits(in, &w);
    cr_expect_eq(w.children, 0, "a call in its backoff has no child running");
    cr_expect_eq(w.actions, 0);
    cr_expect_eq(w.next_ms, o.timers.items[0].at_ms);

    ir_val_release(err);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* Fills a stretch of the stack below the caller with byte b, so that whatever the next call
 * leaves uninitialized there reads b. */
static __attribute__((noinline)) void
poison_stack(uint8_t b)
{
    volatile uint8_t junk[16384];
    size_t i;

    for (i = 0; i < sizeof(junk); i++) {
        junk[i] = b;
    }
}

/* Found by review: hydration replayed recorded results as events whose `recorded` flag it never
 * set (runner/exec/exec.c, hydrate(): `struct rn_event ev;` without an initializer; the flag came
 * with child workflows), so whether a replayed result made a done record depended on what the stack
 * held (UBSan: "load of value 165, which is not a valid value for type '_Bool'"). The results
 * hydration replays come from storage: none is recorded again, whatever the stack holds. */
Test(exec, hydration_output_does_not_depend_on_uninitialized_memory)
{
    struct rn_instance *in = NULL, *back = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xcc}};
    struct cn_buf snap = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    struct rn_done done[2];
    size_t ndone[2], k;
    struct t_compiled c = child_start("fn main():\n"
                                      "    a = @t.work(n=1)\n"
                                      "    b = run billing.charge(n=a)\n"
                                      "    return b\n",
                                      id, &in, &o);

    cr_assert_eq(o.actions.len, 1);
    T_OK(rn_instance_snapshot(in, &snap));
    memset(done, 0, sizeof(done));
    done[0].exec_id = o.actions.items[0].exec_id;
    done[0].attempt = 1;
    done[0].ok = true;
    done[0].value = ir_int(5);
    for (k = 0; k < 2; k++) {
        rn_step_out_clear(&o);
        poison_stack(k == 0 ? 0x00 : 0xa5);
        T_OK(rn_instance_hydrate(c.dag, snap.data, snap.len, done, 1, &child_cfg, 5000, &back, &o,
                                 &em));
        cr_assert_eq(o.actions.len, 1);
        cr_expect_str_eq(o.actions.items[0].action, "billing.charge");
        ndone[k] = o.done.len;
        rn_instance_free(back);
        back = NULL;
    }
    cr_expect_eq(ndone[0], ndone[1],
                 "hydration made %zu done records over a zeroed stack, %zu over a dirty one",
                 ndone[0], ndone[1]);
    cr_expect_eq(ndone[0], 0, "a result read from storage was recorded again");
    cn_buf_fini(&snap);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* ---- a first step recorded by the claim ---------------------------------------------------- */

/* A first step is `timed` when what it records depends on its clock: the shard then writes it
 * before its actions go out, so that a restart cannot move a deadline or a retry bound. */
Test(exec, a_first_step_that_reads_the_clock_is_timed)
{
    static const struct {
        const char *src;
        bool timed;
    } cases[] = {
        {"fn main():\n    a = @std.echo(value=1)\n", false},
        {"fn main():\n    a = @std.echo(value=1) [retry: 3, backoff: 1s]\n", false},
        {"fn main():\n    a = @std.echo(value=1) [deadline: 1s]\n", true},
        {"fn main():\n    a = @std.echo(value=1) [retry: 3, backoff: 1s, max_elapsed: 5s]\n", true},
        {"fn main():\n    sleep 1\n    return 1\n", true},
        {"fn main():\n    x = 1 + 2\n    a, b = parallel:\n        @std.echo(value=x)\n"
         "        @std.echo(value=2) [deadline: 5s]\n    return [a, b]\n",
         true},
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct t_compiled c = t_compile(cases[i].src);
        struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
        struct rn_instance *in = NULL;
        struct rn_step_out o;
        struct rn_iid id = {{7}};

        cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
        start_empty(c.dag, id, &cfg, &in, &o);
        cr_expect_eq(o.outcome, RN_RUNNING, "case %zu", i);
        cr_expect_eq(o.timed, cases[i].timed, "case %zu: %s", i, cases[i].src);
        rn_step_out_fini(&o);
        rn_instance_free(in);
        t_compiled_free(&c);
    }
}

/* A run that fails before it wrote any snapshot (its first step recorded by the claim, the
 * results after it only fed an aggregate) is redriven from the snapshot its first step would
 * have written: the action that succeeded does not run again, the one that failed does, and a
 * crash anywhere on the way changes nothing. */
Test(exec, a_run_without_a_snapshot_is_redriven_from_its_first_step)
{
    static const char *const src = "fn main():\n"
                                   "    a, b = parallel:\n"
                                   "        @std.echo(value=1)\n"
                                   "        @std.until(key=1, failures=1)\n"
                                   "    return [a, b]\n";
    int k;

    for (k = 0; k <= 5; k++) {
        struct t_opts o = {.redrives = 1,
                           .one_at_a_time = true,
                           .first_step_by_claim = true,
                           .crash_after_start = k == 0,
                           .crash_after_step = k};
        struct t_result r;
        t_until_reset();
        r = t_run(src, "{}", &o);
        cr_expect(r.first_unwritten, "crash after step %d: the first step was written", k);
        cr_expect_eq(r.outcome, RN_COMPLETED, "crash after step %d: %s", k, r.json);
        cr_expect_str_eq(r.json, "[1, 2]", "crash after step %d", k);
        cr_expect_eq(r.redrives, 1, "crash after step %d", k);
        cr_expect_eq(r.duplicate_done, 0, "crash after step %d: a completed action ran again", k);
        t_result_free(&r);
    }
}

/* Sets field `field` of the first node of snapshot snap (see runner/exec/snapshot.c) to v and packs
 * the result into out. */
static void
snapshot_with_node_field(const struct cn_buf *snap, uint32_t field, int64_t v, msgpack_sbuffer *out)
{
    msgpack_unpacked u;
    msgpack_packer pk;
    uint32_t k;
    bool done = false;

    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, snap->data, snap->len, NULL), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(u.data.type, MSGPACK_OBJECT_MAP);
    for (k = 0; k < u.data.via.map.size; k++) {
        msgpack_object_kv *kv = &u.data.via.map.ptr[k];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 5 &&
            memcmp(kv->key.via.str.ptr, "nodes", 5) == 0) {
            msgpack_object *node = &kv->val.via.array.ptr[0];
            msgpack_object *f = &node->via.array.ptr[field];
            cr_assert_gt(kv->val.via.array.size, 0);
            cr_assert_gt(node->via.array.size, field);
            f->type = v < 0 ? MSGPACK_OBJECT_NEGATIVE_INTEGER : MSGPACK_OBJECT_POSITIVE_INTEGER;
            if (v < 0) {
                f->via.i64 = v;
            } else {
                f->via.u64 = (uint64_t) v;
            }
            done = true;
        }
    }
    cr_assert(done, "no nodes in the snapshot");
    msgpack_sbuffer_init(out);
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    cr_assert_eq(msgpack_pack_object(&pk, u.data), 0);
    msgpack_unpacked_destroy(&u);
}

/* Times in a snapshot are wall-clock ms: one outside [0, the end of year 9999] is refused, not
 * used (a retry bound counted from a first_at near INT64_MIN overflowed). */
Test(exec, a_snapshot_time_out_of_range_is_refused)
{
    struct t_compiled c = t_compile("fn main():\n"
                                    "    a = @std.echo(value=1) [retry: 3, backoff: 1s, "
                                    "max_elapsed: 5s]\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL, *back = NULL;
    struct rn_step_out o;
    struct cn_buf snap = CN_BUF_INIT;
    struct cn_errmsg em;
    struct rn_iid id = {{5, 5}};
    static const uint32_t fields[] = {7, 8, 11}; /* scheduled_at, deadline, first_at */
    static const int64_t bad[] = {-1, INT64_MIN, 253402300800000LL, INT64_MAX};
    size_t i, j;

    cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
    start_empty(c.dag, id, &cfg, &in, &o);
    cr_assert_eq(rn_instance_snapshot(in, &snap), CN_OK);
    rn_instance_free(in);
    for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        msgpack_sbuffer sb;
        /* The last time a snapshot may hold is taken. */
        snapshot_with_node_field(&snap, fields[i], 253402300799999LL, &sb);
        rn_step_out_clear(&o);
        cr_expect_eq(
            rn_instance_hydrate(c.dag, sb.data, sb.size, NULL, 0, &cfg, 2000, &back, &o, &em),
            CN_OK, "field %u at the bound: %s", fields[i], em.text);
        rn_instance_free(back);
        back = NULL;
        msgpack_sbuffer_destroy(&sb);
        for (j = 0; j < sizeof(bad) / sizeof(bad[0]); j++) {
            snapshot_with_node_field(&snap, fields[i], bad[j], &sb);
            rn_step_out_clear(&o);
            cr_expect_eq(
                rn_instance_hydrate(c.dag, sb.data, sb.size, NULL, 0, &cfg, 2000, &back, &o, &em),
                CN_RANGE, "field %u = %lld was accepted", fields[i], (long long) bad[j]);
            cr_expect_null(back);
            msgpack_sbuffer_destroy(&sb);
        }
    }
    rn_step_out_fini(&o);
    cn_buf_fini(&snap);
    t_compiled_free(&c);
}

/* A sequence of actions, written as the shard writes it: the first step recorded by the claim,
 * every later one but the last by its result alone (none reads a clock), at most replay_max in a
 * row, a snapshot in between; a crash after any step resumes by replaying them, and nothing that
 * completed runs again. */
Test(exec, a_sequence_is_recorded_by_its_results_and_replayed)
{
    static const char *const src = "fn main():\n"
                                   "    a = @std.echo(value=1)\n"
                                   "    b = @std.add(a=a, b=1)\n"
                                   "    c = @std.add(a=b, b=1)\n"
                                   "    d = @std.add(a=c, b=1)\n"
                                   "    e = @std.add(a=d, b=1)\n"
                                   "    f = @std.add(a=e, b=1)\n"
                                   "    return [a, b, c, d, e, f]\n";
    struct t_opts whole = {.first_step_by_claim = true, .steps_by_results = true};
    struct t_result r = t_run(src, "{}", &whole);
    int k, replayed = 0;

    cr_assert_eq(r.outcome, RN_COMPLETED);
    cr_expect_str_eq(r.json, "[1, 2, 3, 4, 5, 6]");
    cr_expect(r.first_unwritten);
    cr_expect_eq(r.by_results, 5, "steps recorded by their results: %d", r.by_results);
    cr_expect_eq(r.snapshots, 1, "snapshots: %zu (only the outcome's)", r.snapshots);
    t_result_free(&r);
    for (k = 0; k <= 7; k++) {
        struct t_opts o = {.first_step_by_claim = true,
                           .steps_by_results = true,
                           .replay_max = 2,
                           .crash_after_start = k == 0,
                           .crash_after_step = k};
        r = t_run(src, "{}", &o);
        cr_expect_eq(r.outcome, RN_COMPLETED, "crash after step %d", k);
        cr_expect_str_eq(r.json, "[1, 2, 3, 4, 5, 6]", "crash after step %d", k);
        cr_expect_eq(r.duplicate_done, 0, "crash after step %d: a completed action ran again", k);
        cr_expect_eq(r.dispatches, 6 + (k < 6), "crash after step %d: %d dispatches", k,
                     r.dispatches);
        replayed += r.replayed;
        t_result_free(&r);
    }
    cr_expect_geq(replayed, 3, "%d resumes replayed steps", replayed);
}

/* Steps one at a time through a sequence of echoes: answers the one action o asked for with its
 * value plus one, into o (cleared first), and returns the event (its value an int). */
static struct rn_event
answer_echo(struct rn_instance *in, struct rn_step_out *o, int64_t at)
{
    struct rn_event ev;

    cr_assert_eq(o->actions.len, 1);
    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_RESULT;
    ev.exec_id = o->actions.items[0].exec_id;
    ev.attempt = o->actions.items[0].attempt;
    ev.value = ir_int(at);
    rn_step_out_clear(o);
    cr_assert_eq(rn_instance_step(in, &ev, 1, at, o), CN_OK);
    return ev;
}

/* The step log numbers the steps its results alone record, at most `max` in a row; and after a
 * change of state that is neither numbered nor snapshotted (here a child's outcome, recorded by
 * the child) none until the next snapshot, since a replay would apply that change after them. */
Test(exec, the_step_log_numbers_steps_only_while_a_replay_is_exact)
{
    struct t_compiled c = t_compile("fn main():\n"
                                    "    total = 0\n"
                                    "    for i in range(10):\n"
                                    "        r = @std.echo(value=i)\n"
                                    "        total = total + r\n"
                                    "    return total\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL;
    struct rn_step_out o, none;
    struct rn_steplog l;
    struct rn_event ev, child;
    struct rn_iid id = {{9}};

    cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
    memset(&l, 0, sizeof(l));
    memset(&none, 0, sizeof(none));
    none.result = ir_null();
    start_empty(c.dag, id, &cfg, &in, &o);
    cr_expect_not(rn_steplog_take(&l, &o, NULL, 0, 2), "a start has no results");
    ev = answer_echo(in, &o, 2000);
    cr_expect(rn_steplog_take(&l, &o, &ev, 1, 2));
    cr_expect_eq(o.done.items[0].step, 1);
    ev = answer_echo(in, &o, 3000);
    cr_expect(rn_steplog_take(&l, &o, &ev, 1, 2));
    cr_expect_eq(o.done.items[0].step, 2);
    ev = answer_echo(in, &o, 4000);
    cr_expect_not(rn_steplog_take(&l, &o, &ev, 1, 2), "a third in a row with max 2");
    cr_expect_eq(o.done.items[0].step, 0);
    rn_steplog_snapshot(&l);
    ev = answer_echo(in, &o, 5000);
    cr_expect(rn_steplog_take(&l, &o, &ev, 1, 2), "after a snapshot");
    cr_expect_eq(o.done.items[0].step, 3, "numbering goes on");

    /* A child's outcome, recorded by the child, changed the state with no write of its own. */
    memset(&child, 0, sizeof(child));
    child.kind = RN_EV_RESULT;
    child.recorded = true;
    child.value = ir_null();
    cr_expect_not(rn_steplog_take(&l, &none, &child, 1, 64));
    ev = answer_echo(in, &o, 6000);
    cr_expect_not(rn_steplog_take(&l, &o, &ev, 1, 64), "numbered after an unrecorded change");
    rn_steplog_snapshot(&l);
    ev = answer_echo(in, &o, 7000);
    cr_expect(rn_steplog_take(&l, &o, &ev, 1, 64), "exact again after a snapshot");
    cr_expect_eq(o.done.items[0].step, 4);

    /* Resumed: numbering goes on after the last recorded step, and waits for a snapshot. */
    {
        struct rn_done rec[2];
        memset(rec, 0, sizeof(rec));
        rec[0].step = 7;
        rec[1].step = 2; /* held by the snapshot */
        rn_steplog_resumed(&l, 3, rec, 2);
        cr_expect_eq(l.seq, 7);
        cr_expect_eq(l.unsnapped, 1);
        ev = answer_echo(in, &o, 8000);
        cr_expect_not(rn_steplog_take(&l, &o, &ev, 1, 64));
        rn_steplog_snapshot(&l);
        ev = answer_echo(in, &o, 9000);
        cr_expect(rn_steplog_take(&l, &o, &ev, 1, 64));
        cr_expect_eq(o.done.items[0].step, 8);
    }
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

/* The execution node's state table (exec_int.h) is enforced: every drawn move is allowed, and
 * one it does not draw aborts (the executor asserts it in every build but the release one). */
Test(exec_states, the_drawn_moves_are_allowed)
{
    static const struct {
        enum rn_xstatus from, to;
    } drawn[] = {
        {RN_X_FREE, RN_X_ACTIVE},    {RN_X_ACTIVE, RN_X_RUNNING},  {RN_X_RUNNING, RN_X_RUNNING},
        {RN_X_RUNNING, RN_X_ACTIVE}, {RN_X_RUNNING, RN_X_BACKOFF}, {RN_X_BACKOFF, RN_X_RUNNING},
        {RN_X_BACKOFF, RN_X_ACTIVE}, {RN_X_ACTIVE, RN_X_SLEEPING}, {RN_X_SLEEPING, RN_X_ACTIVE},
        {RN_X_ACTIVE, RN_X_WAITING}, {RN_X_WAITING, RN_X_ACTIVE},  {RN_X_ACTIVE, RN_X_ACTIVE},
        {RN_X_ACTIVE, RN_X_FREE},    {RN_X_RUNNING, RN_X_FREE},    {RN_X_BACKOFF, RN_X_FREE},
        {RN_X_SLEEPING, RN_X_FREE},  {RN_X_WAITING, RN_X_FREE},
    };
    unsigned from, to, allowed = 0;
    size_t i;

    for (i = 0; i < sizeof(drawn) / sizeof(drawn[0]); i++) {
        cr_expect(rn_x_move_ok(drawn[i].from, drawn[i].to), "%d -> %d", drawn[i].from, drawn[i].to);
    }
    for (from = 0; from < RN_X_STATUS_COUNT_; from++) {
        for (to = 0; to < RN_X_STATUS_COUNT_; to++) {
            allowed += rn_x_move_ok(from, to);
        }
    }
    cr_expect_eq(allowed, sizeof(drawn) / sizeof(drawn[0]), "the table allows no other move");
    cr_expect_not(rn_x_move_ok(RN_X_STATUS_COUNT_, RN_X_ACTIVE));
}

Test(exec_states, a_move_the_table_does_not_draw_aborts, .signal = SIGABRT)
{
    struct rn_xnode x;

    memset(&x, 0, sizeof(x));
    rn_x_move(&x, RN_X_ACTIVE);
    rn_x_move(&x, RN_X_SLEEPING);
    rn_x_move(&x, RN_X_RUNNING); /* a sleep does not dispatch: only its timer wakes it */
}

/* ---- waits for the outside world ---------------------------------------------------------- */

/* A timer event for exec_id at now_ms. */
static void
wait_timer(struct rn_instance *in, struct rn_xid exec_id, int64_t now_ms, struct rn_step_out *o)
{
    struct rn_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_TIMER;
    ev.exec_id = exec_id;
    child_step(in, &ev, now_ms, o);
}

Test(exec, a_wait_is_requested_with_its_names_key_and_durable_timeout)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xa1, 1}};
    struct cn_buf b = CN_BUF_INIT;
    struct ir_val v;
    struct t_compiled c = child_start("fn main():\n"
                                      "    p = wait approve, reject [timeout: 3d, default: 0]\n"
                                      "    e = wait event paid [key: 42]\n"
                                      "    return [p, e]\n",
                                      id, &in, &o);

    cr_assert_eq(o.actions.len, 1);
    cr_expect_eq(o.actions.items[0].call, IR_CALL_WAIT);
    cr_expect_str_eq(o.actions.items[0].action, "approve,reject");
    cr_expect_eq(o.actions.items[0].timeout_ms, 3 * 86400000LL);
    cr_expect_eq(o.actions.items[0].deadline_ms, 1000 + 3 * 86400000LL, "now + the timeout");
    cr_expect_not(o.actions.items[0].expire);
    cr_expect_eq(o.timers.len, 1, "the timeout's timer");
    cr_expect(o.snapshot_needed, "the wait is durable before it is registered");
    /* Storage answers it, recorded: no done record. */
    {
        static const char js[] = "[\"reject\", {\"why\": \"no\"}]";
        T_OK(ir_val_from_json(js, sizeof(js) - 1, &v, NULL));
    }
    child_answer(in, o.actions.items[0].exec_id, 1, true, v, true, 5000, &o);
    ir_val_release(v);
    cr_expect_eq(o.done.len, 0);
    cr_assert_eq(o.actions.len, 1);
    cr_expect_eq(o.actions.items[0].call, IR_CALL_EVENT);
    cr_expect_str_eq(kwarg_str(o.actions.items[0].kwargs, "key"), "42", "an int key as text");
    cr_expect_eq(o.actions.items[0].deadline_ms, 0, "no timeout: no deadline");
    cr_expect_eq(o.timers.len, 0);
    T_OK(ir_str_from_cstr("ok", &v));
    child_answer(in, o.actions.items[0].exec_id, 1, true, v, true, 6000, &o);
    ir_val_release(v);
    cr_assert_eq(o.outcome, RN_COMPLETED);
    cr_expect_str_eq(child_json(o.result, &b), "[[\"reject\", {\"why\": \"no\"}], \"ok\"]");
    cn_buf_fini(&b);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

Test(exec, a_waits_timeout_asks_storage_again_and_takes_its_answer)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xa1, 2}};
    struct cn_buf b = CN_BUF_INIT;
    struct rn_xid x;
    struct ir_val err;
    struct t_compiled c = child_start("fn main():\n"
                                      "    try:\n"
                                      "        p = wait approve [timeout: 10s]\n"
                                      "    except TimeoutError as e:\n"
                                      "        p = e.type\n"
                                      "    return p\n",
                                      id, &in, &o);

    cr_assert_eq(o.actions.len, 1);
    x = o.actions.items[0].exec_id;
    wait_timer(in, x, 5000, &o);
    cr_expect_eq(o.actions.len, 0, "an early timer changes nothing");
    wait_timer(in, x, 11000, &o);
    cr_assert_eq(o.actions.len, 1, "asked again at its deadline");
    cr_expect(o.actions.items[0].expire);
    cr_expect(rn_xid_eq(o.actions.items[0].exec_id, x));
    cr_expect_eq(o.actions.items[0].attempt, 1, "the same attempt: storage decides");
    cr_expect_eq(o.timers.len, 0, "no timer again");
    cr_expect_eq(o.outcome, RN_RUNNING, "not timed out by the executor");
    T_OK(rn_error_new(RN_ERR_WAIT_TIMEOUT, "no signal approve came within 10s", &err));
    child_answer(in, x, 1, false, err, true, 11001, &o);
    ir_val_release(err);
    cr_assert_eq(o.outcome, RN_COMPLETED);
    cr_expect_str_eq(child_json(o.result, &b), "\"WaitTimeout\"");
    cr_expect_eq(o.done.len, 0);
    cn_buf_fini(&b);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

Test(exec, a_wait_no_longer_waited_for_is_withdrawn_not_cancelled)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xa1, 3}};
    struct rn_xid w;
    struct ir_val err;
    struct t_compiled c = child_start("fn main():\n"
                                      "    r = parallel [fail_fast]:\n"
                                      "        wait approve\n"
                                      "        @m.a()\n"
                                      "    return r\n",
                                      id, &in, &o);

    cr_assert_eq(o.actions.len, 2);
    cr_assert_eq(o.actions.items[0].call, IR_CALL_WAIT);
    w = o.actions.items[0].exec_id;
    T_OK(ir_raise(&err, "ValueError", "boom") == CN_RAISED ? CN_OK : CN_NOMEM);
    child_answer(in, o.actions.items[1].exec_id, 1, false, err, false, 2000, &o);
    ir_val_release(err);
    cr_assert_eq(o.outcome, RN_FAILED);
    cr_assert_eq(o.wait_drops.len, 1, "the wait is withdrawn in the write that ends it");
    cr_expect(rn_xid_eq(o.wait_drops.items[0].exec_id, w));
    cr_expect_eq(o.child_cancels.len, 0);
    cr_expect_eq(o.cancels.len, 0, "nothing for a worker to stop");
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

Test(exec, a_wait_events_key_must_be_a_str_or_an_int)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xa1, 4}};
    struct t_compiled c = child_start("fn main():\n"
                                      "    e = wait event paid [key: [1]]\n"
                                      "    return e\n",
                                      id, &in, &o);

    cr_assert_eq(o.outcome, RN_FAILED);
    cr_expect_str_eq(ir_error_type(o.result), "TypeError");
    {
        struct cn_buf b = CN_BUF_INIT;
        cr_expect(strstr(child_json(o.result, &b), "must be a str or an int, not list") != NULL,
                  "%s", b.data);
        cn_buf_fini(&b);
    }
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

Test(exec, publish_puts_its_values_in_the_steps_output_in_order_and_needs_a_snapshot)
{
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct rn_iid id = {{0xa1, 4}};
    struct cn_buf b = CN_BUF_INIT;
    struct ir_val v;
    struct t_compiled c = child_start("fn main():\n"
                                      "    publish stage = \"started\"\n"
                                      "    for i in range(2):\n"
                                      "        publish n = i\n"
                                      "    x = wait go\n"
                                      "    publish stage = {\"went\": x}\n"
                                      "    try:\n"
                                      "        publish bad = float(\"nan\")\n"
                                      "    except ValueError as e:\n"
                                      "        publish err = e.message\n"
                                      "    return 0\n",
                                      id, &in, &o);

    cr_assert_eq(o.published.len, 3);
    cr_expect_str_eq(o.published.items[0].name, "stage");
    cr_expect_str_eq(child_json(o.published.items[0].value, &b), "\"started\"");
    cr_expect_str_eq(o.published.items[1].name, "n");
    cr_expect_str_eq(child_json(o.published.items[2].value, &b), "1", "each one, in order");
    cr_expect(o.snapshot_needed);
    T_OK(ir_str_from_cstr("now", &v));
    child_answer(in, o.actions.items[0].exec_id, 1, true, v, true, 5000, &o);
    ir_val_release(v);
    cr_assert_eq(o.outcome, RN_COMPLETED);
    cr_assert_eq(o.published.len, 2, "what JSON cannot hold is refused, not published");
    cr_expect_str_eq(child_json(o.published.items[0].value, &b), "{\"went\": \"now\"}");
    cr_expect_str_eq(o.published.items[1].name, "err");
    cr_expect(strstr(child_json(o.published.items[1].value, &b), "publish bad") != NULL, "%s",
              b.data);
    cn_buf_fini(&b);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}
