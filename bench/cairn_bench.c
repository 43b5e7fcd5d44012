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
 * initdb/pg_ctl (bench_procs.c). This file is the run, phase by phase; cairn_bench.h lists the
 * others.
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
#include "bench/cairn_bench.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "runner/store/db.h"
#include "runner/store/migrate.h"

/* Rows written in schema cairn so far (inserts, updates, deletes). */
static const char *const stats_sql =
    "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM "
    "pg_stat_user_tables WHERE schemaname = 'cairn'";

/* One run: what the phases below share. */
struct run {
    struct opts *o;
    const struct bench_case *bc;
    bool mixed;
    long actions_total;
    char runner_bin[PATH_MAX + 32], worker_bin[PATH_MAX + 32];
    const char *url; /* the database */
    PGconn *c;
    char name[64], version[32]; /* the case's workflow */
    char tag[64];               /* input->>'run' of this run's instances */
    char tq_db[64];             /* the database's clock before the enqueue: rows of this run */
    char t0_db[64];             /* the database's clock when the drain started */
    pid_t runners[16];
    char wurls[16][256];
    int http_ports[16], nrunners;
    struct sample *samples;
    size_t nsamples;
    char *mtext; /* one /metrics page */
    double t0, t1, enq_s;
    long done, enqueued;
};

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

/* The database's clock now, into buf. */
static void
db_now(PGconn *c, char *buf, size_t cap)
{
    char *s = q1(c, "SELECT clock_timestamp()", 0, NULL);

    (void) snprintf(buf, cap, "%s", s);
    free(s);
}

/* The case asked for, the defaults it leaves to it, and what cannot run. Returns 0, or 2 for a
 * usage error (said on stderr). */
static int
choose_case(struct run *r)
{
    struct opts *o = r->o;
    size_t k;

    for (k = 0; k < ncases; k++) {
        if (strcmp(cases[k].name, o->case_name) == 0) {
            r->bc = &cases[k];
        }
    }
    if (r->bc == NULL || (strcmp(o->transport, "ipc") != 0 && strcmp(o->transport, "tcp") != 0) ||
        (strcmp(o->format, "text") != 0 && strcmp(o->format, "json") != 0 &&
         strcmp(o->format, "markdown") != 0 && strcmp(o->format, "csv") != 0) ||
        o->runners * (o->workers + 1) > MAX_PROCS) {
        usage(stderr);
        return 2;
    }
    r->mixed = strcmp(r->bc->name, "mixed") == 0;
    if (o->plot != NULL && system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "cairn-bench: --plot needs gnuplot (apt-get install gnuplot-nox)\n");
        return 2;
    }
    if (o->instances == 0) {
        o->instances = r->bc->instances;
    }
    if (o->actions == 0 || r->bc->one_action) {
        o->actions = r->bc->one_action ? 1 : r->bc->actions;
    }
    r->actions_total = o->instances * o->actions;
    return 0;
}

/* The binaries: --bin-dir, else the build this program sits in (BUILD/bench/cairn-bench). */
static void
find_binaries(struct run *r)
{
    static char bin[PATH_MAX];
    char exe[PATH_MAX], *s;
    int i;

    if (r->o->bin_dir == NULL) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0) {
            die("cannot find myself: %s", strerror(errno));
        }
        exe[n] = '\0';
        (void) snprintf(bin, sizeof(bin), "%s", exe);
        for (i = 0; i < 2 && (s = strrchr(bin, '/')) != NULL; i++) {
            *s = '\0';
        }
        r->o->bin_dir = bin;
    }
    (void) snprintf(r->runner_bin, sizeof(r->runner_bin), "%s/runner/cairn-runner", r->o->bin_dir);
    (void) snprintf(r->worker_bin, sizeof(r->worker_bin), "%s/worker-protocol/cairn-worker",
                    r->o->bin_dir);
    if (access(r->runner_bin, X_OK) != 0 || access(r->worker_bin, X_OK) != 0) {
        die("%s or %s is not built", r->runner_bin, r->worker_bin);
    }
}

/* Connects to --database-url (or CAIRN_DATABASE_URL), else to a throwaway cluster started for
 * the run, and migrates it. */
