/* SPDX-License-Identifier: MIT */
/*
 * The status page's HTML (see status.h): one self-contained page, inline CSS, no script, no
 * external asset, reloaded by the browser every 5 s. Every text that comes from outside the
 * runner's own code (names, errors, hosts, addresses: registered workflows, workers' hellos,
 * database rows) goes through rn_html_escape; only this file's literals and numbers are written
 * as they are. Pure: no I/O, no clock (the view carries the time).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/xalloc.h"
#include "runner/ops/status.h"

cn_err
rn_html_escape(struct cn_buf *out, const char *s)
{
    const char *run = s;
    cn_err rv;

    for (; *s != '\0'; s++) {
        const char *ent;
        switch (*s) {
        case '&':
            ent = "&amp;";
            break;
        case '<':
            ent = "&lt;";
            break;
        case '>':
            ent = "&gt;";
            break;
        case '"':
            ent = "&quot;";
            break;
        case '\'':
            ent = "&#39;";
            break;
        default:
            continue;
        }
        if ((rv = cn_buf_append(out, run, (size_t) (s - run))) != CN_OK ||
            (rv = cn_buf_puts(out, ent)) != CN_OK) {
            return rv;
        }
        run = s + 1;
    }
    return cn_buf_append(out, run, (size_t) (s - run));
}

/* The page under construction: the first failure sticks and later writes do nothing. */
struct page {
    struct cn_buf *b;
    cn_err err;
};

static void
put(struct page *p, const char *s)
{
    if (p->err == CN_OK) {
        p->err = cn_buf_puts(p->b, s);
    }
}

/* Text from outside, escaped. */
static void
text(struct page *p, const char *s)
{
    if (p->err == CN_OK) {
        p->err = rn_html_escape(p->b, s != NULL ? s : "");
    }
}

/* Formats this file's own markup and numbers only: never text from outside (text() is for
 * that). */
static void putf(struct page *p, const char *fmt, ...) CN_PRINTF(2, 3);

static void
putf(struct page *p, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (p->err == CN_OK) {
        p->err = cn_buf_vprintf(p->b, fmt, ap);
    }
    va_end(ap);
}

static const char style[] =
    "<style>"
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}"
    "h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .4em}"
    ".sub{color:#666;margin-bottom:1em}"
    "table{border-collapse:collapse;background:#fff}"
    "th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}"
    "th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".banner{padding:.5em .8em;margin:.3em 0;border-radius:4px;border:1px solid}"
    ".stuck{background:#fdecea;border-color:#f5c2c0}.limit{background:#fff4e5;border-color:#ffd8a8}"
    ".stale{background:#eef2ff;border-color:#c7d2fe}.empty{color:#777;font-style:italic}"
    ".err{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-word}"
    "code{background:#f3f3f3;padding:0 .2em}"
    "</style>";

static void
fmt_utc(int64_t wall_ms, char out[32])
{
    time_t t = (time_t) (wall_ms / 1000);
    struct tm tm;

    if (gmtime_r(&t, &tm) == NULL || strftime(out, 32, "%Y-%m-%d %H:%M:%SZ", &tm) == 0) {
        (void) snprintf(out, 32, "?");
    }
}

static void
empty(struct page *p, const char *what)
{
    put(p, "<p class=\"empty\">");
    put(p, what);
    put(p, "</p>");
}

/* A section's title, then its table's head (`head`: the <th> cells) or, with no rows, the
 * sentence `none`. False when there are no rows: the caller writes no table. */
static bool
section(struct page *p, const char *title, size_t rows, const char *none, const char *head)
{
    put(p, "<h2>");
    put(p, title);
    put(p, "</h2>");
    if (rows == 0) {
        empty(p, none);
        return false;
    }
    put(p, "<table><tr>");
    put(p, head);
    put(p, "</tr>");
    return true;
}

/* A cell of text from outside, escaped. */
static void
cell(struct page *p, const char *s)
{
    put(p, "<td>");
    text(p, s);
    put(p, "</td>");
}

/* ---- banners ------------------------------------------------------------------------------ */

/* An action waiting on other runners of the fleet, with no worker anywhere. */
struct fleet_action {
    const char *name;
    int64_t waiting, runners;
    bool served;
};

