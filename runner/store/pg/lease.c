/* SPDX-License-Identifier: MIT */
/*
 * Leases: the heartbeat that renews them, release, fail, reclaiming dead runners' leases;
 * and the wait for work (NOTIFY cairn_enqueue).
 *
 * Threads: used by one thread at a time (pg_int.h).
 */

#include <poll.h>
#include <stdlib.h>

#include "ir/base/uuid.h"
#include "ir/base/xalloc.h"
#include "runner/store/db.h"
#include "runner/store/pg/pg_int.h"

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
        if (!pg_get_uuid(r, row, 0, lock.b)) {
            continue;
        }
        for (i = 0; i < n; i++) {
            if (rn_token_eq(leases[i].lock, lock)) {
                st[i] = to;
            }
        }
    }
}

cn_err
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
    pg_barr_begin(&ids, PG_OID_UUID);
    pg_barr_begin(&toks, PG_OID_UUID);
    for (i = 0; i < n; i++) {
        pg_barr_uuid(&ids, leases[i].instance_id.b);
        pg_barr_uuid(&toks, leases[i].lock.b);
    }
    (void) snprintf(ms, sizeof(ms), "%lld", (long long) lease_ms);
    pg_pa_array(&g, &ids);
    pg_pa_array(&g, &toks);
    pg_pa_text(&g, ms);
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
    pg_barr_fini(&ids);
    pg_barr_fini(&toks);
    return rv;
}

cn_err
pg_release(struct rn_backend *base, const struct rn_token *locks, size_t n, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    PGresult *r = NULL;
    struct barr a;
    cn_err rv;

    if (n == 0) {
        return CN_OK;
    }
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    PG_BARR_IDS(&a, locks, n);
    rv = pg_exec_array(b,
                       "WITH q AS (UPDATE cairn.queued_instances SET lock_uuid ="
                       " NULL, lock_expires_at = NULL WHERE lock_uuid ="
                       " ANY($1::uuid[]) RETURNING instance_id)"
                       " UPDATE cairn.runner_instances ri SET status = 'queued'"
                       " FROM q WHERE ri.instance_id = q.instance_id",
                       &a, &r, err);
    PQclear(r);
    return rv;
}

cn_err
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
    if (!pg_json_text(error, &js)) {
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

cn_err
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
cn_err
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

cn_err
pg_wait_enqueue(struct rn_backend *base, int timeout_ms, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;

    return pg_wait_notify(b, "LISTEN cairn_enqueue", &b->listening, timeout_ms, NULL, NULL, err);
}

/* One row per claimer in cairn.claim_waits (0033), under an id drawn once per backend; the rows
 * of claimers gone an hour are cleared on the way. */
cn_err
pg_announce_wait(struct rn_backend *base, int64_t for_ms, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    const char *params[2];
    char ms[24];
    cn_err rv;

    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    if (b->claimer[0] == '\0') {
        cn_uuid_random(b->claimer);
    }
    (void) snprintf(ms, sizeof(ms), "%lld", (long long) for_ms);
    params[0] = b->claimer;
    params[1] = ms;
    return rn_db_exec(
        b->c,
        "WITH gone AS (DELETE FROM cairn.claim_waits"
        " WHERE until < clock_timestamp() - interval '1 hour' AND claimer <> $1::uuid)"
        " INSERT INTO cairn.claim_waits (claimer, until) VALUES ($1::uuid,"
        " clock_timestamp() + $2::bigint * interval '1 millisecond')"
        " ON CONFLICT (claimer) DO UPDATE SET until = EXCLUDED.until",
        2, params, NULL, err);
}
