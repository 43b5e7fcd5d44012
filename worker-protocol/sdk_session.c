/* SPDX-License-Identifier: MIT */
/*
 * One runner's session for the worker SDK (sdk_int.h), on its control context and control
 * thread: `hello` (the first one too: start() waits for the first welcome of any link) and
 * again after each reconnect, then a `control` request kept parked for `cancel`s, with the
 * heartbeat that drops a connection whose runner has gone silent; and the end of a session.
 *
 * - Sessions: a link's `gen` counts its sessions lost. When one ends (its pipe removed, the
 *   heartbeat, a reply that did not decode) gen is bumped, need_hello set, that link's queued
 *   attempts dropped and its pending operations cancelled. Outcomes of an older generation are
 *   dropped (the runner failed them with WorkerLost). Other links go on.
 * - A reply to `control` that does not decode is logged and treated as a noop.
 * - A cancel is matched against that link's running and queued attempts, and remembered (a
 *   few, per session) for a dispatch still on its way: a cancelled attempt that has not
 *   started is not run at all.
 *
 * Threads: one control thread per link runs wp_sdk_ctl_main; the end of a session is also reached
 * from nng's threads (pipe and fetch callbacks). Lock: w->mtx only; the control aio is waited
 * for without it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "ir/base/clock.h"
#include "ir/base/sync.h"
#include "worker-protocol/sdk_int.h"

/* Receives a reply on l's control context and decodes it. An undecodable one is logged and
 * becomes a noop. */
int
wp_sdk_recv(struct sdk_link *l, uint64_t gen, bool allow_stopping, struct wp_msg *out)
{
    struct cn_errmsg em = {{0}};
    nng_msg *msg;
    int rv;

    wp_msg_init(out, WP_NOOP);
    if ((rv = wp_sdk_op(l, l->ctl_ctx, l->ctl_aio, NULL, gen, allow_stopping, &l->ctl_busy)) != 0) {
        return rv;
    }
    msg = nng_aio_get_msg(l->ctl_aio);
    nng_aio_set_msg(l->ctl_aio, NULL);
    sdk_lock(l->w);
    l->ctl_pipe = nng_msg_get_pipe(msg); /* the connection to drop if the runner goes silent */
    sdk_unlock(l->w);
    if (wp_msg_decode(nng_msg_body(msg), nng_msg_len(msg), out, &em) != CN_OK) {
        wp_sdk_log(l, CN_LOG_WARN, "undecodable reply, treated as noop", em.text);
        wp_msg_fini(out);
        wp_msg_init(out, WP_NOOP);
    }
    nng_msg_free(msg);
    return 0;
}

/* One hello/welcome exchange on l's control context. Returns CN_OK (session open for gen),
 * CN_PROTO (refused, or another reply), CN_IO (transport error, cancelled or timed out). */
static cn_err
sdk_hello(struct sdk_link *l, uint64_t gen)
{
    struct cairn_worker *w = l->w;
    const char **names = NULL;
    struct wp_msg m, r;
    nng_msg *msg = NULL;
    uint32_t i;
    cn_err rv;
    int nrv;

    names = calloc(w->nactions, sizeof(*names));
    if (names == NULL) {
        return CN_NOMEM;
    }
    for (i = 0; i < w->nactions; i++) {
        names[i] = w->actions[i].name;
    }
    wp_msg_init(&m, WP_HELLO);
    m.worker = w->name;
    m.sdk = SDK_NAME;
    m.credential = w->credential;
    m.actions = names;
    m.nactions = w->nactions;
    m.slots = w->nslots;
    m.prefetch = w->prefetch;
    rv = wp_sdk_msg_new(&m, &msg);
    free(names);
    if (rv != CN_OK) {
        return wp_sdk_fail(l, rv, "cannot encode hello", cn_strerror(rv));
    }
    if ((nrv = wp_sdk_op(l, l->ctl_ctx, l->ctl_aio, msg, gen, false, &l->ctl_busy)) != 0 ||
        (nrv = wp_sdk_recv(l, gen, false, &r)) != 0) {
        /* not logged: the control thread retries, and start() says what it waited for */
        wp_sdk_errtext(l, "hello not answered: %s", nng_strerror(nrv));
        return CN_IO;
    }
    switch (r.kind) {
    case WP_WELCOME:
        sdk_lock(w);
        l->idle_ms = r.idle_ms;
        l->session_pipe = l->ctl_pipe;
        sdk_unlock(w);
        rv = CN_OK;
        break;
    case WP_REFUSED:
        wp_sdk_errtext(l, "refused: %s", r.reason);
        wp_sdk_log(l, CN_LOG_ERROR, "refused", r.reason);
        rv = CN_PROTO;
        break;
    case WP_NOOP:
        rv = CN_IO; /* retried by the caller */
        break;
    default:
        rv = wp_sdk_fail(l, CN_PROTO, "unexpected reply to hello", wp_kind_name(r.kind));
        break;
    }
    wp_msg_fini(&r);
    return rv;
}

