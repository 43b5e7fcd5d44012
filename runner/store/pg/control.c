/* SPDX-License-Identifier: MIT */
/*
 * Control: cancel notices (NOTIFY cairn_cancel, and the sweep for missed ones), child
 * outcomes (NOTIFY cairn_child, the sweep that hands them over), cancelling children nobody
 * waits for, and late results recorded.
 *
 * Threads: used by one thread at a time (pg_int.h).
 */

#include <stdlib.h>

#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "runner/exec/errors.h"
#include "runner/store/db.h"
#include "runner/store/pg/pg_int.h"

/* ---- cancels ------------------------------------------------------------------------------- */

/* A cairn_cancel payload: the instance id (sql/0017; before, a space and the reason followed,
 * and are ignored). Only a hint: anyone who may connect may NOTIFY, so the ids are checked
 * against the instances' rows before anything is cancelled (verify_cancels). */
static bool
cancel_notice(const PGnotify *nt, struct rn_iid *iid)
{
    char id[37];

    if (strcmp(nt->relname, "cairn_cancel") != 0 || strlen(nt->extra) < 36) {
        return false;
    }
    memcpy(id, nt->extra, 36);
    id[36] = '\0';
    return cn_uuid_parse(id, iid->b);
}

/* A cairn_child payload: the parent id, the call's execution id and attempt, spaces between
 * (sql/0010_children.sql). */
static bool
child_notice(const PGnotify *nt, struct rn_child_link *l)
{
    char id[37];
    unsigned long a;
    char *end;

    if (strcmp(nt->relname, "cairn_child") != 0 || strlen(nt->extra) < 36 + 1 + 36 + 2) {
        return false;
    }
    memcpy(id, nt->extra, 36);
    id[36] = '\0';
    if (!cn_uuid_parse(id, l->parent.b)) {
        return false;
    }
    memcpy(id, nt->extra + 37, 36);
    if (!cn_uuid_parse(id, l->exec_id.b)) {
        return false;
    }
    a = strtoul(nt->extra + 74, &end, 10);
    if (*end != '\0' || a == 0 || a > UINT32_MAX) {
        return false;
    }
    l->attempt = (uint32_t) a;
    l->has = true;
    return true;
}

struct notice_sink {
    struct {
        struct rn_child_link *items;
        size_t len, cap;
    } children;
    struct {
        struct rn_iid *items;
        size_t len, cap;
    } cancels;
};

static void
notice(const PGnotify *nt, void *arg)
{
    struct notice_sink *sink = arg;
    struct rn_child_link l;
    struct rn_iid iid;

    if (child_notice(nt, &l)) {
        CN_VEC_XPUSH(&sink->children, l);
    } else if (cancel_notice(nt, &iid)) {
        CN_VEC_XPUSH(&sink->cancels, iid);
    }
}

/* The notified instances whose cancel was really requested, with the reason from their rows
 * (a forged notice names an instance nobody asked to cancel, or carries a reason nobody gave). */
static cn_err
verify_cancels(struct pg_backend *b, const struct rn_iid *ids, size_t n, rn_cancel_fn fn, void *arg,
               struct cn_errmsg *err)
{
    struct barr a;
    PGresult *r = NULL;
    int row;
    cn_err rv;

    PG_BARR_IDS(&a, ids, n);
    rv = pg_exec_array(b,
                       "SELECT instance_id, coalesce(cancel_reason, 'cancelled'), cancel_force"
                       " FROM cairn.runner_instances WHERE instance_id = ANY($1::uuid[])"
                       " AND cancel_requested_at IS NOT NULL",
                       &a, &r, err);
    if (rv != CN_OK) {
        return rv;
    }
    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid iid;
        if (pg_get_uuid(r, row, 0, iid.b)) {
            /* text's binary form: its bytes, and a NUL; a bool's: one byte */
            fn(arg, iid, PQgetvalue(r, row, 1), PQgetvalue(r, row, 2)[0] != 0);
        }
    }
    PQclear(r);
    return CN_OK;
}

