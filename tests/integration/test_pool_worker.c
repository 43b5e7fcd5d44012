/* SPDX-License-Identifier: MIT */
/*
 * The worker pool against real `cairn-worker` processes (CAIRN_WORKER_BIN, set by meson) over
 * ipc: many dispatches across several workers with every result accounted for, a worker killed
 * with SIGKILL mid-action (its attempt comes back as WorkerLost within a second), and a worker
 * stopped with SIGTERM (it finishes what it runs, says goodbye, exits 0).
 */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ir/error.h"
#include "runner/pool/pool.h"
#include "tests/support/leak.h"
#include "tests/support/pool_util.h"
#include "tests/support/wait.h"

TestSuite(pool_worker, .fini = t_leak_check_nng, .timeout = 120);

#define MAXN 12000

struct tally {
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    int n, ok, lost, wrong, cancelled;
    bool seen[MAXN];
    int64_t last_at; /* wall ms of the latest result */
};

static void
on_result(void *arg, const struct rn_pool_result *r)
{
    struct tally *t = arg;
    uint32_t i;

    memcpy(&i, r->exec_id.b, sizeof(i));
    pthread_mutex_lock(&t->mtx);
    if (i < MAXN && !t->seen[i]) {
        t->seen[i] = true;
        t->n++;
        if (r->ok) {
            t->ok++;
            /* std.echo returns its value: the index. */
            if (r->value.type == IR_T_INT && r->value.u.i != (int64_t) i) {
                t->wrong++;
            }
        } else if (strcmp(ir_error_type(r->value), "WorkerLost") == 0) {
            t->lost++;
        } else if (strcmp(ir_error_type(r->value), "Cancelled") == 0) {
            t->cancelled++;
        }
    }
    t->last_at = t_clock_ms(CLOCK_REALTIME);
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->mtx);
}

static bool
tally_wait(struct tally *t, int n, int ms)
{
    return t_wait_count(&t->mtx, &t->cond, &t->n, n, ms);
}

/* Starts cairn-worker; exec_dir, when not NULL, is passed as --exec-dir. */
static pid_t
spawn_worker_args(const char *url, const char *name, const char *slots, const char *prefetch,
                  const char *exec_dir)
{
    const char *bin = getenv("CAIRN_WORKER_BIN");
    pid_t pid;

    cr_assert_not_null(bin, "CAIRN_WORKER_BIN not set (run through meson)");
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* A worker must not outlive a crashed or timed-out test. */
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl(bin, bin, "--url", url, "--name", name, "--slots", slots, "--prefetch", prefetch,
              exec_dir != NULL ? "--exec-dir" : (char *) NULL, exec_dir, (char *) NULL);
        _exit(127);
    }
    return pid;
}

static pid_t
spawn_worker_pf(const char *url, const char *name, const char *slots, const char *prefetch)
{
    return spawn_worker_args(url, name, slots, prefetch, NULL);
}

static pid_t
spawn_worker(const char *url, const char *name, const char *slots)
{
    return spawn_worker_pf(url, name, slots, "0");
}

/* Waits until the pool counts `n` workers (bounded). */
static void
wait_workers(struct rn_pool *p, uint64_t n, int ms)
{
    struct rn_pool_stats st;

    if (t_pool_wait_stat(p, offsetof(struct rn_pool_stats, workers), n, ms, &st)) {
        return;
    }
    cr_assert_fail("%llu workers connected, want %llu", (unsigned long long) st.workers,
                   (unsigned long long) n);
}

/* Waits (up to 5 s) until the pool has sent `n` dispatches; returns the count it saw. */
static uint64_t
await_dispatched(struct rn_pool *p, uint64_t n)
{
    struct rn_pool_stats st;

    (void) t_pool_wait_stat(p, offsetof(struct rn_pool_stats, dispatched), n, 5000, &st);
    return st.dispatched;
}

static void
submit(struct rn_pool *p, uint32_t i, const char *action, const char *key, int64_t v)
{
    struct rn_xid id = {{0}};

    memcpy(id.b, &i, sizeof(i));
    t_pool_submit(p, id, action, key, v, t_clock_ms(CLOCK_REALTIME) + 60000);
}

