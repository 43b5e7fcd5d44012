/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl schedule ...`: adding, listing, pausing, resuming, deleting, triggering schedules
 * and previewing their next slots, each a call of the SQL API (sql/0011_schedules.sql). The
 * cron expression is checked here (runner/ops/cron.h: errors with their column) before the
 * database sees it; durations are PostgreSQL intervals (`90s`, `5 minutes`, `1 day`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/uuid.h"
#include "runner/ctl/ctl.h"
#include "runner/ops/cron.h"
#include "runner/ops/schedule.h"
#include "runner/store/db.h"

#define SCHEDULE_USAGE                                                                          \
    "schedule (add NAME --workflow W (--cron EXPR [--timezone TZ] | --every D) [--input JSON] " \
    "[--jitter D] [--catch-up skip|one|all] [--paused] | list | pause NAME | resume NAME | "    \
    "delete NAME | trigger NAME | next NAME [--count N])"

static int
sched_add(int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        {.flag = "workflow", .kind = CN_OPT_STR, .arg = "W", .help = "the workflow to run"},
        {.flag = "version",
         .kind = CN_OPT_STR,
         .arg = "V",
         .help = "this version of it (default: the newest at each slot)"},
        {.flag = "cron",
         .kind = CN_OPT_STR,
         .arg = "EXPR",
         .help = "5-field cron expression: minute hour day-of-month month day-of-week"},
        {.flag = "timezone",
         .kind = CN_OPT_STR,
         .arg = "TZ",
         .def = "UTC",
         .help = "the zone --cron's wall clock is in (e.g. Europe/Paris)"},
        {.flag = "every",
         .kind = CN_OPT_STR,
         .arg = "D",
         .help = "instead of --cron: every D (an interval, at least 1 s)"},
        {.flag = "input", .kind = CN_OPT_STR, .arg = "JSON", .help = "each instance's input"},
        {.flag = "input-file", .kind = CN_OPT_STR, .arg = "FILE", .help = "the input from FILE"},
        {.flag = "jitter",
         .kind = CN_OPT_STR,
         .arg = "D",
         .help = "start each slot up to D late (a fixed offset per slot)"},
        {.flag = "catch-up",
         .kind = CN_OPT_STR,
         .arg = "M",
         .def = "skip",
         .help = "slots missed while no runner ran: skip, one (the latest), all (of the last "
                 "24 h, at most 1000)"},
        {.flag = "paused", .kind = CN_OPT_BOOL, .help = "add it paused"},
        CTL_OPT_JSON,
    };
    struct cn_opts o =
        CTL_OPTS("schedule add", "NAME --workflow W (--cron EXPR | --every D) ...", rows, 1);
    const char *cron, *every, *params[10];
    char *input = NULL;
    struct cn_errmsg em = {{0}};
    struct rn_cron cr;
    PGconn *c = NULL;
    PGresult *r = NULL;
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    cron = cn_opts_str(&o, "cron");
    every = cn_opts_str(&o, "every");
    if (o.nargs != 1 || cn_opts_str(&o, "workflow") == NULL || (cron == NULL) == (every == NULL)) {
        fprintf(stderr, "usage: cairnctl schedule add NAME --workflow W (--cron EXPR | --every D) "
                        "[options]\n");
        return EXIT_USAGE;
    }
    if (cron != NULL && rn_cron_parse(cron, &cr, &em) != CN_OK) {
        fprintf(stderr, "cairnctl schedule add: --cron '%s': %s\n", cron, em.text);
        return EXIT_REJECTED;
    }
    if ((status = ctl_read_input("schedule add", cn_opts_str(&o, "input"),
                                 cn_opts_str(&o, "input-file"), &input)) != EXIT_OK) {
        return status;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        free(input);
        return status;
    }
    params[0] = argv[0];
    params[1] = cn_opts_str(&o, "workflow");
    params[2] = cron;
    params[3] = every;
    params[4] = cn_opts_str(&o, "timezone");
    params[5] = input;
    params[6] = cn_opts_str(&o, "jitter");
    params[7] = cn_opts_str(&o, "catch-up");
    params[8] = cn_opts_bool(&o, "paused") ? "t" : "f";
    params[9] = cn_opts_str(&o, "version");
    rv = rn_db_exec(c,
                    "SELECT cairn.schedule_add($1, $2, $3, $4::interval, $5, $6::jsonb,"
                    " $7::interval, $8, $9::boolean, $10)",
                    10, params, &r, &em);
    PQclear(r);
    if (rv == CN_OK) {
        /* The first slot now, so that `list` shows it (a runner would compute it too). */
        int64_t first = 0;
        size_t got = 0;
        char ms[24];
        rv = rn_db_exec(c, "SELECT floor(extract(epoch FROM now()) * 1000)::bigint", 0, NULL, &r,
                        &em);
        if (rv == CN_OK) {
            int64_t now = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            int64_t every_ms = 0;
            PQclear(r);
            if (every != NULL &&
                (rv = rn_db_exec(c, "SELECT floor(extract(epoch FROM $1::interval) * 1000)::bigint",
                                 1, &every, &r, &em)) == CN_OK) {
                every_ms = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
                PQclear(r);
            }
            if (rv == CN_OK) {
                rv = rn_schedule_slots(c, cron, every_ms, cn_opts_str(&o, "timezone"), now, 1,
                                       &first, &got, &em);
            }
        }
        if (rv == CN_OK && got == 1) {
            const char *p[2] = {argv[0], ms};
            (void) snprintf(ms, sizeof(ms), "%lld", (long long) first);
            rv = rn_db_exec(c, "SELECT cairn.schedule_first($1, to_timestamp($2::bigint / 1000.0))",
                            2, p, NULL, &em);
        }
    }
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (ctl_json_out(&o)) {
        printf("{\"name\": \"%s\", \"added\": true}\n", argv[0]);
    } else {
        printf("schedule %s added\n", argv[0]);
    }
    free(input);
    PQfinish(c);
    return status;
}

static int
sched_list(int argc, char **argv)
{
    PGresult *r = NULL;
    bool json = false;
    int status, i;

    if ((status = ctl_list(
             "schedule list", argc, argv,
             "SELECT json_build_object('name', name, 'workflow', workflow_name, 'version',"
             " workflow_version, 'cron', cron, 'every_ms', every_ms, 'timezone', timezone,"
             " 'input', input, 'jitter_ms', jitter_ms, 'catch_up', catch_up, 'paused',"
             " paused, 'next_at', next_at, 'last_slot', last_slot, 'error', error)::text,"
             " name, workflow_name, coalesce(cron || ' ' || timezone, 'every ' ||"
             " (every_ms * interval '1 millisecond')::text), CASE WHEN paused THEN 'paused' ELSE"
             " coalesce(next_at::text, '(computing)') END, coalesce(error, '')"
             " FROM cairn.schedules ORDER BY name",
             &r, &json)) != EXIT_OK) {
        return status;
    }
    if (json) {
        ctl_print_json_rows(r, PQntuples(r), 0);
    } else {
        printf("%-24s  %-20s  %-32s  %s\n", "NAME", "WORKFLOW", "WHEN", "NEXT");
        for (i = 0; i < PQntuples(r); i++) {
            printf("%-24s  %-20s  %-32s  %s%s%s\n", PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                   PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5)[0] ? "  " : "",
                   PQgetvalue(r, i, 5));
        }
    }
    PQclear(r);
    return EXIT_OK;
}

/* pause, resume, delete, trigger: one SQL function of the schedule's name each. */
static int
sched_simple(const char *what, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    char prog[48], usage[64], sql[96];
    struct cn_opts o = {.prog = prog,
                        .usage = usage,
                        .hint = "cairnctl help",
                        .opts = rows,
                        .nopts = sizeof(rows) / sizeof(rows[0]),
                        .max_args = 1};
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    int status;
    cn_err rv;

    (void) snprintf(prog, sizeof(prog), "cairnctl schedule %s", what);
    (void) snprintf(usage, sizeof(usage), "cairnctl schedule %s NAME", what);
    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 1) {
        fprintf(stderr, "usage: cairnctl schedule %s NAME\n", what);
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    (void) snprintf(sql, sizeof(sql), "SELECT cairn.schedule_%s($1)::text", what);
    rv = rn_db_exec(c, sql, 1, (const char *const *) argv, &r, &em);
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (PQgetisnull(r, 0, 0)) {
        fprintf(stderr, "cairnctl schedule %s: no schedule %s\n", what, argv[0]);
        status = EXIT_REJECTED;
    } else if (strcmp(what, "trigger") == 0) {
        printf("%s\n", PQgetvalue(r, 0, 0)); /* the instance's id */
    } else {
        printf("schedule %s %s\n", argv[0],
               strcmp(what, "pause") == 0    ? "paused"
               : strcmp(what, "resume") == 0 ? "resumed (from now: missed slots are not run)"
                                             : "deleted");
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

/* The next slots of a schedule, as the runners will fire them (from now, or --from). */
static int
sched_next(int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        {.flag = "count",
         .kind = CN_OPT_INT,
         .def = "5",
         .min = 1,
         .max = 1000,
         .arg = "N",
         .help = "how many slots"},
        {.flag = "from",
         .kind = CN_OPT_STR,
         .arg = "TIME",
         .help = "slots after TIME (a timestamp with zone; default: now)"},
        CTL_OPT_JSON,
    };
    struct cn_opts o =
        CTL_OPTS("schedule next", "NAME [--count N] [--from TIME] [--json]", rows, 1);
    struct cn_errmsg em = {{0}};
    PGconn *c = NULL;
    PGresult *r = NULL;
    int64_t *slots = NULL;
    size_t n = 0, k;
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 1) {
        fprintf(stderr, "usage: cairnctl schedule next NAME [--count N] [--from TIME]\n");
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    {
        const char *p[2] = {argv[0], cn_opts_str(&o, "from")};
        rv = rn_db_exec(
            c,
            "SELECT cron, every_ms, timezone, floor(extract(epoch FROM"
            " coalesce($2::timestamptz, now())) * 1000)::bigint"
            " FROM cairn.schedules WHERE name = $1 AND tenant_id = cairn.current_tenant()",
            2, p, &r, &em);
    }
    if (rv == CN_OK && PQntuples(r) == 0) {
        fprintf(stderr, "cairnctl schedule next: no schedule %s\n", argv[0]);
        status = EXIT_REJECTED;
    } else if (rv == CN_OK) {
        size_t want = (size_t) cn_opts_int(&o, "count");
        slots = calloc(want, sizeof(*slots));
        rv = slots == NULL
                 ? CN_NOMEM
                 : rn_schedule_slots(c, PQgetisnull(r, 0, 0) ? NULL : PQgetvalue(r, 0, 0),
                                     strtoll(PQgetvalue(r, 0, 1), NULL, 10), PQgetvalue(r, 0, 2),
                                     strtoll(PQgetvalue(r, 0, 3), NULL, 10), want, slots, &n, &em);
    }
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    }
    for (k = 0; status == EXIT_OK && k < n; k++) {
        char ms[24];
        const char *p[2] = {ms, PQgetvalue(r, 0, 2)};
        PGresult *t = NULL;
        (void) snprintf(ms, sizeof(ms), "%lld", (long long) slots[k]);
        /* The instant in UTC, and on the schedule's wall clock. */
        if (rn_db_exec(c,
                       "SELECT to_char(to_timestamp($1::bigint / 1000.0) AT TIME ZONE 'UTC',"
                       " 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), to_char(to_timestamp($1::bigint /"
                       " 1000.0) AT TIME ZONE $2, 'YYYY-MM-DD HH24:MI')",
                       2, p, &t, &em) == CN_OK) {
            if (ctl_json_out(&o)) {
                printf("%s{\"at\": \"%s\", \"local\": \"%s\"}", k ? ",\n " : "[",
                       PQgetvalue(t, 0, 0), PQgetvalue(t, 0, 1));
            } else {
                printf("%s  (%s %s)\n", PQgetvalue(t, 0, 0), PQgetvalue(t, 0, 1),
                       PQgetvalue(r, 0, 2));
            }
            PQclear(t);
        }
    }
    if (status == EXIT_OK && ctl_json_out(&o)) {
        printf(n ? "]\n" : "[]\n");
    }
    free(slots);
    PQclear(r);
    PQfinish(c);
    return status;
}

int
ctl_cmd_schedule(int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";

    if (strcmp(sub, "add") == 0) {
        return sched_add(argc - 1, argv + 1);
    }
    if (strcmp(sub, "list") == 0) {
        return sched_list(argc - 1, argv + 1);
    }
    if (strcmp(sub, "next") == 0) {
        return sched_next(argc - 1, argv + 1);
    }
    if (strcmp(sub, "pause") == 0 || strcmp(sub, "resume") == 0 || strcmp(sub, "delete") == 0 ||
        strcmp(sub, "trigger") == 0) {
        return sched_simple(sub, argc - 1, argv + 1);
    }
    fprintf(stderr, "usage: cairnctl %s\n", SCHEDULE_USAGE);
    return strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0 ? EXIT_OK : EXIT_USAGE;
}
