/* SPDX-License-Identifier: MIT */
/*
 * The claim: due instances taken with FOR UPDATE SKIP LOCKED (one tenant, or fairly across
 * tenants; through cairn.claim_limited while any limit exists), their recorded results
 * attached, the plan cache mode and prepared statements, and a version's source.
 *
 * Threads: used by one thread at a time (pg_int.h).
 */

#include <stdlib.h>

#include "ir/base/clock.h"
#include "ir/base/xalloc.h"
#include "runner/store/db.h"
#include "runner/store/pg/pg_int.h"

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
    "           parent_id, ri.parent_exec_id, ri.parent_attempt, q.again, ri.state_step,"      \
    "           ri.cancel_force"

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
    "        status <> 'error', result, NULL::integer AS step, status = 'json'"
    "   FROM cairn.runner_actions_done WHERE instance_id = ANY($1::uuid[]) AND step IS NULL"
    "  ORDER BY instance_id, execution_id, attempt DESC)"
    " UNION ALL"
    " SELECT d.instance_id, d.execution_id, d.attempt, d.status <> 'error', d.result, d.step,"
    "        d.status = 'json'"
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

        if (!pg_get_uuid(r, row, 0, iid.b)) {
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
        if (!pg_get_uuid(r, row, 1, d->exec_id.b) || PQgetlength(r, row, 2) != 4) {
            return cn_errmsg_set(err, CN_DB, "bad row in runner_actions_done");
        }
        d->attempt = pg_be32(PQgetvalue(r, row, 2));
        d->ok = PQgetvalue(r, row, 3)[0] != 0;
        d->step = PQgetlength(r, row, 5) == 4 ? pg_be32(PQgetvalue(r, row, 5)) : 0;
        if (!rn_stored_value(PQgetvalue(r, row, 4), (size_t) PQgetlength(r, row, 4),
                             PQgetvalue(r, row, 6)[0] != 0, &d->value)) {
            /* A result that does not decode is skipped: hydration then runs that attempt
             * again (at least once), rather than failing the instance. */
            continue;
        }
        c->ndone++;
    }
    return CN_OK;
}

/* Sets plan_cache_mode on b's session unless it is so already. */
cn_err
pg_plan_mode(struct pg_backend *b, bool generic, struct cn_errmsg *err)
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
cn_err
pg_prepare_stmt(struct pg_backend *b, const char *name, const char *sql, int nparams,
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
        if ((rv = pg_plan_mode(b, false, err)) != CN_OK) {
            return rv;
        }
        return pg_exec_bin(b, claim_sql[b->limits][b->tenants], b->limits ? 6 : 5, params, out,
                           err);
    }
    if ((rv = pg_plan_mode(b, true, err)) != CN_OK) {
        return rv;
    }
    if (!b->claim_prepared) {
        if ((rv = pg_prepare_stmt(b, "cairn_claim", claim_sql[0][0], 5, err)) != CN_OK) {
            return rv;
        }
        b->claim_prepared = true;
    }
    return rn_db_exec_prepared_binary(b->c, "cairn_claim", 5, params, out, err);
}

cn_err
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
    pg_barr_begin(&ids, PG_OID_UUID);
    for (row = 0; row < rows; row++) {
        struct rn_claimed *c = &cl[n];
        struct cn_errmsg em;

        c->input = ir_null();
        if (!pg_get_uuid(r, row, 0, c->instance_id.b) || !pg_get_uuid(r, row, 1, c->lock.b) ||
            !pg_get_uuid(r, row, 2, c->version_id.b)) {
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
        c->deadline_ms = pg_get_i64(r, row, 7);
        c->timeout_ms = pg_get_i64(r, row, 8);
        c->redrive = PQgetlength(r, row, 9) == 1 && PQgetvalue(r, row, 9)[0] == 1; /* binary bool */
        if (!PQgetisnull(r, row, 10) && pg_get_uuid(r, row, 10, c->parent.parent.b) &&
            pg_get_uuid(r, row, 11, c->parent.exec_id.b) && PQgetlength(r, row, 12) == 4) {
            c->parent.attempt = pg_be32(PQgetvalue(r, row, 12));
            c->parent.has = true;
        }
        /* The claim's own mark is in the row it returns; whether an earlier claim had started
         * it was read before (binary bool). */
        c->started_before = PQgetlength(r, row, 13) == 1 && PQgetvalue(r, row, 13)[0] == 1;
        c->state_step = PQgetlength(r, row, 14) == 4 ? pg_be32(PQgetvalue(r, row, 14)) : 0;
        c->cancel_force = PQgetlength(r, row, 15) == 1 && PQgetvalue(r, row, 15)[0] == 1;
        pg_barr_uuid(&ids, c->instance_id.b);
        resumed = resumed || c->state != NULL || c->started_before;
        n++;
    }
    PQclear(r);
    /* Results are recorded only for an instance that was started before (its first step goes
     * out recorded by the claim that started it): a claim of new instances has none to read. */
    if (rv == CN_OK && resumed) {
        struct pargs g = {0};
        pg_pa_array(&g, &ids);
        if ((rv = pg_exec_args(b, done_sql, &g, &d, err)) == CN_OK) {
            rv = attach_done(d, cl, n, err);
            PQclear(d);
        }
    }
    pg_barr_fini(&ids);
    if (rv != CN_OK) {
        /* The leases were taken: they expire and another claim takes the instances. */
        rn_claimed_free(cl, n);
        return rv;
    }
    *out = cl;
    *nout = n;
    return CN_OK;
}

cn_err
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
