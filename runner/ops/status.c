/* SPDX-License-Identifier: MIT */
/* The status page's data and this runner's row in cairn.runners (see status.h). */
#include "runner/ops/status.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <jansson.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/uuid.h"
#include "ir/base/vec.h"
#include "ir/base/xalloc.h"
#include "runner/store/db.h"

/* The snapshot requests render, shared: the database thread swaps in a new one while requests
 * may still be rendering the old (refs counted under s->mtx). */
struct held {
    struct rn_status_data d;
    unsigned refs;
};

struct parked {
    struct rn_http_pending *req;
    int64_t until; /* monotonic ms: answered from the old snapshot then */
};

struct rn_status {
    char *url;
    char *http;
    struct rn_pool *pool;
    char id[CN_UUID_TEXT_LEN + 1];
    char host[256];
    int64_t pid;
    struct cn_thread db_thread, answer_thread;
    pthread_mutex_t mtx;
    pthread_cond_t work; /* the database thread: a refresh is wanted, or stop */
    pthread_cond_t wake; /* the answer thread: a request parked, or stop */
    bool stopping;
    bool refresh_wanted;
    int64_t tried_ms;   /* monotonic ms of the latest refresh's end (0: never) */
    struct held *snap;  /* the latest data read; NULL: none yet */
    char db_error[256]; /* why the latest refresh failed; "": it did not */
    struct {
        struct parked *items;
        size_t len, cap;
    } parked;
    PGconn *conn; /* the database thread's alone */
    bool publish_failing;
};

/* ---- the data ------------------------------------------------------------------------------- */

void
rn_status_data_fini(struct rn_status_data *d)
{
    size_t i, k;

    for (i = 0; i < d->unfinished.len; i++) {
        free(d->unfinished.items[i].workflow);
        free(d->unfinished.items[i].status);
    }
    for (i = 0; i < d->finished.len; i++) {
        free(d->finished.items[i].workflow);
        free(d->finished.items[i].status);
    }
    for (i = 0; i < d->failures.len; i++) {
        struct rn_status_failure *f = &d->failures.items[i];
        free(f->instance_id);
        free(f->workflow);
        free(f->status);
        free(f->error);
        free(f->at);
    }
    for (i = 0; i < d->schedules.len; i++) {
        struct rn_status_schedule *sc = &d->schedules.items[i];
        free(sc->name);
        free(sc->workflow);
        free(sc->spec);
        free(sc->next_at);
        free(sc->error);
    }
    for (i = 0; i < d->runners.len; i++) {
        struct rn_status_runner *r = &d->runners.items[i];
        free(r->id);
        free(r->host);
        free(r->http);
        free(r->started_at);
        for (k = 0; k < r->nactions; k++) {
            free(r->actions[k].name);
        }
        free(r->actions);
    }
    for (i = 0; i < d->limits.len; i++) {
        free(d->limits.items[i].workflow);
    }
    for (i = 0; i < d->wait_groups.len; i++) {
        struct rn_status_wait_group *g = &d->wait_groups.items[i];
        free(g->workflow);
        free(g->kind);
        free(g->names);
        free(g->oldest);
        free(g->next_timeout);
    }
    for (i = 0; i < d->waits.len; i++) {
        struct rn_status_wait *w = &d->waits.items[i];
        free(w->instance_id);
        free(w->workflow);
        free(w->kind);
        free(w->names);
        free(w->key);
        free(w->since);
        free(w->timeout_at);
    }
    for (i = 0; i < d->cleanups.len; i++) {
        struct rn_status_cleanup *c = &d->cleanups.items[i];
        free(c->instance_id);
        free(c->workflow);
        free(c->after);
        free(c->until);
    }
    free(d->cleanups.items);
    free(d->wait_groups.items);
    free(d->waits.items);
    free(d->unfinished.items);
    free(d->finished.items);
    free(d->failures.items);
    free(d->schedules.items);
    free(d->runners.items);
    free(d->limits.items);
    memset(d, 0, sizeof(*d));
}

static void
held_release(struct rn_status *s, struct held *h)
{
    bool last;

    if (h == NULL) {
        return;
    }
    cn_mutex_lock(&s->mtx);
    last = --h->refs == 0;
    cn_mutex_unlock(&s->mtx);
    if (last) {
        rn_status_data_fini(&h->d);
        free(h);
    }
}

