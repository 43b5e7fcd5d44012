/* SPDX-License-Identifier: MIT */
/*
 * The persisters' fenced writes: a batch of instance writes as a handful of prepared
 * statements sent as one pipeline (one round trip), idempotent across a lost COMMIT.
 *
 * Threads: used by one thread at a time (pg_int.h).
 */

#include <stdlib.h>

#include "ir/base/xalloc.h"
#include "runner/store/pg/pg_int.h"

/* ---- persist ------------------------------------------------------------------------------ */

/* JSON text of v that jsonb accepts, in *out: false when there is none (NaN and infinities
 * have no JSON form; jsonb refuses the character U+0000, which the text form writes \u0000). A
 * statement that sent jsonb something it refuses would fail its whole persist batch, again at
 * every retry. */
static bool
jsonb_text(struct ir_val v, struct cn_buf *out)
{
    struct cn_errmsg em;

    cn_buf_clear(out);
    return ir_val_to_json(v, out, &em) == CN_OK && cn_buf_puts(out, "") == CN_OK &&
           strstr(out->data, "\\u0000") == NULL;
}

/* JSON text of a value for a jsonb column (an error keeps its map form); null when it has
 * none (jsonb_text). The value itself is kept in the snapshot and the recorded results. */
bool
pg_json_text(struct ir_val v, struct cn_buf *out)
{
    if (jsonb_text(v, out)) {
        return true;
    }
    cn_buf_clear(out);
    return cn_buf_puts(out, "null") == CN_OK;
}

/* The results' insert (cairn_done, cairn_done_probed). */
#define DONE_INSERT                                                                              \
    "INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status, result," \
    " step) SELECT ($1::uuid[])[t.w], t.e, t.a, t.s, t.x, t.k FROM unnest($3::integer[],"        \
    " $4::uuid[], $5::integer[], $6::text[], $7::bytea[], $8::integer[]) AS t(w, e, a, s, x,"    \
    " k) WHERE (SELECT array_agg(EXISTS (SELECT 1 FROM cairn.queued_instances q WHERE"           \
    " q.instance_id = u.i AND q.lock_uuid = u.l) ORDER BY u.n) FROM unnest($1::uuid[],"          \
    " $2::uuid[]) WITH ORDINALITY AS u(i, l, n))[t.w]"

/* The persist statements, prepared once per connection and sent as one pipeline (one round
 * trip per batch). Each write statement fences itself: it probes the queue row of each
 * (instance, claim token) in a subquery (the results' once per write, the others' per row),
 * and the first statement locks those rows FOR UPDATE for the transaction, so a write whose
 * token is gone touches nothing. The fence's result says which writes were lost. Never a join with
 * the queue table: its statistics are often those of an empty queue, and the planner would scan it
 * once per row (bench/RESULTS.md as of 84a365a, step 6). */