cn_err
pg_wait_notices(struct rn_backend *base, int timeout_ms, rn_cancel_fn fn, rn_child_done_fn child_fn,
                void *arg, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    struct notice_sink sink;
    cn_err rv;

    memset(&sink, 0, sizeof(sink));
    /* Two channels, one LISTEN each (a prepared statement takes one command); the flag is set
     * by the second. */
    if (!b->listening_notices && ((rv = pg_conn(b, err)) != CN_OK ||
                                  (rv = pg_simple(b, "LISTEN cairn_child", err)) != CN_OK)) {
        return rv;
    }
    rv = pg_wait_notify(b, "LISTEN cairn_cancel", &b->listening_notices, timeout_ms, notice, &sink,
                        err);
    if (rv == CN_OK && sink.cancels.len > 0) {
        rv = verify_cancels(b, sink.cancels.items, sink.cancels.len, fn, arg, err);
    }
    if (sink.children.len > 0 && child_fn != NULL) {
        child_fn(arg, sink.children.items, sink.children.len);
    }
    free(sink.children.items);
    free(sink.cancels.items);
    return rv;
}

/* ---- children ----------------------------------------------------------------------------- */

cn_err
pg_child_results(struct rn_backend *base, const struct rn_child_link *calls, size_t n,
                 struct rn_done *out, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    static const uint32_t types[3] = {PG_OID_UUID, PG_OID_UUID, PG_OID_INT4};
    struct pargs g = {0};
    struct barr a[3];
    PGresult *r = NULL;
    size_t i, k;
    int row;
    cn_err rv;

    for (i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].value = ir_null();
    }
    if (n == 0) {
        return CN_OK;
    }
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    for (k = 0; k < 3; k++) {
        pg_barr_begin(&a[k], types[k]);
    }
    for (i = 0; i < n; i++) {
        pg_barr_uuid(&a[0], calls[i].parent.b);
        pg_barr_uuid(&a[1], calls[i].exec_id.b);
        pg_barr_int(&a[2], calls[i].attempt);
    }
    for (k = 0; k < 3; k++) {
        pg_pa_array(&g, &a[k]);
    }
    rv = pg_exec_args(
        b,
        "SELECT d.instance_id, d.execution_id, d.attempt, d.status <> 'error',"
        " d.result, d.status = 'json' FROM unnest($1::uuid[], $2::uuid[], $3::integer[]) AS"
        " t(i, e, a) JOIN cairn.runner_actions_done d ON d.instance_id = t.i"
        " AND d.execution_id = t.e AND d.attempt = t.a",
        &g, &r, err);
    for (k = 0; k < 3; k++) {
        pg_barr_fini(&a[k]);
    }
    if (rv != CN_OK) {
        return rv;
    }
    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid iid;
        struct rn_xid xid;
        uint32_t att;

        if (!pg_get_uuid(r, row, 0, iid.b) || !pg_get_uuid(r, row, 1, xid.b) ||
            PQgetlength(r, row, 2) != 4) {
            continue;
        }
        att = pg_be32(PQgetvalue(r, row, 2));
        for (i = 0; i < n; i++) {
            if (!rn_iid_eq(calls[i].parent, iid) || !rn_xid_eq(calls[i].exec_id, xid) ||
                calls[i].attempt != att || !rn_xid_is_nil(out[i].exec_id)) {
                continue;
            }
            if (!rn_stored_value(PQgetvalue(r, row, 4), (size_t) PQgetlength(r, row, 4),
                                 PQgetvalue(r, row, 5)[0] != 0, &out[i].value)) {
                out[i].value = ir_null();
                continue; /* not decodable: the parent's next hydration runs the call again */
            }
            out[i].exec_id = xid;
            out[i].attempt = att;
            out[i].ok = PQgetvalue(r, row, 3)[0] != 0;
        }
    }
    PQclear(r);
    return CN_OK;
}

/* The call's result a finished child hands its parent (rn_child_outcome), from its stored
 * status, result and error (JSON text; NULL: none): the result of a completed child, else a
 * ChildWorkflow* error carrying the child's error (type, message, bases, details). */
