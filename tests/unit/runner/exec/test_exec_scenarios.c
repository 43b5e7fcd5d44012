/* SPDX-License-Identifier: MIT */
/*
 * Review tests for the executor: semantics against docs/semantics.md and Python, crash replay,
 * state bounds. Each test runs its workflow plainly, one action per step, and crashing after every
 * step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/error.h"
#include "tests/support/compile_util.h"
#include "tests/support/exec_driver.h"
#include "tests/support/leak.h"

TestSuite(exec_scenarios, .fini = t_leak_check, .timeout = 120);

/* Runs src in three modes; each must complete with `want` and never re-request a result. */
static void
expect_all_modes(const char *src, const char *input, const char *want)
{
    static const char *names[] = {"plain", "one_at_a_time", "crash_every_step",
                                  "one_at_a_time+crash"};
    int m;

    for (m = 0; m < 4; m++) {
        struct t_opts o = {0};
        struct t_result r;
        o.one_at_a_time = (m & 1) != 0;
        o.crash_every_step = (m & 2) != 0;
        r = t_run(src, input, &o);
        cr_expect_eq(r.outcome, RN_COMPLETED, "[%s] outcome %d (%s)", names[m], r.outcome,
                     r.json ? r.json : "-");
        if (r.outcome == RN_COMPLETED) {
            cr_expect(strcmp(r.json, want) == 0, "[%s] got %s, want %s", names[m], r.json, want);
        }
        cr_expect_eq(r.duplicate_done, 0, "[%s] a recorded (id, attempt) was requested again",
                     names[m]);
        t_result_free(&r);
    }
}

static void
expect_fail_all_modes(const char *src, const char *input, const char *type)
{
    int m;

    for (m = 0; m < 4; m++) {
        struct t_opts o = {0};
        struct t_result r;
        o.one_at_a_time = (m & 1) != 0;
        o.crash_every_step = (m & 2) != 0;
        r = t_run(src, input, &o);
        cr_expect_eq(r.outcome, RN_FAILED, "[mode %d] outcome %d (%s)", m, r.outcome,
                     r.json ? r.json : "-");
        if (r.outcome == RN_FAILED) {
            cr_expect(strcmp(r.error_type, type) == 0, "[mode %d] got %s, want %s", m, r.json,
                      type);
        }
        cr_expect_eq(r.duplicate_done, 0, "[mode %d]", m);
        t_result_free(&r);
    }
}

/* ---- falling off the end: the value is None (docs/language.md, "Files and functions")
 * --------------------------- */

Test(exec_scenarios, helper_falling_off_the_end_after_an_action_returns_none)
{
    expect_all_modes("fn h(input: [v]):\n"
                     "    x = @std.echo(value=v)\n"
                     "fn main():\n"
                     "    y = h(v=3)\n"
                     "    return y\n",
                     "{}", "null");
}

Test(exec_scenarios, main_falling_off_the_end_after_an_action_is_none)
{
    expect_all_modes("fn main():\n"
                     "    x = @std.echo(value=5)\n",
                     "{}", "null");
    expect_all_modes("fn main():\n"
                     "    xs = spread [1, 2]:v -> @std.echo(value=v)\n",
                     "{}", "null");
}

Test(exec_scenarios, helper_falling_off_the_end_after_a_nested_helper_is_none)
{
    expect_all_modes("fn inner():\n"
                     "    return 7\n"
                     "fn outer():\n"
                     "    z = inner()\n"
                     "fn main():\n"
                     "    y = outer()\n"
                     "    return y\n",
                     "{}", "null");
}

Test(exec_scenarios, parallel_helper_branch_falling_off_the_end_gives_none)
{
    expect_all_modes("fn h(input: [v]):\n"
                     "    x = @std.echo(value=v)\n"
                     "fn main():\n"
                     "    r = parallel:\n"
                     "        h(v=1)\n"
                     "        @std.echo(value=2)\n"
                     "    return r\n",
                     "{}", "[null, 2]");
}

/* ---- control flow inside try, loops and helpers --------------------------------------------- */

