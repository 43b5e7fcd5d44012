/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL backend (backend.h) over one libpq connection. Every statement is
 * parameterised; batches travel as array parameters (binary arrays built here), so a batch of
 * any size is a handful of statements, not one per instance, and a persist batch is those
 * statements prepared once and sent as one pipeline (one round trip).
 * Persisting is idempotent: when the connection drops around COMMIT the outcome is unknown and
 * the batch is sent again; the results' key refuses a result recorded already, and the batch is
 * then written once more with a probe that leaves such results out.
 * Results come back in binary format where ids and bytes are involved (uuid = 16 raw bytes,
 * bytea = raw bytes). A lost connection is reported as CN_IO; the next call reconnects.
 * Used by one thread at a time.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "ir/base/buf.h"
#include "ir/base/clock.h"
#include "ir/base/uuid.h"
#include "ir/base/vec.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "runner/backend.h"
#include "runner/db.h"
#include "runner/errors.h"
#include "runner/exec.h"
#include "runner/schedule.h"

struct pg_backend {
    struct rn_backend base;
    char *url;
    PGconn *c;
    bool listening;            /* LISTEN cairn_enqueue issued on c */
    bool listening_notices;    /* LISTEN cairn_cancel and cairn_child issued on c */
    bool prepared;             /* the persist statements are prepared on c */
    bool claim_prepared;       /* the one-tenant claim without limits is prepared on c */
    bool generic;              /* plan_cache_mode is force_generic_plan on c */
    bool limits;               /* some workflow has a concurrency limit (checked every second) */
    bool tenants;              /* there is more than the default tenant (checked with limits) */
    int64_t limits_checked_ms; /* monotonic; 0: never */
};

/* How often the claim asks whether any workflow has a concurrency limit: a limit set or a
 * first concurrency key takes at most this long to be claimed for. */
#define PG_LIMITS_CHECK_MS 1000

/* A persist that sent more than this reconnects afterwards (see pg_persist). */
#define PG_BIG_WRITE (4u << 20)

/* ---- helpers ------------------------------------------------------------------------------ */

static cn_err
pg_conn(struct pg_backend *b, struct cn_errmsg *err)
{
    PGresult *r;
    cn_err rv;
    bool ok;

    if (b->c != NULL && PQstatus(b->c) == CONNECTION_OK) {
        return CN_OK;
    }
    if (b->c != NULL) {
        PQfinish(b->c);
        b->c = NULL;
    }
    b->listening = false; /* a new session listens afresh, and prepares afresh */
    b->listening_notices = false;
    b->prepared = false;
    b->claim_prepared = false;
    b->generic = false;
    if ((rv = rn_db_connect(b->url, &b->c, err)) != CN_OK) {
        return rv;
    }
    /* Index lookups only. Every statement of the runner reads a few rows by key, from tables
     * whose statistics lie: queued_instances is often empty when autovacuum analyzes it and
     * holds tens of thousands of rows a second later. A plan chosen on such statistics (a
     * full scan and a sort for the claim, a hash join over the queue for a write) turns each
     * statement into O(queue) work; measured, a drain of 20 000 instances fell from 12 000
     * to 650 instances/s. Sorts are off so that the claim walks its ordered index rather than
     * sorting another. Every statement here runs in milliseconds, and the cost penalties these
     * settings add to a plan can make PostgreSQL compile one with JIT at every run, for more than
     * it saves: hence jit = off. */
    r = PQexec(b->c, "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_sort = "
                     "off; SET enable_hashjoin = off; SET enable_mergejoin = off; SET jit = off");
    ok = r != NULL && PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        rv = cn_errmsg_set(err, PQstatus(b->c) == CONNECTION_OK ? CN_DB : CN_IO,
                           "session settings: %s", PQerrorMessage(b->c));
        PQfinish(b->c);
        b->c = NULL;
        return rv;
    }
    return CN_OK;
}

/* Runs sql with text parameters and binary results. */
static cn_err
pg_exec_bin(struct pg_backend *b, const char *sql, int n, const char *const *params, PGresult **out,
            struct cn_errmsg *err)
{
    return rn_db_exec_binary(b->c, sql, n, params, out, err);
}

static cn_err
pg_simple(struct pg_backend *b, const char *sql, struct cn_errmsg *err)
{
    return rn_db_exec(b->c, sql, 0, NULL, NULL, err);
}

static void
pg_rollback(struct pg_backend *b)
{
    struct cn_errmsg e2;

    if (pg_simple(b, "ROLLBACK", &e2) != CN_OK) {
        /* the connection is gone: the server rolled back by itself */
    }
}

/* A one-dimensional array in PostgreSQL's binary format (array_recv), built one element at a
 * time: every array parameter the runner sends. Their text form cost the server array_in,
 * uuid_in and hex decoding of every element, about a tenth of its time in the sequence
 * benchmark, and the runner the hex encoding of every snapshot and result (twice the bytes on
 * the wire). */
struct barr {
    struct cn_buf b;
    uint32_t oid; /* the element type: one of the PG_OID_ below */
    uint32_t n;
    bool nulls, bad;
};

/* Element types' OIDs (pg_type.dat): fixed since PostgreSQL 8.3. */
#define PG_OID_BOOL  16u
#define PG_OID_BYTEA 17u
#define PG_OID_INT8  20u
#define PG_OID_INT4  23u
#define PG_OID_TEXT  25u
#define PG_OID_UUID  2950u
/* ndim, flags, element type, then one dimension: its length and lower bound */
#define BARR_HEADER 20u

static void
barr_be32(struct barr *a, uint32_t v)
{
    const char be[4] = {(char) (v >> 24), (char) (v >> 16), (char) (v >> 8), (char) v};

    a->bad |= cn_buf_append(&a->b, be, 4) != CN_OK;
}

static void
barr_begin(struct barr *a, uint32_t oid)
{
    memset(a, 0, sizeof(*a));
    a->oid = oid;
    a->bad = cn_buf_reserve(&a->b, BARR_HEADER) != CN_OK;
    a->b.len = a->bad ? 0 : BARR_HEADER; /* written by barr_end, once the count is known */
}

/* An element of any type, as its binary form's bytes (text: its bytes, no NUL). */
static void
barr_put(struct barr *a, const void *p, size_t len)
{
    if (len > INT32_MAX) {
        a->bad = true;
        return;
    }
    a->n++;
    barr_be32(a, (uint32_t) len);
    a->bad |= cn_buf_append(&a->b, p, len) != CN_OK;
}

static void
barr_null(struct barr *a)
{
    a->n++;
    a->nulls = true;
    barr_be32(a, UINT32_MAX); /* length -1 */
}

static void
barr_uuid(struct barr *a, const uint8_t id[16])
{
    barr_put(a, id, 16);
}

/* int4 or int8, as the array's element type says. */
static void
barr_int(struct barr *a, int64_t v)
{
    const uint64_t u = (uint64_t) v;
    const char be[8] = {(char) (u >> 56), (char) (u >> 48), (char) (u >> 40), (char) (u >> 32),
                        (char) (u >> 24), (char) (u >> 16), (char) (u >> 8),  (char) u};

    if (a->oid == PG_OID_INT4) {
        a->bad |= v < INT32_MIN || v > INT32_MAX;
        barr_put(a, be + 4, 4);
    } else {
        barr_put(a, be, 8);
    }
}

static void
barr_bool(struct barr *a, bool v)
{
    const char c = v ? 1 : 0;

    barr_put(a, &c, 1);
}

/* The array's bytes and their count in *len; NULL when it could not be built. */
static const char *
barr_end(struct barr *a, int *len)
{
    size_t used = a->b.len;

    if (a->bad || used > INT_MAX) {
        return NULL;
    }
    /* the header, in the room barr_begin left (not appended: cn_buf_append would end it with
     * a NUL over the first element's length) */
    {
        const uint32_t h[5] = {htonl(a->n > 0 ? 1 : 0), htonl(a->nulls ? 1 : 0), htonl(a->oid),
                               htonl(a->n), htonl(1)};
        memcpy(a->b.data, h, sizeof(h));
    }
    /* an empty array is its first 12 bytes, with no dimension */
    *len = a->n > 0 ? (int) used : 12;
    return a->b.data;
}

static void
barr_fini(struct barr *a)
{
    cn_buf_fini(&a->b);
}

/* A statement's parameters for pg_exec_args: scalars in text form, arrays in binary. One past
 * PA_MAX marks them bad (the statement is then not run). */
