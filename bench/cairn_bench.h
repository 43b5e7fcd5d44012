/* SPDX-License-Identifier: MIT */
/*
 * cairn-bench's shared declarations (bench/README.md, "cairn-bench"): what a run is asked for,
 * what it measures, and the processes it must always stop. Its files:
 *   cairn_bench.c    main: one run, phase by phase (register, enqueue, fleet, drain, figures)
 *   bench_options.c  the cases' workflows and the command line
 *   bench_procs.c    the child processes, signals, the cleanup, the throwaway PostgreSQL
 *   bench_metrics.c  the runners' figures: /metrics and /proc
 *   bench_report.c   the report: text, JSON, Markdown or CSV, and the SVG plot
 *
 * Threads: one, and no locks: a signal only sets g_stop, which the drain polls.
 */
#ifndef BENCH_CAIRN_BENCH_H
#define BENCH_CAIRN_BENCH_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#define MAX_PROCS   256
#define MAX_SAMPLES 100000
/* Room for one runner's /metrics page. */
#define METRICS_MAX (1 << 16)

struct bench_case {
    const char *name;
    const char *source;
    long instances, actions; /* defaults */
    bool one_action;         /* ACTIONS is ignored: one per instance */
    const char *child_name;  /* a child workflow the case's calls, registered first; NULL: none */
    const char *child_source;
};

/* bench_options.c */
extern const struct bench_case cases[];
extern const size_t ncases;

struct opts {
    const char *db_url, *case_name, *transport, *format, *bin_dir, *plot, *pg_bin;
    const char *json_out; /* also append the JSON line to this file (bench/run-all --peers) */
    long instances, actions, runners, shards, workers, slots, prefetch, timeout_s;
    double rate;               /* instances/s while running; 0: all before the start */
    double fail, timeout, nap; /* mixed: fractions of steps */
    long max_running;          /* a concurrency limit on the case's workflow; 0: none */
    long shared; /* --shared-workers: workers in all, each serving every runner; 0: per runner */
};

/* A runner's latency summary (/metrics), in ms, over one or several runners: quantiles do not
 * add up, so several runners give the count-weighted p50 and the largest p95/p99/max (an upper
 * bound). */
struct summ {
    double p50, p95, p99, max, count;
};

struct result {
    double enqueue_rate, drain_s;
    long completed, failed;
    double p50, p95, p99, max; /* enqueue to completion, ms */
    struct summ dispatch;      /* action ready to dispatch */
    struct summ persist;       /* persist transactions */
    struct summ action;        /* actions: dispatch to outcome */
    double rows, wal;          /* per action */
    double cpu_per_1000;       /* runner CPU seconds per 1000 actions */
    long rss_kb;               /* largest runner peak RSS */
    double sent, messages;     /* attempts sent to workers, `dispatch` messages (batching) */
};

struct sample {
    double t, outcomes, instances;
};

/* Everything the cleanup must find, also after a signal. */
struct bench_global {
    pid_t pids[MAX_PROCS];
    int npids;
    char tmp[64];    /* sockets and logs; "" when not made */
    char pg_dir[64]; /* the throwaway cluster; "" when none */
    const char *pg_bin;
};

/* bench_options.c */
void usage(FILE *f);
void parse(int argc, char **argv, struct opts *o);

/* bench_procs.c */
extern struct bench_global g;
extern volatile sig_atomic_t g_stop;
void catch_signals(void);
double now_s(void);
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
pid_t spawn(const char *const argv[], const char *log);
int free_port(void);
void stop_fleet(void);
void cleanup(bool keep_tmp);
const char *pg_start(const char *bin);

/* bench_metrics.c */
void proc_usage(pid_t pid, double *cpu, long *rss_kb);
bool scrape(int port, char *buf, size_t cap);
double sample_value(const char *text, const char *name);
void summ_merge(struct summ *acc, const char *text, const char *name);
void take_sample(struct sample *sp, double t, const int *ports, int nports, char *buf, long done);

/* bench_report.c */
void report(const struct opts *o, const struct bench_case *bc, long actions_total,
            const struct result *r);
void plot(const char *path, const struct bench_case *bc, const struct opts *o,
          const struct sample *s, size_t n);

#endif