Test(exec_scenarios, break_continue_return_inside_try_in_loops)
{
    expect_all_modes("fn find(input: [xs]):\n"
                     "    for x in xs:\n"
                     "        try:\n"
                     "            v = @std.fail_if(value=x, bad=[2])\n"
                     "            if v == 4:\n"
                     "                return v\n"
                     "        except BadValue:\n"
                     "            continue\n"
                     "    return -1\n"
                     "fn main(input: [xs]):\n"
                     "    out = []\n"
                     "    i = 0\n"
                     "    while True:\n"
                     "        i = i + 1\n"
                     "        try:\n"
                     "            if i > 3:\n"
                     "                break\n"
                     "            r = find(xs)\n"
                     "            out = out + [r]\n"
                     "            z = 1 // (i - 2)\n"
                     "        except ZeroDivisionError:\n"
                     "            out = out + [\"zd\"]\n"
                     "            continue\n"
                     "        out = out + [i]\n"
                     "    return out\n",
                     "{\"xs\": [1, 2, 3, 4, 5]}", "[4, 1, 4, \"zd\", 4, 3]");
}

Test(exec_scenarios, long_loop_calling_a_helper_keeps_state_bounded)
{
    struct t_opts o = {0};
    struct t_result r = t_run("fn h(input: [v]):\n"
                              "    try:\n"
                              "        r = @std.fail_if(value=v, bad=[3, 7])\n"
                              "    except BadValue:\n"
                              "        return 0\n"
                              "    for k in range(3):\n"
                              "        if k == 1:\n"
                              "            return r\n"
                              "fn main(input: [n]):\n"
                              "    t = 0\n"
                              "    for i in range(n):\n"
                              "        x = h(i % 10)\n"
                              "        t = t + x\n"
                              "    return t\n",
                              "{\"n\": 500}", &o);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json ? r.json : "-");
    cr_expect_str_eq(r.json, "1750");
    cr_expect_leq(r.max_live_nodes, 2);
    cr_expect_leq(r.max_snapshot_bytes, r.first_snapshot_bytes + 64, "snapshot grew %zu -> %zu",
                  r.first_snapshot_bytes, r.max_snapshot_bytes);
    t_result_free(&r);
}

Test(exec_scenarios, errors_out_of_helpers_in_parallel_branches_reach_the_aggregate)
{
    const char *src = "fn h(input: [v]):\n"
                      "    ys = spread [v, v + 1]:x -> @std.fail_if(value=x, bad=[5])\n"
                      "    return ys\n"
                      "fn g(input: [v]):\n"
                      "    sleep 1\n"
                      "    try:\n"
                      "        q = @std.fail_if(value=v, bad=[9])\n"
                      "    except KeyError:\n"
                      "        q = 0\n"
                      "    return q\n"
                      "fn main(input: [a, b]):\n"
                      "    try:\n"
                      "        r, s = parallel:\n"
                      "            h(v=a)\n"
                      "            g(v=b)\n"
                      "    except BadValue as e:\n"
                      "        return \"caught \" + e.message\n"
                      "    return [r, s]\n";

    expect_all_modes(src, "{\"a\": 1, \"b\": 2}", "[[1, 2], 2]");
    expect_all_modes(src, "{\"a\": 4, \"b\": 2}", "\"caught 5\"");
    expect_all_modes(src, "{\"a\": 1, \"b\": 9}", "\"caught 9\"");
    /* both fail: the lowest branch index wins */
    expect_all_modes(src, "{\"a\": 5, \"b\": 9}", "\"caught 5\"");
}

Test(exec_scenarios, aggregates_with_unpacked_targets)
{
    expect_all_modes("fn main():\n"
                     "    a, b = spread [1, 2]:x -> @std.echo(value=x)\n"
                     "    try:\n"
                     "        c, d = spread [1, 2, 3]:x -> @std.echo(value=x)\n"
                     "    except ValueError as e:\n"
                     "        c = e.message\n"
                     "        d = 0\n"
                     "    try:\n"
                     "        p, q = parallel:\n"
                     "            @std.echo(value=1)\n"
                     "            @std.echo(value=[2, 3])\n"
                     "    except ValueError:\n"
                     "        p = \"pv\"\n"
                     "        q = None\n"
                     "    return [a, b, c, d, p, q]\n",
                     "{}", "[1, 2, \"too many values to unpack (expected 2)\", 0, 1, [2, 3]]");
}

Test(exec_scenarios, retries_inside_a_loop_use_a_new_execution_id_per_iteration)
{
    struct t_opts o = {0};
    struct t_result r;

    expect_all_modes("fn main():\n"
                     "    out = []\n"
                     "    for i in range(4):\n"
                     "        v = @std.flaky(key=i, failures=1) [retry: 2, backoff: 10ms]\n"
                     "        out = out + [v.attempt]\n"
                     "    return out\n",
                     "{}", "[2, 2, 2, 2]");
    r = t_run("fn main():\n"
              "    for i in range(3):\n"
              "        v = @std.flaky(key=i, failures=2) [retry: 2, backoff: 10ms]\n",
              "{}", &o);
    cr_expect_eq(r.outcome, RN_COMPLETED);
    cr_expect_eq(r.dispatches, 9);
    t_result_free(&r);
}