static struct fleet_action *
fleet_find(struct fleet_action *fa, size_t n, const char *name)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strcmp(fa[i].name, name) == 0) {
            return &fa[i];
        }
    }
    return NULL;
}

static void
banners(struct page *p, const struct rn_status_view *v)
{
    const struct rn_status_data *d = v->data;
    struct fleet_action *fa;
    size_t i, k, n = 0, cap = 0;

    if (v->db_error != NULL) {
        put(p, "<div class=\"banner stale\">");
        if (d != NULL) {
            char at[32];
            fmt_utc(d->taken_ms, at);
            putf(p, "data as of %s (%lld s ago) ", at,
                 (long long) ((v->now_ms - d->taken_ms) / 1000));
        } else {
            put(p, "no data from the database yet ");
        }
        put(p, "(database unreachable: ");
        text(p, v->db_error);
        put(p, ")</div>");
    }
    /* This runner's pool: its attempts go only to its own workers. */
    for (i = 0; i < v->pool->nactions; i++) {
        const struct rn_pool_action_info *a = &v->pool->actions[i];
        if (a->workers == 0 && a->waiting > 0) {
            put(p, "<div class=\"banner stuck\">no connected worker serves <code>");
            text(p, a->name);
            putf(p, "</code>; %llu attempt%s waiting on this runner</div>",
                 (unsigned long long) a->waiting, a->waiting == 1 ? "" : "s");
        }
    }
    if (d == NULL) {
        return;
    }
    /* The fleet: this runner's row is left out (its pool, above, is newer); an action counts as
     * served when any live runner, this one included, has a worker for it. */
    for (i = 0; i < d->runners.len; i++) {
        cap += d->runners.items[i].nactions;
    }
    for (i = 0; i < v->pool->nactions; i++) {
        cap++;
    }
    fa = cn_xcalloc(cap + 1, sizeof(*fa));
    for (i = 0; i < v->pool->nactions; i++) {
        const struct rn_pool_action_info *a = &v->pool->actions[i];
        if (a->workers > 0) {
            fa[n].name = a->name;
            fa[n++].served = true;
        }
    }
    for (i = 0; i < d->runners.len; i++) {
        const struct rn_status_runner *r = &d->runners.items[i];
        bool self = strcmp(r->id, v->runner_id) == 0;
        for (k = 0; k < r->nactions; k++) {
            const struct rn_status_action *a = &r->actions[k];
            struct fleet_action *f = fleet_find(fa, n, a->name);
            if (f == NULL) {
                f = &fa[n++];
                f->name = a->name;
            }
            if (self) {
                continue;
            }
            if (a->workers > 0) {
                f->served = true;
            }
            if (a->waiting > 0) {
                f->waiting += a->waiting;
                f->runners++;
            }
        }
    }
    for (i = 0; i < n; i++) {
        if (!fa[i].served && fa[i].waiting > 0) {
            put(p, "<div class=\"banner stuck\">no connected worker serves <code>");
            text(p, fa[i].name);
            putf(p,
                 "</code> anywhere in the fleet; %lld attempt%s waiting on %lld other "
                 "runner%s</div>",
                 (long long) fa[i].waiting, fa[i].waiting == 1 ? "" : "s",
                 (long long) fa[i].runners, fa[i].runners == 1 ? "" : "s");
        }
    }
    free(fa);
    for (i = 0; i < d->limits.len; i++) {
        const struct rn_status_limit *l = &d->limits.items[i];
        put(p, "<div class=\"banner limit\">workflow <code>");
        text(p, l->workflow);
        putf(p, "</code> at its concurrency limit (%lld running, %lld waiting; limit %lld)</div>",
             (long long) l->running, (long long) l->waiting, (long long) l->max_running);
    }
}

/* ---- sections ----------------------------------------------------------------------------- */

static const char *const statuses[] = {"queued", "running",   "completed",
                                       "failed", "cancelled", "timed_out"};
#define NSTATUSES (sizeof(statuses) / sizeof(statuses[0]))

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *) a, *(const char *const *) b);
}

