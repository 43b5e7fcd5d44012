/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl exec FILE --input JSON`: runs one workflow instance without a database. The whole
 * engine runs in this process — the runner (runner/engine/runner.h) on the in-memory backend, its
 * worker pool on an ipc socket in a temp directory, and one in-process SDK worker serving the
 * std.* actions — then prints the result. For trying a workflow; nothing is kept.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn/worker.h"
#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/value.h"
#include "runner/ctl/ctl.h"
#include "runner/engine/defaults.h"
#include "runner/engine/runner.h"
#include "runner/exec/exec.h"
#include "runner/store/backend.h"
#include "worker-protocol/std_actions.h"

/* The engine in this process: the in-memory backend, the runner, the built-in worker, and the
 * temp directory of their socket. */
struct engine {
    struct rn_backend *mem;
    struct rn_runner *r;
    struct cairn_worker *w;
    char dir[32], url[160], sock[128];
    bool made_dir;
};

/* cairn-runner's defaults (runner/engine/defaults.h), but sized for one instance in memory. */
static void
engine_cfg(struct engine *e, struct rn_runner_cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->backend = e->mem;
    cfg->worker_listen = e->url;
    cfg->shards = 1;
    cfg->persisters = RN_DEFAULT_PERSISTERS;
    cfg->max_instances = 16;
    cfg->poll_interval_ms = 20;
    cfg->lock_ttl_ms = RN_DEFAULT_LOCK_TTL_MS;
    cfg->lock_heartbeat_ms = RN_DEFAULT_LOCK_HEARTBEAT_MS;
    cfg->reclaim_interval_ms = 0;               /* no other runner can die holding leases */
    cfg->evict_sleep_threshold_ms = UINT32_MAX; /* in memory, a sleeping instance just waits */
    cfg->evict_child_wait_ms = UINT32_MAX;
    cfg->max_child_depth = RN_DEFAULT_MAX_CHILD_DEPTH;
    cfg->default_action_timeout_ms = RN_DEFAULT_ACTION_TIMEOUT_MS;
    cfg->worker_idle_ms = RN_DEFAULT_WORKER_IDLE_MS;
    cfg->max_inline_steps = RN_DEFAULT_MAX_INLINE_STEPS;
}

/* The built-in worker, serving the std.* actions. */
static int
worker_start(struct engine *e)
{
    struct cairn_worker_options wo;
    size_t i;

    memset(&wo, 0, sizeof(wo));
    wo.name = "cairnctl-exec";
    wo.slots = 8;
    wo.start_timeout_ms = 10000;
    if (cairn_worker_new(e->url, &wo, &e->w) != CN_OK) {
        return EXIT_USAGE;
    }
    for (i = 0; i < cairn_n_std; i++) {
        if (cairn_worker_register(e->w, cairn_std_actions[i].name, cairn_std_actions[i].fn, NULL) !=
            CN_OK) {
            return EXIT_USAGE;
        }
    }
    if (cairn_worker_start(e->w) != CN_OK) {
        fprintf(stderr, "cairnctl exec: the built-in worker did not start: %s\n",
                cairn_worker_error(e->w));
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* Starts the engine with src registered as workflow main and one instance of it enqueued with
 * input (*iid). Returns an exit status, after saying why it failed; stop it with engine_stop
 * either way. */
static int
engine_start(struct engine *e, const char *src, const struct ir_dag *dag, struct ir_val input,
             struct rn_iid *iid)
{
    struct cn_errmsg em = {{0}};
    struct rn_runner_cfg cfg;
    struct rn_vid vid;

    (void) snprintf(e->dir, sizeof(e->dir), "/tmp/cairnctl-exec-XXXXXX");
    if (mkdtemp(e->dir) == NULL) {
        fprintf(stderr, "cairnctl exec: cannot make a temp directory\n");
        return EXIT_USAGE;
    }
    e->made_dir = true;
    (void) snprintf(e->sock, sizeof(e->sock), "%s/w.sock", e->dir);
    (void) snprintf(e->url, sizeof(e->url), "ipc://%s", e->sock);
    cn_log_setup(CN_LOG_WARN, false);
    if (rn_backend_mem_new(&e->mem) != CN_OK ||
        rn_backend_mem_register(e->mem, "main", src, &vid) != CN_OK ||
        rn_backend_mem_enqueue(e->mem, "main", input, 0, iid) != CN_OK ||
        rn_backend_mem_set_timeout(e->mem, *iid, dag->timeout_ms) != CN_OK) {
        fprintf(stderr, "cairnctl exec: out of memory\n");
        return EXIT_USAGE;
    }
    engine_cfg(e, &cfg);
    if (rn_runner_start(&cfg, &e->r, &em) != CN_OK) {
        fprintf(stderr, "cairnctl exec: cannot start the engine: %s\n", em.text);
        return EXIT_USAGE;
    }
    return worker_start(e);
}

static void
engine_stop(struct engine *e)
{
    if (e->w != NULL) {
        cairn_worker_stop(e->w, 1000);
        cairn_worker_free(e->w);
    }
    rn_runner_stop(e->r, 2000); /* the finished instance's last acknowledgement, at most */
    rn_backend_mem_free(e->mem);
    if (e->made_dir) {
        (void) unlink(e->sock);
        (void) rmdir(e->dir);
    }
}

/* The outcome: the result (or, with --json, an object with the status too) on stdout, else the
 * error on stderr. Returns the exit status it means. */
static int
print_outcome(const struct cn_opts *o, const char *file, enum rn_outcome outcome,
              struct ir_val result, size_t nresults)
{
    struct cn_buf out = CN_BUF_INIT;
    struct cn_errmsg em;

    if (ir_val_to_json(result, &out, &em) != CN_OK) {
        cn_buf_clear(&out);
        if (cn_buf_puts(&out, "null") != CN_OK) {
            cn_buf_fini(&out);
            return EXIT_USAGE;
        }
    }
    if (ctl_json_out(o)) {
        printf("{\"status\": \"%s\", \"%s\": %s, \"actions\": %zu}\n", rn_outcome_name(outcome),
               outcome == RN_COMPLETED ? "result" : "error", out.data, nresults);
    } else if (outcome == RN_COMPLETED) {
        printf("%s\n", out.data);
    } else {
        fprintf(stderr, "%s %s: %s\n", file,
                outcome == RN_FAILED      ? "failed"
                : outcome == RN_TIMED_OUT ? "timed out"
                                          : "was cancelled",
                out.data);
    }
    cn_buf_fini(&out);
    return outcome == RN_COMPLETED ? EXIT_OK : EXIT_FAILED;
}

/* --input or --input-file as a value. */
static int
read_input(const struct cn_opts *o, struct ir_val *input)
{
    struct cn_errmsg em = {{0}};
    char *compact = NULL;
    int status;

    if ((status = ctl_read_input(o->prog, cn_opts_str(o, "input"), cn_opts_str(o, "input-file"),
                                 &compact)) != EXIT_OK) {
        return status;
    }
    if (ir_val_from_json(compact, strlen(compact), input, &em) != CN_OK) {
        fprintf(stderr, "%s: --input: %s\n", o->prog, em.text);
        status = EXIT_REJECTED;
    }
    free(compact);
    return status;
}

int
ctl_cmd_exec(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_INPUT,
        CTL_OPT_INT("timeout", "300", 1, 86400, "S", "give up after S seconds (exit 5)"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    struct engine e = {.mem = NULL, .r = NULL, .w = NULL, .made_dir = false};
    struct ir_dag *dag = NULL;
    struct ir_val input = ir_null(), result = ir_null();
    enum rn_outcome outcome = RN_RUNNING;
    struct rn_iid iid;
    char *src = NULL;
    size_t src_len = 0, nresults = 0;
    long long timeout_s;
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status) || (status = read_input(&o, &input)) != EXIT_OK) {
        return status;
    }
    timeout_s = cn_opts_int(&o, "timeout");
    if ((status = ctl_compile_file(argv[0], NULL, &dag, &src, &src_len)) == EXIT_OK &&
        (status = engine_start(&e, src, dag, input, &iid)) == EXIT_OK) {
        if (rn_backend_mem_wait(e.mem, iid, cn_mono_ms() + timeout_s * 1000, &outcome, &result,
                                &nresults) != CN_OK) {
            outcome = RN_RUNNING; /* cannot happen: the instance was just enqueued */
        }
        if (outcome == RN_RUNNING) {
            fprintf(stderr, "%s: %s did not finish within %lld s\n", o.prog, argv[0], timeout_s);
            status = EXIT_PENDING;
        } else {
            status = print_outcome(&o, argv[0], outcome, result, nresults);
        }
    }
    engine_stop(&e);
    ir_val_release(result);
    ir_val_release(input);
    ir_dag_free(dag);
    free(src);
    return status;
}
