/* SPDX-License-Identifier: MIT */
/*
 * The ThreadSanitizer program (tests/race/README.md): the whole engine in one process, every
 * thread at once, for a few seconds. Two runners share one in-memory backend; each has its
 * shard threads, persisters, claimer, lease keeper with the reclaimer, and a worker pool served
 * by an in-process SDK worker with several slot threads. The instances fan out, retry, sleep
 * long enough to be handed back, and have their leases stolen (so that both
 * runners claim the same instance, and the first finds its lease lost); one runner is stopped
 * and started again half-way. Criterion cannot run under TSan, hence a plain program.
 *
 * Passes when every instance ends with exactly the expected result and, under TSan, nothing is
 * reported (TSAN_OPTIONS=halt_on_error=1 makes any report fatal). Also runs, slower to find
 * nothing, in the normal builds.
 *
 * Usage: race_runner [SECONDS]   (default 4: the time during which leases are stolen and a
 * runner restarts; then it waits up to 120 s for every instance to finish).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn/worker.h"
#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/value.h"
#include "runner/engine/runner.h"
#include "runner/exec/exec.h"
#include "runner/store/backend.h"
#include "worker-protocol/std_actions.h"

#define N_INSTANCES 240
#define N_RUNNERS   2

/* Fans out over n items, runs two calls in parallel, waits in an action, retries a call that
 * fails once, and sleeps past the eviction threshold: every path between the shard, the
 * persisters, the keeper and the pool is taken. */
static const char workflow[] =
    "fn main(input: [n, key], output: [r]):\n"
    "    xs = spread range(n):i -> @std.echo(value=i)\n"
    "    a, b = parallel:\n"
    "        @std.echo(value=key)\n"
    "        @std.echo(value=n)\n"
    "    @std.sleep(ms=60)\n"
    "    f = @std.flaky(key=key, failures=1) [FlakyError -> retry: 3]\n"
    "    sleep 0.2\n"
    "    total = 0\n"
    "    for x in xs:\n"
    "        total = total + x\n"
    "    return {\"total\": total, \"key\": a, \"n\": b, \"attempt\": f[\"attempt\"]}\n";

struct node {
    char url[160];
    struct rn_runner *runner;
    struct cairn_worker *worker;
};

static char dir[] = "/tmp/cairn-race-XXXXXX";
static struct rn_runner_stats total; /* summed over every runner that stopped */

static int
start_node(struct rn_backend *mem, int idx, struct node *nd)
{
    struct rn_runner_cfg cfg;
    struct cairn_worker_options wo;
    struct cn_errmsg em = {{0}};
    size_t i;

    (void) snprintf(nd->url, sizeof(nd->url), "ipc://%s/w%d.sock", dir, idx);
    memset(&cfg, 0, sizeof(cfg));
    cfg.backend = mem;
    cfg.worker_listen = nd->url;
    cfg.shards = 2;
    cfg.persisters = 2;
    cfg.max_instances = 48;
    cfg.poll_interval_ms = 10;
    cfg.lock_ttl_ms = 400;
    cfg.lock_heartbeat_ms = 100;
    cfg.reclaim_interval_ms = 100;
    cfg.evict_sleep_threshold_ms = 50; /* the workflow's 0.2 s sleep is handed back */
    cfg.default_action_timeout_ms = 10000;
    cfg.worker_idle_ms = 200;
    if (rn_runner_start(&cfg, &nd->runner, &em) != CN_OK) {
        fprintf(stderr, "race: runner %d did not start: %s\n", idx, em.text);
        return -1;
    }
    memset(&wo, 0, sizeof(wo));
    wo.name = "race";
    wo.slots = 4;
    wo.start_timeout_ms = 10000;
    if (cairn_worker_new(nd->url, &wo, &nd->worker) != CN_OK) {
        fprintf(stderr, "race: worker %d: cannot create\n", idx);
        return -1;
    }
    for (i = 0; i < cairn_n_std; i++) {
        if (cairn_worker_register(nd->worker, cairn_std_actions[i].name, cairn_std_actions[i].fn,
                                  NULL) != CN_OK) {
            return -1;
        }
    }
    if (cairn_worker_start(nd->worker) != CN_OK) {
        fprintf(stderr, "race: worker %d did not start: %s\n", idx, cairn_worker_error(nd->worker));
        return -1;
    }
    return 0;
}

static void
stop_node(struct node *nd)
{
    if (nd->worker != NULL) {
        cairn_worker_stop(nd->worker, 1000);
        cairn_worker_free(nd->worker);
        nd->worker = NULL;
    }
    if (nd->runner != NULL) {
        struct rn_runner_stats st;

        rn_runner_stats(nd->runner, &st);
        total.claimed += st.claimed;
        total.lost += st.lost;
        total.evicted += st.evicted;
        total.dispatched += st.dispatched;
        rn_runner_stop(nd->runner, 1000);
        nd->runner = NULL;
    }
}

/* The int at key in map m, or -1. */
static int64_t
map_int(struct ir_val m, const char *key)
{
    const struct ir_val *v = m.type == IR_T_MAP ? ir_map_get(m, key, strlen(key)) : NULL;

    return v != NULL && v->type == IR_T_INT ? v->u.i : -1;
}