/* ---- the database thread -------------------------------------------------------------------- */

/* Column `name` as a new string ("" for NULL), or as an integer (0 for NULL). */
static char *
col(const PGresult *res, int row, const char *name)
{
    const char *v = rn_db_get(res, row, name);

    return cn_xstrdup(v != NULL ? v : "");
}

static int64_t
col_int(const PGresult *res, int row, const char *name)
{
    const char *v = rn_db_get(res, row, name);

    return v != NULL ? strtoll(v, NULL, 10) : 0;
}

static cn_err
ensure_conn(struct rn_status *s, struct cn_errmsg *err)
{
    cn_err rv;

    if (rn_db_alive(&s->conn)) {
        return CN_OK;
    }
    if ((rv = rn_db_connect(s->url, &s->conn, err)) != CN_OK) {
        return rv;
    }
    /* Named for pg_stat_activity; a page query that takes longer than this is not worth its
     * cost to the database (its figures are bounded: see the queries below). */
    if ((rv = rn_db_exec(s->conn, "SET application_name = 'cairn-runner status'", 0, NULL, NULL,
                         err)) == CN_OK) {
        rv = rn_db_exec(s->conn, "SET statement_timeout = '5s'", 0, NULL, NULL, err);
    }
    if (rv != CN_OK) {
        PQfinish(s->conn);
        s->conn = NULL;
    }
    return rv;
}

/* The pool's figures as cairn.runners.actions (sql/0014_runners.sql). */
static char *
actions_json(const struct rn_pool_snapshot *ps)
{
    json_t *o = json_object();
    char *text;
    size_t i;

    if (o == NULL) {
        cn_oom("status json");
    }
    for (i = 0; i < ps->nactions; i++) {
        const struct rn_pool_action_info *a = &ps->actions[i];
        json_t *e = json_pack("{s:I,s:I,s:I,s:I}", "workers", (json_int_t) a->workers, "slots",
                              (json_int_t) a->slots, "busy", (json_int_t) a->busy, "waiting",
                              (json_int_t) a->waiting);
        if (e == NULL || json_object_set_new(o, a->name, e) != 0) {
            cn_oom("status json");
        }
    }
    text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    if (text == NULL) {
        cn_oom("status json");
    }
    return text;
}

/* One statement, so that the row costs the database one round trip every 5 s; it also clears
 * dead runners' rows (never this runner's own: a runner paused past the limit comes back with
 * its started_at). */
static const char publish_sql[] =
    "WITH dead AS (DELETE FROM cairn.runners WHERE seen_at < now() - make_interval(secs => $9)"
    " AND runner_id <> $1::uuid)"
    " INSERT INTO cairn.runners AS r (runner_id, host, pid, http, workers, slots, busy, actions)"
    " VALUES ($1::uuid, $2, $3::int, $4, $5::int, $6::int, $7::int, $8::jsonb)"
    " ON CONFLICT (runner_id) DO UPDATE SET seen_at = now(), http = excluded.http,"
    " workers = excluded.workers, slots = excluded.slots, busy = excluded.busy,"
    " actions = excluded.actions";

static void
publish(struct rn_status *s)
{
    struct rn_pool_snapshot ps;
    struct cn_errmsg em = {{0}};
    char pid[24], workers[24], slots[24], busy[24], dead[24];
    uint64_t nslots = 0, nbusy = 0, nworkers = 0;
    const char *params[9];
    char *actions;
    size_t i;
    cn_err rv;

    rn_pool_snapshot(s->pool, &ps);
    for (i = 0; i < ps.nworkers; i++) {
        if (!ps.workers[i].leaving) {
            nworkers++;
            nslots += ps.workers[i].slots;
        }
        nbusy += ps.workers[i].inflight;
    }
    actions = actions_json(&ps);
    rn_pool_snapshot_fini(&ps);
    (void) snprintf(pid, sizeof(pid), "%lld", (long long) s->pid);
    (void) snprintf(workers, sizeof(workers), "%llu", (unsigned long long) nworkers);
    (void) snprintf(slots, sizeof(slots), "%llu", (unsigned long long) nslots);
    (void) snprintf(busy, sizeof(busy), "%llu", (unsigned long long) nbusy);
    (void) snprintf(dead, sizeof(dead), "%d", RN_STATUS_DEAD_S);
    params[0] = s->id;
    params[1] = s->host;
    params[2] = pid;
    params[3] = s->http;
    params[4] = workers;
    params[5] = slots;
    params[6] = busy;
    params[7] = actions;
    params[8] = dead;
    if ((rv = ensure_conn(s, &em)) == CN_OK) {
        rv = rn_db_exec(s->conn, publish_sql, 9, params, NULL, &em);
    }
    free(actions);
    if (rv != CN_OK && !s->publish_failing) {
        cn_log(CN_LOG_WARN, "status: cannot publish this runner in cairn.runners: %s", em.text);
    } else if (rv == CN_OK && s->publish_failing) {
        cn_log(CN_LOG_INFO, "status: this runner is published in cairn.runners again");
    }
    s->publish_failing = rv != CN_OK;
}