Test(exec_scenarios, binding_errors_are_not_retried_and_are_catchable)
{
    struct t_opts o = {0};
    struct t_result r = t_run("fn main():\n"
                              "    try:\n"
                              "        a, b = @std.echo(value=[1, 2, 3]) [retry: 3, backoff: 1ms]\n"
                              "    except ValueError as e:\n"
                              "        return e.type\n"
                              "    return \"no\"\n",
                              "{}", &o);

    cr_expect_eq(r.outcome, RN_COMPLETED);
    cr_expect_str_eq(r.json, "\"ValueError\"");
    cr_expect_eq(r.dispatches, 1);
    t_result_free(&r);
}

Test(exec_scenarios, timeouts_after_retries_use_each_attempts_own_deadline)
{
    struct t_opts o = {0};
    struct t_result r =
        t_run("fn main():\n"
              "    r = @std.hang() [timeout: 2s] [ActionTimeout -> retry: 2, backoff: 1ms]\n",
              "{}", &o);

    cr_expect_eq(r.outcome, RN_FAILED);
    cr_expect_eq(r.dispatches, 3);
    cr_expect_geq(r.elapsed_ms, 6000);
    cr_expect_lt(r.elapsed_ms, 6100);
    t_result_free(&r);
}

Test(exec_scenarios, error_values_and_error_shaped_results_survive_snapshots)
{
    expect_all_modes("fn main():\n"
                     "    r = @std.echo(value={\"type\": \"X\", \"message\": \"m\", \"bases\": [], "
                     "\"details\": None})\n"
                     "    a = 0\n"
                     "    m = 0\n"
                     "    try:\n"
                     "        @std.fail(type=\"KeyError\", message=\"k\")\n"
                     "    except KeyError as e:\n"
                     "        sleep 1\n"
                     "        a = isexception(e)\n"
                     "        m = e.message\n"
                     "    sleep 1\n"
                     "    return [isexception(r), a, m]\n",
                     "{}", "[false, true, \"k\"]");
}

Test(exec_scenarios, sleep_in_loops_and_helpers_with_crashes)
{
    expect_all_modes("fn nap(input: [s]):\n"
                     "    sleep s\n"
                     "    return s\n"
                     "fn main():\n"
                     "    t = 0\n"
                     "    for i in range(3):\n"
                     "        z = nap(0.5)\n"
                     "        t = t + z\n"
                     "        sleep 0\n"
                     "    r = parallel:\n"
                     "        nap(s=1)\n"
                     "        nap(s=2)\n"
                     "    return [t, r]\n",
                     "{}", "[1.5, [1, 2]]");
}

/* ---- replay ------------------------------------------------------------------------------- */

static const char stress_src[] =
    "fn leaf(input: [k, n]):\n"
    "    try:\n"
    "        r = @std.flaky(key=k, failures=n) [FlakyError -> retry: 2, backoff: 20ms]\n"
    "    except FlakyError:\n"
    "        return \"gave up \" + str(k)\n"
    "    return r.attempt\n"
    "fn fan(input: [xs, k]):\n"
    "    ys = spread xs:x -> @std.fail_if(value=x, bad=[13]) [retry: 1, backoff: 5ms]\n"
    "    sleep 0.25\n"
    "    z = leaf(k=k, n=k % 4)\n"
    "    return [ys, z]\n"
    "fn main(input: [n]):\n"
    "    out = []\n"
    "    i = 0\n"
    "    while i < n:\n"
    "        i = i + 1\n"
    "        try:\n"
    "            a, b = parallel:\n"
    "                fan(xs=range(i, i + 3), k=i)\n"
    "                leaf(k=100 + i, n=1)\n"
    "            out = out + [[a, b]]\n"
    "        except BadValue as e:\n"
    "            out = out + [e.message]\n"
    "            continue\n"
    "        if i == 15:\n"
    "            break\n"
    "    return out\n";

Test(exec_scenarios, crash_replay_of_loops_helpers_parallel_nested_spread_retries)
{
    struct t_opts o = {0};
    struct t_result base = t_run(stress_src, "{\"n\": 16}", &o);

    cr_assert_eq(base.outcome, RN_COMPLETED, "%s", base.json ? base.json : "-");
    expect_all_modes(stress_src, "{\"n\": 16}", base.json);
    cr_expect_leq(base.max_live_nodes, 8);
    t_result_free(&base);
}

