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
    "'schedule_slot', ri.schedule_slot)::text AS json"
#define INSTANCE_FROM                                                             \
    " FROM cairn.runner_instances ri JOIN cairn.workflow_versions wv ON wv.id = " \
    "ri.workflow_version_id LEFT JOIN cairn.queued_instances q ON q.instance_id = ri.instance_id "

/* status's text form. */
static void
print_status(const PGresult *r)
{
    static const struct {
        const char *label, *col;
    } times[] = {
        {"started ", "started_at"}, {"finished", "completed_at"}, {"due     ", "scheduled_at"}};
    size_t i;

    printf("instance   %s\nworkflow   %s (version %s)\nstatus     %s\ncreated    %s\n",
           ctl_col(r, 0, "instance_id"), ctl_col(r, 0, "workflow_name"),
           ctl_col(r, 0, "workflow_version"), ctl_col(r, 0, "status"), ctl_col(r, 0, "created_at"));
    for (i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        if (ctl_col_opt(r, 0, times[i].col) != NULL) {
            printf("%s   %s\n", times[i].label, ctl_col(r, 0, times[i].col));
        }
    }
    if (ctl_col_opt(r, 0, "error_type") != NULL) {
        printf("error      %s: %s\n", ctl_col(r, 0, "error_type"), ctl_col(r, 0, "error_message"));
    }
}

/* status of instance id: its row as JSON, or print_status. */
static int
show_status(const struct cn_opts *o, PGconn *c, const char *id)
{
    PGresult *r = NULL;
    int status;

    if ((status = ctl_query_found(o, c,
                                  "SELECT " INSTANCE_JSON ", ri.instance_id, ri.workflow_name, "
                                  "wv.workflow_version, ri.status, ri.created_at, ri.started_at, "
                                  "ri.completed_at, q.scheduled_at, ri.error->>'type' AS "
                                  "error_type, ri.error->>'message' AS error_message " INSTANCE_FROM
                                  "WHERE ri.instance_id = $1",
                                  1, &id, "instance", &r)) != EXIT_OK) {
        return status;
    }
    if (ctl_json_out(o)) {
        printf("%s\n", ctl_col(r, 0, "json"));
    } else {
        print_status(r);
    }
    PQclear(r);
    return EXIT_OK;
}

int
ctl_cmd_status(const struct ctl_call *call, int argc, char **argv)
{
    return ctl_instance_cmd(call, argc, argv, show_status);
}

int
ctl_print_result(const struct cn_opts *o, PGconn *c, const char *id)
{
    const char *params[1] = {id};
    PGresult *r = NULL;
    const char *st;
    enum rn_outcome outcome;
    int status;

    if ((status = ctl_query_found(o, c,
                                  "SELECT ri.status, ri.result::text AS result, ri.error::text AS"
                                  " error, json_build_object('id', ri.instance_id, 'status',"
                                  " ri.status, 'result', ri.result, 'error', ri.error)::text AS"
                                  " json FROM cairn.runner_instances ri WHERE ri.instance_id = $1",
                                  1, params, "instance", &r)) != EXIT_OK) {
        return status;
    }
    st = ctl_col(r, 0, "status");
    if (!rn_outcome_parse(st, &outcome)) {
        outcome = RN_RUNNING; /* queued: not finished either */
    }
    if (outcome == RN_COMPLETED) {
        printf("%s\n", ctl_col(r, 0, ctl_json_out(o) ? "json" : "result"));
    } else if (outcome == RN_FAILED || outcome == RN_CANCELLED || outcome == RN_TIMED_OUT) {
        if (ctl_json_out(o)) {
            printf("%s\n", ctl_col(r, 0, "json"));
        } else {
            const char *err = ctl_col_opt(r, 0, "error");
            fprintf(stderr, "%s %s: %s\n", id, st, err != NULL ? err : "(no error recorded)");
        }
        status = EXIT_FAILED;
    } else {
        if (ctl_json_out(o)) {
            printf("%s\n", ctl_col(r, 0, "json"));
        } else {
            fprintf(stderr, "%s has not finished (status %s)\n", id, st);
        }
        status = EXIT_PENDING;
    }
    PQclear(r);
    return status;
}

int
ctl_cmd_result(const struct ctl_call *call, int argc, char **argv)
{
    return ctl_instance_cmd(call, argc, argv, ctl_print_result);
}

/* --status S: a status the schema knows; else says which there are. */
static bool
status_ok(const struct cn_opts *o, const char *want)
{
    size_t k;

    if (want == NULL || rn_status_valid(want)) {
        return true;
    }
    fprintf(stderr, "%s: --status must be %s", o->prog, RN_STATUS_QUEUED);
    for (k = 0; k < RN_OUTCOME_COUNT_; k++) {
        fprintf(stderr, "%s%s", k + 1 < RN_OUTCOME_COUNT_ ? ", " : " or ",
                rn_outcome_name((enum rn_outcome) k));
    }
    fputc('\n', stderr);
    return false;
}

int
ctl_cmd_list(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("status", "S", "queued, running, completed, failed or cancelled"),
        CTL_OPT_STR("workflow", "W", "this workflow's only"),
        CTL_OPT_STR("parent", "ID", "the child workflows of this instance only"),
        CTL_OPT_STR("schedule", "NAME", "the instances schedule NAME started only"),
        CTL_OPT_INT("limit", "20", 1, 100000, "N", "at most N, newest first"),
        CTL_OPT_JSON,
    };
    static const struct ctl_column cols[] = {{"ID", "instance_id", -36},
                                             {"WORKFLOW", "workflow_name", -24},
                                             {"STATUS", "status", -9},
                                             {"CREATED", "created", 0}};
    static const struct ctl_listing instances =
        CTL_LISTING("SELECT " INSTANCE_JSON ", ri.instance_id, ri.workflow_name, ri.status, "
                    "ri.created_at::text || coalesce('  schedule ' || ri.schedule_name, '') AS "
                    "created " INSTANCE_FROM "WHERE ($1::text IS NULL OR ri.status = $1) AND "
                    "($2::text IS NULL OR ri.workflow_name = $2) AND "
                    "($4::uuid IS NULL OR ri.parent_id = $4::uuid) AND "
                    "($5::text IS NULL OR ri.schedule_name = $5) "
                    "ORDER BY ri.created_at DESC LIMIT $3::integer",
                    cols, NULL);
    struct cn_opts o = CTL_OPTS(call, rows, 0);
    const char *params[5];
    char lim[24];
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (!status_ok(&o, cn_opts_str(&o, "status")) ||
        (cn_opts_str(&o, "parent") != NULL && !ctl_check_uuid(&o, cn_opts_str(&o, "parent")))) {
        return EXIT_USAGE;
    }
    (void) snprintf(lim, sizeof(lim), "%lld", cn_opts_int(&o, "limit"));
    params[0] = cn_opts_str(&o, "status");
    params[1] = cn_opts_str(&o, "workflow");
    params[2] = lim;
    params[3] = cn_opts_str(&o, "parent");
    params[4] = cn_opts_str(&o, "schedule");
    return ctl_print_list(&o, &instances, 5, params);
}