cn_err
pg_child_value(const char *status, const char *result, const char *error, struct rn_iid child,
               const char *workflow, bool *ok, struct ir_val *out)
{
    struct ir_val raw = ir_null(), e = ir_null();
    struct cn_errmsg em;
    enum rn_outcome o = RN_FAILED;
    cn_err rv;

    (void) rn_outcome_parse(status, &o);
    if (o == RN_COMPLETED) {
        if (result != NULL && ir_val_from_json(result, strlen(result), &raw, &em) != CN_OK) {
            raw = ir_null(); /* stored by a runner, so JSON it reads: not reached */
        }
        rv = rn_child_outcome(o, raw, child, workflow, ok, out);
        ir_val_release(raw);
        return rv;
    }
    if (error != NULL && ir_val_from_json(error, strlen(error), &raw, &em) == CN_OK &&
        raw.type == IR_T_MAP) {
        const struct ir_val *t = ir_map_get(raw, "type", 4);
        const struct ir_val *m = ir_map_get(raw, "message", 7);
        const struct ir_val *bs = ir_map_get(raw, "bases", 5);
        const struct ir_val *d = ir_map_get(raw, "details", 7);
        if (t != NULL && t->type == IR_T_STR &&
            ir_error_new(ir_str_data(*t), m != NULL && m->type == IR_T_STR ? ir_str_data(*m) : "",
                         bs != NULL && bs->type == IR_T_LIST ? ir_val_retain(*bs) : ir_null(),
                         d != NULL ? ir_val_retain(*d) : ir_null(), &e) != CN_OK) {
            e = ir_null();
        }
    }
    ir_val_release(raw);
    rv = rn_child_outcome(o, e, child, workflow, ok, out);
    ir_val_release(e);
    return rv;
}

/* Children whose parents' calls have no result yet although the children ended: finished by
 * SQL (cairn.cancel, cairn.expire_overdue, a version that does not compile), or attached by a
 * parent's `wait for` after their runner claimed them (cairn_finish marks them). Their outcome
 * is made here from what is stored (pg_child_value). Only finished children: a mark left on
 * one queued again (cairn.retry clears it, but not on a version before it) is no outcome. */
static const char *pending_sql =
    "SELECT c.instance_id, c.workflow_name, c.status, c.error::text, c.parent_id,"
    "       c.parent_exec_id, c.parent_attempt, c.result::text"
    "  FROM cairn.runner_instances c"
    " WHERE c.parent_pending AND c.status IN ('completed', 'failed', 'cancelled', 'timed_out')"
    "   AND NOT EXISTS (SELECT 1 FROM cairn.runner_actions_done d WHERE d.instance_id ="
    "       c.parent_id AND d.execution_id = c.parent_exec_id AND d.attempt = c.parent_attempt)"
    " ORDER BY c.completed_at LIMIT 500";

/* Records them. The statement runs in a transaction that holds the sweep's advisory lock and
 * reads after taking it, so two runners' sweeps never both insert one result and the NOTIFY goes
 * once (NOT EXISTS must see the other's commit); the results' key leaves out one a parent's
 * runner records meanwhile. */
static const char *deliver_sql =
    "WITH t AS (SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[],"
    " $5::bytea[], $6::text[]) AS t(c, p, e, a, x, s) WHERE NOT EXISTS (SELECT 1 FROM"
    " cairn.runner_actions_done d WHERE d.instance_id = t.p AND d.execution_id = t.e AND"
    " d.attempt = t.a)),"
    " d AS (INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status,"
    " result) SELECT t.p, t.e, t.a, t.s, t.x FROM t ON CONFLICT DO NOTHING)"
    " SELECT pg_notify('cairn_child', t.p::text || ' ' || t.e::text || ' ' || t.a) FROM t";

/* The advisory lock key of the sweep's deliveries ("cairn" and 16 in ASCII, arbitrary). */
#define PG_SWEEP_LOCK "6361697216"

