/* SPDX-License-Identifier: MIT */
/*
 * cairn-bench: the end-to-end benchmark harness. Against a database (--database-url or
 * CAIRN_DATABASE_URL), or else a durable throwaway PostgreSQL it starts and always stops, it
 * registers the case's workflow, enqueues the instances (all before the start, or at --rate
 * while running), starts R cairn-runner processes with W cairn-worker processes each, and
 * measures the drain: from the runners' start until the last instance of this run finished.
 *
 * Reports actions/s and instances/s, the enqueue rate, enqueue-to-completion latency (from the
 * database's timestamps), action-ready-to-dispatch latency (each runner's
 * cairn_action_dispatch_delay_seconds summary), rows and WAL bytes written per action
 * (pg_stat_user_tables, the WAL position), runner CPU seconds per 1 000 actions and peak RSS
 * (from /proc, read just before the runners stop). Text, JSON, Markdown or CSV; a progress line
 * on stderr; --plot writes an SVG of throughput over time with gnuplot.
 *
 * Threads: one. Children: the runners, the workers, gnuplot, and the throwaway cluster's
 * initdb/pg_ctl (through runuser as root: PostgreSQL refuses to run as root).
 *
 * Cases (every instance gets {"n": ACTIONS, "run": TAG}; mixed adds "seed", "fail", "timeout",
 * "nap" in per mille):
 *   queue-noop  one std.noop per instance          sequence  ACTIONS sequential std.noop
 *   fan-out     a spread of ACTIONS std.noop       for-loop  ACTIONS std.noop with inline work
 *   cpu         a spread of ACTIONS std.hash (20 000 rounds each), to show worker scaling
 *   children    a spread of ACTIONS child workflows (`run bench_child`), one std.noop each
 *   mixed       ACTIONS sequential steps: a std.flaky that fails once and is retried, a
 *               std.sleep past its timeout (retried once, then caught), a durable sleep, or a
 *               std.noop, chosen per step at the given rates
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "runner/store/db.h"
#include "runner/store/migrate.h"

#define MAX_PROCS   256
#define MAX_SAMPLES 100000

struct bench_case {
    const char *name;
    const char *source;
    long instances, actions; /* defaults */
    bool one_action;         /* ACTIONS is ignored: one per instance */
    const char *child_name;  /* a child workflow the case's calls, registered first; NULL: none */
    const char *child_source;
};