static const struct {
    const char *name;
    const char *sql;
    int nparams;
    /* each parameter's element type (binary arrays): u uuid, i int4, I int8, t text, b bytea,
     * o bool; 1: a scalar int4 */
    const char *types;
} persist_stmts[] = {
    /* Before the fence, when the batch registers waits for keyed events: each event's advisory
     * lock, shared, in key order (sql/api/35_signals.sql: a publish holds it exclusively while
     * it inserts and looks for waits, so the two see each other). Locks nothing else: a
     * publish waits on it with no queue row held, and this with none either. */
    {"cairn_event_locks",
     "SELECT count(pg_advisory_xact_lock_shared(cairn.event_lock_class(), x.k)) FROM (SELECT"
     " DISTINCT cairn.event_lock_key(ri.tenant_id, t.n, t.k) AS k FROM unnest($1::uuid[],"
     " $2::text[], $3::text[]) AS t(i, n, k) JOIN cairn.runner_instances ri ON ri.instance_id ="
     " t.i ORDER BY 1) x",
     3, "utt"},
    {"cairn_fence",
     "SELECT x.instance_id, x.lock_uuid FROM unnest($1::uuid[], $2::uuid[]) AS t(i, l)"
     " CROSS JOIN LATERAL (SELECT q.instance_id, q.lock_uuid FROM cairn.queued_instances q"
     " WHERE q.instance_id = t.i AND (t.l IS NULL OR q.lock_uuid = t.l) FOR UPDATE) x",
     2, "uu"},
    /* The results, grouped by write: the writes' instances and tokens once, each result naming
     * its write by position, each lease probed once into an array the rows index. Inserted
     * plainly: the key (0021) refuses a result recorded already, and the batch is then written
     * again with cairn_done_probed (pg_persist). Per result, 600 000 in batches of 10 000
     * (bench/results-insert, bench/RESULTS.md "The results' insert alone"): 3.75 µs with 1 000
     * per write, 5.16 with one, against 6.70 and 7.76 for a probe of the result and of the lease
     * per row as before 0021; a probe per row cost more than a third of the insert, for a
     * duplicate that comes only after a lost commit acknowledgement or a re-claim. */
    {"cairn_done", DONE_INSERT, 8, "uuiuitbi"},
    /* The waits the writes register, expire or withdraw (cairn.runner_waits checks each
     * write's token): after the results, before the queue row is released or deleted. */
    {"cairn_waits",
     "SELECT instance_id, execution_id, attempt, status, ok, json, result FROM"
     " cairn.runner_waits($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[], $5::text[],"
     " $6::boolean[], $7::text[], $8::text[], $9::bigint[], $10::boolean[], $11::bytea[])",
     11, "uuuitottIob"},
    /* The values the writes publish (sql/0024), each write's token probed: the last of each
     * name per instance in the batch (WITH ORDINALITY keeps their order), since one statement
     * cannot update a row twice. Before the queue row is released or deleted. */
    {"cairn_publish",
     "INSERT INTO cairn.published AS p (instance_id, name, value) SELECT DISTINCT ON (t.i, t.n)"
     " t.i, t.n, t.v::jsonb FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) WITH"
     " ORDINALITY AS t(i, l, n, v, o) CROSS JOIN LATERAL (SELECT 1 FROM cairn.queued_instances"
     " q WHERE q.instance_id = t.i AND q.lock_uuid = t.l OFFSET 0) ok ORDER BY t.i, t.n, t.o"
     " DESC ON CONFLICT (instance_id, name) DO UPDATE SET value = EXCLUDED.value, version ="
     " p.version + 1, published_at = clock_timestamp()",
     4, "uutt"},
    /* The signals the writes send other instances (cairn.runner_signals checks each write's
     * token, and records what a send answered as the call's result): after the published
     * values, before the queue rows are released or deleted. The fence holds the receivers'
     * queue rows already (pg_persist). */
    {"cairn_signals",
     "SELECT instance_id, execution_id, attempt, status, message FROM"
     " cairn.runner_signals($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[], $5::uuid[],"
     " $6::text[], $7::text[])",
     7, "uuuiutt"},
    /* A snapshot that begins a cleanup (sql/0032) records until when it may run: t.c, 0 for
     * any other. */
    {"cairn_state",
     "UPDATE cairn.runner_instances ri SET state = t.s, state_step = t.k, redrive = false,"
     " cleanup_until = CASE WHEN t.c > 0 THEN to_timestamp(t.c / 1000.0) ELSE ri.cleanup_until"
     " END FROM unnest($1::uuid[], $2::uuid[], $3::bytea[], $4::integer[], $5::bigint[]) AS"
     " t(i, l, s, k, c) CROSS JOIN LATERAL (SELECT 1 FROM cairn.queued_instances q WHERE"
     " q.instance_id = t.i AND q.lock_uuid = t.l OFFSET 0) ok WHERE ri.instance_id = t.i",
     5, "uubiI"},
    {"cairn_release",
     "WITH t AS (SELECT t.w, ok.tid FROM unnest($1::uuid[], $2::uuid[], $3::bigint[]) AS"
     " t(i, l, w) CROSS JOIN LATERAL (SELECT q.ctid AS tid FROM cairn.queued_instances q"
     " WHERE q.instance_id = t.i AND q.lock_uuid = t.l OFFSET 0) ok),"
     " q AS (UPDATE cairn.queued_instances q SET lock_uuid = NULL, lock_expires_at = NULL,"
     " scheduled_at = CASE WHEN q.woken THEN clock_timestamp() ELSE to_timestamp(t.w / 1000.0)"
     " END, woken = false FROM t WHERE q.ctid = t.tid"
     " RETURNING q.instance_id)"
     " UPDATE cairn.runner_instances ri SET status = 'queued' FROM q WHERE ri.instance_id ="
     " q.instance_id",
     3, "uuI"},
    /* Child instances the calls of this batch start (0010: cairn.start_children checks each
     * parent's lease itself). */
    {"cairn_children",
     "SELECT child_id, status, message FROM cairn.start_children($1::uuid[], $2::uuid[],"
     " $3::uuid[], $4::uuid[], $5::integer[], $6::text[], $7::text[], $8::text[], $9::bigint[],"
     " $10::boolean[], $11::integer)",
     11, "uuuuitttIo1"},
    /* The waits for started children (`wait for`): after the children this batch starts, before
     * the finishing children hand their outcomes over (cairn.join_children checks each write's
     * token and locks each child's row). */
    {"cairn_joins",
     "SELECT exec_id, attempt, status, outcome, result, error, workflow, message FROM"
     " cairn.join_children($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[], $5::uuid[])",
     5, "uuuiu"},
    /* Finishing children hand their outcome to their parents: the result of the parent's call,
     * the parent woken (due now; `woken` for a hand-back racing this), and NOTIFY cairn_child
     * for the runner that holds it. Before cairn_finish, whose fence it shares; the parents'
     * rows are locked by the fence too. A parent already woken is left as it is (under the
     * lock: a claim, which clears the flag, cannot come in between): one row version per
     * parent and claim rather than per child. */
    {"cairn_child_done",
     "WITH t AS MATERIALIZED (SELECT t.* FROM unnest($1::uuid[], $2::uuid[], $3::uuid[],"
     " $4::uuid[], $5::integer[], $6::text[], $7::bytea[]) AS t(i, l, p, e, a, s, x) CROSS JOIN"
     " LATERAL (SELECT 1 FROM cairn.queued_instances q WHERE q.instance_id = t.i AND"
     " q.lock_uuid = t.l OFFSET 0) ok),"
     " d AS (INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status,"
     " result) SELECT t.p, t.e, t.a, t.s, t.x FROM t WHERE NOT EXISTS (SELECT 1"
     " FROM cairn.runner_actions_done d WHERE d.instance_id = t.p AND d.execution_id = t.e AND"
     " d.attempt = t.a)),"
     " w AS (UPDATE cairn.queued_instances q SET woken = true, scheduled_at ="
     " least(q.scheduled_at, clock_timestamp()) FROM t WHERE q.instance_id = t.p AND NOT"
     " q.woken)"
     " SELECT pg_notify('cairn_child', t.p::text || ' ' || t.e::text || ' ' || t.a) FROM t",
     7, "uuuuitb"},
    /* t.h: the write hands the outcome to a parent (cairn_child_done). A child a parent's
     * `wait for` attached after this runner claimed it (detached then) is handed by no write:
     * it is marked parent_pending, and the runners' sweep hands it over (the row's lock orders
     * the two: see cairn.join_children). */
    {"cairn_finish",
     "WITH t AS MATERIALIZED (SELECT t.*, ok.tid FROM unnest($1::uuid[], $2::uuid[],"
     " $3::text[], $4::text[], $5::text[], $6::bytea[], $7::boolean[]) AS t(i, l, st, res, er,"
     " sx, h) CROSS JOIN LATERAL (SELECT q.ctid AS tid FROM cairn.queued_instances q WHERE"
     " q.instance_id = t.i AND q.lock_uuid = t.l OFFSET 0) ok), u AS (UPDATE"
     " cairn.runner_instances ri SET status = t.st, result = t.res::jsonb, error = t.er::jsonb,"
     " state = coalesce(t.sx, ri.state), redrive = false, completed_at = clock_timestamp(),"
     " parent_pending = ri.parent_pending OR (NOT t.h AND ri.parent_id IS NOT NULL AND NOT"
     " ri.detached) FROM t WHERE ri.instance_id = t.i RETURNING ri.instance_id)"
     " DELETE FROM cairn.queued_instances q USING t WHERE q.ctid = t.tid",
     7, "uutttbo"},
    /* cairn_done with the probe: sent in its place, with its parameters, when a batch's plain
     * insert met a result recorded already. Never sent on its own. */
    {"cairn_done_probed",
     DONE_INSERT " AND NOT EXISTS (SELECT 1 FROM cairn.runner_actions_done d WHERE"
                 " d.instance_id = ($1::uuid[])[t.w] AND d.execution_id = t.e AND"
                 " d.attempt = t.a)",
     8, "uuiuitbi"},
};
#define NPERSIST (sizeof(persist_stmts) / sizeof(persist_stmts[0]))
/* Their indexes in persist_stmts, and the most parameters one takes. */
enum {
    PS_EVENT_LOCKS,
    PS_FENCE,
    PS_DONE,
    PS_WAITS,
    PS_PUBLISH,
    PS_SIGNALS,
    PS_STATE,
    PS_RELEASE,
    PS_CHILDREN,
    PS_JOINS,
    PS_CHILD_DONE,
    PS_FINISH,
    PS_DONE_PROBED /* in PS_DONE's place only */
};
#define PS_MAXP 11