/* A timestamp as the page shows it: UTC, to the second. */
#define UTC_OF(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS\"Z\"')"

/* The page's statements. Each is bounded whatever the history holds: the unfinished instances
 * (the claim queue), the instances created in the last 24 h (a range of runner_instances'
 * (status, created_at) index per status), the newest 20 failures (the same index, backwards),
 * the schedules and the live runners. */
static const char q_unfinished[] =
    "SELECT ri.workflow_name, ri.status, count(*) AS n FROM cairn.queued_instances q"
    " JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id"
    " GROUP BY 1, 2 ORDER BY 1, 2";
static const char q_finished[] =
    "SELECT workflow_name, status, count(*) AS n FROM cairn.runner_instances"
    " WHERE status = ANY ('{completed,failed,cancelled,timed_out}')"
    " AND created_at >= now() - interval '24 hours' GROUP BY 1, 2 ORDER BY 1, 2";
#define FAILED_OF(st)                                                             \
    "(SELECT instance_id, workflow_name, status, error, created_at, completed_at" \
    " FROM cairn.runner_instances WHERE status = '" st "' ORDER BY created_at DESC LIMIT 20)"
/* The macros among the string pieces defeat clang-format's layout. */
/* clang-format off */
static const char q_failures[] =
    "SELECT f.instance_id, f.workflow_name, f.status,"
    " CASE WHEN length(e.t) > 300 THEN left(e.t, 300) || '…' ELSE e.t END AS error,"
    " " UTC_OF("coalesce(f.completed_at, f.created_at)") " AS at"
    " FROM (" FAILED_OF("failed") " UNION ALL " FAILED_OF("timed_out") ") f,"
    " LATERAL (SELECT CASE WHEN jsonb_typeof(f.error) = 'object' THEN"
    " concat_ws(': ', f.error->>'type', coalesce(f.error->>'message', ''))"
    " ELSE coalesce(f.error::text, '') END AS t) e"
    " ORDER BY f.created_at DESC LIMIT 20";
/* clang-format on */
static const char q_schedules[] =
    "SELECT name, workflow_name,"
    " CASE WHEN cron IS NOT NULL THEN 'cron ' || cron || ' (' || timezone || ')'"
    " ELSE 'every ' || (every_ms * interval '1 millisecond')::text END AS spec,"
    " coalesce(" UTC_OF("next_at") ", '') AS next_at,"
                                   " paused, coalesce(error, '') AS error FROM cairn.schedules "
                                   "ORDER BY name LIMIT 200";
static const char q_runners[] =
    "SELECT runner_id, host, pid, coalesce(http, '') AS http,"
    " " UTC_OF("started_at") " AS started_at,"
                             " greatest(0, extract(epoch FROM now() - seen_at))::bigint AS "
                             "seen_ago_s, workers, slots,"
                             " busy, actions::text AS actions FROM cairn.runners"
                             " WHERE seen_at >= now() - make_interval(secs => $1) ORDER BY "
                             "started_at, runner_id LIMIT 200";
/* The workflows at their concurrency limit with instances waiting (sql/0012). */
static const char q_limits[] =
    "SELECT workflow_name, max_running, running, waiting FROM cairn.limit_status"
    " WHERE max_running IS NOT NULL AND running >= max_running AND waiting > 0"
    " ORDER BY workflow_name LIMIT 200";