static const struct bench_case cases[] = {
    {"queue-noop", "fn main(input: [n, run], output: [r]):\n    r = @std.noop()\n    return r\n",
     10000, 1, true, NULL, NULL},
    {"sequence",
     "fn main(input: [n, run], output: [done]):\n    done = 0\n    for i in range(n):\n"
     "        @std.noop(i=i)\n        done = done + 1\n    return done\n",
     1000, 10, false, NULL, NULL},
    {"fan-out",
     "fn main(input: [n, run], output: [count]):\n    results = spread range(n):i -> "
     "@std.noop(i=i)\n    return len(results)\n",
     20, 1000, false, NULL, NULL},
    {"for-loop",
     "fn main(input: [n, run], output: [acc]):\n    acc = 0\n    for i in range(n):\n"
     "        acc = acc + i * 2 - (i % 3)\n        if acc % 7 == 0:\n            acc = acc + 1\n"
     "        @std.noop(v=acc)\n    return acc\n",
     100, 100, false, NULL, NULL},
    /* A parent that fans out to ACTIONS child workflows of one no-op action each: "actions/s"
     * is children/s (each child is one instance and one action). */
    {"children",
     "fn main(input: [n, run], output: [count]):\n    results = spread range(n):i -> "
     "run bench_child(i=i)\n    return len(results)\n",
     5, 100, false, "bench_child",
     "fn main(input: [i], output: [r]):\n    r = @std.noop(i=i)\n    return r\n"},
    {"cpu",
     "fn main(input: [n, run], output: [count]):\n    digests = spread range(n):i -> "
     "@std.hash(data=i, iterations=20000)\n    return len(digests)\n",
     20, 50, false, NULL, NULL},
    /* 729 is coprime with 1000: over 1000 consecutive steps every k occurs once, so the rates
     * are exact per 1000 steps whatever the seed. */
    {"mixed",
     "fn main(input: [n, run, seed, fail, timeout, nap], output: [done]):\n"
     "    done = 0\n"
     "    for i in range(n):\n"
     "        k = (seed * 7919 + i * 729) % 1000\n"
     "        if k < fail:\n"
     "            @std.flaky(key=run, failures=1) [retry: 2, backoff: 10ms]\n"
     "        elif k < fail + timeout:\n"
     "            try:\n"
     "                @std.sleep(ms=200) [timeout: 20ms] [ActionTimeout -> retry: 1, "
     "backoff: 10ms]\n"
     "            except ActionTimeout:\n"
     "                pass\n"
     "        elif k < fail + timeout + nap:\n"
     "            sleep 0.02\n"
     "        else:\n"
     "            @std.noop(i=i)\n"
     "        done = done + 1\n"
     "    return done\n",
     500, 20, false, NULL, NULL},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

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
static struct {
    pid_t pids[MAX_PROCS];
    int npids;
    char tmp[64];    /* sockets and logs; "" when not made */
    char pg_dir[64]; /* the throwaway cluster; "" when none */
    const char *pg_bin;
} g;
static volatile sig_atomic_t g_stop;

static void
on_signal(int sig)
{
    (void) sig;
    g_stop = 1;
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void cleanup(bool keep_tmp);

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
    cleanup(true);
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

/* ---- child processes ---------------------------------------------------------------------- */

static void
exec_child(const char *const argv[], const char *log, bool as_postgres)
{
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    signal(SIGINT, SIG_IGN); /* Ctrl-C reaches the group: cairn-bench stops its children */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcast-qual"
    if (as_postgres) {
        const char *ra[16] = {"/usr/sbin/runuser", "-u", "postgres", "--"};
        int i;
        for (i = 0; argv[i] != NULL && i < 11; i++) {
            ra[4 + i] = argv[i];
        }
        ra[4 + i] = NULL;
        execv(ra[0], (char *const *) ra);
    } else {
        execv(argv[0], (char *const *) argv); /* execv never writes to its argv */
    }
#pragma GCC diagnostic pop
    _exit(127);
}

static pid_t
spawn(const char *const argv[], const char *log)
{
    pid_t pid = fork();

    if (pid < 0) {
        die("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        exec_child(argv, log, false);
    }
    if (g.npids < MAX_PROCS) {
        g.pids[g.npids++] = pid;
    }
    return pid;
}

/* Runs a command to completion (as the postgres user when we are root); returns its status. */
static int
run_wait(const char *const argv[], const char *log)
{
    pid_t pid = fork();
    int st = 0;

    if (pid < 0) {
        return -1;
    }
    if (pid == 0) {
        exec_child(argv, log, geteuid() == 0);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
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

/* A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick; the child binds it
 * a moment later, which is as good as a port can be promised). */
static int
free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *) &a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *) &a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    if (port == 0) {
        die("no free TCP port: %s", strerror(errno));
    }
    return port;
}

/* ---- the throwaway cluster ---------------------------------------------------------------- */

static void
pg_stop(void)
{
    char data[128], log[128], cmd[160];

    if (g.pg_dir[0] == '\0') {
        return;
    }
    (void) snprintf(data, sizeof(data), "%s/data", g.pg_dir);
    (void) snprintf(log, sizeof(log), "%s/stop.log", g.pg_dir);
    {
        char ctl[PATH_MAX];
        (void) snprintf(ctl, sizeof(ctl), "%s/pg_ctl", g.pg_bin);
        const char *argv[] = {ctl, "-D", data, "-m", "immediate", "-w", "-t", "30", "stop", NULL};
        (void) run_wait(argv, log);
    }
    (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g.pg_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cairn-bench: could not remove %s\n", g.pg_dir);
    }
    g.pg_dir[0] = '\0';
}

/* Starts a durable cluster (fsync and synchronous_commit on: as a user runs it) on a unix
 * socket in a fresh directory; returns its URL (static). */
static const char *
pg_start(const char *bin)
{
    static char url[256];
    char data[128], log[128], opts[256], exe[PATH_MAX], slog[128];
    int port = free_port();

    g.pg_bin = bin;
    (void) snprintf(exe, sizeof(exe), "%s/initdb", bin);
    if (access(exe, X_OK) != 0) {
        die("%s not found: give --database-url, or install PostgreSQL (scripts/setup-deps) or "
            "set --pg-bin",
            exe);
    }
    (void) snprintf(g.pg_dir, sizeof(g.pg_dir), "/tmp/cairn-bench-pg.XXXXXX");
    if (mkdtemp(g.pg_dir) == NULL) {
        g.pg_dir[0] = '\0';
        die("mkdtemp: %s", strerror(errno));
    }
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (pw == NULL || chown(g.pg_dir, pw->pw_uid, pw->pw_gid) != 0) {
            die("running as root needs the postgres user to own %s", g.pg_dir);
        }
    }
    (void) snprintf(data, sizeof(data), "%s/data", g.pg_dir);
    (void) snprintf(log, sizeof(log), "%s/initdb.log", g.pg_dir);
    {
        const char *argv[] = {exe,     "-D", data,   "-U",         "postgres",  "-A",
                              "trust", "-E", "UTF8", "--locale=C", "--no-sync", NULL};
        if (run_wait(argv, log) != 0) {
            die("initdb failed (log: %s)", log);
        }
    }
    (void) snprintf(exe, sizeof(exe), "%s/pg_ctl", bin);
    (void) snprintf(log, sizeof(log), "%s/server.log", g.pg_dir);
    (void) snprintf(slog, sizeof(slog), "%s/start.log", g.pg_dir);
    (void) snprintf(opts, sizeof(opts),
                    "-k '%s' -p %d -c listen_addresses='' -c fsync=on "
                    "-c synchronous_commit=on",
                    g.pg_dir, port);
    {
        const char *argv[] = {exe,  "-D", data, "-l", log,     "-w",
                              "-t", "60", "-o", opts, "start", NULL};
        if (run_wait(argv, slog) != 0) {
            die("pg_ctl start failed (log: %s)", log);
        }
    }
    (void) snprintf(url, sizeof(url), "postgresql://postgres@/postgres?host=%s&port=%d", g.pg_dir,
                    port);
    return url;
}

/* Stops the runners and workers (SIGTERM: runners hand their leases back) and reaps them. */
static void
stop_fleet(void)
{
    int i;

    for (i = 0; i < g.npids; i++) {
        kill(g.pids[i], SIGTERM);
    }
    for (i = 0; i < g.npids; i++) {
        while (waitpid(g.pids[i], NULL, 0) < 0 && errno == EINTR) {
        }
    }
    g.npids = 0;
}

static void
cleanup(bool keep_tmp)
{
    stop_fleet();
    pg_stop();
    if (g.tmp[0] != '\0') {
        if (keep_tmp) {
            fprintf(stderr, "cairn-bench: logs kept in %s\n", g.tmp);
        } else {
            char cmd[96];
            (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g.tmp);
            if (system(cmd) != 0) {
                fprintf(stderr, "cairn-bench: could not remove %s\n", g.tmp);
            }
        }
        g.tmp[0] = '\0';
    }
}

/* ---- runner metrics ----------------------------------------------------------------------- */

/* GET /metrics from 127.0.0.1:port into buf (NUL-terminated body); false when unreachable. */
static bool
scrape(int port, char *buf, size_t cap)
{
    struct sockaddr_in a;
    struct timeval tv = {1, 0};
    const char *req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    size_t len = 0;
    ssize_t n;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char *body, *cl;
    bool ok = false;

    if (fd < 0) {
        return false;
    }
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t) port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *) &a, sizeof(a)) != 0 ||
        write(fd, req, strlen(req)) != (ssize_t) strlen(req)) {
        close(fd);
        return false;
    }
    /* Read until the body has its Content-Length (the server may keep the connection). */
    while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0) {
        len += (size_t) n;
        buf[len] = '\0';
        if ((body = strstr(buf, "\r\n\r\n")) != NULL &&
            ((cl = strstr(buf, "Content-Length:")) != NULL ||
             (cl = strstr(buf, "content-length:")) != NULL) &&
            cl < body && len - (size_t) (body + 4 - buf) >= (size_t) strtol(cl + 15, NULL, 10)) {
            break;
        }
    }
    close(fd);
    buf[len] = '\0';
    if ((body = strstr(buf, "\r\n\r\n")) != NULL && strncmp(buf, "HTTP/1.1 200", 12) == 0) {
        memmove(buf, body + 4, strlen(body + 4) + 1);
        ok = true;
    }
    return ok;
}