/* Prepares the persist statements on a new connection. */
static cn_err
pg_prepare(struct pg_backend *b, struct cn_errmsg *err)
{
    size_t i;
    cn_err rv;

    if (b->prepared) {
        return CN_OK;
    }
    /* One plan per statement, made once: planning these joins at every bind cost more than
     * executing them (about 0.1 ms each, most of a small transaction's time). The session's
     * settings (pg_conn) make it a plan of index nested loops, right for every batch size.
     * Only this connection's prepared statements are generic: the other connections' statements
     * (claim, heartbeat, reclaim) keep custom plans, fitted to their arrays' sizes. */
    if ((rv = pg_plan_mode(b, true, err)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < NPERSIST; i++) {
        if ((rv = pg_prepare_stmt(b, persist_stmts[i].name, persist_stmts[i].sql,
                                  persist_stmts[i].nparams, err)) != CN_OK) {
            return rv;
        }
    }
    b->prepared = true;
    return CN_OK;
}

/* Reads one command's results in pipeline mode: the result, then the NULL that ends it. Returns
 * the result when it succeeded (the caller PQclears it), else NULL with err set; *dup says
 * whether the error was a result whose key is recorded already. */
static PGresult *
pipe_result(struct pg_backend *b, struct cn_errmsg *err, cn_err *rv, bool *dup)
{
    PGresult *r = PQgetResult(b->c), *end;
    ExecStatusType st = r != NULL ? PQresultStatus(r) : PGRES_FATAL_ERROR;

    while ((end = PQgetResult(b->c)) != NULL) {
        PQclear(end);
    }
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        return r;
    }
    if (r != NULL && st == PGRES_FATAL_ERROR) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char *key = PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME);
        *dup |= state != NULL && strcmp(state, "23505") == 0 && key != NULL &&
                strcmp(key, "runner_actions_done_pkey") == 0;
    }
    if (*rv == CN_OK) {
        const char *msg = r != NULL ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        *rv = cn_errmsg_set(err, PQstatus(b->c) == CONNECTION_OK ? CN_DB : CN_IO, "%s",
                            st == PGRES_PIPELINE_ABORTED ? "aborted"
                            : msg != NULL                ? msg
                                                         : PQerrorMessage(b->c));
    }
    PQclear(r);
    return NULL;
}

/* Sets the status of each child start of w[0..n) from cairn.start_children's rows (text:
 * child_id, status, message); children of a lost parent have no row and keep CREATED (the
 * write is lost: nothing is looked at). */
static void
children_status(PGresult *r, struct rn_write *w, size_t n)
{
    int row;
    size_t i, k;

    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid cid;
        int st;
        if (!pg_get_uuid(r, row, 0, cid.b)) {
            continue;
        }
        for (st = 0; st < RN_CHILD_STATUS_COUNT_; st++) {
            if (strcmp(PQgetvalue(r, row, 1), rn_child_status_name((enum rn_child_status) st)) ==
                0) {
                break;
            }
        }
        for (i = 0; i < n; i++) {
            for (k = 0; k < w[i].nchildren; k++) {
                struct rn_child_start *c = &w[i].children[k];
                if (rn_iid_eq(c->child_id, cid) && c->status == RN_CHILD_CREATED) {
                    c->status = st < RN_CHILD_STATUS_COUNT_ ? (enum rn_child_status) st
                                                            : RN_CHILD_NOT_FOUND;
                    (void) snprintf(c->message, sizeof(c->message), "%s",
                                    PQgetisnull(r, row, 2) ? "" : PQgetvalue(r, row, 2));
                }
            }
        }
    }
}

