/* SPDX-License-Identifier: MIT */
/*
 * The worker SDK's public API (include/cairn/worker.h): a worker's creation and its actions,
 * start() (the links opened, the threads started, the first welcome awaited), stop() (goodbye,
 * then the drain), the teardown after either (a failed start, a stop), what a handler calls
 * (cancelled, sleep, error values), and the error text and log lines that every SDK file
 * reports through. The design and the lock are in sdk_int.h.
 *
 * Threads: the caller's. start() and stop() wait on w->cond under w->mtx (the only lock) for
 * the control and slot threads; cairn_worker_sleep runs on a slot thread and waits on that
 * slot's own condition variable, under w->mtx too.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "worker-protocol/sdk_int.h"

static bool
sdk_name_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= WP_MAX_NAME && ir_utf8_valid(s, n, NULL);
}

/* Through the host process's log (ir/base/log.h): its level and format apply. A worker
 * serving several runners names the one concerned. */
void
wp_sdk_log(const struct sdk_link *l, enum cn_log_level level, const char *what, const char *detail)
{
    const struct cairn_worker *w = l->w;

    if (w->nlinks > 1) {
        cn_log(level, "worker %s (%s): %s%s%s", w->name, l->url, what, detail ? ": " : "",
               detail ? detail : "");
    } else {
        cn_log(level, "worker %s: %s%s%s", w->name, what, detail ? ": " : "", detail ? detail : "");
    }
}

/* Sets the text cairn_worker_error returns; with several runners it names the one. */
void
wp_sdk_errtext(struct sdk_link *l, const char *fmt, ...)
{
    struct cairn_worker *w = l->w;
    char text[256];
    va_list ap;

    va_start(ap, fmt);
    (void) vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    sdk_lock(w);
    if (w->nlinks > 1) {
        (void) snprintf(w->errtext, sizeof(w->errtext), "%s: %s", l->url, text);
    } else {
        (void) snprintf(w->errtext, sizeof(w->errtext), "%s", text);
    }
    sdk_unlock(w);
}

