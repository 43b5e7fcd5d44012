/* SPDX-License-Identifier: MIT */
/* Schedules: slots and firing (see schedule.h). */
#include "runner/ops/schedule.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/buf.h"
#include "ir/base/xalloc.h"
#include "runner/ops/cron.h"
#include "runner/store/db.h"

/* Civil minutes looked at per slot wanted, at most: a daylight saving change drops a few (their
 * instants repeat), never more than an hour's worth. */
#define CIVIL_SLACK 64

static int64_t
to_i64(const char *s)
{
    return strtoll(s, NULL, 10);
}

/* The civil minute of instant ms in zone tz. */
static cn_err
civil_of(PGconn *c, int64_t ms, const char *tz, struct rn_civil *out, struct cn_errmsg *err)
{
    char msbuf[24];
    const char *p[2] = {msbuf, tz};
    PGresult *r = NULL;
    cn_err rv;

    (void) snprintf(msbuf, sizeof(msbuf), "%lld", (long long) ms);
    if ((rv = rn_db_exec(c,
                         "SELECT to_char(to_timestamp($1::bigint / 1000.0) AT TIME ZONE $2,"
                         " 'YYYY-MM-DD HH24:MI')",
                         2, p, &r, err)) != CN_OK) {
        return rv;
    }
    if (!rn_civil_parse(PQgetvalue(r, 0, 0), out)) {
        rv = cn_errmsg_set(err, CN_RANGE, "instant %lld is outside the years a schedule covers",
                           (long long) ms);
    }
    PQclear(r);
    return rv;
}

cn_err
rn_schedule_slots(PGconn *c, const char *cron, int64_t every_ms, const char *tz, int64_t after_ms,
                  size_t n, int64_t *out, size_t *nout, struct cn_errmsg *err)
{
    struct rn_cron cr;
    struct rn_civil t;
    struct cn_buf arr = CN_BUF_INIT;
    PGresult *r = NULL;
    size_t k, want = n + CIVIL_SLACK;
    int64_t prev = after_ms;
    int row;
    cn_err rv;

    *nout = 0;
    if (cron == NULL) {
        for (k = 0; k < n; k++) {
            out[k] = after_ms + (int64_t) (k + 1) * every_ms;
        }
        *nout = n;
        return CN_OK;
    }
    if ((rv = rn_cron_parse(cron, &cr, err)) != CN_OK ||
        (rv = civil_of(c, after_ms, tz, &t, err)) != CN_OK) {
        return rv;
    }
    /* The civil minutes after `after`'s own, converted in one statement. */
    rv = cn_buf_putc(&arr, '{');
    for (k = 0; rv == CN_OK && k < want && rn_cron_next(&cr, &t, &t); k++) {
        char text[20];
        rn_civil_format(&t, text);
        rv = cn_buf_printf(&arr, "%s\"%s\"", k > 0 ? "," : "", text);
    }
    if (rv == CN_OK) {
        rv = cn_buf_putc(&arr, '}');
    }
    if (rv != CN_OK) {
        cn_buf_fini(&arr);
        return rv;
    }
    {
        const char *p[2] = {arr.data, tz};
        rv = rn_db_exec(c,
                        "SELECT floor(extract(epoch FROM (u.t::timestamp AT TIME ZONE $2)) *"
                        " 1000)::bigint FROM unnest($1::text[]) WITH ORDINALITY AS u(t, o)"
                        " ORDER BY u.o",
                        2, p, &r, err);
    }
    cn_buf_fini(&arr);
    if (rv != CN_OK) {
        return rv;
    }
    for (row = 0; row < PQntuples(r) && *nout < n; row++) {
        int64_t at = to_i64(PQgetvalue(r, row, 0));
        if (at > prev) { /* an instant a skipped hour repeats is fired once */
            out[(*nout)++] = at;
            prev = at;
        }
    }
    PQclear(r);
    return CN_OK;
}

/* A slot's jitter: a fixed function of the schedule and the slot, so that a runner that fires
 * it again after a crash picks the same due time. */
static int64_t
jitter_of(const char *name, int64_t slot, int64_t jitter_ms)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t) slot;
    const char *s;

    if (jitter_ms <= 0) {
        return 0;
    }
    for (s = name; *s != '\0'; s++) {
        h = (h ^ (unsigned char) *s) * 1099511628211ULL;
    }
    h ^= h >> 29;
    return (int64_t) (h % (uint64_t) (jitter_ms + 1));
}