static struct rn_pool *
pool_up_at(struct tally *t, const char *listen)
{
    struct rn_pool_cfg cfg;
    struct rn_pool *p = NULL;
    struct cn_errmsg em = {{0}};

    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->mtx, NULL);
    pthread_cond_init(&t->cond, NULL);
    memset(&cfg, 0, sizeof(cfg));
    cfg.listen_url = listen;
    cr_assert_eq(rn_pool_start(&cfg, on_result, t, &p, &em), CN_OK, "%s", em.text);
    return p;
}

static struct rn_pool *
pool_up(struct tally *t, char *url, size_t n)
{
    static int seq;

    (void) snprintf(url, n, "ipc:///tmp/cairn-pool-worker-%d-%d.sock", (int) getpid(), ++seq);
    return pool_up_at(t, url);
}

static void
reap(pid_t pid, int *status)
{
    int i;

    for (i = 0; i < 500; i++) {
        if (waitpid(pid, status, WNOHANG) == pid) {
            return;
        }
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    cr_assert_fail("worker %d did not exit", (int) pid);
}

/* SIGTERMs the n workers, then reaps each; with clean, asserts that each exited 0. */
static void
stop_workers(const pid_t *w, int n, bool clean)
{
    int k, status;

    for (k = 0; k < n; k++) {
        kill(w[k], SIGTERM);
    }
    for (k = 0; k < n; k++) {
        reap(w[k], &status);
        cr_assert(!clean || (WIFEXITED(status) && WEXITSTATUS(status) == 0), "worker %d status %d",
                  k, status);
    }
}

/* Submits n std.echo attempts and waits (up to ms) for all; each must come back with its own
 * value, each dispatched once and none stale. Returns the pool's stats after. */
static struct rn_pool_stats
echo_all(struct rn_pool *p, struct tally *t, uint32_t n, int ms)
{
    struct rn_pool_stats st;
    uint32_t i;

    for (i = 0; i < n; i++) {
        submit(p, i, "std.echo", "value", i);
    }
    cr_assert(tally_wait(t, (int) n, ms), "%d of %u results", t->n, n);
    cr_assert_eq(t->ok, (int) n);
    cr_assert_eq(t->wrong, 0);
    rn_pool_stats(p, &st);
    cr_assert_eq(st.dispatched, n);
    cr_assert_eq(st.stale, 0);
    return st;
}

Test(pool_worker, every_dispatch_across_two_worker_processes_is_answered)
{
    struct tally t;
    char url[128];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    pid_t w[2] = {spawn_worker(url, "w1", "4"), spawn_worker(url, "w2", "4")};

    wait_workers(p, 2, 10000);
    (void) echo_all(p, &t, 1000, 30000);
    stop_workers(w, 2, true);
    rn_pool_stop(p);
}

Test(pool_worker, sigkill_mid_action_returns_worker_lost_within_a_second)
{
    struct tally t;
    char url[128];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    pid_t w = spawn_worker(url, "victim", "1");
    int64_t t0;
    int status;

    wait_workers(p, 1, 10000);
    submit(p, 7, "std.sleep", "ms", 20000);
    cr_assert_eq(await_dispatched(p, 1), 1);
    usleep(50000); /* let the worker start the action */
    t0 = t_clock_ms(CLOCK_REALTIME);
    kill(w, SIGKILL);
    cr_assert(tally_wait(&t, 1, 5000), "no result after SIGKILL");
    cr_assert_eq(t.lost, 1);
    cr_assert_lt(t.last_at - t0, 1000, "WorkerLost after %lld ms", (long long) (t.last_at - t0));
    reap(w, &status);
    rn_pool_stop(p);
}

Test(pool_worker, a_cancelled_action_stops_on_the_worker_and_reports_cancelled)
{
    struct tally t;
    char url[128];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    pid_t w = spawn_worker(url, "canceller", "1");
    uint32_t id = 9;
    struct rn_xid exec_id = {{0}};
    int64_t t0;

    wait_workers(p, 1, 10000);
    memcpy(exec_id.b, &id, sizeof(id));
    cr_assert_eq(rn_pool_cancel(p, exec_id, 1), CN_NOTFOUND); /* nothing in flight yet */
    submit(p, id, "std.sleep", "ms", 20000);
    cr_assert_eq(await_dispatched(p, 1), 1);
    /* Let the worker start it, so that this stops a running action (one cancelled before it
     * starts is not run at all: wp_sdk tests that). */
    usleep(50000);
    t0 = t_clock_ms(CLOCK_REALTIME);
    cr_assert_eq(rn_pool_cancel(p, exec_id, 1), CN_OK);
    cr_assert(tally_wait(&t, 1, 5000), "no result after cancel");
    cr_assert_eq(t.cancelled, 1, "ok=%d lost=%d", t.ok, t.lost);
    cr_assert_lt(t.last_at - t0, 1000, "Cancelled after %lld ms", (long long) (t.last_at - t0));
    /* The worker is still serving: the next action runs normally. */
    submit(p, id + 1, "std.echo", "value", (int64_t) (id + 1));
    cr_assert(tally_wait(&t, 2, 5000), "no result after the cancelled one");
    cr_assert_eq(t.ok, 1);
    stop_workers(&w, 1, true);
    rn_pool_stop(p);
}

Test(pool_worker, sigterm_finishes_in_flight_work_then_exits_cleanly)
{
    struct tally t;
    char url[128];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    pid_t w = spawn_worker(url, "polite", "2");
    int status;

    wait_workers(p, 1, 10000);
    submit(p, 3, "std.sleep", "ms", 300);
    (void) await_dispatched(p, 1);
    kill(w, SIGTERM);
    cr_assert(tally_wait(&t, 1, 10000), "the in-flight action never reported");
    cr_assert_eq(t.ok, 1, "the in-flight action did not finish (lost: %d)", t.lost);
    reap(w, &status);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    wait_workers(p, 0, 5000);
    rn_pool_stop(p);
}

Test(pool_worker, ten_thousand_dispatches_across_four_workers_over_tcp, .timeout = 180)
{
    struct tally t;
    char url[128];
    struct rn_pool *p = pool_up_at(&t, "tcp://127.0.0.1:0");
    pid_t w[4];
    struct rn_pool_stats st;
    int k;

    cr_assert_gt(rn_pool_port(p), 0);
    (void) snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", rn_pool_port(p));
    for (k = 0; k < 4; k++) {
        char name[16];
        (void) snprintf(name, sizeof(name), "w%d", k);
        w[k] = spawn_worker_pf(url, name, "4", k < 2 ? "0" : "8"); /* two prefetch */
    }
    wait_workers(p, 4, 10000);
    st = echo_all(p, &t, 10000, 120000);
    cr_assert_eq(st.results, 10000);
    cr_assert_eq(st.lost, 0);
    fprintf(stderr, "10000 attempts in %llu dispatch messages\n",
            (unsigned long long) st.dispatch_msgs);
    /* All submitted at once: replies carry several attempts (about 4 here, by measurement). */
    cr_assert_lt(st.dispatch_msgs, st.dispatched / 2, "dispatches are not batched");
    stop_workers(w, 4, true);
    rn_pool_stop(p);
}

Test(pool_worker, a_worker_serving_other_actions_gets_none_of_them)
{
    struct tally t;
    char url[128];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    pid_t w = spawn_worker(url, "std-only", "2");
    struct rn_pool_stats st;

    wait_workers(p, 1, 10000);
    submit(p, 1, "billing.charge", "amount", 5); /* nobody serves it: it waits */
    submit(p, 2, "std.echo", "value", 2);
    cr_assert(tally_wait(&t, 1, 10000));
    cr_assert(t.seen[2] && !t.seen[1]);
    rn_pool_stats(p, &st);
    cr_assert_eq(st.queued, 1, "the unserved action should still be waiting");
    stop_workers(&w, 1, false);
    rn_pool_stop(p); /* the waiting attempt is never dispatched: no result for it */
    cr_assert(!t.seen[1]);
}

Test(pool_worker, a_slow_action_hits_its_deadline_and_its_late_result_is_dropped)
{
    struct tally t;
    char url[128];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    pid_t w = spawn_worker(url, "slow", "1");
    struct rn_pool_dispatch d;
    struct rn_pool_stats st;
    uint32_t id = 11;

    wait_workers(p, 1, 10000);
    memset(&d, 0, sizeof(d));
    memcpy(d.exec_id.b, &id, sizeof(id));
    d.attempt = 1;
    d.action = "std.sleep";
    cr_assert_eq(ir_map_new(1, &d.kwargs), CN_OK);
    cr_assert_eq(ir_map_set_cstr(&d.kwargs, "ms", ir_int(600)), CN_OK);
    d.deadline_ms = t_clock_ms(CLOCK_REALTIME) + 200;
    cr_assert_eq(rn_pool_submit(p, &d), CN_OK);
    ir_val_release(d.kwargs);
    cr_assert(tally_wait(&t, 1, 5000), "no result");
    cr_assert_eq(t.ok, 0);
    /* the worker finishes later: its outcome is stale */
    (void) t_pool_wait_stat(p, offsetof(struct rn_pool_stats, stale), 1, 3000, &st);
    cr_assert_eq(st.timeouts, 1);
    cr_assert_eq(st.stale, 1);
    stop_workers(&w, 1, false);
    rn_pool_stop(p);
}

Test(pool_worker, a_worker_reconnects_when_its_runner_restarts)
{
    struct tally t1, t2;
    struct rn_pool *p1 = pool_up_at(&t1, "tcp://127.0.0.1:0"), *p2;
    char url[128];
    pid_t w;

    (void) snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", rn_pool_port(p1));
    w = spawn_worker(url, "faithful", "2");
    wait_workers(p1, 1, 10000);
    submit(p1, 1, "std.echo", "value", 1);
    cr_assert(tally_wait(&t1, 1, 10000));
    rn_pool_stop(p1);           /* the runner goes away... */
    p2 = pool_up_at(&t2, url);  /* the same address */
    wait_workers(p2, 1, 15000); /* ...and the worker says hello to the new one */
    submit(p2, 2, "std.echo", "value", 2);
    cr_assert(tally_wait(&t2, 1, 10000), "no result from the reconnected worker");
    cr_assert_eq(t2.ok, 1);
    stop_workers(&w, 1, false);
    rn_pool_stop(p2);
}

/* Cancelling an `exec.*` action kills its process group at once and reports Cancelled. */
Test(pool_worker, a_cancelled_exec_action_is_killed_and_reports_cancelled)
{
    struct tally t;
    char url[128], dir[4096];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    const char *root = getenv("CAIRN_SOURCE_ROOT");
    pid_t w;
    uint32_t id = 21;
    struct rn_xid exec_id = {{0}};
    int64_t t0;

    cr_assert_not_null(root, "CAIRN_SOURCE_ROOT not set (run through meson)");
    (void) snprintf(dir, sizeof(dir), "%s/tests/integration/exec", root);
    w = spawn_worker_args(url, "exec-canceller", "1", "0", dir);
    wait_workers(p, 1, 10000);
    memcpy(exec_id.b, &id, sizeof(id));
    submit(p, id, "exec.slow", "unused", 0); /* sleeps 30 s */
    cr_assert_eq(await_dispatched(p, 1), 1);
    usleep(200000); /* started: the cancel must kill a running process */
    t0 = t_clock_ms(CLOCK_REALTIME);
    cr_assert_eq(rn_pool_cancel(p, exec_id, 1), CN_OK);
    cr_assert(tally_wait(&t, 1, 5000), "no result after cancel");
    cr_assert_eq(t.cancelled, 1, "ok=%d lost=%d", t.ok, t.lost);
    cr_assert_lt(t.last_at - t0, 1000, "Cancelled after %lld ms", (long long) (t.last_at - t0));
    stop_workers(&w, 1, true);
    rn_pool_stop(p);
}

/* Whether pid is gone: no such process, or a zombie no one has reaped yet (the test may run
 * where PID 1 does not reap orphans). */
static bool
process_gone(pid_t pid)
{
    char path[64], buf[256];
    FILE *f;
    char *rp;
    bool gone = true;

    if (kill(pid, 0) != 0) {
        return true;
    }
    (void) snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
    if ((f = fopen(path, "r")) == NULL) {
        return true;
    }
    if (fgets(buf, sizeof(buf), f) != NULL && (rp = strrchr(buf, ')')) != NULL) {
        gone = rp[1] == ' ' && rp[2] == 'Z';
    }
    fclose(f);
    return gone;
}

/* An `exec.*` action's process dies with its worker, kill -9 included: its outcome could never
 * be reported, and the runner runs the attempt again elsewhere, so left alive it would run side
 * by side with its own retry. */
Test(pool_worker, an_exec_action_dies_with_its_worker)
{
    struct tally t;
    char url[128], dir[4096], pidfile[128];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    const char *root = getenv("CAIRN_SOURCE_ROOT");
    int64_t deadline;
    pid_t w, child = 0;
    int status;
    FILE *f;

    cr_assert_not_null(root, "CAIRN_SOURCE_ROOT not set (run through meson)");
    (void) snprintf(dir, sizeof(dir), "%s/tests/integration/exec", root);
    (void) snprintf(pidfile, sizeof(pidfile), "/tmp/cairn-pidfile-%d", (int) getpid());
    (void) unlink(pidfile);
    cr_assert_eq(setenv("CAIRN_TEST_PIDFILE", pidfile, 1), 0);
    w = spawn_worker_args(url, "exec-orphan", "1", "0", dir);
    wait_workers(p, 1, 10000);
    submit(p, 31, "exec.pidfile", "unused", 0);
    cr_assert_eq(await_dispatched(p, 1), 1);
    deadline = t_clock_ms(CLOCK_REALTIME) + 10000;
    while (child <= 0 && t_clock_ms(CLOCK_REALTIME) < deadline) {
        if ((f = fopen(pidfile, "r")) != NULL) {
            if (fscanf(f, "%d", &child) != 1) {
                child = 0;
            }
            fclose(f);
        }
        usleep(10000);
    }
    cr_assert_gt(child, 0, "the action did not start");
    cr_assert(!process_gone(child));
    kill(w, SIGKILL);
    reap(w, &status);
    deadline = t_clock_ms(CLOCK_REALTIME) + 5000;
    while (!process_gone(child) && t_clock_ms(CLOCK_REALTIME) < deadline) {
        usleep(10000);
    }
    if (!process_gone(child)) {
        kill(child, SIGKILL);
        cr_assert_fail("the action's process %d outlived its worker", (int) child);
    }
    cr_assert(tally_wait(&t, 1, 5000), "no WorkerLost");
    (void) unlink(pidfile);
    rn_pool_stop(p);
}

/* Submits std.sleep(ms) as exec id `id` with the given timeout and deadline (0: none). */
static void
submit_sleep(struct rn_pool *p, uint32_t id, int64_t ms, int64_t timeout_ms, int64_t deadline_ms)
{
    struct rn_pool_dispatch d;

    memset(&d, 0, sizeof(d));
    memcpy(d.exec_id.b, &id, sizeof(id));
    d.attempt = 1;
    d.action = "std.sleep";
    cr_assert_eq(ir_map_new(1, &d.kwargs), CN_OK);
    cr_assert_eq(ir_map_set_cstr(&d.kwargs, "ms", ir_int(ms)), CN_OK);
    d.timeout_ms = timeout_ms;
    d.deadline_ms = deadline_ms;
    cr_assert_eq(rn_pool_submit(p, &d), CN_OK);
    ir_val_release(d.kwargs);
}

/* A [timeout: D] counts from when a worker starts the attempt, not while it waits in the
 * worker's own queue (prefetch): one slot, room for two more, three sleeps of 400 ms with a
 * 700 ms timeout each. The third starts 800 ms after it was dispatched and finishes in time,
 * on the runner and on the worker (which stops a sleep at its deadline). A [deadline] counts
 * the queue: the same three with one 700 ms deadline, only the first finishes before it. */
Test(pool_worker, a_timeout_does_not_count_the_workers_prefetch_queue)
{
    struct tally t;
    char url[128];
    struct rn_pool *p = pool_up(&t, url, sizeof(url));
    pid_t w = spawn_worker_pf(url, "prefetching", "1", "2");
    struct rn_pool_stats st;
    int64_t at;
    uint32_t i;

    wait_workers(p, 1, 10000);
    for (i = 0; i < 3; i++) {
        submit_sleep(p, i, 400, 700, 0);
    }
    cr_assert(tally_wait(&t, 3, 10000), "%d of 3 results", t.n);
    rn_pool_stats(p, &st);
    cr_assert_eq(t.ok, 3, "%d of 3 ok, %llu timeouts", t.ok, (unsigned long long) st.timeouts);
    cr_assert_eq(st.timeouts, 0);
    cr_assert_eq(st.dispatched, 3);
    at = t_clock_ms(CLOCK_REALTIME) + 700;
    for (i = 10; i < 13; i++) {
        submit_sleep(p, i, 400, 0, at);
    }
    cr_assert(tally_wait(&t, 6, 10000), "%d of 6 results", t.n);
    rn_pool_stats(p, &st);
    cr_assert_eq(t.ok, 4, "%d of 6 ok", t.ok);
    cr_assert_eq(st.timeouts, 2);
    stop_workers(&w, 1, false);
    rn_pool_stop(p);
}