/* The value of sample `name` (with its labels, if any) in Prometheus text, or -1. */
static double
sample_value(const char *text, const char *name)
{
    size_t n = strlen(name);
    const char *p = text;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, name, n) == 0 && p[n] == ' ') {
            return strtod(p + n + 1, NULL);
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    return -1;
}

/* Adds the summary `name` of one runner's /metrics text to acc (see struct summ). */
static void
summ_merge(struct summ *acc, const char *text, const char *name)
{
    static const char *const qs[] = {"0.5", "0.95", "0.99", "1"};
    double v[4], n;
    char key[128];
    size_t k;

    (void) snprintf(key, sizeof(key), "%s_count", name);
    if ((n = sample_value(text, key)) <= 0) {
        return;
    }
    for (k = 0; k < 4; k++) {
        (void) snprintf(key, sizeof(key), "%s{quantile=\"%s\"}", name, qs[k]);
        v[k] = 1000 * sample_value(text, key);
    }
    acc->p50 = (acc->p50 * acc->count + v[0] * n) / (acc->count + n);
    acc->p95 = fmax(acc->p95, v[1]);
    acc->p99 = fmax(acc->p99, v[2]);
    acc->max = fmax(acc->max, v[3]);
    acc->count += n;
}

/* Throughput so far: worker outcomes (results and timeouts) over every runner, instances
 * finished. */