Test(exec_scenarios, crash_after_each_single_step_of_the_stress_workflow)
{
    struct t_opts o = {0};
    struct t_result base;
    int k;

    o.one_at_a_time = true;
    base = t_run(stress_src, "{\"n\": 4}", &o);
    cr_assert_eq(base.outcome, RN_COMPLETED);
    for (k = 1; k <= base.steps; k++) {
        struct t_result r;
        o.crash_after_step = k;
        r = t_run(stress_src, "{\"n\": 4}", &o);
        cr_expect_eq(r.outcome, base.outcome, "crash after %d", k);
        cr_expect(r.json && strcmp(r.json, base.json) == 0, "crash after %d: %s vs %s", k, r.json,
                  base.json);
        cr_expect_eq(r.duplicate_done, 0, "crash after %d", k);
        t_result_free(&r);
    }
    t_result_free(&base);
}

/* A running attempt's [deadline: D] is part of the persisted state (the snapshot stores it); a
 * restart must not push it back, or an instance whose runner restarts more often than the
 * deadline never times out. (A [timeout: D] counts from the start on a worker: an attempt sent
 * again after a restart starts again, with its whole timeout.) */
Test(exec_scenarios, deadline_is_not_extended_by_hydration)
{
    const char *src = "fn ticker():\n"
                      "    for i in range(20):\n"
                      "        sleep 1\n"
                      "    return 20\n"
                      "fn waiter():\n"
                      "    try:\n"
                      "        @std.hang() [deadline: 5s]\n"
                      "    except ActionTimeout:\n"
                      "        return \"timed out\"\n"
                      "    return \"no\"\n"
                      "fn main():\n"
                      "    r = parallel:\n"
                      "        ticker()\n"
                      "        waiter()\n"
                      "    return r\n";
    struct t_opts o = {0};
    struct t_result base = t_run(src, "{}", &o), r;

    cr_assert_eq(base.outcome, RN_COMPLETED);
    o.crash_every_step = true;
    r = t_run(src, "{}", &o);
    cr_assert_eq(r.outcome, RN_COMPLETED);
    cr_expect_str_eq(r.json, base.json);
    cr_expect_leq(r.elapsed_ms, base.elapsed_ms + 100,
                  "restarts moved the deadline: %lld ms with crashes, %lld without",
                  (long long) r.elapsed_ms, (long long) base.elapsed_ms);
    t_result_free(&r);
    t_result_free(&base);
}

Test(exec_scenarios, parallel_of_inline_helpers_and_empty_spreads_completes_in_one_step)
{
    expect_all_modes("fn pure(input: [v]):\n"
                     "    ys = spread []:x -> @std.echo(value=x)\n"
                     "    return [v, ys]\n"
                     "fn main():\n"
                     "    r = parallel:\n"
                     "        pure(v=1)\n"
                     "        pure(v=2)\n"
                     "    s = @std.echo(value=r)\n"
                     "    return s\n",
                     "{}", "[[1, []], [2, []]]");
}

Test(exec_scenarios, spread_element_timeouts_with_retries_replay)
{
    expect_all_modes("fn main():\n"
                     "    try:\n"
                     "        xs = spread [1, 2]:v -> @std.hang() [timeout: 1s] [ActionTimeout -> "
                     "retry: 1, backoff: 10ms]\n"
                     "    except TimeoutError as e:\n"
                     "        return e.type\n"
                     "    return xs\n",
                     "{}", "\"ActionTimeout\"");
}

/* Cancel: ends the instance, lists running actions, later events in the batch do nothing, and
 * the cancelled state snapshots and hydrates as cancelled. */
