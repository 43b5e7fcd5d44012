/* SPDX-License-Identifier: MIT */
/*
 * The operations features the runners call: retention's due pruning, the backfills' tick and
 * the schedules' firing (runner/ops/schedule.c).
 *
 * Threads: used by one thread at a time (pg_int.h).
 */

#include <stdlib.h>
#include <string.h>

#include "ir/base/xalloc.h"
#include "runner/ops/schedule.h"
#include "runner/store/db.h"
#include "runner/store/pg/pg_int.h"

cn_err
pg_prune_due(struct rn_backend *base, int64_t retention_s, size_t batch,
             char cursor[RN_PRUNE_CURSOR_LEN], struct rn_prune_counts *n, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    char keep[24], nbatch[24];
    const char *params[3] = {keep, nbatch, cursor[0] != '\0' ? cursor : NULL};
    PGresult *r = NULL;
    cn_err rv;

    memset(n, 0, sizeof(*n));
    if ((rv = pg_conn(b, err)) != CN_OK) {
        return rv;
    }
    (void) snprintf(keep, sizeof(keep), "%lld", (long long) retention_s);
    (void) snprintf(nbatch, sizeof(nbatch), "%zu", batch);
    if ((rv = rn_db_exec(
             b->c,
             "SELECT instances, actions, next_before, events FROM cairn.prune_due(CASE WHEN"
             " $1::bigint > 0 THEN $1::bigint * interval '1 second' END, $2::integer,"
             " $3::timestamptz)",
             3, params, &r, err)) != CN_OK) {
        return rv;
    }
    cursor[0] = '\0';
    if (PQntuples(r) == 1) {
        const char *next = rn_db_get(r, 0, "next_before");

        n->instances = (size_t) strtoull(rn_db_get(r, 0, "instances"), NULL, 10);
        n->actions = (size_t) strtoull(rn_db_get(r, 0, "actions"), NULL, 10);
        n->events = (size_t) strtoull(rn_db_get(r, 0, "events"), NULL, 10);
        if (next != NULL) {
            (void) snprintf(cursor, RN_PRUNE_CURSOR_LEN, "%s", next);
        }
    }
    PQclear(r);
    return CN_OK;
}

cn_err
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

/* Counted from the partial indexes of the unanswered (signals_buffered, waits' primary key):
 * the work is the backlog's, never the history's; the totals are the id sequences'. */
cn_err
pg_signal_stats(struct rn_backend *base, struct rn_signal_stat *out, struct cn_errmsg *err)
{
    struct pg_backend *b = (struct pg_backend *) base;
    PGresult *r = NULL;
    cn_err rv;

    memset(out, 0, sizeof(*out));
    if ((rv = pg_conn(b, err)) != CN_OK ||
        (rv = rn_db_exec(
             b->c,
             "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM"
             " cairn.signals_id_seq) AS sent, (SELECT CASE WHEN is_called THEN last_value ELSE 0"
             " END FROM cairn.events_id_seq) AS events, b.n AS buffered,"
             " coalesce(extract(epoch FROM now() - b.oldest), 0) AS oldest_seconds,"
             " w.signal AS waits_signal, w.event AS waits_event FROM (SELECT count(*) AS n,"
             " min(sent_at) AS oldest FROM cairn.signals WHERE consumed_at IS NULL) b,"
             " (SELECT count(*) FILTER (WHERE NOT event) AS signal, count(*) FILTER (WHERE event)"
             " AS event FROM cairn.waits) w",
             0, NULL, &r, err)) != CN_OK) {
        return rv;
    }
    out->sent = strtoll(rn_db_get(r, 0, "sent"), NULL, 10);
    out->events = strtoll(rn_db_get(r, 0, "events"), NULL, 10);
    out->buffered = strtoll(rn_db_get(r, 0, "buffered"), NULL, 10);
    out->oldest_seconds = strtod(rn_db_get(r, 0, "oldest_seconds"), NULL);
    out->waits_signal = strtoll(rn_db_get(r, 0, "waits_signal"), NULL, 10);
    out->waits_event = strtoll(rn_db_get(r, 0, "waits_event"), NULL, 10);
    PQclear(r);
    return CN_OK;
}

cn_err
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