static void
take_sample(struct sample *sp, double t, const int *ports, int nports, char *buf, long done)
{
    int i;

    sp->t = t;
    sp->outcomes = 0;
    sp->instances = (double) done;
    for (i = 0; i < nports; i++) {
        if (scrape(ports[i], buf, 1 << 16)) {
            sp->outcomes += sample_value(buf, "cairn_pool_results_total") +
                            sample_value(buf, "cairn_pool_timeouts_total");
        }
    }
}

/* ---- the run ------------------------------------------------------------------------------ */

static void
usage(FILE *f)
{
    size_t i;

    fprintf(f, "usage: cairn-bench [--case NAME] [--instances N] [--actions A] [--rate R]\n"
               "                   [--runners R] [--shards S] [--workers W] [--slots K]\n"
               "                   [--prefetch P] [--transport ipc|tcp]\n"
               "                   [--fail-rate F] [--timeout-rate F] [--sleep-rate F]\n"
               "                   [--format text|json|markdown|csv] [--plot FILE.svg]\n"
               "                   [--database-url URL] [--pg-bin DIR] [--bin-dir BUILD_DIR]\n"
               "                   [--max-running N] [--timeout S] [--json-out FILE]\n"
               "                   [--shared-workers N]\n"
               "cases:");
    for (i = 0; i < NCASES; i++) {
        fprintf(f, " %s", cases[i].name);
    }
    fprintf(f, "\n--rate: enqueue R instances/s while the fleet runs (default: all before).\n"
               "W is workers per runner; --shared-workers N starts N workers in all instead,\n"
               "each serving every runner (cairn-worker --url R1 --url R2 ...). Rates of the mixed "
               "case are fractions of its steps\n"
               "(defaults 0.05, 0.01, 0.02). Without --database-url or CAIRN_DATABASE_URL a\n"
               "durable throwaway PostgreSQL is started from --pg-bin (default $CN_PG_BIN or\n"
               "/usr/lib/postgresql/15/bin) and stopped at the end. BUILD_DIR holds\n"
               "runner/cairn-runner and worker-protocol/cairn-worker (default: the build this\n"
               "binary is in). --json-out appends each run's JSON line to FILE whatever the\n"
               "--format.\n");
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

static double
fnum(const char *flag, const char *v, double min, double max)
{
    char *end;
    double d;

    errno = 0;
    d = strtod(v, &end);
    if (errno != 0 || *end != '\0' || !(d >= min && d <= max)) {
        fprintf(stderr, "cairn-bench: %s must be %g..%g\n", flag, min, max);
        exit(2);
    }
    return d;
}

static void
parse(int argc, char **argv, struct opts *o)
{
    int i;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--version") == 0) {
            printf("cairn-bench %s\n", CAIRN_VERSION);
            exit(0);
        }
        if (v == NULL) {
            usage(stderr);
            exit(2);
        }
        i++;
        if (strcmp(a, "--case") == 0) {
            o->case_name = v;
        } else if (strcmp(a, "--instances") == 0) {
            o->instances = num(a, v, 1, 10000000);
        } else if (strcmp(a, "--actions") == 0) {
            o->actions = num(a, v, 1, 100000);
        } else if (strcmp(a, "--rate") == 0) {
            o->rate = fnum(a, v, 0.1, 1e6);
        } else if (strcmp(a, "--runners") == 0) {
            o->runners = num(a, v, 1, 16);
        } else if (strcmp(a, "--shards") == 0) {
            o->shards = num(a, v, 1, 256);
        } else if (strcmp(a, "--workers") == 0) {
            o->workers = num(a, v, 1, 64);
        } else if (strcmp(a, "--shared-workers") == 0) {
            o->shared = num(a, v, 1, 64);
        } else if (strcmp(a, "--slots") == 0) {
            o->slots = num(a, v, 1, 4096);
        } else if (strcmp(a, "--prefetch") == 0) {
            o->prefetch = num(a, v, 0, 4096);
        } else if (strcmp(a, "--transport") == 0) {
            o->transport = v;
        } else if (strcmp(a, "--fail-rate") == 0) {
            o->fail = fnum(a, v, 0, 1);
        } else if (strcmp(a, "--timeout-rate") == 0) {
            o->timeout = fnum(a, v, 0, 1);
        } else if (strcmp(a, "--sleep-rate") == 0) {
            o->nap = fnum(a, v, 0, 1);
        } else if (strcmp(a, "--format") == 0) {
            o->format = v;
        } else if (strcmp(a, "--json-out") == 0) {
            o->json_out = v;
        } else if (strcmp(a, "--plot") == 0) {
            o->plot = v;
        } else if (strcmp(a, "--database-url") == 0) {
            o->db_url = v;
        } else if (strcmp(a, "--pg-bin") == 0) {
            o->pg_bin = v;
        } else if (strcmp(a, "--bin-dir") == 0) {
            o->bin_dir = v;
        } else if (strcmp(a, "--max-running") == 0) {
            o->max_running = num(a, v, 1, 1000000);
        } else if (strcmp(a, "--timeout") == 0) {
            o->timeout_s = num(a, v, 1, 86400);
        } else {
            usage(stderr);
            exit(2);
        }
    }
    if (o->fail + o->timeout + o->nap > 1.0) {
        fprintf(stderr, "cairn-bench: --fail-rate + --timeout-rate + --sleep-rate must be <= 1\n");
        exit(2);
    }
}

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

