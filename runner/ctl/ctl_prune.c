/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl prune` (retention by hand: workflows with a retention of their own are left to it,
 * unless named with --workflow) and `cairnctl retention ...` (workflows' own retention),
 * each through the SQL API of sql/0013_retention.sql. Pruning goes one batch per transaction
 * (cairn.prune_batch), so a large prune never holds locks or a snapshot for long and can be
 * stopped at any point: what was deleted stays deleted, the rest stays whole. Without
 * --workflow it then deletes the keyed events past the same cutoff that no unfinished instance
 * can take (cairn.prune_events), one batch per transaction too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/clock.h"
#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

/* The instances a prune would delete, their action results and (without a workflow) the keyed
 * events: those no unfinished instance of their tenant was created before (cairn.prune_events). */
static const char *const dry_sql =
    "WITH v AS (SELECT ri.instance_id FROM cairn.runner_instances ri"
    "  WHERE ri.status IN ('completed', 'failed', 'cancelled', 'timed_out')"
    "    AND ri.created_at < now() - $1::interval AND ri.completed_at < now() - $1::interval"
    "    AND NOT ri.parent_pending AND ($2::text IS NULL OR ri.workflow_name = $2)"
    "    AND ($2::text IS NOT NULL OR NOT EXISTS (SELECT 1 FROM cairn.workflow_retention wr"
    "         WHERE wr.tenant_id = ri.tenant_id AND wr.workflow_name = ri.workflow_name))"
    "    AND NOT cairn.prune_keeps(ri.instance_id))"
    " SELECT (SELECT count(*) FROM v) AS instances, (SELECT count(*) FROM"
    "  cairn.runner_actions_done d WHERE d.instance_id IN (SELECT instance_id FROM v)) AS actions,"
    " CASE WHEN $2::text IS NULL THEN (SELECT count(*) FROM cairn.events e"
    "  WHERE e.published_at < now() - $1::interval AND NOT EXISTS (SELECT 1"
    "   FROM cairn.runner_instances ri WHERE ri.status IN ('queued', 'running')"
    "    AND ri.tenant_id = e.tenant_id AND ri.created_at <= e.published_at)) ELSE 0 END AS events";

/* What a prune deleted, or would delete. */
struct prune_count {
    long long instances, actions, events;
};

/* The cutoff, fixed once so that a long prune ends (what finishes meanwhile waits for the next
 * one), and checked by PostgreSQL, which reads the interval. */
static int
prune_cutoff(const struct cn_opts *o, PGconn *c, char *cutoff, size_t len)
{
    const char *params[1] = {cn_opts_str(o, "older-than")};
    struct cn_errmsg em;
    PGresult *r = NULL;
    const char *at;

    if (rn_db_exec(c,
                   "SELECT CASE WHEN $1::interval < interval '0' THEN NULL"
                   " ELSE (now() - $1::interval)::text END AS cutoff",
                   1, params, &r, &em) != CN_OK) {
        fprintf(stderr, "%s: --older-than '%s': %s\n", o->prog, params[0], em.text);
        return EXIT_USAGE;
    }
    if ((at = ctl_col_opt(r, 0, "cutoff")) == NULL) {
        fprintf(stderr, "%s: --older-than '%s' is negative\n", o->prog, params[0]);
        PQclear(r);
        return EXIT_USAGE;
    }
    (void) snprintf(cutoff, len, "%s", at);
    PQclear(r);
    return EXIT_OK;
}

/* --dry-run: what a prune would delete, counted. */
static int
prune_dry(const struct cn_opts *o, PGconn *c, struct prune_count *n)
{
    const char *params[2] = {cn_opts_str(o, "older-than"), cn_opts_str(o, "workflow")};
    PGresult *r = NULL;
    int status;

    if ((status = ctl_query(o, c, dry_sql, 2, params, &r)) != EXIT_OK) {
        return status;
    }
    n->instances = ctl_col_int(r, 0, "instances");
    n->actions = ctl_col_int(r, 0, "actions");
    n->events = ctl_col_int(r, 0, "events");
    PQclear(r);
    return EXIT_OK;
}

/* The keyed events before cutoff that nobody can take, one batch per transaction, until a batch
 * comes back short. */
static int
prune_events(const struct cn_opts *o, PGconn *c, const char *cutoff, const char *batch,
             struct prune_count *n)
{
    const char *params[2] = {cutoff, batch};
    long long got, want = strtoll(batch, NULL, 10);
    struct cn_errmsg em;
    PGresult *r = NULL;
    cn_err rv;

    do {
        if ((rv = rn_db_exec(c, "SELECT cairn.prune_events($1::timestamptz, $2::integer) AS events",
                             2, params, &r, &em)) != CN_OK) {
            fprintf(stderr, "%s: stopped after %lld events: ", o->prog, n->events);
            return ctl_db_error(o, rv, &em);
        }
        got = ctl_col_int(r, 0, "events");
        n->events += got;
        PQclear(r);
        r = NULL;
    } while (got >= want);
    return EXIT_OK;
}

/* One batch per transaction (cairn.prune_batch), each from where the last one stopped, until
 * the walk reaches its end; then the events (prune_events). */
static int
prune_batches(const struct cn_opts *o, PGconn *c, const char *cutoff, struct prune_count *n)
{
    const char *params[4] = {cutoff, cn_opts_str(o, "workflow"), NULL, NULL};
    char before[64] = "", batch[24];
    long long batches = 0;
    struct cn_errmsg em;
    PGresult *r = NULL;
    const char *next;
    cn_err rv;

    (void) snprintf(batch, sizeof(batch), "%lld", cn_opts_int(o, "batch"));
    params[2] = batch;
    for (;;) {
        params[3] = before[0] != '\0' ? before : NULL;
        if ((rv = rn_db_exec(c,
                             "SELECT instances, actions, next_before FROM cairn.prune_batch("
                             "$1::timestamptz, $2::text, '{}', $3::integer, $4::timestamptz,"
                             " NULL, $2::text IS NULL)",
                             4, params, &r, &em)) != CN_OK) {
            fprintf(stderr, "%s: stopped after %lld instances: ", o->prog, n->instances);
            return ctl_db_error(o, rv, &em);
        }
        n->instances += ctl_col_int(r, 0, "instances");
        n->actions += ctl_col_int(r, 0, "actions");
        batches++;
        next = ctl_col_opt(r, 0, "next_before");
        (void) snprintf(before, sizeof(before), "%s", next != NULL ? next : "");
        PQclear(r);
        r = NULL;
        if (before[0] == '\0') {
            break;
        }
        if (!ctl_json_out(o) && batches % 100 == 0) {
            fprintf(stderr, "%s: %lld instances so far\n", o->prog, n->instances);
        }
    }
    return cn_opts_str(o, "workflow") == NULL ? prune_events(o, c, cutoff, batch, n) : EXIT_OK;
}

int
ctl_cmd_prune(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("older-than", "D",
                    "delete finished instances that finished more than D ago (30d, 12h, "
                    "'2 weeks'; required), and keyed events older than D nobody can take"),
        CTL_OPT_STR("workflow", "W",
                    "only instances of W (also when W has a retention of its own; without it, "
                    "such workflows are left out)"),
        CTL_OPT_BOOL("dry-run", "count what it would delete"),
        CTL_OPT_INT("batch", "500", 1, 100000, NULL, "instances per transaction"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 0);
    struct prune_count n = {0, 0, 0};
    bool dry = false;
    char cutoff[64];
    PGconn *c = NULL;
    int64_t t0 = cn_mono_ms();
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (cn_opts_str(&o, "older-than") == NULL) {
        fprintf(stderr, "%s: --older-than D is required (30d, 12h, '2 weeks')\n", o.prog);
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) == EXIT_OK &&
        (status = prune_cutoff(&o, c, cutoff, sizeof(cutoff))) == EXIT_OK) {
        dry = cn_opts_bool(&o, "dry-run");
        status = dry ? prune_dry(&o, c, &n) : prune_batches(&o, c, cutoff, &n);
    }
    PQfinish(c);
    if (status != EXIT_OK) {
        return status;
    }
    if (ctl_json_out(&o)) {
        printf("{\"dry_run\": %s, \"cutoff\": \"%s\", \"instances\": %lld, \"actions\": %lld, "
               "\"events\": %lld}\n",
               dry ? "true" : "false", cutoff, n.instances, n.actions, n.events);
    } else if (dry) {
        printf("would delete %lld finished instance%s and %lld action result%s (finished before "
               "%s), %lld keyed event%s\n",
               n.instances, n.instances == 1 ? "" : "s", n.actions, n.actions == 1 ? "" : "s",
               cutoff, n.events, n.events == 1 ? "" : "s");
    } else {
        printf("deleted %lld finished instance%s and %lld action result%s (finished before %s), "
               "%lld keyed event%s in %lld ms\n",
               n.instances, n.instances == 1 ? "" : "s", n.actions, n.actions == 1 ? "" : "s",
               cutoff, n.events, n.events == 1 ? "" : "s", (long long) (cn_mono_ms() - t0));
    }
    return EXIT_OK;
}

/* set and unset: cairn.retention_set of the workflow (unset: back to the runners' setting). */
static int
retention_set(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB};
    bool unset = strcmp(call->cmd->name, "unset") == 0;
    struct cn_opts o = CTL_OPTS(call, rows, 2);
    const char *params[3];
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != (unset ? 1u : 2u)) {
        return ctl_usage(&o);
    }
    params[0] = argv[0];
    params[1] = unset || strcmp(argv[1], "forever") == 0 ? NULL : argv[1];
    params[2] = unset ? "true" : "false";
    if ((status = ctl_query_once(&o, "SELECT cairn.retention_set($1, $2::interval, $3::boolean)", 3,
                                 params, NULL)) != EXIT_OK) {
        return status;
    }
    if (unset) {
        printf("workflow %s: retention as the runners' CAIRN_RETENTION\n", argv[0]);
    } else {
        printf("workflow %s: finished instances %s%s\n", argv[0],
               params[1] != NULL ? "deleted after " : "kept for ever",
               params[1] != NULL ? params[1] : "");
    }
    return status;
}

/* `retention list`: the workflows with a retention of their own (ctl_list runs it). */
static const struct ctl_column retention_cols[] = {{"WORKFLOW", "workflow_name", -32},
                                                   {"KEEP", "keep", 0}};
static const struct ctl_listing retention_listing =
    CTL_LISTING("SELECT json_build_object('workflow', workflow_name, 'keep',"
                " keep::text)::text AS json, workflow_name, coalesce(keep::text, 'forever')"
                " AS keep FROM cairn.workflow_retention ORDER BY workflow_name",
                retention_cols, "(other workflows: the runners' CAIRN_RETENTION)");

static const struct ctl_cmd cmds[] = {
    {"set", "WORKFLOW (D | forever)",
     "delete WORKFLOW's finished instances D after they finished (forever: keep them)",
     retention_set, NULL, NULL},
    {"unset", "WORKFLOW", "WORKFLOW's retention as the runners' CAIRN_RETENTION again",
     retention_set, NULL, NULL},
    {"list", "[--json]", "list the workflows with a retention of their own", ctl_list, NULL,
     &retention_listing},
};
const struct ctl_table ctl_retention_cmds = CTL_TABLE(cmds);