static void
open_database(struct run *r)
{
    struct cn_errmsg em = {{0}};
    struct rn_migrate_report applied;

    r->url = rn_db_url(r->o->db_url);
    if (r->url == NULL || r->url[0] == '\0') {
        const char *pgb = r->o->pg_bin != NULL ? r->o->pg_bin : getenv("CN_PG_BIN");
        fprintf(stderr, "cairn-bench: starting a durable throwaway PostgreSQL\n");
        r->url = pg_start(pgb != NULL ? pgb : "/usr/lib/postgresql/15/bin");
    }
    if (rn_db_connect(r->url, &r->c, &em) != CN_OK) {
        die("%s", em.text);
    }
    if (rn_migrate(r->c, NULL, NULL, &applied, &em) != CN_OK) {
        die("migrate: %s", em.text);
    }
}

/* Registers version `version` of workflow `name` by its source, which the runners compile; inputs:
 * the parameters of its main as a text[] literal ("{i}"), or NULL when it takes none. */
static void
register_source(PGconn *c, const char *name, const char *version, const char *source,
                const char *inputs)
{
    const char *p[4] = {name, version, source, inputs};

    free(q1(c,
            "INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash,"
            " source, inputs) VALUES ($1, $2, $2, $3, $4::text[])"
            " ON CONFLICT ON CONSTRAINT workflow_versions_name DO NOTHING",
            4, p));
}

/* Registers the case's workflow (and its child's), as a version named by the source's hash:
 * re-running is a no-op; and sets or removes its concurrency limit. */
static void
register_case(struct run *r)
{
    const struct bench_case *bc = r->bc;
    uint64_t h = 1469598103934665603ULL;
    char lim[24], *s;

    for (const char *cp = bc->source; *cp != '\0'; cp++) {
        h = (h ^ (unsigned char) *cp) * 1099511628211ULL;
    }
    (void) snprintf(r->version, sizeof(r->version), "bench-%016llx", (unsigned long long) h);
    (void) snprintf(r->name, sizeof(r->name), "bench_%s", bc->name);
    for (s = r->name; *s != '\0'; s++) {
        if (*s == '-') {
            *s = '_';
        }
    }
    if (bc->child_name != NULL) {
        register_source(r->c, bc->child_name, r->version, bc->child_source, "{i}");
    }
    register_source(r->c, r->name, r->version, bc->source, NULL);
    /* With a limit the claim goes through cairn.claim_limited (sql/0012); without one, the
     * limit of an earlier run on this database is removed. */
    {
        const char *p[2] = {r->name, lim};
        (void) snprintf(lim, sizeof(lim), "%ld", r->o->max_running);
        if (r->o->max_running == 0) {
            p[1] = NULL;
        }
        free(q1(r->c, "SELECT cairn.limit_set($1, $2::integer)", 2, p));
        if (r->o->max_running == 0) {
            free(q1(r->c,
                    "DELETE FROM cairn.workflow_limits WHERE tenant_id = 'default' AND"
                    " workflow_name = $1",
                    1, p));
        }
    }
}

/* Enqueues instances up to `to` (the enqueue's time goes to enq_s). */
static void
enqueue_up_to(struct run *r, long to)
{
    double e0 = now_s();

    enqueue(r->c, r->name, r->version, r->tag, r->o, r->mixed, r->enqueued + 1, to);
    r->enq_s += now_s() - e0;
    r->enqueued = to;
}

/* The W workers of runner i, at wurl. */
static void
start_own_workers(struct run *r, int i, const char *wurl)
{
    char sl[16], pf[16], wname[32], log[300];
    int w;

    (void) snprintf(sl, sizeof(sl), "%ld", r->o->slots);
    (void) snprintf(pf, sizeof(pf), "%ld", r->o->prefetch);
    for (w = 0; w < r->o->workers; w++) {
        const char *wargv[] = {r->worker_bin, "--url", wurl,     "--slots", sl,
                               "--prefetch",  pf,      "--name", wname,     NULL};
        (void) snprintf(wname, sizeof(wname), "bench-%d-%d", i, w);
        (void) snprintf(log, sizeof(log), "%s/worker%d-%d.log", g.tmp, i, w);
        (void) spawn(wargv, log);
    }
}

