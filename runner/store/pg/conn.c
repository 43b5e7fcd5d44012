/* SPDX-License-Identifier: MIT */
/*
 * The connection: (re)connecting, one statement in binary or text form, rollback.
 *
 * Threads: used by one thread at a time (pg_int.h).
 */

#include "runner/store/db.h"
#include "runner/store/pg/pg_int.h"

/* ---- helpers ------------------------------------------------------------------------------ */

cn_err
pg_conn(struct pg_backend *b, struct cn_errmsg *err)
{
    PGresult *r;
    cn_err rv;
    bool ok;

    if (rn_db_alive(&b->c)) {
        return CN_OK;
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
cn_err
pg_exec_bin(struct pg_backend *b, const char *sql, int n, const char *const *params, PGresult **out,
            struct cn_errmsg *err)
{
    return rn_db_exec_binary(b->c, sql, n, params, out, err);
}

cn_err
pg_simple(struct pg_backend *b, const char *sql, struct cn_errmsg *err)
{
    return rn_db_exec(b->c, sql, 0, NULL, NULL, err);
}

void
pg_rollback(struct pg_backend *b)
{
    struct cn_errmsg e2;

    if (pg_simple(b, "ROLLBACK", &e2) != CN_OK) {
        /* the connection is gone: the server rolled back by itself */
    }
}
