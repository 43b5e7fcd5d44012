/* SPDX-License-Identifier: MIT */
/*
 * The status page and the fleet table. It owns:
 *   - this runner's row in cairn.runners (sql/0014_runners.sql): inserted at start, refreshed
 *     every RN_STATUS_PUBLISH_MS with the pool's figures (one statement, which also deletes the
 *     rows of runners dead for RN_STATUS_DEAD_S), deleted at stop;
 *   - the data of the read-only status page served at / and /status (docs/operations.md
 *     "Status page"): read from the database on demand, into a snapshot that requests render
 *     (status_html.c) together with the pool's own snapshot, taken when the page is rendered.
 *
 * Nobody looking costs nothing: the page's queries run only when a request finds the snapshot
 * older than RN_STATUS_FRESH_MS. Such a request is parked (never blocking nng's thread, which
 * the worker pool shares) and answered once the refresh is done, or after RN_STATUS_WAIT_MS
 * from the old snapshot, whichever comes first; a refresh that fails keeps the last snapshot,
 * shown with the error.
 *
 * Threads: two of its own. The database thread, with its own connection (used by it alone),
 * publishes the row and refreshes the snapshot; it may block on the database. The answer thread
 * answers parked requests whose wait ran out, so a database that hangs cannot hold a request
 * longer than RN_STATUS_WAIT_MS. rn_status_serve runs on the HTTP listener's thread and takes only
 * the module's mutex, briefly. One mutex guards the snapshot, the parked requests and the flags; it
 * is a leaf (nothing else is taken under it, the pool's snapshot and rendering happen outside
 * it).
 */
#ifndef RUNNER_STATUS_H
#define RUNNER_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"
#include "runner/ops/http.h"
#include "runner/pool/pool.h"

#define RN_STATUS_PUBLISH_MS 5000 /* how often a runner refreshes its row */
#define RN_STATUS_DEAD_S     60   /* a row not refreshed for this long is a dead runner's */
#define RN_STATUS_FRESH_MS   2000 /* a snapshot this young is served as it is */
#define RN_STATUS_WAIT_MS    2000 /* longest a request waits for a refresh */
#define RN_STATUS_MAX_PARKED 64   /* past this many waiting, answered at once, old data */

/* ---- the page's data (read by the database thread, rendered by status_html.c) ------------- */

struct rn_status_count { /* instances of a workflow in a status */
    char *workflow, *status;
    int64_t n;
};

struct rn_status_counts {
    struct rn_status_count *items;
    size_t len, cap;
};

struct rn_status_failure { /* one failed or timed-out instance */
    char *instance_id, *workflow, *status, *error, *at;
};

struct rn_status_schedule {
    char *name, *workflow, *spec, *next_at, *error; /* spec: "cron ... (zone)" or "every ..." */
    bool paused;
};

struct rn_status_action { /* one entry of cairn.runners.actions */
    char *name;
    int64_t workers, slots, busy, waiting;
};

struct rn_status_runner { /* a live row of cairn.runners */
    char *id, *host, *http, *started_at;
    int64_t pid, seen_ago_s, workers, slots, busy;
    struct rn_status_action *actions;
    size_t nactions;
};

struct rn_status_limit { /* a workflow at its concurrency limit (cairn.limit_status) */
    char *workflow;
    int64_t max_running, running, waiting;
};

struct rn_status_wait_group {      /* the waits of one workflow for one set of names */
    char *workflow, *kind, *names; /* kind "signal" or "event"; names comma-separated */
    char *oldest, *next_timeout;   /* UTC text; next_timeout "": none of them times out */
    int64_t n;
};

struct rn_status_wait { /* one registered wait (cairn.instance_waits) */
    char *instance_id, *workflow, *kind, *names, *key, *since, *timeout_at; /* "": no key/none */
    int64_t buffered; /* the instance's unconsumed signals */
};

struct rn_status_cleanup { /* an instance running its finally blocks after a cancel or timeout */
    char *instance_id, *workflow, *after, *until; /* after: "cancel" or "timeout"; until: UTC */
};

struct rn_status_data {
    int64_t taken_ms;                   /* wall clock of the refresh that read it */
    struct rn_status_counts unfinished; /* queued and running */
    struct rn_status_counts finished;   /* created in the last 24 h and finished */
    struct {
        struct rn_status_failure *items;
        size_t len, cap;
    } failures; /* newest first, at most 20 */
    struct {
        struct rn_status_schedule *items;
        size_t len, cap;
    } schedules;
    struct {
        struct rn_status_runner *items;
        size_t len, cap;
    } runners;
    struct {
        struct rn_status_limit *items;
        size_t len, cap;
    } limits;
    struct {
        struct rn_status_wait_group *items;
        size_t len, cap;
    } wait_groups; /* largest first, at most 200 */
    struct {
        struct rn_status_wait *items;
        size_t len, cap;
    } waits; /* oldest first, at most 20 */
    struct {
        struct rn_status_cleanup *items;
        size_t len, cap;
    } cleanups; /* soonest abandoned first, at most 20 */
};

void rn_status_data_fini(struct rn_status_data *d);

/* What one rendering of the page shows. */
struct rn_status_view {
    const struct rn_status_data *data;   /* NULL: nothing read from the database yet */
    const char *db_error;                /* why the latest refresh failed; NULL: it did not */
    const struct rn_pool_snapshot *pool; /* this runner's workers and attempts */
    const char *runner_id, *host;        /* this runner */
    int64_t pid;
    int64_t now_ms; /* wall clock */
};

/* Appends the page (HTML; every text that comes from the database or a worker escaped).
 * CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err rn_status_render(const struct rn_status_view *v, struct cn_buf *out);

/* Appends s with &, <, >, " and ' as character references: safe in element text and in quoted
 * attribute values. CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err rn_html_escape(struct cn_buf *out, const char *s);

/* ---- the module ----------------------------------------------------------------------------- */

struct rn_status_cfg {
    const char *database_url; /* NULL: CAIRN_DATABASE_URL */
    struct rn_pool *pool;
    const char *http_listen; /* published in the row; NULL: none */
};

struct rn_status;

/* Starts both threads (the database thread connects, and retries, on its own). CN_OK, or
 * CN_NOMEM when a thread cannot start. */
CN_MUST_CHECK cn_err rn_status_start(const struct rn_status_cfg *cfg, struct rn_status **out,
                                     struct cn_errmsg *err);

/* Answers a request for the page now or later (status.h above), from any thread; never blocks
 * beyond the module's mutex. */
void rn_status_serve(struct rn_status *s, struct rn_http_pending *req);

/* Answers what is parked, stops both threads, deletes this runner's row (a graceful stop: other
 * readers see it gone at once) and frees. The pool must outlive it. NULL: no-op. */
void rn_status_stop(struct rn_status *s);

#endif