/* Enqueues slot (due at slot + its jitter) of tenant's schedule name: 1 when a new instance, 0
 * when the slot had one. */
static cn_err
fire_slot(PGconn *c, const char *tenant, const char *name, int64_t slot, int64_t jitter_ms,
          int *made, struct cn_errmsg *err)
{
    char sbuf[24], dbuf[24];
    const char *p[4] = {name, sbuf, dbuf, tenant};
    PGresult *r = NULL;
    cn_err rv;

    long long at = slot, due = slot + jitter_of(name, slot, jitter_ms);

    (void) snprintf(sbuf, sizeof(sbuf), "%lld", at);
    (void) snprintf(dbuf, sizeof(dbuf), "%lld", due);
    rv = rn_db_exec(c,
                    "SELECT cairn.schedule_fire($1, to_timestamp($2::bigint / 1000.0),"
                    " to_timestamp($3::bigint / 1000.0), $4) IS NOT NULL",
                    4, p, &r, err);
    if (rv == CN_OK) {
        *made = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        PQclear(r);
    }
    return rv;
}

/* Pauses tenant's schedule name with why (after its savepoint was rolled back). */
static cn_err
pause_with(PGconn *c, const char *tenant, const char *name, const char *why, struct cn_errmsg *err)
{
    const char *p[3] = {name, why, tenant};

    return rn_db_exec(c,
                      "UPDATE cairn.schedules SET paused = true, error = left($2, 1000)"
                      " WHERE name = $1 AND tenant_id = $3",
                      3, p, NULL, err);
}

/* One due schedule, inside the caller's transaction and a savepoint of its own. */
static cn_err
fire_one(PGconn *c, PGresult *r, int row, int64_t now, size_t *fired, struct cn_errmsg *err)
{
    const char *name = rn_db_get(r, row, "name"), *tenant = rn_db_get(r, row, "tenant_id");
    const char *cron = rn_db_get(r, row, "cron"), *every_ms = rn_db_get(r, row, "every_ms");
    const char *tz = rn_db_get(r, row, "timezone"), *catch_up = rn_db_get(r, row, "catch_up");
    const char *next_ms = rn_db_get(r, row, "next_ms");
    int64_t every = every_ms != NULL ? to_i64(every_ms) : 0;
    int64_t jitter = to_i64(rn_db_get(r, row, "jitter_ms"));
    bool fresh = next_ms == NULL;
    int64_t next = fresh ? 0 : to_i64(next_ms);
    int64_t *due = NULL, after;
    size_t ndue = 0, got = 0, k, from;
    char nbuf[24], lbuf[24];
    int64_t last = 0;
    cn_err rv = CN_OK;

    if (!fresh) {
        /* The due slots: next_at, and those after it up to now. */
        due = cn_xcalloc(RN_SCHEDULE_CATCHUP_MAX + 1, sizeof(*due));
        due[ndue++] = next;
        after = next;
        while (rv == CN_OK && ndue <= RN_SCHEDULE_CATCHUP_MAX) {
            int64_t batch[64];
            rv = rn_schedule_slots(c, cron, every, tz, after, 64, batch, &got, err);
            for (k = 0;
                 rv == CN_OK && k < got && batch[k] <= now && ndue <= RN_SCHEDULE_CATCHUP_MAX;
                 k++) {
                due[ndue++] = batch[k];
            }
            if (got == 0 || k < got || got < 64) {
                break;
            }
            after = batch[got - 1];
            if (ndue > RN_SCHEDULE_CATCHUP_MAX) {
                break;
            }
        }
        /* Which of them run: on time only (skip), the latest (one), or the recent ones (all). */
        from = ndue;
        if (strcmp(catch_up, "one") == 0) {
            from = ndue - 1;
        } else {
            int64_t bound = strcmp(catch_up, "all") == 0 ? now - RN_SCHEDULE_CATCHUP_WINDOW
                                                         : now - RN_SCHEDULE_ON_TIME_MS;
            for (from = 0; from < ndue && due[from] < bound; from++) {
            }
            if (strcmp(catch_up, "all") == 0 && ndue - from > RN_SCHEDULE_CATCHUP_MAX) {
                from = ndue - RN_SCHEDULE_CATCHUP_MAX;
            }
        }
        for (k = from; rv == CN_OK && k < ndue; k++) {
            int made = 0;
            rv = fire_slot(c, tenant, name, due[k], jitter, &made, err);
            *fired += (size_t) made;
            last = due[k];
        }
    }
    /* The next slot after now: on an `every` schedule's grid (next_at + k * every), a cron
     * schedule's next match. */
    if (rv == CN_OK) {
        int64_t nx = 0;
        if (cron == NULL && !fresh && every > 0) {
            nx = next + ((now - next) / every + 1) * every;
            got = 1;
        } else {
            rv = rn_schedule_slots(c, cron, every, tz, now, 1, &nx, &got, err);
        }
        if (rv == CN_OK) {
            const char *p[4] = {name, got == 1 ? nbuf : NULL, last != 0 ? lbuf : NULL, tenant};
            (void) snprintf(nbuf, sizeof(nbuf), "%lld", (long long) nx);
            (void) snprintf(lbuf, sizeof(lbuf), "%lld", (long long) last);
            rv = rn_db_exec(c,
                            "UPDATE cairn.schedules SET next_at = to_timestamp($2::bigint /"
                            " 1000.0), last_slot = coalesce(to_timestamp($3::bigint / 1000.0),"
                            " last_slot), paused = paused OR $2 IS NULL, error = CASE WHEN $2"
                            " IS NULL THEN 'its expression has no more slots' ELSE error END"
                            " WHERE name = $1 AND tenant_id = $4",
                            4, p, NULL, err);
        }
    }
    free(due);
    return rv;
}

