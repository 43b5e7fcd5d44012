/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl register`: a workflow's source compiled and stored as a version
 * (cairn.register_version), its child workflow calls checked against the versions registered, its
 * limits and retention set when asked.
 */

#include <jansson.h>

#include "ir/base/xalloc.h"
#include "ir/eval.h"
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

/* The text array literal of the signal names the workflow's waits take (for
 * workflow_versions.signals, which cairn.signal checks), in *out: each wait's names (joined by
 * ',' in its node), once each. Names are identifiers: nothing in them needs quoting. */
static bool
signals_literal(const struct ir_dag *dag, struct cn_buf *out)
{
    uint32_t i;
    bool ok = cn_buf_putc(out, '{') == CN_OK, first = true;

    for (i = 0; ok && i < dag->nnodes; i++) {
        const struct ir_node *t = &dag->nodes[i];
        const char *p;

        if (t->kind != IR_N_ACTION || t->call != IR_CALL_WAIT) {
            continue;
        }
        for (p = t->name; ok && *p != '\0';) {
            size_t len = strcspn(p, ",");
            char quoted[IR_MAX_WAIT_NAME + 4];
            (void) snprintf(quoted, sizeof(quoted), "\"%.*s\"", (int) len, p);
            ok = cn_buf_puts(out, "") == CN_OK; /* terminated, for strstr */
            if (ok && strstr(out->data, quoted) == NULL) {
                ok = cn_buf_printf(out, "%s%s", first ? "" : ",", quoted) == CN_OK;
                first = false;
            }
            p += len + (p[len] == ',');
        }
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

/* A call naming a workflow that is not registered: an error at the call, or with
 * allow_missing a warning (a child registered later fails the call at run time with
 * ChildWorkflowNotFound). */
static void
missing_child(struct ir_diags *d, const char *file, const struct ir_node *t, bool allow_missing)
{
    const char *v1 = t->version ? " version \"" : "", *v = t->version ? t->version : "",
               *v2 = t->version ? "\"" : "";

    if (allow_missing) {
        fprintf(stderr,
                "%s:%u:%u: warning: no workflow \"%s\"%s%s%s is registered yet: the call raises "
                "ChildWorkflowNotFound if it is not when it runs\n",
                file, t->line, t->col, t->name, v1, v, v2);
    } else {
        ir_diags_add(d, t->line, t->col,
                     "no workflow \"%s\"%s%s%s is registered (register it first, or pass "
                     "--allow-missing-children to check it when the call runs)",
                     t->name, v1, v, v2);
    }
}

/* Checks call t's arguments against names[0..n), the child's inputs: each argument is one of
 * them, and each of them is given. Returns false when out of memory. */
static bool
check_call_args(struct ir_diags *d, const struct ir_node *t, const char *const *names, size_t n,
                const bool *optional)
{
    struct cn_buf shown = CN_BUF_INIT;
    bool ok = true;
    uint32_t k;
    size_t j;

    for (j = 0; ok && j < n; j++) {
        ok = cn_buf_printf(&shown, "%s%s", j ? ", " : "", names[j]) == CN_OK;
    }
    if (ok && cn_buf_puts(&shown, n ? "" : "none") != CN_OK) {
        ok = false;
    }
    for (k = 0; ok && k < t->nargs; k++) {
        if (!has_name(names, n, t->argnames[k])) {
            ir_diags_add(d, t->line, t->col, "%s has no input '%s' (its inputs: %s)", t->name,
                         t->argnames[k], shown.data);
        }
    }
    for (j = 0; ok && j < n; j++) { /* every input of the child's main without a default */
        if ((optional == NULL || !optional[j]) && !has_name(t->argnames, t->nargs, names[j])) {
            ir_diags_add(d, t->line, t->col, "%s needs input '%s' (its inputs: %s)", t->name,
                         names[j], shown.data);
        }
    }
    cn_buf_fini(&shown);
    return ok;
}

/* check_call_args against a registered child's inputs, a JSON array of names. */
static bool
check_call_json(struct ir_diags *d, const struct ir_node *t, const char *inputs)
{
    struct ir_val list = ir_null();
    struct cn_errmsg em;
    const char **names = NULL;
    size_t n = 0, j;
    bool ok = true;

    if (ir_val_from_json(inputs, strlen(inputs), &list, &em) == CN_OK && list.type == IR_T_LIST) {
        n = ir_list_len(list);
        names = calloc(n ? n : 1, sizeof(*names));
        for (j = 0; names != NULL && j < n; j++) {
            struct ir_val v = ir_list_items(list)[j];
            names[j] = v.type == IR_T_STR ? ir_str_data(v) : "";
        }
        ok = names != NULL;
    }
    ok = ok && check_call_args(d, t, names, n, NULL);
    free(names);
    ir_val_release(list);
    return ok;
}

/* check_call_args against a registered child's typed inputs (its JSON Schema, cairn.enqueue's:
 * those with a default may be left out), then each argument that is a constant checked against
 * its type by the database's own check, so that register says what the child's start would. */
static int
check_call_schema(const struct cn_opts *o, PGconn *c, struct ir_diags *d, const struct ir_dag *dag,
                  const struct ir_node *t, const char *schema)
{
    struct ir_val doc = ir_null();
    const struct ir_val *props, *req;
    struct cn_errmsg em;
    const char **names = NULL;
    bool *optional = NULL, ok = true;
    size_t n = 0, j, k;
    int status = EXIT_OK;

    if (ir_val_from_json(schema, strlen(schema), &doc, &em) != CN_OK || doc.type != IR_T_MAP ||
        (props = ir_map_get(doc, "properties", 10)) == NULL || props->type != IR_T_MAP ||
        (req = ir_map_get(doc, "required", 8)) == NULL || req->type != IR_T_LIST) {
        ir_val_release(doc);
        return EXIT_OK; /* not one the compiler wrote: the child's start checks it */
    }
    n = ir_map_len(*props);
    names = calloc(n ? n : 1, sizeof(*names));
    optional = calloc(n ? n : 1, sizeof(*optional));
    for (j = 0; names != NULL && optional != NULL && j < n; j++) {
        names[j] = ir_str_data(ir_map_key_at(*props, j));
        optional[j] = true;
        for (k = 0; k < ir_list_len(*req); k++) {
            struct ir_val r = ir_list_items(*req)[k];
            if (r.type == IR_T_STR && strcmp(ir_str_data(r), names[j]) == 0) {
                optional[j] = false;
            }
        }
    }
    ok = names != NULL && optional != NULL && check_call_args(d, t, names, n, optional);
    for (k = 0; ok && status == EXIT_OK && k < t->nargs; k++) {
        struct cn_buf js = CN_BUF_INIT;
        const char *params[3];
        PGresult *r = NULL;
        struct ir_val v;
        cn_err rv;
        if (!has_name(names, n, t->argnames[k])) {
            continue;
        }
        /* A constant (names raise, and so do the instance's builtins): computed arguments are
         * the child's start's to check. */
        if ((rv = ir_eval_const(&dag->exprs, t->argexprs[k], &v)) != CN_OK) {
            if (rv == CN_RAISED) {
                ir_val_release(v);
            }
            continue;
        }
        rv = ir_val_to_json(v, &js, &em);
        ir_val_release(v);
        if (rv != CN_OK) {
            cn_buf_fini(&js);
            continue; /* not JSON (a float NaN, say): the start refuses it */
        }
        params[0] = schema;
        params[1] = t->argnames[k];
        params[2] = js.data;
        status = ctl_query(o, c,
                           "SELECT cairn.schema_mismatch($1::jsonb->'properties'->$2, $3::jsonb,"
                           " 'input.' || $2) AS why",
                           3, params, &r);
        if (status == EXIT_OK && ctl_col_opt(r, 0, "why") != NULL) {
            ir_diags_add(d, t->line, t->col, "%s: %s", t->name, ctl_col(r, 0, "why"));
        }
        PQclear(r);
        cn_buf_fini(&js);
    }
    free(names);
    free(optional);
    ir_val_release(doc);
    if (!ok) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        return EXIT_USAGE;
    }
    return status;
}

/* One child call t: its inputs looked up among the registered versions (a recursive call to
 * self: this very version's), then checked. Returns EXIT_OK or the status after printing. */
static int
check_child_call(const struct cn_opts *o, PGconn *c, const char *file, struct ir_diags *d,
                 const struct ir_dag *dag, const struct ir_node *t, const char *self,
                 bool allow_missing)
{
    const char *params[2] = {t->name, t->version}, *inputs;
    const struct ir_node *e = &dag->nodes[dag->entry];
    PGresult *r = NULL;
    int status = EXIT_OK;
    bool ok = true;

    if (strcmp(t->name, self) == 0 && t->version == NULL) {
        bool *optional = cn_xcalloc(e->ntargets ? e->ntargets : 1, sizeof(*optional));
        uint32_t k;
        for (k = 0; k < e->nargs; k++) {
            optional[k] = e->argexprs[k] != IR_NO_EXPR; /* an input with a default */
        }
        ok = check_call_args(d, t, e->targets, e->ntargets, optional);
        free(optional);
    } else if ((status = ctl_query(o, c,
                                   "SELECT array_to_json(inputs)::text AS inputs,"
                                   " input_schema::text AS schema FROM"
                                   " cairn.workflow_versions WHERE workflow_name = $1 AND"
                                   " ($2::text IS NULL OR workflow_version = $2) AND tenant_id ="
                                   " cairn.current_tenant() ORDER BY created_at DESC LIMIT 1",
                                   2, params, &r)) != EXIT_OK) {
        return status;
    } else if (PQntuples(r) == 0) {
        missing_child(d, file, t, allow_missing);
    } else if (ctl_col_opt(r, 0, "schema") != NULL) {
        status = check_call_schema(o, c, d, dag, t, ctl_col(r, 0, "schema"));
    } else if ((inputs = ctl_col_opt(r, 0, "inputs")) != NULL) {
        /* NULL: registered before inputs were recorded */
        ok = check_call_json(d, t, inputs);
    }
    PQclear(r);
    if (!ok) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* Ends a check that collected diagnostics in *d (freed here): with status EXIT_OK and some
 * diagnostics, prints them and returns EXIT_REJECTED; else returns status. */
static int
diags_report(struct ir_diags *d, int status)
{
    struct cn_buf msg = CN_BUF_INIT;

    if (status == EXIT_OK && d->len > 0) {
        if (ir_diags_format(d, &msg) == CN_OK) {
            fputs(msg.data, stderr);
        }
        status = EXIT_REJECTED;
    }
    cn_buf_fini(&msg);
    ir_diags_fini(d);
    return status;
}

/* Checks the child calls (run/start) of dag against the workflows they name, as registered now
 * (self: the workflow being registered, whose own inputs its recursive calls must fit). A call
 * whose inputs do not fit is an error at its line:col; so is one naming a workflow that is not
 * registered, unless allow_missing. Returns EXIT_OK, or the status after printing. */
static int
check_child_calls(const struct cn_opts *o, PGconn *c, const char *file, const char *src, size_t len,
                  const struct ir_dag *dag, const char *self, bool allow_missing)
{
    struct ir_diags d;
    int status = EXIT_OK;
    uint32_t i;

    ir_diags_init(&d, file, src, len);
    for (i = 0; i < dag->nnodes && status == EXIT_OK; i++) {
        const struct ir_node *t = &dag->nodes[i];

        if (t->kind == IR_N_ACTION && ir_call_is_child(t->call)) {
            status = check_child_call(o, c, file, &d, dag, t, self, allow_missing);
        }
    }
    return diags_report(&d, status);
}

/* The version defaults to the first 12 hex digits of the graph's hash: unchanged source maps to
 * the same row (a no-op), changed source to a new version. */
static const char *const insert_sql =
    "SELECT id, workflow_version, ir_hash FROM cairn.register_version($1, $2, $3::bytea, $4,"
    " nullif($5::bigint, 0), $6::text[], $7::text[], $8::jsonb, $9::boolean)";
/* Names are per tenant. Row security keeps a tenant to its own rows, but the schema owner sees
 * every tenant's and registers in tenant default: hence the tenant_id filters. */
static const char *const existing_sql =
    "SELECT id, workflow_version, ir_hash, "
    /* The same source is unchanged even when a newer compiler encodes its graph (and so its
     * hash) differently, as DAG format 3 did. */
    "(ir_hash = encode(sha256($3::bytea), 'hex') OR source = $4) AS same "
    "FROM cairn.workflow_versions "
    "WHERE workflow_name = $1 AND workflow_version = coalesce($2, left(encode(sha256("
    "$3::bytea), 'hex'), 12)) AND tenant_id = cairn.current_tenant()";

/* The workflow's name (--name, else the file's) in *name (free it) and --version, each checked
 * as the schema allows it. */
static int
register_name(const struct cn_opts *o, const char *file, char **name)
{
    const char *version = cn_opts_str(o, "version");

    *name = cn_opts_str(o, "name") != NULL ? strdup(cn_opts_str(o, "name")) : default_name(file);
    if (*name == NULL || !ctl_name_ok(*name)) {
        fprintf(stderr,
                "%s: workflow name '%s' is not valid (letters, digits, _ . -; starting with a "
                "letter or _; at most 128): use --name\n",
                o->prog, *name != NULL ? *name : "");
        return EXIT_REJECTED;
    }
    if (version != NULL && !ctl_version_ok(version)) {
        fprintf(stderr, "%s: version '%s' is not valid (1-64 of letters, digits, _ . -)\n", o->prog,
                version);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* The canonical graph encoding, as \x hex text for a bytea parameter; false when out of
 * memory. */
static bool
dag_hex(const struct ir_dag *dag, struct cn_buf *hex)
{
    struct cn_buf enc = CN_BUF_INIT;
    bool ok = ir_dag_encode(dag, &enc) == CN_OK && cn_buf_puts(hex, "\\x") == CN_OK;
    size_t i;

    for (i = 0; ok && i < enc.len; i++) {
        ok = cn_buf_printf(hex, "%02x", (unsigned char) enc.data[i]) == CN_OK;
    }
    cn_buf_fini(&enc);
    return ok;
}

/* What is stored besides the source: the graph as hex text in *hex, the entry's inputs and the
 * signal names its waits take as array literals in *inputs and *signals. A source with a NUL
 * byte cannot be stored as text. */
static int
encode_version(const struct cn_opts *o, const char *file, const char *src, size_t src_len,
               const struct ir_dag *dag, struct cn_buf *hex, struct cn_buf *inputs,
               struct cn_buf *signals)
{
    if (strlen(src) != src_len) {
        fprintf(stderr, "%s: %s contains a NUL byte\n", o->prog, file);
        return EXIT_REJECTED;
    }
    if (!dag_hex(dag, hex) || !inputs_literal(dag, inputs) || !signals_literal(dag, signals)) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* Stores the version (params: name, version, graph, source, timeout, inputs, signals, the inputs'
 * schema or NULL, whether it has finally blocks), or finds the
 * same one stored already: *r holds its id, workflow_version and ir_hash, *created whether this
 * call made it. A version of that name holding other source is refused. */
static int
store_version(const struct cn_opts *o, PGconn *c, const char *const *params, PGresult **r,
              bool *created)
{
    int status;

    if ((status = ctl_query(o, c, insert_sql, 9, params, r)) != EXIT_OK) {
        return status;
    }
    if ((*created = PQntuples(*r) == 1)) {
        return EXIT_OK;
    }
    PQclear(*r);
    *r = NULL;
    if ((status = ctl_query(o, c, existing_sql, 4, params, r)) != EXIT_OK) {
        return status;
    }
    if (PQntuples(*r) != 1) { /* deleted in between: vanishingly rare; say so */
        fprintf(stderr, "%s: the version changed meanwhile; try again\n", o->prog);
        return EXIT_DB;
    }
    if (!ctl_col_true(*r, 0, "same")) {
        fprintf(stderr,
                "%s: %s version %s is already registered with different source; register it "
                "under a new --version\n",
                o->prog, params[0], ctl_col(*r, 0, "workflow_version"));
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* --max-running and --max-per-key, when given: the workflow's limits (ctl_limit_apply). */
static int
register_limits(const struct cn_opts *o, PGconn *c, const char *name)
{
    const char *max = cn_opts_str(o, "max-running"), *per_key = cn_opts_str(o, "max-per-key");

    if (max == NULL && per_key == NULL) {
        return EXIT_OK;
    }
    return ctl_limit_apply(o, c, name, max, max == NULL, per_key, NULL);
}

int
ctl_cmd_register(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("name", "N", "workflow name (default: the file name without .cairn)"),
        CTL_OPT_STR("version", "V", "version (default: 12 hex digits of the graph's hash)"),
        CTL_OPT_BOOL("allow-missing-children",
                     "register although a child workflow it calls is not registered yet (the call "
                     "is checked when it runs)"),
        CTL_OPT_INT(
            "max-running", NULL, 1, 1000000, NULL,
            "at most N instances of the workflow run at once (cairnctl limit set changes it)"),
        CTL_OPT_INT("max-per-key", NULL, 1, 1000000, "M",
                    "at most M instances with the same --concurrency-key run at once (default 1)"),
        CTL_OPT_COMPILE_LIMITS,
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    struct cn_buf hex = CN_BUF_INIT, inputs = CN_BUF_INIT, signals = CN_BUF_INIT;
    struct ir_compile_limits lim;
    struct ir_dag *dag = NULL;
    PGconn *c = NULL;
    PGresult *r = NULL;
    char *src = NULL, *name = NULL;
    const char *file, *params[9];
    size_t src_len = 0;
    char timeout[24];
    bool created = false;
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    file = argv[0];
    lim = ctl_compile_limits(&o);
    if ((status = register_name(&o, file, &name)) != EXIT_OK ||
        (status = ctl_compile_file(file, &lim, &dag, &src, &src_len)) != EXIT_OK) {
        goto out;
    }
    if ((status = encode_version(&o, file, src, src_len, dag, &hex, &inputs, &signals)) !=
            EXIT_OK ||
        (status = ctl_db_open(&o, &c)) != EXIT_OK ||
        (status = check_child_calls(&o, c, file, src, src_len, dag, name,
                                    cn_opts_bool(&o, "allow-missing-children"))) != EXIT_OK) {
        goto out;
    }
    params[0] = name;
    params[1] = cn_opts_str(&o, "version");
    params[2] = hex.data;
    params[3] = src;
    (void) snprintf(timeout, sizeof(timeout), "%lld", (long long) dag->timeout_ms);
    params[4] = timeout; /* the workflow's [timeout: D] (its graph's hash covers it too) */
    params[5] = inputs.data;
    params[6] = signals.data;
    params[7] = dag->nodes[dag->entry].name; /* its typed inputs' schema (NULL: none typed) */
    params[8] = ir_dag_has_finally(dag) ? "true" : "false";
    if ((status = store_version(&o, c, params, &r, &created)) != EXIT_OK ||
        (status = register_limits(&o, c, name)) != EXIT_OK) {
        goto out;
    }
    if (ctl_json_out(&o)) {
        printf("{\"name\": \"%s\", \"version\": \"%s\", \"id\": \"%s\", \"ir_hash\": \"%s\", "
               "\"created\": %s}\n",
               name, ctl_col(r, 0, "workflow_version"), ctl_col(r, 0, "id"),
               ctl_col(r, 0, "ir_hash"), created ? "true" : "false");
    } else {
        printf("%s version %s %s (%u nodes)\n", name, ctl_col(r, 0, "workflow_version"),
               created ? "registered" : "already registered, unchanged", dag->nnodes);
    }
out:
    PQclear(r);
    PQfinish(c);
    cn_buf_fini(&hex);
    cn_buf_fini(&inputs);
    cn_buf_fini(&signals);
    ir_dag_free(dag);
    free(src);
    free(name);
    return status;
}

/* `cairnctl schema WORKFLOW [--version V]`: the JSON Schema (2020-12) of the inputs the newest
 * (or the given) version takes, as cairn.enqueue checks them. A version without typed inputs
 * takes any value for each of its inputs, all of them required, and other keys besides (as
 * every version did before inputs had types). */
static const char *const schema_sql = "SELECT v.workflow_version, v.input_schema::text AS schema,"
                                      " coalesce(array_to_json(v.inputs), '[]')::text AS inputs"
                                      " FROM cairn.find_version('cairnctl schema', $1, $2) v";

int
ctl_cmd_schema(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("version", "V", "this version of the workflow (default: the newest)"),
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    const char *params[2];
    json_error_t jerr;
    json_t *doc = NULL;
    PGresult *r = NULL;
    char *text;
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    params[0] = argv[0];
    params[1] = cn_opts_str(&o, "version");
    if ((status = ctl_query_once(&o, schema_sql, 2, params, &r)) != EXIT_OK) {
        return status;
    }
    if (ctl_col_opt(r, 0, "schema") != NULL) {
        doc = json_loads(ctl_col(r, 0, "schema"), 0, &jerr);
    } else {
        json_t *inputs = json_loads(ctl_col(r, 0, "inputs"), 0, &jerr), *props = json_object();
        size_t i;
        json_t *name;
        json_array_foreach(inputs, i, name)
        {
            (void) json_object_set_new(props, json_string_value(name), json_object());
        }
        /* o and O: the document takes props, and a reference to inputs */
        doc = json_pack("{s:s,s:s,s:o,s:O,s:b}", "$schema",
                        "https://json-schema.org/draft/2020-12/schema", "type", "object",
                        "properties", props, "required", inputs, "additionalProperties", 1);
        json_decref(inputs);
    }
    if (doc != NULL) {
        (void) json_object_set_new(doc, "title", json_string(argv[0]));
    }
    text = doc != NULL ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    PQclear(r);
    if (text == NULL) {
        fprintf(stderr, "%s: out of memory\n", o.prog);
        return EXIT_USAGE;
    }
    printf("%s\n", text);
    free(text);
    return EXIT_OK;
}