#define PA_MAX 5
struct pargs {
    const char *v[PA_MAX];
    int len[PA_MAX], fmt[PA_MAX];
    int n;
    bool bad;
};

static void
pa_text(struct pargs *g, const char *s)
{
    if (g->n == PA_MAX) {
        g->bad = true;
        return;
    }
    g->v[g->n] = s;
    g->len[g->n] = 0;
    g->fmt[g->n++] = 0;
}

/* a's bytes as the next parameter: a is ended here, and must outlive the statement. */
static void
pa_array(struct pargs *g, struct barr *a)
{
    if (g->n == PA_MAX) {
        g->bad = true;
        return;
    }
    g->len[g->n] = 0;
    g->v[g->n] = barr_end(a, &g->len[g->n]);
    g->bad |= g->v[g->n] == NULL;
    g->fmt[g->n++] = 1;
}

/* Runs sql with g's parameters and binary results (db.c's errors), or CN_NOMEM when one of
 * g's arrays could not be built. */
static cn_err
pg_exec_args(struct pg_backend *b, const char *sql, const struct pargs *g, PGresult **out,
             struct cn_errmsg *err)
{
    if (g->bad) {
        return cn_errmsg_set(err, CN_NOMEM, "statement parameters: out of memory, or more than %d",
                             PA_MAX);
    }
    return rn_db_exec_formats(b->c, sql, g->n, g->v, g->len, g->fmt, out, err);
}

static uint32_t
be32(const char *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return ntohl(v);
}

/* Binary int8 column (big-endian); 0 for NULL or a column of another size. */
static int64_t
get_i64(PGresult *r, int row, int col)
{
    const char *p = PQgetvalue(r, row, col);

    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8) {
        return 0;
    }
    return (int64_t) (((uint64_t) be32(p) << 32) | be32(p + 4));
}

/* Binary uuid column -> 16 bytes. */
static bool
get_uuid(PGresult *r, int row, int col, uint8_t out[16])
{
    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 16) {
        return false;
    }
    memcpy(out, PQgetvalue(r, row, col), 16);
    return true;
}

/* ---- claim -------------------------------------------------------------------------------- */

/* The free rows of the tenant `default` in priority order, through queued_instances_ready
 * (0017: it leads with the tenant), which holds only rows nobody holds and no row waiting for
 * a concurrency slot (0012): what the claim walks while there is no other tenant. */
#define CLAIM_FREE_ONE                                                               \
    " f AS ("                                                                        \
    "  SELECT ctid AS tid, instance_id AS iid FROM cairn.queued_instances"           \
    "   WHERE tenant_id = 'default' AND lock_uuid IS NULL AND scheduled_at <= now()" \
    "     AND (limit_name IS NULL OR holds_slot)"                                    \
    "   ORDER BY priority DESC, scheduled_at LIMIT $5 FOR UPDATE SKIP LOCKED),"

/* With several tenants, the free rows taken in turns: the same walk per tenant (each up to $5,
 * in its own priority order), then the first of each tenant, the second of each, and so on. A
 * tenant with a backlog of 100 000 thus takes as many of a claim's places as one with a single
 * instance due, which starts at the next claim instead of after the backlog. Priority orders
 * a tenant's own instances, not one tenant's against another's. The rows walked past the
 * $5 taken stay locked until the claim commits (other runners skip them meanwhile): at most
 * $5 per tenant with instances due, one index probe for a tenant with none. */
#define CLAIM_FREE_FAIR                                                                     \
    " f AS ("                                                                               \
    "  SELECT x.tid, x.iid FROM cairn.tenants t CROSS JOIN LATERAL ("                       \
    "    SELECT q.ctid AS tid, q.instance_id AS iid, q.priority, q.scheduled_at"            \
    "      FROM cairn.queued_instances q"                                                   \
    "     WHERE q.tenant_id = t.name AND q.lock_uuid IS NULL AND q.scheduled_at <= now()"   \
    "       AND (q.limit_name IS NULL OR q.holds_slot)"                                     \
    "     ORDER BY q.priority DESC, q.scheduled_at LIMIT $5 FOR UPDATE OF q SKIP LOCKED) x" \
    "   ORDER BY row_number() OVER (PARTITION BY t.name ORDER BY x.priority DESC,"          \
    "            x.scheduled_at), x.priority DESC, x.scheduled_at LIMIT $5),"

/* Two index walks (0004): expired leases first (a dead runner's instances, already started,
 * through queued_instances_expiry), then the free rows (CLAIM_FREE, one of the two above).
 * CTE scans are pulled on demand, so the second walk runs only when the first found fewer than
 * $1 (FOR UPDATE cannot sit under a UNION, hence the two CTEs). now(), not clock_timestamp():
 * a stable bound is an index condition, a volatile one a filter applied to every entry of the
 * walk. CLAIM_TAKE is how many the two walks may take. */
#define CLAIM_WALKS(CLAIM_FREE, CLAIM_TAKE)                                                       \
    " e AS ("                                                                                     \
    "  SELECT ctid AS tid, instance_id AS iid FROM cairn.queued_instances"                        \
    "   WHERE lock_uuid IS NOT NULL AND lock_expires_at < now() AND scheduled_at <= now()"        \
    "   ORDER BY lock_expires_at LIMIT $4 FOR UPDATE SKIP LOCKED)," CLAIM_FREE                    \
    " c AS (SELECT tid, iid, row_number() OVER () AS n"                                           \
    "        FROM (SELECT tid, iid FROM e UNION ALL SELECT tid, iid FROM f LIMIT " CLAIM_TAKE     \
    ") u)," /* the stored (possibly compressed) sizes: read from the row, nothing is decompressed \
             */                                                                                   \
    " s AS (SELECT c.tid, c.n, sum(pg_column_size(ri.input) +"                                    \
    "              coalesce(pg_column_size(ri.state), 0)) OVER (ORDER BY c.n) AS upto,"           \
    "              ri.started_at IS NOT NULL AS again"                                            \
    "        FROM c JOIN cairn.runner_instances ri ON ri.instance_id = c.iid),"                   \
    " k AS (SELECT tid, again FROM s WHERE s.n = 1 OR s.upto <= $3::bigint),"                     \
    " h AS ("                                                                                     \
    "  UPDATE cairn.queued_instances q SET lock_uuid = gen_random_uuid(), woken = false,"         \
    "         lock_expires_at = clock_timestamp() + $2::bigint * interval '1 millisecond'"        \
    "    FROM k WHERE q.ctid = k.tid"                                                             \
    "  RETURNING q.instance_id, q.lock_uuid, q.workflow_version_id, k.again),"

/* Marks the claimed instances (q) running and returns what the runner needs of them (a child
 * started with `start` has no parent_id here: nobody waits for its outcome). The workflow
 * version is the instance's, whose foreign key carries the tenant (0017), not the queue row's,
 * which an application could point at another tenant's version. */
#define CLAIM_MARK                                                                             \
    " UPDATE cairn.runner_instances ri SET status = 'running',"                                \
    "        started_at = coalesce(ri.started_at, clock_timestamp())"                          \
    "   FROM q WHERE ri.instance_id = q.instance_id"                                           \
    " RETURNING q.instance_id, q.lock_uuid, ri.workflow_version_id, ri.workflow_name,"         \
    "           ri.input::text AS input, ri.state,"                                            \
    "           CASE WHEN ri.cancel_requested_at IS NOT NULL"                                  \
    "                THEN coalesce(ri.cancel_reason, 'cancelled') END AS cancel,"              \
    "           floor(extract(epoch FROM ri.deadline_at) * 1000)::bigint AS deadline,"         \
    "           ri.timeout_ms, ri.redrive, CASE WHEN NOT ri.detached THEN ri.parent_id END AS" \
    "           parent_id, ri.parent_exec_id, ri.parent_attempt, q.again, ri.state_step"


/* While some workflow has a concurrency limit (0012), the claim first takes instances waiting
 * for a slot through cairn.claim_limited (at most $6), then fills the rest of $1 from the walks.
 * The function runs first (the walks' LIMIT reads its count) and its own statements see its
 * rows taken; the walks read the statement's snapshot, in which those rows still wait for a
 * slot and so match neither walk. One statement, one round trip, as without limits. */
#define CLAIM_LIMITED_FIRST \
    "WITH l AS (SELECT * FROM cairn.claim_limited($6::integer, $2::bigint)),"
