/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL backend (runner/store/backend.h) over one libpq connection: the operations
 * table and open/close. Every statement is parameterised; batches travel as array parameters
 * (binary arrays, params.c), so a batch of any size is a handful of statements, not one per
 * instance, and a persist batch is those statements prepared once and sent as one pipeline.
 * Persisting is idempotent: when the connection drops around COMMIT the outcome is unknown and
 * the batch is sent again; the results' key refuses a result recorded already, and the batch is
 * then written once more with a probe that leaves such results out. Results come back in binary
 * format where ids and bytes are involved (uuid = 16 raw bytes, bytea = raw bytes). A lost
 * connection is reported as CN_IO; the next call reconnects.
 *
 * Threads: used by one thread at a time (pg_int.h).
 */

#include <stdlib.h>

#include "runner/store/db.h"
#include "runner/store/pg/pg_int.h"

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
    .announce_wait = pg_announce_wait,
    .wait_notices = pg_wait_notices,
    .child_results = pg_child_results,
    .sweep_children = pg_sweep_children,
    .cancel_children = pg_cancel_children,
    .fire_schedules = pg_fire_schedules,
    .tick_backfills = pg_tick_backfills,
    .signal_stats = pg_signal_stats,
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
