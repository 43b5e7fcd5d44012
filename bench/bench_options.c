/* SPDX-License-Identifier: MIT */
/*
 * What cairn-bench runs: the cases (each a workflow, with its default size) and the command
 * line that picks one and sizes the fleet. A bad flag or value exits with status 2 and the
 * usage on stderr.
 *
 * Threads: main's only; no state but the constant table.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/cairn_bench.h"

const struct bench_case cases[] = {
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
const size_t ncases = sizeof(cases) / sizeof(cases[0]);

void
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
    for (i = 0; i < ncases; i++) {
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

/* A flag and where its value goes: a string, or a whole or real number within [min, max]. */
struct flag {
    const char *name;
    const char **s;
    long *n;
    double *d;
    double min, max;
};

/* Stores v as the flag's value; a number out of its range or not a number exits 2. */
static void
set_flag(const struct flag *f, const char *v)
{
    if (f->s != NULL) {
        *f->s = v;
    } else if (f->n != NULL) {
        *f->n = num(f->name, v, (long) f->min, (long) f->max);
    } else {
        *f->d = fnum(f->name, v, f->min, f->max);
    }
}

void
parse(int argc, char **argv, struct opts *o)
{
    const struct flag flags[] = {
        {"--case", .s = &o->case_name},
        {"--instances", .n = &o->instances, .min = 1, .max = 10000000},
        {"--actions", .n = &o->actions, .min = 1, .max = 100000},
        {"--rate", .d = &o->rate, .min = 0.1, .max = 1e6},
        {"--runners", .n = &o->runners, .min = 1, .max = 16},
        {"--shards", .n = &o->shards, .min = 1, .max = 256},
        {"--workers", .n = &o->workers, .min = 1, .max = 64},
        {"--shared-workers", .n = &o->shared, .min = 1, .max = 64},
        {"--slots", .n = &o->slots, .min = 1, .max = 4096},
        {"--prefetch", .n = &o->prefetch, .min = 0, .max = 4096},
        {"--transport", .s = &o->transport},
        {"--fail-rate", .d = &o->fail, .min = 0, .max = 1},
        {"--timeout-rate", .d = &o->timeout, .min = 0, .max = 1},
        {"--sleep-rate", .d = &o->nap, .min = 0, .max = 1},
        {"--format", .s = &o->format},
        {"--json-out", .s = &o->json_out},
        {"--plot", .s = &o->plot},
        {"--database-url", .s = &o->db_url},
        {"--pg-bin", .s = &o->pg_bin},
        {"--bin-dir", .s = &o->bin_dir},
        {"--max-running", .n = &o->max_running, .min = 1, .max = 1000000},
        {"--timeout", .n = &o->timeout_s, .min = 1, .max = 86400},
    };
    size_t k;
    int i;

    for (i = 1; i < argc; i += 2) { /* a flag and its value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--version") == 0) {
            printf("cairn-bench %s\n", CAIRN_VERSION);
            exit(0);
        }
        for (k = 0; k < sizeof(flags) / sizeof(flags[0]) && strcmp(a, flags[k].name) != 0; k++) {
        }
        if (k == sizeof(flags) / sizeof(flags[0]) || v == NULL) {
            usage(stderr);
            exit(2);
        }
        set_flag(&flags[k], v);
    }
    if (o->fail + o->timeout + o->nap > 1.0) {
        fprintf(stderr, "cairn-bench: --fail-rate + --timeout-rate + --sleep-rate must be <= 1\n");
        exit(2);
    }
}