#define CLAIM_LIMITED_REST "greatest($1::bigint - (SELECT count(*) FROM l), 0)"
#define CLAIM_LIMITED_Q                                                         \
    " q AS (SELECT * FROM h UNION ALL SELECT l_instance_id, l_lock, l_version," \
    "        (SELECT ri.started_at IS NOT NULL FROM cairn.runner_instances ri"  \
    "          WHERE ri.instance_id = l_instance_id) FROM l)"

/* Indexed by [limits][tenants]: whether some workflow has a limit, whether there are tenants
 * besides the default. */
static const char *claim_sql[2][2] = {
    {"WITH" CLAIM_WALKS(CLAIM_FREE_ONE, "$1") " q AS (SELECT * FROM h)" CLAIM_MARK,
     "WITH" CLAIM_WALKS(CLAIM_FREE_FAIR, "$1") " q AS (SELECT * FROM h)" CLAIM_MARK},
    {CLAIM_LIMITED_FIRST CLAIM_WALKS(CLAIM_FREE_ONE, CLAIM_LIMITED_REST) CLAIM_LIMITED_Q CLAIM_MARK,
     CLAIM_LIMITED_FIRST CLAIM_WALKS(CLAIM_FREE_FAIR, CLAIM_LIMITED_REST)
         CLAIM_LIMITED_Q CLAIM_MARK}};

/* The latest result per execution id of those recorded with a snapshot (or by a child), and
 * every result recorded as a step after the snapshot: those are replayed in order. */
static const char *done_sql =
    "(SELECT DISTINCT ON (instance_id, execution_id) instance_id, execution_id, attempt,"
    "        status = 'ok', result, NULL::integer AS step"
    "   FROM cairn.runner_actions_done WHERE instance_id = ANY($1::uuid[]) AND step IS NULL"
    "  ORDER BY instance_id, execution_id, attempt DESC)"
    " UNION ALL"
    " SELECT d.instance_id, d.execution_id, d.attempt, d.status = 'ok', d.result, d.step"
    "   FROM cairn.runner_actions_done d JOIN cairn.runner_instances ri"
    "     ON ri.instance_id = d.instance_id"
    "  WHERE d.instance_id = ANY($1::uuid[]) AND d.step > ri.state_step";

void
rn_claimed_free(struct rn_claimed *c, size_t n)
{
    size_t i, k;

    for (i = 0; c != NULL && i < n; i++) {
        free(c[i].workflow);
        free(c[i].cancel_reason);
        ir_val_release(c[i].input);
        free(c[i].state);
        for (k = 0; k < c[i].ndone; k++) {
            ir_val_release(c[i].done[k].value);
        }
        free(c[i].done);
    }
    free(c);
}

/* Adds the recorded results of r (done_sql) to the claimed instances. */
static cn_err
attach_done(PGresult *r, struct rn_claimed *cl, size_t n, struct cn_errmsg *err)
{
    int row, rows = PQntuples(r);
    size_t i;

    for (row = 0; row < rows; row++) {
        struct rn_iid iid;
        struct rn_done *d;
        struct rn_claimed *c = NULL;
        struct cn_errmsg em;

        if (!get_uuid(r, row, 0, iid.b)) {
            return cn_errmsg_set(err, CN_DB, "bad instance id in runner_actions_done");
        }
        for (i = 0; i < n && c == NULL; i++) {
            if (rn_iid_eq(cl[i].instance_id, iid)) {
                c = &cl[i];
            }
        }
        if (c == NULL) {
            continue;
        }
        c->done = cn_xreallocarray(c->done, c->ndone + 1, sizeof(*c->done));
        d = &c->done[c->ndone];
        memset(d, 0, sizeof(*d));
        if (!get_uuid(r, row, 1, d->exec_id.b) || PQgetlength(r, row, 2) != 4) {
            return cn_errmsg_set(err, CN_DB, "bad row in runner_actions_done");
        }
        d->attempt = be32(PQgetvalue(r, row, 2));
        d->ok = PQgetvalue(r, row, 3)[0] != 0;
        d->step = PQgetlength(r, row, 5) == 4 ? be32(PQgetvalue(r, row, 5)) : 0;
        if (ir_val_from_msgpack(PQgetvalue(r, row, 4), (size_t) PQgetlength(r, row, 4),
                                IR_MP_INTERNAL, &d->value, &em) != CN_OK) {
            /* A result that does not decode is skipped: hydration then runs that attempt
             * again (at least once), rather than failing the instance. */
            continue;
        }
        c->ndone++;
    }
    return CN_OK;
}

/* Sets plan_cache_mode on b's session unless it is so already. */
static cn_err
plan_mode(struct pg_backend *b, bool generic, struct cn_errmsg *err)
{
    cn_err rv;

    if (b->generic == generic) {
        return CN_OK;
    }
    rv = pg_simple(
        b, generic ? "SET plan_cache_mode = force_generic_plan" : "RESET plan_cache_mode", err);
    if (rv == CN_OK) {
        b->generic = generic;
    }
    return rv;
}

/* Prepares sql on b's session under name. */
static cn_err
prepare_stmt(struct pg_backend *b, const char *name, const char *sql, int nparams,
             struct cn_errmsg *err)
{
    PGresult *r = PQprepare(b->c, name, sql, nparams, NULL);
    cn_err rv = CN_OK;

    if (r == NULL || PQresultStatus(r) != PGRES_COMMAND_OK) {
        const char *msg = r != NULL ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        rv = cn_errmsg_set(err, PQstatus(b->c) == CONNECTION_OK ? CN_DB : CN_IO, "prepare %s: %s",
                           name, msg != NULL ? msg : PQerrorMessage(b->c));
    }
    PQclear(r);
    return rv;
}

/* Runs the claim variant the database needs (b->limits, b->tenants) with params.
 *
 * The one-tenant claim without limits, by far the most run, is prepared once and runs one
 * generic plan: each claim otherwise spent 0.3 ms parsing and 0.5-0.9 ms planning for an
 * execution of 0.3 ms when it takes one instance (which is most of a lone instance's start), and
 * 6 ms when it takes 256. The session's settings (pg_conn) make its generic plan the custom
 * one's walk of the ready index, on a queue of 20 000 rows as of 220 000. The other variants keep
 * custom plans, unprepared: the fair walk's generic plan (LIMIT $5 per tenant estimated at a
 * tenth of the queue) took 600 ms a claim where its custom plan takes 8. plan_cache_mode applies
 * to unnamed statements too, hence the switch back. */
static cn_err
claim_exec(struct pg_backend *b, const char *const *params, PGresult **out, struct cn_errmsg *err)
{
    cn_err rv;

    if (b->limits || b->tenants) {
        if ((rv = plan_mode(b, false, err)) != CN_OK) {
            return rv;
        }
        return pg_exec_bin(b, claim_sql[b->limits][b->tenants], b->limits ? 6 : 5, params, out,
                           err);
    }
    if ((rv = plan_mode(b, true, err)) != CN_OK) {
        return rv;
    }
    if (!b->claim_prepared) {
        if ((rv = prepare_stmt(b, "cairn_claim", claim_sql[0][0], 5, err)) != CN_OK) {
            return rv;
        }
        b->claim_prepared = true;
    }
    return rn_db_exec_prepared_binary(b->c, "cairn_claim", 5, params, out, err);
}