/* What unfinished instances wait for outside themselves (sql/api/35_signals.sql): one row per
 * waiting instance at most, so both are bounded by the claim queue, like q_unfinished; events
 * are grouped by name, not key (a key per order would make a row per instance). */
static const char q_wait_groups[] =
    "SELECT workflow_name, kind, array_to_string(names, ', ') AS names, count(*) AS n,"
    " " UTC_OF("min(since)") " AS oldest,"
                             " coalesce(" UTC_OF(
                                 "min(timeout_at)") ", '') AS next_timeout"
                                                    " FROM cairn.instance_waits GROUP BY 1, 2, 3 "
                                                    "ORDER BY n DESC, 1, 2, 3 LIMIT 200";
static const char q_waits[] =
    "SELECT instance_id, workflow_name, kind, array_to_string(names, ', ') AS names,"
    " coalesce(key, '') AS key, " UTC_OF(
        "since") " AS since,"
                 " coalesce(" UTC_OF("timeout_at") ", '') AS timeout_at, buffered"
                                                   " FROM cairn.instance_waits ORDER BY since, "
                                                   "instance_id LIMIT 20";

/* The instances cleaning up (sql/0032: a partial index holds exactly these). */
static const char q_cleanups[] =
    "SELECT instance_id, workflow_name, CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancel'"
    " ELSE 'timeout' END AS after, " UTC_OF(
        "cleanup_until") " AS until"
                         " FROM cairn.runner_instances WHERE cleanup_until IS NOT NULL"
                         " AND status IN ('queued', 'running') ORDER BY cleanup_until, instance_id "
                         "LIMIT 20";

static void
read_counts(const PGresult *res, struct rn_status_counts *v)
{
    int i;

    for (i = 0; i < PQntuples(res); i++) {
        struct rn_status_count c = {col(res, i, "workflow_name"), col(res, i, "status"),
                                    col_int(res, i, "n")};
        CN_VEC_XPUSH(v, c);
    }
}

static int
action_cmp(const void *a, const void *b)
{
    return strcmp(((const struct rn_status_action *) a)->name,
                  ((const struct rn_status_action *) b)->name);
}

static void
read_runner_actions(struct rn_status_runner *r, const char *text)
{
    json_error_t jerr;
    json_t *o = json_loads(text, 0, &jerr), *v;
    const char *key;
    size_t k = 0;

    if (o == NULL || !json_is_object(o)) {
        json_decref(o);
        return; /* a row written by hand: shown without its actions */
    }
    r->actions = cn_xcalloc(json_object_size(o) + 1, sizeof(*r->actions));
    json_object_foreach(o, key, v)
    {
        struct rn_status_action *a = &r->actions[k++];
        a->name = cn_xstrdup(key);
        a->workers = json_integer_value(json_object_get(v, "workers"));
        a->slots = json_integer_value(json_object_get(v, "slots"));
        a->busy = json_integer_value(json_object_get(v, "busy"));
        a->waiting = json_integer_value(json_object_get(v, "waiting"));
    }
    r->nactions = k;
    qsort(r->actions, k, sizeof(*r->actions), action_cmp); /* jsonb keeps its own order */
    json_decref(o);
}