/* l's session is over: what it dispatched is dropped (the runner fails it with WorkerLost),
 * nothing is sent to it until the next welcome, and the other runners get the room. */
void
wp_sdk_session_lost_locked(struct sdk_link *l)
{
    l->gen++;
    l->need_hello = true;
    l->ncancels = 0;
    wp_sdk_runq_clear_locked(l->w, l);
    wp_sdk_cancel_ops_locked(l);
    if (!l->w->stopping) {
        wp_sdk_pump_others_locked(l->w, l);
    }
    sdk_broadcast(l->w);
}

/* An attempt of l's session can no longer be reported (a dispatch that did not decode): end
 * the session and say hello again on the same connection. The runner treats a hello on a
 * connection that has a session as a new session and fails what the old one held with
 * WorkerLost, freeing its room, instead of keeping that room taken for good. (Closing the
 * pipe would do the same, but nng 1.5.2 can hang in a later nng_close after nng_pipe_close.) */
void
wp_sdk_drop_locked(struct sdk_link *l, const char *why)
{
    if (l->sock_open && !l->need_hello) {
        wp_sdk_log(l, CN_LOG_WARN, "starting a new session", why);
        wp_sdk_session_lost_locked(l);
        /* A runner that garbles every session would otherwise be asked a thousand times a
         * second; back off as a reconnect does. A reply that decodes resets it. */
        l->hello_delay_ms = l->hello_delay_ms == 0 ? l->w->reconnect_min_ms
                            : l->hello_delay_ms >= l->w->reconnect_max_ms / 2
                                ? l->w->reconnect_max_ms
                                : 2 * l->hello_delay_ms;
    }
}

/* Marks the attempt of l matching a `cancel`: running, queued, or (remembered) still on its
 * way. */
static void
sdk_cancel_attempt(struct sdk_link *l, const struct wp_msg *c)
{
    struct cairn_worker *w = l->w;
    struct sdk_item *it;
    uint32_t i;
    bool found = false;

    sdk_lock(w);
    for (i = 0; i < w->nslots; i++) {
        struct sdk_slot *s = &w->slots[i];

        if (s->running && s->link == l && memcmp(s->exec_id, c->exec_id, 16) == 0 &&
            s->attempt == c->attempt && s->token == c->token) {
            /* relaxed: a flag the handler polls, no data published with it */
            atomic_store_explicit(&s->cancelled, true, memory_order_relaxed);
            cn_cond_signal(&s->wake);
            found = true;
        }
    }
    for (it = w->rq_head; it != NULL; it = it->next) {
        if (it->link == l && it->d.token == c->token && it->d.attempt == c->attempt &&
            memcmp(it->d.exec_id, c->exec_id, 16) == 0) {
            it->cancelled = true;
            found = true;
        }
    }
    if (!found) {
        struct sdk_cancel *r = &l->cancels[l->ncancels++ % SDK_CANCEL_MEMORY];
        memcpy(r->exec_id, c->exec_id, 16);
        r->attempt = c->attempt;
        r->token = c->token;
    }
    sdk_unlock(w);
}

/* Says hello on l for session gen, after the back-off a garbled session left. A welcome opens
 * the session; a refusal ends serving this runner; anything else is tried again after the
 * shortest reconnect delay. */
