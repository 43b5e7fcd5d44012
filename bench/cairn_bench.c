/* SPDX-License-Identifier: MIT */
/*
 * cairn-bench: end-to-end benchmark harness (issue 6, first step). Against a database
 * (--database-url or CAIRN_DATABASE_URL; bench/run-e2e starts a durable throwaway one), it
 * registers the case's workflow, enqueues the instances, starts R cairn-runner processes with W
 * cairn-worker processes each, and measures the drain: from the runners' start until every
 * instance of this run has finished. Reports actions/s and instances/s, the enqueue rate,
 * enqueue-to-completion latency percentiles (from the database's timestamps), rows and WAL
 * bytes written per action (pg_stat_user_tables, the WAL position), runner CPU seconds per
 * 1 000 actions and peak RSS (from /proc, read just before the runners stop). Text, JSON,
 * Markdown or CSV; a progress line on stderr while it runs. Single-threaded.
 *
 * Cases (every instance gets {"n": ACTIONS, "run": TAG}):
 *   queue-noop  one std.noop per instance          sequence  ACTIONS sequential std.noop
 *   fan-out     a spread of ACTIONS std.noop       for-loop  ACTIONS std.noop with inline work
 *   cpu         a spread of ACTIONS std.hash (20 000 rounds each), to show worker scaling
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "runner/db.h"
#include "runner/migrate.h"

#define MAX_PROCS 256

struct bench_case {
    const char *name;
    const char *source;
    long instances, actions; /* defaults */
    bool one_action;         /* ACTIONS is ignored: one per instance */
};