/* Reads everything the page shows, in one read-only transaction (one consistent view). */
static cn_err
read_data(struct rn_status *s, struct rn_status_data *d, struct cn_errmsg *err)
{
    char dead[24];
    const char *params[1] = {dead};
    PGresult *res = NULL;
    cn_err rv;
    int i;

    (void) snprintf(dead, sizeof(dead), "%d", RN_STATUS_DEAD_S);
    memset(d, 0, sizeof(*d));
    if ((rv = ensure_conn(s, err)) != CN_OK ||
        (rv = rn_db_exec(s->conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", 0, NULL, NULL,
                         err)) != CN_OK) {
        return rv;
    }
    if ((rv = rn_db_exec(s->conn, q_unfinished, 0, NULL, &res, err)) != CN_OK) {
        goto fail;
    }
    read_counts(res, &d->unfinished);
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, q_finished, 0, NULL, &res, err)) != CN_OK) {
        goto fail;
    }
    read_counts(res, &d->finished);
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, q_failures, 0, NULL, &res, err)) != CN_OK) {
        goto fail;
    }
    for (i = 0; i < PQntuples(res); i++) {
        struct rn_status_failure f = {col(res, i, "instance_id"), col(res, i, "workflow_name"),
                                      col(res, i, "status"), col(res, i, "error"),
                                      col(res, i, "at")};
        CN_VEC_XPUSH(&d->failures, f);
    }
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, q_schedules, 0, NULL, &res, err)) != CN_OK) {
        goto fail;
    }
    for (i = 0; i < PQntuples(res); i++) {
        const char *paused = rn_db_get(res, i, "paused");
        struct rn_status_schedule sc = {
            col(res, i, "name"),  col(res, i, "workflow_name"),
            col(res, i, "spec"),  col(res, i, "next_at"),
            col(res, i, "error"), paused != NULL && strcmp(paused, "t") == 0};
        CN_VEC_XPUSH(&d->schedules, sc);
    }
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, q_runners, 1, params, &res, err)) != CN_OK) {
        goto fail;
    }
    for (i = 0; i < PQntuples(res); i++) {
        const char *actions = rn_db_get(res, i, "actions");
        struct rn_status_runner r;

        memset(&r, 0, sizeof(r));
        r.id = col(res, i, "runner_id");
        r.host = col(res, i, "host");
        r.pid = col_int(res, i, "pid");
        r.http = col(res, i, "http");
        r.started_at = col(res, i, "started_at");
        r.seen_ago_s = col_int(res, i, "seen_ago_s");
        r.workers = col_int(res, i, "workers");
        r.slots = col_int(res, i, "slots");
        r.busy = col_int(res, i, "busy");
        read_runner_actions(&r, actions != NULL ? actions : "");
        CN_VEC_XPUSH(&d->runners, r);
    }
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, q_limits, 0, NULL, &res, err)) != CN_OK) {
        goto fail;
    }
    for (i = 0; i < PQntuples(res); i++) {
        struct rn_status_limit l = {col(res, i, "workflow_name"), col_int(res, i, "max_running"),
                                    col_int(res, i, "running"), col_int(res, i, "waiting")};
        CN_VEC_XPUSH(&d->limits, l);
    }
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, q_wait_groups, 0, NULL, &res, err)) != CN_OK) {
        goto fail;
    }
    for (i = 0; i < PQntuples(res); i++) {
        struct rn_status_wait_group g = {col(res, i, "workflow_name"), col(res, i, "kind"),
                                         col(res, i, "names"),         col(res, i, "oldest"),
                                         col(res, i, "next_timeout"),  col_int(res, i, "n")};
        CN_VEC_XPUSH(&d->wait_groups, g);
    }
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, q_waits, 0, NULL, &res, err)) != CN_OK) {
        goto fail;
    }
    for (i = 0; i < PQntuples(res); i++) {
        struct rn_status_wait w = {col(res, i, "instance_id"), col(res, i, "workflow_name"),
                                   col(res, i, "kind"),        col(res, i, "names"),
                                   col(res, i, "key"),         col(res, i, "since"),
                                   col(res, i, "timeout_at"),  col_int(res, i, "buffered")};
        CN_VEC_XPUSH(&d->waits, w);
    }
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, q_cleanups, 0, NULL, &res, err)) != CN_OK) {
        goto fail;
    }
    for (i = 0; i < PQntuples(res); i++) {
        struct rn_status_cleanup c = {col(res, i, "instance_id"), col(res, i, "workflow_name"),
                                      col(res, i, "after"), col(res, i, "until")};
        CN_VEC_XPUSH(&d->cleanups, c);
    }
    PQclear(res);
    if ((rv = rn_db_exec(s->conn, "COMMIT", 0, NULL, NULL, err)) != CN_OK) {
        rn_status_data_fini(d);
        return rv;
    }
    d->taken_ms = cn_wall_ms();
    return CN_OK;
fail:
    rn_status_data_fini(d);
    if (PQstatus(s->conn) == CONNECTION_OK) {
        struct cn_errmsg ignored;
        if (rn_db_exec(s->conn, "ROLLBACK", 0, NULL, NULL, &ignored) != CN_OK) {
            /* the connection is checked again before the next statement */
        }
    }
    return rv;
}

static void answer(struct rn_status *s, struct rn_http_pending *req);