static void
add_counts(const struct rn_status_counts *c, const char **names, size_t *n,
           int64_t (*cells)[NSTATUSES], bool index_only)
{
    size_t i, k, w;

    for (i = 0; i < c->len; i++) {
        for (w = 0; w < *n; w++) {
            if (strcmp(names[w], c->items[i].workflow) == 0) {
                break;
            }
        }
        if (index_only) {
            if (w == *n) {
                names[(*n)++] = c->items[i].workflow;
            }
            continue;
        }
        for (k = 0; k < NSTATUSES; k++) {
            if (strcmp(statuses[k], c->items[i].status) == 0) {
                cells[w][k] += c->items[i].n;
            }
        }
    }
}

static void
instances(struct page *p, const struct rn_status_data *d)
{
    size_t cap = d->unfinished.len + d->finished.len, n = 0, w, k;
    const char **names = cn_xcalloc(cap + 1, sizeof(*names));
    int64_t(*cells)[NSTATUSES];
    int64_t total[NSTATUSES] = {0};

    put(p, "<h2>Instances</h2><p class=\"sub\">unfinished now; finished: created in the last "
           "24 h</p>");
    add_counts(&d->unfinished, names, &n, NULL, true);
    add_counts(&d->finished, names, &n, NULL, true);
    if (n == 0) {
        empty(p, "no unfinished instances, none finished in the last 24 h");
        free(names);
        return;
    }
    qsort(names, n, sizeof(*names), cmp_str);
    cells = cn_xcalloc(n, sizeof(*cells));
    add_counts(&d->unfinished, names, &n, cells, false);
    add_counts(&d->finished, names, &n, cells, false);
    put(p, "<table><tr><th>workflow</th>");
    for (k = 0; k < NSTATUSES; k++) {
        putf(p, "<th>%s</th>", statuses[k]);
    }
    put(p, "</tr>");
    for (w = 0; w < n; w++) {
        put(p, "<tr><td>");
        text(p, names[w]);
        put(p, "</td>");
        for (k = 0; k < NSTATUSES; k++) {
            putf(p, "<td class=\"n\">%lld</td>", (long long) cells[w][k]);
            total[k] += cells[w][k];
        }
        put(p, "</tr>");
    }
    put(p, "<tr><th>all</th>");
    for (k = 0; k < NSTATUSES; k++) {
        putf(p, "<th class=\"n\">%lld</th>", (long long) total[k]);
    }
    put(p, "</tr></table>");
    free(cells);
    free(names);
}

static void
failures(struct page *p, const struct rn_status_data *d)
{
    size_t i;

    if (!section(p, "Recent failures", d->failures.len, "no failed or timed-out instances",
                 "<th>ended</th><th>workflow</th><th>status</th><th>instance</th><th>error</th>")) {
        return;
    }
    for (i = 0; i < d->failures.len; i++) {
        const struct rn_status_failure *f = &d->failures.items[i];
        put(p, "<tr>");
        cell(p, f->at);
        cell(p, f->workflow);
        cell(p, f->status);
        put(p, "<td><code>");
        text(p, f->instance_id);
        put(p, "</code></td><td class=\"err\">");
        text(p, f->error);
        put(p, "</td></tr>");
    }
    put(p, "</table>");
}

/* Instances running their finally blocks after a cancel or a timeout, and how to stop that. */
static void
cleanups(struct page *p, const struct rn_status_data *d)
{
    size_t i;

    if (!section(p, "Cleaning up", d->cleanups.len,
                 "no instance is running its finally blocks after a cancel or a timeout",
                 "<th>workflow</th><th>instance</th><th>after a</th><th>abandoned at</th>"
                 "<th>abandon now with</th>")) {
        return;
    }
    for (i = 0; i < d->cleanups.len; i++) {
        const struct rn_status_cleanup *c = &d->cleanups.items[i];
        put(p, "<tr>");
        cell(p, c->workflow);
        put(p, "<td><code>");
        text(p, c->instance_id);
        put(p, "</code></td>");
        cell(p, c->after);
        cell(p, c->until);
        put(p, "<td><code>cairnctl cancel ");
        text(p, c->instance_id);
        put(p, " --force</code></td></tr>");
    }
    put(p, "</table>");
}

/* The first of a comma-separated list of names: the one a send names. */
static void
first_name(struct page *p, const char *names)
{
    char *one = cn_xstrndup(names, strcspn(names, ","));

    text(p, one);
    free(one);
}

