/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl tenant create/list/quota`, over the SQL API of sql/0017_tenants.sql. A tenant is a
 * row of cairn.tenants and a role, cairn_tenant_NAME, that logins are granted to act as it
 * (--tenant, CAIRN_TENANT: ctl_db_open). Making a tenant makes a role, so `create` is the schema
 * owner's (or another role's that may create roles); `list` shows a tenant only its own row.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

/* The quota's range: what a running limit allows (cairnctl limit set). */
#define QUOTA_MAX 1000000

static bool
name_arg(const struct cn_opts *o, const char *name)
{
    if (ctl_tenant_name_ok(name)) {
        return true;
    }
    fprintf(stderr,
            "%s: \"%s\" is not a tenant name (a lowercase letter, then at most 47 of "
            "a-z, 0-9 and _)\n",
            o->prog, name);
    return false;
}

/* A statement of `tenant create`, saying what a permission failure means. */
static int
create_query(const struct cn_opts *o, PGconn *c, const char *sql, int n, const char *const *params,
             PGresult **r)
{
    struct cn_errmsg em;
    int status;
    cn_err rv;

    if ((rv = rn_db_exec(c, sql, n, params, r, &em)) == CN_OK) {
        return EXIT_OK;
    }
    status = ctl_db_error(o, rv, &em);
    if (strstr(em.text, "permission denied") != NULL) {
        fprintf(stderr,
                "%s: making a tenant makes a role: run it as the schema owner, without "
                "--tenant\n",
                o->prog);
    }
    return status;
}

/* Makes tenant name (with --max-running, its quota) and says what role a login is granted. */
static int
create_tenant(const struct cn_opts *o, PGconn *c, const char *name)
{
    const char *params[2] = {name, cn_opts_str(o, "max-running")}, *role;
    PGresult *r = NULL;
    int status;

    /* Asked first so that a second create says so plainly instead of as a key violation; a
     * create racing it still fails on the key. */
    status = create_query(o, c, "SELECT 1 FROM cairn.tenants WHERE name = $1", 1, params, &r);
    if (status == EXIT_OK && PQntuples(r) > 0) {
        fprintf(stderr,
                "%s: tenant \"%s\" exists already (cairnctl tenant quota changes its quota)\n",
                o->prog, name);
        status = EXIT_NOOP;
    }
    PQclear(r);
    r = NULL;
    if (status == EXIT_OK) {
        status = create_query(o, c, "SELECT cairn.tenant_create($1, $2::integer) AS role", 2,
                              params, &r);
    }
    if (status == EXIT_OK) {
        role = ctl_col(r, 0, "role");
        if (ctl_json_out(o)) {
            printf("{\"tenant\": \"%s\", \"role\": \"%s\", \"max_running\": %s}\n", name, role,
                   params[1] != NULL ? params[1] : "null");
        } else {
            printf("tenant %s: role %s%s%s\n", name, role,
                   params[1] != NULL ? ", at most running at once: " : "",
                   params[1] != NULL ? params[1] : "");
            printf("hint: GRANT %s TO <login>; lets that login act as it (cairnctl CMD --tenant "
                   "%s)\n",
                   role, name);
        }
    }
    PQclear(r);
    return status;
}

static int
tenant_create(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_JSON,
        CTL_OPT_INT("max-running", NULL, 1, QUOTA_MAX, "N",
                    "at most N of the tenant's instances running at once (default: no quota)"),
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    if (!name_arg(&o, argv[0])) {
        return EXIT_USAGE;
    }
    return ctl_with_db(&o, create_tenant, argv[0]);
}

/* `tenant list`: row security shows a tenant only its own row (ctl_list runs it). */
static const struct ctl_column tenant_cols[] = {
    {"NAME", "name", -24}, {"MAX_RUNNING", "max_running", 11}, {"CREATED_AT", "created_at", 0}};
static const struct ctl_listing tenant_listing =
    CTL_LISTING("SELECT json_build_object('name', name, 'max_running', max_running,"
                " 'created_at', created_at)::text AS json, name, coalesce(max_running::text,"
                " '-') AS max_running, created_at FROM cairn.tenants ORDER BY name",
                tenant_cols, NULL);

static int
tenant_quota(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB};
    struct cn_opts o = CTL_OPTS(call, rows, 2);
    const char *params[2];
    PGresult *r = NULL;
    char *end = NULL;
    long long n;
    int status;

    if (!ctl_args(&o, argc, argv, 2, &status)) {
        return status;
    }
    if (!name_arg(&o, argv[0])) {
        return EXIT_USAGE;
    }
    params[0] = argv[0];
    params[1] = NULL;
    if (strcmp(argv[1], "none") != 0) {
        n = strtoll(argv[1], &end, 10);
        if (end == argv[1] || *end != '\0' || n < 1 || n > QUOTA_MAX) {
            fprintf(stderr, "%s: the quota must be an integer in 1..%d or none, got '%s'\n", o.prog,
                    QUOTA_MAX, argv[1]);
            return EXIT_USAGE;
        }
        params[1] = argv[1];
    }
    if ((status = ctl_query_once(&o, "SELECT cairn.tenant_quota($1, $2::integer) AS found", 2,
                                 params, &r)) != EXIT_OK) {
        return status;
    }
    if (!ctl_col_true(r, 0, "found")) {
        fprintf(stderr, "%s: no tenant \"%s\" (cairnctl tenant list shows them)\n", o.prog,
                argv[0]);
        status = EXIT_REJECTED;
    } else if (params[1] != NULL) {
        printf("tenant %s: at most %s instances running at once\n", argv[0], params[1]);
    } else {
        printf("tenant %s: no quota\n", argv[0]);
    }
    PQclear(r);
    return status;
}

static const struct ctl_cmd cmds[] = {
    {"create", "NAME [--max-running N] [--json]",
     "make tenant NAME and its role cairn_tenant_NAME (the schema owner's to do)", tenant_create,
     NULL, NULL},
    {"list", "[--json]", "list the tenants (acting as a tenant: that one)", ctl_list, NULL,
     &tenant_listing},
    {"quota", "NAME (N | none)",
     "at most N of tenant NAME's instances running at once (none: no quota)", tenant_quota, NULL,
     NULL},
};
const struct ctl_table ctl_tenant_cmds = CTL_TABLE(cmds);
