/* SPDX-License-Identifier: MIT */
/*
 * cairnctl's database commands: migrate, register, run, status, result, list, inspect (cancel
 * and retry are in ctl_control.c). Each
 * parses its options from its own table (ir/base/opts.h, through ctl_opts) and opens one
 * libpq connection (--database-url, else CAIRN_DATABASE_URL; as tenant --tenant, else
 * CAIRN_TENANT), runs parameterised statements
 * (user data never becomes SQL text) and prints human-readable text, or JSON with --json.
 * Single-threaded. Exit codes: ctl.h.
 */
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "ir/base/buf.h"
#include "ir/base/clock.h"
#include "ir/base/uuid.h"
#include "ir/compile.h"
#include "ir/numtext.h"
#include "ir/value.h"
#include "runner/ctl/ctl.h"
#include "runner/exec/exec.h"
#include "runner/store/db.h"
#include "runner/store/migrate.h"

#define WAIT_POLL_MS 50

/* ---- options ------------------------------------------------------------------------------ */

/* Every command's table has CTL_OPT_DB, and CTL_OPT_JSON (ctl.h). */
bool
ctl_json_out(const struct cn_opts *o)
{
    return cn_opts_bool(o, "json");
}

/* Prints column col of rows 0..n) of r, each a JSON object's text, as one JSON array. */
void
ctl_print_json_rows(const PGresult *r, int n, int col)
{
    int i;

    printf("[");
    for (i = 0; i < n; i++) {
        printf("%s%s", i ? ",\n " : "", PQgetvalue(r, i, col));
    }
    printf("]\n");
}

int
ctl_list(const char *cmd, int argc, char **argv, const char *sql, PGresult **r, bool *json)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    char prog[64], usage[96];
    struct cn_opts o = {.prog = prog,
                        .usage = usage,
                        .hint = "cairnctl help",
                        .opts = rows,
                        .nopts = sizeof(rows) / sizeof(rows[0]),
                        .max_args = 0};
    struct cn_errmsg em;
    PGconn *c = NULL;
    int status;

    *r = NULL;
    (void) snprintf(prog, sizeof(prog), "cairnctl %s", cmd);
    (void) snprintf(usage, sizeof(usage), "cairnctl %s [--json]", cmd);
    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    if (rn_db_exec(c, sql, 0, NULL, r, &em) != CN_OK) {
        status = ctl_db_error(&o, CN_DB, &em);
    }
    *json = ctl_json_out(&o);
    PQfinish(c);
    return status;
}

/* An instance id argument: a UUID. */
bool
ctl_check_uuid(const char *cmd, const char *id)
{
    struct rn_iid u;

    if (id == NULL) {
        fprintf(stderr, "cairnctl %s: an instance ID is required\n", cmd);
        return false;
    }
    if (!cn_uuid_parse(id, u.b)) {
        fprintf(stderr, "cairnctl %s: '%s' is not an instance ID (a UUID)\n", cmd, id);
        return false;
    }
    return true;
}

/* Workflow names as the schema allows them: [A-Za-z_][A-Za-z0-9_.-]{0,127}. */
static bool
name_ok(const char *s)
{
    size_t i, n = strlen(s);

    if (n == 0 || n > 128 ||
        !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) {
        return false;
    }
    for (i = 1; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-')) {
            return false;
        }
    }
    return true;
}

static bool
version_ok(const char *s)
{
    size_t i, n = strlen(s);

    if (n == 0 || n > 64) {
        return false;
    }
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-')) {
            return false;
        }
    }
    return true;
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

int
ctl_cmd_migrate(int argc, char **argv)
{
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    struct cn_opts o = CTL_OPTS("migrate", "[--json]", rows, 0);
    struct rn_migrate_report rep;
    struct cn_errmsg em;
    PGconn *c = NULL;
    char current[16];
    int status;
    cn_err rv;

    struct cn_buf names = CN_BUF_INIT;

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
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    rv = rn_migrate(c, note_migration, &names, &rep, &em);
    if (rv == CN_OK) {
        rv = rn_migrate_current(c, current, sizeof(current), &em);
    }
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
    } else if (ctl_json_out(&o)) {
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
    PQfinish(c);
    return status;
}

/* ---- register ----------------------------------------------------------------------------- */

/* The default workflow name: the file name without its directory and ".cairn". */
static char *
default_name(const char *path)
{
    const char *base = strrchr(path, '/');
    size_t n;
    char *out;

    base = base != NULL ? base + 1 : path;
    n = strlen(base);
    if (n > 6 && strcmp(base + n - 6, ".cairn") == 0) {
        n -= 6;
    }
    out = malloc(n + 1);
    if (out != NULL) {
        memcpy(out, base, n);
        out[n] = '\0';
    }
    return out;
}

/* The text array literal of the entry function's inputs (for workflow_versions.inputs), in
 * *out. Input names are identifiers: nothing in them needs quoting. */
static bool
inputs_literal(const struct ir_dag *dag, struct cn_buf *out)
{
    const struct ir_node *e = &dag->nodes[dag->entry];
    uint32_t i;
    bool ok = cn_buf_putc(out, '{') == CN_OK;

    for (i = 0; ok && i < e->ntargets; i++) {
        ok = cn_buf_printf(out, "%s\"%s\"", i > 0 ? "," : "", e->targets[i]) == CN_OK;
    }
    return ok && cn_buf_putc(out, '}') == CN_OK;
}

/* Whether name is among names[0..n). */
static bool
has_name(const char *const *names, size_t n, const char *name)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return true;
        }
    }
    return false;
}

/* Checks the child calls (run/start) of dag against the workflows they name, as registered now
 * (self: the workflow being registered, whose own inputs its recursive calls must fit). A call
 * whose inputs do not fit is an error at its line:col; one naming a workflow that is not
 * registered is an error too, unless allow_missing (a child registered later fails the call at
 * run time with ChildWorkflowNotFound). Returns EXIT_OK, or the status after printing. */