/* Checks one finished instance against what its input says it must return. */
static int
check(int k, enum rn_outcome oc, struct ir_val r)
{
    int64_t n = 3 + k % 6;

    if (oc != RN_COMPLETED) {
        fprintf(stderr, "race: instance %d ended %s\n", k, rn_outcome_name(oc));
        return -1;
    }
    if (map_int(r, "total") != n * (n - 1) / 2 || map_int(r, "key") != k || map_int(r, "n") != n ||
        map_int(r, "attempt") != 2) {
        fprintf(stderr,
                "race: instance %d: total %" PRId64 " key %" PRId64 " n %" PRId64
                " attempt %" PRId64 ", want %" PRId64 " %d %" PRId64 " 2\n",
                k, map_int(r, "total"), map_int(r, "key"), map_int(r, "n"), map_int(r, "attempt"),
                n * (n - 1) / 2, k, n);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 4.0;
    struct rn_backend *mem = NULL;
    struct node nodes[N_RUNNERS];
    static struct rn_iid iids[N_INSTANCES];
    struct rn_vid vid;
    int64_t t0, deadline;
    int i, failed = 0, restarted = 0, expired = 0, enqueued = 0;
    unsigned seed = 12345;

    memset(nodes, 0, sizeof(nodes));
    if (mkdtemp(dir) == NULL) {
        perror("race: mkdtemp");
        return 2;
    }
    cn_log_setup(CN_LOG_ERROR, false);
    if (rn_backend_mem_new(&mem) != CN_OK ||
        rn_backend_mem_register(mem, "race", workflow, &vid) != CN_OK) {
        fprintf(stderr, "race: cannot set up the backend\n");
        return 2;
    }
    for (i = 0; i < N_RUNNERS; i++) {
        if (start_node(mem, i, &nodes[i]) != 0) {
            return 2;
        }
    }
    t0 = cn_mono_ms();
    /* Arrivals spread over the first 80% of the run, and the faults among the instances that
     * arrived last (those are running): leases stolen from their holders, and one runner
     * stopped (handing its instances back) and started again. */
    while (cn_mono_ms() - t0 < (int64_t) (seconds * 1000)) {
        int64_t due = (cn_mono_ms() - t0) * N_INSTANCES / (int64_t) (seconds * 800) + 1;
        bool stolen = false;

        for (; enqueued < N_INSTANCES && enqueued < due; enqueued++) {
            struct ir_val in;

            if (ir_map_new(2, &in) != CN_OK ||
                ir_map_set_cstr(&in, "n", ir_int(3 + enqueued % 6)) != CN_OK ||
                ir_map_set_cstr(&in, "key", ir_int(enqueued)) != CN_OK ||
                rn_backend_mem_enqueue(mem, "race", in, 0, &iids[enqueued]) != CN_OK) {
                fprintf(stderr, "race: cannot enqueue\n");
                return 2;
            }
            ir_val_release(in);
        }
        usleep(10000);
        seed = seed * 1103515245u + 12345u;
        i = enqueued - 1 - (int) ((seed >> 8) % 12);
        if (i >= 0 && rn_backend_mem_steal(mem, iids[i], &stolen) == CN_OK && stolen) {
            expired++;
        }
        if (!restarted && cn_mono_ms() - t0 > (int64_t) (seconds * 500)) {
            stop_node(&nodes[0]);
            if (start_node(mem, 0, &nodes[0]) != 0) {
                return 2;
            }
            restarted = 1;
        }
    }
    deadline = cn_mono_ms() + 120000;
    for (i = 0; i < N_INSTANCES; i++) {
        enum rn_outcome oc = RN_RUNNING;
        struct ir_val r = ir_null();
        size_t nres = 0;

        if (i >= enqueued) {
            fprintf(stderr, "race: instance %d was never enqueued\n", i);
            failed++;
            continue;
        }
        if (rn_backend_mem_wait(mem, iids[i], deadline, &oc, &r, &nres) != CN_OK) {
            oc = RN_RUNNING;
        }
        if (oc == RN_RUNNING) {
            fprintf(stderr, "race: instance %d did not finish within 120 s\n", i);
            failed++;
        } else if (check(i, oc, r) != 0) {
            failed++;
        }
        ir_val_release(r);
    }
    /* Every instance finished: no runner may still count one as held (a copy dropped for a
     * lost lease or replaced by a new claim must leave the count, or the claimer would size its
     * claims from a count that never comes down). */
    for (i = 0; i < N_RUNNERS; i++) {
        struct rn_runner_stats st;
        int64_t until = cn_mono_ms() + 5000;

        do {
            rn_runner_stats(nodes[i].runner, &st);
        } while (st.active != 0 && cn_mono_ms() < until && usleep(10000) == 0);
        if (st.active != 0) {
            fprintf(stderr, "race: runner %d still counts %" PRIu64 " instance(s) as held\n", i,
                    st.active);
            failed++;
        }
    }
    for (i = 0; i < N_RUNNERS; i++) {
        stop_node(&nodes[i]);
    }
    rn_backend_mem_free(mem);
    for (i = 0; i < N_RUNNERS; i++) {
        char sock[200];
        (void) snprintf(sock, sizeof(sock), "%s/w%d.sock", dir, i);
        (void) unlink(sock);
    }
    (void) rmdir(dir);
    printf("race: %d instances, %d leases stolen, runner 0 restarted: %d; "
           "%" PRIu64 " claims, %" PRIu64 " leases found lost, %" PRIu64 " sleeps handed back, "
           "%" PRIu64 " actions dispatched; %d wrong or unfinished; %.1f s\n",
           N_INSTANCES, expired, restarted, total.claimed, total.lost, total.evicted,
           total.dispatched, failed, (double) (cn_mono_ms() - t0) / 1000.0);
    return failed == 0 ? 0 : 1;
}