/* Sets what became of each wait for a child of w[0..n) from cairn.join_children's rows (binary:
 * exec_id, attempt, then text: status, outcome, result, error, workflow, message); the call's
 * result of an ended child is made here (pg_child_value). */
static void
joins_status(PGresult *r, struct rn_write *w, size_t n)
{
    int row;
    size_t i, k;

    for (row = 0; row < PQntuples(r); row++) {
        struct rn_xid xid;
        const char *status = PQgetvalue(r, row, 2); /* text's binary form: its bytes */
        uint32_t att;
        int st;
        if (!pg_get_uuid(r, row, 0, xid.b) || PQgetlength(r, row, 1) != 4) {
            continue;
        }
        att = pg_be32(PQgetvalue(r, row, 1));
        for (st = 0; st < RN_JOIN_STATUS_COUNT_; st++) {
            if (strcmp(status, rn_join_status_name((enum rn_join_status) st)) == 0) {
                break;
            }
        }
        for (i = 0; i < n; i++) {
            for (k = 0; k < w[i].njoins; k++) {
                struct rn_join *j = &w[i].joins[k];
                if (!rn_xid_eq(j->exec_id, xid) || j->attempt != att) {
                    continue;
                }
                j->status =
                    st < RN_JOIN_STATUS_COUNT_ ? (enum rn_join_status) st : RN_JOIN_NOT_CHILD;
                (void) snprintf(j->message, sizeof(j->message), "%s",
                                PQgetisnull(r, row, 7) ? "" : PQgetvalue(r, row, 7));
                if (j->status == RN_JOIN_ENDED &&
                    pg_child_value(PQgetvalue(r, row, 3),
                                   PQgetisnull(r, row, 4) ? NULL : PQgetvalue(r, row, 4),
                                   PQgetisnull(r, row, 5) ? NULL : PQgetvalue(r, row, 5), j->child,
                                   PQgetvalue(r, row, 6), &j->ok, &j->value) != CN_OK) {
                    cn_oom("a child's outcome");
                }
            }
        }
    }
}

/* Clears what an earlier try of the batch set on its waits for children. */
static void
joins_reset(struct rn_write *w, size_t n)
{
    size_t i, k;

    for (i = 0; i < n; i++) {
        for (k = 0; k < w[i].njoins; k++) {
            ir_val_release(w[i].joins[k].value);
            w[i].joins[k].value = ir_null();
            w[i].joins[k].status = RN_JOIN_WAITING;
            w[i].joins[k].ok = false;
            w[i].joins[k].message[0] = '\0';
        }
    }
}

/* A row the fence locks: a write's own queue row (under its claim token), or the queue row of
 * the parent of a child the batch finishes (lock NULL: whoever holds it). */
struct fence_row {
    struct rn_iid iid;
    const struct rn_token *lock;
};

static int
cmp_fence_row(const void *x, const void *y)
{
    const struct fence_row *a = x, *b = y;
    /* PostgreSQL orders uuids as their bytes; an own row before a parent entry of the same */
    int c = memcmp(a->iid.b, b->iid.b, sizeof(a->iid.b));

    return c != 0 ? c : (a->lock == NULL) - (b->lock == NULL);
}

/* The element type's OID of a persist statement's parameter (persist_stmts[].types). */
static uint32_t
elem_oid(char type)
{
    switch (type) {
    case 'u':
        return PG_OID_UUID;
    case 'i':
        return PG_OID_INT4;
    case 'I':
        return PG_OID_INT8;
    case 'b':
        return PG_OID_BYTEA;
    case 'o':
        return PG_OID_BOOL;
    default:
        return PG_OID_TEXT;
    }
}

/* Whether statement s goes into a batch whose parameters are a: the fence always, the others
 * when the batch has something of their kind (cairn_done_probed only in cairn_done's place). */
static bool
stmt_sent(size_t s, struct barr (*a)[PS_MAXP])
{
    return s < PS_DONE_PROBED && (s == PS_FENCE || a[s][0].n > 0);
}

/* Marks kept each write of w[0..n) whose row and token the fence returned (uuid, uuid). */
static void
fence_kept(PGresult *r, struct rn_write *w, size_t n)
{
    int row;
    size_t i;

    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid iid;
        struct rn_token lock;
        if (!pg_get_uuid(r, row, 0, iid.b) || !pg_get_uuid(r, row, 1, lock.b)) {
            continue;
        }
        for (i = 0; i < n; i++) {
            if (rn_iid_eq(w[i].instance_id, iid) && rn_token_eq(w[i].lock, lock)) {
                w[i].lost = false;
            }
        }
    }
}

bool
rn_stored_value(const char *data, size_t len, bool json, struct ir_val *out)
{
    struct cn_errmsg em;

    return (json ? ir_val_from_json(data, len, out, &em)
                 : ir_val_from_msgpack(data, len, IR_MP_INTERNAL, out, &em)) == CN_OK;
}

/* Sets what became of each wait of w[0..n) from cairn.runner_waits's rows (binary: instance,
 * execution, attempt, status, ok, json, result). An answer that does not decode stays
 * WAITING: it is recorded, and the instance's next claim reads it (and fails the same way, on
 * the claim's path, with the instance's error). */