static int
check_child_calls(const struct cn_opts *o, PGconn *c, const char *file, const char *src, size_t len,
                  const struct ir_dag *dag, const char *self, bool allow_missing)
{
    struct ir_diags d;
    struct cn_buf own = CN_BUF_INIT, msg = CN_BUF_INIT;
    int status = EXIT_OK;
    uint32_t i, k;

    ir_diags_init(&d, file, src, len);
    if (!inputs_literal(dag, &own)) {
        cn_buf_fini(&own);
        return EXIT_USAGE;
    }
    for (i = 0; i < dag->nnodes && status == EXIT_OK; i++) {
        const struct ir_node *t = &dag->nodes[i];
        const char *params[2] = {t->name, t->version};
        const char *inputs;
        struct cn_errmsg em;
        PGresult *r = NULL;
        cn_err rv;

        if (t->kind != IR_N_ACTION || t->call == IR_CALL_ACTION) {
            continue;
        }
        if (strcmp(t->name, self) == 0 && t->version == NULL) {
            inputs = own.data; /* a recursive call: this very version */
        } else {
            if ((rv = rn_db_exec(c,
                                 "SELECT array_to_json(inputs)::text FROM cairn.workflow_versions"
                                 " WHERE workflow_name = $1 AND ($2::text IS NULL OR"
                                 " workflow_version = $2) AND tenant_id ="
                                 " cairn.current_tenant() ORDER BY created_at DESC LIMIT 1",
                                 2, params, &r, &em)) != CN_OK) {
                status = ctl_db_error(o, rv, &em);
                break;
            }
            if (PQntuples(r) == 0) {
                if (allow_missing) {
                    fprintf(stderr,
                            "%s:%u:%u: warning: no workflow \"%s\"%s%s%s is registered yet: the "
                            "call raises ChildWorkflowNotFound if it is not when it runs\n",
                            file, t->line, t->col, t->name, t->version ? " version \"" : "",
                            t->version ? t->version : "", t->version ? "\"" : "");
                } else {
                    ir_diags_add(&d, t->line, t->col,
                                 "no workflow \"%s\"%s%s%s is registered (register it first, or "
                                 "pass --allow-missing-children to check it when the call runs)",
                                 t->name, t->version ? " version \"" : "",
                                 t->version ? t->version : "", t->version ? "\"" : "");
                }
                PQclear(r);
                continue;
            }
            inputs = PQgetisnull(r, 0, 0) ? NULL : PQgetvalue(r, 0, 0);
        }
        if (inputs != NULL) { /* NULL: registered before inputs were recorded */
            const char **names = NULL;
            struct ir_val list = ir_null();
            struct cn_buf shown = CN_BUF_INIT;
            size_t n = 0, j;
            bool ok = true;

            if (inputs == own.data) {
                names = (const char **) dag->nodes[dag->entry].targets;
                n = dag->nodes[dag->entry].ntargets;
            } else if (ir_val_from_json(inputs, strlen(inputs), &list, &em) == CN_OK &&
                       list.type == IR_T_LIST) {
                n = ir_list_len(list);
                names = calloc(n ? n : 1, sizeof(*names));
                for (j = 0; names != NULL && j < n; j++) {
                    struct ir_val v = ir_list_items(list)[j];
                    names[j] = v.type == IR_T_STR ? ir_str_data(v) : "";
                }
                ok = names != NULL;
            }
            for (j = 0; ok && j < n; j++) {
                ok = cn_buf_printf(&shown, "%s%s", j ? ", " : "", names[j]) == CN_OK;
            }
            if (ok && cn_buf_puts(&shown, n ? "" : "none") != CN_OK) {
                ok = false;
            }
            for (k = 0; ok && k < t->nargs; k++) {
                if (!has_name(names, n, t->argnames[k])) {
                    ir_diags_add(&d, t->line, t->col, "%s has no input '%s' (its inputs: %s)",
                                 t->name, t->argnames[k], shown.data);
                }
            }
            for (j = 0; ok && j < n; j++) { /* every input of the child's main, in the call */
                if (!has_name(t->argnames, t->nargs, names[j])) {
                    ir_diags_add(&d, t->line, t->col, "%s needs input '%s' (its inputs: %s)",
                                 t->name, names[j], shown.data);
                }
            }
            if (!ok) {
                status = EXIT_USAGE;
                fprintf(stderr, "cairnctl register: out of memory\n");
            }
            if (inputs != own.data) {
                free(names);
            }
            ir_val_release(list);
            cn_buf_fini(&shown);
        }
        PQclear(r);
    }
    if (status == EXIT_OK && d.len > 0) {
        if (ir_diags_format(&d, &msg) == CN_OK) {
            fputs(msg.data, stderr);
        }
        status = EXIT_REJECTED;
    }
    cn_buf_fini(&msg);
    cn_buf_fini(&own);
    ir_diags_fini(&d);
    return status;
}

