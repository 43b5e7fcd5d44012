/* SPDX-License-Identifier: MIT */
/*
 * cairn-bench's report of one run: text, JSON (also appended to --json-out), Markdown or CSV
 * on stdout, and --plot's SVG of throughput over time, drawn by gnuplot from the samples.
 *
 * Threads: main's only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/cairn_bench.h"

/* Attempts one `dispatch` message carried on average (0: none sent). */
static double
per_message(const struct result *r)
{
    return r->messages > 0 ? r->sent / r->messages : 0;
}

/* One run as a JSON line on f. */
static void
json_line(FILE *f, const struct opts *o, const struct bench_case *bc, double aps, double ips,
          const struct result *r)
{
    fprintf(f,
            "{\"case\": \"%s\", \"instances\": %ld, \"actions_per_instance\": %ld, "
            "\"runners\": %ld, \"shards\": %ld, \"workers_per_runner\": %ld, \"slots\": %ld, "
            "\"prefetch\": %ld, \"transport\": \"%s\", \"rate\": %.1f, \"completed\": %ld, "
            "\"failed\": %ld, \"drain_seconds\": %.3f, \"actions_per_second\": %.0f, "
            "\"instances_per_second\": %.0f, \"enqueue_per_second\": %.0f, "
            "\"latency_ms\": {\"p50\": %.2f, \"p95\": %.2f, \"p99\": %.2f, \"max\": %.2f}, "
            "\"dispatch_delay_ms\": {\"p50\": %.3f, \"p95\": %.3f, \"p99\": %.3f, "
            "\"max\": %.3f, \"count\": %.0f}, "
            "\"persist_ms\": {\"p50\": %.3f, \"p99\": %.3f, \"count\": %.0f}, "
            "\"action_ms\": {\"p50\": %.3f, \"p99\": %.3f, \"count\": %.0f}, "
            "\"rows_per_action\": %.2f, \"wal_bytes_per_action\": %.0f, "
            "\"runner_cpu_seconds_per_1000_actions\": %.3f, \"runner_peak_rss_kb\": %ld, "
            "\"shared_workers\": %ld, \"attempts_per_dispatch_message\": %.1f}\n",
            bc->name, o->instances, o->actions, o->runners, o->shards, o->workers, o->slots,
            o->prefetch, o->transport, o->rate, r->completed, r->failed, r->drain_s, aps, ips,
            r->enqueue_rate, r->p50, r->p95, r->p99, r->max, r->dispatch.p50, r->dispatch.p95,
            r->dispatch.p99, r->dispatch.max, r->dispatch.count, r->persist.p50, r->persist.p99,
            r->persist.count, r->action.p50, r->action.p99, r->action.count, r->rows, r->wal,
            r->cpu_per_1000, r->rss_kb, o->shared, per_message(r));
}