Test(exec_scenarios, cancel_mid_batch_and_after_hydration)
{
    struct t_compiled c =
        t_compile("fn main():\n"
                  "    r = parallel:\n"
                  "        @std.hang()\n"
                  "        @std.flaky(key=1, failures=5) [retry: 5, backoff: 10s]\n"
                  "    return r\n");
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL, *back = NULL;
    struct rn_step_out o;
    struct rn_event ev[2];
    struct cn_buf snap = CN_BUF_INIT;
    struct cn_errmsg em;
    struct ir_val input;
    struct rn_iid id = {{5}};

    memset(&o, 0, sizeof(o));
    o.result = ir_null();
    cr_assert_eq(c.rv, CN_OK);
    cr_assert_eq(ir_map_new(0, &input), CN_OK);
    cr_assert_eq(rn_instance_start(c.dag, id, input, &cfg, 1000, &in, &o), CN_OK);
    ir_val_release(input);
    cr_assert_eq(o.actions.len, 2);
    memset(ev, 0, sizeof(ev));
    /* the flaky one fails: backoff */
    ev[0].exec_id = o.actions.items[1].exec_id;
    ev[0].kind = RN_EV_ERROR;
    ev[0].attempt = 1;
    cr_assert_eq(ir_error_new("FlakyError", "x", ir_null(), ir_null(), &ev[0].value), CN_OK);
    ev[1].exec_id = o.actions.items[0].exec_id;
    rn_step_out_clear(&o);
    cr_assert_eq(rn_instance_step(in, ev, 1, 1001, &o), CN_OK);
    ir_val_release(ev[0].value);
    cr_assert_eq(o.outcome, RN_RUNNING);
    rn_step_out_clear(&o);
    /* cancel, then a result for the hanging one in the same batch */
    ev[0].kind = RN_EV_CANCEL;
    ev[0].value = ir_null();
    ev[1].kind = RN_EV_RESULT;
    ev[1].attempt = 1;
    ev[1].value = ir_int(1);
    cr_assert_eq(rn_instance_step(in, ev, 2, 1002, &o), CN_OK);
    cr_expect_eq(o.outcome, RN_CANCELLED);
    cr_expect_eq(o.cancels.len, 1, "only the running action is cancelled");
    cr_expect_eq(o.done.len, 0, "nothing runs after an outcome");
    cr_expect(o.snapshot_needed);
    cr_assert_eq(rn_instance_snapshot(in, &snap), CN_OK);
    rn_step_out_clear(&o);
    cr_assert_eq(
        rn_instance_hydrate(c.dag, snap.data, snap.len, NULL, 0, &cfg, 2000, &back, &o, &em), CN_OK,
        "%s", em.text);
    cr_expect_eq(o.outcome, RN_CANCELLED);
    cr_expect_eq(o.actions.len, 0);
    cr_expect_eq(o.timers.len, 0);
    rn_instance_free(back);
    cn_buf_fini(&snap);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    t_compiled_free(&c);
}

Test(exec_scenarios, errors_out_of_nested_helpers_in_a_loop_close_their_scopes)
{
    struct t_opts o = {0};
    struct t_result r = t_run("fn inner(input: [v]):\n"
                              "    x = @std.fail_if(value=v, bad=[0, 2, 4])\n"
                              "    q = {}[\"k\"] if v % 3 == 0 else 1\n"
                              "    return x\n"
                              "fn outer(input: [v]):\n"
                              "    y = inner(v)\n"
                              "    sleep 0.01\n"
                              "    return y\n"
                              "fn main(input: [n]):\n"
                              "    t = 0\n"
                              "    for i in range(n):\n"
                              "        try:\n"
                              "            z = outer(i % 6)\n"
                              "            t = t + z\n"
                              "        except LookupError:\n"
                              "            t = t + 100\n"
                              "        except BadValue:\n"
                              "            t = t + 1000\n"
                              "    return t\n",
                              "{\"n\": 300}", &o);

    cr_assert_eq(r.outcome, RN_COMPLETED, "%s", r.json ? r.json : "-");
    /* per 6: 0,2,4 bad (3000); 3 KeyError (100); 1 + 5 */
    cr_expect_str_eq(r.json, "155300");
    cr_expect_leq(r.max_live_nodes, 1);
    cr_expect_leq(r.max_snapshot_bytes, r.first_snapshot_bytes + 96, "snapshot grew %zu -> %zu",
                  r.first_snapshot_bytes, r.max_snapshot_bytes);
    t_result_free(&r);
}

Test(exec_scenarios, uncaught_error_out_of_a_helper_in_a_loop_fails_the_same_in_every_mode)
{
    expect_fail_all_modes("fn h(input: [v]):\n"
                          "    r = @std.fail_if(value=v, bad=[3])\n"
                          "    return r\n"
                          "fn main():\n"
                          "    t = 0\n"
                          "    for i in range(5):\n"
                          "        v = h(v=i)\n"
                          "        t = t + v\n",
                          "{}", "BadValue");
}

/* ---- finally ------------------------------------------------------------------------------ */

/* Every way out of a try runs its finally block once, actions and sleeps in it included, and
 * the same after a crash at any step: the normal end, an error (raised again after it), a
 * return (its value taken first) and a break or continue through it. */
