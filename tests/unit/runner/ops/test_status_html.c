/* SPDX-License-Identifier: MIT */
/* The status page's HTML from hand-built snapshots: escaping of everything that comes from
 * outside, the banners for what is stuck, the empty states, and the page without data. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/base/xalloc.h"
#include "runner/ops/status.h"

#define SELF "11111111-1111-4111-8111-111111111111"
#define NOW  1767225600000LL /* 2026-01-01 00:00:00Z */

static char *
escaped(const char *s)
{
    struct cn_buf b = CN_BUF_INIT;

    cr_assert_eq(rn_html_escape(&b, s), CN_OK);
    if (b.data == NULL) {
        return cn_xstrdup("");
    }
    return b.data;
}

static char *
render(const struct rn_status_data *d, const struct rn_pool_snapshot *ps, const char *db_error)
{
    struct rn_status_view v;
    struct cn_buf b = CN_BUF_INIT;

    memset(&v, 0, sizeof(v));
    v.data = d;
    v.db_error = db_error;
    v.pool = ps;
    v.runner_id = SELF;
    v.host = "host<1>";
    v.pid = 42;
    v.now_ms = NOW;
    cr_assert_eq(rn_status_render(&v, &b), CN_OK);
    return b.data;
}

/* No "<script" anywhere: every outside text was escaped. */
static void
assert_no_script(const char *html)
{
    cr_assert_null(strstr(html, "<script"), "unescaped text in:\n%s", html);
    cr_assert_null(strstr(html, "<b>"), "unescaped text in:\n%s", html);
}

Test(status_html, escape)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"<script>alert('x')</script> & \"q\"",
         "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"},
        {"", ""},
        {"plain text, ünïcode", "plain text, ünïcode"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *e = escaped(cases[i].in);

        cr_assert_str_eq(e, cases[i].want, "escaping \"%s\"", cases[i].in);
        free(e);
    }
}

/* A snapshot with one of everything; every outside text holds markup. */
Test(status_html, everything_escaped_and_shown)
{
    struct rn_status_count unf[] = {{"wf<script>", "running", 3}, {"wf<script>", "queued", 2}};
    struct rn_status_count fin[] = {{"wf<script>", "completed", 7}, {"other", "failed", 1}};
    struct rn_status_failure fl[] = {{"22222222-2222-4222-8222-222222222222", "other", "failed",
                                      "ValueError: <script>alert(1)</script>",
                                      "2025-12-31 23:59:00Z"}};
    struct rn_status_schedule sc[] = {
        {"nightly<b>", "wf<script>", "cron 0 3 * * * (UTC)", "2026-01-01 03:00:00Z", "", false},
        {"broken", "other", "cron 0 0 31 2 *", "", "its <b>expression</b> has no more slots",
         true}};
    struct rn_status_action self_actions[] = {{"billing.charge", 0, 0, 0, 12}};
    struct rn_status_action other_actions[] = {{"std.sleep", 1, 8, 3, 0},
                                               {"mail.send<script>", 0, 0, 0, 4}};
    struct rn_status_runner rn[] = {{SELF, "host<1>", "127.0.0.1:9102", "2025-12-31 20:00:00Z", 42,
                                     1, 0, 0, 0, self_actions, 1},
                                    {"33333333-3333-4333-8333-333333333333", "other<b>", "",
                                     "2025-12-31 21:00:00Z", 7, 3, 1, 8, 3, other_actions, 2}};
    struct rn_status_limit lim[] = {{"wf<script>", 2, 2, 5}};
    struct rn_status_wait_group wg[] = {
        {"wf<script>", "signal", "approve, reject<b>", "2025-12-31 22:00:00Z", "", 3},
        {"other", "event", "order_paid", "2025-12-31 23:00:00Z", "2026-01-02 00:00:00Z", 1}};
    struct rn_status_wait wt[] = {{"44444444-4444-4444-8444-444444444444", "wf<script>", "signal",
                                   "approve, reject<b>", "", "2025-12-31 22:00:00Z", "", 2},
                                  {"55555555-5555-4555-8555-555555555555", "other", "event",
                                   "order_paid", "k<script>", "2025-12-31 23:00:00Z",
                                   "2026-01-02 00:00:00Z", 0}};
    char *act_w[] = {"std.sleep", "std.<script>"};
    struct rn_pool_worker_info w[] = {
        {"worker<script>", "ipc, pid 9", act_w, 2, 4, 1, 3, false, 120}};
    struct rn_pool_action_info pa[] = {{"billing.charge", 0, 0, 0, 12}, {"std.sleep", 1, 4, 3, 0}};
    struct rn_status_data d = {.taken_ms = NOW - 1000,
                               .unfinished = {.items = unf, .len = 2},
                               .finished = {.items = fin, .len = 2},
                               .failures = {.items = fl, .len = 1},
                               .schedules = {.items = sc, .len = 2},
                               .runners = {.items = rn, .len = 2},
                               .limits = {.items = lim, .len = 1},
                               .wait_groups = {.items = wg, .len = 2},
                               .waits = {.items = wt, .len = 2}};
    struct rn_pool_snapshot ps = {
        .workers = w, .nworkers = 1, .actions = pa, .nactions = 2, .queued = 12};
    char *html;

    html = render(&d, &ps, NULL);
    assert_no_script(html);
    cr_assert(strstr(html, "<meta http-equiv=\"refresh\" content=\"5\">") != NULL);
    /* instances: the pivot by workflow, escaped */
    cr_assert(strstr(html, "<td>wf&lt;script&gt;</td><td class=\"n\">2</td>"
                           "<td class=\"n\">3</td><td class=\"n\">7</td>") != NULL,
              "%s", html);
    /* failures: the error escaped */
    cr_assert(strstr(html, "ValueError: &lt;script&gt;alert(1)&lt;/script&gt;") != NULL);
    /* schedules, with the paused one's reason escaped */
    cr_assert(strstr(html, "nightly&lt;b&gt;") != NULL);
    cr_assert(strstr(html, "paused: its &lt;b&gt;expression&lt;/b&gt; has no more slots") != NULL);
    cr_assert(strstr(html, "(not computed yet)") != NULL);
    /* banners: this runner's pool, the fleet (other runners only), the limit */
    cr_assert(strstr(html, "no connected worker serves <code>billing.charge</code>; 12 attempts "
                           "waiting on this runner") != NULL,
              "%s", html);
    cr_assert(strstr(html, "no connected worker serves <code>mail.send&lt;script&gt;</code> "
                           "anywhere in the fleet; 4 attempts waiting on 1 other runner") != NULL,
              "%s", html);
    cr_assert_null(strstr(html, "<code>std.sleep</code> anywhere"));
    cr_assert(strstr(html, "workflow <code>wf&lt;script&gt;</code> at its concurrency limit (2 "
                           "running, 5 waiting; limit 2)") != NULL);
    /* the fleet table marks this runner; the workers table escapes the worker's texts */
    cr_assert(strstr(html, SELF "</code> (this one)") != NULL);
    cr_assert(strstr(html, "other&lt;b&gt;") != NULL);
    cr_assert(strstr(html, "worker&lt;script&gt;") != NULL);
    cr_assert(strstr(html, "<code>std.&lt;script&gt;</code>") != NULL);
    cr_assert(strstr(html, "4 (+1 prefetch)") != NULL);
    /* waits: grouped by workflow and names, then the oldest with the command that answers */
    cr_assert(strstr(html, "<td>wf&lt;script&gt;</td><td>signal <code>approve, reject&lt;b&gt;"
                           "</code></td><td class=\"n\">3</td><td>2025-12-31 22:00:00Z</td>"
                           "<td>none</td>") != NULL,
              "%s", html);
    cr_assert(strstr(html, "<td>event <code>order_paid</code></td><td class=\"n\">1</td>") != NULL);
    cr_assert(strstr(html,
                     "<td>never</td><td class=\"n\">2</td><td><code>cairnctl signal "
                     "44444444-4444-4444-8444-444444444444 approve --payload JSON</code>") != NULL,
              "%s", html);
    cr_assert(strstr(html, "event <code>order_paid</code> with key <code>k&lt;script&gt;</code>"
                           "</td><td>2026-01-02 00:00:00Z</td>") != NULL,
              "%s", html);
    cr_assert(strstr(html, "cairnctl event order_paid k&lt;script&gt; --payload JSON") != NULL);
    cr_assert_null(strstr(html, "database unreachable"));
    free(html);
}