static void
waits_status(PGresult *r, struct rn_write *w, size_t n)
{
    int row;
    size_t i, k;

    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid iid;
        struct rn_xid xid;
        const char *st = PQgetvalue(r, row, 3);
        uint32_t att;

        if (!pg_get_uuid(r, row, 0, iid.b) || !pg_get_uuid(r, row, 1, xid.b) ||
            PQgetlength(r, row, 2) != 4) {
            continue;
        }
        att = pg_be32(PQgetvalue(r, row, 2));
        for (i = 0; i < n; i++) {
            for (k = 0; k < w[i].nwaits && rn_iid_eq(w[i].instance_id, iid); k++) {
                struct rn_wait *x = &w[i].waits[k];
                if (!rn_xid_eq(x->exec_id, xid) || x->attempt != att) {
                    continue;
                }
                if (strcmp(st, "dropped") == 0) {
                    x->status = RN_WAIT_DROPPED;
                } else if (strcmp(st, "answered") == 0 && !PQgetisnull(r, row, 6) &&
                           rn_stored_value(PQgetvalue(r, row, 6), (size_t) PQgetlength(r, row, 6),
                                           PQgetvalue(r, row, 5)[0] != 0, &x->value)) {
                    x->status = RN_WAIT_ANSWERED;
                    x->ok = PQgetvalue(r, row, 4)[0] != 0;
                }
            }
        }
    }
}

/* Sets what became of each signal of w[0..n) from cairn.runner_signals's rows (binary:
 * instance, execution, attempt, status, message): a status cairn.signal answers is SENT; a
 * refusal is named as RN_SEND_STATUSES names it. A signal without a row (a lost write) keeps
 * what sends_reset set. */
static void
sends_status(PGresult *r, struct rn_write *w, size_t n)
{
    int row, st;
    size_t i, k;

    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid iid;
        struct rn_xid xid;
        const char *status = PQgetvalue(r, row, 3);
        uint32_t att;

        if (!pg_get_uuid(r, row, 0, iid.b) || !pg_get_uuid(r, row, 1, xid.b) ||
            PQgetlength(r, row, 2) != 4) {
            continue;
        }
        att = pg_be32(PQgetvalue(r, row, 2));
        for (i = 0; i < n; i++) {
            for (k = 0; k < w[i].nsends && rn_iid_eq(w[i].instance_id, iid); k++) {
                struct rn_send *s = &w[i].sends[k];
                if (!rn_xid_eq(s->exec_id, xid) || s->attempt != att) {
                    continue;
                }
                for (st = 1; st < RN_SEND_STATUS_COUNT_; st++) {
                    if (strcmp(status, rn_send_status_name((enum rn_send_status) st)) == 0) {
                        break;
                    }
                }
                s->status = st < RN_SEND_STATUS_COUNT_ ? (enum rn_send_status) st : RN_SEND_SENT;
                (void) snprintf(s->answer, sizeof(s->answer), "%s",
                                s->status == RN_SEND_SENT ? status : "");
                (void) snprintf(s->message, sizeof(s->message), "%s",
                                PQgetisnull(r, row, 4) ? "" : PQgetvalue(r, row, 4));
            }
        }
    }
}

/* Clears what an earlier try of the batch set on its signals: refused until a row says. */
static void
sends_reset(struct rn_write *w, size_t n)
{
    size_t i, k;

    for (i = 0; i < n; i++) {
        for (k = 0; k < w[i].nsends; k++) {
            w[i].sends[k].status = RN_SEND_NOT_FOUND;
            w[i].sends[k].answer[0] = '\0';
            (void) snprintf(w[i].sends[k].message, sizeof(w[i].sends[k].message),
                            "the write that sends it was not made");
        }
    }
}

/* Clears what an earlier try of the batch set on its waits. */
static void
waits_reset(struct rn_write *w, size_t n)
{
    size_t i, k;

    for (i = 0; i < n; i++) {
        for (k = 0; k < w[i].nwaits; k++) {
            ir_val_release(w[i].waits[k].value);
            w[i].waits[k].value = ir_null();
            w[i].waits[k].status = RN_WAIT_WAITING;
            w[i].waits[k].ok = false;
        }
    }
}

/* Sends one persist batch, its parameters built in a, as one pipeline: BEGIN, the event locks
 * (when it registers event waits), the fence, the writes in the fixed order, COMMIT, sync; then
 * reads every result: w[i].lost is set for every write but those the fence kept. probed: the
 * results go by cairn_done_probed. *dup: the batch failed on a result recorded already. */