int
ctl_cmd_register(int argc, char **argv)
{
    /* The version defaults to the first 12 hex digits of the graph's hash: unchanged source
     * maps to the same row (a no-op), changed source to a new version. */
    static const char *insert_sql =
        "SELECT id, workflow_version, ir_hash FROM cairn.register_version($1, $2, $3::bytea, $4,"
        " nullif($5::bigint, 0), $6::text[])";
    /* Names are per tenant. Row security keeps a tenant to its own rows, but the schema owner
     * sees every tenant's and registers in tenant default: hence the tenant_id filters. */
    static const char *existing_sql =
        "SELECT id, workflow_version, ir_hash, "
        /* The same source is unchanged even when a newer compiler encodes its graph (and so
         * its hash) differently, as DAG format 3 did. */
        "(ir_hash = encode(sha256($3::bytea), 'hex') OR source = $4) AS same "
        "FROM cairn.workflow_versions "
        "WHERE workflow_name = $1 AND workflow_version = coalesce($2, left(encode(sha256("
        "$3::bytea), 'hex'), 12)) AND tenant_id = cairn.current_tenant()";
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        {.flag = "name",
         .kind = CN_OPT_STR,
         .arg = "N",
         .help = "workflow name (default: the file name without .cairn)"},
        {.flag = "version",
         .kind = CN_OPT_STR,
         .arg = "V",
         .help = "version (default: 12 hex digits of the graph's hash)"},
        {.flag = "allow-missing-children",
         .kind = CN_OPT_BOOL,
         .help = "register although a child workflow it calls is not registered yet (the call "
                 "is checked when it runs)"},
        {.flag = "max-running",
         .kind = CN_OPT_INT,
         .min = 1,
         .max = 1000000,
         .help = "at most N instances of the workflow run at once (cairnctl limit set changes it)"},
        {.flag = "max-per-key",
         .kind = CN_OPT_INT,
         .min = 1,
         .max = 1000000,
         .arg = "M",
         .help = "at most M instances with the same --concurrency-key run at once (default 1)"},
        CTL_OPT_COMPILE_LIMITS,
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS("register",
                                "FILE [--name N] [--version V] [--max-running N] "
                                "[--max-per-key M] [--allow-missing-children] "
                                "[--max-source-bytes N] [--max-graph-nodes N] [--json]",
                                rows, 1);
    struct ir_compile_limits lim;
    const char *file, *version;
    struct cn_errmsg em;
    struct ir_dag *dag = NULL;
    struct cn_buf enc = CN_BUF_INIT, hex = CN_BUF_INIT, inputs = CN_BUF_INIT;
    PGconn *c = NULL;
    PGresult *r = NULL;
    char *src = NULL, *name = NULL;
    size_t src_len = 0, i;
    const char *params[6];
    char timeout[24];
    bool created = false;
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 1) {
        fprintf(stderr, "usage: %s\n", o.usage);
        return EXIT_USAGE;
    }
    file = argv[0];
    version = cn_opts_str(&o, "version");
    name = cn_opts_str(&o, "name") != NULL ? strdup(cn_opts_str(&o, "name")) : default_name(file);
    if (name == NULL || !name_ok(name)) {
        fprintf(stderr,
                "cairnctl register: workflow name '%s' is not valid (letters, digits, _ . -; "
                "starting with a letter or _; at most 128): use --name\n",
                name != NULL ? name : "");
        free(name);
        return EXIT_REJECTED;
    }
    if (version != NULL && !version_ok(version)) {
        fprintf(stderr,
                "cairnctl register: version '%s' is not valid (1-64 of letters, digits, _ . -)\n",
                version);
        free(name);
        return EXIT_REJECTED;
    }
    lim = ctl_compile_limits(&o);
    if ((status = ctl_compile_file(file, &lim, &dag, &src, &src_len)) != EXIT_OK) {
        free(name);
        return status;
    }
    if (strlen(src) != src_len) {
        fprintf(stderr, "cairnctl register: %s contains a NUL byte\n", file);
        status = EXIT_REJECTED;
        goto out;
    }
    /* The canonical graph encoding, as \x hex text for a bytea parameter. */
    if (ir_dag_encode(dag, &enc) != CN_OK || cn_buf_puts(&hex, "\\x") != CN_OK) {
        fprintf(stderr, "cairnctl register: out of memory\n");
        status = EXIT_USAGE;
        goto out;
    }
    for (i = 0; i < enc.len; i++) {
        if (cn_buf_printf(&hex, "%02x", (unsigned char) enc.data[i]) != CN_OK) {
            fprintf(stderr, "cairnctl register: out of memory\n");
            status = EXIT_USAGE;
            goto out;
        }
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        goto out;
    }
    if ((status = check_child_calls(&o, c, file, src, src_len, dag, name,
                                    cn_opts_bool(&o, "allow-missing-children"))) != EXIT_OK) {
        goto out;
    }
    if (!inputs_literal(dag, &inputs)) {
        fprintf(stderr, "cairnctl register: out of memory\n");
        status = EXIT_USAGE;
        goto out;
    }
    params[5] = inputs.data;
    params[0] = name;
    params[1] = version;
    params[2] = hex.data;
    params[3] = src;
    (void) snprintf(timeout, sizeof(timeout), "%lld", (long long) dag->timeout_ms);
    params[4] = timeout; /* the workflow's [timeout: D] (its graph's hash covers it too) */
    if ((rv = rn_db_exec(c, insert_sql, 6, params, &r, &em)) != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
        goto out;
    }
    created = PQntuples(r) == 1;
    if (!created) {
        PQclear(r);
        if ((rv = rn_db_exec(c, existing_sql, 4, params, &r, &em)) != CN_OK) {
            status = ctl_db_error(&o, rv, &em);
            goto out;
        }
        if (PQntuples(r) != 1) { /* deleted in between: vanishingly rare; say so */
            fprintf(stderr, "cairnctl register: the version changed meanwhile; try again\n");
            status = EXIT_DB;
            goto out;
        }
        if (strcmp(PQgetvalue(r, 0, 3), "t") != 0) {
            fprintf(stderr,
                    "cairnctl register: %s version %s is already registered with different "
                    "source; register it under a new --version\n",
                    name, PQgetvalue(r, 0, 1));
            status = EXIT_REJECTED;
            goto out;
        }
    }
    if ((cn_opts_str(&o, "max-running") != NULL || cn_opts_str(&o, "max-per-key") != NULL) &&
        (status = ctl_limit_apply(&o, c, name, cn_opts_str(&o, "max-running"),
                                  cn_opts_str(&o, "max-running") == NULL,
                                  cn_opts_str(&o, "max-per-key"), NULL)) != EXIT_OK) {
        goto out;
    }
    if (ctl_json_out(&o)) {
        printf("{\"name\": \"%s\", \"version\": \"%s\", \"id\": \"%s\", \"ir_hash\": \"%s\", "
               "\"created\": %s}\n",
               name, PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 2),
               created ? "true" : "false");
    } else {
        printf("%s version %s %s (%u nodes)\n", name, PQgetvalue(r, 0, 1),
               created ? "registered" : "already registered, unchanged", dag->nnodes);
    }
out:
    PQclear(r);
    PQfinish(c);
    cn_buf_fini(&enc);
    cn_buf_fini(&hex);
    cn_buf_fini(&inputs);
    ir_dag_free(dag);
    free(src);
    free(name);
    return status;
}

/* ---- run ---------------------------------------------------------------------------------- */


int
ctl_wait_status(const struct cn_opts *o, PGconn *c, const char *id, long long timeout_ms, char *st,
                size_t stlen)
{
    int64_t deadline = cn_mono_ms() + timeout_ms;
    const char *params[1] = {id};
    struct cn_errmsg em;
    PGresult *r = NULL;
    cn_err rv;

    for (;;) {
        bool done;
        struct timespec ts = {0, WAIT_POLL_MS * 1000000L};

        if ((rv = rn_db_exec(
                 c,
                 "SELECT status, status IN ('completed', 'failed', 'cancelled', 'timed_out') "
                 "FROM cairn.runner_instances WHERE instance_id = $1",
                 1, params, &r, &em)) != CN_OK) {
            return ctl_db_error(o, rv, &em);
        }
        done = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 1), "t") == 0;
        (void) snprintf(st, stlen, "%s", PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "");
        PQclear(r);
        if (done) {
            return EXIT_OK;
        }
        if (timeout_ms > 0 && cn_mono_ms() >= deadline) {
            fprintf(stderr, "%s: %s did not finish within %lld s\n", o->prog, id,
                    timeout_ms / 1000);
            return EXIT_PENDING;
        }
        nanosleep(&ts, NULL);
    }
}

/* Waits for the instance to finish, then prints its result as `result` does. */
static int
wait_finished(const struct cn_opts *o, PGconn *c, const char *id, long long timeout_ms)
{
    char st[16];
    int status = ctl_wait_status(o, c, id, timeout_ms, st, sizeof(st));

    return status == EXIT_OK ? ctl_print_result(o, c, id) : status;
}

int
ctl_read_input(const char *cmd, const char *input, const char *input_file, char **compact)
{
    char *file_text = NULL;
    size_t file_len = 0;
    int status;

    if (input_file != NULL) {
        if (input != NULL) {
            fprintf(stderr, "cairnctl %s: give --input or --input-file, not both\n", cmd);
            return EXIT_USAGE;
        }
        if ((file_text = ctl_read_file(input_file, &file_len)) == NULL) {
            return EXIT_USAGE;
        }
        if (strlen(file_text) != file_len) {
            fprintf(stderr, "cairnctl %s: %s contains a NUL byte\n", cmd, input_file);
            free(file_text);
            return EXIT_REJECTED;
        }
        input = file_text;
    }
    status = ctl_parse_input(cmd, input, compact);
    free(file_text);
    return status;
}

