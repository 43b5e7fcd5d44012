/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl backfill ...`: creating, listing, watching, pausing, resuming, cancelling backfills
 * and retrying their failed partitions, each a call of the SQL API (sql/0015_backfills.sql).
 * The runners drive backfills; these commands only change their state and read it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/uuid.h"
#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

#define BACKFILL_USAGE                                                                         \
    "backfill (create WORKFLOW --param P --from A --to B --step S [--input JSON] "             \
    "[--concurrency N] [--version V] | list | status ID | pause ID | resume ID | cancel ID | " \
    "retry-failed ID)"

/* The backfill as JSON and as the columns status prints. */
#define BACKFILL_COLS                                                                          \
    "json_build_object('id', id, 'workflow', workflow_name, 'param', param, 'from',"           \
    " range_from, 'to', range_to, 'step', step, 'state', state, 'concurrency', concurrency,"   \
    " 'total', total, 'checkpoint', next_index, 'done', done, 'failed', failed, 'running',"    \
    " running, 'remaining', remaining, 'partition_ms', round(ewma_ms::numeric, 1),"            \
    " 'per_minute', round(per_minute::numeric, 2), 'eta_seconds',"                             \
    " round(extract(epoch FROM eta)), 'error', error, 'created_at', created_at, 'started_at'," \
    " started_at, 'finished_at', finished_at)::text"

static int
bf_create(int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        {.flag = "param",
         .kind = CN_OPT_STR,
         .arg = "P",
         .help = "the input that gets each partition's value (required)"},
        {.flag = "from",
         .kind = CN_OPT_STR,
         .arg = "A",
         .help = "first value: a date or an integer"},
        {.flag = "to", .kind = CN_OPT_STR, .arg = "B", .help = "last value (included)"},
        {.flag = "step",
         .kind = CN_OPT_STR,
         .arg = "S",
         .help = "between partitions: 1d, 7d, 2w for dates; an integer for integers"},
        {.flag = "input",
         .kind = CN_OPT_STR,
         .arg = "JSON",
         .def = "{}",
         .help = "the other inputs, a JSON object"},
        {.flag = "concurrency",
         .kind = CN_OPT_INT,
         .def = "1",
         .min = 1,
         .max = 10000,
         .help = "partitions running at once"},
        {.flag = "version", .kind = CN_OPT_STR, .arg = "V", .help = "this version of the workflow"},
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS("backfill create",
                                "WORKFLOW --param P --from A --to B --step S [--input JSON] "
                                "[--concurrency N] [--version V] [--json]",
                                rows, 1);
    const char *params[8];
    char conc[24];
    char *input = NULL;
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 1 || cn_opts_str(&o, "param") == NULL || cn_opts_str(&o, "from") == NULL ||
        cn_opts_str(&o, "to") == NULL || cn_opts_str(&o, "step") == NULL) {
        fprintf(stderr, "usage: %s (WORKFLOW, --param, --from, --to and --step are required)\n",
                o.usage);
        return EXIT_USAGE;
    }
    if ((status = ctl_parse_input("backfill create", cn_opts_str(&o, "input"), &input)) !=
        EXIT_OK) {
        return status;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        free(input);
        return status;
    }
    (void) snprintf(conc, sizeof(conc), "%lld", cn_opts_int(&o, "concurrency"));
    params[0] = argv[0];
    params[1] = cn_opts_str(&o, "param");
    params[2] = cn_opts_str(&o, "from");
    params[3] = cn_opts_str(&o, "to");
    params[4] = cn_opts_str(&o, "step");
    params[5] = input;
    params[6] = conc;
    params[7] = cn_opts_str(&o, "version");
    rv = rn_db_exec(c,
                    "SELECT cairn.backfill_create($1, $2, $3, $4, $5, $6::jsonb, $7::integer, $8)",
                    8, params, &r, &em);
    free(input);
    if (rv == CN_OK) {
        /* read in a statement of its own: the one that made it does not see its row */
        const char *p1[1] = {PQgetvalue(r, 0, 0)};
        PGresult *made = NULL;
        rv = rn_db_exec(c, "SELECT id, total, kind FROM cairn.backfills WHERE id = $1", 1, p1,
                        &made, &em);
        PQclear(r);
        r = made;
    }
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (PQntuples(r) != 1) {
        fprintf(stderr, "cairnctl backfill create: the backfill vanished at once\n");
        status = EXIT_DB;
    } else if (ctl_json_out(&o)) {
        printf("{\"id\": \"%s\", \"partitions\": %s}\n", PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
    } else {
        printf("%s\n", PQgetvalue(r, 0, 0));
        fprintf(stderr,
                "backfill of %s: %s %s partitions, %s at a time (cairnctl backfill status "
                "ID)\n",
                argv[0], PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), conc);
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

static int
bf_list(int argc, char **argv)
{
    PGresult *r = NULL;
    bool json = false;
    int status, i;

    if ((status = ctl_list("backfill list", argc, argv,
                           "SELECT " BACKFILL_COLS ", id, workflow_name, state, done || '/' ||"
                           " total, coalesce(to_char(eta, 'HH24:MI:SS'), '-')"
                           " FROM cairn.backfill_status ORDER BY created_at DESC LIMIT 1000",
                           &r, &json)) != EXIT_OK) {
        return status;
    }
    if (json) {
        ctl_print_json_rows(r, PQntuples(r), 0);
    } else {
        printf("%-36s  %-24s  %-9s  %13s  %s\n", "ID", "WORKFLOW", "STATE", "DONE", "ETA");
        for (i = 0; i < PQntuples(r); i++) {
            printf("%-36s  %-24s  %-9s  %13s  %s\n", PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                   PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5));
        }
    }
    PQclear(r);
    return EXIT_OK;
}

/* status, pause, resume, cancel, retry-failed: one backfill id each. */
static int
bf_one(const char *what, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    char prog[48], usage[80];
    struct cn_opts o = {.prog = prog,
                        .usage = usage,
                        .hint = "cairnctl help",
                        .opts = rows,
                        .nopts = sizeof(rows) / sizeof(rows[0]),
                        .max_args = 1};
    const char *sql;
    unsigned char id[16];
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    int status;
    cn_err rv;

    (void) snprintf(prog, sizeof(prog), "cairnctl backfill %s", what);
    (void) snprintf(usage, sizeof(usage), "cairnctl backfill %s ID [--json]", what);
    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 1) {
        fprintf(stderr, "usage: %s\n", usage);
        return EXIT_USAGE;
    }
    if (!cn_uuid_parse(argv[0], id)) {
        fprintf(stderr, "%s: '%s' is not a backfill ID (a UUID)\n", prog, argv[0]);
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    sql = strcmp(what, "pause") == 0    ? "SELECT cairn.backfill_pause($1)"
          : strcmp(what, "resume") == 0 ? "SELECT cairn.backfill_resume($1)"
          : strcmp(what, "cancel") == 0 ? "SELECT cairn.backfill_cancel($1) || ' partition(s) "
                                          "cancelled'"
          : strcmp(what, "retry-failed") == 0
              ? "SELECT cairn.backfill_retry_failed($1) || ' partition(s) queued again'"
              : "SELECT " BACKFILL_COLS ", state, done, failed, running, remaining, total,"
                " next_index, coalesce(round(per_minute::numeric, 2)::text, '-'),"
                " coalesce(to_char(eta, 'HH24:MI:SS'), '-'), coalesce(error, ''), workflow_name,"
                " param, range_from, range_to, step, concurrency"
                " FROM cairn.backfill_status WHERE id = $1";
    rv = rn_db_exec(c, sql, 1, (const char *const *) argv, &r, &em);
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (PQntuples(r) == 0) {
        fprintf(stderr, "cairnctl backfill %s: no backfill %s\n", what, argv[0]);
        status = EXIT_REJECTED;
    } else if (strcmp(what, "status") != 0) {
        if (ctl_json_out(&o)) {
            printf("{\"id\": \"%s\", \"result\": \"%s\"}\n", argv[0], PQgetvalue(r, 0, 0));
        } else {
            printf("backfill %s: %s\n", argv[0], PQgetvalue(r, 0, 0));
        }
    } else if (ctl_json_out(&o)) {
        printf("%s\n", PQgetvalue(r, 0, 0));
    } else {
        printf("backfill    %s\nworkflow    %s, %s from %s to %s step %s, %s at a time\n"
               "state       %s\npartitions  %s done, %s running, %s failed, %s remaining of %s "
               "(checkpoint: %s started)\nrate        %s partitions a minute\neta         %s\n",
               argv[0], PQgetvalue(r, 0, 11), PQgetvalue(r, 0, 12), PQgetvalue(r, 0, 13),
               PQgetvalue(r, 0, 14), PQgetvalue(r, 0, 15), PQgetvalue(r, 0, 16),
               PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 4), PQgetvalue(r, 0, 3),
               PQgetvalue(r, 0, 5), PQgetvalue(r, 0, 6), PQgetvalue(r, 0, 7), PQgetvalue(r, 0, 8),
               PQgetvalue(r, 0, 9));
        if (PQgetvalue(r, 0, 10)[0] != '\0') {
            printf("error       %s\n", PQgetvalue(r, 0, 10));
        }
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

int
ctl_cmd_backfill(int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";

    if (strcmp(sub, "create") == 0) {
        return bf_create(argc - 1, argv + 1);
    }
    if (strcmp(sub, "list") == 0) {
        return bf_list(argc - 1, argv + 1);
    }
    if (strcmp(sub, "status") == 0 || strcmp(sub, "pause") == 0 || strcmp(sub, "resume") == 0 ||
        strcmp(sub, "cancel") == 0 || strcmp(sub, "retry-failed") == 0) {
        return bf_one(sub, argc - 1, argv + 1);
    }
    fprintf(stderr, "usage: cairnctl %s\n", BACKFILL_USAGE);
    return strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0 ? EXIT_OK : EXIT_USAGE;
}