void
report(const struct opts *o, const struct bench_case *bc, long actions_total,
       const struct result *r)
{
    double aps = r->drain_s > 0 ? (double) actions_total / r->drain_s : 0;
    double ips = r->drain_s > 0 ? (double) o->instances / r->drain_s : 0;
    char mode[64];

    if (o->rate > 0) {
        (void) snprintf(mode, sizeof(mode), "at %.0f/s", o->rate);
    } else {
        (void) snprintf(mode, sizeof(mode), "before");
    }
    if (o->json_out != NULL) {
        FILE *f = fopen(o->json_out, "a");
        if (f == NULL) {
            fprintf(stderr, "cairn-bench: %s: %s\n", o->json_out, strerror(errno));
            exit(1);
        }
        json_line(f, o, bc, aps, ips, r);
        fclose(f);
    }
    if (strcmp(o->format, "json") == 0) {
        json_line(stdout, o, bc, aps, ips, r);
    } else if (strcmp(o->format, "markdown") == 0) {
        printf("| case | instances x actions | enqueue | actions/s | instances/s | enqueue/s | "
               "latency p50 / p95 / p99 / max ms | ready to dispatch p50 / p99 / max ms | "
               "rows / action | WAL bytes / action | runner CPU s / 1000 actions | runner peak "
               "RSS |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        printf("| %s | %ld x %ld | %s | %.0f | %.0f | %.0f | %.1f / %.1f / %.1f / %.1f | %.2f / "
               "%.2f / %.1f | %.2f | %.0f | %.3f | %ld MiB |\n",
               bc->name, o->instances, o->actions, mode, aps, ips, r->enqueue_rate, r->p50, r->p95,
               r->p99, r->max, r->dispatch.p50, r->dispatch.p99, r->dispatch.max, r->rows, r->wal,
               r->cpu_per_1000, r->rss_kb / 1024);
    } else if (strcmp(o->format, "csv") == 0) {
        printf("case,instances,actions,runners,shards,workers,slots,prefetch,transport,rate,"
               "completed,failed,drain_s,actions_per_s,instances_per_s,enqueue_per_s,p50_ms,"
               "p95_ms,p99_ms,max_ms,dispatch_p50_ms,dispatch_p95_ms,dispatch_p99_ms,"
               "dispatch_max_ms,rows_per_action,wal_bytes_per_action,cpu_s_per_1000,"
               "peak_rss_kb\n");
        printf("%s,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%s,%.1f,%ld,%ld,%.3f,%.0f,%.0f,%.0f,%.2f,%.2f,"
               "%.2f,%.2f,%.3f,%.3f,%.3f,%.3f,%.2f,%.0f,%.3f,%ld\n",
               bc->name, o->instances, o->actions, o->runners, o->shards, o->workers, o->slots,
               o->prefetch, o->transport, o->rate, r->completed, r->failed, r->drain_s, aps, ips,
               r->enqueue_rate, r->p50, r->p95, r->p99, r->max, r->dispatch.p50, r->dispatch.p95,
               r->dispatch.p99, r->dispatch.max, r->rows, r->wal, r->cpu_per_1000, r->rss_kb);
    } else {
        printf("case %s: %ld instances x %ld actions, %ld runner(s) x %ld shard(s), %ld "
               "worker(s) x %ld slots (prefetch %ld), %s, enqueued %s\n",
               bc->name, o->instances, o->actions, o->runners, o->shards, o->workers, o->slots,
               o->prefetch, o->transport, mode);
        printf("  drain        %.3f s: %.0f actions/s, %.0f instances/s (%ld completed, %ld "
               "failed)\n",
               r->drain_s, aps, ips, r->completed, r->failed);
        printf("  enqueue      %.0f instances/s\n", r->enqueue_rate);
        printf("  latency      enqueue to completion p50 %.1f ms, p95 %.1f, p99 %.1f, max %.1f\n",
               r->p50, r->p95, r->p99, r->max);
        printf("  dispatch     action ready to dispatch p50 %.2f ms, p95 %.2f, p99 %.2f, max "
               "%.1f (%.0f dispatches)\n",
               r->dispatch.p50, r->dispatch.p95, r->dispatch.p99, r->dispatch.max,
               r->dispatch.count);
        printf("  persist      %.0f transactions, p50 %.2f ms, p99 %.2f\n", r->persist.count,
               r->persist.p50, r->persist.p99);
        printf("  actions      dispatch to outcome p50 %.2f ms, p99 %.2f (%.0f outcomes), %.1f "
               "per dispatch message\n",
               r->action.p50, r->action.p99, r->action.count, per_message(r));
        printf("  database     %.2f rows and %.0f WAL bytes written per action\n", r->rows, r->wal);
        printf("  runner       %.3f CPU s per 1000 actions, peak RSS %ld MiB\n", r->cpu_per_1000,
               r->rss_kb / 1024);
    }
}

/* Writes the throughput-over-time SVG with gnuplot. */
void
plot(const char *path, const struct bench_case *bc, const struct opts *o, const struct sample *s,
     size_t n)
{
    char dat[128], gp[128], log[128];
    FILE *f;
    size_t i;

    if (n < 2) {
        die("the run was too short to plot (%zu samples)", n);
    }
    (void) snprintf(dat, sizeof(dat), "%s/plot.dat", g.tmp);
    (void) snprintf(gp, sizeof(gp), "%s/plot.gp", g.tmp);
    (void) snprintf(log, sizeof(log), "%s/gnuplot.log", g.tmp);
    if ((f = fopen(dat, "w")) == NULL) {
        die("%s: %s", dat, strerror(errno));
    }
    for (i = 1; i < n; i++) {
        double dt = s[i].t - s[i - 1].t;
        fprintf(f, "%.3f %.1f %.1f\n", s[i].t, (s[i].outcomes - s[i - 1].outcomes) / dt,
                (s[i].instances - s[i - 1].instances) / dt);
    }
    fclose(f);
    if ((f = fopen(gp, "w")) == NULL) {
        die("%s: %s", gp, strerror(errno));
    }
    fprintf(f,
            "set terminal svg size 900,420 dynamic font 'sans,11'\n"
            "set output '%s'\n"
            "set title 'cairn-bench %s: %ld instances x %ld actions, %ld runner(s), %ld "
            "worker(s) each'\n"
            "set xlabel 'seconds since the fleet started'\nset ylabel 'per second'\n"
            "set grid\nset key top right\nset yrange [0:*]\n"
            "plot '%s' using 1:2 with lines lw 2 title 'worker outcomes/s', "
            "'%s' using 1:3 with lines lw 2 title 'instances completed/s'\n",
            path, bc->name, o->instances, o->actions, o->runners, o->workers, dat, dat);
    fclose(f);
    {
        char cmd[512];
        (void) snprintf(cmd, sizeof(cmd), "gnuplot '%s' >'%s' 2>&1", gp, log);
        if (system(cmd) != 0) {
            die("gnuplot failed (log: %s)", log);
        }
    }
}