static const char finally_src[] = "fn guarded(input: [k]):\n"
                                  "    log = \"\"\n"
                                  "    try:\n"
                                  "        x = @std.fail_if(value=k, bad=[2])\n"
                                  "        if k == 3:\n"
                                  "            return \"early\" + log\n"
                                  "        log = \"ok\"\n"
                                  "    finally:\n"
                                  "        log = @std.echo(value=\"fin\" + str(k))\n"
                                  "        sleep 0\n"
                                  "    return log\n"
                                  "fn main():\n"
                                  "    out = []\n"
                                  "    for k in range(1, 6):\n"
                                  "        try:\n"
                                  "            r = guarded(k)\n"
                                  "        except BadValue as e:\n"
                                  "            r = \"caught \" + e.message\n"
                                  "        out = out + [r]\n"
                                  "        try:\n"
                                  "            if k == 4:\n"
                                  "                break\n"
                                  "            continue\n"
                                  "        finally:\n"
                                  "            f = @std.echo(value=\"loop\" + str(k))\n"
                                  "            out = out + [f]\n"
                                  "    return out\n";

Test(exec_scenarios, finally_runs_once_on_every_way_out_across_crashes)
{
    expect_all_modes(finally_src, "{}",
                     "[\"fin1\", \"loop1\", \"caught 2\", \"loop2\", \"early\", \"loop3\", "
                     "\"fin4\", \"loop4\"]");
}

/* An error the finally block raises replaces the one it runs for; one it does not stays. */
Test(exec_scenarios, finally_keeps_the_error_or_replaces_it)
{
    expect_fail_all_modes("fn main():\n"
                          "    try:\n"
                          "        x = @std.fail(type=\"Declined\")\n"
                          "    finally:\n"
                          "        y = @std.echo(value=1)\n"
                          "    return x\n",
                          "{}", "Declined");
    expect_fail_all_modes("fn main():\n"
                          "    try:\n"
                          "        x = @std.fail(type=\"Declined\")\n"
                          "    finally:\n"
                          "        y = @std.echo(value=[])\n"
                          "        z = y[3]\n"
                          "    return x\n",
                          "{}", "IndexError");
}

/* ---- cleanup on cancel and timeout (docs/semantics.md, "Cancel, timeout and finally") ------ */

/* Runs src with an interruption after step `at` in the four modes, crashes after every step
 * included; each must end with `outcome` and have echoed exactly `echoed`. Returns nothing;
 * `detail`, when set, must appear in the ending error's JSON. */
static void
expect_interrupted(const char *src, struct t_opts base, enum rn_outcome outcome, const char *echoed,
                   const char *detail)
{
    int m;

    for (m = 0; m < 4; m++) {
        struct t_opts o = base;
        struct t_result r;
        o.one_at_a_time = (m & 1) != 0;
        o.crash_every_step = (m & 2) != 0;
        r = t_run(src, "{}", &o);
        cr_expect_eq(r.outcome, outcome, "[mode %d] outcome %d (%s)", m, r.outcome,
                     r.json ? r.json : "-");
        cr_expect_str_eq(r.echoed, echoed, "[mode %d] echoed %s, want %s", m, r.echoed, echoed);
        if (detail != NULL) {
            cr_expect(r.json != NULL && strstr(r.json, detail) != NULL, "[mode %d] %s lacks %s", m,
                      r.json, detail);
        } else {
            cr_expect(r.json != NULL && strstr(r.json, "\"details\": null") != NULL,
                      "[mode %d] %s has details", m, r.json);
        }
        cr_expect_eq(r.duplicate_done, 0, "[mode %d]", m);
        t_result_free(&r);
    }
}

/* A cancel stops the running action and runs the finally blocks around it, innermost first,
 * actions included; nothing after them runs, and the instance ends cancelled. */
static const char refund_src[] = "fn main():\n"
                                 "    c = @std.echo(value=\"charge\")\n"
                                 "    try:\n"
                                 "        try:\n"
                                 "            x = @std.hang()\n"
                                 "        finally:\n"
                                 "            r = @std.echo(value=\"refund\")\n"
                                 "        y = @std.echo(value=\"not reached\")\n"
                                 "    finally:\n"
                                 "        sleep 1\n"
                                 "        z = @std.echo(value=\"release\")\n"
                                 "    w = @std.echo(value=\"after\")\n"
                                 "    return w\n";

Test(exec_scenarios, cancel_runs_the_finally_blocks_then_ends_cancelled)
{
    struct t_opts o = {.interrupt_after_step = 1};
    expect_interrupted(refund_src, o, RN_CANCELLED, "\"charge\",\"refund\",\"release\"", NULL);
}

Test(exec_scenarios, timeout_runs_the_finally_blocks_then_ends_timed_out)
{
    struct t_opts o = {.interrupt_after_step = 1, .interrupt = RN_EV_TIMEOUT};
    expect_interrupted(refund_src, o, RN_TIMED_OUT, "\"charge\",\"refund\",\"release\"", NULL);
}

