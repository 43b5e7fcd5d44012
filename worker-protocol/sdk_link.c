/* SPDX-License-Identifier: MIT */
/*
 * One runner's transport for the worker SDK (sdk_int.h): its REQ socket, dialer and TLS
 * options, the pipe events that end a session, a request on a context waited for (the control
 * context's hello, control and goodbye), and the close.
 *
 * - REQ re-sends are off (NNG_OPT_REQ_RESENDTIME infinite): a parked `ready` may wait long.
 * - A pipe removal (nng callback, never blocks) ends the session whose welcome came on it
 *   (sdk_session.c), so that nothing is left for nng's REQ to re-send on the next pipe before
 *   the new `hello`.
 * - A waited request's aio is interrupted by another thread with nng_aio_cancel, race-free
 *   because an operation is started only under w->mtx after checking the flags that the
 *   interrupting thread sets under w->mtx.
 *
 * Threads: the control thread and stop() start waited requests; nng's threads run the pipe
 * callbacks; start() and the teardown open and close. Lock: w->mtx only.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "ir/base/buf.h"
#include "ir/base/clock.h"
#include "worker-protocol/nngclose.h"
#include "worker-protocol/sdk_int.h"

static cn_err
sdk_nng_err(int rv)
{
    switch (rv) {
    case 0:
        return CN_OK;
    case NNG_ENOMEM:
        return CN_NOMEM;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP:
        return CN_INVAL;
    default:
        return CN_IO;
    }
}

/* Encodes m into a new nng message. */
cn_err
wp_sdk_msg_new(const struct wp_msg *m, nng_msg **out)
{
    struct cn_buf b = CN_BUF_INIT;
    nng_msg *msg = NULL;
    cn_err rv;

    if ((rv = wp_msg_encode(m, &b)) != CN_OK) {
        goto out;
    }
    if (b.len > WP_MAX_BODY) {
        rv = CN_TOOBIG;
        goto out;
    }
    if (nng_msg_alloc(&msg, 0) != 0 || nng_msg_append(msg, b.data, b.len) != 0) {
        rv = CN_NOMEM;
        goto out;
    }
    *out = msg;
    msg = NULL;
out:
    if (msg != NULL) {
        nng_msg_free(msg);
    }
    cn_buf_fini(&b);
    return rv;
}

/* Starts op (send when msg != NULL, else receive) on ctx/aio of link l unless its session
 * changed or the worker is stopping (`allow_stopping` lets a goodbye out). Waits for it.
 * Returns 0 or an nng error (NNG_ECANCELED when not started). On a failed send msg is freed. */
int
wp_sdk_op(struct sdk_link *l, nng_ctx ctx, nng_aio *aio, nng_msg *msg, uint64_t gen,
          bool allow_stopping, bool *busy)
{
    struct cairn_worker *w = l->w;
    int rv;

    sdk_lock(w);
    if (l->gen != gen || (w->stopping && !allow_stopping) || !l->sock_open) {
        sdk_unlock(w);
        if (msg != NULL) {
            nng_msg_free(msg);
        }
        return NNG_ECANCELED;
    }
    *busy = true;
    if (msg != NULL) {
        nng_aio_set_msg(aio, msg);
        nng_ctx_send(ctx, aio);
    } else {
        nng_ctx_recv(ctx, aio);
    }
    sdk_unlock(w);
    nng_aio_wait(aio);
    sdk_lock(w);
    *busy = false;
    sdk_unlock(w);
    rv = nng_aio_result(aio);
    if (rv != 0 && msg != NULL) {
        nng_msg_free(nng_aio_get_msg(aio));
        nng_aio_set_msg(aio, NULL);
    }
    return rv;
}

/* Withdraws every request l has out (their callbacks then see NNG_ECANCELED). */
void
wp_sdk_cancel_ops_locked(struct sdk_link *l)
{
    uint32_t i;

    if (l->ctl_busy) {
        nng_aio_cancel(l->ctl_aio);
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        if (l->fetch[i].st != FE_IDLE) {
            nng_aio_cancel(l->fetch[i].aio);
        }
    }
}

/* Waits (bounded) until no fetch of l has a request out. The SDK withdraws its requests
 * before it closes a pipe or the socket, so that nng's REQ has nothing to reschedule while
 * closing (nng 1.5.2 has known hangs in nng_close around that: nanomsg/nng#1543, #1813). */
void
wp_sdk_fetches_idle_locked(struct sdk_link *l)
{
    int64_t deadline = cn_mono_ms() + 2000;
    uint32_t i;

    for (;;) {
        for (i = 0; i < SDK_FETCHES && l->fetch[i].st == FE_IDLE; i++) {
        }
        if (i == SDK_FETCHES || !sdk_wait_until(l->w, deadline)) {
            return;
        }
    }
}

/* nng callback on a new pipe: counts it (teardown waits for none to be left). */
static void
sdk_pipe_add(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct sdk_link *l = arg;

    (void) p;
    (void) ev;
    sdk_lock(l->w);
    l->npipes++;
    sdk_unlock(l->w);
}

/* nng callback on pipe removal: never blocks. */
static void
sdk_pipe_rem(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct sdk_link *l = arg;
    struct cairn_worker *w = l->w;

    (void) ev;
    sdk_lock(w);
    if (l->npipes > 0) {
        l->npipes--;
    }
    sdk_broadcast(w);
    if (!l->sock_open) {
        /* closing: teardown aborts everything itself */
    } else if (l->need_hello) {
        /* No session yet: a hello in flight goes again on the next connection. */
        if (l->ctl_busy) {
            nng_aio_cancel(l->ctl_aio);
        }
    } else if (nng_pipe_id(p) == nng_pipe_id(l->session_pipe)) {
        wp_sdk_session_lost_locked(l);
    }
    /* else an older connection closing late (after the heartbeat dropped it and a new session
     * began): nothing of the current session was on it. */
    sdk_unlock(w);
}