static void
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

/* After an interrupted or timed-out run, with the fleet stopped: what is left of it is taken off
 * the queue and marked cancelled, so that it cannot run under (and distort) the next run. */
static void
cancel_rest(PGconn *c, const char *name, const char *since, const char *tag)
{
    const char *p[3] = {name, since, tag};
    struct cn_errmsg em = {{0}};
    PGresult *r = NULL;

    if (rn_db_exec(c,
                   "WITH r AS (SELECT instance_id FROM cairn.runner_instances WHERE workflow_name"
                   " = $1 AND created_at >= $2::timestamptz AND input->>'run' = $3 AND status IN"
                   " ('queued', 'running')), d AS (DELETE FROM cairn.queued_instances q USING r"
                   " WHERE q.instance_id = r.instance_id RETURNING q.instance_id)"
                   " UPDATE cairn.runner_instances ri SET status = 'cancelled', completed_at ="
                   " clock_timestamp() FROM d WHERE ri.instance_id = d.instance_id",
                   3, p, &r, &em) != CN_OK) {
        fprintf(stderr, "cairn-bench: could not cancel the rest of the run: %s\n", em.text);
    } else {
        fprintf(stderr, "cairn-bench: %s unfinished instance(s) of this run cancelled\n",
                PQcmdTuples(r));
    }
    PQclear(r);
}

/* Enqueues instances [from, to] of this run in one statement. */
static void
enqueue(PGconn *c, const char *name, const char *version, const char *tag, const struct opts *o,
        bool mixed, long from, long to)
{
    char n[24], f[24], t[24], fa[16], ti[16], na[16];
    const char *p[9] = {name, version, tag, n, f, t, fa, ti, na};

    (void) snprintf(n, sizeof(n), "%ld", o->actions);
    (void) snprintf(f, sizeof(f), "%ld", from);
    (void) snprintf(t, sizeof(t), "%ld", to);
    (void) snprintf(fa, sizeof(fa), "%ld", lround(o->fail * 1000));
    (void) snprintf(ti, sizeof(ti), "%ld", lround(o->timeout * 1000));
    (void) snprintf(na, sizeof(na), "%ld", lround(o->nap * 1000));
    free(q1(c,
            mixed
                ? "SELECT count(cairn.enqueue($1, jsonb_build_object('n', $4::int, 'run', $3::text,"
                  " 'seed', g, 'fail', $7::int, 'timeout', $8::int, 'nap', $9::int), NULL, 0,"
                  " NULL, $2)) FROM generate_series($5::int, $6::int) g"
                : "SELECT count(cairn.enqueue($1, jsonb_build_object('n', $4::int, 'run', "
                  "$3::text), NULL, 0, NULL, $2)) FROM generate_series($5::int, $6::int) g",
            mixed ? 9 : 6, p));
}

/* Writes the throughput-over-time SVG with gnuplot. */
static void
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