static cn_err
persist_pipeline(struct pg_backend *b, struct rn_write *w, size_t n, struct barr (*a)[PS_MAXP],
                 const char depth[4], bool probed, bool *dup, struct cn_errmsg *err)
{
    const char *params[PS_MAXP];
    int lengths[PS_MAXP], formats[PS_MAXP];
    PGresult *r;
    size_t i, k, s;
    cn_err rv;

    *dup = false;
    for (i = 0; i < n; i++) {
        w[i].lost = true; /* until the fence says it kept the write */
    }
    waits_reset(w, n);
    sends_reset(w, n);
    joins_reset(w, n);
    rv = PQenterPipelineMode(b->c) == 1 ? CN_OK
                                        : cn_errmsg_set(err, CN_IO, "%s", PQerrorMessage(b->c));
    if (rv == CN_OK && PQsendQueryParams(b->c, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) != 1) {
        rv = cn_errmsg_set(err, CN_IO, "%s", PQerrorMessage(b->c));
    }
    for (s = 0; rv == CN_OK && s < NPERSIST; s++) {
        if (!stmt_sent(s, a)) {
            continue;
        }
        for (k = 0; k < (size_t) persist_stmts[s].nparams; k++) {
            formats[k] = 1;
            if (persist_stmts[s].types[k] == '1') {
                params[k] = depth; /* the one scalar, an int4 */
                lengths[k] = 4;
            } else if ((params[k] = pg_barr_end(&a[s][k], &lengths[k])) == NULL) {
                rv = CN_NOMEM;
            }
        }
        if (rv == CN_OK &&
            PQsendQueryPrepared(b->c,
                                persist_stmts[probed && s == PS_DONE ? PS_DONE_PROBED : s].name,
                                persist_stmts[s].nparams, params, lengths, formats, 1) != 1) {
            rv = cn_errmsg_set(err, CN_IO, "%s", PQerrorMessage(b->c));
        }
    }
    if (rv == CN_OK && (PQsendQueryParams(b->c, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) != 1 ||
                        PQpipelineSync(b->c) != 1)) {
        rv = cn_errmsg_set(err, CN_IO, "%s", PQerrorMessage(b->c));
    }
    if (rv == CN_OK) {
        /* BEGIN, the statements, COMMIT: every result in order, then the sync. */
        PQclear(pipe_result(b, err, &rv, dup));
        for (s = 0; s < NPERSIST; s++) {
            if (!stmt_sent(s, a)) {
                continue;
            }
            r = pipe_result(b, err, &rv, dup);
            if (r != NULL && s == PS_FENCE) {
                fence_kept(r, w, n);
            } else if (r != NULL && s == PS_CHILDREN) {
                children_status(r, w, n);
            } else if (r != NULL && s == PS_JOINS) {
                joins_status(r, w, n);
            } else if (r != NULL && s == PS_WAITS) {
                waits_status(r, w, n);
            } else if (r != NULL && s == PS_SIGNALS) {
                sends_status(r, w, n);
            }
            PQclear(r);
        }
        PQclear(pipe_result(b, err, &rv, dup)); /* COMMIT */
        r = PQgetResult(b->c);
        if (r == NULL || PQresultStatus(r) != PGRES_PIPELINE_SYNC) {
            if (rv == CN_OK) {
                rv = cn_errmsg_set(err, CN_IO, "pipeline: no sync (%s)", PQerrorMessage(b->c));
            }
        }
        PQclear(r);
    }
    if (PQpipelineStatus(b->c) != PQ_PIPELINE_OFF && PQexitPipelineMode(b->c) != 1) {
        /* results left unread: the connection cannot be trusted any more */
        PQfinish(b->c);
        b->c = NULL;
        if (rv == CN_OK) {
            rv = cn_errmsg_set(err, CN_IO, "pipeline did not end cleanly");
        }
    }
    if (rv != CN_OK && b->c != NULL && PQstatus(b->c) == CONNECTION_OK) {
        pg_rollback(b); /* an error inside the explicit transaction left it aborted */
    }
    return rv;
}

/* Puts the results of w[0..n) into cairn_done's parameters: each write with results once, then
 * its results, each naming it by its position. tmp: scratch. */
static void
put_results(struct barr *da, const struct rn_write *w, size_t n, struct cn_buf *tmp)
{
    size_t i, k;

    for (i = 0; i < n; i++) {
        if (w[i].ndone == 0) {
            continue;
        }
        pg_barr_uuid(&da[0], w[i].instance_id.b);
        pg_barr_uuid(&da[1], w[i].lock.b);
        for (k = 0; k < w[i].ndone; k++) {
            const struct rn_done *d = &w[i].done[k];
            cn_buf_clear(tmp);
            if (ir_val_to_msgpack(d->value, IR_MP_INTERNAL, tmp) != CN_OK) {
                cn_buf_clear(tmp); /* not storable (too deep): nil in its place */
                da[6].bad |= cn_buf_putc(tmp, (char) 0xc0) != CN_OK;
            }
            pg_barr_int(&da[2], (int64_t) da[0].n);
            pg_barr_uuid(&da[3], d->exec_id.b);
            pg_barr_int(&da[4], d->attempt);
            pg_barr_put(&da[5], d->ok ? "ok" : "error", d->ok ? 2 : 5);
            pg_barr_put(&da[6], tmp->data, tmp->len);
            if (d->step > 0) {
                pg_barr_int(&da[7], d->step);
            } else {
                pg_barr_null(&da[7]);
            }
        }
    }
}

/* Puts wait x of write w into cairn_waits's parameters (and a keyed event's registration into
 * cairn_event_locks's). tmp: scratch. */
static void
put_wait(struct barr (*a)[PS_MAXP], const struct rn_write *w, const struct rn_wait *x,
         struct cn_buf *tmp)
{
    struct barr *wa = a[PS_WAITS], *la = a[PS_EVENT_LOCKS];
    const char *op = x->drop ? "drop" : x->expire ? "expire" : "register";
    const char *key = x->event && x->key != NULL ? x->key : NULL;

    pg_barr_uuid(&wa[0], w->instance_id.b);
    pg_barr_uuid(&wa[1], w->lock.b);
    pg_barr_uuid(&wa[2], x->exec_id.b);
    pg_barr_int(&wa[3], x->attempt);
    pg_barr_put(&wa[4], op, strlen(op));
    pg_barr_bool(&wa[5], x->event);
    pg_barr_put(&wa[6], x->names, strlen(x->names));
    if (key != NULL) {
        pg_barr_put(&wa[7], key, strlen(key));
    } else {
        pg_barr_null(&wa[7]);
    }
    pg_barr_int(&wa[8], x->timeout_at_ms);
    pg_barr_bool(&wa[9], x->timeout_ok);
    cn_buf_clear(tmp);
    if (x->expire && ir_val_to_msgpack(x->timeout_value, IR_MP_INTERNAL, tmp) == CN_OK) {
        pg_barr_put(&wa[10], tmp->data, tmp->len);
    } else if (x->expire) {
        wa[10].bad |= cn_buf_putc(tmp, (char) 0xc0) != CN_OK; /* not storable: nil */
        pg_barr_put(&wa[10], tmp->data, tmp->len);
    } else {
        pg_barr_null(&wa[10]);
    }
    if (key != NULL && !x->drop) {
        pg_barr_uuid(&la[0], w->instance_id.b);
        pg_barr_put(&la[1], x->names, strlen(x->names));
        pg_barr_put(&la[2], key, strlen(key));
    }
}

