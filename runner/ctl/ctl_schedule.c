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

/* The first slot, stored at once so that `list` shows it (a runner would compute it too). */
static int
sched_first_slot(const struct cn_opts *o, PGconn *c, const char *name, const char *cron,
                 const char *every)
{
    int64_t now, every_ms = 0, first = 0;
    struct cn_errmsg em = {{0}};
    PGresult *r = NULL;
    size_t got = 0;
    char ms[24];
    int status;
    cn_err rv;

    if ((status = ctl_query(o, c, "SELECT floor(extract(epoch FROM now()) * 1000)::bigint AS ms", 0,
                            NULL, &r)) != EXIT_OK) {
        return status;
    }
    now = ctl_col_int(r, 0, "ms");
    PQclear(r);
    if (every != NULL) {
        if ((status = ctl_query(o, c,
                                "SELECT floor(extract(epoch FROM $1::interval) * 1000)::bigint"
                                " AS ms",
                                1, &every, &r)) != EXIT_OK) {
            return status;
        }
        every_ms = ctl_col_int(r, 0, "ms");
        PQclear(r);
    }
    if ((rv = rn_schedule_slots(c, cron, every_ms, cn_opts_str(o, "timezone"), now, 1, &first, &got,
                                &em)) != CN_OK) {
        return ctl_db_error(o, rv, &em);
    }
    if (got != 1) {
        return EXIT_OK;
    }
    {
        const char *p[2] = {name, ms};
        (void) snprintf(ms, sizeof(ms), "%lld", (long long) first);
        return ctl_query(o, c, "SELECT cairn.schedule_first($1, to_timestamp($2::bigint / 1000.0))",
                         2, p, NULL);
    }
}