/* A cancel with nothing to clean up (before the try, or without a finally) ends at once. */
Test(exec_scenarios, cancel_outside_any_finally_ends_at_once)
{
    struct t_opts o = {.interrupt_after_step = 1};
    expect_interrupted("fn main():\n"
                       "    x = @std.echo(value=\"first\")\n"
                       "    y = @std.hang()\n"
                       "    try:\n"
                       "        z = @std.echo(value=\"in try\")\n"
                       "    finally:\n"
                       "        r = @std.echo(value=\"refund\")\n",
                       o, RN_CANCELLED, "\"first\"", NULL);
}

/* No except clause catches the cancel itself, bare or typed; an error the cleanup raises is an
 * ordinary one that its own handlers see, and one that escapes rides in the details. */
Test(exec_scenarios, except_clauses_do_not_catch_a_cancel)
{
    struct t_opts o = {.interrupt_after_step = 1};
    expect_interrupted("fn main():\n"
                       "    x = @std.echo(value=\"start\")\n"
                       "    try:\n"
                       "        try:\n"
                       "            y = @std.hang()\n"
                       "        except Exception:\n"
                       "            c = @std.echo(value=\"caught\")\n"
                       "            return c\n"
                       "        except:\n"
                       "            c = @std.echo(value=\"bare\")\n"
                       "            return c\n"
                       "        finally:\n"
                       "            try:\n"
                       "                f = @std.fail(type=\"RefundDeclined\")\n"
                       "            except RefundDeclined:\n"
                       "                g = @std.echo(value=\"declined, handled\")\n"
                       "    except:\n"
                       "        c = @std.echo(value=\"outer\")\n"
                       "        return c\n",
                       o, RN_CANCELLED, "\"start\",\"declined, handled\"", NULL);
    expect_interrupted("fn main():\n"
                       "    x = @std.echo(value=\"start\")\n"
                       "    try:\n"
                       "        y = @std.hang()\n"
                       "    finally:\n"
                       "        f = @std.fail(type=\"RefundDeclined\")\n",
                       o, RN_CANCELLED, "\"start\"",
                       "\"cleanup_error\": {\"type\": \"RefundDeclined\"");
}

/* Every branch of a fan-out cleans up, [fail_fast] or not: each branch's finally runs. */
Test(exec_scenarios, every_branch_of_a_fanout_cleans_up)
{
    struct t_opts o = {.interrupt_after_step = 1};
    expect_interrupted("fn branch(input: [k]):\n"
                       "    try:\n"
                       "        x = @std.hang()\n"
                       "    finally:\n"
                       "        y = @std.echo(value=k)\n"
                       "fn main():\n"
                       "    a = @std.echo(value=0)\n"
                       "    xs = parallel [fail_fast]:\n"
                       "        branch(k=1)\n"
                       "        branch(k=2)\n"
                       "        branch(k=3)\n"
                       "    return xs\n",
                       o, RN_CANCELLED, "0,1,2,3", NULL);
}

/* A second, forced cancel abandons the cleanup; so does the cleanup bound. Either way the
 * instance ends cancelled, and the details say why its cleanup did not finish. */
static const char slow_cleanup_src[] = "fn main():\n"
                                       "    a = @std.echo(value=\"start\")\n"
                                       "    try:\n"
                                       "        x = @std.hang()\n"
                                       "    finally:\n"
                                       "        y = @std.hang() [timeout: 1h]\n"
                                       "        z = @std.echo(value=\"done\")\n";

Test(exec_scenarios, a_forced_cancel_abandons_the_cleanup)
{
    struct t_opts o = {.interrupt_after_step = 1, .force_after_step = 2};
    expect_interrupted(slow_cleanup_src, o, RN_CANCELLED, "\"start\"",
                       "\"cleanup_abandoned\": \"cancelled with --force\"");
    o.interrupt_after_step = 0;
    o.force_after_step = 1;
    expect_interrupted(slow_cleanup_src, o, RN_CANCELLED, "\"start\"", NULL);
}

Test(exec_scenarios, the_cleanup_bound_abandons_a_slow_cleanup)
{
    struct t_opts o = {.interrupt_after_step = 1, .cleanup_timeout_ms = 5000};
    struct t_result r;

    expect_interrupted(slow_cleanup_src, o, RN_CANCELLED, "\"start\"",
                       "\"cleanup_abandoned\": \"the cleanup did not finish within 5000 ms\"");
    r = t_run(slow_cleanup_src, "{}", &o);
    cr_expect_lt(r.elapsed_ms, 6000, "abandoned at its bound, not at the action's hour");
    t_result_free(&r);
}

