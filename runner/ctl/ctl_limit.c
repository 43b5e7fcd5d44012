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

#define LIMIT_USAGE \
    "limit (set WORKFLOW (N | none) [--per-key M] | delete WORKFLOW | list [--json])"

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
                        " ELSE $2::integer END, $3::integer)",
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
        *marked = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    }
    PQclear(r);
    return EXIT_OK;
}

/* Prints a workflow's limits as they now stand. */
static int
limit_show(const struct cn_opts *o, PGconn *c, const char *workflow)
{
    const char *params[1] = {workflow};
    struct cn_errmsg em;
    PGresult *r = NULL;
    cn_err rv;

    if ((rv = rn_db_exec(c,
                         "SELECT coalesce('at most ' || max_running || ' running',"
                         " 'no limit on the whole workflow'), max_per_key, running, waiting"
                         " FROM cairn.limit_status WHERE workflow_name = $1",
                         1, params, &r, &em)) != CN_OK) {
        return ctl_db_error(o, rv, &em);
    }
    if (PQntuples(r) == 1) {
        printf("workflow %s: %s, at most %s per concurrency key (now %s running, %s waiting)\n",
               workflow, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2),
               PQgetvalue(r, 0, 3));
    }
    PQclear(r);
    return EXIT_OK;
}

static int
limit_set(int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        {.flag = "per-key",
         .kind = CN_OPT_INT,
         .min = 1,
         .max = 1000000,
         .arg = "M",
         .help = "instances with the same --concurrency-key that may run at once (default: "
                 "unchanged, 1 at first)"},
    };
    struct cn_opts o = CTL_OPTS("limit set", "WORKFLOW (N | none) [--per-key M]", rows, 2);
    const char *max = NULL;
    char *end = NULL;
    long long marked = 0, n;
    PGconn *c = NULL;
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 2) {
        fprintf(stderr, "usage: cairnctl limit set WORKFLOW (N | none) [--per-key M]\n");
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "none") != 0) {
        n = strtoll(argv[1], &end, 10);
        if (end == argv[1] || *end != '\0' || n < 1 || n > 1000000) {
            fprintf(stderr,
                    "cairnctl limit set: the running limit must be an integer in 1..1000000 "
                    "or none, got '%s'\n",
                    argv[1]);
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

static int
limit_list(int argc, char **argv)
{
    PGresult *r = NULL;
    bool json = false;
    int status, i;

    if ((status = ctl_list("limit list", argc, argv,
                           "SELECT json_build_object('workflow', workflow_name, 'max_running',"
                           " max_running, 'max_per_key', max_per_key, 'running', running,"
                           " 'waiting', waiting)::text, workflow_name, coalesce(max_running::text,"
                           " '-'), max_per_key, running, waiting"
                           " FROM cairn.limit_status ORDER BY workflow_name",
                           &r, &json)) != EXIT_OK) {
        return status;
    }
    if (json) {
        ctl_print_json_rows(r, PQntuples(r), 0);
    } else {
        printf("%-32s  %11s  %7s  %7s  %7s\n", "WORKFLOW", "MAX_RUNNING", "PER_KEY", "RUNNING",
               "WAITING");
        for (i = 0; i < PQntuples(r); i++) {
            printf("%-32s  %11s  %7s  %7s  %7s\n", PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                   PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5));
        }
    }
    PQclear(r);
    return EXIT_OK;
}

/* Removes a workflow's limits row, so that claims skip cairn.claim_limited again once no workflow
 * has one. */
static int
limit_delete(int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB};
    struct cn_opts o = CTL_OPTS("limit delete", "WORKFLOW", rows, 1);
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 1) {
        fprintf(stderr, "usage: %s\n", o.usage);
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    rv = rn_db_exec(c, "SELECT cairn.limit_delete($1)", 1, (const char *const *) argv, &r, &em);
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (strcmp(PQgetvalue(r, 0, 0), "t") == 0) {
        printf("workflow %s: no limits\n", argv[0]);
    } else {
        printf("workflow %s had no limits\n", argv[0]);
        status = EXIT_NOOP;
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

int
ctl_cmd_limit(int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";

    if (strcmp(sub, "set") == 0) {
        return limit_set(argc - 1, argv + 1);
    }
    if (strcmp(sub, "list") == 0) {
        return limit_list(argc - 1, argv + 1);
    }
    if (strcmp(sub, "delete") == 0) {
        return limit_delete(argc - 1, argv + 1);
    }
    fprintf(stderr, "usage: cairnctl %s\n", LIMIT_USAGE);
    return strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0 ? EXIT_OK : EXIT_USAGE;
}