cn_err
rn_schedules_fire(PGconn *c, size_t *fired, struct cn_errmsg *err)
{
    PGresult *r = NULL;
    int64_t now;
    int row;
    cn_err rv;

    *fired = 0;
    if ((rv = rn_db_exec(c, "BEGIN", 0, NULL, NULL, err)) != CN_OK) {
        return rv;
    }
    rv = rn_db_exec(c,
                    "SELECT name, cron, every_ms, timezone, catch_up, jitter_ms,"
                    " floor(extract(epoch FROM next_at) * 1000)::bigint AS next_ms,"
                    " floor(extract(epoch FROM now()) * 1000)::bigint AS now_ms, tenant_id"
                    " FROM cairn.schedules WHERE NOT paused AND (next_at IS NULL OR next_at <="
                    " now()) ORDER BY next_at NULLS FIRST LIMIT 50 FOR UPDATE SKIP LOCKED",
                    0, NULL, &r, err);
    for (row = 0; rv == CN_OK && row < PQntuples(r); row++) {
        struct cn_errmsg em = {{0}};
        cn_err one;

        now = to_i64(rn_db_get(r, row, "now_ms"));
        if ((rv = rn_db_exec(c, "SAVEPOINT sched", 0, NULL, NULL, err)) != CN_OK) {
            break;
        }
        one = fire_one(c, r, row, now, fired, &em);
        if (one == CN_OK) {
            rv = rn_db_exec(c, "RELEASE SAVEPOINT sched", 0, NULL, NULL, err);
        } else if (PQstatus(c) != CONNECTION_OK) {
            rv = cn_errmsg_set(err, one, "%s", em.text);
        } else {
            /* This schedule cannot run (a bad expression or zone, its workflow gone): paused,
             * with the reason, and the others go on. */
            if ((rv = rn_db_exec(c, "ROLLBACK TO SAVEPOINT sched", 0, NULL, NULL, err)) == CN_OK) {
                rv = pause_with(c, rn_db_get(r, row, "tenant_id"), rn_db_get(r, row, "name"),
                                em.text, err);
            }
        }
    }
    PQclear(r);
    if (rv == CN_OK) {
        rv = rn_db_exec(c, "COMMIT", 0, NULL, NULL, err);
    } else {
        struct cn_errmsg e2;
        if (rn_db_exec(c, "ROLLBACK", 0, NULL, NULL, &e2) != CN_OK) {
            /* the connection is gone: the server rolled back by itself */
        }
        *fired = 0;
    }
    return rv;
}