static cn_err
pg_claim(struct rn_backend *base, size_t max, size_t max_bytes, size_t max_orphans,
         size_t max_fresh, int64_t lease_ms, struct rn_claimed **out, size_t *nout,
         struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char maxs[24], leases[24], bytes[24], orphans[24], fresh[24];
    const char *params[6] = {maxs, leases, bytes, orphans, fresh, fresh};
    struct rn_claimed *cl = NULL;
    PGresult *r = NULL, *d = NULL;
    struct barr ids;
    size_t n = 0;
    int rows, row;
    bool resumed = false;
    cn_err rv;

    *out = NULL;
    *nout = 0;
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    (void) snprintf(maxs, sizeof(maxs), "%zu", max);
    (void) snprintf(leases, sizeof(leases), "%lld", (long long) lease_ms);
    (void) snprintf(bytes, sizeof(bytes), "%llu",
                    (unsigned long long) (max_bytes > INT64_MAX ? INT64_MAX : max_bytes));
    (void) snprintf(orphans, sizeof(orphans), "%zu", max_orphans < max ? max_orphans : max);
    (void) snprintf(fresh, sizeof(fresh), "%zu", max_fresh < max ? max_fresh : max);
    if (b->limits_checked_ms == 0 || cn_mono_ms() - b->limits_checked_ms >= PG_LIMITS_CHECK_MS) {
        if ((rv = rn_db_exec(b->c,
                             "SELECT EXISTS (SELECT 1 FROM cairn.workflow_limits),"
                             " EXISTS (SELECT 1 FROM cairn.tenants WHERE name <> 'default')",
                             0, NULL, &r, err)) != CN_OK) {
            return rv;
        }
        b->limits = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
        b->tenants = PQntuples(r) == 1 && PQgetvalue(r, 0, 1)[0] == 't';
        b->limits_checked_ms = cn_mono_ms();
        PQclear(r);
        r = NULL;
    }
    if ((rv = claim_exec(b, params, &r, err)) != CN_OK) {
        return rv;
    }
    rows = PQntuples(r);
    if (rows == 0) {
        PQclear(r);
        return CN_OK;
    }
    cl = cn_xcalloc((size_t) rows, sizeof(*cl));
    barr_begin(&ids, PG_OID_UUID);
    for (row = 0; row < rows; row++) {
        struct rn_claimed *c = &cl[n];
        struct cn_errmsg em;

        c->input = ir_null();
        if (!get_uuid(r, row, 0, c->instance_id.b) || !get_uuid(r, row, 1, c->lock.b) ||
            !get_uuid(r, row, 2, c->version_id.b)) {
            continue;
        }
        c->workflow = cn_xmalloc((size_t) PQgetlength(r, row, 3) + 1);
        memcpy(c->workflow, PQgetvalue(r, row, 3), (size_t) PQgetlength(r, row, 3));
        c->workflow[PQgetlength(r, row, 3)] = '\0';
        if (ir_val_from_json(PQgetvalue(r, row, 4), (size_t) PQgetlength(r, row, 4), &c->input,
                             &em) != CN_OK) {
            c->input = ir_null(); /* the executor fails a non-dict input with a TypeError */
        }
        if (!PQgetisnull(r, row, 5)) {
            c->state_len = (size_t) PQgetlength(r, row, 5);
            c->state = cn_xmalloc(c->state_len ? c->state_len : 1);
            memcpy(c->state, PQgetvalue(r, row, 5), c->state_len);
        }
        if (!PQgetisnull(r, row, 6)) { /* cancelled while another runner held it */
            c->cancel_reason = cn_xstrndup(PQgetvalue(r, row, 6), (size_t) PQgetlength(r, row, 6));
        }
        c->deadline_ms = get_i64(r, row, 7);
        c->timeout_ms = get_i64(r, row, 8);
        c->redrive = PQgetlength(r, row, 9) == 1 && PQgetvalue(r, row, 9)[0] == 1; /* binary bool */
        if (!PQgetisnull(r, row, 10) && get_uuid(r, row, 10, c->parent.parent.b) &&
            get_uuid(r, row, 11, c->parent.exec_id.b) && PQgetlength(r, row, 12) == 4) {
            c->parent.attempt = be32(PQgetvalue(r, row, 12));
            c->parent.has = true;
        }
        /* The claim's own mark is in the row it returns; whether an earlier claim had started
         * it was read before (binary bool). */
        c->started_before = PQgetlength(r, row, 13) == 1 && PQgetvalue(r, row, 13)[0] == 1;
        c->state_step = PQgetlength(r, row, 14) == 4 ? be32(PQgetvalue(r, row, 14)) : 0;
        barr_uuid(&ids, c->instance_id.b);
        resumed = resumed || c->state != NULL || c->started_before;
        n++;
    }
    PQclear(r);
    /* Results are recorded only for an instance that was started before (its first step goes
     * out recorded by the claim that started it): a claim of new instances has none to read. */
    if (rv == CN_OK && resumed) {
        struct pargs g = {0};
        pa_array(&g, &ids);
        if ((rv = pg_exec_args(b, done_sql, &g, &d, err)) == CN_OK) {
            rv = attach_done(d, cl, n, err);
            PQclear(d);
        }
    }
    barr_fini(&ids);
    if (rv != CN_OK) {
        /* The leases were taken: they expire and another claim takes the instances. */
        rn_claimed_free(cl, n);
        return rv;
    }
    *out = cl;
    *nout = n;
    return CN_OK;
}

