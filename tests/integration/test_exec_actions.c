/* SPDX-License-Identifier: MIT */
/*
 * cairn-worker --exec-dir: executables as `exec.NAME` actions. Each test runs the real binary
 * (CAIRN_WORKER_BIN, set by meson) in its hidden --run-once mode against the fixture scripts in
 * tests/integration/exec/ and checks the printed {"ok": bool, "value": ...}.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ir/value.h"
#include "tests/support/leak.h"
#include "tests/support/wait.h"

TestSuite(exec_actions, .fini = t_leak_check, .timeout = 30);

struct t_run {
    int status;      /* waitpid status of cairn-worker */
    char out[65536]; /* its stdout */
    size_t out_len;
    struct ir_val res; /* parsed stdout, or null */
    int64_t elapsed_ms;
};

/* Runs cairn-worker --exec-dir <fixtures> --run-once action kwargs [--deadline-ms N]. */
static void
t_run_once(const char *action, const char *kwargs, const char *deadline_ms, struct t_run *r)
{
    const char *bin = getenv("CAIRN_WORKER_BIN"), *root = getenv("CAIRN_SOURCE_ROOT");
    char dir[4096];
    int p[2];
    pid_t pid;
    ssize_t n;
    int64_t t0 = t_clock_ms(CLOCK_MONOTONIC);
    struct cn_errmsg em;

    cr_assert(bin != NULL && root != NULL, "CAIRN_WORKER_BIN and CAIRN_SOURCE_ROOT must be set");
    snprintf(dir, sizeof(dir), "%s/tests/integration/exec", root);
    memset(r, 0, sizeof(*r));
    r->res = ir_null();
    cr_assert_eq(pipe(p), 0);
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        char *argv[] = {(char *) bin,
                        "--exec-dir",
                        dir,
                        "--run-once",
                        (char *) action,
                        (char *) kwargs,
                        deadline_ms ? "--deadline-ms" : NULL,
                        (char *) deadline_ms,
                        NULL};

        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execv(bin, argv);
        _exit(127);
    }
    close(p[1]);
    for (;;) {
        n = read(p[0], r->out + r->out_len, sizeof(r->out) - 1 - r->out_len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        r->out_len += (size_t) n;
    }
    close(p[0]);
    cr_assert_eq(waitpid(pid, &r->status, 0), pid);
    r->elapsed_ms = t_clock_ms(CLOCK_MONOTONIC) - t0;
    if (WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0) {
        cr_assert_eq(ir_val_from_json(r->out, r->out_len, &r->res, &em), CN_OK,
                     "stdout is not JSON: %s (%.*s)", em.text, (int) r->out_len, r->out);
        cr_assert_eq(r->res.type, IR_T_MAP);
    }
}

static struct ir_val
t_get(struct ir_val map, const char *key)
{
    const struct ir_val *v = ir_map_get(map, key, strlen(key));

    cr_assert(v != NULL, "no key '%s'", key);
    return *v;
}

/* The value of a successful run; asserts ok == true. */
static struct ir_val
t_ok_value(const struct t_run *r)
{
    cr_assert(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "status %d: %.*s", r->status,
              (int) r->out_len, r->out);
    cr_assert(ir_val_equal(t_get(r->res, "ok"), ir_bool(true)), "%.*s", (int) r->out_len, r->out);
    return t_get(r->res, "value");
}

/* The error of a failed run: asserts ok == false and the error type. */
static struct ir_val
t_err_value(const struct t_run *r, const char *type)
{
    struct ir_val v;

    cr_assert(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "status %d: %.*s", r->status,
              (int) r->out_len, r->out);
    cr_assert(ir_val_equal(t_get(r->res, "ok"), ir_bool(false)), "%.*s", (int) r->out_len, r->out);
    v = t_get(r->res, "value");
    cr_assert_eq(v.type, IR_T_MAP);
    cr_assert_str_eq(ir_str_data(t_get(v, "type")), type, "%.*s", (int) r->out_len, r->out);
    return v;
}

static void
t_expect_json(struct ir_val got, const char *json)
{
    struct ir_val want;
    struct cn_errmsg em;

    cr_assert_eq(ir_val_from_json(json, strlen(json), &want, &em), CN_OK, "%s", em.text);
    cr_assert(ir_val_same(got, want), "unexpected value");
    ir_val_release(want);
}

/* Runs action and returns the message of the ExecError it must fail with; the caller still
 * releases r->res. */
static const char *
t_exec_error(struct t_run *r, const char *action, const char *kwargs, const char *deadline_ms)
{
    t_run_once(action, kwargs, deadline_ms, r);
    return ir_str_data(t_get(t_err_value(r, "ExecError"), "message"));
}

