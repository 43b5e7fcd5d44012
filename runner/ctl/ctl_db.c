/* SPDX-License-Identifier: MIT */
/*
 * What cairnctl's database commands share, and `migrate`. Each command parses its options from
 * its own table (ir/base/opts.h, through ctl_opts), opens one libpq connection (--database-url,
 * else CAIRN_DATABASE_URL; as tenant --tenant, else CAIRN_TENANT; ctl_with_db opens, runs and
 * closes it for the command), runs parameterised statements (user data never becomes SQL text)
 * and prints human-readable text, or JSON with --json. Single-threaded. Exit codes: ctl.h.
 */

#include <jansson.h>

#include "runner/ctl/ctl.h"
#include "runner/exec/exec.h"
#include "runner/store/db.h"
#include "runner/store/migrate.h"

/* ---- options ------------------------------------------------------------------------------ */

/* Every command's table has CTL_OPT_DB, and CTL_OPT_JSON (ctl.h). */
bool
ctl_json_out(const struct cn_opts *o)
{
    return cn_opts_bool(o, "json");
}

const char *
ctl_col_opt(const PGresult *r, int row, const char *name)
{
    int col = PQfnumber(r, name);

    if (col < 0 || row < 0 || row >= PQntuples(r)) {
        fprintf(stderr, "cairnctl: internal error: the statement has no %s \"%s\" (row %d of %d)\n",
                col < 0 ? "column" : "row for column", name, row, PQntuples(r));
        exit(EXIT_DB);
    }
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

const char *
ctl_col(const PGresult *r, int row, const char *name)
{
    const char *v = ctl_col_opt(r, row, name);

    return v != NULL ? v : "";
}

bool
ctl_col_true(const PGresult *r, int row, const char *name)
{
    return strcmp(ctl_col(r, row, name), "t") == 0;
}

long long
ctl_col_int(const PGresult *r, int row, const char *name)
{
    return strtoll(ctl_col(r, row, name), NULL, 10);
}

void
ctl_print_json_rows(const PGresult *r, const char *col)
{
    int i;

    printf("[");
    for (i = 0; i < PQntuples(r); i++) {
        printf("%s%s", i ? ",\n " : "", ctl_col(r, i, col));
    }
    printf("]\n");
}

/* One line of the table: each cell padded to its column's width, two spaces apart. */
static void
print_cells(const struct ctl_column *cols, size_t ncols, const PGresult *r, int row)
{
    size_t k;

    for (k = 0; k < ncols; k++) {
        const char *v = r != NULL ? ctl_col(r, row, cols[k].name) : cols[k].title;
        int w = cols[k].width;

        printf(w < 0 ? "%s%-*s" : "%s%*s", k ? "  " : "", w < 0 ? -w : w, v);
    }
    printf("\n");
}

void
ctl_print_table(const PGresult *r, const struct ctl_column *cols, size_t ncols)
{
    int i;

    print_cells(cols, ncols, NULL, 0);
    for (i = 0; i < PQntuples(r); i++) {
        print_cells(cols, ncols, r, i);
    }
}

int
ctl_print_list(const struct cn_opts *o, const struct ctl_listing *l, int n,
               const char *const *params)
{
    PGresult *r = NULL;
    int status;

    if ((status = ctl_query_once(o, l->sql, n, params, &r)) != EXIT_OK) {
        return status;
    }
    if (ctl_json_out(o)) {
        ctl_print_json_rows(r, "json");
    } else {
        ctl_print_table(r, l->cols, l->ncols);
        if (l->footer != NULL) {
            printf("%s\n", l->footer);
        }
    }
    PQclear(r);
    return EXIT_OK;
}

int
ctl_list(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    struct cn_opts o = CTL_OPTS(call, rows, 0);
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    return ctl_print_list(&o, call->cmd->listing, 0, NULL);
}

int
ctl_query(const struct cn_opts *o, PGconn *c, const char *sql, int n, const char *const *params,
          PGresult **r)
{
    struct cn_errmsg em;
    cn_err rv = rn_db_exec(c, sql, n, params, r, &em);

    return rv == CN_OK ? EXIT_OK : ctl_db_error(o, rv, &em);
}

int
ctl_query_once(const struct cn_opts *o, const char *sql, int n, const char *const *params,
               PGresult **r)
{
    PGconn *c = NULL;
    int status = ctl_db_open(o, &c);

    if (status == EXIT_OK) {
        status = ctl_query(o, c, sql, n, params, r);
    }
    PQfinish(c);
    return status;
}

int
ctl_query_text(const struct cn_opts *o, PGconn *c, const char *sql, int n,
               const char *const *params, const char *col, char *out, size_t len)
{
    PGresult *r = NULL;
    int status;

    if ((status = ctl_query(o, c, sql, n, params, &r)) != EXIT_OK) {
        return status;
    }
    (void) snprintf(out, len, "%s", ctl_col(r, 0, col));
    PQclear(r);
    return EXIT_OK;
}

int
ctl_query_found(const struct cn_opts *o, PGconn *c, const char *sql, int n,
                const char *const *params, const char *what, PGresult **r)
{
    int status =
        c != NULL ? ctl_query(o, c, sql, n, params, r) : ctl_query_once(o, sql, n, params, r);

    if (status == EXIT_OK && PQntuples(*r) == 0) {
        fprintf(stderr, "%s: no %s %s\n", o->prog, what, params[0]);
        PQclear(*r);
        *r = NULL;
        status = EXIT_REJECTED;
    }
    return status;
}

int
ctl_with_db(const struct cn_opts *o, ctl_db_fn *fn, const char *arg)
{
    PGconn *c = NULL;
    int status = ctl_db_open(o, &c);

    if (status == EXIT_OK) {
        status = fn(o, c, arg);
    }
    PQfinish(c);
    return status;
}

int
ctl_instance_cmd(const struct ctl_call *call, int argc, char **argv, ctl_db_fn *fn)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    int status;

    if (!ctl_id_args(&o, argc, argv, &status)) {
        return status;
    }
    return ctl_with_db(&o, fn, argv[0]);
}