/* "signal <code>approve, reject</code>" or "event <code>paid</code>", escaped. */
static void
waited_for(struct page *p, const char *kind, const char *names)
{
    text(p, kind);
    put(p, " <code>");
    text(p, names);
    put(p, "</code>");
}

/* What instances wait for outside themselves, grouped, then the oldest waits one by one with the
 * command that answers each (the wording of `cairnctl inspect`). */
static void
waits(struct page *p, const struct rn_status_data *d)
{
    size_t i;

    if (!section(p, "Waiting for signals and events", d->wait_groups.len,
                 "no instance waits for a signal or an event",
                 "<th>workflow</th><th>waits for</th><th>instances</th><th>oldest since</th>"
                 "<th>next timeout</th>")) {
        return;
    }
    for (i = 0; i < d->wait_groups.len; i++) {
        const struct rn_status_wait_group *g = &d->wait_groups.items[i];
        put(p, "<tr>");
        cell(p, g->workflow);
        put(p, "<td>");
        waited_for(p, g->kind, g->names);
        putf(p, "</td><td class=\"n\">%lld</td>", (long long) g->n);
        cell(p, g->oldest);
        cell(p, g->next_timeout[0] != '\0' ? g->next_timeout : "none");
        put(p, "</tr>");
    }
    put(p, "</table>");
    if (!section(p, "Oldest waits", d->waits.len, "no wait",
                 "<th>since</th><th>workflow</th><th>instance</th><th>waits for</th>"
                 "<th>times out at</th><th>buffered signals</th><th>answer with</th>")) {
        return;
    }
    for (i = 0; i < d->waits.len; i++) {
        const struct rn_status_wait *w = &d->waits.items[i];
        bool event = strcmp(w->kind, "event") == 0;

        put(p, "<tr>");
        cell(p, w->since);
        cell(p, w->workflow);
        put(p, "<td><code>");
        text(p, w->instance_id);
        put(p, "</code></td><td>");
        waited_for(p, w->kind, w->names);
        if (event) {
            put(p, " with key <code>");
            text(p, w->key);
            put(p, "</code>");
        }
        put(p, "</td>");
        cell(p, w->timeout_at[0] != '\0' ? w->timeout_at : "never");
        putf(p, "<td class=\"n\">%lld</td><td><code>", (long long) w->buffered);
        if (event) {
            put(p, "cairnctl event ");
            text(p, w->names);
            put(p, " ");
            text(p, w->key);
        } else {
            put(p, "cairnctl signal ");
            text(p, w->instance_id);
            put(p, " ");
            first_name(p, w->names);
        }
        put(p, " --payload JSON</code></td></tr>");
    }
    put(p, "</table>");
}

static void
schedules(struct page *p, const struct rn_status_data *d)
{
    size_t i;

    if (!section(p, "Schedules", d->schedules.len, "no schedules",
                 "<th>name</th><th>workflow</th><th>when</th><th>next slot</th><th>state</th>")) {
        return;
    }
    for (i = 0; i < d->schedules.len; i++) {
        const struct rn_status_schedule *s = &d->schedules.items[i];
        put(p, "<tr>");
        cell(p, s->name);
        cell(p, s->workflow);
        cell(p, s->spec);
        cell(p, s->next_at[0] != '\0' ? s->next_at : "(not computed yet)");
        put(p, "<td>");
        put(p, s->paused ? "paused" : "active");
        if (s->error[0] != '\0') {
            put(p, ": ");
            text(p, s->error);
        }
        put(p, "</td></tr>");
    }
    put(p, "</table>");
}

