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

/* The backfill as JSON and as the columns status prints. */
#define BACKFILL_COLS                                                                          \
    "json_build_object('id', id, 'workflow', workflow_name, 'param', param, 'from',"           \
    " range_from, 'to', range_to, 'step', step, 'state', state, 'concurrency', concurrency,"   \
    " 'total', total, 'checkpoint', next_index, 'done', done, 'failed', failed, 'running',"    \
    " running, 'remaining', remaining, 'partition_ms', round(ewma_ms::numeric, 1),"            \
    " 'per_minute', round(per_minute::numeric, 2), 'eta_seconds',"                             \
    " round(extract(epoch FROM eta)), 'error', error, 'created_at', created_at, 'started_at'," \
    " started_at, 'finished_at', finished_at)::text AS json"

/* Makes the backfill (cairn.backfill_create) and reads back its id, partitions and kind into
 * *made. */
static int
bf_insert(const struct cn_opts *o, PGconn *c, const char *workflow, const char *input,
          const char *conc, PGresult **made)
{
    const char *params[8];
    char id[64];
    int status;

    params[0] = workflow;
    params[1] = cn_opts_str(o, "param");
    params[2] = cn_opts_str(o, "from");
    params[3] = cn_opts_str(o, "to");
    params[4] = cn_opts_str(o, "step");
    params[5] = input;
    params[6] = conc;
    params[7] = cn_opts_str(o, "version");
    if ((status = ctl_query_text(o, c,
                                 "SELECT cairn.backfill_create($1, $2, $3, $4, $5, $6::jsonb,"
                                 " $7::integer, $8) AS id",
                                 8, params, "id", id, sizeof(id))) != EXIT_OK) {
        return status;
    }
    /* read in a statement of its own: the one that made it does not see its row */
    params[0] = id;
    status = ctl_query(o, c, "SELECT id, total, kind FROM cairn.backfills WHERE id = $1", 1, params,
                       made);
    if (status == EXIT_OK && PQntuples(*made) != 1) {
        fprintf(stderr, "%s: the backfill vanished at once\n", o->prog);
        status = EXIT_DB;
    }
    return status;
}