int
ctl_parse_input(const char *cmd, const char *text, char **compact)
{
    const char *src = text != NULL ? text : "{}";
    json_error_t je;
    json_t *input = json_loads(src, JSON_REJECT_DUPLICATES, &je);
    struct cn_buf out = CN_BUF_INIT;
    struct cn_errmsg em;
    struct ir_val v;
    size_t len;
    cn_err rv;

    *compact = NULL;
    if (input == NULL && json_error_code(&je) == json_error_numeric_overflow) {
        fprintf(stderr,
                "cairnctl %s: --input holds a number out of range (integers are 64-bit, floats "
                "at most about 1.8e308): %s (line %d, column %d)\n",
                cmd, je.text, je.line, je.column);
        return EXIT_REJECTED;
    }
    if (input == NULL) {
        fprintf(stderr, "cairnctl %s: --input is not valid JSON: %s (line %d, column %d)\n", cmd,
                je.text, je.line, je.column);
        return EXIT_REJECTED;
    }
    if (!json_is_object(input)) {
        fprintf(stderr, "cairnctl %s: --input must be a JSON object ({\"name\": value, ...})\n",
                cmd);
        json_decref(input);
        return EXIT_REJECTED;
    }
    json_decref(input);
    /* jansson has vouched for the syntax, the keys and the numbers, with positions; the
     * engine's own decoder adds its depth limit, and its encoder the text that is sent. */
    rv = ir_val_from_json(src, strlen(src), &v, &em);
    if (rv == CN_DEPTH) {
        fprintf(stderr,
                "cairnctl %s: --input is nested deeper than %d levels (the top object is level "
                "1; each array or object adds one)\n",
                cmd, IR_VALUE_MAX_DEPTH);
        return EXIT_REJECTED;
    }
    if (rv == CN_OK) {
        rv = ir_val_to_json(v, &out, &em);
        ir_val_release(v);
    }
    if (rv == CN_OK) {
        rv = cn_buf_take(&out, compact, &len);
    }
    cn_buf_fini(&out);
    if (rv == CN_NOMEM) {
        fprintf(stderr, "cairnctl %s: out of memory\n", cmd);
        return EXIT_USAGE;
    }
    if (rv != CN_OK) {
        fprintf(stderr, "cairnctl %s: --input: %s\n", cmd, em.text);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* A float at or beyond 2^63 reaches jsonb in exponent form (1e+20), which PostgreSQL keeps as
 * the integer 100000000000000000000: outside int64, so cairn.enqueue refuses it. Says so first,
 * for the first one found (v is within IR_VALUE_MAX_DEPTH: the recursion is bounded). */
static bool
jsonb_numbers_ok(struct ir_val v)
{
    size_t i;

    switch (v.type) {
    case IR_T_FLOAT:
        if (fabs(v.u.f) >= 9223372036854775808.0) {
            char fb[IR_FLOAT_REPR_MAX];
            (void) ir_float_repr(v.u.f, fb);
            fprintf(stderr,
                    "cairnctl run: --input holds %s, which PostgreSQL stores as an integer, "
                    "outside the 64-bit range (write it with a fraction to keep a float: "
                    "100000000000000000000.0)\n",
                    fb);
            return false;
        }
        return true;
    case IR_T_LIST:
        for (i = 0; i < ir_list_len(v); i++) {
            if (!jsonb_numbers_ok(ir_list_items(v)[i])) {
                return false;
            }
        }
        return true;
    case IR_T_MAP:
        for (i = 0; i < ir_map_len(v); i++) {
            if (!jsonb_numbers_ok(ir_map_val_at(v, i))) {
                return false;
            }
        }
        return true;
    default:
        return true;
    }
}

/* PostgreSQL's spellings of the infinite times, 'infinity' and '-infinity', which it takes in
 * any case, with blanks around. */
static bool
infinite_time(const char *s)
{
    size_t n;

    while (isspace((unsigned char) *s)) {
        s++;
    }
    if (*s == '-') {
        s++;
    }
    n = strlen(s);
    while (n > 0 && isspace((unsigned char) s[n - 1])) {
        n--;
    }
    return n == 8 && strncasecmp(s, "infinity", 8) == 0;
}

/* The checks cairn.enqueue makes that can be made here (the database makes them all again). */
static int
check_enqueue(const char *input, const char *key, const char *at)
{
    struct ir_val v;
    struct cn_errmsg em;
    size_t n = strlen(input);
    bool ok;

    if (n > CTL_INPUT_MAX_BYTES) {
        fprintf(stderr,
                "cairnctl run: --input is %zu bytes of JSON, over the limit of %d bytes (pass "
                "large data by reference: a URL, a row id)\n",
                n, CTL_INPUT_MAX_BYTES);
        return EXIT_REJECTED;
    }
    if (ir_val_from_json(input, n, &v, &em) != CN_OK) { /* ctl_parse_input made this text */
        fprintf(stderr, "cairnctl run: --input: %s\n", em.text);
        return EXIT_USAGE;
    }
    ok = jsonb_numbers_ok(v);
    ir_val_release(v);
    if (!ok) {
        return EXIT_REJECTED;
    }
    if (key != NULL && key[0] == '\0') {
        fprintf(stderr, "cairnctl run: --idempotency-key is empty (leave it out for no key)\n");
        return EXIT_REJECTED;
    }
    if (key != NULL && strlen(key) > CTL_IDEMPOTENCY_KEY_MAX_BYTES) {
        fprintf(stderr,
                "cairnctl run: --idempotency-key is %zu bytes, over the limit of %d bytes (use a "
                "digest of a longer key: a hex SHA-256 is 64 bytes)\n",
                strlen(key), CTL_IDEMPOTENCY_KEY_MAX_BYTES);
        return EXIT_REJECTED;
    }
    if (at != NULL && infinite_time(at)) {
        fprintf(stderr,
                "cairnctl run: --at must be a finite time (2026-12-01T09:00:00Z), not '%s'\n", at);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* --at and --workflow-timeout are read by the database, which takes more forms than any parser
 * here would (time zone names, 'tomorrow', '1 day 2 hours'); they are read apart from the
 * enqueue, so that a bad one is named with the forms it takes instead of PostgreSQL's
 * "invalid input syntax for type timestamp with time zone". */
static int
check_time_options(PGconn *c, const char *at, const char *timeout)
{
    const struct {
        const char *flag, *value, *sql, *what;
    } opts[] = {
        {"--at", at, "SELECT $1::timestamptz",
         "is not a time: give an ISO 8601 time with its offset (2026-12-01T09:00:00Z, "
         "2026-12-01 10:00:00+01:00), a time in a named zone (2026-12-01 09:00 Europe/Paris), "
         "or now, today or tomorrow"},
        {"--workflow-timeout", timeout, "SELECT $1::interval",
         "is not a duration: give a number with a unit (90s, 5 minutes, 2 hours, 1 day) or "
         "hh:mm:ss (01:30:00)"},
    };
    size_t i;

    for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        const char *params[1] = {opts[i].value};
        struct cn_errmsg em;
        cn_err rv;

        if (opts[i].value == NULL ||
            (rv = rn_db_exec(c, opts[i].sql, 1, params, NULL, &em)) == CN_OK) {
            continue;
        }
        if (rv != CN_INVAL) { /* not the value's fault */
            fprintf(stderr, "cairnctl run: %s\n", em.text);
            return EXIT_DB;
        }
        fprintf(stderr, "cairnctl run: %s '%s' %s\n", opts[i].flag, opts[i].value, opts[i].what);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

int
ctl_cmd_run(int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        {.flag = "input",
         .kind = CN_OPT_STR,
         .arg = "JSON",
         .help = "the instance's input, a JSON object (default {})"},
        {.flag = "input-file",
         .kind = CN_OPT_STR,
         .arg = "FILE",
         .help = "read the input from FILE (-: stdin), for one too long for a command line"},
        {.flag = "idempotency-key",
         .kind = CN_OPT_STR,
         .arg = "K",
         .help = "the same key returns the workflow's first instance instead of making another"},
        {.flag = "concurrency-key",
         .kind = CN_OPT_STR,
         .arg = "K",
         .help = "instances with the same key run at most the workflow's per-key limit at once "
                 "(1 unless set: cairnctl limit set)"},
        {.flag = "priority",
         .kind = CN_OPT_INT,
         .def = "0",
         .min = -1000000,
         .max = 1000000,
         .arg = "P",
         .help = "higher runs first"},
        {.flag = "at",
         .kind = CN_OPT_STR,
         .arg = "TIME",
         .help = "not before this ISO 8601 time (2026-12-01T09:00:00Z)"},
        {.flag = "version",
         .kind = CN_OPT_STR,
         .arg = "V",
         .help = "this version of the workflow (default: the newest)"},
        {.flag = "workflow-timeout",
         .kind = CN_OPT_STR,
         .arg = "D",
         .help = "the instance times out D after it is due (30s, 5 min, 2 hours; default: the "
                 "workflow's own [timeout: D], if any)"},
        {.flag = "wait", .kind = CN_OPT_BOOL, .help = "wait until it finishes; print its result"},
        {.flag = "timeout",
         .kind = CN_OPT_INT,
         .min = 1,
         .max = 86400 * 365,
         .arg = "S",
         .help = "with --wait: give up after S seconds (exit 5)"},
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS("run",
                                "NAME [--input JSON | --input-file FILE] [--idempotency-key K] "
                                "[--concurrency-key K] [--priority P] [--at TIME] [--version V] "
                                "[--workflow-timeout D] [--wait [--timeout S]] [--json]",
                                rows, 1);
    struct cn_errmsg em;
    PGconn *c = NULL;
    PGresult *r = NULL;
    const char *params[8];
    char prio[24];
    char *input_text = NULL;
    int status;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs != 1) {
        fprintf(stderr, "usage: %s\n", o.usage);
        return EXIT_USAGE;
    }
    /* The input is checked here, with a position, before the database sees it. */
    if ((status = ctl_read_input("run", cn_opts_str(&o, "input"), cn_opts_str(&o, "input-file"),
                                 &input_text)) != EXIT_OK) {
        return status;
    }
    if ((status = check_enqueue(input_text, cn_opts_str(&o, "idempotency-key"),
                                cn_opts_str(&o, "at"))) != EXIT_OK) {
        free(input_text);
        return status;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        free(input_text);
        return status;
    }
    if ((status = check_time_options(c, cn_opts_str(&o, "at"),
                                     cn_opts_str(&o, "workflow-timeout"))) != EXIT_OK) {
        free(input_text);
        PQfinish(c);
        return status;
    }
    (void) snprintf(prio, sizeof(prio), "%lld", cn_opts_int(&o, "priority"));
    params[0] = argv[0];
    params[1] = input_text;
    params[2] = cn_opts_str(&o, "idempotency-key");
    params[3] = prio;
    params[4] = cn_opts_str(&o, "at");
    params[5] = cn_opts_str(&o, "version");
    params[6] = cn_opts_str(&o, "workflow-timeout"); /* PostgreSQL reads the interval */
    params[7] = cn_opts_str(&o, "concurrency-key");
    rv = rn_db_exec(c,
                    "SELECT cairn.enqueue($1, $2::jsonb, $3, $4::integer, $5::timestamptz, $6, "
                    "$7::interval, $8)",
                    8, params, &r, &em);
    free(input_text);
    if (rv != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
        PQfinish(c);
        return status;
    }
    if (cn_opts_bool(&o, "wait")) {
        char id[64];

        (void) snprintf(id, sizeof(id), "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        if (!ctl_json_out(&o)) {
            fprintf(stderr, "%s\n", id);
        }
        status = wait_finished(&o, c, id, cn_opts_int(&o, "timeout") * 1000);
        PQfinish(c);
        return status;
    }
    if (ctl_json_out(&o)) {
        printf("{\"id\": \"%s\"}\n", PQgetvalue(r, 0, 0));
    } else {
        printf("%s\n", PQgetvalue(r, 0, 0));
    }
    PQclear(r);
    PQfinish(c);
    return EXIT_OK;
}

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

/* ---- inspect ------------------------------------------------------------------------------ */

static int
hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes \x-less hex text into a new buffer. */
static unsigned char *
unhex(const char *text, size_t *len)
{
    size_t n = strlen(text) / 2, i;
    unsigned char *out = malloc(n ? n : 1);

    if (out == NULL) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        int hi = hexval(text[2 * i]), lo = hexval(text[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[i] = (unsigned char) (hi << 4 | lo);
    }
    *len = n;
    return out;
}

static void
kv_set(struct ir_val *m, const char *key, struct ir_val v, bool *ok)
{
    if (*ok && ir_map_set_cstr(m, key, v) != CN_OK) {
        *ok = false;
    } else if (!*ok) {
        ir_val_release(v);
    }
}

static void
kv_str(struct ir_val *m, const char *key, const char *s, bool *ok)
{
    struct ir_val v;

    if (s == NULL) {
        kv_set(m, key, ir_null(), ok);
    } else if (ir_str_from_cstr(s, &v) == CN_OK) {
        kv_set(m, key, v, ok);
    } else {
        *ok = false;
    }
}

/* A jsonb column (text) as a value; NULL stays None. */
static void
kv_json(struct ir_val *m, const char *key, PGresult *r, int row, int col, bool *ok)
{
    struct ir_val v = ir_null();
    struct cn_errmsg em;

    if (!PQgetisnull(r, row, col) &&
        ir_val_from_json(PQgetvalue(r, row, col), (size_t) PQgetlength(r, row, col), &v, &em) !=
            CN_OK) {
        v = ir_null();
    }
    kv_set(m, key, v, ok);
}

/* The text form of a value, cut to max bytes. */
static void
short_json(struct ir_val v, size_t max, struct cn_buf *out)
{
    struct cn_errmsg em;

    cn_buf_clear(out);
    if (ir_val_to_json(v, out, &em) != CN_OK) {
        cn_buf_clear(out);
    }
    if (out->len > max) {
        out->len = max - 3;
        memcpy(out->data + out->len, "...", 4); /* fits: the buffer held more than max */
        out->len += 3;
    }
    if (out->len == 0 && cn_buf_puts(out, "?") != CN_OK) {
        /* out of memory: print nothing for this value */
    }
}

static void
print_live(struct ir_val live, bool ended)
{
    struct cn_buf b = CN_BUF_INIT;
    size_t i;

    if (ir_list_len(live) == 0) {
        printf("waiting on  nothing (finished, or not started yet)\n");
        return;
    }
    /* A run that failed, was cancelled or timed out keeps its last running state: what a
     * retry resumes from. */
    printf(ended ? "where it stopped (a retry resumes here):\n" : "waiting on:\n");
    for (i = 0; i < ir_list_len(live); i++) {
        struct ir_val n = ir_list_items(live)[i];
        const struct ir_val *st = ir_map_get(n, "status", 6), *kind = ir_map_get(n, "kind", 4),
                            *act = ir_map_get(n, "action", 6), *line = ir_map_get(n, "line", 4),
                            *att = ir_map_get(n, "attempt", 7), *wake = ir_map_get(n, "wake_ms", 7),
                            *pend = ir_map_get(n, "pending", 7), *br = ir_map_get(n, "branches", 8),
                            *id = ir_map_get(n, "exec_id", 7), *item = ir_map_get(n, "item", 4);

        printf("  %-8s %-7s line %-4lld", st != NULL ? ir_str_data(*st) : "?",
               kind != NULL ? ir_str_data(*kind) : "?", line != NULL ? (long long) line->u.i : 0);
        if (act != NULL) {
            const struct ir_val *call = ir_map_get(n, "call", 4);
            printf(" %s%s%s", call != NULL ? ir_str_data(*call) : "", call != NULL ? " " : "",
                   ir_str_data(*act));
        }
        if (att != NULL) {
            printf(" attempt %lld", (long long) att->u.i);
        }
        if (wake != NULL) {
            time_t t = (time_t) (wake->u.i / 1000);
            struct tm tm;
            char when[32];
            gmtime_r(&t, &tm);
            strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
            printf(" until %s", when);
        }
        if (pend != NULL && br != NULL) {
            printf(" %lld of %lld branches done", (long long) (br->u.i - pend->u.i),
                   (long long) br->u.i);
        }
        if (item != NULL) {
            short_json(*item, 40, &b);
            printf(" item %s", b.data);
        }
        if (id != NULL) {
            printf(" (exec %s)", ir_str_data(*id));
        }
        if (ir_map_get(n, "child_id", 8) != NULL) {
            printf(" child %s", ir_str_data(*ir_map_get(n, "child_id", 8)));
        }
        printf("\n");
    }
    cn_buf_fini(&b);
}

/* The live state of an instance whose stored snapshot is not all of it: a started instance
 * without one (its first step went out recorded by the claim), or one with steps recorded by
 * their results after it (docs/semantics.md, "Durability and replay"). Recomputed as a runner
 * resuming it would (rn_instance_resume), from snap (NULL: none; hex in the row) and the rows of
 * d (execution id, attempt, status, completed_at, hex result, step): all of them when
 * with_results, else only the steps. */
static cn_err
resumed_state(const struct ir_dag *dag, const char *id, const char *input_json,
              const struct cn_buf *snap, uint32_t state_step, PGresult *d, bool with_results,
              struct cn_buf *out, struct cn_errmsg *em)
{
    struct rn_exec_cfg cfg;
    struct rn_resume r;
    struct ir_val input = ir_null();
    struct rn_done *done = NULL;
    struct rn_instance *in = NULL;
    struct rn_step_out o;
    size_t n = 0;
    int row, rows = PQntuples(d);
    cn_err rv;

    memset(&cfg, 0, sizeof(cfg));
    memset(&r, 0, sizeof(r));
    memset(&o, 0, sizeof(o));
    o.result = ir_null();
    if (!cn_uuid_parse(id, r.instance_id.b)) {
        return cn_errmsg_set(em, CN_PARSE, "bad instance id");
    }
    if ((rv = ir_val_from_json(input_json, strlen(input_json), &input, em)) != CN_OK) {
        return rv;
    }
    done = calloc(rows > 0 ? (size_t) rows : 1, sizeof(*done));
    if (done == NULL) {
        ir_val_release(input);
        return CN_NOMEM;
    }
    for (row = 0; row < rows; row++) {
        struct rn_done *x = &done[n];
        struct cn_errmsg vem;
        size_t len = 0;
        unsigned char *raw;

        x->step = (uint32_t) strtoul(PQgetvalue(d, row, 5), NULL, 10); /* NULL reads "" */
        if (!with_results && x->step == 0) {
            continue;
        }
        raw = unhex(PQgetvalue(d, row, 4), &len);
        if (raw != NULL && cn_uuid_parse(PQgetvalue(d, row, 0), x->exec_id.b) &&
            ir_val_from_msgpack(raw, len, IR_MP_INTERNAL, &x->value, &vem) == CN_OK) {
            x->attempt = (uint32_t) strtoul(PQgetvalue(d, row, 1), NULL, 10);
            x->ok = strcmp(PQgetvalue(d, row, 2), "ok") == 0;
            n++;
        }
        free(raw);
    }
    r.snap = snap->len > 0 ? snap->data : NULL;
    r.len = snap->len;
    r.input = input;
    r.state_step = state_step;
    r.results = done;
    r.nresults = n;
    rv = rn_instance_resume(dag, &r, &cfg, cn_wall_ms(), &in, &o, em);
    if (rv == CN_OK) {
        rv = rn_instance_snapshot(in, out);
    }
    rn_instance_free(in);
    rn_step_out_fini(&o);
    while (n > 0) {
        ir_val_release(done[--n].value);
    }
    free(done);
    ir_val_release(input);
    return rv;
}

/* Whether d (resumed_state's rows) has a step after state_step. */
static bool
has_steps_after(PGresult *d, uint32_t state_step)
{
    int row;

    for (row = 0; row < PQntuples(d); row++) {
        if (strtoul(PQgetvalue(d, row, 5), NULL, 10) > state_step) {
            return true;
        }
    }
    return false;
}

int
ctl_cmd_inspect(int argc, char **argv)
{
    static const char *inst_sql =
        "SELECT ri.status, ri.workflow_name, wv.workflow_version, wv.source,"
        " encode(ri.state, 'hex'), ri.result::text, ri.error::text, ri.created_at,"
        " ri.started_at, ri.completed_at, q.scheduled_at, coalesce(q.lock_expires_at > now(),"
        " false), ri.input::text, ri.deadline_at, ri.redrive, ri.schedule_name,"
        " ri.schedule_slot, ri.state_step"
        " FROM cairn.runner_instances ri JOIN cairn.workflow_versions wv"
        " ON wv.id = ri.workflow_version_id LEFT JOIN cairn.queued_instances q ON q.instance_id"
        " = ri.instance_id WHERE ri.instance_id = $1";
    static const char *done_sql =
        "SELECT execution_id, attempt, status, completed_at, encode(result, 'hex'), step"
        " FROM cairn.runner_actions_done WHERE instance_id = $1 ORDER BY id";
    static const char *history_sql =
        "SELECT status, redriven_at, error->>'type', error->>'message',"
        " json_build_object('status', status, 'error', error, 'started_at', started_at,"
        " 'completed_at', completed_at, 'redriven_at', redriven_at, 'reason', reason)::text"
        " FROM cairn.instance_history WHERE instance_id = $1 ORDER BY id";
    struct cn_opt rows[] = {CTL_OPT_DB, CTL_OPT_JSON};
    struct cn_opts o = CTL_OPTS("inspect", "ID [--json]", rows, 1);
    const char *id;
    struct cn_errmsg em = {{0}};
    PGconn *c = NULL;
    PGresult *r = NULL, *d = NULL, *h = NULL;
    const char *params[1];
    struct ir_dag *dag = NULL;
    struct ir_val live = ir_null(), doc = ir_null(), acts = ir_null(), hist = ir_null();
    struct cn_buf b = CN_BUF_INIT, why = CN_BUF_INIT;
    bool ok = true;
    int status, row, nd;
    cn_err rv;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    id = o.nargs > 0 ? argv[0] : NULL;
    if (!ctl_check_uuid("inspect", id)) {
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) != EXIT_OK) {
        return status;
    }
    params[0] = id;
    if ((rv = rn_db_exec(c, inst_sql, 1, params, &r, &em)) != CN_OK ||
        (rv = rn_db_exec(c, done_sql, 1, params, &d, &em)) != CN_OK ||
        (rv = rn_db_exec(c, history_sql, 1, params, &h, &em)) != CN_OK) {
        status = ctl_db_error(&o, rv, &em);
        goto out;
    }
    if (PQntuples(r) == 0) {
        fprintf(stderr, "cairnctl inspect: no instance %s\n", id);
        status = EXIT_REJECTED;
        goto out;
    }
    /* The live graph, decoded against the instance's own version; recomputed for a started
     * instance without a snapshot, or with steps recorded by their results after it. */
    if (!PQgetisnull(r, 0, 4) || !PQgetisnull(r, 0, 8)) {
        struct ir_diags diags;
        const char *src = PQgetvalue(r, 0, 3);
        struct cn_buf snap = CN_BUF_INIT;
        bool running = strcmp(PQgetvalue(r, 0, 0), "running") == 0 ||
                       strcmp(PQgetvalue(r, 0, 0), "queued") == 0;
        uint32_t state_step = (uint32_t) strtoul(PQgetvalue(r, 0, 17), NULL, 10);
        struct cn_buf resumed = CN_BUF_INIT;
        const struct cn_buf *shown = &snap;

        ir_diags_init(&diags, "source", src, strlen(src));
        rv = ir_compile_source(src, strlen(src), &diags, &dag);
        ir_diags_fini(&diags);
        if (rv == CN_OK && !PQgetisnull(r, 0, 4)) {
            size_t len = 0;
            unsigned char *raw = unhex(PQgetvalue(r, 0, 4), &len);
            rv = raw != NULL && cn_buf_append(&snap, raw, len) == CN_OK ? CN_OK : CN_NOMEM;
            free(raw);
        }
        if (rv == CN_OK && (snap.len == 0 || has_steps_after(d, state_step))) {
            rv = resumed_state(dag, id, PQgetvalue(r, 0, 12), &snap, state_step, d, running,
                               &resumed, &em);
            shown = &resumed;
        }
        if (rv != CN_OK ||
            rn_snapshot_describe(dag, shown->data, shown->len, &live, &em) != CN_OK) {
            fprintf(stderr, "cairnctl inspect: the stored state cannot be decoded: %s\n",
                    dag == NULL ? "its version does not compile" : em.text);
            live = ir_null();
        }
        cn_buf_fini(&resumed);
        cn_buf_fini(&snap);
    }
    if (ir_list_new((size_t) PQntuples(d), &acts) != CN_OK) {
        status = EXIT_USAGE;
        goto out;
    }
    nd = PQntuples(d);
    for (row = 0; row < nd; row++) {
        struct ir_val m, v = ir_null();
        unsigned char *raw;
        size_t len = 0;

        if (ir_map_new(6, &m) != CN_OK) {
            ok = false;
            break;
        }
        kv_str(&m, "exec_id", PQgetvalue(d, row, 0), &ok);
        kv_set(&m, "attempt", ir_int(strtoll(PQgetvalue(d, row, 1), NULL, 10)), &ok);
        kv_str(&m, "status", PQgetvalue(d, row, 2), &ok);
        kv_str(&m, "completed_at", PQgetvalue(d, row, 3), &ok);
        raw = unhex(PQgetvalue(d, row, 4), &len);
        if (raw == NULL || ir_val_from_msgpack(raw, len, IR_MP_INTERNAL, &v, &em) != CN_OK) {
            v = ir_null();
        }
        free(raw);
        kv_set(&m, "value", v, &ok);
        ir_list_items(acts)[row] = m;
    }
    if (ok && ir_list_new((size_t) PQntuples(h), &hist) == CN_OK) {
        for (row = 0; row < PQntuples(h); row++) {
            struct cn_errmsg jem;
            if (ir_val_from_json(PQgetvalue(h, row, 4), (size_t) PQgetlength(h, row, 4),
                                 &ir_list_items(hist)[row], &jem) != CN_OK) {
                ir_list_items(hist)[row] = ir_null();
            }
        }
    } else {
        ok = false;
    }
    if (!ok || ir_map_new(20, &doc) != CN_OK) {
        fprintf(stderr, "cairnctl inspect: out of memory\n");
        status = EXIT_USAGE;
        goto out;
    }
    kv_str(&doc, "id", id, &ok);
    kv_str(&doc, "workflow", PQgetvalue(r, 0, 1), &ok);
    kv_str(&doc, "version", PQgetvalue(r, 0, 2), &ok);
    kv_str(&doc, "status", PQgetvalue(r, 0, 0), &ok);
    kv_json(&doc, "input", r, 0, 12, &ok);
    kv_str(&doc, "created_at", PQgetvalue(r, 0, 7), &ok);
    kv_str(&doc, "started_at", PQgetisnull(r, 0, 8) ? NULL : PQgetvalue(r, 0, 8), &ok);
    kv_str(&doc, "completed_at", PQgetisnull(r, 0, 9) ? NULL : PQgetvalue(r, 0, 9), &ok);
    kv_str(&doc, "due_at", PQgetisnull(r, 0, 10) ? NULL : PQgetvalue(r, 0, 10), &ok);
    kv_set(&doc, "leased", ir_bool(strcmp(PQgetvalue(r, 0, 11), "t") == 0), &ok);
    kv_str(&doc, "deadline_at", PQgetisnull(r, 0, 13) ? NULL : PQgetvalue(r, 0, 13), &ok);
    kv_set(&doc, "redrive_pending", ir_bool(strcmp(PQgetvalue(r, 0, 14), "t") == 0), &ok);
    kv_str(&doc, "schedule", PQgetisnull(r, 0, 15) ? NULL : PQgetvalue(r, 0, 15), &ok);
    kv_str(&doc, "schedule_slot", PQgetisnull(r, 0, 16) ? NULL : PQgetvalue(r, 0, 16), &ok);
    if ((status = ctl_wait_reasons(c, id, PQgetvalue(r, 0, 0), live, &why)) != EXIT_OK) {
        goto out;
    }
    {
        struct ir_val list;
        size_t off, nwhy = 0;
        for (off = 0; off < why.len; off += strlen(why.data + off) + 1) {
            nwhy++;
        }
        if (ir_list_new(nwhy, &list) != CN_OK) {
            ok = false;
        } else {
            for (off = 0, nwhy = 0; off < why.len; off += strlen(why.data + off) + 1) {
                if (ir_str_new(why.data + off, strlen(why.data + off),
                               &ir_list_items(list)[nwhy++]) != CN_OK) {
                    ok = false;
                    ir_list_items(list)[nwhy - 1] = ir_null();
                }
            }
            kv_set(&doc, "waiting_for", list, &ok);
        }
    }
    kv_set(&doc, "history", ir_val_retain(hist), &ok);
    kv_set(&doc, "waiting_on", ir_val_retain(live), &ok);
    kv_set(&doc, "actions", ir_val_retain(acts), &ok);
    kv_json(&doc, "result", r, 0, 5, &ok);
    kv_json(&doc, "error", r, 0, 6, &ok);
    if (!ok) {
        fprintf(stderr, "cairnctl inspect: out of memory\n");
        status = EXIT_USAGE;
        goto out;
    }
    if (ctl_json_out(&o)) {
        struct cn_buf fam = CN_BUF_INIT;
        if (ir_val_to_json(doc, &b, &em) != CN_OK) {
            fprintf(stderr, "cairnctl inspect: %s\n", em.text);
            status = EXIT_USAGE;
            goto out;
        }
        /* The family goes in as members of the same object: before its closing brace. */
        if ((status = ctl_inspect_family(c, id, true, &fam)) == EXIT_OK && b.len > 0) {
            b.data[b.len - 1] = '\0';
            printf("%s, %s}\n", b.data, fam.data != NULL ? fam.data : "");
        }
        cn_buf_fini(&fam);
        goto out;
    }
    printf("instance    %s\nworkflow    %s (version %s)\nstatus      %s%s\n", id,
           PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 0),
           strcmp(PQgetvalue(r, 0, 11), "t") == 0 ? " (leased by a runner)" : "");
    if (!PQgetisnull(r, 0, 10)) {
        printf("due         %s\n", PQgetvalue(r, 0, 10));
    }
    if (!PQgetisnull(r, 0, 13)) {
        printf("deadline    %s\n", PQgetvalue(r, 0, 13));
    }
    if (!PQgetisnull(r, 0, 15)) {
        printf("schedule    %s (%s%s)\n", PQgetvalue(r, 0, 15),
               PQgetisnull(r, 0, 16) ? "triggered by hand" : "slot ",
               PQgetisnull(r, 0, 16) ? "" : PQgetvalue(r, 0, 16));
    }
    {
        struct cn_buf fam = CN_BUF_INIT;
        if ((status = ctl_inspect_family(c, id, false, &fam)) != EXIT_OK) {
            cn_buf_fini(&fam);
            goto out;
        }
        fputs(fam.data != NULL ? fam.data : "", stdout);
        cn_buf_fini(&fam);
    }
    for (row = 0; row < PQntuples(h); row++) {
        printf("earlier run %s (%s: %s), retried at %s\n", PQgetvalue(h, row, 0),
               PQgetvalue(h, row, 2), PQgetvalue(h, row, 3), PQgetvalue(h, row, 1));
    }
    if (strcmp(PQgetvalue(r, 0, 14), "t") == 0) {
        printf("retried: what had not succeeded starts over when a runner claims it\n");
    }
    for (size_t off = 0; off < why.len; off += strlen(why.data + off) + 1) {
        printf("waiting for %s\n", why.data + off);
    }
    if (live.type == IR_T_LIST) {
        print_live(live, strcmp(PQgetvalue(r, 0, 0), "queued") != 0 &&
                             strcmp(PQgetvalue(r, 0, 0), "running") != 0);
    }
    printf("action results recorded: %d\n", nd);
    for (row = 0; row < nd; row++) {
        struct ir_val a = ir_list_items(acts)[row];
        const struct ir_val *val = ir_map_get(a, "value", 5);
        short_json(val != NULL ? *val : ir_null(), 60, &b);
        printf("  %s attempt %s %-5s %s\n", PQgetvalue(d, row, 0), PQgetvalue(d, row, 1),
               PQgetvalue(d, row, 2), b.data);
    }
    if (!PQgetisnull(r, 0, 5)) {
        printf("result      %s\n", PQgetvalue(r, 0, 5));
    }
    if (!PQgetisnull(r, 0, 6)) {
        printf("error       %s\n", PQgetvalue(r, 0, 6));
    }
out:
    ir_val_release(live);
    ir_val_release(doc);
    ir_val_release(acts);
    ir_val_release(hist);
    ir_dag_free(dag);
    cn_buf_fini(&b);
    cn_buf_fini(&why);
    PQclear(r);
    PQclear(d);
    PQclear(h);
    PQfinish(c);
    return status;
}