/* Runs action and asserts that its ExecError message contains each of needles (NULL-ended). */
static void
t_expect_exec_error(const char *action, const char *kwargs, const char *const *needles)
{
    struct t_run r;
    const char *msg = t_exec_error(&r, action, kwargs, NULL);

    for (; *needles != NULL; needles++) {
        cr_assert(strstr(msg, *needles) != NULL, "%s: no \"%s\" in %s", action, *needles, msg);
    }
    ir_val_release(r.res);
}

Test(exec_actions, shell_script_echoes_its_input)
{
    struct t_run r;

    t_run_once("exec.echo", "{\"a\": [1, 2.5, \"x\u00e9\"], \"b\": {\"c\": null, \"d\": true}}",
               NULL, &r);
    t_expect_json(t_ok_value(&r),
                  "{\"a\": [1, 2.5, \"x\u00e9\"], \"b\": {\"c\": null, \"d\": true}}");
    ir_val_release(r.res);
}

Test(exec_actions, python_returns_computed_json)
{
    struct t_run r;

    t_run_once("exec.compute", "{\"xs\": [1, 2, 3.5, 10]}", NULL, &r);
    t_expect_json(t_ok_value(&r), "{\"sum\": 16.5, \"count\": 4}");
    ir_val_release(r.res);
}

Test(exec_actions, error_json_with_nonzero_exit_keeps_type_message_bases)
{
    struct t_run r;
    struct ir_val e;

    t_run_once("exec.fail_json", "{}", NULL, &r);
    e = t_err_value(&r, "PaymentDeclined");
    cr_assert_str_eq(ir_str_data(t_get(e, "message")), "card expired");
    t_expect_json(t_get(e, "bases"), "[\"PaymentError\", \"Exception\"]");
    ir_val_release(r.res);
}

Test(exec_actions, nonzero_exit_without_json_is_exec_error_with_stderr_tail)
{
    t_expect_exec_error("exec.fail_plain", "{}",
                        (const char *[]){"status 5", "something went wrong: disk on fire", NULL});
}

Test(exec_actions, big_stderr_does_not_deadlock_and_only_the_tail_is_kept)
{
    struct t_run r;
    const char *msg = t_exec_error(&r, "exec.noisy", "{\"pad\": \"y\"}", NULL);

    cr_assert(strstr(msg, "status 1") != NULL, "%.200s", msg);
    cr_assert(strlen(msg) < 4096 + 200, "message has %zu bytes", strlen(msg));
    cr_assert(strlen(msg) > 4000, "message has %zu bytes", strlen(msg));
    cr_assert(strcmp(msg + strlen(msg) - 10, "last words") == 0, "%s", msg + strlen(msg) - 20);
    ir_val_release(r.res);
}

Test(exec_actions, invalid_json_with_exit_0_is_exec_error)
{
    t_expect_exec_error("exec.bad_json", "{}", (const char *[]){"not JSON", NULL});
}

Test(exec_actions, killed_by_a_signal_names_it)
{
    t_expect_exec_error("exec.killself", "{}", (const char *[]){"SIGTERM", NULL});
}

Test(exec_actions, sleeper_is_killed_at_the_deadline)
{
    struct t_run r;
    const char *msg = t_exec_error(&r, "exec.slow", "{}", "300");

    cr_assert(strstr(msg, "deadline") != NULL, "%s", msg);
    cr_assert(r.elapsed_ms >= 250 && r.elapsed_ms < 10000, "took %lld ms",
              (long long) r.elapsed_ms);
    ir_val_release(r.res);
}

/* stdout is capped at 16 MiB: a program that writes more is killed, and nothing it wrote is
 * taken as the result. */
Test(exec_actions, output_over_16_mib_kills_the_program)
{
    struct t_run r;
    const char *msg = t_exec_error(&r, "exec.flood", "{}", "20000");

    cr_assert(strstr(msg, "output larger than 16777216 bytes") != NULL, "%s", msg);
    cr_assert(r.elapsed_ms < 15000, "took %lld ms", (long long) r.elapsed_ms);
    ir_val_release(r.res);
}

Test(exec_actions, non_executables_and_bad_names_are_not_served)
{
    struct t_run r;

    t_run_once("exec.not_exec", "{}", NULL, &r);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2, "status %d", r.status);
    t_run_once("exec.bad.name", "{}", NULL, &r);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2, "status %d", r.status);
    /* The same directory does serve its executables. */
    t_run_once("exec.echo", "{}", NULL, &r);
    t_expect_json(t_ok_value(&r), "{}");
    ir_val_release(r.res);
}
