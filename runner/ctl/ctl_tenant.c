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

#define TENANT_USAGE \
    "tenant (create NAME [--max-running N] [--json] | list [--json] | quota NAME (N | none))"

/* The quota's range: what a running limit allows (cairnctl limit set). */
#define QUOTA_MAX 1000000

static bool
name_arg(const char *cmd, const char *name)
{
    if (ctl_tenant_name_ok(name)) {
        return true;
    }
    fprintf(stderr,
            "cairnctl %s: \"%s\" is not a tenant name (a lowercase letter, then at most 47 of "
            "a-z, 0-9 and _)\n",
            cmd, name);
    return false;
}

static int
tenant_create(int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_JSON,
        {.flag = "max-running",
         .kind = CN_OPT_INT,
         .min = 1,
         .max = QUOTA_MAX,
         .arg = "N",
         .help = "at most N of the tenant's instances running at once (default: no quota)"},
    };
    struct cn_opts o = CTL_OPTS("tenant create", "NAME [--max-running N] [--json]", rows, 1);
    const char *params[2];
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
    if (!name_arg("tenant create", argv[0])) {
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    params[0] = argv[0];
    params[1] = cn_opts_str(&o, "max-running");
    /* Asked first so that a second create says so plainly instead of as a key violation; a
     * create racing it still fails on the key. */
    rv = rn_db_exec(c, "SELECT 1 FROM cairn.tenants WHERE name = $1", 1, params, &r, &em);
    if (rv == CN_OK && PQntuples(r) > 0) {
        fprintf(stderr,
                "cairnctl tenant create: tenant \"%s\" exists already (cairnctl tenant quota "
                "changes its quota)\n",
                argv[0]);
        PQclear(r);
        PQfinish(c);
        return EXIT_NOOP;
    }
    PQclear(r);
    r = NULL;
    if (rv == CN_OK) {
        rv = rn_db_exec(c, "SELECT cairn.tenant_create($1, $2::integer)", 2, params, &r, &em);
    }
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
        if (strstr(em.text, "permission denied") != NULL) {
            fprintf(stderr,
                    "cairnctl tenant create: making a tenant makes a role: run it as the schema "
                    "owner, without --tenant\n");
        }
    } else if (ctl_json_out(&o)) {
        printf("{\"tenant\": \"%s\", \"role\": \"%s\", \"max_running\": %s}\n", argv[0],
               PQgetvalue(r, 0, 0), params[1] != NULL ? params[1] : "null");
    } else {
        printf("tenant %s: role %s%s%s\n", argv[0], PQgetvalue(r, 0, 0),
               params[1] != NULL ? ", at most running at once: " : "",
               params[1] != NULL ? params[1] : "");
        printf("hint: GRANT %s TO <login>; lets that login act as it (cairnctl CMD --tenant %s)\n",
               PQgetvalue(r, 0, 0), argv[0]);
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

static int
tenant_list(int argc, char **argv)
{
    PGresult *r = NULL;
    bool json = false;
    int status, i;

    if ((status = ctl_list("tenant list", argc, argv,
                           "SELECT json_build_object('name', name, 'max_running', max_running,"
                           " 'created_at', created_at)::text, name, coalesce(max_running::text,"
                           " '-'), created_at FROM cairn.tenants ORDER BY name",
                           &r, &json)) != EXIT_OK) {
        return status;
    }
    if (json) {
        ctl_print_json_rows(r, PQntuples(r), 0);
    } else {
        printf("%-24s  %11s  %s\n", "NAME", "MAX_RUNNING", "CREATED_AT");
        for (i = 0; i < PQntuples(r); i++) {
            printf("%-24s  %11s  %s\n", PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                   PQgetvalue(r, i, 3));
        }
    }
    PQclear(r);
    return EXIT_OK;
}

static int
tenant_quota(int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB};
    struct cn_opts o = CTL_OPTS("tenant quota", "NAME (N | none)", rows, 2);
    const char *params[2];
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    char *end = NULL;
    long long n;
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 2) {
        fprintf(stderr, "usage: %s\n", o.usage);
        return EXIT_USAGE;
    }
    if (!name_arg("tenant quota", argv[0])) {
        return EXIT_USAGE;
    }
    params[0] = argv[0];
    params[1] = NULL;
    if (strcmp(argv[1], "none") != 0) {
        n = strtoll(argv[1], &end, 10);
        if (end == argv[1] || *end != '\0' || n < 1 || n > QUOTA_MAX) {
            fprintf(stderr,
                    "cairnctl tenant quota: the quota must be an integer in 1..%d or none, got "
                    "'%s'\n",
                    QUOTA_MAX, argv[1]);
            return EXIT_USAGE;
        }
        params[1] = argv[1];
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    rv = rn_db_exec(c, "SELECT cairn.tenant_quota($1, $2::integer)", 2, params, &r, &em);
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (strcmp(PQgetvalue(r, 0, 0), "t") != 0) {
        fprintf(stderr,
                "cairnctl tenant quota: no tenant \"%s\" (cairnctl tenant list shows them)\n",
                argv[0]);
        status = EXIT_REJECTED;
    } else if (params[1] != NULL) {
        printf("tenant %s: at most %s instances running at once\n", argv[0], params[1]);
    } else {
        printf("tenant %s: no quota\n", argv[0]);
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

int
ctl_cmd_tenant(int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";

    if (strcmp(sub, "create") == 0) {
        return tenant_create(argc - 1, argv + 1);
    }
    if (strcmp(sub, "list") == 0) {
        return tenant_list(argc - 1, argv + 1);
    }
    if (strcmp(sub, "quota") == 0) {
        return tenant_quota(argc - 1, argv + 1);
    }
    fprintf(stderr, "usage: cairnctl %s\n", TENANT_USAGE);
    return strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0 ? EXIT_OK : EXIT_USAGE;
}