static int
sched_add(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("workflow", "W", "the workflow to run"),
        CTL_OPT_STR("version", "V", "this version of it (default: the newest at each slot)"),
        CTL_OPT_STR("cron", "EXPR",
                    "5-field cron expression: minute hour day-of-month month day-of-week"),
        CTL_OPT_STR_DEF("timezone", "TZ", "UTC",
                        "the zone --cron's wall clock is in (e.g. Europe/Paris)"),
        CTL_OPT_STR("every", "D", "instead of --cron: every D (an interval, at least 1 s)"),
        CTL_OPT_STR("input", "JSON", "each instance's input"),
        CTL_OPT_STR("input-file", "FILE", "the input from FILE"),
        CTL_OPT_STR("jitter", "D", "start each slot up to D late (a fixed offset per slot)"),
        CTL_OPT_STR_DEF(
            "catch-up", "M", "skip",
            "slots missed while no runner ran: skip, one (the latest), all (of the last "
            "24 h, at most 1000)"),
        CTL_OPT_BOOL("paused", "add it paused"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    const char *cron, *every, *params[10];
    char *input = NULL;
    struct cn_errmsg em = {{0}};
    struct rn_cron cr;
    PGconn *c = NULL;
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    cron = cn_opts_str(&o, "cron");
    every = cn_opts_str(&o, "every");
    if (o.nargs != 1 || cn_opts_str(&o, "workflow") == NULL || (cron == NULL) == (every == NULL)) {
        return ctl_usage(&o);
    }
    if (cron != NULL && rn_cron_parse(cron, &cr, &em) != CN_OK) {
        fprintf(stderr, "%s: --cron '%s': %s\n", o.prog, cron, em.text);
        return EXIT_REJECTED;
    }
    if ((status = ctl_read_input(o.prog, cn_opts_str(&o, "input"), cn_opts_str(&o, "input-file"),
                                 &input)) != EXIT_OK) {
        return status;
    }
    if ((status = ctl_db_open(&o, &c)) == EXIT_OK) {
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
        status = ctl_query(&o, c,
                           "SELECT cairn.schedule_add($1, $2, $3, $4::interval, $5, $6::jsonb,"
                           " $7::interval, $8, $9::boolean, $10)",
                           10, params, NULL);
    }
    if (status == EXIT_OK) {
        status = sched_first_slot(&o, c, argv[0], cron, every);
    }
    if (status == EXIT_OK && ctl_json_out(&o)) {
        printf("{\"name\": \"%s\", \"added\": true}\n", argv[0]);
    } else if (status == EXIT_OK) {
        printf("schedule %s added\n", argv[0]);
    }
    free(input);
    PQfinish(c);
    return status;
}

/* `schedule list`, with each one's next slot or the error a runner paused it for (ctl_list runs
 * it). */
static const struct ctl_column sched_cols[] = {
    {"NAME", "name", -24},
    {"WORKFLOW", "workflow_name", -20},
    {"WHEN", "cadence", -32},
    {"NEXT", "next", 0},
};
static const struct ctl_listing sched_listing = CTL_LISTING(
    "SELECT json_build_object('name', name, 'workflow', workflow_name, 'version',"
    " workflow_version, 'cron', cron, 'every_ms', every_ms, 'timezone', timezone,"
    " 'input', input, 'jitter_ms', jitter_ms, 'catch_up', catch_up, 'paused',"
    " paused, 'next_at', next_at, 'last_slot', last_slot, 'error', error)::text AS json,"
    " name, workflow_name, coalesce(cron || ' ' || timezone, 'every ' ||"
    " (every_ms * interval '1 millisecond')::text) AS cadence, CASE WHEN paused THEN"
    " 'paused' ELSE coalesce(next_at::text, '(computing)') END || CASE WHEN coalesce(error,"
    " '') = '' THEN '' ELSE '  ' || error END AS next"
    " FROM cairn.schedules ORDER BY name",
    sched_cols, NULL);

/* pause, resume, delete, trigger: one SQL function of the schedule's name each. */
static int
sched_simple(const struct ctl_call *call, int argc, char **argv)
{
    /* --json was always taken here; kept so that scripts passing it go on working. */
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_BOOL("json", "accepted, but the output stays text"),
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    const char *what = call->cmd->name, *answer;
    PGresult *r = NULL;
    char sql[96];
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    (void) snprintf(sql, sizeof(sql), "SELECT cairn.schedule_%s($1)::text AS answer", what);
    if ((status = ctl_query_once(&o, sql, 1, (const char *const *) argv, &r)) != EXIT_OK) {
        return status;
    }
    if ((answer = ctl_col_opt(r, 0, "answer")) == NULL) {
        fprintf(stderr, "%s: no schedule %s\n", o.prog, argv[0]);
        status = EXIT_REJECTED;
    } else if (strcmp(what, "trigger") == 0) {
        printf("%s\n", answer); /* the instance's id */
    } else {
        printf("schedule %s %s\n", argv[0],
               strcmp(what, "pause") == 0    ? "paused"
               : strcmp(what, "resume") == 0 ? "resumed (from now: missed slots are not run)"
                                             : "deleted");
    }
    PQclear(r);
    return status;
}

/* Each slot as an instant in UTC and on the schedule's wall clock (zone tz). */
static void
print_slots(const struct cn_opts *o, PGconn *c, const char *tz, const int64_t *slots, size_t n)
{
    struct cn_errmsg em;
    size_t k;

    for (k = 0; k < n; k++) {
        char ms[24];
        const char *p[2] = {ms, tz};
        PGresult *t = NULL;
        (void) snprintf(ms, sizeof(ms), "%lld", (long long) slots[k]);
        if (rn_db_exec(c,
                       "SELECT to_char(to_timestamp($1::bigint / 1000.0) AT TIME ZONE 'UTC',"
                       " 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS at, to_char(to_timestamp($1::bigint"
                       " / 1000.0) AT TIME ZONE $2, 'YYYY-MM-DD HH24:MI') AS local",
                       2, p, &t, &em) == CN_OK) {
            if (ctl_json_out(o)) {
                printf("%s{\"at\": \"%s\", \"local\": \"%s\"}", k ? ",\n " : "[",
                       ctl_col(t, 0, "at"), ctl_col(t, 0, "local"));
            } else {
                printf("%s  (%s %s)\n", ctl_col(t, 0, "at"), ctl_col(t, 0, "local"), tz);
            }
            PQclear(t);
        }
    }
    if (ctl_json_out(o)) {
        printf(n ? "]\n" : "[]\n");
    }
}

/* The next slots of schedule name, as the runners will fire them (from now, or --from). */
static int
next_slots(const struct cn_opts *o, PGconn *c, const char *name)
{
    const char *p[2] = {name, cn_opts_str(o, "from")};
    struct cn_errmsg em = {{0}};
    PGresult *r = NULL;
    int64_t *slots = NULL;
    size_t n = 0, want = (size_t) cn_opts_int(o, "count");
    int status;
    cn_err rv;

    if ((status = ctl_query_found(
             o, c,
             "SELECT cron, every_ms, timezone, floor(extract(epoch FROM"
             " coalesce($2::timestamptz, now())) * 1000)::bigint AS from_ms"
             " FROM cairn.schedules WHERE name = $1 AND tenant_id = cairn.current_tenant()",
             2, p, "schedule", &r)) != EXIT_OK) {
        return status;
    }
    slots = calloc(want, sizeof(*slots));
    rv = slots == NULL ? CN_NOMEM
                       : rn_schedule_slots(c, ctl_col_opt(r, 0, "cron"),
                                           ctl_col_int(r, 0, "every_ms"), ctl_col(r, 0, "timezone"),
                                           ctl_col_int(r, 0, "from_ms"), want, slots, &n, &em);
    if (rv != CN_OK) {
        status = ctl_db_error(o, rv, &em);
    } else {
        print_slots(o, c, ctl_col(r, 0, "timezone"), slots, n);
    }
    free(slots);
    PQclear(r);
    return status;
}

static int
sched_next(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_INT("count", "5", 1, 1000, "N", "how many slots"),
        CTL_OPT_STR("from", "TIME", "slots after TIME (a timestamp with zone; default: now)"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    return ctl_with_db(&o, next_slots, argv[0]);
}

static const struct ctl_cmd cmds[] = {
    {"add",
     "NAME --workflow W (--cron EXPR [--timezone TZ] | --every D) [--version V] "
     "[--input JSON | --input-file FILE] [--jitter D] [--catch-up skip|one|all] [--paused] "
     "[--json]",
     "add a schedule: W at each slot of a cron expression, or every D", sched_add, NULL, NULL},
    {"list", "[--json]", "list the schedules, with their next slot (or why a runner paused one)",
     ctl_list, NULL, &sched_listing},
    {"pause", "NAME", "pause a schedule", sched_simple, NULL, NULL},
    {"resume", "NAME", "resume a schedule from now (missed slots are not run)", sched_simple, NULL,
     NULL},
    {"delete", "NAME", "delete a schedule (its instances keep its name)", sched_simple, NULL, NULL},
    {"trigger", "NAME", "run a schedule's workflow once now; prints the instance's id",
     sched_simple, NULL, NULL},
    {"next", "NAME [--count N] [--from TIME] [--json]",
     "show a schedule's next slots, in UTC and on its wall clock", sched_next, NULL, NULL},
};
const struct ctl_table ctl_schedule_cmds = CTL_TABLE(cmds);