cn_err
pg_sweep_children(struct rn_backend *base, size_t *nout, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    static const uint32_t types[6] = {PG_OID_UUID, PG_OID_UUID,  PG_OID_UUID,
                                      PG_OID_INT4, PG_OID_BYTEA, PG_OID_TEXT};
    struct cn_buf mp = CN_BUF_INIT;
    struct pargs g = {0};
    struct barr a[6];
    PGresult *r = NULL, *r2 = NULL;
    size_t k, n = 0;
    bool locked = false;
    int row;
    cn_err rv;

    *nout = 0;
    if ((rv = pg_conn(b, err)) != CN_OK || (rv = pg_simple(b, "BEGIN", err)) != CN_OK) {
        return rv;
    }
    if ((rv = rn_db_exec(b->c, "SELECT pg_try_advisory_xact_lock(" PG_SWEEP_LOCK ")", 0, NULL, &r,
                         err)) == CN_OK) {
        locked = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        PQclear(r);
        r = NULL;
    }
    if (rv == CN_OK && locked) {
        rv = rn_db_exec(b->c, pending_sql, 0, NULL, &r, err);
    }
    for (k = 0; k < 6; k++) {
        pg_barr_begin(&a[k], types[k]);
    }
    for (row = 0; rv == CN_OK && r != NULL && row < PQntuples(r); row++) {
        struct rn_iid cid, pid;
        struct rn_xid xid;
        struct ir_val v = ir_null();
        bool ok;

        if (!cn_uuid_parse(PQgetvalue(r, row, 0), cid.b) || PQgetisnull(r, row, 4) ||
            !cn_uuid_parse(PQgetvalue(r, row, 4), pid.b) ||
            !cn_uuid_parse(PQgetvalue(r, row, 5), xid.b)) {
            continue;
        }
        if (pg_child_value(PQgetvalue(r, row, 2),
                           PQgetisnull(r, row, 7) ? NULL : PQgetvalue(r, row, 7),
                           PQgetisnull(r, row, 3) ? NULL : PQgetvalue(r, row, 3), cid,
                           PQgetvalue(r, row, 1), &ok, &v) != CN_OK) {
            rv = CN_NOMEM;
            break;
        }
        cn_buf_clear(&mp);
        if (ir_val_to_msgpack(v, IR_MP_INTERNAL, &mp) != CN_OK) {
            ir_val_release(v);
            continue;
        }
        ir_val_release(v);
        pg_barr_uuid(&a[0], cid.b);
        pg_barr_uuid(&a[1], pid.b);
        pg_barr_uuid(&a[2], xid.b);
        pg_barr_int(&a[3], strtol(PQgetvalue(r, row, 6), NULL, 10));
        pg_barr_put(&a[4], mp.data, mp.len);
        pg_barr_put(&a[5], ok ? "ok" : "error", ok ? 2 : 5);
        n++;
    }
    PQclear(r);
    for (k = 0; k < 6; k++) {
        pg_pa_array(&g, &a[k]);
    }
    if (rv == CN_OK && n > 0 && (rv = pg_exec_args(b, deliver_sql, &g, &r2, err)) == CN_OK) {
        PQclear(r2);
        *nout = n;
    }
    for (k = 0; k < 6; k++) {
        pg_barr_fini(&a[k]);
    }
    cn_buf_fini(&mp);
    if (rv != CN_OK) {
        pg_rollback(b);
        return rv;
    }
    if ((rv = pg_simple(b, "COMMIT", err)) != CN_OK) {
        return rv;
    }
    /* Then the parents of every finished child not yet woken: those just recorded, and those a
     * runner's own wake-up had to skip (a locked row) or did not get to (a crash). */
    if ((rv = rn_db_exec(b->c, "SELECT cairn.wake_parents()", 0, NULL, &r2, err)) != CN_OK) {
        return rv;
    }
    PQclear(r2);
    /* What a runner that crashed did not cancel (cairn.reap_children). */
    if ((rv = rn_db_exec(b->c, "SELECT cairn.reap_children()", 0, NULL, &r2, err)) != CN_OK) {
        return rv;
    }
    PQclear(r2);
    return CN_OK;
}

cn_err
pg_cancel_children(struct rn_backend *base, struct rn_iid parent, const struct rn_xid *exec_ids,
                   size_t n, const char *reason, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char pid[CN_UUID_TEXT_LEN + 1];
    struct pargs g = {0};
    struct barr a;
    PGresult *r = NULL;
    cn_err rv;

    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    cn_uuid_format(parent.b, pid);
    PG_BARR_IDS(&a, exec_ids, n);
    pg_pa_text(&g, pid);
    if (n > 0) {
        pg_pa_array(&g, &a);
    } else {
        pg_pa_text(&g, NULL); /* NULL: every child */
    }
    pg_pa_text(&g, reason);
    rv = pg_exec_args(b, "SELECT cairn.reap_children($1::uuid, $2::uuid[], $3::text)", &g, &r, err);
    PQclear(r);
    pg_barr_fini(&a);
    return rv;
}

/* The instances whose cancel waits for a runner: those nobody holds are cancelled here by
 * cairn.cancel (in the same statement, one function call per row); the held ones come back. */