/* An instance id argument: a UUID. */
bool
ctl_check_uuid(const struct cn_opts *o, const char *id)
{
    struct rn_iid u;

    if (id == NULL) {
        fprintf(stderr, "%s: an instance ID is required\n", o->prog);
        return false;
    }
    if (!cn_uuid_parse(id, u.b)) {
        fprintf(stderr, "%s: '%s' is not an instance ID (a UUID)\n", o->prog, id);
        return false;
    }
    return true;
}

bool
ctl_id_args(struct cn_opts *o, int argc, char **argv, int *status)
{
    if (!ctl_opts(o, argc, argv, status)) {
        return false;
    }
    if (!ctl_check_uuid(o, o->nargs > 0 ? argv[0] : NULL)) {
        *status = EXIT_USAGE;
        return false;
    }
    return true;
}

/* Whether s[from..n) are all of [A-Za-z0-9_.-], what names and versions are made of. */
static bool
name_chars_ok(const char *s, size_t from, size_t n)
{
    size_t i;

    for (i = from; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-')) {
            return false;
        }
    }
    return true;
}

/* Workflow names as the schema allows them: [A-Za-z_][A-Za-z0-9_.-]{0,127}. */
bool
ctl_name_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= 128 &&
           ((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_') &&
           name_chars_ok(s, 1, n);
}

bool
ctl_version_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= 64 && name_chars_ok(s, 0, n);
}

/* ---- database ----------------------------------------------------------------------------- */

bool
ctl_tenant_name_ok(const char *t)
{
    size_t i, n = strlen(t);

    if (n == 0 || n > 48 || !(t[0] >= 'a' && t[0] <= 'z')) {
        return false;
    }
    for (i = 1; i < n; i++) {
        if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_')) {
            return false;
        }
    }
    return true;
}

/* SET ROLE cairn_tenant_<tenant> on c. The role, not a setting, is what row-level security
 * keys on (sql/0017): only a member of the role may take it, so a login cannot act as a tenant
 * it was not granted. */
static int
act_as_tenant(const struct cn_opts *o, PGconn *c, const char *tenant)
{
    char role[64], *ident, *sql;
    const char *state, *msg;
    PGresult *r;
    int status = EXIT_OK;

    (void) snprintf(role, sizeof(role), "cairn_tenant_%s", tenant);
    /* The name is checked already, so quoting changes nothing today; it keeps the statement
     * safe should the name rules ever widen. */
    if ((ident = PQescapeIdentifier(c, role, strlen(role))) == NULL) {
        fprintf(stderr, "%s: cannot quote the tenant's role: %s", o->prog, PQerrorMessage(c));
        return EXIT_DB;
    }
    sql = malloc(strlen(ident) + sizeof("SET ROLE "));
    if (sql == NULL) {
        PQfreemem(ident);
        fprintf(stderr, "%s: out of memory\n", o->prog);
        return EXIT_DB;
    }
    (void) sprintf(sql, "SET ROLE %s", ident);
    PQfreemem(ident);
    r = PQexec(c, sql);
    free(sql);
    if (r != NULL && PQresultStatus(r) == PGRES_COMMAND_OK) {
        PQclear(r);
        return EXIT_OK;
    }
    state = r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    msg = r != NULL ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (state != NULL && (strcmp(state, "22023") == 0 || strcmp(state, "42704") == 0)) {
        /* SET ROLE says 22023 invalid_parameter_value for a role that does not exist */
        fprintf(stderr, "%s: no tenant \"%s\" (cairnctl tenant list shows them)\n", o->prog,
                tenant);
        status = EXIT_REJECTED;
    } else if (state != NULL && strcmp(state, "42501") == 0) {
        fprintf(stderr, "%s: this login may not act as tenant \"%s\" (GRANT %s TO %s)\n", o->prog,
                tenant, role, PQuser(c));
        status = EXIT_REJECTED;
    } else {
        fprintf(stderr, "%s: cannot act as tenant \"%s\": %s\n", o->prog, tenant,
                msg != NULL ? msg : PQerrorMessage(c));
        status = EXIT_DB;
    }
    PQclear(r);
    return status;
}

