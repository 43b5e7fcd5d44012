/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl status`, `result` and `list`: an instance's status and outcome, its result, and
 * instances by workflow and status.
 */

#include "runner/ctl/ctl.h"
#include "runner/exec/exec.h"
#include "runner/store/db.h"

/* ---- status, result, list ----------------------------------------------------------------- */

/* One instance as a JSON object (text), built by the database so that jsonb values stay exact. */
#define INSTANCE_JSON                                                                          \
    "json_build_object('id', ri.instance_id, 'workflow', ri.workflow_name, 'version', "        \
    "wv.workflow_version, 'status', ri.status, 'priority', ri.priority, 'created_at', "        \
    "ri.created_at, 'started_at', ri.started_at, 'completed_at', ri.completed_at, "            \
    "'scheduled_at', q.scheduled_at, 'leased', coalesce(q.lock_expires_at > now(), false), "   \
    "'idempotency_key', ri.idempotency_key, 'input', ri.input, 'result', ri.result, 'error', " \
    "ri.error, 'parent', ri.parent_id, 'root', ri.root_id, 'schedule', ri.schedule_name, "     \
    "'schedule_slot', ri.schedule_slot)::text"
#define INSTANCE_FROM                                                             \
    " FROM cairn.runner_instances ri JOIN cairn.workflow_versions wv ON wv.id = " \
    "ri.workflow_version_id LEFT JOIN cairn.queued_instances q ON q.instance_id = ri.instance_id "

int
ctl_cmd_status(int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    struct cn_opts o = CTL_OPTS("status", "ID [--json]", rows, 1);
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    const char *params[1];
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (!ctl_check_uuid("status", o.nargs > 0 ? argv[0] : NULL)) {
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    params[0] = argv[0];
    rv = rn_db_exec(c,
                    "SELECT " INSTANCE_JSON ", ri.instance_id, ri.workflow_name, "
                    "wv.workflow_version, ri.status, ri.created_at, ri.started_at, "
                    "ri.completed_at, q.scheduled_at, ri.error->>'type', ri.error->>'message'"
                    " " INSTANCE_FROM "WHERE ri.instance_id = $1",
                    1, params, &r, &em);
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (PQntuples(r) == 0) {
        fprintf(stderr, "cairnctl status: no instance %s\n", argv[0]);
        status = EXIT_REJECTED;
    } else if (ctl_json_out(&o)) {
        printf("%s\n", PQgetvalue(r, 0, 0));
    } else {
        printf("instance   %s\nworkflow   %s (version %s)\nstatus     %s\ncreated    %s\n",
               PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3), PQgetvalue(r, 0, 4),
               PQgetvalue(r, 0, 5));
        if (!PQgetisnull(r, 0, 6)) {
            printf("started    %s\n", PQgetvalue(r, 0, 6));
        }
        if (!PQgetisnull(r, 0, 7)) {
            printf("finished   %s\n", PQgetvalue(r, 0, 7));
        }
        if (!PQgetisnull(r, 0, 8)) {
            printf("due        %s\n", PQgetvalue(r, 0, 8));
        }
        if (!PQgetisnull(r, 0, 9)) {
            printf("error      %s: %s\n", PQgetvalue(r, 0, 9), PQgetvalue(r, 0, 10));
        }
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

int
ctl_print_result(const struct cn_opts *o, PGconn *c, const char *id)
{
    const char *params[1] = {id};
    struct cn_errmsg em;
    PGresult *r = NULL;
    const char *st;
    enum rn_outcome outcome;
    int status = EXIT_OK;
    cn_err rv;

    rv = rn_db_exec(c,
                    "SELECT ri.status, ri.result::text, ri.error::text, "
                    "json_build_object('id', ri.instance_id, 'status', ri.status, 'result', "
                    "ri.result, 'error', ri.error)::text "
                    "FROM cairn.runner_instances ri WHERE ri.instance_id = $1",
                    1, params, &r, &em);
    if (rv != CN_OK) {
        return ctl_db_error(o, rv, &em);
    }
    if (PQntuples(r) == 0) {
        fprintf(stderr, "%s: no instance %s\n", o->prog, id);
        PQclear(r);
        return EXIT_REJECTED;
    }
    st = PQgetvalue(r, 0, 0);
    if (!rn_outcome_parse(st, &outcome)) {
        outcome = RN_RUNNING; /* queued: not finished either */
    }
    if (outcome == RN_COMPLETED) {
        printf("%s\n", ctl_json_out(o) ? PQgetvalue(r, 0, 3) : PQgetvalue(r, 0, 1));
    } else if (outcome == RN_FAILED || outcome == RN_CANCELLED || outcome == RN_TIMED_OUT) {
        if (ctl_json_out(o)) {
            printf("%s\n", PQgetvalue(r, 0, 3));
        } else {
            fprintf(stderr, "%s %s: %s\n", id, st,
                    PQgetisnull(r, 0, 2) ? "(no error recorded)" : PQgetvalue(r, 0, 2));
        }
        status = EXIT_FAILED;
    } else {
        if (ctl_json_out(o)) {
            printf("%s\n", PQgetvalue(r, 0, 3));
        } else {
            fprintf(stderr, "%s has not finished (status %s)\n", id, st);
        }
        status = EXIT_PENDING;
    }
    PQclear(r);
    return status;
}

int
ctl_cmd_result(int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    struct cn_opts o = CTL_OPTS("result", "ID [--json]", rows, 1);
    PGconn *c = NULL;
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (!ctl_check_uuid("result", o.nargs > 0 ? argv[0] : NULL)) {
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    status = ctl_print_result(&o, c, argv[0]);
    PQfinish(c);
    return status;
}

int
ctl_cmd_list(int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        {.flag = "status",
         .kind = CN_OPT_STR,
         .arg = "S",
         .help = "queued, running, completed, failed or cancelled"},
        {.flag = "workflow", .kind = CN_OPT_STR, .arg = "W", .help = "this workflow's only"},
        {.flag = "parent",
         .kind = CN_OPT_STR,
         .arg = "ID",
         .help = "the child workflows of this instance only"},
        {.flag = "schedule",
         .kind = CN_OPT_STR,
         .arg = "NAME",
         .help = "the instances schedule NAME started only"},
        {.flag = "limit",
         .kind = CN_OPT_INT,
         .def = "20",
         .min = 1,
         .max = 100000,
         .arg = "N",
         .help = "at most N, newest first"},
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(
        "list", "[--status S] [--workflow W] [--parent ID] [--schedule NAME] [--limit N] [--json]",
        rows, 0);
    const char *want;
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    const char *params[5];
    char lim[24];
    int status, i, n;
    size_t k;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if ((want = cn_opts_str(&o, "status")) != NULL && !rn_status_valid(want)) {
        fprintf(stderr, "cairnctl list: --status must be %s", RN_STATUS_QUEUED);
        for (k = 0; k < RN_OUTCOME_COUNT_; k++) {
            fprintf(stderr, "%s%s", k + 1 < RN_OUTCOME_COUNT_ ? ", " : " or ",
                    rn_outcome_name((enum rn_outcome) k));
        }
        fputc('\n', stderr);
        return EXIT_USAGE;
    }
    if (cn_opts_str(&o, "parent") != NULL && !ctl_check_uuid("list", cn_opts_str(&o, "parent"))) {
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    (void) snprintf(lim, sizeof(lim), "%lld", cn_opts_int(&o, "limit"));
    params[0] = want;
    params[1] = cn_opts_str(&o, "workflow");
    params[2] = lim;
    params[3] = cn_opts_str(&o, "parent");
    params[4] = cn_opts_str(&o, "schedule");
    rv = rn_db_exec(c,
                    "SELECT " INSTANCE_JSON ", ri.instance_id, ri.workflow_name, ri.status, "
                    "ri.created_at, coalesce('  schedule ' || ri.schedule_name, '') " INSTANCE_FROM
                    "WHERE ($1::text IS NULL OR ri.status = $1) AND "
                    "($2::text IS NULL OR ri.workflow_name = $2) AND "
                    "($4::uuid IS NULL OR ri.parent_id = $4::uuid) AND "
                    "($5::text IS NULL OR ri.schedule_name = $5) "
                    "ORDER BY ri.created_at DESC LIMIT $3::integer",
                    5, params, &r, &em);
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
        PQfinish(c);
        return status;
    }
    n = PQntuples(r);
    if (ctl_json_out(&o)) {
        ctl_print_json_rows(r, n, 0);
    } else {
        printf("%-36s  %-24s  %-9s  %s\n", "ID", "WORKFLOW", "STATUS", "CREATED");
        for (i = 0; i < n; i++) {
            printf("%-36s  %-24s  %-9s  %s%s\n", PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                   PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5));
        }
    }
    PQclear(r);
    PQfinish(c);
    return EXIT_OK;
}
