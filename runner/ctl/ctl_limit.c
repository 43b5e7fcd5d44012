/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl limit ...`: setting and listing workflows' concurrency limits, each a call of the
 * SQL API (sql/0012_concurrency_limits.sql: cairn.limit_set, the view cairn.limit_status).
 * `cairnctl register --max-running N --max-per-key M` goes through ctl_limit_apply too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

/* cairn.limit_set waits at most 500 ms for a row a runner is writing, then fails with 55P03
 * rather than risk a deadlock with that write; a few tries get past a busy moment. */
#define LIMIT_TRIES 5

int
ctl_limit_apply(const struct cn_opts *o, PGconn *c, const char *workflow, const char *max_running,
                bool keep_running, const char *max_per_key, long long *marked)
{
    const char *params[4] = {workflow, max_running, max_per_key, keep_running ? "t" : "f"};
    struct cn_errmsg em;
    PGresult *r = NULL;
    cn_err rv = CN_OK;
    int i;

    for (i = 0; i < LIMIT_TRIES; i++) {
        rv = rn_db_exec(c,
                        "SELECT cairn.limit_set($1, CASE WHEN $4::boolean THEN (SELECT"
                        " max_running FROM cairn.workflow_limits WHERE workflow_name = $1"
                        " AND tenant_id = cairn.current_tenant())"
                        " ELSE $2::integer END, $3::integer) AS marked",
                        4, params, &r, &em);
        if (rv != CN_BUSY) {
            break;
        }
        (void) usleep(200000);
    }
    if (rv != CN_OK) {
        return ctl_db_error(o, rv, &em);
    }
    if (marked != NULL) {
        *marked = ctl_col_int(r, 0, "marked");
    }
    PQclear(r);
    return EXIT_OK;
}

/* Prints a workflow's limits as they now stand. */
static int
limit_show(const struct cn_opts *o, PGconn *c, const char *workflow)
{
    const char *params[1] = {workflow};
    PGresult *r = NULL;
    int status;

    if ((status = ctl_query(o, c,
                            "SELECT coalesce('at most ' || max_running || ' running',"
                            " 'no limit on the whole workflow') AS whole, max_per_key, running,"
                            " waiting FROM cairn.limit_status WHERE workflow_name = $1",
                            1, params, &r)) != EXIT_OK) {
        return status;
    }
    if (PQntuples(r) == 1) {
        printf("workflow %s: %s, at most %s per concurrency key (now %s running, %s waiting)\n",
               workflow, ctl_col(r, 0, "whole"), ctl_col(r, 0, "max_per_key"),
               ctl_col(r, 0, "running"), ctl_col(r, 0, "waiting"));
    }
    PQclear(r);
    return EXIT_OK;
}

static int
limit_set(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_INT("per-key", NULL, 1, 1000000, "M",
                    "instances with the same --concurrency-key that may run at once (default: "
                    "unchanged, 1 at first)"),
    };
    struct cn_opts o = CTL_OPTS(call, rows, 2);
    const char *max = NULL;
    char *end = NULL;
    long long marked = 0, n;
    PGconn *c = NULL;
    int status;

    if (!ctl_args(&o, argc, argv, 2, &status)) {
        return status;
    }
    if (strcmp(argv[1], "none") != 0) {
        n = strtoll(argv[1], &end, 10);
        if (end == argv[1] || *end != '\0' || n < 1 || n > 1000000) {
            fprintf(stderr,
                    "%s: the running limit must be an integer in 1..1000000 or none, got '%s'\n",
                    o.prog, argv[1]);
            return EXIT_USAGE;
        }
        max = argv[1];
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    status = ctl_limit_apply(&o, c, argv[0], max, false, cn_opts_str(&o, "per-key"), &marked);
    if (status == EXIT_OK) {
        status = limit_show(&o, c, argv[0]);
    }
    if (status == EXIT_OK && marked > 0) {
        printf("%lld unfinished instance%s re-marked\n", marked, marked == 1 ? "" : "s");
    }
    PQfinish(c);
    return status;
}

/* `limit list`: each limited workflow with its running and waiting counts (ctl_list runs it). */
static const struct ctl_column limit_cols[] = {
    {"WORKFLOW", "workflow_name", -32}, {"MAX_RUNNING", "max_running", 11},
    {"PER_KEY", "max_per_key", 7},      {"RUNNING", "running", 7},
    {"WAITING", "waiting", 7},
};
static const struct ctl_listing limit_listing =
    CTL_LISTING("SELECT json_build_object('workflow', workflow_name, 'max_running',"
                " max_running, 'max_per_key', max_per_key, 'running', running,"
                " 'waiting', waiting)::text AS json, workflow_name, coalesce(max_running::text,"
                " '-') AS max_running, max_per_key, running, waiting"
                " FROM cairn.limit_status ORDER BY workflow_name",
                limit_cols, NULL);

/* Removes a workflow's limits row, so that claims skip cairn.claim_limited again once no workflow
 * has one. */
static int
limit_delete(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB};
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    PGresult *r = NULL;
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status) ||
        (status = ctl_query_once(&o, "SELECT cairn.limit_delete($1) AS deleted", 1,
                                 (const char *const *) argv, &r)) != EXIT_OK) {
        return status;
    }
    if (ctl_col_true(r, 0, "deleted")) {
        printf("workflow %s: no limits\n", argv[0]);
    } else {
        printf("workflow %s had no limits\n", argv[0]);
        status = EXIT_NOOP;
    }
    PQclear(r);
    return status;
}

static const struct ctl_cmd cmds[] = {
    {"set", "WORKFLOW (N | none) [--per-key M]",
     "at most N instances of WORKFLOW run at once (none: no limit), M per concurrency key",
     limit_set, NULL, NULL},
    {"delete", "WORKFLOW", "remove a workflow's limits", limit_delete, NULL, NULL},
    {"list", "[--json]", "list the limited workflows: their limits, running and waiting counts",
     ctl_list, NULL, &limit_listing},
};
const struct ctl_table ctl_limit_cmds = CTL_TABLE(cmds);
