/* SPDX-License-Identifier: MIT */
/*
 * Why an unfinished instance is not moving, for `cairnctl inspect`: the reasons are put
 * together from the queue row (its due time, its concurrency slot: sql/0012), the live graph
 * (rn_snapshot_describe: actions in flight, backoffs, sleeps, child workflows) and, for an
 * action in flight, what the fleet's runners publish about their workers (cairn.runners, sql/0014:
 * whether any connected worker serves the action and how many attempts wait for a slot). With
 * no live runner, it says so.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/buf.h"
#include "ir/base/xalloc.h"
#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

/* Limits are per (tenant, workflow) and the queue row carries its tenant (sql/0017): the
 * schema owner sees every tenant's, so the limit and the slots held are those of the
 * instance's own tenant; quota and tenant_running are the tenant's quota and the slots it
 * holds. */
static const char *const limit_sql =
    "SELECT q.limit_name IS NOT NULL AND NOT q.holds_slot AS limited, q.limit_key,"
    " wl.max_running, wl.max_per_key,"
    " (SELECT count(*) FROM cairn.queued_instances h WHERE h.tenant_id = q.tenant_id"
    "   AND h.limit_name = q.limit_name AND h.holds_slot) AS running,"
    " (SELECT count(*) FROM cairn.queued_instances h WHERE h.tenant_id = q.tenant_id"
    "   AND h.limit_name = q.limit_name AND h.holds_slot AND h.limit_key = q.limit_key)"
    "   AS key_running,"
    " q.scheduled_at > now() AS later, q.scheduled_at, q.lock_uuid IS NOT NULL AS held,"
    " t.max_running AS quota,"
    " (SELECT count(*) FROM cairn.queued_instances h WHERE h.tenant_id = q.tenant_id"
    "   AND h.holds_slot) AS tenant_running, q.tenant_id"
    " FROM cairn.queued_instances q"
    " LEFT JOIN cairn.workflow_limits wl ON wl.tenant_id = q.tenant_id"
    "  AND wl.workflow_name = q.limit_name"
    " LEFT JOIN cairn.tenants t ON t.name = q.tenant_id"
    " WHERE q.instance_id = $1";

/* Live runners (seen within a minute) with workers for the action, and the attempts waiting
 * for one of its slots across them. */
static const char *const fleet_sql =
    "SELECT count(*) AS runners, coalesce(sum((actions -> $1 ->> 'workers')::bigint), 0) AS"
    " workers, coalesce(sum((actions -> $1 ->> 'waiting')::bigint), 0) AS waiting"
    " FROM cairn.runners WHERE seen_at > now() - interval '60 seconds'";

static void add(struct cn_buf *out, const char *fmt, ...) CN_PRINTF(2, 3);

static void
add(struct cn_buf *out, const char *fmt, ...)
{
    va_list ap;
    cn_err rv;

    va_start(ap, fmt);
    rv = cn_buf_vprintf(out, fmt, ap);
    va_end(ap);
    if (rv != CN_OK || cn_buf_putc(out, '\0') != CN_OK) { /* NUL-separated */
        cn_oom("inspect");
    }
}