cn_err
pg_persist(struct rn_backend *base, struct rn_write *w, size_t n, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    struct fence_row *order;
    size_t nrows = 0;
    struct barr a[NPERSIST][PS_MAXP]; /* per statement, its array parameters */
    struct cn_buf tmp = CN_BUF_INIT, js = CN_BUF_INIT;
    char depth[4] = {0, 0, 0, 64}; /* the children's one scalar: int4, big-endian */
    size_t i, k, s, bytes = 0;
    bool dup;
    cn_err rv;

    if (n == 0) {
        return CN_OK;
    }
    if ((rv = pg_conn(b, err)) != CN_OK || (rv = pg_prepare(b, err)) != CN_OK) {
        return rv;
    }
    /* The fence locks its rows one by one in the order of its arrays: every row the batch will
     * touch — its own, the parents' of the children it finishes (cairn_child_done wakes
     * them), and the receivers' of the signals it sends — at once, by instance id. Two batches then
     * never wait on each other in a cycle (they did when the parents were locked after the fence: a
     * batch finishing a child of P while writing Q against one finishing a child of Q while writing
     * P), nor a batch and cairn.wake_parents, which waits in the same order. The heartbeat, the
     * claim and the reclaimer skip locked rows and wait for none. */
    for (i = 0; i < n; i++) {
        nrows += 2 + w[i].nsends;
    }
    if ((order = malloc(nrows * sizeof(*order))) == NULL) {
        return CN_NOMEM;
    }
    nrows = 0;
    for (s = 0; s < NPERSIST; s++) {
        for (k = 0; k < PS_MAXP; k++) {
            pg_barr_begin(&a[s][k], k < (size_t) persist_stmts[s].nparams
                                        ? elem_oid(persist_stmts[s].types[k])
                                        : PG_OID_INT4);
        }
    }
    for (i = 0; i < n; i++) {
        order[nrows].iid = w[i].instance_id;
        order[nrows++].lock = &w[i].lock;
        if (w[i].outcome != RN_RUNNING && w[i].parent.has) {
            order[nrows].iid = w[i].parent.parent;
            order[nrows++].lock = NULL;
        }
        for (k = 0; k < w[i].nsends; k++) {
            order[nrows].iid = w[i].sends[k].to;
            order[nrows++].lock = NULL;
        }
    }
    qsort(order, nrows, sizeof(*order), cmp_fence_row);
    for (i = 0; i < nrows; i++) {
        if (order[i].lock == NULL && i > 0 && rn_iid_eq(order[i - 1].iid, order[i].iid)) {
            continue; /* locked already: an own row, another child's parent, a receiver */
        }
        pg_barr_uuid(&a[PS_FENCE][0], order[i].iid.b);
        if (order[i].lock != NULL) {
            pg_barr_uuid(&a[PS_FENCE][1], order[i].lock->b);
        } else {
            pg_barr_null(&a[PS_FENCE][1]);
        }
    }
    free(order);
    put_results(a[PS_DONE], w, n, &tmp);
    for (i = 0; i < n; i++) {
        for (k = 0; k < w[i].nwaits; k++) {
            put_wait(a, &w[i], &w[i].waits[k], &tmp);
        }
        for (k = 0; k < w[i].npublished; k++) {
            if (!pg_json_text(w[i].published[k].value, &js)) {
                continue; /* the executor refused what JSON cannot hold: not reached */
            }
            pg_barr_uuid(&a[PS_PUBLISH][0], w[i].instance_id.b);
            pg_barr_uuid(&a[PS_PUBLISH][1], w[i].lock.b);
            pg_barr_put(&a[PS_PUBLISH][2], w[i].published[k].name, strlen(w[i].published[k].name));
            pg_barr_put(&a[PS_PUBLISH][3], js.data, js.len);
        }
        for (k = 0; k < w[i].nsends; k++) {
            const struct rn_send *x = &w[i].sends[k];
            struct barr *sa = a[PS_SIGNALS];
            if (!pg_json_text(x->payload, &js)) {
                continue; /* the executor refused what JSON cannot hold: not reached */
            }
            pg_barr_uuid(&sa[0], w[i].instance_id.b);
            pg_barr_uuid(&sa[1], w[i].lock.b);
            pg_barr_uuid(&sa[2], x->exec_id.b);
            pg_barr_int(&sa[3], x->attempt);
            pg_barr_uuid(&sa[4], x->to.b);
            pg_barr_put(&sa[5], x->name, strlen(x->name));
            pg_barr_put(&sa[6], js.data, js.len);
        }
        for (k = 0; k < w[i].nchildren; k++) {
            struct rn_child_start *c = &w[i].children[k];
            struct barr *ca = a[PS_CHILDREN];
            c->status = RN_CHILD_CREATED;
            c->message[0] = '\0';
            if (c->input.type != IR_T_MAP || !jsonb_text(c->input, &js)) {
                /* An input a JSON object cannot hold (NaN, U+0000): refused here. */
                c->status = RN_CHILD_BAD_INPUT;
                (void) snprintf(c->message, sizeof(c->message),
                                "the inputs of %s cannot be stored as a JSON object (NaN, an "
                                "infinity or the character U+0000)",
                                c->workflow);
                continue;
            }
            pg_barr_uuid(&ca[0], w[i].instance_id.b);
            pg_barr_uuid(&ca[1], w[i].lock.b);
            pg_barr_uuid(&ca[2], c->child_id.b);
            pg_barr_uuid(&ca[3], c->exec_id.b);
            pg_barr_int(&ca[4], c->attempt);
            pg_barr_put(&ca[5], c->workflow, strlen(c->workflow));
            if (c->version != NULL) {
                pg_barr_put(&ca[6], c->version, strlen(c->version));
            } else {
                pg_barr_null(&ca[6]);
            }
            pg_barr_put(&ca[7], js.data, js.len);
            pg_barr_int(&ca[8], c->timeout_ms);
            pg_barr_bool(&ca[9], c->detached);
            depth[0] = (char) (w[i].max_child_depth >> 24);
            depth[1] = (char) (w[i].max_child_depth >> 16);
            depth[2] = (char) (w[i].max_child_depth >> 8);
            depth[3] = (char) w[i].max_child_depth;
        }
        for (k = 0; k < w[i].njoins; k++) {
            const struct rn_join *j = &w[i].joins[k];
            struct barr *ja = a[PS_JOINS];
            pg_barr_uuid(&ja[0], w[i].instance_id.b);
            pg_barr_uuid(&ja[1], w[i].lock.b);
            pg_barr_uuid(&ja[2], j->exec_id.b);
            pg_barr_int(&ja[3], j->attempt);
            pg_barr_uuid(&ja[4], j->child.b);
        }
        if (w[i].outcome != RN_RUNNING && w[i].parent.has) {
            struct barr *pa = a[PS_CHILD_DONE];
            cn_buf_clear(&tmp);
            if (ir_val_to_msgpack(w[i].parent_value, IR_MP_INTERNAL, &tmp) != CN_OK) {
                cn_buf_clear(&tmp);
                pa[6].bad |= cn_buf_putc(&tmp, (char) 0xc0) != CN_OK;
            }
            pg_barr_uuid(&pa[0], w[i].instance_id.b);
            pg_barr_uuid(&pa[1], w[i].lock.b);
            pg_barr_uuid(&pa[2], w[i].parent.parent.b);
            pg_barr_uuid(&pa[3], w[i].parent.exec_id.b);
            pg_barr_int(&pa[4], w[i].parent.attempt);
            pg_barr_put(&pa[5], w[i].parent_ok ? "ok" : "error", w[i].parent_ok ? 2 : 5);
            pg_barr_put(&pa[6], tmp.data, tmp.len);
        }
        if (w[i].state != NULL && w[i].outcome == RN_RUNNING) {
            pg_barr_uuid(&a[PS_STATE][0], w[i].instance_id.b);
            pg_barr_uuid(&a[PS_STATE][1], w[i].lock.b);
            pg_barr_put(&a[PS_STATE][2], w[i].state, w[i].state_len);
            pg_barr_int(&a[PS_STATE][3], w[i].state_step);
            pg_barr_int(&a[PS_STATE][4], w[i].cleanup_until_ms);
        }
        if (w[i].outcome != RN_RUNNING) {
            const char *status = rn_outcome_name(w[i].outcome);
            pg_barr_uuid(&a[PS_FINISH][0], w[i].instance_id.b);
            pg_barr_uuid(&a[PS_FINISH][1], w[i].lock.b);
            pg_barr_put(&a[PS_FINISH][2], status, strlen(status));
            if (w[i].outcome == RN_COMPLETED && pg_json_text(w[i].result, &js)) {
                pg_barr_put(&a[PS_FINISH][3], js.data, js.len);
                pg_barr_null(&a[PS_FINISH][4]);
            } else {
                pg_barr_null(&a[PS_FINISH][3]);
                if (w[i].result.type != IR_T_NULL && pg_json_text(w[i].result, &js)) {
                    pg_barr_put(&a[PS_FINISH][4], js.data, js.len);
                } else {
                    pg_barr_null(&a[PS_FINISH][4]);
                }
            }
            /* The last snapshot rides on the outcome's update: one row version, not two. */
            if (w[i].state != NULL) {
                pg_barr_put(&a[PS_FINISH][5], w[i].state, w[i].state_len);
            } else {
                pg_barr_null(&a[PS_FINISH][5]);
            }
            pg_barr_bool(&a[PS_FINISH][6], w[i].parent.has);
        } else if (w[i].release) {
            pg_barr_uuid(&a[PS_RELEASE][0], w[i].instance_id.b);
            pg_barr_uuid(&a[PS_RELEASE][1], w[i].lock.b);
            pg_barr_int(&a[PS_RELEASE][2], w[i].wake_at_ms);
        }
    }
    rv = persist_pipeline(b, w, n, a, depth, false, &dup, err);
    if (rv != CN_OK && dup && b->c != NULL) {
        /* A result recorded already (a batch resent after a lost commit acknowledgement, a
         * result reported again after a re-claim): the whole transaction rolled back; written
         * again with the probe, which leaves such results out and keeps the rest. */
        rv = persist_pipeline(b, w, n, a, depth, true, &dup, err);
    }

    for (s = 0; s < NPERSIST; s++) {
        for (k = 0; k < PS_MAXP; k++) {
            bytes += a[s][k].b.len;
            pg_barr_fini(&a[s][k]);
        }
    }
    if (rv == CN_OK && bytes > PG_BIG_WRITE && b->c != NULL) {
        /* libpq never shrinks a connection's buffers: after the snapshot of a 300 000-action
         * fan-out they held about 70 MiB for good (a runner at 9 MiB idle stayed at 80 MiB
         * once it finished). A new connection gives them back; it costs a few milliseconds,
         * against the hundreds such a write takes. */
        PQfinish(b->c);
        b->c = NULL;
    }
    cn_buf_fini(&tmp);
    cn_buf_fini(&js);
    if (rv != CN_OK) {
        for (i = 0; i < n; i++) {
            w[i].lost = false; /* not written, not known lost: the caller retries or evicts */
        }
        waits_reset(w, n); /* answers of a transaction that rolled back */
        sends_reset(w, n);
    }
    return rv;
}
