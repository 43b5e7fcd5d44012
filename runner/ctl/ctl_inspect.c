/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl inspect`: one instance whole, for people or as JSON: its record, what it waits on,
 * its snapshot described, every action result recorded, its parent and children.
 */

#include <jansson.h>

#include "ir/base/clock.h"
#include "runner/ctl/ctl.h"
#include "runner/exec/exec.h"
#include "runner/store/backend.h"
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

/* A jsonb column's text (NULL: SQL NULL) as a value; NULL stays None. */
static void
kv_json(struct ir_val *m, const char *key, const char *json, bool *ok)
{
    struct ir_val v = ir_null();
    struct cn_errmsg em;

    if (json != NULL && ir_val_from_json(json, strlen(json), &v, &em) != CN_OK) {
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
 * d (done_sql's): all of them when with_results, else only the steps. */
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
        size_t len = 0;
        unsigned char *raw;

        x->step = (uint32_t) ctl_col_int(d, row, "step"); /* 0 for NULL */
        if (!with_results && x->step == 0) {
            continue;
        }
        raw = unhex(ctl_col(d, row, "result"), &len);
        if (raw != NULL && cn_uuid_parse(ctl_col(d, row, "execution_id"), x->exec_id.b) &&
            rn_stored_value((const char *) raw, len, strcmp(ctl_col(d, row, "status"), "json") == 0,
                            &x->value)) {
            x->attempt = (uint32_t) ctl_col_int(d, row, "attempt");
            x->ok = strcmp(ctl_col(d, row, "status"), "error") != 0;
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
        if ((uint32_t) ctl_col_int(d, row, "step") > state_step) {
            return true;
        }
    }
    return false;
}

/* ---- fetch, decode, print ------------------------------------------------------------------ */

static const char *const inst_sql =
    "SELECT ri.status, ri.workflow_name, wv.workflow_version, wv.source,"
    " encode(ri.state, 'hex') AS state, ri.result::text AS result, ri.error::text AS error,"
    " ri.created_at, ri.started_at, ri.completed_at, q.scheduled_at,"
    " coalesce(q.lock_expires_at > now(), false) AS leased, ri.input::text AS input,"
    " ri.deadline_at, ri.redrive, ri.schedule_name, ri.schedule_slot, ri.state_step,"
    " ri.cleanup_until, CASE WHEN ri.cleanup_until IS NULL THEN NULL"
    " WHEN ri.cancel_requested_at IS NOT NULL THEN 'cancel' ELSE 'timeout' END AS cleanup_after"
    " FROM cairn.runner_instances ri JOIN cairn.workflow_versions wv"
    " ON wv.id = ri.workflow_version_id LEFT JOIN cairn.queued_instances q ON q.instance_id"
    " = ri.instance_id WHERE ri.instance_id = $1";
static const char *const done_sql =
    "SELECT execution_id, attempt, status, completed_at, encode(result, 'hex') AS result, step"
    " FROM cairn.runner_actions_done WHERE instance_id = $1 ORDER BY id";
static const char *const history_sql =
    "SELECT status, redriven_at, error->>'type' AS error_type, error->>'message' AS"
    " error_message, json_build_object('status', status, 'error', error, 'started_at',"
    " started_at, 'completed_at', completed_at, 'redriven_at', redriven_at, 'reason',"
    " reason)::text AS json"
    " FROM cairn.instance_history WHERE instance_id = $1 ORDER BY id";

/* What the outside world sent it (the latest INSPECT_SIGNALS signals, with how many there are
 * and how many wait to be taken) and what it published. Each row also as one JSON object. */
#define INSPECT_SIGNALS 100
#define INSPECT_STR_(x) #x
#define INSPECT_STR(x)  INSPECT_STR_(x)
static const char *const signals_sql =
    "SELECT * FROM (SELECT id, name, payload::text AS payload, sent_at, consumed_exec,"
    " consumed_at, count(*) OVER () AS total, count(*) FILTER (WHERE consumed_at IS NULL) OVER ()"
    " AS buffered, json_build_object('name', name, 'payload', payload, 'dedup_key', dedup_key,"
    " 'sent_at', sent_at, 'sent_by', sent_by, 'consumed_by', consumed_exec, 'consumed_attempt',"
    " consumed_attempt, 'consumed_at', consumed_at)::text AS json FROM cairn.signals WHERE"
    " instance_id = $1 ORDER BY id DESC LIMIT " INSPECT_STR(INSPECT_SIGNALS) ") s ORDER BY id";
static const char *const published_sql =
    "SELECT name, value::text AS value, version, published_at, json_build_object('name', name,"
    " 'value', value, 'version', version, 'published_at', published_at)::text AS json FROM"
    " cairn.published WHERE instance_id = $1 ORDER BY name";

/* One instance as inspect shows it: the rows read, then the values made of them. */
struct inspection {
    const char *id;
    PGresult *r, *d, *h; /* the instance (inst_sql), its action results, its history */
    PGresult *sg, *pb;   /* its signals (signals_sql), its published values (published_sql) */
    struct ir_dag *dag;  /* its version, compiled */
    struct ir_val live;  /* its live graph (rn_snapshot_describe), or null */
    struct ir_val acts;  /* the action results, each a map */
    struct ir_val doc;   /* the whole, for --json */
    struct cn_buf why;   /* why it is not moving (ctl_wait_reasons) */
};

static void
inspection_fini(struct inspection *in)
{
    ir_val_release(in->live);
    ir_val_release(in->acts);
    ir_val_release(in->doc);
    ir_dag_free(in->dag);
    cn_buf_fini(&in->why);
    PQclear(in->r);
    PQclear(in->d);
    PQclear(in->h);
    PQclear(in->sg);
    PQclear(in->pb);
}

static bool
is_unfinished(const char *status)
{
    return strcmp(status, "running") == 0 || strcmp(status, "queued") == 0;
}

/* The instance's statements, one table each. */
static int
fetch(const struct cn_opts *o, PGconn *c, struct inspection *in)
{
    const char *params[1] = {in->id};
    int status;

    if ((status = ctl_query(o, c, inst_sql, 1, params, &in->r)) != EXIT_OK ||
        (status = ctl_query(o, c, done_sql, 1, params, &in->d)) != EXIT_OK ||
        (status = ctl_query(o, c, history_sql, 1, params, &in->h)) != EXIT_OK ||
        (status = ctl_query(o, c, signals_sql, 1, params, &in->sg)) != EXIT_OK ||
        (status = ctl_query(o, c, published_sql, 1, params, &in->pb)) != EXIT_OK) {
        return status;
    }
    if (PQntuples(in->r) == 0) {
        fprintf(stderr, "%s: no instance %s\n", o->prog, in->id);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* The live graph, decoded against the instance's own version; recomputed for a started instance
 * without a snapshot, or with steps recorded by their results after it. One that cannot be
 * decoded is said so and shown as none. */
static void
decode_live(struct inspection *in)
{
    const char *src = ctl_col(in->r, 0, "source"), *state = ctl_col_opt(in->r, 0, "state");
    uint32_t state_step = (uint32_t) ctl_col_int(in->r, 0, "state_step");
    struct cn_buf snap = CN_BUF_INIT, resumed = CN_BUF_INIT;
    const struct cn_buf *shown = &snap;
    struct cn_errmsg em = {{0}};
    struct ir_diags diags;
    cn_err rv;

    if (state == NULL && ctl_col_opt(in->r, 0, "started_at") == NULL) {
        return; /* not started: nothing to show */
    }
    ir_diags_init(&diags, "source", src, strlen(src));
    rv = ir_compile_source(src, strlen(src), &diags, &in->dag);
    ir_diags_fini(&diags);
    if (rv == CN_OK && state != NULL) {
        size_t len = 0;
        unsigned char *raw = unhex(state, &len);
        rv = raw != NULL && cn_buf_append(&snap, raw, len) == CN_OK ? CN_OK : CN_NOMEM;
        free(raw);
    }
    if (rv == CN_OK && (snap.len == 0 || has_steps_after(in->d, state_step))) {
        rv = resumed_state(in->dag, in->id, ctl_col(in->r, 0, "input"), &snap, state_step, in->d,
                           is_unfinished(ctl_col(in->r, 0, "status")), &resumed, &em);
        shown = &resumed;
    }
    if (rv != CN_OK ||
        rn_snapshot_describe(in->dag, shown->data, shown->len, &in->live, &em) != CN_OK) {
        fprintf(stderr, "cairnctl inspect: the stored state cannot be decoded: %s\n",
                in->dag == NULL ? "its version does not compile" : em.text);
        in->live = ir_null();
    }
    cn_buf_fini(&resumed);
    cn_buf_fini(&snap);
}

/* The action results as a list of maps (exec_id, attempt, status, completed_at, value). Returns
 * false when out of memory. */
static bool
actions_value(struct inspection *in)
{
    int row, nd = PQntuples(in->d);
    bool ok = true;

    if (ir_list_new((size_t) nd, &in->acts) != CN_OK) {
        return false;
    }
    for (row = 0; row < nd; row++) {
        struct ir_val m, v = ir_null();
        unsigned char *raw;
        size_t len = 0;

        if (ir_map_new(6, &m) != CN_OK) {
            return false;
        }
        kv_str(&m, "exec_id", ctl_col(in->d, row, "execution_id"), &ok);
        kv_set(&m, "attempt", ir_int(ctl_col_int(in->d, row, "attempt")), &ok);
        kv_str(&m, "status", ctl_col(in->d, row, "status"), &ok);
        kv_str(&m, "completed_at", ctl_col(in->d, row, "completed_at"), &ok);
        raw = unhex(ctl_col(in->d, row, "result"), &len);
        if (raw == NULL ||
            !rn_stored_value((const char *) raw, len,
                             strcmp(ctl_col(in->d, row, "status"), "json") == 0, &v)) {
            v = ir_null();
        }
        free(raw);
        kv_set(&m, "value", v, &ok);
        ir_list_items(in->acts)[row] = m;
    }
    return ok;
}

/* Rows with a "json" column (the earlier runs, the signals, the values) as a list of those
 * objects. */
static bool
json_rows_value(const PGresult *h, struct ir_val *hist)
{
    int row;

    if (ir_list_new((size_t) PQntuples(h), hist) != CN_OK) {
        return false;
    }
    for (row = 0; row < PQntuples(h); row++) {
        const char *json = ctl_col(h, row, "json");
        struct cn_errmsg jem;
        if (ir_val_from_json(json, strlen(json), &ir_list_items(*hist)[row], &jem) != CN_OK) {
            ir_list_items(*hist)[row] = ir_null();
        }
    }
    return true;
}

/* The reasons of ctl_wait_reasons (NUL-separated) as a list of strings, set as waiting_for. */
static void
set_waiting_for(struct ir_val *doc, const struct cn_buf *why, bool *ok)
{
    struct ir_val list;
    size_t off, n = 0;

    for (off = 0; off < why->len; off += strlen(why->data + off) + 1) {
        n++;
    }
    if (ir_list_new(n, &list) != CN_OK) {
        *ok = false;
        return;
    }
    for (off = 0, n = 0; off < why->len; off += strlen(why->data + off) + 1) {
        if (ir_str_new(why->data + off, strlen(why->data + off), &ir_list_items(list)[n++]) !=
            CN_OK) {
            *ok = false;
            ir_list_items(list)[n - 1] = ir_null();
        }
    }
    kv_set(doc, "waiting_for", list, ok);
}

/* The members of --json's object, in its order; false when out of memory. */
static bool
build_doc(struct inspection *in, struct ir_val hist)
{
    const PGresult *r = in->r;
    struct ir_val sig = ir_null(), pub = ir_null();
    bool ok = json_rows_value(in->sg, &sig) && json_rows_value(in->pb, &pub);

    if (!ok || ir_map_new(24, &in->doc) != CN_OK) {
        ir_val_release(sig);
        ir_val_release(pub);
        return false;
    }
    kv_str(&in->doc, "id", in->id, &ok);
    kv_str(&in->doc, "workflow", ctl_col(r, 0, "workflow_name"), &ok);
    kv_str(&in->doc, "version", ctl_col(r, 0, "workflow_version"), &ok);
    kv_str(&in->doc, "status", ctl_col(r, 0, "status"), &ok);
    kv_json(&in->doc, "input", ctl_col_opt(r, 0, "input"), &ok);
    kv_str(&in->doc, "created_at", ctl_col(r, 0, "created_at"), &ok);
    kv_str(&in->doc, "started_at", ctl_col_opt(r, 0, "started_at"), &ok);
    kv_str(&in->doc, "completed_at", ctl_col_opt(r, 0, "completed_at"), &ok);
    kv_str(&in->doc, "due_at", ctl_col_opt(r, 0, "scheduled_at"), &ok);
    kv_set(&in->doc, "leased", ir_bool(ctl_col_true(r, 0, "leased")), &ok);
    kv_str(&in->doc, "deadline_at", ctl_col_opt(r, 0, "deadline_at"), &ok);
    /* A cancel or a timeout ran (or runs) the finally blocks: after which, and until when. */
    kv_set(&in->doc, "cleaning_up",
           ir_bool(ctl_col_opt(r, 0, "cleanup_until") != NULL &&
                   is_unfinished(ctl_col(r, 0, "status"))),
           &ok);
    kv_str(&in->doc, "cleanup_after", ctl_col_opt(r, 0, "cleanup_after"), &ok);
    kv_str(&in->doc, "cleanup_until", ctl_col_opt(r, 0, "cleanup_until"), &ok);
    kv_set(&in->doc, "redrive_pending", ir_bool(ctl_col_true(r, 0, "redrive")), &ok);
    kv_str(&in->doc, "schedule", ctl_col_opt(r, 0, "schedule_name"), &ok);
    kv_str(&in->doc, "schedule_slot", ctl_col_opt(r, 0, "schedule_slot"), &ok);
    set_waiting_for(&in->doc, &in->why, &ok);
    kv_set(&in->doc, "history", ir_val_retain(hist), &ok);
    kv_set(&in->doc, "waiting_on", ir_val_retain(in->live), &ok);
    kv_set(&in->doc, "actions", ir_val_retain(in->acts), &ok);
    kv_set(&in->doc, "signals_sent",
           ir_int(PQntuples(in->sg) > 0 ? ctl_col_int(in->sg, 0, "total") : 0), &ok);
    kv_set(&in->doc, "signals_buffered",
           ir_int(PQntuples(in->sg) > 0 ? ctl_col_int(in->sg, 0, "buffered") : 0), &ok);
    kv_set(&in->doc, "signals", sig, &ok); /* the latest INSPECT_SIGNALS */
    kv_set(&in->doc, "published", pub, &ok);
    kv_json(&in->doc, "result", ctl_col_opt(r, 0, "result"), &ok);
    kv_json(&in->doc, "error", ctl_col_opt(r, 0, "error"), &ok);
    return ok;
}

/* --json: the document, with the family as members of the same object. */
static int
print_json(PGconn *c, struct inspection *in)
{
    struct cn_buf b = CN_BUF_INIT, fam = CN_BUF_INIT;
    struct cn_errmsg em;
    int status;

    if (ir_val_to_json(in->doc, &b, &em) != CN_OK) {
        fprintf(stderr, "cairnctl inspect: %s\n", em.text);
        cn_buf_fini(&b);
        return EXIT_USAGE;
    }
    /* before the object's closing brace */
    if ((status = ctl_inspect_family(c, in->id, true, &fam)) == EXIT_OK && b.len > 0) {
        b.data[b.len - 1] = '\0';
        printf("%s, %s}\n", b.data, fam.data != NULL ? fam.data : "");
    }
    cn_buf_fini(&fam);
    cn_buf_fini(&b);
    return status;
}

/* The record's lines: instance, workflow, status, due, deadline, schedule. */
static void
print_record(const struct inspection *in)
{
    const PGresult *r = in->r;
    const char *slot = ctl_col_opt(r, 0, "schedule_slot");

    printf("instance    %s\nworkflow    %s (version %s)\nstatus      %s%s\n", in->id,
           ctl_col(r, 0, "workflow_name"), ctl_col(r, 0, "workflow_version"),
           ctl_col(r, 0, "status"), ctl_col_true(r, 0, "leased") ? " (leased by a runner)" : "");
    if (ctl_col_opt(r, 0, "scheduled_at") != NULL) {
        printf("due         %s\n", ctl_col(r, 0, "scheduled_at"));
    }
    if (ctl_col_opt(r, 0, "deadline_at") != NULL) {
        printf("deadline    %s\n", ctl_col(r, 0, "deadline_at"));
    }
    if (ctl_col_opt(r, 0, "cleanup_until") != NULL) {
        if (is_unfinished(ctl_col(r, 0, "status"))) {
            printf("cleanup     cleaning up: running its finally blocks after a %s, abandoned at "
                   "%s\n",
                   ctl_col(r, 0, "cleanup_after"), ctl_col(r, 0, "cleanup_until"));
        } else {
            printf("cleanup     ran its finally blocks after a %s\n",
                   ctl_col(r, 0, "cleanup_after"));
        }
    }
    if (ctl_col_opt(r, 0, "schedule_name") != NULL) {
        printf("schedule    %s (%s%s)\n", ctl_col(r, 0, "schedule_name"),
               slot == NULL ? "triggered by hand" : "slot ", slot == NULL ? "" : slot);
    }
}

/* The signals sent (the latest INSPECT_SIGNALS: buffered, or which wait took them) and the
 * values published, in the text form. */
static void
print_outside(const struct inspection *in)
{
    const PGresult *sg = in->sg, *pb = in->pb;
    int row;

    if (PQntuples(sg) > 0) {
        printf("signals     %s sent, %s buffered%s\n", ctl_col(sg, 0, "total"),
               ctl_col(sg, 0, "buffered"),
               ctl_col_int(sg, 0, "total") > INSPECT_SIGNALS
                   ? " (the latest " INSPECT_STR(INSPECT_SIGNALS) " below)"
                   : "");
    }
    for (row = 0; row < PQntuples(sg); row++) {
        if (ctl_col_opt(sg, row, "consumed_at") == NULL) {
            printf("  %s %s buffered, sent %s\n", ctl_col(sg, row, "name"),
                   ctl_col(sg, row, "payload"), ctl_col(sg, row, "sent_at"));
        } else {
            printf("  %s %s taken by wait %s at %s\n", ctl_col(sg, row, "name"),
                   ctl_col(sg, row, "payload"), ctl_col(sg, row, "consumed_exec"),
                   ctl_col(sg, row, "consumed_at"));
        }
    }
    for (row = 0; row < PQntuples(pb); row++) {
        printf("published   %s = %s (version %s, at %s)\n", ctl_col(pb, row, "name"),
               ctl_col(pb, row, "value"), ctl_col(pb, row, "version"),
               ctl_col(pb, row, "published_at"));
    }
}

/* The text form: the record, the family, earlier runs, why it waits, the live graph, the
 * action results, the outside world, the result or error. */
static int
print_text(PGconn *c, const struct inspection *in)
{
    const PGresult *r = in->r, *h = in->h;
    struct cn_buf b = CN_BUF_INIT, fam = CN_BUF_INIT;
    int status, row;
    size_t off;

    print_record(in);
    if ((status = ctl_inspect_family(c, in->id, false, &fam)) != EXIT_OK) {
        cn_buf_fini(&fam);
        return status;
    }
    fputs(fam.data != NULL ? fam.data : "", stdout);
    cn_buf_fini(&fam);
    for (row = 0; row < PQntuples(h); row++) {
        printf("earlier run %s (%s: %s), retried at %s\n", ctl_col(h, row, "status"),
               ctl_col(h, row, "error_type"), ctl_col(h, row, "error_message"),
               ctl_col(h, row, "redriven_at"));
    }
    if (ctl_col_true(r, 0, "redrive")) {
        printf("retried: what had not succeeded starts over when a runner claims it\n");
    }
    for (off = 0; off < in->why.len; off += strlen(in->why.data + off) + 1) {
        printf("waiting for %s\n", in->why.data + off);
    }
    if (in->live.type == IR_T_LIST) {
        print_live(in->live, !is_unfinished(ctl_col(r, 0, "status")));
    }
    printf("action results recorded: %d\n", PQntuples(in->d));
    for (row = 0; row < PQntuples(in->d); row++) {
        const struct ir_val *val = ir_map_get(ir_list_items(in->acts)[row], "value", 5);
        short_json(val != NULL ? *val : ir_null(), 60, &b);
        printf("  %s attempt %s %-5s %s\n", ctl_col(in->d, row, "execution_id"),
               ctl_col(in->d, row, "attempt"), ctl_col(in->d, row, "status"), b.data);
    }
    print_outside(in);
    if (ctl_col_opt(r, 0, "result") != NULL) {
        printf("result      %s\n", ctl_col(r, 0, "result"));
    }
    if (ctl_col_opt(r, 0, "error") != NULL) {
        printf("error       %s\n", ctl_col(r, 0, "error"));
    }
    cn_buf_fini(&b);
    return EXIT_OK;
}

/* inspect of instance id: fetched, decoded, printed. */
static int
inspect(const struct cn_opts *o, PGconn *c, const char *id)
{
    struct inspection in = {
        .live = ir_null(), .acts = ir_null(), .doc = ir_null(), .why = CN_BUF_INIT};
    struct ir_val hist = ir_null();
    int status;

    in.id = id;
    if ((status = fetch(o, c, &in)) != EXIT_OK) {
        goto out;
    }
    decode_live(&in);
    if (!actions_value(&in) || !json_rows_value(in.h, &hist)) {
        fprintf(stderr, "cairnctl inspect: out of memory\n");
        status = EXIT_USAGE;
        goto out;
    }
    if ((status = ctl_wait_reasons(c, in.id, ctl_col(in.r, 0, "status"), in.live, &in.why)) !=
        EXIT_OK) {
        goto out;
    }
    if (!build_doc(&in, hist)) {
        fprintf(stderr, "cairnctl inspect: out of memory\n");
        status = EXIT_USAGE;
        goto out;
    }
    status = ctl_json_out(o) ? print_json(c, &in) : print_text(c, &in);
out:
    ir_val_release(hist);
    inspection_fini(&in);
    return status;
}

int
ctl_cmd_inspect(const struct ctl_call *call, int argc, char **argv)
{
    return ctl_instance_cmd(call, argc, argv, inspect);
}