/* A cancel or timeout arriving while the cleanup runs changes nothing (a new claim reads the
 * cancel again, the deadline passes meanwhile). */
Test(exec_scenarios, a_second_interruption_during_the_cleanup_is_ignored)
{
    struct t_opts o = {.interrupt_after_step = 1, .again_after_step = 2};
    expect_interrupted(refund_src, o, RN_CANCELLED, "\"charge\",\"refund\",\"release\"", NULL);
    o.interrupt = RN_EV_TIMEOUT;
    expect_interrupted(refund_src, o, RN_TIMED_OUT, "\"charge\",\"refund\",\"release\"", NULL);
}

/* A retry (redrive) of an instance cancelled during its work starts over from where the cancel
 * found it, not from its cleanup: the try body runs again (here the hanging action times out),
 * and its finally blocks run again on the way out. */
Test(exec_scenarios, a_redrive_after_a_cleanup_starts_from_before_the_interruption)
{
    struct t_opts o = {.interrupt_after_step = 1, .redrives = 1, .default_timeout_ms = 1000};
    int m;

    for (m = 0; m < 4; m++) {
        struct t_result r;
        o.one_at_a_time = (m & 1) != 0;
        o.crash_every_step = (m & 2) != 0;
        r = t_run(refund_src, "{}", &o);
        cr_expect_eq(r.outcome, RN_FAILED, "[mode %d] %s", m, r.json);
        cr_expect_str_eq(r.error_type, "ActionTimeout", "[mode %d]", m);
        cr_expect_str_eq(r.echoed, "\"charge\",\"refund\",\"release\",\"refund\",\"release\"",
                         "[mode %d] %s", m, r.echoed);
        t_result_free(&r);
    }
}

/* ---- now(), uuid(), instance_id() --------------------------------------------------------- */

/* The values a run computed are the values a replay finds, whatever the crashes: now() is the
 * step's time (a step that reads it writes a snapshot), uuid() comes from the instance's
 * generator, which the snapshot carries. Crashing after each single step in turn, each crash
 * taking 5 s, with the first step recorded by its claim and later ones by their results where
 * they may be (as the shard runs them), the result is that of the run without the crash whose
 * clock jumps 5 s at the same point, uuids and times included: what ran before the crash keeps
 * its times, what runs after it has the later ones. */
static const char clock_src[] = "fn main():\n"
                                "    t0 = now()\n"
                                "    a = uuid()\n"
                                "    x = @std.echo(value=a)\n"
                                "    t1 = now()\n"
                                "    b = uuid()\n"
                                "    y = @std.echo(value=b)\n"
                                "    sleep 2\n"
                                "    t2 = now()\n"
                                "    ys = spread [1, 2]:v -> @std.echo(value=v)\n"
                                "    c = uuid()\n"
                                "    return [t0, t1, t2 - t1 >= 2, a, x == a, b, y == b, c,\n"
                                "            a != b, b != c, instance_id()]\n";

Test(exec_scenarios, now_and_uuid_replay_to_the_same_values)
{
    struct t_opts o = {0};
    struct t_result base = t_run(clock_src, "{}", &o);
    int k;

    cr_assert_eq(base.outcome, RN_COMPLETED, "%s", base.json ? base.json : "-");
    cr_assert(strstr(base.json, "true, ") != NULL, "%s", base.json);
    expect_all_modes(clock_src, "{}", base.json);
    o.one_at_a_time = true;
    o.first_step_by_claim = true;
    o.steps_by_results = true;
    o.crash_takes_ms = 5000;
    for (k = 0; k <= base.steps + 1; k++) { /* 0: the crash right after the first step alone */
        struct t_result r, want;
        o.crash_after_start = k == 0;
        o.crash_after_step = k;
        o.crash_is_pause = true;
        want = t_run(clock_src, "{}", &o);
        o.crash_is_pause = false;
        r = t_run(clock_src, "{}", &o);
        cr_expect_eq(r.outcome, RN_COMPLETED, "crash after %d", k);
        cr_expect(r.json && want.json && strcmp(r.json, want.json) == 0, "crash after %d: %s vs %s",
                  k, r.json, want.json);
        cr_expect_eq(r.crashes, k <= base.steps ? 1 : 0, "crash after %d", k);
        t_result_free(&r);
        t_result_free(&want);
    }
    t_result_free(&base);
}