/* TLS for tls+tcp:// URLs: verify the runner against the CA, present our certificate when
 * configured. Other transports ignore these options. Returns 0 or an nng error. */
static int
sdk_tls_setup(struct sdk_link *l)
{
    const struct cairn_worker *w = l->w;
    int nrv = 0;

    if (strncmp(l->url, "tls+", 4) != 0) {
        return 0;
    }
    if (w->tls_ca_file != NULL &&
        ((nrv = nng_dialer_set_string(l->dialer, NNG_OPT_TLS_CA_FILE, w->tls_ca_file)) != 0 ||
         (nrv = nng_dialer_set_int(l->dialer, NNG_OPT_TLS_AUTH_MODE, NNG_TLS_AUTH_MODE_REQUIRED)) !=
             0)) {
        return nrv;
    }
    if (w->tls_cert_key_file != NULL &&
        (nrv = nng_dialer_set_string(l->dialer, NNG_OPT_TLS_CERT_KEY_FILE, w->tls_cert_key_file)) !=
            0) {
        return nrv;
    }
    if (w->tls_server_name != NULL &&
        (nrv = nng_dialer_set_string(l->dialer, NNG_OPT_TLS_SERVER_NAME, w->tls_server_name)) !=
            0) {
        return nrv;
    }
    return 0;
}

/* Opens l's socket, contexts and dialer (dialing in the background). */
cn_err
wp_sdk_link_open(struct sdk_link *l)
{
    struct cairn_worker *w = l->w;
    uint32_t i;
    int nrv;

    l->npipes = 0;
    if ((nrv = nng_req0_open(&l->sock)) != 0) {
        return wp_sdk_fail(l, sdk_nng_err(nrv), "cannot open socket", nng_strerror(nrv));
    }
    sdk_lock(w);
    l->sock_open = true;
    l->need_hello = true;
    l->failed = false;
    l->gen = 0;
    l->welcomes = 0;
    l->hello_delay_ms = 0;
    l->room_said = 0;
    l->ncancels = 0;
    sdk_unlock(w);
    if ((nrv = nng_socket_set_ms(l->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
        (nrv = nng_socket_set_size(l->sock, NNG_OPT_RECVMAXSZ, WP_MAX_MSG)) != 0 ||
        (nrv = nng_pipe_notify(l->sock, NNG_PIPE_EV_ADD_POST, sdk_pipe_add, l)) != 0 ||
        (nrv = nng_pipe_notify(l->sock, NNG_PIPE_EV_REM_POST, sdk_pipe_rem, l)) != 0 ||
        (nrv = nng_ctx_open(&l->ctl_ctx, l->sock)) != 0 ||
        (nrv = nng_aio_alloc(&l->ctl_aio, NULL, NULL)) != 0) {
        return wp_sdk_fail(l, sdk_nng_err(nrv), "cannot set up socket", nng_strerror(nrv));
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        l->fetch[i].l = l;
        l->fetch[i].st = FE_IDLE;
        if ((nrv = nng_ctx_open(&l->fetch[i].ctx, l->sock)) != 0 ||
            (nrv = nng_aio_alloc(&l->fetch[i].aio, wp_sdk_fetch_cb, &l->fetch[i])) != 0) {
            return wp_sdk_fail(l, sdk_nng_err(nrv), "cannot set up socket", nng_strerror(nrv));
        }
        nng_aio_set_timeout(l->fetch[i].aio, NNG_DURATION_INFINITE);
    }
    if ((nrv = nng_dialer_create(&l->dialer, l->sock, l->url)) != 0 ||
        (nrv = nng_dialer_set_ms(l->dialer, NNG_OPT_RECONNMINT,
                                 (nng_duration) w->reconnect_min_ms)) != 0 ||
        (nrv = nng_dialer_set_ms(l->dialer, NNG_OPT_RECONNMAXT,
                                 (nng_duration) w->reconnect_max_ms)) != 0 ||
        (nrv = nng_dialer_set_size(l->dialer, NNG_OPT_RECVMAXSZ, WP_MAX_MSG)) != 0 ||
        (nrv = sdk_tls_setup(l)) != 0 ||
        (nrv = nng_dialer_start(l->dialer, NNG_FLAG_NONBLOCK)) != 0) {
        return wp_sdk_fail(l, sdk_nng_err(nrv), "cannot dial", nng_strerror(nrv));
    }
    return CN_OK;
}

/* Closes l's dialer, contexts and socket. The dialer (waiting for its connection to be gone),
 * the contexts, then the socket: nng 1.5.2 can hang in nng_close when it has to tear those
 * down itself, more so while replies to withdrawn requests still arrive (wp_close_bounded). */
void
wp_sdk_link_close(struct sdk_link *l)
{
    int64_t deadline = cn_mono_ms() + 1000;
    uint32_t i;

    (void) nng_dialer_close(l->dialer);
    sdk_lock(l->w);
    while (l->npipes > 0 && sdk_wait_until(l->w, deadline)) {
    }
    sdk_unlock(l->w);
    for (i = 0; i < SDK_FETCHES; i++) {
        (void) nng_ctx_close(l->fetch[i].ctx);
    }
    (void) nng_ctx_close(l->ctl_ctx);
    if (!wp_close_bounded(l->sock, WP_CLOSE_TIMEOUT_MS)) {
        wp_sdk_log(l, CN_LOG_WARN, "socket close did not finish (nng 1.5.2 bug); left behind",
                   NULL);
    }
}
