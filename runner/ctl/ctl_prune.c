/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl prune` (retention by hand: workflows with a retention of their own are left to it,
 * unless named with --workflow) and `cairnctl retention ...` (workflows' own retention),
 * each through the SQL API of sql/0013_retention.sql. Pruning goes one batch per transaction
 * (cairn.prune_batch), so a large prune never holds locks or a snapshot for long and can be
 * stopped at any point: what was deleted stays deleted, the rest stays whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/clock.h"
#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

#define RETENTION_USAGE "retention (set WORKFLOW (D | forever) | unset WORKFLOW | list [--json])"

/* The instances a prune would delete, and their action results. */
static const char *const dry_sql =
    "WITH v AS (SELECT ri.instance_id FROM cairn.runner_instances ri"
    "  WHERE ri.status IN ('completed', 'failed', 'cancelled', 'timed_out')"
    "    AND ri.created_at < now() - $1::interval AND ri.completed_at < now() - $1::interval"
    "    AND NOT ri.parent_pending AND ($2::text IS NULL OR ri.workflow_name = $2)"
    "    AND ($2::text IS NOT NULL OR NOT EXISTS (SELECT 1 FROM cairn.workflow_retention wr"
    "         WHERE wr.tenant_id = ri.tenant_id AND wr.workflow_name = ri.workflow_name))"
    "    AND NOT cairn.prune_keeps(ri.instance_id))"
    " SELECT (SELECT count(*) FROM v), (SELECT count(*) FROM cairn.runner_actions_done d"
    "  WHERE d.instance_id IN (SELECT instance_id FROM v))";

int
ctl_cmd_prune(int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        {.flag = "older-than",
         .kind = CN_OPT_STR,
         .arg = "D",
         .help = "delete finished instances that finished more than D ago (30d, 12h, "
                 "'2 weeks'; required)"},
        {.flag = "workflow",
         .kind = CN_OPT_STR,
         .arg = "W",
         .help = "only instances of W (also when W has a retention of its own; without it, "
                 "such workflows are left out)"},
        {.flag = "dry-run", .kind = CN_OPT_BOOL, .help = "count what it would delete"},
        {.flag = "batch",
         .kind = CN_OPT_INT,
         .def = "500",
         .min = 1,
         .max = 100000,
         .help = "instances per transaction"},
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(
        "prune", "--older-than D [--workflow W] [--dry-run] [--batch N] [--json]", rows, 0);
    const char *params[4];
    char before[64] = "";
    long long instances = 0, actions = 0, batches = 0;
    char cutoff[64], batch[24];
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    int64_t t0 = cn_mono_ms();
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (cn_opts_str(&o, "older-than") == NULL) {
        fprintf(stderr, "cairnctl prune: --older-than D is required (30d, 12h, '2 weeks')\n");
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    /* The cutoff is fixed once, so that a long prune ends (what finishes meanwhile waits for
     * the next one), and checked by PostgreSQL, which reads the interval. */
    params[0] = cn_opts_str(&o, "older-than");
    params[1] = cn_opts_str(&o, "workflow");
    if ((rv = rn_db_exec(c,
                         "SELECT CASE WHEN $1::interval < interval '0' THEN NULL"
                         " ELSE (now() - $1::interval)::text END",
                         1, params, &r, &em)) != CN_OK) {
        fprintf(stderr, "cairnctl prune: --older-than '%s': %s\n", params[0], em.text);
        PQfinish(c);
        return EXIT_USAGE;
    }
    if (PQgetisnull(r, 0, 0)) {
        fprintf(stderr, "cairnctl prune: --older-than '%s' is negative\n", params[0]);
        PQclear(r);
        PQfinish(c);
        return EXIT_USAGE;
    }
    (void) snprintf(cutoff, sizeof(cutoff), "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    r = NULL;
    if (cn_opts_bool(&o, "dry-run")) {
        if ((rv = rn_db_exec(c, dry_sql, 2, params, &r, &em)) != CN_OK) {
            status = ctl_db_error(&o, rv, &em);
            PQfinish(c);
            return status;
        }
        instances = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        actions = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
        PQclear(r);
    } else {
        (void) snprintf(batch, sizeof(batch), "%lld", cn_opts_int(&o, "batch"));
        params[0] = cutoff;
        params[2] = batch;
        for (;;) {
            params[3] = before[0] != '\0' ? before : NULL; /* where the last batch stopped */
            if ((rv = rn_db_exec(c,
                                 "SELECT instances, actions, next_before FROM cairn.prune_batch("
                                 "$1::timestamptz, $2::text, '{}', $3::integer, $4::timestamptz,"
                                 " NULL, $2::text IS NULL)",
                                 4, params, &r, &em)) != CN_OK) {
                fprintf(stderr, "cairnctl prune: stopped after %lld instances: ", instances);
                status = ctl_db_error(&o, rv, &em);
                PQfinish(c);
                return status;
            }
            instances += strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            actions += strtoll(PQgetvalue(r, 0, 1), NULL, 10);
            batches++;
            (void) snprintf(before, sizeof(before), "%s",
                            PQgetisnull(r, 0, 2) ? "" : PQgetvalue(r, 0, 2));
            PQclear(r);
            r = NULL;
            if (before[0] == '\0') {
                break; /* the walk reached its end */
            }
            if (!ctl_json_out(&o) && batches % 100 == 0) {
                fprintf(stderr, "cairnctl prune: %lld instances so far\n", instances);
            }
        }
    }
    if (ctl_json_out(&o)) {
        printf("{\"dry_run\": %s, \"cutoff\": \"%s\", \"instances\": %lld, \"actions\": %lld}\n",
               cn_opts_bool(&o, "dry-run") ? "true" : "false", cutoff, instances, actions);
    } else if (cn_opts_bool(&o, "dry-run")) {
        printf("would delete %lld finished instance%s and %lld action result%s (finished before "
               "%s)\n",
               instances, instances == 1 ? "" : "s", actions, actions == 1 ? "" : "s", cutoff);
    } else {
        printf("deleted %lld finished instance%s and %lld action result%s (finished before %s) "
               "in %lld ms\n",
               instances, instances == 1 ? "" : "s", actions, actions == 1 ? "" : "s", cutoff,
               (long long) (cn_mono_ms() - t0));
    }
    PQfinish(c);
    return EXIT_OK;
}

static int
retention_set(const char *what, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB};
    struct cn_opts o =
        CTL_OPTS("retention", "set WORKFLOW (D | forever) | unset WORKFLOW", rows, 2);
    bool unset = strcmp(what, "unset") == 0;
    const char *params[3];
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != (unset ? 1u : 2u)) {
        fprintf(stderr, "usage: cairnctl %s\n", RETENTION_USAGE);
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    params[0] = argv[0];
    params[1] = unset || strcmp(argv[1], "forever") == 0 ? NULL : argv[1];
    params[2] = unset ? "true" : "false";
    rv = rn_db_exec(c, "SELECT cairn.retention_set($1, $2::interval, $3::boolean)", 3, params, &r,
                    &em);
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (unset) {
        printf("workflow %s: retention as the runners' CAIRN_RETENTION\n", argv[0]);
    } else {
        printf("workflow %s: finished instances %s%s\n", argv[0],
               params[1] != NULL ? "deleted after " : "kept for ever",
               params[1] != NULL ? params[1] : "");
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

static int
retention_list(int argc, char **argv)
{
    PGresult *r = NULL;
    bool json = false;
    int status, i;

    if ((status = ctl_list("retention list", argc, argv,
                           "SELECT json_build_object('workflow', workflow_name, 'keep',"
                           " keep::text)::text, workflow_name, coalesce(keep::text, 'forever')"
                           " FROM cairn.workflow_retention ORDER BY workflow_name",
                           &r, &json)) != EXIT_OK) {
        return status;
    }
    if (json) {
        ctl_print_json_rows(r, PQntuples(r), 0);
    } else {
        printf("%-32s  %s\n", "WORKFLOW", "KEEP");
        for (i = 0; i < PQntuples(r); i++) {
            printf("%-32s  %s\n", PQgetvalue(r, i, 1), PQgetvalue(r, i, 2));
        }
        printf("(other workflows: the runners' CAIRN_RETENTION)\n");
    }
    PQclear(r);
    return EXIT_OK;
}

int
ctl_cmd_retention(int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";

    if (strcmp(sub, "set") == 0 || strcmp(sub, "unset") == 0) {
        return retention_set(sub, argc - 1, argv + 1);
    }
    if (strcmp(sub, "list") == 0) {
        return retention_list(argc - 1, argv + 1);
    }
    fprintf(stderr, "usage: cairnctl %s\n", RETENTION_USAGE);
    return strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0 ? EXIT_OK : EXIT_USAGE;
}
