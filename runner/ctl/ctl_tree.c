/* SPDX-License-Identifier: MIT */
/*
 * Task trees (child workflows): `cairnctl tree ID`, and the parent and children that `inspect`
 * shows. A tree is walked in the database (a recursive query over runner_instances.parent_id,
 * which is indexed), in creation order, at most --limit rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/buf.h"
#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

/* The tree under $1, depth first in creation order: id, workflow, status, level, error type,
 * and the JSON row. Bounded by $2 rows and 10 000 levels (deeper than any depth limit). */
static const char *tree_sql =
    "WITH RECURSIVE t AS ("
    "  SELECT ri.instance_id, ri.workflow_name, ri.status, ri.parent_id, ri.detached,"
    "         ri.error->>'type' AS etype, 0 AS lvl,"
    "         ARRAY[to_char(ri.created_at, 'YYYYMMDDHH24MISSUS') || ri.instance_id::text] AS path"
    "    FROM cairn.runner_instances ri WHERE ri.instance_id = $1::uuid"
    "  UNION ALL"
    "  SELECT c.instance_id, c.workflow_name, c.status, c.parent_id, c.detached,"
    "         c.error->>'type', t.lvl + 1,"
    "         t.path || (to_char(c.created_at, 'YYYYMMDDHH24MISSUS') || c.instance_id::text)"
    "    FROM cairn.runner_instances c JOIN t ON c.parent_id = t.instance_id"
    "   WHERE t.lvl < 10000)"
    " SELECT instance_id, workflow_name, status, lvl, coalesce(etype, '') AS etype,"
    "        json_build_object('id', instance_id, 'workflow', workflow_name, 'status', status,"
    "                          'depth', lvl, 'parent', parent_id, 'started_by',"
    "                          CASE WHEN detached THEN 'start' WHEN lvl > 0 THEN 'run' END,"
    "                          'error_type', etype)::text AS json"
    "   FROM t ORDER BY path LIMIT $2::integer";

/* The whole tree's count by status (the listing may be cut by --limit). */
static void
print_tree_counts(PGconn *c, const char *const *params, int n, long long limit)
{
    struct cn_errmsg em;
    PGresult *s = NULL;

    if (rn_db_exec(c,
                   "SELECT string_agg(n || ' ' || status, ', ' ORDER BY status) AS counts FROM"
                   " (SELECT status, count(*) AS n FROM cairn.runner_instances WHERE"
                   " instance_id = $1::uuid OR root_id = coalesce((SELECT root_id FROM"
                   " cairn.runner_instances WHERE instance_id = $1::uuid), $1::uuid)"
                   " GROUP BY status) s",
                   1, params, &s, &em) == CN_OK) {
        printf("%d shown%s; in its tree: %s\n", n, n == limit ? " (--limit)" : "",
               ctl_col(s, 0, "counts"));
    }
    PQclear(s);
}

/* The tree under instance id: JSON rows, or a line each, indented by depth, and the counts. */
static int
print_tree(const struct cn_opts *o, PGconn *c, const char *id)
{
    PGresult *r = NULL;
    const char *params[2];
    char lim[24];
    int status, i, n;

    (void) snprintf(lim, sizeof(lim), "%lld", cn_opts_int(o, "limit"));
    params[0] = id;
    params[1] = lim;
    if ((status = ctl_query_found(o, c, tree_sql, 2, params, "instance", &r)) != EXIT_OK) {
        return status;
    }
    n = PQntuples(r);
    if (ctl_json_out(o)) {
        ctl_print_json_rows(r, "json");
        PQclear(r);
        return EXIT_OK;
    }
    for (i = 0; i < n; i++) {
        const char *etype = ctl_col(r, i, "etype");
        printf("%*s%s %s %s%s%s\n", 2 * (int) ctl_col_int(r, i, "lvl"), "",
               ctl_col(r, i, "instance_id"), ctl_col(r, i, "workflow_name"),
               ctl_col(r, i, "status"), etype[0] ? " " : "", etype);
    }
    print_tree_counts(c, params, n, cn_opts_int(o, "limit"));
    PQclear(r);
    return EXIT_OK;
}

