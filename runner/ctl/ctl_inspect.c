/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl inspect`: one instance whole, for people or as JSON: its record, what it waits on,
 * its snapshot described, every action result recorded, its parent and children.
 */

#include <jansson.h>

#include "ir/base/clock.h"
#include "runner/ctl/ctl.h"
#include "runner/exec/exec.h"
#include "runner/store/db.h"

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