static void
sdk_session_open(struct sdk_link *l, uint64_t gen)
{
    struct cairn_worker *w = l->w;
    cn_err rv;

    sdk_lock(w);
    if (l->hello_delay_ms != 0) {
        int64_t until = cn_mono_ms() + l->hello_delay_ms;

        while (!w->stopping && sdk_wait_until(w, until)) {
        }
    }
    sdk_unlock(w);
    rv = sdk_hello(l, gen);
    sdk_lock(w);
    if (rv == CN_OK && l->gen == gen) {
        l->need_hello = false;
        l->welcomes++;
        wp_sdk_pump_locked(l); /* ask for work in the new session */
    } else if (rv == CN_PROTO) {
        l->failed = true; /* refused: this runner is not served; running() tells */
    } else if (rv != CN_OK && !w->stopping) {
        (void) sdk_wait_until(w, cn_mono_ms() + w->reconnect_min_ms);
    }
    sdk_broadcast(w);
    sdk_unlock(w);
}

/* One `control` request parked at l's runner for session gen, and what its reply says.
 * Returns false when the control thread is to end (the socket closed, or no message). */
static bool
sdk_control_round(struct sdk_link *l, uint64_t gen)
{
    struct cairn_worker *w = l->w;
    nng_duration silence;
    struct wp_msg m, r;
    nng_msg *msg;
    cn_err rv;
    int nrv;

    wp_msg_init(&m, WP_CONTROL);
    if ((rv = wp_sdk_msg_new(&m, &msg)) != CN_OK) {
        wp_sdk_log(l, CN_LOG_ERROR, "cannot build control", cn_strerror(rv));
        return false;
    }
    /* Heartbeat, the runner's rule mirrored: it answers a parked request within idle_ms,
     * so three idle periods (plus a second) of silence mean it is gone while the
     * connection looks open (its host vanished). Drop the connection: the dialer makes a
     * new one and the next session starts with a hello. */
    sdk_lock(w);
    silence = NNG_DURATION_INFINITE;
    if (l->idle_ms != 0) {
        int64_t ms = 3 * (int64_t) l->idle_ms + 1000;
        silence = (nng_duration) (ms < INT32_MAX ? ms : INT32_MAX);
    }
    sdk_unlock(w);
    nng_aio_set_timeout(l->ctl_aio, silence);
    nrv = wp_sdk_op(l, l->ctl_ctx, l->ctl_aio, msg, gen, false, &l->ctl_busy);
    if (nrv == 0) {
        nrv = wp_sdk_recv(l, gen, false, &r);
    }
    nng_aio_set_timeout(l->ctl_aio, NNG_DURATION_INFINITE);
    if (nrv == NNG_ECLOSED) {
        return false;
    }
    if (nrv == NNG_ETIMEDOUT) {
        nng_pipe pp;

        wp_sdk_log(l, CN_LOG_WARN, "runner silent for three idle periods: reconnecting", NULL);
        sdk_lock(w);
        pp = l->session_pipe;
        wp_sdk_session_lost_locked(l);
        wp_sdk_fetches_idle_locked(l);
        sdk_unlock(w);
        (void) nng_pipe_close(pp);
        return true;
    }
    if (nrv != 0) {
        return true;
    }
    if (r.kind == WP_CANCEL) {
        sdk_cancel_attempt(l, &r);
    } else if (r.kind != WP_NOOP && r.kind != WP_ACK) {
        wp_sdk_log(l, CN_LOG_WARN, "unexpected reply to control, treated as noop",
                   wp_kind_name(r.kind));
    }
    wp_msg_fini(&r);
    return true;
}

/* A link's control thread: a session opened whenever there is none, a control request parked
 * while there is, until stop() or a refusal. */
void *
wp_sdk_ctl_main(void *arg)
{
    struct sdk_link *l = arg;
    struct cairn_worker *w = l->w;
    bool hello, done;
    uint64_t gen;

    for (;;) {
        sdk_lock(w);
        done = w->stopping || l->failed;
        hello = l->need_hello;
        gen = l->gen;
        sdk_unlock(w);
        if (done) {
            break;
        }
        if (hello) {
            sdk_session_open(l, gen);
        } else if (!sdk_control_round(l, gen)) {
            break;
        }
    }
    return NULL;
}