static void
refresh(struct rn_status *s)
{
    struct cn_errmsg em = {{0}};
    struct held *h = cn_xcalloc(1, sizeof(*h)), *old = NULL;
    cn_err rv = read_data(s, &h->d, &em);
    struct parked *waiting;
    size_t n, i;

    cn_mutex_lock(&s->mtx);
    if (rv == CN_OK) {
        old = s->snap;
        h->refs = 1;
        s->snap = h;
        s->db_error[0] = '\0';
        h = NULL;
    } else {
        (void) snprintf(s->db_error, sizeof(s->db_error), "%s", em.text);
    }
    s->tried_ms = cn_mono_ms();
    waiting = s->parked.items;
    n = s->parked.len;
    s->parked.items = NULL;
    s->parked.len = s->parked.cap = 0;
    cn_mutex_unlock(&s->mtx);
    free(h); /* a failed read left nothing in it */
    held_release(s, old);
    for (i = 0; i < n; i++) {
        answer(s, waiting[i].req);
    }
    free(waiting);
}

static void
delete_row(struct rn_status *s)
{
    struct cn_errmsg em = {{0}};
    const char *params[1] = {s->id};

    if (ensure_conn(s, &em) != CN_OK ||
        rn_db_exec(s->conn, "DELETE FROM cairn.runners WHERE runner_id = $1::uuid", 1, params, NULL,
                   &em) != CN_OK) {
        cn_log(CN_LOG_WARN,
               "status: cannot delete this runner from cairn.runners: %s (readers "
               "take it for dead in %d s)",
               em.text, RN_STATUS_DEAD_S);
    }
}

static void *
db_main(void *arg)
{
    struct rn_status *s = arg;
    int64_t next_publish = 0;

    cn_mutex_lock(&s->mtx);
    while (!s->stopping) {
        /* The row first when it is due: a page kept open on a slow database must not starve
         * it (other runners take a row unseen for RN_STATUS_DEAD_S for a dead runner's). */
        if (cn_mono_ms() >= next_publish) {
            cn_mutex_unlock(&s->mtx);
            publish(s);
            cn_mutex_lock(&s->mtx);
            next_publish = cn_mono_ms() + RN_STATUS_PUBLISH_MS;
            continue;
        }
        if (s->refresh_wanted) {
            s->refresh_wanted = false;
            cn_mutex_unlock(&s->mtx);
            refresh(s);
            cn_mutex_lock(&s->mtx);
            continue;
        }
        cn_cond_wait_until(&s->work, &s->mtx, next_publish);
    }
    cn_mutex_unlock(&s->mtx);
    delete_row(s);
    return NULL;
}

/* ---- requests ------------------------------------------------------------------------------- */

/* Renders the page from the latest snapshot and the pool as it is now, and answers req. */
static void
answer(struct rn_status *s, struct rn_http_pending *req)
{
    struct rn_pool_snapshot ps;
    struct rn_status_view v;
    struct cn_buf b = CN_BUF_INIT;
    char error[sizeof(s->db_error)];
    struct held *h;

    cn_mutex_lock(&s->mtx);
    h = s->snap;
    if (h != NULL) {
        h->refs++;
    }
    memcpy(error, s->db_error, sizeof(error));
    cn_mutex_unlock(&s->mtx);
    rn_pool_snapshot(s->pool, &ps);
    memset(&v, 0, sizeof(v));
    v.data = h != NULL ? &h->d : NULL;
    v.db_error = error[0] != '\0' ? error : NULL;
    v.pool = &ps;
    v.runner_id = s->id;
    v.host = s->host;
    v.pid = s->pid;
    v.now_ms = cn_wall_ms();
    if (rn_status_render(&v, &b) != CN_OK) {
        static const char oom[] = "out of memory\n";
        rn_http_answer(req, 500, "text/plain", oom, sizeof(oom) - 1);
    } else {
        /* Without any data the page is still useful (this runner's workers), but it says by
         * its status that it is not the whole picture. */
        rn_http_answer(req, h != NULL ? 200 : 503, "text/html; charset=utf-8", b.data, b.len);
    }
    cn_buf_fini(&b);
    rn_pool_snapshot_fini(&ps);
    held_release(s, h);
}