static void
fleet(struct page *p, const struct rn_status_view *v)
{
    const struct rn_status_data *d = v->data;
    size_t i, k;

    if (!section(p, "Runners", d->runners.len, "no live runner in cairn.runners",
                 "<th>runner</th><th>host</th><th>pid</th><th>HTTP</th><th>started</th>"
                 "<th>seen</th><th>workers</th><th>slots</th><th>busy</th>"
                 "<th>actions (workers, busy/slots, waiting)</th>")) {
        return;
    }
    for (i = 0; i < d->runners.len; i++) {
        const struct rn_status_runner *r = &d->runners.items[i];
        put(p, "<tr><td><code>");
        text(p, r->id);
        put(p, "</code>");
        if (strcmp(r->id, v->runner_id) == 0) {
            put(p, " (this one)");
        }
        put(p, "</td><td>");
        text(p, r->host);
        putf(p, "</td><td class=\"n\">%lld</td><td>", (long long) r->pid);
        text(p, r->http);
        put(p, "</td><td>");
        text(p, r->started_at);
        putf(p,
             "</td><td class=\"n\">%lld s ago</td><td class=\"n\">%lld</td>"
             "<td class=\"n\">%lld</td><td class=\"n\">%lld</td><td>",
             (long long) r->seen_ago_s, (long long) r->workers, (long long) r->slots,
             (long long) r->busy);
        for (k = 0; k < r->nactions; k++) {
            const struct rn_status_action *a = &r->actions[k];
            put(p, k > 0 ? "<br>" : "");
            put(p, "<code>");
            text(p, a->name);
            putf(p, "</code> %lld, %lld/%lld, %lld", (long long) a->workers, (long long) a->busy,
                 (long long) a->slots, (long long) a->waiting);
        }
        put(p, "</td></tr>");
    }
    put(p, "</table>");
}

static void
workers(struct page *p, const struct rn_status_view *v)
{
    const struct rn_pool_snapshot *ps = v->pool;
    size_t i, k;

    if (section(p, "Workers connected to this runner", ps->nworkers, "no worker connected",
                "<th>worker</th><th>address</th><th>actions</th><th>slots</th>"
                "<th>in flight</th><th>last heard</th>")) {
        for (i = 0; i < ps->nworkers; i++) {
            const struct rn_pool_worker_info *w = &ps->workers[i];
            put(p, "<tr><td>");
            text(p, w->name);
            if (w->leaving) {
                put(p, " (leaving)");
            }
            put(p, "</td><td>");
            text(p, w->peer);
            put(p, "</td><td>");
            for (k = 0; k < w->nactions; k++) {
                put(p, k > 0 ? " " : "");
                put(p, "<code>");
                text(p, w->actions[k]);
                put(p, "</code>");
            }
            putf(p, "</td><td class=\"n\">%u", w->slots);
            if (w->prefetch > 0) {
                putf(p, " (+%u prefetch)", w->prefetch);
            }
            putf(p, "</td><td class=\"n\">%u</td><td class=\"n\">%lld ms ago</td></tr>",
                 w->inflight, (long long) w->idle_ms);
        }
        put(p, "</table>");
    }
    if (!section(p, "Actions on this runner", ps->nactions, "no action served or waiting",
                 "<th>action</th><th>workers</th><th>slots</th><th>busy</th><th>waiting</th>")) {
        return;
    }
    for (i = 0; i < ps->nactions; i++) {
        const struct rn_pool_action_info *a = &ps->actions[i];
        put(p, "<tr><td><code>");
        text(p, a->name);
        putf(p,
             "</code></td><td class=\"n\">%u</td><td class=\"n\">%llu</td>"
             "<td class=\"n\">%llu</td><td class=\"n\">%llu</td></tr>",
             a->workers, (unsigned long long) a->slots, (unsigned long long) a->busy,
             (unsigned long long) a->waiting);
    }
    put(p, "</table>");
}

cn_err
rn_status_render(const struct rn_status_view *v, struct cn_buf *out)
{
    struct page p = {out, CN_OK};
    char now[32];

    fmt_utc(v->now_ms, now);
    put(&p, "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"refresh\" content=\"5\"><title>Cairn status</title>");
    put(&p, style);
    put(&p, "</head><body><h1>Cairn status</h1><p class=\"sub\">runner <code>");
    text(&p, v->runner_id);
    put(&p, "</code> on ");
    text(&p, v->host);
    putf(&p, ", pid %lld; %s; read-only, reloads every 5 s</p>", (long long) v->pid, now);
    banners(&p, v);
    if (v->data != NULL) {
        instances(&p, v->data);
        failures(&p, v->data);
        cleanups(&p, v->data);
        waits(&p, v->data);
        schedules(&p, v->data);
        fleet(&p, v);
    }
    workers(&p, v);
    put(&p, "</body></html>\n");
    return p.err;
}