/* --shared-workers N: N workers, each serving every runner. */
static void
start_shared_workers(struct run *r)
{
    int i;

    for (i = 0; i < r->o->shared; i++) {
        const char *wargv[8 + 2 * 16];
        char sl[16], pf[16], wname[32], log[300];
        int k, n = 0;

        (void) snprintf(sl, sizeof(sl), "%ld", r->o->slots);
        (void) snprintf(pf, sizeof(pf), "%ld", r->o->prefetch);
        (void) snprintf(wname, sizeof(wname), "bench-shared-%d", i);
        (void) snprintf(log, sizeof(log), "%s/worker-shared%d.log", g.tmp, i);
        wargv[n++] = r->worker_bin;
        for (k = 0; k < r->nrunners; k++) {
            wargv[n++] = "--url";
            wargv[n++] = r->wurls[k];
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
}

/* The fleet: each runner with its own workers, or --shared-workers serving every runner. */
static void
start_fleet(struct run *r)
{
    const struct opts *o = r->o;
    int i;

    db_now(r->c, r->t0_db, sizeof(r->t0_db));
    r->t0 = now_s();
    for (i = 0; i < o->runners; i++) {
        char wurl[256], hl[64], log[300], shards[16];

        if (strcmp(o->transport, "ipc") == 0) {
            (void) snprintf(wurl, sizeof(wurl), "ipc://%s/r%d.sock", g.tmp, i);
        } else {
            (void) snprintf(wurl, sizeof(wurl), "tcp://127.0.0.1:%d", free_port());
        }
        r->http_ports[i] = free_port();
        (void) snprintf(hl, sizeof(hl), "127.0.0.1:%d", r->http_ports[i]);
        (void) snprintf(log, sizeof(log), "%s/runner%d.log", g.tmp, i);
        (void) snprintf(shards, sizeof(shards), "%ld", o->shards);
        {
            const char *rargv[] = {r->runner_bin, "--database-url",     r->url, "--worker-listen",
                                   wurl,          "--http-listen",      hl,     "--shards",
                                   shards,        "--poll-interval-ms", "50",   NULL};
            r->runners[r->nrunners++] = spawn(rargv, log);
        }
        (void) snprintf(r->wurls[i], sizeof(r->wurls[i]), "%s", wurl);
        if (o->shared == 0) {
            start_own_workers(r, i, wurl);
        }
    }
    start_shared_workers(r);
}

/* At --rate, the schedule starts once every worker is connected, so that the first instances
 * do not measure the fleet's start. */
static void
await_workers(struct run *r)
{
    double until = now_s() + 30;
    int i;

    for (i = 0; i < r->nrunners && !g_stop; i++) {
        while (!(scrape(r->http_ports[i], r->mtext, METRICS_MAX) &&
                 sample_value(r->mtext, "cairn_workers") >=
                     (double) (r->o->shared > 0 ? r->o->shared : r->o->workers))) {
            if (now_s() > until) {
                die("the workers of runner %d did not connect within 30 s", i);
            }
            usleep(20000);
        }
    }
    db_now(r->c, r->t0_db, sizeof(r->t0_db));
    r->t0 = now_s();
}

/* Instances of this run that have finished, by the database. */
static long
count_done(struct run *r)
{
    const char *p[3] = {r->name, r->tq_db, r->tag};
    char *cnt = q1(r->c,
                   "SELECT count(*) FILTER (WHERE status IN ('completed', 'failed',"
                   " 'cancelled')) FROM cairn.runner_instances WHERE workflow_name ="
                   " $1 AND created_at >= $2::timestamptz AND input->>'run' = $3",
                   3, p);
    long n = strtol(cnt, NULL, 10);

    free(cnt);
    return n;
}

/* The drain: enqueue on schedule (--rate), poll completions, sample throughput, until every
 * instance finished, the timeout or a signal. */
static void
drain(struct run *r)
{
    const struct opts *o = r->o;
    double next_sample = 0, last_poll = 0, last_progress = 0, poll_every = 0.05;

    for (;;) {
        r->t1 = now_s();
        if (o->rate > 0 && r->enqueued < o->instances) {
            long due = (long) floor(o->rate * (r->t1 - r->t0)) + 1;
            if (due > o->instances) {
                due = o->instances;
            }
            if (due > r->enqueued) {
                enqueue_up_to(r, due);
            }
        }
        if (r->t1 - last_poll >= poll_every) {
            r->done = count_done(r);
            /* The count reads every row of the run (the tag is in the input): 8 ms a poll
             * late in a queue-noop run of 20 000, a fifth of a core at 20 polls a second,
             * taken from the database under test. At most a twenty-fifth of one now; the
             * figures do not depend on it (the drain ends at the last completed_at). */
            poll_every = 25 * (now_s() - r->t1);
            if (poll_every < 0.05) {
                poll_every = 0.05;
            }
            last_poll = r->t1;
        }
        if ((r->t1 >= next_sample || r->done >= o->instances) && r->nsamples < MAX_SAMPLES) {
            take_sample(&r->samples[r->nsamples++], r->t1 - r->t0, r->http_ports, r->nrunners,
                        r->mtext, r->done);
            next_sample = r->t1 + 0.1;
        }
        if (r->t1 - last_progress > 0.5) {
            fprintf(stderr, "\rcairn-bench %s: %ld/%ld instances, %.1f s   ", r->bc->name, r->done,
                    o->instances, r->t1 - r->t0);
            last_progress = r->t1;
        }
        if (r->done >= o->instances || r->t1 - r->t0 > (double) o->timeout_s || g_stop) {
            break;
        }
        usleep(o->rate > 0 ? 2000 : 10000);
    }
    fprintf(stderr, "\n");
}

/* Runner figures, read while they are still up: CPU, peak RSS and their /metrics summaries. */
static void
runner_figures(struct run *r, struct result *res)
{
    double cpu_total = 0;
    int i;

    for (i = 0; i < r->nrunners; i++) {
        double cpu;
        long rss;
        proc_usage(r->runners[i], &cpu, &rss);
        cpu_total += cpu;
        if (rss > res->rss_kb) {
            res->rss_kb = rss;
        }
        if (!scrape(r->http_ports[i], r->mtext, METRICS_MAX)) {
            continue;
        }
        summ_merge(&res->dispatch, r->mtext, "cairn_action_dispatch_delay_seconds");
        summ_merge(&res->persist, r->mtext, "cairn_persist_seconds");
        summ_merge(&res->action, r->mtext, "cairn_action_seconds");
        res->sent += fmax(0, sample_value(r->mtext, "cairn_pool_sent_total"));
        res->messages += fmax(0, sample_value(r->mtext, "cairn_pool_dispatch_messages_total"));
    }
    res->cpu_per_1000 = cpu_total * 1000.0 / (double) r->actions_total;
}

/* The instances' figures, from the database: how many completed, latency, and the drain. */
static void
instance_figures(struct run *r, struct result *res)
{
    const char *p[4] = {r->name, r->tq_db, r->tag, r->t0_db};
    struct cn_errmsg em = {{0}};
    PGresult *q = NULL;

    if (rn_db_exec(r->c,
                   "SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER"
                   " (WHERE status <> 'completed'), coalesce(percentile_cont(0.5) WITHIN"
                   " GROUP (ORDER BY ms), 0), coalesce(percentile_cont(0.95) WITHIN GROUP"
                   " (ORDER BY ms), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER"
                   " BY ms), 0), coalesce(max(ms), 0), coalesce(extract(epoch FROM"
                   " max(completed_at) - $4::timestamptz), 0) FROM (SELECT status,"
                   " completed_at, extract(epoch FROM completed_at - created_at) * 1000 AS"
                   " ms FROM cairn.runner_instances WHERE workflow_name = $1 AND created_at"
                   " >= $2::timestamptz AND input->>'run' = $3) t",
                   4, p, &q, &em) != CN_OK) {
        die("%s", em.text);
    }
    res->completed = strtol(PQgetvalue(q, 0, 0), NULL, 10);
    res->failed = strtol(PQgetvalue(q, 0, 1), NULL, 10);
    res->p50 = strtod(PQgetvalue(q, 0, 2), NULL);
    res->p95 = strtod(PQgetvalue(q, 0, 3), NULL);
    res->p99 = strtod(PQgetvalue(q, 0, 4), NULL);
    res->max = strtod(PQgetvalue(q, 0, 5), NULL);
    /* The drain ends at the last completion the database recorded, not at our poll. */
    res->drain_s = strtod(PQgetvalue(q, 0, 6), NULL);
    PQclear(q);
    if (res->drain_s <= 0) {
        res->drain_s = r->t1 - r->t0;
    }
}

/* Rows and WAL bytes written per action since the baseline (rows0, wal0). */
static void
database_figures(struct run *r, double rows0, const char *wal0, struct result *res)
{
    const char *p[1] = {wal0};

    usleep(600000);
    (void) qd(r->c, "SELECT pg_stat_force_next_flush()", 0, NULL);
    res->rows = (qd(r->c, stats_sql, 0, NULL) - rows0) / (double) r->actions_total;
    res->wal = qd(r->c, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", 1, p) /
               (double) r->actions_total;
}

/* After Ctrl-C or SIGTERM: the fleet stopped, the run's rest cancelled, everything removed. */
static int
interrupted(struct run *r)
{
    stop_fleet();
    cancel_rest(r->c, r->name, r->tq_db, r->tag);
    PQfinish(r->c);
    fprintf(stderr, "cairn-bench: interrupted\n");
    cleanup(false);
    return 130;
}

int
main(int argc, char **argv)
{
    struct opts o = {NULL, "sequence", "ipc", "text", NULL, NULL, NULL, NULL, 0,    0, 1,
                     2,    2,          16,    16,     600,  0,    0.05, 0.01, 0.02, 0, 0};
    struct result res;
    struct run r;
    double rows0;
    char *wal0;
    int code;

    memset(&res, 0, sizeof(res));
    memset(&r, 0, sizeof(r));
    r.o = &o;
    parse(argc, argv, &o);
    if ((code = choose_case(&r)) != 0) {
        return code;
    }
    if ((r.samples = calloc(MAX_SAMPLES, sizeof(*r.samples))) == NULL ||
        (r.mtext = malloc(METRICS_MAX)) == NULL) {
        die("out of memory");
    }
    find_binaries(&r);
    catch_signals();
    open_database(&r);
    register_case(&r);
    (void) snprintf(r.tag, sizeof(r.tag), "%ld-%ld", (long) getpid(), (long) time(NULL));
    /* Rows of this run are found through (workflow_name, created_at) from here on. */
    db_now(r.c, r.tq_db, sizeof(r.tq_db));
    if (o.rate == 0) {
        enqueue_up_to(&r, o.instances);
    }
    usleep(600000); /* statistics of the enqueue settle before the baseline */
    (void) qd(r.c, "SELECT pg_stat_force_next_flush()", 0, NULL);
    rows0 = qd(r.c, stats_sql, 0, NULL);
    wal0 = q1(r.c, "SELECT pg_current_wal_lsn()", 0, NULL);
    (void) snprintf(g.tmp, sizeof(g.tmp), "/tmp/cairn-bench-XXXXXX");
    if (mkdtemp(g.tmp) == NULL) {
        g.tmp[0] = '\0';
        die("mkdtemp: %s", strerror(errno));
    }
    start_fleet(&r);
    if (o.rate > 0) {
        await_workers(&r);
    }
    drain(&r);
    if (g_stop) {
        free(wal0);
        free(r.samples);
        free(r.mtext);
        return interrupted(&r);
    }
    res.enqueue_rate = r.enq_s > 0 ? (double) r.enqueued / r.enq_s : 0;
    runner_figures(&r, &res);
    stop_fleet();
    instance_figures(&r, &res);
    database_figures(&r, rows0, wal0, &res);
    free(wal0);
    if (r.done < o.instances) {
        cancel_rest(r.c, r.name, r.tq_db, r.tag);
    }
    PQfinish(r.c);
    report(&o, r.bc, r.actions_total, &res);
    if (o.plot != NULL) {
        plot(o.plot, r.bc, &o, r.samples, r.nsamples);
    }
    free(r.samples);
    free(r.mtext);
    if (r.done < o.instances) {
        fprintf(stderr, "cairn-bench: timed out with %ld of %ld instances finished\n", r.done,
                o.instances);
        cleanup(true);
        return 1;
    }
    cleanup(res.failed > 0);
    return res.failed > 0 ? 1 : 0;
}