Test(status_html, empty_states)
{
    struct rn_status_data d;
    struct rn_pool_snapshot ps;
    char *html;

    memset(&d, 0, sizeof(d));
    d.taken_ms = NOW;
    memset(&ps, 0, sizeof(ps));
    html = render(&d, &ps, NULL);
    cr_assert(strstr(html, "no unfinished instances, none finished in the last 24 h") != NULL);
    cr_assert(strstr(html, "no failed or timed-out instances") != NULL);
    cr_assert(strstr(html, "no schedules") != NULL);
    cr_assert(strstr(html, "no instance waits for a signal or an event") != NULL);
    cr_assert_null(strstr(html, "Oldest waits"));
    cr_assert(strstr(html, "no live runner in cairn.runners") != NULL);
    cr_assert(strstr(html, "no worker connected") != NULL);
    cr_assert(strstr(html, "no action served or waiting") != NULL);
    cr_assert_null(strstr(html, "class=\"banner"));
    cr_assert(strstr(html, "host&lt;1&gt;, pid 42") != NULL);
    free(html);
}

/* The database went away after one good read: the old data, said to be old, and why. */
Test(status_html, stale_data_banner)
{
    struct rn_status_data d;
    struct rn_pool_snapshot ps;
    char *html;

    memset(&d, 0, sizeof(d));
    d.taken_ms = NOW - 30000;
    memset(&ps, 0, sizeof(ps));
    html = render(&d, &ps, "connection to server <refused>");
    cr_assert(strstr(html, "data as of 2025-12-31 23:59:30Z (30 s ago) (database unreachable: "
                           "connection to server &lt;refused&gt;)") != NULL,
              "%s", html);
    free(html);
}

/* Never read: no database sections, but this runner's own workers and banners. */
Test(status_html, no_data_yet)
{
    struct rn_pool_snapshot ps;
    struct rn_pool_action_info pa[] = {{"billing.charge", 0, 0, 0, 1}};
    char *html;

    memset(&ps, 0, sizeof(ps));
    ps.actions = pa;
    ps.nactions = 1;
    html = render(NULL, &ps, "no database: set CAIRN_DATABASE_URL");
    cr_assert(strstr(html, "no data from the database yet (database unreachable: no database") !=
              NULL);
    cr_assert(strstr(html, "<code>billing.charge</code>; 1 attempt waiting on this runner") !=
              NULL);
    cr_assert_null(strstr(html, "<h2>Instances"));
    cr_assert(strstr(html, "<h2>Workers connected to this runner</h2>") != NULL);
    free(html);
}