/* Sets the error text of a failure (start's callers read it) and logs it. */
cn_err
wp_sdk_fail(struct sdk_link *l, cn_err rv, const char *what, const char *detail)
{
    wp_sdk_errtext(l, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
    wp_sdk_log(l, CN_LOG_ERROR, what, detail);
    return rv;
}

static bool
sdk_url_ok(const char *url)
{
    return url != NULL && *url != '\0' && strlen(url) < 1024;
}

static struct sdk_link *
sdk_link_new(struct cairn_worker *w, const char *url)
{
    struct sdk_link *l = cn_xcalloc(1, sizeof(*l));

    l->w = w;
    l->url = cn_xstrdup(url);
    return l;
}

cn_err
cairn_worker_new(const char *url, const struct cairn_worker_options *opts,
                 struct cairn_worker **out)
{
    struct cairn_worker_options def;
    struct cairn_worker *w;
    char host[64], name[96];

    memset(&def, 0, sizeof(def));
    if (opts == NULL) {
        opts = &def;
    }
    if (!sdk_url_ok(url) || opts->slots > WP_MAX_SLOTS || opts->prefetch > WP_MAX_PREFETCH ||
        (opts->name != NULL && !sdk_name_ok(opts->name)) ||
        (opts->credential != NULL && !sdk_name_ok(opts->credential))) {
        return CN_INVAL;
    }
    w = cn_xcalloc(1, sizeof(*w));
    cn_mutex_init(&w->mtx);
    cn_cond_init(&w->cond);
    cn_cond_init(&w->work);
    if (opts->name == NULL) {
        if (gethostname(host, sizeof(host)) != 0) {
            (void) snprintf(host, sizeof(host), "worker");
        }
        host[sizeof(host) - 1] = '\0';
        (void) snprintf(name, sizeof(name), "%s-%ld", host, (long) getpid());
    }
    w->links[w->nlinks++] = sdk_link_new(w, url);
    w->name = cn_xstrdup(opts->name != NULL ? opts->name : name);
    w->credential = opts->credential != NULL ? cn_xstrdup(opts->credential) : NULL;
    w->tls_ca_file = opts->tls_ca_file != NULL ? cn_xstrdup(opts->tls_ca_file) : NULL;
    w->tls_cert_key_file =
        opts->tls_cert_key_file != NULL ? cn_xstrdup(opts->tls_cert_key_file) : NULL;
    w->tls_server_name = opts->tls_server_name != NULL ? cn_xstrdup(opts->tls_server_name) : NULL;
    w->nslots = opts->slots != 0 ? opts->slots : 1;
    w->prefetch = opts->prefetch;
    w->reconnect_min_ms = opts->reconnect_min_ms != 0 ? opts->reconnect_min_ms : 100;
    w->reconnect_max_ms = opts->reconnect_max_ms != 0 ? opts->reconnect_max_ms : 5000;
    if (w->reconnect_max_ms < w->reconnect_min_ms) {
        w->reconnect_max_ms = w->reconnect_min_ms;
    }
    w->start_timeout_ms = opts->start_timeout_ms;
    *out = w;
    return CN_OK;
}

cn_err
cairn_worker_add_url(struct cairn_worker *w, const char *url)
{
    uint32_t i;

    if (w->started || !sdk_url_ok(url) || w->nlinks >= SDK_MAX_LINKS) {
        return CN_INVAL;
    }
    for (i = 0; i < w->nlinks; i++) {
        if (strcmp(w->links[i]->url, url) == 0) {
            return CN_INVAL;
        }
    }
    w->links[w->nlinks++] = sdk_link_new(w, url);
    return CN_OK;
}

cn_err
cairn_worker_register(struct cairn_worker *w, const char *action, cairn_worker_handler fn,
                      void *arg)
{
    struct sdk_action *grown;
    uint32_t i;

    if (w->started || action == NULL || fn == NULL || !sdk_name_ok(action) ||
        w->nactions >= WP_MAX_ACTIONS) {
        return CN_INVAL;
    }
    for (i = 0; i < w->nactions; i++) {
        if (strcmp(w->actions[i].name, action) == 0) {
            return CN_INVAL;
        }
    }
    grown = cn_xreallocarray(w->actions, w->nactions + 1, sizeof(*grown));
    w->actions = grown;
    grown[w->nactions].name = cn_xstrdup(action);
    grown[w->nactions].fn = fn;
    grown[w->nactions].arg = arg;
    w->nactions++;
    return CN_OK;
}

/* Waits for every link's control thread to end; each ends once it sees w->stopping. */
static void
sdk_join_controls(struct cairn_worker *w)
{
    uint32_t k;

    for (k = 0; k < w->nlinks; k++) {
        cn_thread_wait(&w->links[k]->ctl_thread);
    }
}

/* Closes every socket (aborting every pending operation), ends and joins the threads, and
 * drops what is left (queued attempts, unsent outcomes). */
static void
sdk_teardown(struct cairn_worker *w)
{
    bool was_open[SDK_MAX_LINKS] = {false};
    uint32_t i, k;

    sdk_lock(w);
    w->stopping = true;
    w->slots_exit = true;
    wp_sdk_runq_clear_locked(w, NULL);
    cn_cond_broadcast(&w->work);
    for (k = 0; k < w->nlinks; k++) {
        struct sdk_link *l = w->links[k];

        was_open[k] = l->sock_open;
        l->sock_open = false; /* no new operation starts from here */
        wp_sdk_cancel_ops_locked(l);
    }
    sdk_broadcast(w);
    sdk_unlock(w);
    sdk_join_controls(w);
    for (k = 0; k < w->nlinks; k++) {
        sdk_lock(w);
        wp_sdk_fetches_idle_locked(w->links[k]);
        sdk_unlock(w);
        if (was_open[k]) {
            wp_sdk_link_close(w->links[k]);
        }
    }
    for (i = 0; w->slots != NULL && i < w->nslots; i++) {
        cn_thread_wait(&w->slots[i].thread);
        cn_cond_destroy(&w->slots[i].wake);
    }
    for (k = 0; k < w->nlinks; k++) {
        struct sdk_link *l = w->links[k];

        for (i = 0; i < SDK_FETCHES; i++) {
            if (l->fetch[i].aio != NULL) {
                nng_aio_free(l->fetch[i].aio); /* waits for a callback still running */
                l->fetch[i].aio = NULL;
            }
            l->fetch[i].st = FE_IDLE;
        }
        if (l->ctl_aio != NULL) {
            nng_aio_free(l->ctl_aio);
            l->ctl_aio = NULL;
        }
    }
    free(w->slots);
    sdk_lock(w);
    for (k = 0; k < w->nlinks; k++) {
        struct sdk_link *l = w->links[k];

        for (i = 0; i < l->nout; i++) {
            ir_val_release(l->outbox[i].o.value);
        }
        free(l->outbox);
        l->outbox = NULL;
        l->nout = l->capout = 0;
        l->failed = false;
    }
    w->slots = NULL;
    w->started = false;
    w->stopping = false;
    w->slots_exit = false;
    sdk_unlock(w);
}

cn_err
cairn_worker_start(struct cairn_worker *w)
{
    int64_t deadline;
    uint32_t i, k, welcomed, refused;
    struct cn_errmsg em;
    cn_err rv = CN_OK;

    sdk_lock(w);
    w->errtext[0] = '\0';
    sdk_unlock(w);
    if (w->started || w->nactions == 0) {
        return wp_sdk_fail(w->links[0], CN_INVAL, "cannot start",
                           w->started ? "already started" : "no actions");
    }
    w->started = true;
    w->slots = cn_xcalloc(w->nslots, sizeof(*w->slots));
    for (i = 0; i < w->nslots; i++) {
        cn_cond_init(&w->slots[i].wake);
        w->slots[i].w = w;
        atomic_init(&w->slots[i].cancelled, false);
    }
    for (k = 0; k < w->nlinks; k++) {
        if ((rv = wp_sdk_link_open(w->links[k])) != CN_OK) {
            goto fail;
        }
    }
    /* The control threads say hello; start() returns once any runner welcomed the worker (the
     * others are greeted as they come up), or fails when every one refused it. */
    for (k = 0; k < w->nlinks && rv == CN_OK; k++) {
        rv = cn_thread_start(&w->links[k]->ctl_thread, "cairn-wk-ctl", wp_sdk_ctl_main, w->links[k],
                             &em);
    }
    for (i = 0; i < w->nslots && rv == CN_OK; i++) {
        rv = cn_thread_start(&w->slots[i].thread, "cairn-wk-slot", wp_sdk_slot_main, &w->slots[i],
                             &em);
    }
    if (rv != CN_OK) {
        (void) wp_sdk_fail(w->links[0], rv, "cannot start", em.text);
        goto fail;
    }
    deadline = w->start_timeout_ms != 0 ? cn_mono_ms() + w->start_timeout_ms : INT64_MAX;
    sdk_lock(w);
    for (;;) {
        for (k = welcomed = refused = 0; k < w->nlinks; k++) {
            welcomed += w->links[k]->welcomes > 0;
            refused += w->links[k]->failed;
        }
        if (welcomed > 0 || refused == w->nlinks) {
            break;
        }
        if (deadline == INT64_MAX) {
            cn_cond_wait(&w->cond, &w->mtx);
        } else if (!sdk_wait_until(w, deadline)) {
            break;
        }
    }
    sdk_unlock(w);
    if (welcomed > 0) {
        sdk_lock(w);
        w->errtext[0] = '\0';
        sdk_unlock(w);
        return CN_OK;
    }
    if (refused == w->nlinks) {
        rv = CN_PROTO; /* the refusal's text is in errtext */
    } else {
        sdk_lock(w);
        if (w->nlinks > 1) {
            (void) snprintf(w->errtext, sizeof(w->errtext),
                            "no welcome from any of the %u runners (%s, ...) in time", w->nlinks,
                            w->links[0]->url);
        } else {
            (void) snprintf(w->errtext, sizeof(w->errtext),
                            "no welcome from the runner at %s in time", w->links[0]->url);
        }
        sdk_unlock(w);
        rv = CN_IO;
    }
fail:
    sdk_teardown(w);
    return rv;
}

/* Nothing left to run or report. A link disconnected has nowhere to send its outcomes. After
 * a runner's ack every request out to it is answered soon (it released them before the ack),
 * so waiting for those replies cannot hang and catches a dispatch still in transit. */
static bool
sdk_quiet_locked(struct cairn_worker *w)
{
    uint32_t i, k;

    if (w->rq_head != NULL || w->nrunning > 0) {
        return false;
    }
    for (k = 0; k < w->nlinks; k++) {
        const struct sdk_link *l = w->links[k];

        if (!l->sock_open || l->need_hello || l->failed) {
            continue;
        }
        if (l->nout > 0) {
            return false;
        }
        for (i = 0; i < SDK_FETCHES; i++) {
            if (l->fetch[i].st == FE_SEND || (l->acked && l->fetch[i].st == FE_RECV)) {
                return false;
            }
        }
    }
    return true;
}

void
cairn_worker_stop(struct cairn_worker *w, uint32_t grace_ms)
{
    int64_t deadline = cn_mono_ms() + grace_ms;
    bool connected[SDK_MAX_LINKS] = {false};
    uint64_t gen[SDK_MAX_LINKS] = {0};
    struct wp_msg m, r;
    nng_msg *msg;
    uint32_t i, k;

    if (w == NULL || !w->started) {
        return;
    }
    sdk_lock(w);
    w->stopping = true;
    sdk_broadcast(w);
    for (k = 0; k < w->nlinks; k++) {
        struct sdk_link *l = w->links[k];

        if (l->ctl_busy) {
            nng_aio_cancel(l->ctl_aio); /* the parked control request, to make room for goodbye */
        }
        connected[k] = !l->need_hello && !l->failed;
        gen[k] = l->gen;
        l->acked = false;
    }
    sdk_unlock(w);
    sdk_join_controls(w);
    /* Goodbye first, so the runners stop dispatching to us; then let what runs finish. */
    for (k = 0; k < w->nlinks; k++) {
        struct sdk_link *l = w->links[k];
        int64_t left = deadline - cn_mono_ms();

        if (!connected[k]) {
            continue;
        }
        nng_aio_set_timeout(l->ctl_aio, (nng_duration) (left > 1000 ? left : 1000));
        wp_msg_init(&m, WP_GOODBYE);
        if (wp_sdk_msg_new(&m, &msg) == CN_OK &&
            wp_sdk_op(l, l->ctl_ctx, l->ctl_aio, msg, gen[k], true, &l->ctl_busy) == 0 &&
            wp_sdk_recv(l, gen[k], true, &r) == 0) {
            sdk_lock(w);
            l->acked = r.kind == WP_ACK;
            sdk_unlock(w);
            wp_msg_fini(&r);
        }
    }
    sdk_lock(w);
    /* Queued and running attempts finish and their outcomes go out. */
    while (!sdk_quiet_locked(w) && sdk_wait_until(w, deadline)) {
    }
    if (!sdk_quiet_locked(w)) {
        for (i = 0; i < w->nslots; i++) {
            if (w->slots[i].running) {
                atomic_store_explicit(&w->slots[i].cancelled, true, memory_order_relaxed);
                cn_cond_signal(&w->slots[i].wake);
            }
        }
    }
    sdk_broadcast(w);
    sdk_unlock(w);
    sdk_teardown(w);
}

bool
cairn_worker_running(struct cairn_worker *w)
{
    bool on = false;
    uint32_t k;

    sdk_lock(w);
    for (k = 0; w->started && !w->stopping && k < w->nlinks; k++) {
        on = on || !w->links[k]->failed;
    }
    sdk_unlock(w);
    return on;
}

const char *
cairn_worker_error(struct cairn_worker *w)
{
    return w->errtext;
}

void
cairn_worker_free(struct cairn_worker *w)
{
    uint32_t i;

    if (w == NULL) {
        return;
    }
    cairn_worker_stop(w, 0);
    for (i = 0; i < w->nactions; i++) {
        free(w->actions[i].name);
    }
    for (i = 0; i < w->nlinks; i++) {
        free(w->links[i]->url);
        free(w->links[i]);
    }
    free(w->actions);
    free(w->name);
    free(w->credential);
    free(w->tls_ca_file);
    free(w->tls_cert_key_file);
    free(w->tls_server_name);
    cn_cond_destroy(&w->cond);
    cn_cond_destroy(&w->work);
    cn_mutex_destroy(&w->mtx);
    free(w);
}

bool
cairn_worker_sleep(const struct cairn_worker_ctx *ctx, uint32_t ms)
{
    struct sdk_slot *s = ctx->internal;
    int64_t until = cn_mono_ms() + ms;
    bool cancelled;

    if (s == NULL) {
        struct timespec ts = {(time_t) (ms / 1000), (long) (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        return true;
    }
    sdk_lock(s->w);
    while (!atomic_load_explicit(&s->cancelled, memory_order_relaxed) && cn_mono_ms() < until) {
        cn_cond_wait_until(&s->wake, &s->w->mtx, until);
    }
    cancelled = atomic_load_explicit(&s->cancelled, memory_order_relaxed);
    sdk_unlock(s->w);
    return !cancelled;
}

bool
cairn_worker_cancelled(const struct cairn_worker_ctx *ctx)
{
    const struct sdk_slot *s = ctx->internal;

    return s != NULL && atomic_load_explicit(&s->cancelled, memory_order_relaxed);
}

cn_err
cairn_worker_error_new(const char *type, const char *message, struct ir_val bases,
                       struct ir_val *out)
{
    return ir_error_new(type, message, bases, ir_null(), out);
}

cn_err
cairn_worker_error_final(struct ir_val *err)
{
    return ir_error_set_final(err);
}