static cn_err
pg_version_source(struct rn_backend *base, struct rn_vid version_id, char **src,
                  struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char id[CN_UUID_TEXT_LEN + 1];
    const char *params[1] = {id};
    PGresult *r = NULL;
    cn_err rv;

    *src = NULL;
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    cn_uuid_format(version_id.b, id);
    if ((rv = pg_exec_bin(b, "SELECT source FROM cairn.workflow_versions WHERE id = $1::uuid", 1,
                          params, &r, err)) != CN_OK) {
        return rv;
    }
    if (PQntuples(r) != 1) {
        PQclear(r);
        return cn_errmsg_set(err, CN_NOTFOUND, "workflow version %s not found", id);
    }
    *src = strndup(PQgetvalue(r, 0, 0), (size_t) PQgetlength(r, 0, 0));
    PQclear(r);
    return *src != NULL ? CN_OK : CN_NOMEM;
}

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
static bool
json_text(struct ir_val v, struct cn_buf *out)
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
    {"cairn_state",
     "UPDATE cairn.runner_instances ri SET state = t.s, state_step = t.k, redrive = false FROM"
     " unnest($1::uuid[],"
     " $2::uuid[], $3::bytea[], $4::integer[]) AS t(i, l, s, k) CROSS JOIN LATERAL (SELECT 1"
     " FROM cairn.queued_instances q WHERE q.instance_id = t.i AND q.lock_uuid = t.l OFFSET 0)"
     " ok WHERE ri.instance_id = t.i",
     4, "uubi"},
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
    {"cairn_finish",
     "WITH t AS MATERIALIZED (SELECT t.*, ok.tid FROM unnest($1::uuid[], $2::uuid[],"
     " $3::text[], $4::text[], $5::text[], $6::bytea[]) AS t(i, l, st, res, er, sx) CROSS JOIN"
     " LATERAL (SELECT q.ctid AS tid FROM cairn.queued_instances q WHERE q.instance_id = t.i"
     " AND q.lock_uuid = t.l OFFSET 0) ok), u AS (UPDATE cairn.runner_instances ri SET"
     " status = t.st, result = t.res::jsonb, error = t.er::jsonb, state ="
     " coalesce(t.sx, ri.state), redrive = false, completed_at ="
     " clock_timestamp() FROM t WHERE"
     " ri.instance_id = t.i RETURNING ri.instance_id)"
     " DELETE FROM cairn.queued_instances q USING t WHERE q.ctid = t.tid",
     6, "uutttb"},
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
    PS_FENCE,
    PS_DONE,
    PS_STATE,
    PS_RELEASE,
    PS_CHILDREN,
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
    if ((rv = plan_mode(b, true, err)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < NPERSIST; i++) {
        if ((rv = prepare_stmt(b, persist_stmts[i].name, persist_stmts[i].sql,
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
        if (!get_uuid(r, row, 0, cid.b)) {
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

/* Sends one persist batch, its parameters built in a, as one pipeline: BEGIN, the fence, the
 * writes in the fixed order, COMMIT, sync; then reads every result: w[i].lost is set for every
 * write but those the fence kept. probed: the results go by cairn_done_probed. *dup: the batch
 * failed on a result recorded already. */
static cn_err
persist_pipeline(struct pg_backend *b, struct rn_write *w, size_t n, struct barr (*a)[PS_MAXP],
                 const char depth[4], bool probed, bool *dup, struct cn_errmsg *err)
{
    const char *params[PS_MAXP];
    int lengths[PS_MAXP], formats[PS_MAXP];
    PGresult *r;
    size_t i, k, s;
    int row;
    cn_err rv;

    *dup = false;
    for (i = 0; i < n; i++) {
        w[i].lost = true; /* until the fence says it kept the write */
    }
    rv = PQenterPipelineMode(b->c) == 1 ? CN_OK
                                        : cn_errmsg_set(err, CN_IO, "%s", PQerrorMessage(b->c));
    if (rv == CN_OK && PQsendQueryParams(b->c, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) != 1) {
        rv = cn_errmsg_set(err, CN_IO, "%s", PQerrorMessage(b->c));
    }
    for (s = 0; rv == CN_OK && s < NPERSIST; s++) {
        if (s >= PS_DONE_PROBED || (s > 0 && a[s][0].n == 0)) {
            continue; /* nothing of this kind in the batch: not sent (the fence always is) */
        }
        for (k = 0; k < (size_t) persist_stmts[s].nparams; k++) {
            formats[k] = 1;
            if (persist_stmts[s].types[k] == '1') {
                params[k] = depth; /* the one scalar, an int4 */
                lengths[k] = 4;
            } else if ((params[k] = barr_end(&a[s][k], &lengths[k])) == NULL) {
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
        r = pipe_result(b, err, &rv, dup);
        if (r != NULL) {
            for (row = 0; row < PQntuples(r); row++) {
                struct rn_iid iid;
                struct rn_token lock;
                if (!get_uuid(r, row, 0, iid.b) || !get_uuid(r, row, 1, lock.b)) {
                    continue;
                }
                for (i = 0; i < n; i++) {
                    if (rn_iid_eq(w[i].instance_id, iid) && rn_token_eq(w[i].lock, lock)) {
                        w[i].lost = false;
                    }
                }
            }
            PQclear(r);
        }
        for (s = 1; s < NPERSIST; s++) {
            if (s >= PS_DONE_PROBED || a[s][0].n == 0) {
                continue;
            }
            r = pipe_result(b, err, &rv, dup);
            if (s == PS_CHILDREN && r != NULL) {
                children_status(r, w, n);
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
        barr_uuid(&da[0], w[i].instance_id.b);
        barr_uuid(&da[1], w[i].lock.b);
        for (k = 0; k < w[i].ndone; k++) {
            const struct rn_done *d = &w[i].done[k];
            cn_buf_clear(tmp);
            if (ir_val_to_msgpack(d->value, IR_MP_INTERNAL, tmp) != CN_OK) {
                cn_buf_clear(tmp); /* not storable (too deep): nil in its place */
                da[6].bad |= cn_buf_putc(tmp, (char) 0xc0) != CN_OK;
            }
            barr_int(&da[2], (int64_t) da[0].n);
            barr_uuid(&da[3], d->exec_id.b);
            barr_int(&da[4], d->attempt);
            barr_put(&da[5], d->ok ? "ok" : "error", d->ok ? 2 : 5);
            barr_put(&da[6], tmp->data, tmp->len);
            if (d->step > 0) {
                barr_int(&da[7], d->step);
            } else {
                barr_null(&da[7]);
            }
        }
    }
}

static cn_err
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
     * touch — its own, and the parents' of the children it finishes (cairn_child_done wakes
     * them) — at once, by instance id. Two batches then never wait on each other in a cycle
     * (they did when the parents were locked after the fence: a batch finishing a child of P
     * while writing Q against one finishing a child of Q while writing P), nor a batch and
     * cairn.wake_parents, which waits in the same order. The heartbeat, the claim and the
     * reclaimer skip locked rows and wait for none. */
    if ((order = malloc(2 * n * sizeof(*order))) == NULL) {
        return CN_NOMEM;
    }
    for (s = 0; s < NPERSIST; s++) {
        for (k = 0; k < PS_MAXP; k++) {
            barr_begin(&a[s][k], k < (size_t) persist_stmts[s].nparams
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
    }
    qsort(order, nrows, sizeof(*order), cmp_fence_row);
    for (i = 0; i < nrows; i++) {
        if (order[i].lock == NULL && i > 0 && rn_iid_eq(order[i - 1].iid, order[i].iid)) {
            continue; /* locked already: an own row, or another child's parent */
        }
        barr_uuid(&a[PS_FENCE][0], order[i].iid.b);
        if (order[i].lock != NULL) {
            barr_uuid(&a[PS_FENCE][1], order[i].lock->b);
        } else {
            barr_null(&a[PS_FENCE][1]);
        }
    }
    free(order);
    put_results(a[PS_DONE], w, n, &tmp);
    for (i = 0; i < n; i++) {
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
            barr_uuid(&ca[0], w[i].instance_id.b);
            barr_uuid(&ca[1], w[i].lock.b);
            barr_uuid(&ca[2], c->child_id.b);
            barr_uuid(&ca[3], c->exec_id.b);
            barr_int(&ca[4], c->attempt);
            barr_put(&ca[5], c->workflow, strlen(c->workflow));
            if (c->version != NULL) {
                barr_put(&ca[6], c->version, strlen(c->version));
            } else {
                barr_null(&ca[6]);
            }
            barr_put(&ca[7], js.data, js.len);
            barr_int(&ca[8], c->timeout_ms);
            barr_bool(&ca[9], c->detached);
            depth[0] = (char) (w[i].max_child_depth >> 24);
            depth[1] = (char) (w[i].max_child_depth >> 16);
            depth[2] = (char) (w[i].max_child_depth >> 8);
            depth[3] = (char) w[i].max_child_depth;
        }
        if (w[i].outcome != RN_RUNNING && w[i].parent.has) {
            struct barr *pa = a[PS_CHILD_DONE];
            cn_buf_clear(&tmp);
            if (ir_val_to_msgpack(w[i].parent_value, IR_MP_INTERNAL, &tmp) != CN_OK) {
                cn_buf_clear(&tmp);
                pa[6].bad |= cn_buf_putc(&tmp, (char) 0xc0) != CN_OK;
            }
            barr_uuid(&pa[0], w[i].instance_id.b);
            barr_uuid(&pa[1], w[i].lock.b);
            barr_uuid(&pa[2], w[i].parent.parent.b);
            barr_uuid(&pa[3], w[i].parent.exec_id.b);
            barr_int(&pa[4], w[i].parent.attempt);
            barr_put(&pa[5], w[i].parent_ok ? "ok" : "error", w[i].parent_ok ? 2 : 5);
            barr_put(&pa[6], tmp.data, tmp.len);
        }
        if (w[i].state != NULL && w[i].outcome == RN_RUNNING) {
            barr_uuid(&a[PS_STATE][0], w[i].instance_id.b);
            barr_uuid(&a[PS_STATE][1], w[i].lock.b);
            barr_put(&a[PS_STATE][2], w[i].state, w[i].state_len);
            barr_int(&a[PS_STATE][3], w[i].state_step);
        }
        if (w[i].outcome != RN_RUNNING) {
            const char *status = rn_outcome_name(w[i].outcome);
            barr_uuid(&a[PS_FINISH][0], w[i].instance_id.b);
            barr_uuid(&a[PS_FINISH][1], w[i].lock.b);
            barr_put(&a[PS_FINISH][2], status, strlen(status));
            if (w[i].outcome == RN_COMPLETED && json_text(w[i].result, &js)) {
                barr_put(&a[PS_FINISH][3], js.data, js.len);
                barr_null(&a[PS_FINISH][4]);
            } else {
                barr_null(&a[PS_FINISH][3]);
                if (w[i].result.type != IR_T_NULL && json_text(w[i].result, &js)) {
                    barr_put(&a[PS_FINISH][4], js.data, js.len);
                } else {
                    barr_null(&a[PS_FINISH][4]);
                }
            }
            /* The last snapshot rides on the outcome's update: one row version, not two. */
            if (w[i].state != NULL) {
                barr_put(&a[PS_FINISH][5], w[i].state, w[i].state_len);
            } else {
                barr_null(&a[PS_FINISH][5]);
            }
        } else if (w[i].release) {
            barr_uuid(&a[PS_RELEASE][0], w[i].instance_id.b);
            barr_uuid(&a[PS_RELEASE][1], w[i].lock.b);
            barr_int(&a[PS_RELEASE][2], w[i].wake_at_ms);
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
            barr_fini(&a[s][k]);
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
    }
    return rv;
}

/* ---- leases ------------------------------------------------------------------------------- */

/* Sets st[i] for every lease whose token is among the first column of r's rows to `to`. */
static void
mark_tokens(PGresult *r, const struct rn_lease *leases, size_t n, enum rn_lease_state *st,
            enum rn_lease_state to)
{
    int row;
    size_t i;

    for (row = 0; row < PQntuples(r); row++) {
        struct rn_token lock; /* a claim's token names the lease: an instance's old one is lost */
        if (!get_uuid(r, row, 0, lock.b)) {
            continue;
        }
        for (i = 0; i < n; i++) {
            if (rn_token_eq(leases[i].lock, lock)) {
                st[i] = to;
            }
        }
    }
}

static cn_err
pg_heartbeat(struct rn_backend *base, const struct rn_lease *leases, size_t n, int64_t lease_ms,
             enum rn_lease_state *st, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char ms[24];
    struct pargs g = {0};
    PGresult *r = NULL;
    struct barr ids, toks;
    size_t i;
    cn_err rv;

    for (i = 0; i < n; i++) {
        st[i] = RN_LEASE_BUSY; /* unknown until the database says */
    }
    if (n == 0) {
        return CN_OK;
    }
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    barr_begin(&ids, PG_OID_UUID);
    barr_begin(&toks, PG_OID_UUID);
    for (i = 0; i < n; i++) {
        barr_uuid(&ids, leases[i].instance_id.b);
        barr_uuid(&toks, leases[i].lock.b);
    }
    (void) snprintf(ms, sizeof(ms), "%lld", (long long) lease_ms);
    pa_array(&g, &ids);
    pa_array(&g, &toks);
    pa_text(&g, ms);
    /* Renewal never waits for a row lock. A row locked now is being written by this runner's
     * persister (or claimed by another runner after the lease expired): waiting for it is what
     * made renewals and writes queue behind each other for seconds at 10 000 leases (each
     * renewal batch waiting for writes, the writes after it waiting for the batch). Such a row
     * is skipped here and reported busy; the keeper asks again a moment later. */
    rv = pg_exec_args(b,
                      "WITH h AS MATERIALIZED (SELECT x.tid FROM unnest($1::uuid[],"
                      " $2::uuid[]) AS t(iid, tok) CROSS JOIN LATERAL (SELECT q.ctid AS tid"
                      " FROM cairn.queued_instances q WHERE q.instance_id = t.iid AND"
                      " q.lock_uuid = t.tok FOR UPDATE SKIP LOCKED) x)"
                      " UPDATE cairn.queued_instances q SET lock_expires_at ="
                      " clock_timestamp() + $3::bigint * interval '1 millisecond'"
                      " FROM h WHERE q.ctid = h.tid RETURNING q.lock_uuid",
                      &g, &r, err);
    if (rv == CN_OK) {
        mark_tokens(r, leases, n, st, RN_LEASE_RENEWED);
        PQclear(r);
        r = NULL;
        /* The rest: still ours (skipped while locked), or gone. A plain read waits for no
         * lock. */
        g.n = 2; /* the same arrays, without the TTL */
        rv = pg_exec_args(b,
                          "SELECT q.lock_uuid FROM unnest($1::uuid[], $2::uuid[]) AS t(iid, tok)"
                          " JOIN cairn.queued_instances q ON q.instance_id = t.iid AND"
                          " q.lock_uuid = t.tok",
                          &g, &r, err);
        if (rv == CN_OK) {
            enum rn_lease_state *renewed = cn_xmalloc(n * sizeof(*renewed));
            memcpy(renewed, st, n * sizeof(*st));
            for (i = 0; i < n; i++) {
                st[i] = RN_LEASE_LOST;
            }
            mark_tokens(r, leases, n, st, RN_LEASE_BUSY);
            for (i = 0; i < n; i++) {
                if (renewed[i] == RN_LEASE_RENEWED) {
                    st[i] = RN_LEASE_RENEWED;
                }
            }
            free(renewed);
            PQclear(r);
        }
    }
    barr_fini(&ids);
    barr_fini(&toks);
    return rv;
}

static cn_err
pg_release(struct rn_backend *base, const struct rn_token *locks, size_t n, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    struct pargs g = {0};
    PGresult *r = NULL;
    struct barr a;
    size_t i;
    cn_err rv;

    if (n == 0) {
        return CN_OK;
    }
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    barr_begin(&a, PG_OID_UUID);
    for (i = 0; i < n; i++) {
        barr_uuid(&a, locks[i].b);
    }
    pa_array(&g, &a);
    rv = pg_exec_args(b,
                      "WITH q AS (UPDATE cairn.queued_instances SET lock_uuid ="
                      " NULL, lock_expires_at = NULL WHERE lock_uuid ="
                      " ANY($1::uuid[]) RETURNING instance_id)"
                      " UPDATE cairn.runner_instances ri SET status = 'queued'"
                      " FROM q WHERE ri.instance_id = q.instance_id",
                      &g, &r, err);
    PQclear(r);
    barr_fini(&a);
    return rv;
}

static cn_err
pg_fail(struct rn_backend *base, struct rn_iid instance_id, struct rn_token lock,
        struct ir_val error, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char iid[CN_UUID_TEXT_LEN + 1], lk[CN_UUID_TEXT_LEN + 1];
    struct cn_buf js = CN_BUF_INIT;
    const char *p[3];
    PGresult *r = NULL;
    cn_err rv;

    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    cn_uuid_format(instance_id.b, iid);
    cn_uuid_format(lock.b, lk);
    if (!json_text(error, &js)) {
        return CN_NOMEM;
    }
    p[0] = iid;
    p[1] = lk;
    p[2] = js.data;
    rv = pg_exec_bin(b,
                     "WITH q AS (DELETE FROM cairn.queued_instances WHERE instance_id = $1::uuid"
                     " AND lock_uuid = $2::uuid RETURNING instance_id)"
                     " UPDATE cairn.runner_instances ri SET status = 'failed', error = $3::jsonb,"
                     " completed_at = clock_timestamp(), parent_pending = ri.parent_id IS NOT"
                     " NULL AND NOT ri.detached FROM q WHERE ri.instance_id ="
                     " q.instance_id",
                     3, p, &r, err);
    PQclear(r);
    cn_buf_fini(&js);
    return rv;
}

static cn_err
pg_reclaim(struct rn_backend *base, size_t max, int64_t grace_ms, size_t *n, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char maxs[24], grace[24];
    const char *p[2] = {maxs, grace};
    PGresult *r = NULL;
    cn_err rv;

    *n = 0;
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    (void) snprintf(maxs, sizeof(maxs), "%zu", max);
    (void) snprintf(grace, sizeof(grace), "%lld", (long long) grace_ms);
    rv = pg_exec_bin(b,
                     "WITH e AS (SELECT ctid AS tid FROM cairn.queued_instances"
                     " WHERE lock_uuid IS NOT NULL AND lock_expires_at < now() -"
                     " $2::bigint * interval '1 millisecond'"
                     " LIMIT $1 FOR UPDATE SKIP LOCKED),"
                     " q AS (UPDATE cairn.queued_instances q SET lock_uuid = NULL,"
                     " lock_expires_at = NULL FROM e WHERE q.ctid = e.tid"
                     " RETURNING q.instance_id)"
                     " UPDATE cairn.runner_instances ri SET status = 'queued' FROM q"
                     " WHERE ri.instance_id = q.instance_id",
                     2, p, &r, err);
    if (rv == CN_OK) {
        *n = (size_t) strtoull(PQcmdTuples(r), NULL, 10);
    }
    PQclear(r);
    return rv;
}

/* Makes sure the session listens (listen_sql; *listening says it does), waits up to timeout_ms
 * for a notification unless one came with earlier results, and hands each that came to each
 * (NULL: they are only a wake-up). CN_OK on a timeout too. */
static cn_err
pg_wait_notify(struct pg_backend *b, const char *listen_sql, bool *listening, int timeout_ms,
               void (*each)(const PGnotify *nt, void *arg), void *arg, struct cn_errmsg *err)
{
    struct pollfd pfd;
    PGnotify *nt;
    cn_err rv;

    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    if (!*listening) {
        if ((rv = pg_simple(b, listen_sql, err)) != CN_OK) {
            return rv;
        }
        *listening = true;
    }
    if ((nt = PQnotifies(b->c)) == NULL) { /* none came with earlier results: wait */
        pfd.fd = PQsocket(b->c);
        pfd.events = POLLIN;
        pfd.revents = 0;
        /* EINTR or no socket: the caller polls again */
        if (pfd.fd >= 0 && poll(&pfd, 1, timeout_ms) > 0 && PQconsumeInput(b->c) == 0) {
            return cn_errmsg_set(err, CN_IO, "%s", PQerrorMessage(b->c));
        }
        nt = PQnotifies(b->c);
    }
    for (; nt != NULL; nt = PQnotifies(b->c)) {
        if (each != NULL) {
            each(nt, arg);
        }
        PQfreemem(nt);
    }
    return CN_OK;
}

static cn_err
pg_wait_enqueue(struct rn_backend *base, int timeout_ms, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;

    return pg_wait_notify(b, "LISTEN cairn_enqueue", &b->listening, timeout_ms, NULL, NULL, err);
}

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
    struct pargs g = {0};
    struct barr a;
    PGresult *r = NULL;
    size_t i;
    int row;
    cn_err rv;

    barr_begin(&a, PG_OID_UUID);
    for (i = 0; i < n; i++) {
        barr_uuid(&a, ids[i].b);
    }
    pa_array(&g, &a);
    rv = pg_exec_args(b,
                      "SELECT instance_id, coalesce(cancel_reason, 'cancelled')"
                      " FROM cairn.runner_instances WHERE instance_id = ANY($1::uuid[])"
                      " AND cancel_requested_at IS NOT NULL",
                      &g, &r, err);
    barr_fini(&a);
    if (rv != CN_OK) {
        return rv;
    }
    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid iid;
        if (get_uuid(r, row, 0, iid.b)) {
            fn(arg, iid, PQgetvalue(r, row, 1)); /* text's binary form: its bytes, and a NUL */
        }
    }
    PQclear(r);
    return CN_OK;
}

static cn_err
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

static cn_err
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
        barr_begin(&a[k], types[k]);
    }
    for (i = 0; i < n; i++) {
        barr_uuid(&a[0], calls[i].parent.b);
        barr_uuid(&a[1], calls[i].exec_id.b);
        barr_int(&a[2], calls[i].attempt);
    }
    for (k = 0; k < 3; k++) {
        pa_array(&g, &a[k]);
    }
    rv = pg_exec_args(b,
                      "SELECT d.instance_id, d.execution_id, d.attempt, d.status = 'ok',"
                      " d.result FROM unnest($1::uuid[], $2::uuid[], $3::integer[]) AS"
                      " t(i, e, a) JOIN cairn.runner_actions_done d ON d.instance_id = t.i"
                      " AND d.execution_id = t.e AND d.attempt = t.a",
                      &g, &r, err);
    for (k = 0; k < 3; k++) {
        barr_fini(&a[k]);
    }
    if (rv != CN_OK) {
        return rv;
    }
    for (row = 0; row < PQntuples(r); row++) {
        struct rn_iid iid;
        struct rn_xid xid;
        struct cn_errmsg em;
        uint32_t att;

        if (!get_uuid(r, row, 0, iid.b) || !get_uuid(r, row, 1, xid.b) ||
            PQgetlength(r, row, 2) != 4) {
            continue;
        }
        att = be32(PQgetvalue(r, row, 2));
        for (i = 0; i < n; i++) {
            if (!rn_iid_eq(calls[i].parent, iid) || !rn_xid_eq(calls[i].exec_id, xid) ||
                calls[i].attempt != att || !rn_xid_is_nil(out[i].exec_id)) {
                continue;
            }
            if (ir_val_from_msgpack(PQgetvalue(r, row, 4), (size_t) PQgetlength(r, row, 4),
                                    IR_MP_INTERNAL, &out[i].value, &em) != CN_OK) {
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

/* Children finished by SQL (cairn.cancel, cairn.expire_overdue, a version that does not
 * compile): their parents' calls have no result yet, and get a ChildWorkflow* error made here
 * from the stored error. Only finished children: a mark left on one queued again (cairn.retry
 * clears it, but not on a version before it) is no outcome. */
static const char *pending_sql =
    "SELECT c.instance_id, c.workflow_name, c.status, c.error::text, c.parent_id,"
    "       c.parent_exec_id, c.parent_attempt"
    "  FROM cairn.runner_instances c"
    " WHERE c.parent_pending AND c.status IN ('failed', 'cancelled', 'timed_out')"
    "   AND NOT EXISTS (SELECT 1 FROM cairn.runner_actions_done d WHERE d.instance_id ="
    "       c.parent_id AND d.execution_id = c.parent_exec_id AND d.attempt = c.parent_attempt)"
    " ORDER BY c.completed_at LIMIT 500";

/* Records them. The statement runs in a transaction that holds the sweep's advisory lock and
 * reads after taking it, so two runners' sweeps never both insert one result and the NOTIFY goes
 * once (NOT EXISTS must see the other's commit); the results' key leaves out one a parent's
 * runner records meanwhile. */
static const char *deliver_sql =
    "WITH t AS (SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[],"
    " $5::bytea[]) AS t(c, p, e, a, x) WHERE NOT EXISTS (SELECT 1 FROM"
    " cairn.runner_actions_done d WHERE d.instance_id = t.p AND d.execution_id = t.e AND"
    " d.attempt = t.a)),"
    " d AS (INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status,"
    " result) SELECT t.p, t.e, t.a, 'error', t.x FROM t ON CONFLICT DO NOTHING)"
    " SELECT pg_notify('cairn_child', t.p::text || ' ' || t.e::text || ' ' || t.a) FROM t";

/* The advisory lock key of the sweep's deliveries ("cairn" and 16 in ASCII, arbitrary). */
#define PG_SWEEP_LOCK "6361697216"

static cn_err
pg_sweep_children(struct rn_backend *base, size_t *nout, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    static const uint32_t types[5] = {PG_OID_UUID, PG_OID_UUID, PG_OID_UUID, PG_OID_INT4,
                                      PG_OID_BYTEA};
    struct cn_buf mp = CN_BUF_INIT;
    struct pargs g = {0};
    struct barr a[5];
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
    for (k = 0; k < 5; k++) {
        barr_begin(&a[k], types[k]);
    }
    for (row = 0; rv == CN_OK && r != NULL && row < PQntuples(r); row++) {
        struct rn_iid cid, pid;
        struct rn_xid xid;
        struct ir_val e = ir_null(), v = ir_null();
        struct cn_errmsg em;
        enum rn_outcome o = RN_FAILED;
        bool ok;

        if (!cn_uuid_parse(PQgetvalue(r, row, 0), cid.b) || PQgetisnull(r, row, 4) ||
            !cn_uuid_parse(PQgetvalue(r, row, 4), pid.b) ||
            !cn_uuid_parse(PQgetvalue(r, row, 5), xid.b)) {
            continue;
        }
        (void) rn_outcome_parse(PQgetvalue(r, row, 2), &o);
        if (!PQgetisnull(r, row, 3)) {
            struct ir_val raw = ir_null();
            if (ir_val_from_json(PQgetvalue(r, row, 3), (size_t) PQgetlength(r, row, 3), &raw,
                                 &em) == CN_OK &&
                raw.type == IR_T_MAP) {
                const struct ir_val *t = ir_map_get(raw, "type", 4);
                const struct ir_val *m = ir_map_get(raw, "message", 7);
                const struct ir_val *bs = ir_map_get(raw, "bases", 5);
                if (t != NULL && t->type == IR_T_STR &&
                    ir_error_new(
                        ir_str_data(*t), m != NULL && m->type == IR_T_STR ? ir_str_data(*m) : "",
                        bs != NULL && bs->type == IR_T_LIST ? ir_val_retain(*bs) : ir_null(),
                        ir_null(), &e) != CN_OK) {
                    e = ir_null();
                }
            }
            ir_val_release(raw);
        }
        if (rn_child_outcome(o == RN_COMPLETED ? RN_FAILED : o, e, cid, PQgetvalue(r, row, 1), &ok,
                             &v) != CN_OK) {
            ir_val_release(e);
            rv = CN_NOMEM;
            break;
        }
        ir_val_release(e);
        cn_buf_clear(&mp);
        if (ir_val_to_msgpack(v, IR_MP_INTERNAL, &mp) != CN_OK) {
            ir_val_release(v);
            continue;
        }
        ir_val_release(v);
        barr_uuid(&a[0], cid.b);
        barr_uuid(&a[1], pid.b);
        barr_uuid(&a[2], xid.b);
        barr_int(&a[3], strtol(PQgetvalue(r, row, 6), NULL, 10));
        barr_put(&a[4], mp.data, mp.len);
        n++;
    }
    PQclear(r);
    for (k = 0; k < 5; k++) {
        pa_array(&g, &a[k]);
    }
    if (rv == CN_OK && n > 0 && (rv = pg_exec_args(b, deliver_sql, &g, &r2, err)) == CN_OK) {
        PQclear(r2);
        *nout = n;
    }
    for (k = 0; k < 5; k++) {
        barr_fini(&a[k]);
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

static cn_err
pg_prune_due(struct rn_backend *base, int64_t retention_s, size_t batch,
             char cursor[RN_PRUNE_CURSOR_LEN], size_t *instances, size_t *actions,
             struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char keep[24], n[24];
    const char *params[3] = {keep, n, cursor[0] != '\0' ? cursor : NULL};
    PGresult *r = NULL;
    cn_err rv;

    *instances = *actions = 0;
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    (void) snprintf(keep, sizeof(keep), "%lld", (long long) retention_s);
    (void) snprintf(n, sizeof(n), "%zu", batch);
    if ((rv = rn_db_exec(b->c,
                         "SELECT instances, actions, next_before FROM cairn.prune_due(CASE WHEN"
                         " $1::bigint > 0 THEN $1::bigint * interval '1 second' END, $2::integer,"
                         " $3::timestamptz)",
                         3, params, &r, err)) != CN_OK) {
        return rv;
    }
    cursor[0] = '\0';
    if (PQntuples(r) == 1) {
        *instances = (size_t) strtoull(PQgetvalue(r, 0, 0), NULL, 10);
        *actions = (size_t) strtoull(PQgetvalue(r, 0, 1), NULL, 10);
        if (!PQgetisnull(r, 0, 2)) {
            (void) snprintf(cursor, RN_PRUNE_CURSOR_LEN, "%s", PQgetvalue(r, 0, 2));
        }
    }
    PQclear(r);
    return CN_OK;
}

static cn_err
pg_tick_backfills(struct rn_backend *base, struct rn_backfill_stat **out, size_t *n,
                  struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    PGresult *r = NULL;
    int i, rows;
    cn_err rv;

    *out = NULL;
    *n = 0;
    if ((rv = pg_conn(b, err)) != CN_OK ||
        (rv = rn_db_exec(b->c, "SELECT cairn.backfill_tick(1000)", 0, NULL, NULL, err)) != CN_OK ||
        (rv = rn_db_exec(b->c,
                         "SELECT id, workflow_name, state, done, failed, running,"
                         " total - done - failed FROM cairn.backfills"
                         " WHERE state IN ('pending', 'running', 'paused', 'resuming')"
                         "    OR finished_at > now() - interval '10 minutes'"
                         " ORDER BY created_at DESC LIMIT 100",
                         0, NULL, &r, err)) != CN_OK) {
        return rv;
    }
    rows = PQntuples(r);
    if (rows > 0) {
        *out = cn_xcalloc((size_t) rows, sizeof(**out));
        for (i = 0; i < rows; i++) {
            struct rn_backfill_stat *s = &(*out)[i];
            (void) snprintf(s->id, sizeof(s->id), "%s", PQgetvalue(r, i, 0));
            (void) snprintf(s->workflow, sizeof(s->workflow), "%s", PQgetvalue(r, i, 1));
            (void) snprintf(s->state, sizeof(s->state), "%s", PQgetvalue(r, i, 2));
            s->done = strtoll(PQgetvalue(r, i, 3), NULL, 10);
            s->failed = strtoll(PQgetvalue(r, i, 4), NULL, 10);
            s->running = strtoll(PQgetvalue(r, i, 5), NULL, 10);
            s->remaining = strtoll(PQgetvalue(r, i, 6), NULL, 10);
        }
        *n = (size_t) rows;
    }
    PQclear(r);
    return CN_OK;
}

static cn_err
pg_fire_schedules(struct rn_backend *base, size_t *n, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    cn_err rv;

    *n = 0;
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    return rn_schedules_fire(b->c, n, err);
}

static cn_err
pg_cancel_children(struct rn_backend *base, struct rn_iid parent, const struct rn_xid *exec_ids,
                   size_t n, const char *reason, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char pid[CN_UUID_TEXT_LEN + 1];
    struct pargs g = {0};
    struct barr a;
    PGresult *r = NULL;
    size_t i;
    cn_err rv;

    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    cn_uuid_format(parent.b, pid);
    barr_begin(&a, PG_OID_UUID);
    for (i = 0; i < n; i++) {
        barr_uuid(&a, exec_ids[i].b);
    }
    pa_text(&g, pid);
    if (n > 0) {
        pa_array(&g, &a);
    } else {
        pa_text(&g, NULL); /* NULL: every child */
    }
    pa_text(&g, reason);
    rv = pg_exec_args(b, "SELECT cairn.reap_children($1::uuid, $2::uuid[], $3::text)", &g, &r, err);
    PQclear(r);
    barr_fini(&a);
    return rv;
}

/* The instances whose cancel waits for a runner: those nobody holds are cancelled here by
 * cairn.cancel (in the same statement, one function call per row); the held ones come back. */
static const char *sweep_cancels_sql =
    "SELECT ri.instance_id,"
    "       CASE WHEN q.lock_uuid IS NOT NULL AND q.lock_expires_at > clock_timestamp()"
    "            THEN ri.cancel_reason"
    "            ELSE cairn.cancel(ri.instance_id, ri.cancel_reason) END,"
    "       q.lock_uuid IS NOT NULL AND q.lock_expires_at > clock_timestamp()"
    "  FROM cairn.runner_instances ri"
    "  LEFT JOIN cairn.queued_instances q ON q.instance_id = ri.instance_id"
    " WHERE ri.cancel_requested_at IS NOT NULL AND ri.status IN ('queued', 'running')";

static cn_err
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
            fn(arg, iid, PQgetisnull(r, row, 1) ? NULL : PQgetvalue(r, row, 1));
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

static cn_err
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
        barr_begin(&a[k], types[k]);
    }
    for (i = 0; i < n; i++) {
        cn_buf_clear(&tmp);
        if (ir_val_to_msgpack(l[i].d.value, IR_MP_INTERNAL, &tmp) != CN_OK) {
            continue; /* not storable (too deep): it changes nothing, leave it out */
        }
        barr_uuid(&a[0], l[i].instance_id.b);
        barr_uuid(&a[1], l[i].d.exec_id.b);
        barr_int(&a[2], l[i].d.attempt);
        barr_put(&a[3], l[i].d.ok ? "ok" : "error", l[i].d.ok ? 2 : 5);
        barr_put(&a[4], tmp.data, tmp.len);
    }
    for (k = 0; k < 5; k++) {
        pa_array(&g, &a[k]);
    }
    rv = pg_exec_args(b, late_sql, &g, &r, err);
    PQclear(r);
    for (k = 0; k < 5; k++) {
        barr_fini(&a[k]);
    }
    cn_buf_fini(&tmp);
    return rv;
}

static void
pg_close(struct rn_backend *base)
{
    struct pg_backend *b = (struct pg_backend *) base;

    if (b == NULL) {
        return;
    }
    if (b->c != NULL) {
        PQfinish(b->c);
    }
    free(b->url);
    free(b);
}

static const struct rn_backend_ops pg_ops = {
    .claim = pg_claim,
    .version_source = pg_version_source,
    .persist = pg_persist,
    .heartbeat = pg_heartbeat,
    .release = pg_release,
    .fail = pg_fail,
    .reclaim = pg_reclaim,
    .wait_enqueue = pg_wait_enqueue,
    .wait_notices = pg_wait_notices,
    .child_results = pg_child_results,
    .sweep_children = pg_sweep_children,
    .cancel_children = pg_cancel_children,
    .fire_schedules = pg_fire_schedules,
    .tick_backfills = pg_tick_backfills,
    .prune_due = pg_prune_due,
    .sweep_cancels = pg_sweep_cancels,
    .record_late = pg_record_late,
    .close = pg_close,
};

cn_err
rn_backend_pg_open(const char *url, struct rn_backend **out, struct cn_errmsg *err)
{
    struct pg_backend *b;
    const char *u = rn_db_url(url);
    cn_err rv;

    *out = NULL;
    if (u == NULL) {
        return cn_errmsg_set(err, CN_INVAL, "no database: set CAIRN_DATABASE_URL");
    }
    b = calloc(1, sizeof(*b));
    if (b == NULL || (b->url = strdup(u)) == NULL) {
        free(b);
        return CN_NOMEM;
    }
    b->base.ops = &pg_ops;
    if ((rv = pg_conn(b, err)) != CN_OK) {
        pg_close(&b->base);
        return rv;
    }
    *out = &b->base;
    return CN_OK;
}
