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

int
ctl_cmd_exec(int argc, char **argv)
{
    struct cn_opt rows[] = {
        {.flag = "input",
         .kind = CN_OPT_STR,
         .arg = "JSON",
         .help = "the instance's input, a JSON object (default {})"},
        {.flag = "input-file",
         .kind = CN_OPT_STR,
         .arg = "FILE",
         .help = "read the input from FILE (-: stdin), for one too long for a command line"},
        {.flag = "timeout",
         .kind = CN_OPT_INT,
         .def = "300",
         .min = 1,
         .max = 86400,
         .arg = "S",
         .help = "give up after S seconds (exit 5)"},
        CTL_OPT_JSON,
    };
    struct cn_opts o =
        CTL_OPTS("exec", "FILE [--input JSON | --input-file FILE] [--timeout S] [--json]", rows, 1);
    const char *file;
    long long timeout_s;
    struct rn_backend *mem = NULL;
    struct rn_runner *r = NULL;
    struct cairn_worker *w = NULL;
    struct rn_runner_cfg cfg;
    struct cairn_worker_options wo;
    struct cn_errmsg em = {{0}};
    struct ir_dag *dag = NULL;
    struct ir_val input = ir_null(), result = ir_null();
    struct cn_buf out = CN_BUF_INIT;
    enum rn_outcome outcome = RN_RUNNING;
    char dir[] = "/tmp/cairnctl-exec-XXXXXX", url[160], sock[128];
    struct rn_vid vid;
    struct rn_iid iid;
    char *src = NULL;
    size_t src_len = 0, i, nresults = 0;
    int status = EXIT_OK;
    bool made_dir = false;
    int64_t deadline;
    char *compact = NULL;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs == 0) {
        fprintf(stderr, "usage: %s\n", o.usage);
        return EXIT_USAGE;
    }
    file = argv[0];
    timeout_s = cn_opts_int(&o, "timeout");
    if ((status = ctl_read_input("exec", cn_opts_str(&o, "input"), cn_opts_str(&o, "input-file"),
                                 &compact)) != EXIT_OK) {
        return status;
    }
    if (ir_val_from_json(compact, strlen(compact), &input, &em) != CN_OK) {
        fprintf(stderr, "cairnctl exec: --input: %s\n", em.text);
        free(compact);
        return EXIT_REJECTED;
    }
    free(compact);
    if ((status = ctl_compile_file(file, NULL, &dag, &src, &src_len)) != EXIT_OK) {
        ir_val_release(input);
        return status;
    }
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "cairnctl exec: cannot make a temp directory\n");
        status = EXIT_USAGE;
        goto out;
    }
    made_dir = true;
    (void) snprintf(sock, sizeof(sock), "%s/w.sock", dir);
    (void) snprintf(url, sizeof(url), "ipc://%s", sock);
    cn_log_setup(CN_LOG_WARN, false);
    if (rn_backend_mem_new(&mem) != CN_OK ||
        rn_backend_mem_register(mem, "main", src, &vid) != CN_OK ||
        rn_backend_mem_enqueue(mem, "main", input, 0, &iid) != CN_OK ||
        rn_backend_mem_set_timeout(mem, iid, dag->timeout_ms) != CN_OK) {
        fprintf(stderr, "cairnctl exec: out of memory\n");
        status = EXIT_USAGE;
        goto out;
    }
    /* cairn-runner's defaults (runner/engine/defaults.h), but sized for one instance in memory. */
    memset(&cfg, 0, sizeof(cfg));
    cfg.backend = mem;
    cfg.worker_listen = url;
    cfg.shards = 1;
    cfg.persisters = RN_DEFAULT_PERSISTERS;
    cfg.max_instances = 16;
    cfg.poll_interval_ms = 20;
    cfg.lock_ttl_ms = RN_DEFAULT_LOCK_TTL_MS;
    cfg.lock_heartbeat_ms = RN_DEFAULT_LOCK_HEARTBEAT_MS;
    cfg.reclaim_interval_ms = 0;               /* no other runner can die holding leases */
    cfg.evict_sleep_threshold_ms = UINT32_MAX; /* in memory, a sleeping instance just waits */
    cfg.evict_child_wait_ms = UINT32_MAX;
    cfg.max_child_depth = RN_DEFAULT_MAX_CHILD_DEPTH;
    cfg.default_action_timeout_ms = RN_DEFAULT_ACTION_TIMEOUT_MS;
    cfg.worker_idle_ms = RN_DEFAULT_WORKER_IDLE_MS;
    cfg.max_inline_steps = RN_DEFAULT_MAX_INLINE_STEPS;
    if (rn_runner_start(&cfg, &r, &em) != CN_OK) {
        fprintf(stderr, "cairnctl exec: cannot start the engine: %s\n", em.text);
        status = EXIT_USAGE;
        goto out;
    }
    memset(&wo, 0, sizeof(wo));
    wo.name = "cairnctl-exec";
    wo.slots = 8;
    wo.start_timeout_ms = 10000;
    if (cairn_worker_new(url, &wo, &w) != CN_OK) {
        status = EXIT_USAGE;
        goto out;
    }
    for (i = 0; i < cairn_n_std; i++) {
        if (cairn_worker_register(w, cairn_std_actions[i].name, cairn_std_actions[i].fn, NULL) !=
            CN_OK) {
            status = EXIT_USAGE;
            goto out;
        }
    }
    if (cairn_worker_start(w) != CN_OK) {
        fprintf(stderr, "cairnctl exec: the built-in worker did not start: %s\n",
                cairn_worker_error(w));
        status = EXIT_USAGE;
        goto out;
    }
    deadline = cn_mono_ms() + timeout_s * 1000;
    if (rn_backend_mem_wait(mem, iid, deadline, &outcome, &result, &nresults) != CN_OK) {
        outcome = RN_RUNNING; /* cannot happen: the instance was just enqueued */
    }
    if (outcome == RN_RUNNING) {
        fprintf(stderr, "cairnctl exec: %s did not finish within %lld s\n", file, timeout_s);
        status = EXIT_PENDING;
        goto out;
    }
    if (ir_val_to_json(result, &out, &em) != CN_OK) {
        cn_buf_clear(&out);
        if (cn_buf_puts(&out, "null") != CN_OK) {
            status = EXIT_USAGE;
            goto out;
        }
    }
    if (cn_opts_bool(&o, "json")) {
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
    status = outcome == RN_COMPLETED ? EXIT_OK : EXIT_FAILED;
out:
    if (w != NULL) {
        cairn_worker_stop(w, 1000);
        cairn_worker_free(w);
    }
    rn_runner_stop(r, 2000); /* the finished instance's last acknowledgement, at most */
    rn_backend_mem_free(mem);
    if (made_dir) {
        (void) unlink(sock);
        (void) rmdir(dir);
    }
    ir_val_release(result);
    ir_val_release(input);
    cn_buf_fini(&out);
    ir_dag_free(dag);
    free(src);
    return status;
}