int
ctl_cmd_tree(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_INT("limit", "1000", 1, 1000000, "N", "at most N instances"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    int status;

    if (!ctl_id_args(&o, argc, argv, &status)) {
        return status;
    }
    return ctl_with_db(&o, print_tree, argv[0]);
}

/* The children listed by inspect: id, workflow, status, how it was started, the call. */
static const char *children_sql =
    "SELECT instance_id, workflow_name, status, CASE WHEN detached THEN 'start' ELSE 'run' END"
    "       AS started_by, parent_exec_id, parent_attempt"
    "  FROM cairn.runner_instances WHERE parent_id = $1::uuid ORDER BY created_at, instance_id"
    " LIMIT 1001";

int
ctl_inspect_family(PGconn *c, const char *id, bool json, struct cn_buf *out)
{
    struct cn_errmsg em;
    PGresult *r = NULL, *p = NULL;
    const char *params[1] = {id};
    int i, n;
    bool ok = true;

    if (rn_db_exec(c,
                   "SELECT parent_id, coalesce(root_id, instance_id) AS root, depth FROM"
                   " cairn.runner_instances WHERE instance_id = $1::uuid AND parent_id IS NOT NULL",
                   1, params, &p, &em) != CN_OK ||
        rn_db_exec(c, children_sql, 1, params, &r, &em) != CN_OK) {
        PQclear(p);
        fprintf(stderr, "cairnctl inspect: %s\n", em.text);
        return EXIT_DB;
    }
    n = PQntuples(r);
    if (json) {
        ok &= cn_buf_printf(out, "\"parent\": ") == CN_OK;
        if (PQntuples(p) == 1) {
            ok &= cn_buf_printf(out, "{\"id\": \"%s\", \"root\": \"%s\", \"depth\": %s}",
                                ctl_col(p, 0, "parent_id"), ctl_col(p, 0, "root"),
                                ctl_col(p, 0, "depth")) == CN_OK;
        } else {
            ok &= cn_buf_puts(out, "null") == CN_OK;
        }
        ok &= cn_buf_puts(out, ", \"children\": [") == CN_OK;
        for (i = 0; i < n && i < 1000; i++) {
            ok &= cn_buf_printf(out,
                                "%s{\"id\": \"%s\", \"workflow\": \"%s\", \"status\": \"%s\", "
                                "\"started_by\": \"%s\", \"exec_id\": \"%s\", \"attempt\": %s}",
                                i ? ", " : "", ctl_col(r, i, "instance_id"),
                                ctl_col(r, i, "workflow_name"), ctl_col(r, i, "status"),
                                ctl_col(r, i, "started_by"), ctl_col(r, i, "parent_exec_id"),
                                ctl_col(r, i, "parent_attempt")) == CN_OK;
        }
        ok &= cn_buf_printf(out, "], \"children_truncated\": %s", n > 1000 ? "true" : "false") ==
              CN_OK;
    } else {
        if (PQntuples(p) == 1) {
            ok &= cn_buf_printf(out, "parent      %s (depth %s, root %s)\n",
                                ctl_col(p, 0, "parent_id"), ctl_col(p, 0, "depth"),
                                ctl_col(p, 0, "root")) == CN_OK;
        }
        if (n > 0) {
            ok &= cn_buf_printf(out, "children    %s%d (cairnctl tree %s shows them all)\n",
                                n > 1000 ? "more than " : "", n > 1000 ? 1000 : n, id) == CN_OK;
        }
        for (i = 0; i < n && i < 20; i++) {
            ok &= cn_buf_printf(out, "  %s %s %s (%s, exec %s attempt %s)\n",
                                ctl_col(r, i, "instance_id"), ctl_col(r, i, "workflow_name"),
                                ctl_col(r, i, "status"), ctl_col(r, i, "started_by"),
                                ctl_col(r, i, "parent_exec_id"),
                                ctl_col(r, i, "parent_attempt")) == CN_OK;
        }
        if (n > 20) {
            ok &= cn_buf_printf(out, "  ...\n") == CN_OK;
        }
    }
    PQclear(p);
    PQclear(r);
    return ok ? EXIT_OK : EXIT_USAGE;
}