void
rn_status_serve(struct rn_status *s, struct rn_http_pending *req)
{
    struct parked p = {req, cn_mono_ms() + RN_STATUS_WAIT_MS};
    bool now;

    cn_mutex_lock(&s->mtx);
    now = s->stopping || (s->tried_ms != 0 && cn_mono_ms() - s->tried_ms < RN_STATUS_FRESH_MS) ||
          s->parked.len >= RN_STATUS_MAX_PARKED;
    if (!now) {
        CN_VEC_XPUSH(&s->parked, p);
        s->refresh_wanted = true;
        cn_cond_signal(&s->work);
        if (s->parked.len == 1) {
            cn_cond_signal(&s->wake);
        }
    }
    cn_mutex_unlock(&s->mtx);
    if (now) {
        answer(s, req);
    }
}

/* Answers, from the old snapshot, the requests whose wait ran out while a refresh is still
 * running (a database that hangs). */
static void *
answer_main(void *arg)
{
    struct rn_status *s = arg;

    cn_mutex_lock(&s->mtx);
    while (!s->stopping) {
        int64_t now = cn_mono_ms(), first = INT64_MAX;
        struct rn_http_pending *due = NULL;
        size_t i;

        for (i = 0; i < s->parked.len; i++) {
            if (s->parked.items[i].until <= now) {
                due = s->parked.items[i].req;
                s->parked.items[i] = s->parked.items[--s->parked.len];
                break;
            }
            if (s->parked.items[i].until < first) {
                first = s->parked.items[i].until;
            }
        }
        if (due != NULL) {
            cn_mutex_unlock(&s->mtx);
            answer(s, due);
            cn_mutex_lock(&s->mtx);
        } else if (first == INT64_MAX) {
            cn_cond_wait(&s->wake, &s->mtx);
        } else {
            cn_cond_wait_until(&s->wake, &s->mtx, first);
        }
    }
    cn_mutex_unlock(&s->mtx);
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------- */

cn_err
rn_status_start(const struct rn_status_cfg *cfg, struct rn_status **out, struct cn_errmsg *err)
{
    struct rn_status *s = cn_xcalloc(1, sizeof(*s));
    cn_err rv;

    *out = NULL;
    s->url = cfg->database_url != NULL ? cn_xstrdup(cfg->database_url) : NULL;
    s->http =
        cfg->http_listen != NULL && *cfg->http_listen != '\0' ? cn_xstrdup(cfg->http_listen) : NULL;
    s->pool = cfg->pool;
    s->pid = (int64_t) getpid();
    if (gethostname(s->host, sizeof(s->host) - 1) != 0) {
        (void) snprintf(s->host, sizeof(s->host), "?");
    }
    cn_uuid_random(s->id);
    cn_mutex_init(&s->mtx);
    cn_cond_init(&s->work);
    cn_cond_init(&s->wake);
    if ((rv = cn_thread_start(&s->db_thread, "cairn-status-db", db_main, s, err)) != CN_OK ||
        (rv = cn_thread_start(&s->answer_thread, "cairn-status", answer_main, s, err)) != CN_OK) {
        rn_status_stop(s);
        return rv;
    }
    cn_log(CN_LOG_INFO, "status: this runner is %s in cairn.runners", s->id);
    *out = s;
    return CN_OK;
}

void
rn_status_stop(struct rn_status *s)
{
    size_t i;

    if (s == NULL) {
        return;
    }
    cn_mutex_lock(&s->mtx);
    s->stopping = true;
    cn_cond_broadcast(&s->work);
    cn_cond_broadcast(&s->wake);
    cn_mutex_unlock(&s->mtx);
    cn_thread_wait(&s->answer_thread);
    cn_thread_wait(&s->db_thread);
    /* Both threads are gone: what is still parked is answered here, from the last data. */
    for (i = 0; i < s->parked.len; i++) {
        answer(s, s->parked.items[i].req);
    }
    free(s->parked.items);
    held_release(s, s->snap); /* the last reference frees it, wherever that one is */
    s->snap = NULL;
    if (s->conn != NULL) {
        PQfinish(s->conn);
    }
    cn_cond_destroy(&s->work);
    cn_cond_destroy(&s->wake);
    cn_mutex_destroy(&s->mtx);
    free(s->url);
    free(s->http);
    free(s);
}
