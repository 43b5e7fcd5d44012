/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl register`: a workflow's source compiled and stored as a version
 * (cairn.register_version), its child workflow calls checked against the versions registered, its
 * limits and retention set when asked.
 */

#include <jansson.h>

#include "runner/ctl/ctl.h"
#include "runner/exec/exec.h"
#include "runner/store/db.h"

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
    if (name == NULL || !ctl_name_ok(name)) {
        fprintf(stderr,
                "cairnctl register: workflow name '%s' is not valid (letters, digits, _ . -; "
                "starting with a letter or _; at most 128): use --name\n",
                name != NULL ? name : "");
        free(name);
        return EXIT_REJECTED;
    }
    if (version != NULL && !ctl_version_ok(version)) {
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