int
ctl_db_open(const struct cn_opts *o, PGconn **c)
{
    const char *tenant = cn_opts_str(o, "tenant");
    struct cn_errmsg em;
    cn_err rv;
    int status;

    *c = NULL;
    /* Checked before connecting: a bad name is a usage error whatever the database says. */
    if (tenant != NULL && !ctl_tenant_name_ok(tenant)) {
        fprintf(stderr,
                "%s: \"%s\" is not a tenant name (--tenant or CAIRN_TENANT: a lowercase letter, "
                "then at most 47 of a-z, 0-9 and _)\n",
                o->prog, tenant);
        return EXIT_USAGE;
    }
    if ((rv = rn_db_connect(cn_opts_str(o, "database-url"), c, &em)) != CN_OK) {
        fprintf(stderr, "%s: %s\n", o->prog, em.text);
        return rv == CN_INVAL ? EXIT_USAGE : EXIT_DB;
    }
    if (tenant != NULL && (status = act_as_tenant(o, *c, tenant)) != EXIT_OK) {
        PQfinish(*c);
        *c = NULL;
        return status;
    }
    return EXIT_OK;
}

/* Maps a statement failure to an exit code, after printing it. */
int
ctl_db_error(const struct cn_opts *o, cn_err rv, const struct cn_errmsg *em)
{
    fprintf(stderr, "%s: %s\n", o->prog, em->text);
    if (strstr(em->text, "does not exist") != NULL && strstr(em->text, "cairn.") != NULL) {
        fprintf(stderr, "%s: is the schema there? run `cairnctl migrate`\n", o->prog);
    }
    return rv == CN_NOTFOUND || rv == CN_INVAL || rv == CN_TOOBIG ? EXIT_REJECTED : EXIT_DB;
}

/* Collects the files applied, printed once the transaction committed (a failure keeps none). */
static void
note_migration(void *arg, const struct rn_migration *m)
{
    struct cn_buf *names = arg;

    if (cn_buf_printf(names, "%s%s", names->len > 0 ? "\n" : "", m->file) != CN_OK) {
        /* out of memory: the list is shorter; the counts below are still right */
    }
}

/* The collected names, each as a line "applied F" or a JSON string. */
static void
print_migrations(const struct cn_buf *names, int json)
{
    const char *p = names->data != NULL ? names->data : "";

    while (*p != '\0') {
        size_t n = strcspn(p, "\n");

        printf(json ? "%s\"%.*s\"" : "%sapplied %.*s\n", json && p != names->data ? ", " : "",
               (int) n, p);
        p += n + (p[n] == '\n');
    }
}

/* The migrations applied on c, and the schema's version, said. */
static int
migrate(const struct cn_opts *o, PGconn *c, const char *unused)
{
    struct cn_buf names = CN_BUF_INIT;
    struct rn_migrate_report rep;
    struct cn_errmsg em;
    char current[16];
    int status = EXIT_OK;
    cn_err rv;

    (void) unused;
    rv = rn_migrate(c, note_migration, &names, &rep, &em);
    if (rv == CN_OK) {
        rv = rn_migrate_current(c, current, sizeof(current), &em);
    }
    if (rv != CN_OK) {
        status = ctl_db_error(o, rv, &em);
    } else if (ctl_json_out(o)) {
        printf("{\"version\": \"%s\", \"applied\": [", current);
        print_migrations(&names, 1);
        printf("], \"api_files\": %zu}\n", rep.api_files);
    } else {
        print_migrations(&names, 0);
        if (rep.api_files > 0) {
            printf("applied the SQL API (%zu files of sql/api)\n", rep.api_files);
        }
        printf("schema at version %s (%zu migration%s applied now)\n", current, rep.applied,
               rep.applied == 1 ? "" : "s");
    }
    cn_buf_fini(&names);
    return status;
}

int
ctl_cmd_migrate(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    struct cn_opts o = CTL_OPTS(call, rows, 0);
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (cn_opts_str(&o, "tenant") != NULL) {
        /* A tenant's role may not change the schema, and the schema is every tenant's. */
        fprintf(stderr,
                "cairnctl migrate: migrations are the schema owner's, not a tenant's: run it "
                "without --tenant (and with CAIRN_TENANT unset)\n");
        return EXIT_USAGE;
    }
    return ctl_with_db(&o, migrate, NULL);
}