static void
when(long long ms, char *out, size_t n)
{
    time_t t = (time_t) (ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    (void) strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static const char *
str_of(struct ir_val n, const char *key)
{
    const struct ir_val *v = ir_map_get(n, key, strlen(key));
    return v != NULL && v->type == IR_T_STR ? ir_str_data(*v) : NULL;
}

static long long
int_of(struct ir_val n, const char *key)
{
    const struct ir_val *v = ir_map_get(n, key, strlen(key));
    return v != NULL && v->type == IR_T_INT ? (long long) v->u.i : 0;
}

/* The reasons of an action in flight: whether the fleet can run it at all. */
static void
action_reason(PGconn *c, const char *action, long long attempt, struct cn_buf *out)
{
    const char *params[1] = {action};
    struct cn_errmsg em;
    PGresult *r = NULL;

    if (rn_db_exec(c, fleet_sql, 1, params, &r, &em) == CN_OK && PQntuples(r) == 1 &&
        ctl_col_int(r, 0, "runners") > 0) {
        long long workers = ctl_col_int(r, 0, "workers"), waiting = ctl_col_int(r, 0, "waiting");
        if (workers == 0) {
            add(out, "no connected worker serves `%s` (%lld attempt%s waiting across the fleet)",
                action, waiting, waiting == 1 ? "" : "s");
        } else if (waiting > 0) {
            add(out,
                "a worker slot for `%s`, or its result (attempt %lld; %lld attempt%s waiting "
                "for a slot, %lld worker%s serve it)",
                action, attempt, waiting, waiting == 1 ? "" : "s", workers,
                workers == 1 ? "" : "s");
        } else {
            add(out, "the result of `%s` (attempt %lld) from a worker", action, attempt);
        }
    } else {
        add(out, "the result of `%s` (attempt %lld; no runner is running)", action, attempt);
    }
    PQclear(r);
}

/* The reason the queue row q gives: a concurrency slot (the key's, the workflow's or the
 * tenant's that is full), its start or wake-up time, or a runner to claim it. */
static void
queue_reason(const PGresult *q, const char *status, struct cn_buf *out)
{
    bool later = ctl_col_true(q, 0, "later"), held = ctl_col_true(q, 0, "held");
    const char *at = ctl_col(q, 0, "scheduled_at");

    if (ctl_col_true(q, 0, "limited") && !later) {
        if (ctl_col_opt(q, 0, "limit_key") != NULL &&
            ctl_col_int(q, 0, "key_running") >= ctl_col_int(q, 0, "max_per_key")) {
            add(out, "a concurrency slot: key '%s' has %s running, its limit (cairnctl limit list)",
                ctl_col(q, 0, "limit_key"), ctl_col(q, 0, "key_running"));
        } else if (ctl_col_opt(q, 0, "max_running") != NULL &&
                   ctl_col_int(q, 0, "running") >= ctl_col_int(q, 0, "max_running")) {
            add(out, "a concurrency slot: workflow runs %s of at most %s (cairnctl limit list)",
                ctl_col(q, 0, "running"), ctl_col(q, 0, "max_running"));
        } else if (ctl_col_opt(q, 0, "quota") != NULL &&
                   ctl_col_int(q, 0, "tenant_running") >= ctl_col_int(q, 0, "quota")) {
            add(out,
                "a concurrency slot: tenant %s runs %s of at most %s (its quota: cairnctl "
                "tenant list)",
                ctl_col(q, 0, "tenant_id"), ctl_col(q, 0, "tenant_running"),
                ctl_col(q, 0, "quota"));
        } else {
            add(out, "a concurrency slot: one is free, the next claim takes it");
        }
    } else if (later && strcmp(status, "queued") == 0) {
        add(out, "its start time, %s", at);
    } else if (later && !held) {
        add(out, "its next wake-up at %s (no runner holds it meanwhile)", at);
    } else if (!held) {
        add(out, "a runner to claim it (due since %s)", at);
    }
}

static const char *const waits_sql =
    "SELECT kind, array_to_string(names, ',') AS names, key, since, timeout_at, buffered"
    " FROM cairn.instance_waits WHERE instance_id = $1 ORDER BY since, execution_id";

/* Each registered wait of instance id (cairn.instance_waits): what it waits for, since when,
 * until when, and the command that sends it. */
static cn_err
waits_reasons(PGconn *c, const char *id, struct cn_buf *out, struct cn_errmsg *em)
{
    const char *params[1] = {id};
    PGresult *r = NULL;
    cn_err rv = rn_db_exec(c, waits_sql, 1, params, &r, em);
    int row;

    for (row = 0; rv == CN_OK && row < PQntuples(r); row++) {
        const char *names = ctl_col(r, row, "names"), *until = ctl_col_opt(r, row, "timeout_at");
        size_t first = strcspn(names, ",");

        if (strcmp(ctl_col(r, row, "kind"), "event") == 0) {
            add(out,
                "event %s with key %s, since %s%s%s: publish it with `cairnctl event %s %s "
                "--payload JSON`",
                names, ctl_col(r, row, "key"), ctl_col(r, row, "since"),
                until != NULL ? ", times out at " : "", until != NULL ? until : "", names,
                ctl_col(r, row, "key"));
        } else {
            add(out,
                "signal %s, since %s%s%s (%s buffered for other names): send it with "
                "`cairnctl signal %s %.*s --payload JSON`",
                names, ctl_col(r, row, "since"), until != NULL ? ", times out at " : "",
                until != NULL ? until : "", ctl_col(r, row, "buffered"), id, (int) first, names);
        }
    }
    PQclear(r);
    return rv;
}

int
ctl_wait_reasons(PGconn *c, const char *id, const char *status, struct ir_val live,
                 struct cn_buf *out)
{
    const char *params[1] = {id};
    struct cn_errmsg em;
    PGresult *q = NULL;
    char at[40];
    size_t i;
    cn_err rv;

    if (strcmp(status, "queued") != 0 && strcmp(status, "running") != 0) {
        return EXIT_OK;
    }
    if ((rv = rn_db_exec(c, limit_sql, 1, params, &q, &em)) != CN_OK) {
        fprintf(stderr, "cairnctl inspect: %s\n", em.text);
        return EXIT_DB;
    }
    if (PQntuples(q) == 1) {
        queue_reason(q, status, out);
    }
    PQclear(q);
    if ((rv = waits_reasons(c, id, out, &em)) != CN_OK) {
        fprintf(stderr, "cairnctl inspect: %s\n", em.text);
        return EXIT_DB;
    }
    if (live.type != IR_T_LIST || strcmp(status, "running") != 0) {
        return EXIT_OK;
    }
    for (i = 0; i < ir_list_len(live); i++) {
        struct ir_val n = ir_list_items(live)[i];
        const char *st = str_of(n, "status"), *act = str_of(n, "action"), *call = str_of(n, "call");
        long long attempt = int_of(n, "attempt");

        if (st != NULL && call != NULL && strcmp(call, "wait for") == 0) {
            add(out, "a child it started to finish (`wait for`, line %lld)", int_of(n, "line"));
            continue;
        }
        if (st == NULL || (call != NULL && strncmp(call, "wait", 4) == 0)) {
            continue; /* a wait: waits_reasons said it, from its row */
        }
        if (strcmp(st, "running") == 0 && act != NULL && call != NULL) {
            const char *child = str_of(n, "child_id");
            add(out, "child workflow %s%s%s", act, child != NULL ? " " : "",
                child != NULL ? child : " (being started)");
        } else if (strcmp(st, "running") == 0 && act != NULL) {
            action_reason(c, act, attempt, out);
        } else if (strcmp(st, "backoff") == 0) {
            when(int_of(n, "wake_ms"), at, sizeof(at));
            add(out, "a retry backoff: `%s` attempt %lld at %s", act != NULL ? act : "?", attempt,
                at);
        } else if (strcmp(st, "sleeping") == 0) {
            when(int_of(n, "wake_ms"), at, sizeof(at));
            add(out, "a sleep, until %s", at);
        }
    }
    return EXIT_OK;
}
