/* SPDX-License-Identifier: MIT */
/*
 * cairn-exec-bench: drives the executor alone (no database, no sockets) with instant actions
 * and reports executor CPU per action and snapshot sizes, for three shapes:
 *   sequence  N sequential actions (a generated workflow of N statements)
 *   spread    one spread of N actions
 *   loop      a for loop of N iterations, one action each
 * Every action result is fed back at once, as an event batch per step; the snapshot is
 * serialized whenever the step asks for one (as the persister would), and timed separately.
 * Usage: cairn-exec-bench [--n N] [--case sequence|spread|loop|all] [--markdown]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/buf.h"
#include "ir/base/xalloc.h"
#include "ir/compile.h"
#include "ir/value.h"
#include "runner/exec/exec.h"

static double
cpu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

struct bench_result {
    const char *name;
    long n, actions, steps, snapshots;
    double step_s, snap_s;
    size_t snap_first, snap_max, snap_last;
};

static char *
make_source(const char *kind, long n)
{
    struct cn_buf b = CN_BUF_INIT;
    long i;
    char *out = NULL;

    if (strcmp(kind, "sequence") == 0) {
        if (cn_buf_puts(&b, "fn main():\n    x = 0\n") != CN_OK) {
            goto fail;
        }
        for (i = 0; i < n; i++) {
            if (cn_buf_puts(&b, "    x = @std.echo(value=x + 1)\n") != CN_OK) {
                goto fail;
            }
        }
        if (cn_buf_puts(&b, "    return x\n") != CN_OK) {
            goto fail;
        }
    } else if (strcmp(kind, "spread") == 0) {
        if (cn_buf_printf(&b,
                          "fn main():\n    ys = spread range(%ld):i -> @std.echo(value=i)\n"
                          "    return len(ys)\n",
                          n) != CN_OK) {
            goto fail;
        }
    } else {
        if (cn_buf_printf(&b,
                          "fn main():\n    t = 0\n    for i in range(%ld):\n"
                          "        v = @std.echo(value=i)\n        t = t + v\n    return t\n",
                          n) != CN_OK) {
            goto fail;
        }
    }
    if (cn_buf_take(&b, &out, NULL) != CN_OK) {
        goto fail;
    }
    return out;
fail:
    cn_buf_fini(&b);
    return NULL;
}

static int
run_case(const char *kind, long n, struct bench_result *res)
{
    char *src = make_source(kind, n);
    struct ir_diags d;
    struct ir_dag *dag = NULL;
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    struct cn_buf snap = CN_BUF_INIT;
    struct rn_event *evs = NULL;
    size_t cap = 0, i;
    struct rn_iid id = {{7, 1, 2, 3}};
    struct ir_val input;
    int64_t now = 1700000000000LL;
    double t0;
    int rc = 1;

    memset(res, 0, sizeof(*res));
    memset(&o, 0, sizeof(o));
    o.result = ir_null();
    res->name = kind;
    res->n = n;
    if (src == NULL) {
        return 1;
    }
    ir_diags_init(&d, kind, src, strlen(src));
    if (ir_compile_source(src, strlen(src), &d, &dag) != CN_OK || ir_map_new(0, &input) != CN_OK) {
        fprintf(stderr, "compile failed\n");
        goto out;
    }
    t0 = cpu_now();
    if (rn_instance_start(dag, id, input, &cfg, now, &in, &o) != CN_OK) {
        goto out;
    }
    ir_val_release(input);
    res->step_s += cpu_now() - t0;
    for (;;) {
        if (o.snapshot_needed) {
            t0 = cpu_now();
            cn_buf_clear(&snap);
            if (rn_instance_snapshot(in, &snap) != CN_OK) {
                goto out;
            }
            res->snap_s += cpu_now() - t0;
            res->snapshots++;
            if (res->snap_first == 0) {
                res->snap_first = snap.len;
            }
            if (snap.len > res->snap_max) {
                res->snap_max = snap.len;
            }
            res->snap_last = snap.len;
        }
        if (o.outcome != RN_RUNNING) {
            break;
        }
        if (o.actions.len == 0) {
            fprintf(stderr, "%s: stuck\n", kind);
            goto out;
        }
        if (o.actions.len > cap) {
            cap = o.actions.len;
            evs = cn_xreallocarray(evs, cap, sizeof(*evs));
        }
        /* Instant actions: std.echo returns its value. */
        for (i = 0; i < o.actions.len; i++) {
            const struct rn_action_req *q = &o.actions.items[i];
            const struct ir_val *v = ir_map_get(q->kwargs, "value", 5);
            evs[i].exec_id = q->exec_id;
            evs[i].kind = RN_EV_RESULT;
            evs[i].attempt = q->attempt;
            evs[i].value = v ? ir_val_retain(*v) : ir_null();
        }
        res->actions += (long) o.actions.len;
        {
            size_t nev = o.actions.len;
            rn_step_out_clear(&o);
            now++;
            t0 = cpu_now();
            if (rn_instance_step(in, evs, nev, now, &o) != CN_OK) {
                goto out;
            }
            res->step_s += cpu_now() - t0;
            for (i = 0; i < nev; i++) {
                ir_val_release(evs[i].value);
            }
        }
        res->steps++;
    }
    rc = o.outcome == RN_COMPLETED ? 0 : 1;
out:
    free(evs);
    cn_buf_fini(&snap);
    rn_step_out_fini(&o);
    rn_instance_free(in);
    ir_dag_free(dag);
    ir_diags_fini(&d);
    free(src);
    return rc;
}

int
main(int argc, char **argv)
{
    const char *which = "all";
    const char *cases[] = {"sequence", "spread", "loop"};
    long n[] = {1000, 10000, 10000}, forced = 0;
    int markdown = 0, i, rc = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            forced = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
            which = argv[++i];
        } else if (strcmp(argv[i], "--markdown") == 0) {
            markdown = 1;
        } else {
            fprintf(stderr, "usage: cairn-exec-bench [--n N] [--case sequence|spread|loop|all] "
                            "[--markdown]\n");
            return 2;
        }
    }
    if (markdown) {
        printf("| case | actions | executor CPU µs/action | snapshot CPU µs/action | snapshots "
               "| first / max / last snapshot bytes |\n|---|---|---|---|---|---|\n");
    }
    for (i = 0; i < 3; i++) {
        struct bench_result r;
        if (strcmp(which, "all") != 0 && strcmp(which, cases[i]) != 0) {
            continue;
        }
        if (run_case(cases[i], forced ? forced : n[i], &r) != 0) {
            fprintf(stderr, "%s failed\n", cases[i]);
            rc = 1;
            continue;
        }
        if (markdown) {
            printf("| %s (N=%ld) | %ld | %.2f | %.2f | %ld | %zu / %zu / %zu |\n", r.name, r.n,
                   r.actions, r.step_s * 1e6 / (double) r.actions,
                   r.snap_s * 1e6 / (double) r.actions, r.snapshots, r.snap_first, r.snap_max,
                   r.snap_last);
        } else {
            printf("%-8s N=%-6ld actions=%-6ld executor=%.2f us/action snapshot=%.2f us/action "
                   "snapshots=%ld bytes first=%zu max=%zu last=%zu\n",
                   r.name, r.n, r.actions, r.step_s * 1e6 / (double) r.actions,
                   r.snap_s * 1e6 / (double) r.actions, r.snapshots, r.snap_first, r.snap_max,
                   r.snap_last);
        }
    }
    return rc;
}