static const struct bench_case cases[] = {
    {"queue-noop", "fn main(input: [n, run], output: [r]):\n    r = @std.noop()\n    return r\n",
     10000, 1, true},
    {"sequence",
     "fn main(input: [n, run], output: [done]):\n    done = 0\n    for i in range(n):\n"
     "        @std.noop(i=i)\n        done = done + 1\n    return done\n",
     1000, 10, false},
    {"fan-out",
     "fn main(input: [n, run], output: [count]):\n    results = spread range(n):i -> "
     "@std.noop(i=i)\n    return len(results)\n",
     10, 1000, false},
    {"for-loop",
     "fn main(input: [n, run], output: [acc]):\n    acc = 0\n    for i in range(n):\n"
     "        acc = acc + i * 2 - (i % 3)\n        if acc % 7 == 0:\n            acc = acc + 1\n"
     "        @std.noop(v=acc)\n    return acc\n",
     100, 100, false},
    {"cpu",
     "fn main(input: [n, run], output: [count]):\n    digests = spread range(n):i -> "
     "@std.hash(data=i, iterations=20000)\n    return len(digests)\n",
     20, 50, false},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

struct opts {
    const char *db_url, *case_name, *transport, *format, *bin_dir;
    long instances, actions, runners, shards, workers, slots, prefetch, timeout_s;
};

struct result {
    double enqueue_s, drain_s;
    long completed, failed;
    double p50, p95, p99, max; /* enqueue to completion, ms */
    double rows, wal;          /* per action */
    double cpu_per_1000;       /* runner CPU seconds per 1000 actions */
    long rss_kb;               /* largest runner peak RSS */
};

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void
die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "cairn-bench: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

/* Runs sql and returns the first column of the first row (malloc'd), or dies. */
static char *
q1(PGconn *c, const char *sql, int n, const char *const *params)
{
    struct cn_errmsg em = {{0}};
    PGresult *r = NULL;
    char *out;

    if (rn_db_exec(c, sql, n, params, &r, &em) != CN_OK) {
        die("database: %s (%s)", em.text, sql);
    }
    out = strdup(PQntuples(r) > 0 && PQnfields(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    return out;
}

static double
qd(PGconn *c, const char *sql, int n, const char *const *params)
{
    char *s = q1(c, sql, n, params);
    double v = strtod(s, NULL);

    free(s);
    return v;
}

static pid_t
spawn(const char *const argv[], const char *log)
{
    pid_t pid = fork();

    if (pid < 0) {
        die("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcast-qual"
        execv(argv[0], (char *const *) argv); /* execv never writes to its argv */
#pragma GCC diagnostic pop
        _exit(127);
    }
    return pid;
}

/* utime + stime in seconds, and the peak RSS in kB, of a live process. */
static void
proc_usage(pid_t pid, double *cpu, long *rss_kb)
{
    char path[64], buf[4096], *p;
    unsigned long ut = 0, st = 0;
    FILE *f;
    int i;

    *cpu = 0;
    *rss_kb = 0;
    (void) snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
    if ((f = fopen(path, "r")) != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL && (p = strrchr(buf, ')')) != NULL) {
            /* fields after ") ": state is field 3; utime 14, stime 15 */
            for (i = 3, p += 2; i < 14 && p != NULL; i++) {
                p = strchr(p, ' ');
                p = p != NULL ? p + 1 : NULL;
            }
            if (p != NULL && sscanf(p, "%lu %lu", &ut, &st) == 2) {
                *cpu = (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
            }
        }
        fclose(f);
    }
    (void) snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
    if ((f = fopen(path, "r")) != NULL) {
        while (fgets(buf, sizeof(buf), f) != NULL) {
            if (strncmp(buf, "VmHWM:", 6) == 0) {
                *rss_kb = strtol(buf + 6, NULL, 10);
            }
        }
        fclose(f);
    }
}

static void
usage(FILE *f)
{
    size_t i;

    fprintf(f, "usage: cairn-bench [--case NAME] [--instances N] [--actions A] [--runners R]\n"
               "                   [--shards S] [--workers W] [--slots K] [--prefetch P]\n"
               "                   [--transport ipc|tcp] [--format text|json|markdown|csv]\n"
               "                   [--database-url URL] [--bin-dir BUILD_DIR] [--timeout S]\n"
               "cases:");
    for (i = 0; i < NCASES; i++) {
        fprintf(f, " %s", cases[i].name);
    }
    fprintf(f, "\nW is workers per runner. BUILD_DIR holds runner/cairn-runner and\n"
               "worker-protocol/cairn-worker (default: the build this binary is in).\n");
}

static long
num(const char *flag, const char *v, long min, long max)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < min || n > max) {
        fprintf(stderr, "cairn-bench: %s must be %ld..%ld\n", flag, min, max);
        exit(2);
    }
    return n;
}

static void
report(const struct opts *o, const struct bench_case *bc, long actions_total,
       const struct result *r)
{
    double aps = r->drain_s > 0 ? (double) actions_total / r->drain_s : 0;
    double ips = r->drain_s > 0 ? (double) o->instances / r->drain_s : 0;
    double eps = r->enqueue_s > 0 ? (double) o->instances / r->enqueue_s : 0;

    if (strcmp(o->format, "json") == 0) {
        printf("{\"case\": \"%s\", \"instances\": %ld, \"actions_per_instance\": %ld, "
               "\"runners\": %ld, \"shards\": %ld, \"workers_per_runner\": %ld, \"slots\": %ld, "
               "\"transport\": \"%s\", \"completed\": %ld, \"failed\": %ld, "
               "\"drain_seconds\": %.3f, \"actions_per_second\": %.0f, "
               "\"instances_per_second\": %.0f, \"enqueue_per_second\": %.0f, "
               "\"latency_ms\": {\"p50\": %.1f, \"p95\": %.1f, \"p99\": %.1f, \"max\": %.1f}, "
               "\"rows_per_action\": %.2f, \"wal_bytes_per_action\": %.0f, "
               "\"runner_cpu_seconds_per_1000_actions\": %.3f, \"runner_peak_rss_kb\": %ld}\n",
               bc->name, o->instances, o->actions, o->runners, o->shards, o->workers, o->slots,
               o->transport, r->completed, r->failed, r->drain_s, aps, ips, eps, r->p50, r->p95,
               r->p99, r->max, r->rows, r->wal, r->cpu_per_1000, r->rss_kb);
    } else if (strcmp(o->format, "markdown") == 0) {
        printf("| case | instances x actions | actions/s | instances/s | enqueue/s | latency p50 / "
               "p95 / p99 / max ms | rows / action | WAL bytes / action | runner CPU s / 1000 "
               "actions | runner peak RSS |\n|---|---|---|---|---|---|---|---|---|---|\n");
        printf("| %s | %ld x %ld | %.0f | %.0f | %.0f | %.0f / %.0f / %.0f / %.0f | %.2f | %.0f | "
               "%.3f | %ld MiB |\n",
               bc->name, o->instances, o->actions, aps, ips, eps, r->p50, r->p95, r->p99, r->max,
               r->rows, r->wal, r->cpu_per_1000, r->rss_kb / 1024);
    } else if (strcmp(o->format, "csv") == 0) {
        printf("case,instances,actions,runners,shards,workers,slots,transport,completed,failed,"
               "drain_s,actions_per_s,instances_per_s,enqueue_per_s,p50_ms,p95_ms,p99_ms,max_ms,"
               "rows_per_action,wal_bytes_per_action,cpu_s_per_1000,peak_rss_kb\n");
        printf("%s,%ld,%ld,%ld,%ld,%ld,%ld,%s,%ld,%ld,%.3f,%.0f,%.0f,%.0f,%.1f,%.1f,%.1f,%.1f,"
               "%.2f,%.0f,%.3f,%ld\n",
               bc->name, o->instances, o->actions, o->runners, o->shards, o->workers, o->slots,
               o->transport, r->completed, r->failed, r->drain_s, aps, ips, eps, r->p50, r->p95,
               r->p99, r->max, r->rows, r->wal, r->cpu_per_1000, r->rss_kb);
    } else {
        printf("case %s: %ld instances x %ld actions, %ld runner(s) x %ld shard(s), %ld "
               "worker(s) x %ld slots, %s\n",
               bc->name, o->instances, o->actions, o->runners, o->shards, o->workers, o->slots,
               o->transport);
        printf("  drain        %.3f s: %.0f actions/s, %.0f instances/s (%ld completed, %ld "
               "failed)\n",
               r->drain_s, aps, ips, r->completed, r->failed);
        printf("  enqueue      %.0f instances/s\n", eps);
        printf("  latency      enqueue to completion p50 %.0f ms, p95 %.0f, p99 %.0f, max %.0f\n",
               r->p50, r->p95, r->p99, r->max);
        printf("  database     %.2f rows and %.0f WAL bytes written per action\n", r->rows, r->wal);
        printf("  runner       %.3f CPU s per 1000 actions, peak RSS %ld MiB\n", r->cpu_per_1000,
               r->rss_kb / 1024);
    }
}

int
main(int argc, char **argv)
{
    struct opts o = {NULL, "sequence", "ipc", "text", NULL, 0, 0, 1, 2, 2, 16, 16, 600};
    const struct bench_case *bc = NULL;
    struct cn_errmsg em = {{0}};
    struct result res;
    PGconn *c;
    pid_t pids[MAX_PROCS], runners[MAX_PROCS];
    int npids = 0, nrunners = 0, i;
    char tmp[] = "/tmp/cairn-bench-XXXXXX", tag[64], input[128], n_text[32], version[32];
    char exe[PATH_MAX], bin[PATH_MAX], runner_bin[PATH_MAX + 32], worker_bin[PATH_MAX + 32];
    const char *stats_sql = "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM "
                            "pg_stat_user_tables WHERE schemaname = 'cairn'";
    double rows0, t0, t1, cpu_total = 0;
    char *wal0, *s;
    long actions_total, done = 0;
    size_t applied, k;
    uint64_t h = 1469598103934665603ULL;

    memset(&res, 0, sizeof(res));
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--case") == 0) {
            o.case_name = v;
        } else if (strcmp(a, "--instances") == 0) {
            o.instances = num(a, v, 1, 10000000);
        } else if (strcmp(a, "--actions") == 0) {
            o.actions = num(a, v, 1, 100000);
        } else if (strcmp(a, "--runners") == 0) {
            o.runners = num(a, v, 1, 16);
        } else if (strcmp(a, "--shards") == 0) {
            o.shards = num(a, v, 1, 256);
        } else if (strcmp(a, "--workers") == 0) {
            o.workers = num(a, v, 1, 64);
        } else if (strcmp(a, "--slots") == 0) {
            o.slots = num(a, v, 1, 4096);
        } else if (strcmp(a, "--prefetch") == 0) {
            o.prefetch = num(a, v, 0, 4096);
        } else if (strcmp(a, "--transport") == 0) {
            o.transport = v;
        } else if (strcmp(a, "--format") == 0) {
            o.format = v;
        } else if (strcmp(a, "--database-url") == 0) {
            o.db_url = v;
        } else if (strcmp(a, "--bin-dir") == 0) {
            o.bin_dir = v;
        } else if (strcmp(a, "--timeout") == 0) {
            o.timeout_s = num(a, v, 1, 86400);
        } else {
            usage(stderr);
            return 2;
        }
    }
    for (k = 0; k < NCASES; k++) {
        if (strcmp(cases[k].name, o.case_name) == 0) {
            bc = &cases[k];
        }
    }
    if (bc == NULL || (strcmp(o.transport, "ipc") != 0 && strcmp(o.transport, "tcp") != 0) ||
        (strcmp(o.format, "text") != 0 && strcmp(o.format, "json") != 0 &&
         strcmp(o.format, "markdown") != 0 && strcmp(o.format, "csv") != 0) ||
        o.runners * (o.workers + 1) > MAX_PROCS) {
        usage(stderr);
        return 2;
    }
    if (o.instances == 0) {
        o.instances = bc->instances;
    }
    if (o.actions == 0 || bc->one_action) {
        o.actions = bc->one_action ? 1 : bc->actions;
    }
    actions_total = o.instances * o.actions;
    /* The binaries: --bin-dir, else the build this program sits in (BUILD/bench/cairn-bench). */
    if (o.bin_dir == NULL) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0) {
            die("cannot find myself: %s", strerror(errno));
        }
        exe[n] = '\0';
        (void) snprintf(bin, sizeof(bin), "%s", exe);
        for (i = 0; i < 2 && (s = strrchr(bin, '/')) != NULL; i++) {
            *s = '\0';
        }
        o.bin_dir = bin;
    }
    (void) snprintf(runner_bin, sizeof(runner_bin), "%s/runner/cairn-runner", o.bin_dir);
    (void) snprintf(worker_bin, sizeof(worker_bin), "%s/worker-protocol/cairn-worker", o.bin_dir);
    if (access(runner_bin, X_OK) != 0 || access(worker_bin, X_OK) != 0) {
        die("%s or %s is not built", runner_bin, worker_bin);
    }
    if (rn_db_connect(o.db_url, &c, &em) != CN_OK) {
        die("%s", em.text);
    }
    if (rn_migrate(c, NULL, NULL, &applied, &em) != CN_OK) {
        die("migrate: %s", em.text);
    }
    /* Register the case (a version named by the source's hash: re-running is a no-op). */
    for (const char *cp = bc->source; *cp != '\0'; cp++) {
        h = (h ^ (unsigned char) *cp) * 1099511628211ULL;
    }
    (void) snprintf(version, sizeof(version), "bench-%016llx", (unsigned long long) h);
    {
        char name[64];
        const char *p[3] = {name, version, bc->source};
        (void) snprintf(name, sizeof(name), "bench_%s", bc->name);
        for (s = name; *s != '\0'; s++) {
            if (*s == '-') {
                *s = '_';
            }
        }
        free(q1(c,
                "INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash,"
                " source) VALUES ($1, $2, $2, $3) ON CONFLICT (workflow_name, workflow_version)"
                " DO NOTHING",
                3, p));
        (void) snprintf(tag, sizeof(tag), "%ld-%ld", (long) getpid(), (long) time(NULL));
        (void) snprintf(input, sizeof(input), "{\"n\": %ld, \"run\": \"%s\"}", o.actions, tag);
        (void) snprintf(n_text, sizeof(n_text), "%ld", o.instances);
        {
            const char *pe[4] = {name, input, n_text, version};
            double e0 = now_s();
            free(q1(c,
                    "SELECT count(cairn.enqueue($1, $2::jsonb, NULL, 0, NULL, $4))"
                    " FROM generate_series(1, $3::integer)",
                    4, pe));
            res.enqueue_s = now_s() - e0;
        }
    }
    usleep(600000); /* statistics of the enqueue settle before the baseline */
    rows0 = qd(c, "SELECT pg_stat_force_next_flush()", 0, NULL);
    rows0 = qd(c, stats_sql, 0, NULL);
    wal0 = q1(c, "SELECT pg_current_wal_lsn()", 0, NULL);
    if (mkdtemp(tmp) == NULL) {
        die("mkdtemp: %s", strerror(errno));
    }
    /* The fleet: each runner with its own workers. */
    t0 = now_s();
    for (i = 0; i < o.runners; i++) {
        char url[256], log[300], shards[16], sl[16], pf[16], wname[32];
        int w;

        if (strcmp(o.transport, "ipc") == 0) {
            (void) snprintf(url, sizeof(url), "ipc://%s/r%d.sock", tmp, i);
        } else {
            (void) snprintf(url, sizeof(url), "tcp://127.0.0.1:%d",
                            25000 + (int) (getpid() % 1000) * 16 + i);
        }
        (void) snprintf(log, sizeof(log), "%s/runner%d.log", tmp, i);
        (void) snprintf(shards, sizeof(shards), "%ld", o.shards);
        {
            const char *rargv[] = {runner_bin,
                                   "--database-url",
                                   rn_db_url(o.db_url),
                                   "--worker-listen",
                                   url,
                                   "--shards",
                                   shards,
                                   "--poll-interval-ms",
                                   "50",
                                   NULL};
            runners[nrunners++] = pids[npids++] = spawn(rargv, log);
        }
        (void) snprintf(sl, sizeof(sl), "%ld", o.slots);
        (void) snprintf(pf, sizeof(pf), "%ld", o.prefetch);
        for (w = 0; w < o.workers; w++) {
            const char *wargv[] = {worker_bin,   "--url", url,      "--slots", sl,
                                   "--prefetch", pf,      "--name", wname,     NULL};
            (void) snprintf(wname, sizeof(wname), "bench-%d-%d", i, w);
            (void) snprintf(log, sizeof(log), "%s/worker%d-%d.log", tmp, i, w);
            pids[npids++] = spawn(wargv, log);
        }
    }
    {
        const char *p[1] = {tag};
        double last = 0;
        for (;;) {
            char *cnt = q1(c,
                           "SELECT count(*) FILTER (WHERE status IN ('completed', 'failed',"
                           " 'cancelled')) FROM cairn.runner_instances WHERE input->>'run' = $1",
                           1, p);
            done = strtol(cnt, NULL, 10);
            free(cnt);
            t1 = now_s();
            if (t1 - last > 0.5) {
                fprintf(stderr, "\rcairn-bench %s: %ld/%ld instances, %.1f s   ", bc->name, done,
                        o.instances, t1 - t0);
                last = t1;
            }
            if (done >= o.instances || t1 - t0 > (double) o.timeout_s) {
                break;
            }
            usleep(20000);
        }
        fprintf(stderr, "\n");
    }
    res.drain_s = t1 - t0;
    for (i = 0; i < nrunners; i++) {
        double cpu;
        long rss;
        proc_usage(runners[i], &cpu, &rss);
        cpu_total += cpu;
        if (rss > res.rss_kb) {
            res.rss_kb = rss;
        }
    }
    res.cpu_per_1000 = cpu_total * 1000.0 / (double) actions_total;
    for (i = 0; i < npids; i++) {
        kill(pids[i], SIGTERM);
    }
    for (i = 0; i < npids; i++) {
        (void) waitpid(pids[i], NULL, 0);
    }
    {
        const char *p[1] = {tag};
        PGresult *r = NULL;
        if (rn_db_exec(c,
                       "SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER"
                       " (WHERE status <> 'completed'), coalesce(percentile_cont(0.5) WITHIN"
                       " GROUP (ORDER BY ms), 0), coalesce(percentile_cont(0.95) WITHIN GROUP"
                       " (ORDER BY ms), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER"
                       " BY ms), 0), coalesce(max(ms), 0) FROM (SELECT status, extract(epoch"
                       " FROM completed_at - created_at) * 1000 AS ms FROM"
                       " cairn.runner_instances WHERE input->>'run' = $1) t",
                       1, p, &r, &em) != CN_OK) {
            die("%s", em.text);
        }
        res.completed = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        res.failed = strtol(PQgetvalue(r, 0, 1), NULL, 10);
        res.p50 = strtod(PQgetvalue(r, 0, 2), NULL);
        res.p95 = strtod(PQgetvalue(r, 0, 3), NULL);
        res.p99 = strtod(PQgetvalue(r, 0, 4), NULL);
        res.max = strtod(PQgetvalue(r, 0, 5), NULL);
        PQclear(r);
    }
    usleep(600000);
    (void) qd(c, "SELECT pg_stat_force_next_flush()", 0, NULL);
    res.rows = (qd(c, stats_sql, 0, NULL) - rows0) / (double) actions_total;
    {
        const char *p[1] = {wal0};
        res.wal = qd(c, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", 1, p) /
                  (double) actions_total;
    }
    free(wal0);
    PQfinish(c);
    report(&o, bc, actions_total, &res);
    if (done < o.instances) {
        fprintf(stderr, "cairn-bench: timed out with %ld of %ld instances finished (logs in %s)\n",
                done, o.instances, tmp);
        return 1;
    }
    {
        char cmd[PATH_MAX + 16];
        (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
        if (system(cmd) != 0) {
            fprintf(stderr, "cairn-bench: could not remove %s\n", tmp);
        }
    }
    return res.failed > 0 ? 1 : 0;
}