static int
bf_create(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("param", "P", "the input that gets each partition's value (required)"),
        CTL_OPT_STR("from", "A", "first value: a date or an integer"),
        CTL_OPT_STR("to", "B", "last value (included)"),
        CTL_OPT_STR("step", "S",
                    "between partitions: 1d, 7d, 2w for dates; an integer for integers"),
        CTL_OPT_STR_DEF("input", "JSON", "{}", "the other inputs, a JSON object"),
        CTL_OPT_INT("concurrency", "1", 1, 10000, NULL, "partitions running at once"),
        CTL_OPT_STR("version", "V", "this version of the workflow"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    char conc[24];
    char *input = NULL;
    PGconn *c = NULL;
    PGresult *r = NULL;
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 1 || cn_opts_str(&o, "param") == NULL || cn_opts_str(&o, "from") == NULL ||
        cn_opts_str(&o, "to") == NULL || cn_opts_str(&o, "step") == NULL) {
        fprintf(stderr, "usage: %s (WORKFLOW, --param, --from, --to and --step are required)\n",
                o.usage);
        return EXIT_USAGE;
    }
    if ((status = ctl_parse_input(o.prog, cn_opts_str(&o, "input"), &input)) != EXIT_OK) {
        return status;
    }
    (void) snprintf(conc, sizeof(conc), "%lld", cn_opts_int(&o, "concurrency"));
    if ((status = ctl_db_open(&o, &c)) == EXIT_OK) {
        status = bf_insert(&o, c, argv[0], input, conc, &r);
    }
    free(input);
    if (status == EXIT_OK && ctl_json_out(&o)) {
        printf("{\"id\": \"%s\", \"partitions\": %s}\n", ctl_col(r, 0, "id"),
               ctl_col(r, 0, "total"));
    } else if (status == EXIT_OK) {
        printf("%s\n", ctl_col(r, 0, "id"));
        fprintf(stderr,
                "backfill of %s: %s %s partitions, %s at a time (cairnctl backfill status "
                "ID)\n",
                argv[0], ctl_col(r, 0, "total"), ctl_col(r, 0, "kind"), conc);
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

/* `backfill list`, newest first, with their progress (ctl_list runs it). */
static const struct ctl_column bf_cols[] = {
    {"ID", "id", -36},      {"WORKFLOW", "workflow_name", -24},
    {"STATE", "state", -9}, {"DONE", "done", 13},
    {"ETA", "eta", 0},
};
static const struct ctl_listing bf_listing =
    CTL_LISTING("SELECT " BACKFILL_COLS ", id, workflow_name, state, done || '/' || total AS"
                " done, coalesce(to_char(eta, 'HH24:MI:SS'), '-') AS eta"
                " FROM cairn.backfill_status ORDER BY created_at DESC LIMIT 1000",
                bf_cols, NULL);

/* status's text form. */
static void
bf_print_status(const PGresult *r, const char *id)
{
    printf("backfill    %s\nworkflow    %s, %s from %s to %s step %s, %s at a time\n"
           "state       %s\npartitions  %s done, %s running, %s failed, %s remaining of %s "
           "(checkpoint: %s started)\nrate        %s partitions a minute\neta         %s\n",
           id, ctl_col(r, 0, "workflow_name"), ctl_col(r, 0, "param"), ctl_col(r, 0, "range_from"),
           ctl_col(r, 0, "range_to"), ctl_col(r, 0, "step"), ctl_col(r, 0, "concurrency"),
           ctl_col(r, 0, "state"), ctl_col(r, 0, "done"), ctl_col(r, 0, "running"),
           ctl_col(r, 0, "failed"), ctl_col(r, 0, "remaining"), ctl_col(r, 0, "total"),
           ctl_col(r, 0, "next_index"), ctl_col(r, 0, "rate"), ctl_col(r, 0, "eta"));
    if (ctl_col(r, 0, "error")[0] != '\0') {
        printf("error       %s\n", ctl_col(r, 0, "error"));
    }
}

/* status, pause, resume, cancel, retry-failed: one backfill id each. */
static int
bf_one(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    const char *what = call->cmd->name, *sql;
    unsigned char id[16];
    PGresult *r = NULL;
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    if (!cn_uuid_parse(argv[0], id)) {
        fprintf(stderr, "%s: '%s' is not a backfill ID (a UUID)\n", o.prog, argv[0]);
        return EXIT_USAGE;
    }
    sql = strcmp(what, "pause") == 0    ? "SELECT cairn.backfill_pause($1) AS result"
          : strcmp(what, "resume") == 0 ? "SELECT cairn.backfill_resume($1) AS result"
          : strcmp(what, "cancel") == 0 ? "SELECT cairn.backfill_cancel($1) || ' partition(s) "
                                          "cancelled' AS result"
          : strcmp(what, "retry-failed") == 0
              ? "SELECT cairn.backfill_retry_failed($1) || ' partition(s) queued again' AS result"
              : "SELECT " BACKFILL_COLS ", state, done, failed, running, remaining, total,"
                " next_index, coalesce(round(per_minute::numeric, 2)::text, '-') AS rate,"
                " coalesce(to_char(eta, 'HH24:MI:SS'), '-') AS eta, coalesce(error, '') AS error,"
                " workflow_name, param, range_from, range_to, step, concurrency"
                " FROM cairn.backfill_status WHERE id = $1";
    if ((status = ctl_query_once(&o, sql, 1, (const char *const *) argv, &r)) != EXIT_OK) {
        return status;
    }
    if (PQntuples(r) == 0) {
        fprintf(stderr, "%s: no backfill %s\n", o.prog, argv[0]);
        status = EXIT_REJECTED;
    } else if (strcmp(what, "status") != 0) {
        if (ctl_json_out(&o)) {
            printf("{\"id\": \"%s\", \"result\": \"%s\"}\n", argv[0], ctl_col(r, 0, "result"));
        } else {
            printf("backfill %s: %s\n", argv[0], ctl_col(r, 0, "result"));
        }
    } else if (ctl_json_out(&o)) {
        printf("%s\n", ctl_col(r, 0, "json"));
    } else {
        bf_print_status(r, argv[0]);
    }
    PQclear(r);
    return status;
}

static const struct ctl_cmd cmds[] = {
    {"create",
     "WORKFLOW --param P --from A --to B --step S [--input JSON] [--concurrency N] "
     "[--version V] [--json]",
     "run WORKFLOW once per partition of the range A..B, its value in input P; prints the id",
     bf_create, NULL, NULL},
    {"list", "[--json]", "list the backfills, newest first, with their progress", ctl_list, NULL,
     &bf_listing},
    {"status", "ID [--json]", "show a backfill's progress: done, running, failed, rate, ETA",
     bf_one, NULL, NULL},
    {"pause", "ID [--json]", "pause a backfill: nothing new starts (the running partitions finish)",
     bf_one, NULL, NULL},
    {"resume", "ID [--json]", "resume a backfill from its checkpoint", bf_one, NULL, NULL},
    {"cancel", "ID [--json]", "cancel a backfill", bf_one, NULL, NULL},
    {"retry-failed", "ID [--json]", "run a backfill's failed partitions again", bf_one, NULL, NULL},
};
const struct ctl_table ctl_backfill_cmds = CTL_TABLE(cmds);