int
main(int argc, char **argv)
{
    struct opts o = {NULL, "sequence", "ipc", "text", NULL, NULL, NULL, NULL, 0,    0, 1,
                     2,    2,          16,    16,     600,  0,    0.05, 0.01, 0.02, 0, 0};
    const struct bench_case *bc = NULL;
    struct cn_errmsg em = {{0}};
    struct result res;
    struct sample *samples;
    size_t nsamples = 0, k;
    struct rn_migrate_report applied;
    PGconn *c;
    pid_t runners[16];
    char wurls[16][256];
    int http_ports[16], nrunners = 0, i;
    char tag[64], version[32], name[64], tq_db[64], t0_db[64];
    char exe[PATH_MAX], bin[PATH_MAX], runner_bin[PATH_MAX + 32], worker_bin[PATH_MAX + 32];
    const char *stats_sql = "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM "
                            "pg_stat_user_tables WHERE schemaname = 'cairn'";
    const char *url;
    double rows0, t0, t1, cpu_total = 0, enq_s = 0, last_poll = 0, last_progress = 0;
    double poll_every = 0.05;
    char *wal0, *s, *mtext;
    long actions_total, done = 0, enqueued = 0;
    bool mixed;
    uint64_t h = 1469598103934665603ULL;

    memset(&res, 0, sizeof(res));
    parse(argc, argv, &o);
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
    mixed = strcmp(bc->name, "mixed") == 0;
    if (o.plot != NULL && system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "cairn-bench: --plot needs gnuplot (apt-get install gnuplot-nox)\n");
        return 2;
    }
    if (o.instances == 0) {
        o.instances = bc->instances;
    }
    if (o.actions == 0 || bc->one_action) {
        o.actions = bc->one_action ? 1 : bc->actions;
    }
    actions_total = o.instances * o.actions;
    if ((samples = calloc(MAX_SAMPLES, sizeof(*samples))) == NULL ||
        (mtext = malloc(1 << 16)) == NULL) {
        die("out of memory");
    }
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
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    url = rn_db_url(o.db_url);
    if (url == NULL || url[0] == '\0') {
        const char *pgb = o.pg_bin != NULL ? o.pg_bin : getenv("CN_PG_BIN");
        fprintf(stderr, "cairn-bench: starting a durable throwaway PostgreSQL\n");
        url = pg_start(pgb != NULL ? pgb : "/usr/lib/postgresql/15/bin");
    }
    if (rn_db_connect(url, &c, &em) != CN_OK) {
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
    (void) snprintf(name, sizeof(name), "bench_%s", bc->name);
    for (s = name; *s != '\0'; s++) {
        if (*s == '-') {
            *s = '_';
        }
    }
    if (bc->child_name != NULL) {
        const char *p[3] = {bc->child_name, version, bc->child_source};
        free(q1(c,
                "INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash,"
                " source, inputs) VALUES ($1, $2, $2, $3, '{i}')"
                " ON CONFLICT ON CONSTRAINT workflow_versions_name DO NOTHING",
                3, p));
    }
    {
        const char *p[3] = {name, version, bc->source};
        free(q1(c,
                "INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash,"
                " source) VALUES ($1, $2, $2, $3)"
                " ON CONFLICT ON CONSTRAINT workflow_versions_name DO NOTHING",
                3, p));
    }
    {
        /* With a limit the claim goes through cairn.claim_limited (sql/0012); without one, the
         * limit of an earlier run on this database is removed. */
        char lim[24];
        const char *p[2] = {name, lim};
        (void) snprintf(lim, sizeof(lim), "%ld", o.max_running);
        if (o.max_running == 0) {
            p[1] = NULL;
        }
        free(q1(c, "SELECT cairn.limit_set($1, $2::integer)", 2, p));
        if (o.max_running == 0) {
            free(q1(c,
                    "DELETE FROM cairn.workflow_limits WHERE tenant_id = 'default' AND"
                    " workflow_name = $1",
                    1, p));
        }
    }
    (void) snprintf(tag, sizeof(tag), "%ld-%ld", (long) getpid(), (long) time(NULL));
    /* Rows of this run are found through (workflow_name, created_at) from here on. */
    s = q1(c, "SELECT clock_timestamp()", 0, NULL);
    (void) snprintf(tq_db, sizeof(tq_db), "%s", s);
    free(s);
    if (o.rate == 0) {
        double e0 = now_s();
        enqueue(c, name, version, tag, &o, mixed, 1, o.instances);
        enq_s = now_s() - e0;
        enqueued = o.instances;
    }
    usleep(600000); /* statistics of the enqueue settle before the baseline */
    (void) qd(c, "SELECT pg_stat_force_next_flush()", 0, NULL);
    rows0 = qd(c, stats_sql, 0, NULL);
    wal0 = q1(c, "SELECT pg_current_wal_lsn()", 0, NULL);
    (void) snprintf(g.tmp, sizeof(g.tmp), "/tmp/cairn-bench-XXXXXX");
    if (mkdtemp(g.tmp) == NULL) {
        g.tmp[0] = '\0';
        die("mkdtemp: %s", strerror(errno));
    }
    /* The fleet: each runner with its own workers, or --shared-workers serving every runner. */
    s = q1(c, "SELECT clock_timestamp()", 0, NULL);
    (void) snprintf(t0_db, sizeof(t0_db), "%s", s);
    free(s);
    t0 = now_s();
    for (i = 0; i < o.runners; i++) {
        char wurl[256], hl[64], log[300], shards[16], sl[16], pf[16], wname[32];
        int w;

        if (strcmp(o.transport, "ipc") == 0) {
            (void) snprintf(wurl, sizeof(wurl), "ipc://%s/r%d.sock", g.tmp, i);
        } else {
            (void) snprintf(wurl, sizeof(wurl), "tcp://127.0.0.1:%d", free_port());
        }
        http_ports[i] = free_port();
        (void) snprintf(hl, sizeof(hl), "127.0.0.1:%d", http_ports[i]);
        (void) snprintf(log, sizeof(log), "%s/runner%d.log", g.tmp, i);
        (void) snprintf(shards, sizeof(shards), "%ld", o.shards);
        {
            const char *rargv[] = {runner_bin, "--database-url",     url,  "--worker-listen",
                                   wurl,       "--http-listen",      hl,   "--shards",
                                   shards,     "--poll-interval-ms", "50", NULL};
            runners[nrunners++] = spawn(rargv, log);
        }
        (void) snprintf(sl, sizeof(sl), "%ld", o.slots);
        (void) snprintf(pf, sizeof(pf), "%ld", o.prefetch);
        (void) snprintf(wurls[i], sizeof(wurls[i]), "%s", wurl);
        for (w = 0; o.shared == 0 && w < o.workers; w++) {
            const char *wargv[] = {worker_bin,   "--url", wurl,     "--slots", sl,
                                   "--prefetch", pf,      "--name", wname,     NULL};
            (void) snprintf(wname, sizeof(wname), "bench-%d-%d", i, w);
            (void) snprintf(log, sizeof(log), "%s/worker%d-%d.log", g.tmp, i, w);
            (void) spawn(wargv, log);
        }
    }
    for (i = 0; i < o.shared; i++) {
        const char *wargv[8 + 2 * 16];
        char sl[16], pf[16], wname[32], log[300];
        int r, n = 0;

        (void) snprintf(sl, sizeof(sl), "%ld", o.slots);
        (void) snprintf(pf, sizeof(pf), "%ld", o.prefetch);
        (void) snprintf(wname, sizeof(wname), "bench-shared-%d", i);
        (void) snprintf(log, sizeof(log), "%s/worker-shared%d.log", g.tmp, i);
        wargv[n++] = worker_bin;
        for (r = 0; r < nrunners; r++) {
            wargv[n++] = "--url";
            wargv[n++] = wurls[r];
        }
        wargv[n++] = "--slots";
        wargv[n++] = sl;
        wargv[n++] = "--prefetch";
        wargv[n++] = pf;
        wargv[n++] = "--name";
        wargv[n++] = wname;
        wargv[n] = NULL;
        (void) spawn(wargv, log);
    }
    /* At --rate, the schedule starts once every worker is connected, so that the first
     * instances do not measure the fleet's start. */
    if (o.rate > 0) {
        double until = now_s() + 30;
        for (i = 0; i < nrunners && !g_stop; i++) {
            while (!(scrape(http_ports[i], mtext, 1 << 16) &&
                     sample_value(mtext, "cairn_workers") >=
                         (double) (o.shared > 0 ? o.shared : o.workers))) {
                if (now_s() > until) {
                    die("the workers of runner %d did not connect within 30 s", i);
                }
                usleep(20000);
            }
        }
        s = q1(c, "SELECT clock_timestamp()", 0, NULL);
        (void) snprintf(t0_db, sizeof(t0_db), "%s", s);
        free(s);
        t0 = now_s();
    }
    /* The drain: enqueue on schedule (--rate), poll completions, sample throughput. */
    {
        const char *p[3] = {name, tq_db, tag};
        double next_sample = 0;
        for (;;) {
            t1 = now_s();
            if (o.rate > 0 && enqueued < o.instances) {
                long due = (long) floor(o.rate * (t1 - t0)) + 1;
                if (due > o.instances) {
                    due = o.instances;
                }
                if (due > enqueued) {
                    double e0 = now_s();
                    enqueue(c, name, version, tag, &o, mixed, enqueued + 1, due);
                    enq_s += now_s() - e0;
                    enqueued = due;
                }
            }
            if (t1 - last_poll >= poll_every) {
                char *cnt = q1(c,
                               "SELECT count(*) FILTER (WHERE status IN ('completed', 'failed',"
                               " 'cancelled')) FROM cairn.runner_instances WHERE workflow_name ="
                               " $1 AND created_at >= $2::timestamptz AND input->>'run' = $3",
                               3, p);
                done = strtol(cnt, NULL, 10);
                free(cnt);
                /* The count reads every row of the run (the tag is in the input): 8 ms a poll
                 * late in a queue-noop run of 20 000, a fifth of a core at 20 polls a second,
                 * taken from the database under test. At most a twenty-fifth of one now; the
                 * figures do not depend on it (the drain ends at the last completed_at). */
                poll_every = 25 * (now_s() - t1);
                if (poll_every < 0.05) {
                    poll_every = 0.05;
                }
                last_poll = t1;
            }
            if ((t1 >= next_sample || done >= o.instances) && nsamples < MAX_SAMPLES) {
                take_sample(&samples[nsamples++], t1 - t0, http_ports, nrunners, mtext, done);
                next_sample = t1 + 0.1;
            }
            if (t1 - last_progress > 0.5) {
                fprintf(stderr, "\rcairn-bench %s: %ld/%ld instances, %.1f s   ", bc->name, done,
                        o.instances, t1 - t0);
                last_progress = t1;
            }
            if (done >= o.instances || t1 - t0 > (double) o.timeout_s || g_stop) {
                break;
            }
            usleep(o.rate > 0 ? 2000 : 10000);
        }
        fprintf(stderr, "\n");
    }
    if (g_stop) {
        free(wal0);
        stop_fleet();
        cancel_rest(c, name, tq_db, tag);
        PQfinish(c);
        fprintf(stderr, "cairn-bench: interrupted\n");
        cleanup(false);
        free(samples);
        free(mtext);
        return 130;
    }
    res.enqueue_rate = enq_s > 0 ? (double) enqueued / enq_s : 0;
    /* Runner figures, read while they are still up. */
    for (i = 0; i < nrunners; i++) {
        double cpu;
        long rss;
        proc_usage(runners[i], &cpu, &rss);
        cpu_total += cpu;
        if (rss > res.rss_kb) {
            res.rss_kb = rss;
        }
        if (!scrape(http_ports[i], mtext, 1 << 16)) {
            continue;
        }
        summ_merge(&res.dispatch, mtext, "cairn_action_dispatch_delay_seconds");
        summ_merge(&res.persist, mtext, "cairn_persist_seconds");
        summ_merge(&res.action, mtext, "cairn_action_seconds");
        res.sent += fmax(0, sample_value(mtext, "cairn_pool_sent_total"));
        res.messages += fmax(0, sample_value(mtext, "cairn_pool_dispatch_messages_total"));
    }
    res.cpu_per_1000 = cpu_total * 1000.0 / (double) actions_total;
    stop_fleet();
    {
        const char *p[4] = {name, tq_db, tag, t0_db};
        PGresult *r = NULL;
        if (rn_db_exec(c,
                       "SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER"
                       " (WHERE status <> 'completed'), coalesce(percentile_cont(0.5) WITHIN"
                       " GROUP (ORDER BY ms), 0), coalesce(percentile_cont(0.95) WITHIN GROUP"
                       " (ORDER BY ms), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER"
                       " BY ms), 0), coalesce(max(ms), 0), coalesce(extract(epoch FROM"
                       " max(completed_at) - $4::timestamptz), 0) FROM (SELECT status,"
                       " completed_at, extract(epoch FROM completed_at - created_at) * 1000 AS"
                       " ms FROM cairn.runner_instances WHERE workflow_name = $1 AND created_at"
                       " >= $2::timestamptz AND input->>'run' = $3) t",
                       4, p, &r, &em) != CN_OK) {
            die("%s", em.text);
        }
        res.completed = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        res.failed = strtol(PQgetvalue(r, 0, 1), NULL, 10);
        res.p50 = strtod(PQgetvalue(r, 0, 2), NULL);
        res.p95 = strtod(PQgetvalue(r, 0, 3), NULL);
        res.p99 = strtod(PQgetvalue(r, 0, 4), NULL);
        res.max = strtod(PQgetvalue(r, 0, 5), NULL);
        /* The drain ends at the last completion the database recorded, not at our poll. */
        res.drain_s = strtod(PQgetvalue(r, 0, 6), NULL);
        PQclear(r);
    }
    if (res.drain_s <= 0) {
        res.drain_s = t1 - t0;
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
    if (done < o.instances) {
        cancel_rest(c, name, tq_db, tag);
    }
    PQfinish(c);
    report(&o, bc, actions_total, &res);
    if (o.plot != NULL) {
        plot(o.plot, bc, &o, samples, nsamples);
    }
    free(samples);
    free(mtext);
    if (done < o.instances) {
        fprintf(stderr, "cairn-bench: timed out with %ld of %ld instances finished\n", done,
                o.instances);
        cleanup(true);
        return 1;
    }
    cleanup(res.failed > 0);
    return res.failed > 0 ? 1 : 0;
}