static const char *sweep_cancels_sql =
    "SELECT ri.instance_id,"
    "       CASE WHEN q.lock_uuid IS NOT NULL AND q.lock_expires_at > clock_timestamp()"
    "            THEN ri.cancel_reason"
    "            ELSE cairn.cancel(ri.instance_id, ri.cancel_reason) END,"
    "       q.lock_uuid IS NOT NULL AND q.lock_expires_at > clock_timestamp(), ri.cancel_force"
    "  FROM cairn.runner_instances ri"
    "  LEFT JOIN cairn.queued_instances q ON q.instance_id = ri.instance_id"
    " WHERE ri.cancel_requested_at IS NOT NULL AND ri.status IN ('queued', 'running')";

cn_err
pg_sweep_cancels(struct rn_backend *base, rn_cancel_fn fn, void *arg, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    PGresult *r = NULL;
    int row;
    cn_err rv;

    if ((rv = pg_conn(b, err)) != CN_OK ||
        (rv = rn_db_exec(b->c, sweep_cancels_sql, 0, NULL, &r, err)) != CN_OK) {
        return rv;
    }
    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid iid;
        if (strcmp(PQgetvalue(r, row, 2), "t") == 0 &&
            cn_uuid_parse(PQgetvalue(r, row, 0), iid.b)) {
            fn(arg, iid, PQgetisnull(r, row, 1) ? NULL : PQgetvalue(r, row, 1),
               strcmp(PQgetvalue(r, row, 3), "t") == 0);
        }
    }
    PQclear(r);
    /* Deadlines of instances nobody holds (a runner that holds one times it out itself). */
    if ((rv = rn_db_exec(b->c, "SELECT cairn.expire_overdue()", 0, NULL, &r, err)) != CN_OK) {
        return rv;
    }
    PQclear(r);
    return CN_OK;
}

/* Late results are kept only for instances that ended failed, cancelled or timed_out: a
 * completed instance's history is whole, and an unfinished one (handed back, claimed by another
 * runner) takes its results through the fenced path of whoever holds it. */
static const char *late_sql =
    "INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status, result)"
    " SELECT t.i, t.e, t.a, t.s, t.x FROM unnest($1::uuid[], $2::uuid[],"
    " $3::integer[], $4::text[], $5::bytea[]) AS t(i, e, a, s, x)"
    " WHERE EXISTS (SELECT 1 FROM cairn.runner_instances ri WHERE ri.instance_id = t.i"
    " AND ri.status IN ('failed', 'cancelled', 'timed_out'))"
    " AND NOT EXISTS (SELECT 1 FROM cairn.runner_actions_done d"
    " WHERE d.instance_id = t.i AND d.execution_id = t.e AND d.attempt = t.a)"
    " ON CONFLICT DO NOTHING";

cn_err
pg_record_late(struct rn_backend *base, const struct rn_late_result *l, size_t n,
               struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    static const uint32_t types[5] = {PG_OID_UUID, PG_OID_UUID, PG_OID_INT4, PG_OID_TEXT,
                                      PG_OID_BYTEA};
    struct cn_buf tmp = CN_BUF_INIT;
    struct pargs g = {0};
    struct barr a[5];
    PGresult *r = NULL;
    size_t i, k;
    cn_err rv;

    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    for (k = 0; k < 5; k++) {
        pg_barr_begin(&a[k], types[k]);
    }
    for (i = 0; i < n; i++) {
        cn_buf_clear(&tmp);
        if (ir_val_to_msgpack(l[i].d.value, IR_MP_INTERNAL, &tmp) != CN_OK) {
            continue; /* not storable (too deep): it changes nothing, leave it out */
        }
        pg_barr_uuid(&a[0], l[i].instance_id.b);
        pg_barr_uuid(&a[1], l[i].d.exec_id.b);
        pg_barr_int(&a[2], l[i].d.attempt);
        pg_barr_put(&a[3], l[i].d.ok ? "ok" : "error", l[i].d.ok ? 2 : 5);
        pg_barr_put(&a[4], tmp.data, tmp.len);
    }
    for (k = 0; k < 5; k++) {
        pg_pa_array(&g, &a[k]);
    }
    rv = pg_exec_args(b, late_sql, &g, &r, err);
    PQclear(r);
    for (k = 0; k < 5; k++) {
        pg_barr_fini(&a[k]);
    }
    cn_buf_fini(&tmp);
    return rv;
}
