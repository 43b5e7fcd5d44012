/* SPDX-License-Identifier: MIT */
/*
 * The worker SDK (include/cairn/worker.h): the worker side of docs/protocol.md over an nng
 * REQ socket. All nng calls of the SDK are in this file.
 *
 * DESIGN
 * - One REQ socket, one dialer (nng reconnects, RECONNMINT/MAXT). Work flows through two
 *   `fetch` contexts driven by aio callbacks: each carries a `ready` with every outcome waiting
 *   in the outbox, and its reply (a `dispatch` batch) goes into the run queue. One of them is
 *   always out (parked at the runner when it has no work); the other carries outcomes that
 *   finish meanwhile. The runner keeps one `ready` per worker parked and releases the older
 *   one, so a fetch is always free within one round trip: outcomes are never held back, and
 *   under load they travel in batches (all that finished while both fetches were out).
 * - One thread per slot takes attempts from the run queue and runs them. One control thread
 *   says `hello` after each reconnect, then keeps a `control` request parked for `cancel`s.
 * - The control thread's aio is waited on synchronously (nng_aio_wait); another thread
 *   interrupts it with nng_aio_cancel, race-free because an operation is started only under
 *   w->mtx after checking the flags that the interrupting thread sets under w->mtx.
 * - Sessions: `gen` counts connections lost. A pipe removal (nng callback, never blocks) bumps
 *   gen, sets need_hello, empties the run queue and cancels every pending operation, so
 *   nothing is left for nng's REQ to re-send on the next pipe before the new `hello`.
 *   Outcomes of an older generation are dropped (the runner failed them with WorkerLost).
 * - REQ re-sends are off (NNG_OPT_REQ_RESENDTIME infinite): a parked `ready` may wait long.
 * - A reply to `control` that does not decode is logged and treated as a noop; one to `ready`
 *   starts a new session (it may have carried attempts we could never report).
 * - A cancel is matched against running and queued attempts, and remembered (a few, per
 *   session) for a dispatch still on its way: a cancelled attempt that has not started is
 *   not run at all.
 *
 * Lock order: only w->mtx. nng calls made under it are asynchronous (ctx send/recv, aio
 * cancel); nng runs our aio callbacks on its own threads, never inside those calls.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "worker-protocol/include/cairn/worker.h"
#include "worker-protocol/proto.h"

#define SDK_NAME    "libcairn-worker 0.2.0"
#define SDK_FETCHES 2
/* Cancels remembered per session for dispatches not yet seen. */
#define SDK_CANCEL_MEMORY 64
/* How long a stop waits for nng_close (see sdk_close_bounded). */
#define SDK_CLOSE_TIMEOUT_MS 3000

enum sdk_fetch_state { FE_IDLE, FE_SEND, FE_RECV };

struct sdk_action {
    char *name;
    cairn_worker_handler fn;
    void *arg;
};

/* A dispatched attempt, queued or running. */
struct sdk_item {
    struct wp_dispatch d; /* d.action points at `action`; kwargs owned */
    char *action;
    uint64_t gen;
    bool cancelled; /* a cancel came before it started */
    struct sdk_item *next;
};

struct sdk_out {
    struct wp_outcome o; /* value owned */
    uint64_t gen;
};

struct sdk_fetch {
    struct cairn_worker *w;
    nng_ctx ctx;
    nng_aio *aio;
    enum sdk_fetch_state st; /* protected by w->mtx */
    uint64_t gen;            /* session of the request out */
};

struct sdk_slot {
    struct cairn_worker *w;
    pthread_t thread;
    bool thread_started;
    /* the attempt being run, for `cancel` matching; protected by w->mtx */
    bool running;
    uint8_t exec_id[16];
    uint32_t attempt;
    uint64_t token;
    atomic_bool cancelled; /* read by the handler without the lock; a flag only */
    pthread_cond_t wake;   /* with w->mtx: cairn_worker_sleep waits here, a cancel signals */
};

struct sdk_cancel {
    uint8_t exec_id[16];
    uint32_t attempt;
    uint64_t token;
};

struct cairn_worker {
    char *url;
    char *name;
    char *credential;
    char *tls_ca_file, *tls_cert_key_file, *tls_server_name;
    uint32_t nslots, prefetch;
    uint32_t reconnect_min_ms, reconnect_max_ms, start_timeout_ms;
    struct sdk_action *actions;
    uint32_t nactions;
    char errtext[320];

    pthread_mutex_t mtx;
    pthread_cond_t cond; /* state changes that stop() and the control thread wait for */
    pthread_cond_t work; /* slot threads wait here for the run queue */
    /* protected by mtx */
    bool started;            /* between start() success and the end of stop() */
    bool stopping;           /* stop() called: no new work asked for */
    bool failed;             /* refused after a reconnect: serving stopped */
    bool need_hello;         /* connection lost since the last welcome */
    uint32_t hello_delay_ms; /* wait before that hello: grows while sessions keep failing */
    bool slots_exit;         /* teardown: slot threads end */
    uint64_t gen;            /* connections lost so far */
    bool ctl_started;
    bool ctl_busy; /* control aio has an operation pending */
    struct sdk_item *rq_head, *rq_tail;
    uint32_t nidle, nrunning;
    struct sdk_out *outbox;
    uint32_t nout, capout;
    struct sdk_cancel cancels[SDK_CANCEL_MEMORY];
    uint32_t ncancels; /* total remembered this session; the ring holds the latest */

    bool sock_open;
    uint32_t npipes; /* connections up (pipe callbacks); mtx */
    nng_socket sock;
    nng_dialer dialer;
    nng_ctx ctl_ctx;
    nng_aio *ctl_aio;
    nng_pipe ctl_pipe;     /* connection of the latest control reply; protected by mtx */
    nng_pipe session_pipe; /* connection of the current session (its welcome); mtx */
    uint32_t idle_ms;      /* from welcome: the runner answers a parked request within it */
    pthread_t ctl_thread;
    struct sdk_fetch fetch[SDK_FETCHES];
    struct sdk_slot *slots;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static void
sdk_lock(struct cairn_worker *w)
{
    cn_mutex_lock(&w->mtx);
}

static void
sdk_unlock(struct cairn_worker *w)
{
    cn_mutex_unlock(&w->mtx);
}

static void
sdk_broadcast(struct cairn_worker *w)
{
    cn_cond_broadcast(&w->cond);
}

/* Waits on w->cond (a monotonic condition variable) until the monotonic deadline; returns
 * false once it has passed. */
static bool
sdk_wait_until(struct cairn_worker *w, int64_t deadline_ms)
{
    if (deadline_ms - cn_mono_ms() <= 0) {
        return false;
    }
    cn_cond_wait_until(&w->cond, &w->mtx, deadline_ms);
    return true;
}

static bool
sdk_name_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= WP_MAX_NAME && ir_utf8_valid(s, n, NULL);
}

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

/* Through the host process's log (ir/base/log.h): its level and format apply. */
static void
sdk_log(const struct cairn_worker *w, enum cn_log_level level, const char *what, const char *detail)
{
    cn_log(level, "worker %s: %s%s%s", w->name, what, detail ? ": " : "", detail ? detail : "");
}

/* Sets the error text of the last failure (start's callers read it). */
static cn_err
sdk_fail(struct cairn_worker *w, cn_err rv, const char *what, const char *detail)
{
    (void) snprintf(w->errtext, sizeof(w->errtext), "%s%s%s", what, detail ? ": " : "",
                    detail ? detail : "");
    sdk_log(w, CN_LOG_ERROR, what, detail);
    return rv;
}

/* ---- messages ------------------------------------------------------------------------------ */

/* Encodes m into a new nng message. */
static cn_err
sdk_msg_new(const struct wp_msg *m, nng_msg **out)
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

/* Starts op (send when msg != NULL, else receive) on ctx/aio unless the session changed or
 * the worker is stopping (for sends by slots, `allow_stopping` lets a final outcome out).
 * Waits for it. Returns 0 or an nng error (NNG_ECANCELED when not started). On a failed send
 * msg is freed. */
static int
sdk_op(struct cairn_worker *w, nng_ctx ctx, nng_aio *aio, nng_msg *msg, uint64_t gen,
       bool allow_stopping, bool *busy)
{
    int rv;

    sdk_lock(w);
    if (w->gen != gen || (w->stopping && !allow_stopping) || !w->sock_open) {
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

/* Receives a reply and decodes it. An undecodable one is logged and becomes a noop. */
static int
sdk_recv(struct cairn_worker *w, nng_ctx ctx, nng_aio *aio, uint64_t gen, bool allow_stopping,
         bool *busy, struct wp_msg *out)
{
    struct cn_errmsg em = {{0}};
    nng_msg *msg;
    int rv;

    wp_msg_init(out, WP_NOOP);
    if ((rv = sdk_op(w, ctx, aio, NULL, gen, allow_stopping, busy)) != 0) {
        return rv;
    }
    msg = nng_aio_get_msg(aio);
    nng_aio_set_msg(aio, NULL);
    if (aio == w->ctl_aio) {
        sdk_lock(w);
        w->ctl_pipe = nng_msg_get_pipe(msg); /* the connection to drop if the runner goes silent */
        sdk_unlock(w);
    }
    if (wp_msg_decode(nng_msg_body(msg), nng_msg_len(msg), out, &em) != CN_OK) {
        sdk_log(w, CN_LOG_WARN, "undecodable reply, treated as noop", em.text);
        wp_msg_fini(out);
        wp_msg_init(out, WP_NOOP);
    }
    nng_msg_free(msg);
    return 0;
}

/* One hello/welcome exchange on the control context. Returns CN_OK (session open for gen),
 * CN_PROTO (refused, or another reply), CN_IO (transport error, cancelled or timed out). */
static cn_err
sdk_hello(struct cairn_worker *w, uint64_t gen)
{
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
    rv = sdk_msg_new(&m, &msg);
    free(names);
    if (rv != CN_OK) {
        return sdk_fail(w, rv, "cannot encode hello", cn_strerror(rv));
    }
    if ((nrv = sdk_op(w, w->ctl_ctx, w->ctl_aio, msg, gen, false, &w->ctl_busy)) != 0 ||
        (nrv = sdk_recv(w, w->ctl_ctx, w->ctl_aio, gen, false, &w->ctl_busy, &r)) != 0) {
        /* not logged: start() and the control thread retry, and say so once */
        (void) snprintf(w->errtext, sizeof(w->errtext), "hello not answered: %s",
                        nng_strerror(nrv));
        return CN_IO;
    }
    switch (r.kind) {
    case WP_WELCOME:
        sdk_lock(w);
        w->idle_ms = r.idle_ms;
        w->session_pipe = w->ctl_pipe;
        sdk_unlock(w);
        rv = CN_OK;
        break;
    case WP_REFUSED:
        (void) snprintf(w->errtext, sizeof(w->errtext), "refused: %s", r.reason);
        sdk_log(w, CN_LOG_ERROR, w->errtext, NULL);
        rv = CN_PROTO;
        break;
    case WP_NOOP:
        rv = CN_IO; /* retried by the caller */
        break;
    default:
        rv = sdk_fail(w, CN_PROTO, "unexpected reply to hello", wp_kind_name(r.kind));
        break;
    }
    wp_msg_fini(&r);
    return rv;
}

/* ---- outcomes -------------------------------------------------------------------------------- */

/* Replaces *v (released) with an error value; on NOMEM leaves None (the runner then records a
 * malformed outcome, which is still a failure). */
static void
sdk_set_error(struct ir_val *v, const char *type, const char *message)
{
    ir_val_release(*v);
    if (ir_error_new(type, message, ir_null(), ir_null(), v) != CN_OK) {
        *v = ir_null();
    }
}

/* Runs the handler for item it on slot s and fills outcome o (which owns its value). */
static void
sdk_run(struct sdk_slot *s, const struct sdk_item *it, struct wp_outcome *o)
{
    struct cairn_worker *w = s->w;
    const struct wp_dispatch *d = &it->d;
    const struct sdk_action *a = NULL;
    struct cairn_worker_ctx ctx;
    struct ir_val v = ir_null();
    char text[96];
    uint32_t i;
    cn_err rv;

    memcpy(o->exec_id, d->exec_id, 16);
    o->attempt = d->attempt;
    o->token = d->token;
    o->ok = false;
    for (i = 0; i < w->nactions; i++) {
        if (strcmp(w->actions[i].name, d->action) == 0) {
            a = &w->actions[i];
        }
    }
    if (it->cancelled) {
        sdk_set_error(&v, "Cancelled", "cancelled before it started");
        o->value = v;
        return;
    }
    if (a == NULL) {
        sdk_set_error(&v, "WorkerError", "action not served by this worker");
        o->value = v;
        return;
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.action = d->action;
    memcpy(ctx.instance_id, d->instance_id, 16);
    memcpy(ctx.exec_id, d->exec_id, 16);
    ctx.attempt = d->attempt;
    ctx.deadline_ms = d->deadline_ms;
    ctx.last_error = d->last_error;
    ctx.internal = s;
    rv = a->fn(&ctx, d->kwargs, a->arg, &v);
    if (rv != CN_OK) {
        (void) snprintf(text, sizeof(text), "handler failed: %s", cn_strerror(rv));
        v = ir_null();
        sdk_set_error(&v, "WorkerError", text);
    } else if (ir_val_deeper_than(v, IR_VALUE_MAX_DEPTH)) {
        sdk_set_error(&v, "ValueError", "action result nests deeper than 32 levels");
    } else if (ir_is_error(v)) {
        /* The runner refuses an error without a string "type" (and drops the connection,
         * with everything else in flight on it): fix it here. */
        const struct ir_val *t = v.type == IR_T_MAP ? ir_map_get(v, "type", 4) : NULL;
        if (t == NULL || t->type != IR_T_STR) {
            sdk_set_error(&v, "WorkerError", "the handler returned an error without a type");
        }
    }
    o->ok = !ir_is_error(v);
    o->value = v;
}

/* ---- fetches ------------------------------------------------------------------------------- */

/* Drops outcomes of older sessions: the runner already failed those attempts. */
static void
sdk_outbox_prune_locked(struct cairn_worker *w)
{
    uint32_t i, n = 0;

    for (i = 0; i < w->nout; i++) {
        if (w->outbox[i].gen == w->gen) {
            w->outbox[n++] = w->outbox[i];
        } else {
            ir_val_release(w->outbox[i].o.value);
        }
    }
    w->nout = n;
}

/* Adds the outbox's first outcome to b. One that cannot travel even alone is replaced by an
 * error saying why. Returns CN_OK, or CN_TOOBIG/CN_NOMEM when it must wait for the next
 * message. */
static cn_err
sdk_batch_outcome(struct wp_batch *b, struct wp_outcome *o)
{
    cn_err rv = wp_batch_add_outcome(b, o);

    if ((rv == CN_TOOBIG || rv == CN_INVAL) && b->n == 0) {
        sdk_set_error(&o->value, "ValueError",
                      rv == CN_TOOBIG ? "action result too large to send"
                                      : "action result cannot be encoded");
        o->ok = false;
        rv = wp_batch_add_outcome(b, o);
    }
    return rv;
}

/* Sends a `ready` on idle fetch f with as many outbox outcomes as fit in one message. */
static void
sdk_send_ready_locked(struct cairn_worker *w, struct sdk_fetch *f)
{
    struct wp_batch b;
    nng_msg *msg = NULL;
    uint32_t i, taken = 0;

    if (wp_batch_begin(&b, WP_READY) != CN_OK) {
        return; /* out of memory: the next event tries again */
    }
    while (taken < w->nout && sdk_batch_outcome(&b, &w->outbox[taken].o) == CN_OK) {
        taken++;
    }
    wp_batch_finish(&b);
    if ((taken == 0 && w->nout > 0) || nng_msg_alloc(&msg, 0) != 0 ||
        nng_msg_append(msg, b.buf.data, b.buf.len) != 0) {
        if (msg != NULL) {
            nng_msg_free(msg);
        }
        wp_batch_fini(&b);
        return;
    }
    wp_batch_fini(&b);
    if (taken > 0) {
        for (i = 0; i < taken; i++) {
            ir_val_release(w->outbox[i].o.value);
        }
        memmove(w->outbox, w->outbox + taken, (w->nout - taken) * sizeof(*w->outbox));
        w->nout -= taken;
    }
    f->st = FE_SEND;
    f->gen = w->gen;
    nng_aio_set_msg(f->aio, msg);
    nng_ctx_send(f->ctx, f->aio);
}

/* Keeps the protocol moving: outcomes waiting go out on an idle fetch, and one `ready` is
 * always out asking for work (unless stopping). Call after every change. */
static void
sdk_pump_locked(struct cairn_worker *w)
{
    uint32_t i;

    sdk_outbox_prune_locked(w);
    if (!w->sock_open || w->need_hello || w->failed) {
        return;
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        bool other_out = w->fetch[(i + 1) % SDK_FETCHES].st != FE_IDLE;

        if (w->fetch[i].st != FE_IDLE || (w->nout == 0 && (w->stopping || other_out))) {
            continue;
        }
        sdk_send_ready_locked(w, &w->fetch[i]);
    }
}

/* A remembered cancel matching d (consumed), if any. */
static bool
sdk_cancel_remembered_locked(struct cairn_worker *w, const struct wp_dispatch *d)
{
    uint32_t i, n = w->ncancels < SDK_CANCEL_MEMORY ? w->ncancels : SDK_CANCEL_MEMORY;

    for (i = 0; i < n; i++) {
        struct sdk_cancel *c = &w->cancels[i];
        if (c->token == d->token && c->attempt == d->attempt &&
            memcmp(c->exec_id, d->exec_id, 16) == 0) {
            c->attempt = 0; /* attempts start at 1: never matches again */
            return true;
        }
    }
    return false;
}

static void
sdk_item_free(struct sdk_item *it)
{
    free(it->action);
    ir_val_release(it->d.kwargs);
    ir_val_release(it->d.last_error);
    free(it);
}

/* Queues the attempts of a dispatch for the slots and wakes one idle slot; a slot that takes
 * an attempt wakes the next while more are queued. Waking one per attempt instead would wake
 * slots that find the queue already drained by a faster one: with short actions most wake-ups
 * would be wasted, and on a small machine they cost more than the actions. */
static void
sdk_enqueue_locked(struct cairn_worker *w, const struct wp_msg *r)
{
    uint32_t i;

    for (i = 0; i < r->nitems; i++) {
        struct sdk_item *it = cn_xcalloc(1, sizeof(*it));

        it->action = cn_xstrdup(r->items[i].action);
        it->d = r->items[i];
        it->d.action = it->action;
        it->d.kwargs = ir_val_retain(r->items[i].kwargs);
        it->d.last_error = ir_val_retain(r->items[i].last_error);
        it->gen = w->gen;
        it->cancelled = sdk_cancel_remembered_locked(w, &it->d);
        if (w->rq_tail != NULL) {
            w->rq_tail->next = it;
        } else {
            w->rq_head = it;
        }
        w->rq_tail = it;
    }
    if (w->nidle > 0 && w->rq_head != NULL) {
        cn_cond_signal(&w->work);
    }
}

static void sdk_session_lost_locked(struct cairn_worker *w);

/* An attempt of this session can no longer be reported (a dispatch that did not decode):
 * end the session and say hello again on the same connection. The runner treats a
 * hello on a connection that has a session as a new session and fails what the old one held
 * with WorkerLost, freeing its room, instead of keeping that room taken for good. (Closing the
 * pipe would do the same, but nng 1.5.2 can hang in a later nng_close after nng_pipe_close.) */
static void
sdk_drop_locked(struct cairn_worker *w, const char *why)
{
    if (w->sock_open && !w->need_hello) {
        sdk_log(w, CN_LOG_WARN, "starting a new session", why);
        sdk_session_lost_locked(w);
        /* A runner that garbles every session would otherwise be asked a thousand times a
         * second; back off as a reconnect does. A reply that decodes resets it. */
        w->hello_delay_ms = w->hello_delay_ms == 0                         ? w->reconnect_min_ms
                            : w->hello_delay_ms >= w->reconnect_max_ms / 2 ? w->reconnect_max_ms
                                                                           : 2 * w->hello_delay_ms;
    }
}

/* nng callback for a fetch's aio: never blocks for long (decodes, queues, pumps). */
static void
sdk_fetch_cb(void *arg)
{
    struct sdk_fetch *f = arg;
    struct cairn_worker *w = f->w;
    int rv = nng_aio_result(f->aio);
    struct cn_errmsg em = {{0}};
    enum sdk_fetch_state st;
    struct wp_msg r;
    nng_msg *msg;

    bool undecodable = false;

    wp_msg_init(&r, WP_NOOP);
    sdk_lock(w);
    st = f->st;
    sdk_unlock(w);
    if (st == FE_RECV && rv == 0) {
        msg = nng_aio_get_msg(f->aio);
        nng_aio_set_msg(f->aio, NULL);
        if (wp_msg_decode(nng_msg_body(msg), nng_msg_len(msg), &r, &em) != CN_OK) {
            sdk_log(w, CN_LOG_WARN, "undecodable reply to ready", em.text);
            wp_msg_init(&r, WP_NOOP);
            undecodable = true; /* it may have carried attempts we can never report */
        }
        nng_msg_free(msg);
    }
    sdk_lock(w);
    if (st == FE_SEND) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(f->aio));
            nng_aio_set_msg(f->aio, NULL);
            f->st = FE_IDLE; /* its outcomes are lost with the connection (WorkerLost) */
        } else {
            f->st = FE_RECV;
            nng_ctx_recv(f->ctx, f->aio);
            if (f->gen != w->gen || !w->sock_open) {
                /* The connection dropped as the send finished: withdraw the request, or
                 * nng's REQ would resend it on the next connection before our hello. */
                nng_aio_cancel(f->aio);
            }
        }
    } else if (st == FE_RECV) {
        f->st = FE_IDLE;
        if (undecodable && f->gen == w->gen) {
            sdk_drop_locked(w, "a reply to ready did not decode");
        } else if (r.kind == WP_DISPATCH) {
            /* Run even while stopping: the runner assigned it before it saw our goodbye,
             * and stop() waits for it. Not from an older session (the runner failed those
             * with WorkerLost when that connection dropped), nor once teardown began. */
            if (f->gen == w->gen && w->sock_open) {
                w->hello_delay_ms = 0;
                sdk_enqueue_locked(w, &r);
            } else {
                sdk_log(w, CN_LOG_INFO, "dispatch from a previous connection: not run", NULL);
            }
        } else if (rv == 0 && r.kind != WP_NOOP) {
            sdk_log(w, CN_LOG_WARN, "unexpected reply to ready, treated as noop",
                    wp_kind_name(r.kind));
        } else if (rv == 0 && f->gen == w->gen) {
            w->hello_delay_ms = 0;
        }
    }
    if (rv != NNG_ECLOSED) {
        sdk_pump_locked(w);
    }
    sdk_broadcast(w);
    sdk_unlock(w);
    wp_msg_fini(&r);
}

/* ---- threads ------------------------------------------------------------------------------- */

static void *
sdk_slot_main(void *arg)
{
    struct sdk_slot *s = arg;
    struct cairn_worker *w = s->w;
    struct sdk_item *it;
    struct wp_outcome o;

    sdk_lock(w);
    for (;;) {
        while (w->rq_head == NULL && !w->slots_exit) {
            w->nidle++;
            cn_cond_wait(&w->work, &w->mtx);
            w->nidle--;
        }
        if (w->slots_exit || (it = w->rq_head) == NULL) {
            break;
        }
        if ((w->rq_head = it->next) == NULL) {
            w->rq_tail = NULL;
        } else if (w->nidle > 0) {
            cn_cond_signal(&w->work); /* pass the baton */
        }
        s->running = true;
        memcpy(s->exec_id, it->d.exec_id, 16);
        s->attempt = it->d.attempt;
        s->token = it->d.token;
        atomic_store_explicit(&s->cancelled, it->cancelled, memory_order_relaxed);
        w->nrunning++;
        sdk_unlock(w);
        sdk_run(s, it, &o);
        sdk_lock(w);
        s->running = false;
        w->nrunning--;
        if (w->nout == w->capout) {
            w->capout = w->capout ? w->capout * 2 : 16;
            w->outbox = cn_xreallocarray(w->outbox, w->capout, sizeof(*w->outbox));
        }
        w->outbox[w->nout].o = o;
        w->outbox[w->nout].gen = it->gen;
        w->nout++;
        sdk_pump_locked(w);
        sdk_broadcast(w);
        sdk_unlock(w);
        sdk_item_free(it);
        sdk_lock(w);
    }
    sdk_unlock(w);
    return NULL;
}

/* Marks the attempt matching a `cancel`: running, queued, or (remembered) still on its way. */
static void
sdk_cancel_attempt(struct cairn_worker *w, const struct wp_msg *c)
{
    struct sdk_item *it;
    uint32_t i;
    bool found = false;

    sdk_lock(w);
    for (i = 0; i < w->nslots; i++) {
        struct sdk_slot *s = &w->slots[i];

        if (s->running && memcmp(s->exec_id, c->exec_id, 16) == 0 && s->attempt == c->attempt &&
            s->token == c->token) {
            /* relaxed: a flag the handler polls, no data published with it */
            atomic_store_explicit(&s->cancelled, true, memory_order_relaxed);
            cn_cond_signal(&s->wake);
            found = true;
        }
    }
    for (it = w->rq_head; it != NULL; it = it->next) {
        if (it->d.token == c->token && it->d.attempt == c->attempt &&
            memcmp(it->d.exec_id, c->exec_id, 16) == 0) {
            it->cancelled = true;
            found = true;
        }
    }
    if (!found) {
        struct sdk_cancel *r = &w->cancels[w->ncancels++ % SDK_CANCEL_MEMORY];
        memcpy(r->exec_id, c->exec_id, 16);
        r->attempt = c->attempt;
        r->token = c->token;
    }
    sdk_unlock(w);
}

/* Frees the run queue (its attempts will not run). */
static void
sdk_runq_clear_locked(struct cairn_worker *w)
{
    struct sdk_item *it, *next;

    for (it = w->rq_head; it != NULL; it = next) {
        next = it->next;
        sdk_item_free(it);
    }
    w->rq_head = w->rq_tail = NULL;
}

/* Withdraws every request out (their callbacks then see NNG_ECANCELED). */
static void
sdk_cancel_ops_locked(struct cairn_worker *w)
{
    uint32_t i;

    if (w->ctl_busy) {
        nng_aio_cancel(w->ctl_aio);
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        if (w->fetch[i].st != FE_IDLE) {
            nng_aio_cancel(w->fetch[i].aio);
        }
    }
}

/* The session is over: what it dispatched is dropped (the runner fails it with WorkerLost),
 * nothing is sent until the next welcome. */
static void
sdk_session_lost_locked(struct cairn_worker *w)
{
    w->gen++;
    w->need_hello = true;
    w->ncancels = 0;
    sdk_runq_clear_locked(w);
    sdk_cancel_ops_locked(w);
    sdk_broadcast(w);
}

/* Waits (bounded) until no fetch has a request out. The SDK withdraws its requests before it
 * closes a pipe or the socket, so that nng's REQ has nothing to reschedule while closing
 * (nng 1.5.2 has known hangs in nng_close around that: nanomsg/nng#1543, #1813). */
static void
sdk_fetches_idle_locked(struct cairn_worker *w)
{
    int64_t deadline = cn_mono_ms() + 2000;
    uint32_t i;

    for (;;) {
        for (i = 0; i < SDK_FETCHES && w->fetch[i].st == FE_IDLE; i++) {
        }
        if (i == SDK_FETCHES || !sdk_wait_until(w, deadline)) {
            return;
        }
    }
}

static void *
sdk_ctl_main(void *arg)
{
    struct cairn_worker *w = arg;
    struct wp_msg m, r;
    bool hello, done;
    nng_duration silence;
    nng_msg *msg;
    uint64_t gen;
    cn_err rv;
    int nrv;

    for (;;) {
        sdk_lock(w);
        done = w->stopping || w->failed;
        hello = w->need_hello;
        gen = w->gen;
        sdk_unlock(w);
        if (done) {
            break;
        }
        if (hello) {
            sdk_lock(w);
            if (w->hello_delay_ms != 0) {
                int64_t until = cn_mono_ms() + w->hello_delay_ms;

                while (!w->stopping && sdk_wait_until(w, until)) {
                }
            }
            sdk_unlock(w);
            rv = sdk_hello(w, gen);
            sdk_lock(w);
            if (rv == CN_OK && w->gen == gen) {
                w->need_hello = false;
                sdk_pump_locked(w); /* ask for work in the new session */
            } else if (rv == CN_PROTO) {
                w->failed = true; /* refused: serving stops; running() tells the owner */
            } else if (rv != CN_OK && !w->stopping) {
                (void) sdk_wait_until(w, cn_mono_ms() + w->reconnect_min_ms);
            }
            sdk_broadcast(w);
            sdk_unlock(w);
            continue;
        }
        wp_msg_init(&m, WP_CONTROL);
        if ((rv = sdk_msg_new(&m, &msg)) != CN_OK) {
            sdk_log(w, CN_LOG_ERROR, "cannot build control", cn_strerror(rv));
            break;
        }
        /* Heartbeat, the runner's rule mirrored: it answers a parked request within idle_ms,
         * so three idle periods (plus a second) of silence mean it is gone while the
         * connection looks open (its host vanished). Drop the connection: the dialer makes a
         * new one and the next session starts with a hello. */
        sdk_lock(w);
        silence = NNG_DURATION_INFINITE;
        if (w->idle_ms != 0) {
            int64_t ms = 3 * (int64_t) w->idle_ms + 1000;
            silence = (nng_duration) (ms < INT32_MAX ? ms : INT32_MAX);
        }
        sdk_unlock(w);
        nng_aio_set_timeout(w->ctl_aio, silence);
        nrv = sdk_op(w, w->ctl_ctx, w->ctl_aio, msg, gen, false, &w->ctl_busy);
        if (nrv == 0) {
            nrv = sdk_recv(w, w->ctl_ctx, w->ctl_aio, gen, false, &w->ctl_busy, &r);
        }
        nng_aio_set_timeout(w->ctl_aio, NNG_DURATION_INFINITE);
        if (nrv == NNG_ECLOSED) {
            break;
        }
        if (nrv == NNG_ETIMEDOUT) {
            nng_pipe pp;

            sdk_log(w, CN_LOG_WARN, "runner silent for three idle periods: reconnecting", NULL);
            sdk_lock(w);
            pp = w->session_pipe;
            sdk_session_lost_locked(w);
            sdk_fetches_idle_locked(w);
            sdk_unlock(w);
            (void) nng_pipe_close(pp);
            continue;
        }
        if (nrv != 0) {
            continue;
        }
        if (r.kind == WP_CANCEL) {
            sdk_cancel_attempt(w, &r);
        } else if (r.kind != WP_NOOP && r.kind != WP_ACK) {
            sdk_log(w, CN_LOG_WARN, "unexpected reply to control, treated as noop",
                    wp_kind_name(r.kind));
        }
        wp_msg_fini(&r);
    }
    return NULL;
}

/* nng callback on a new pipe: counts it (teardown waits for none to be left). */
static void
sdk_pipe_add(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct cairn_worker *w = arg;

    (void) p;
    (void) ev;
    sdk_lock(w);
    w->npipes++;
    sdk_unlock(w);
}

/* nng callback on pipe removal: never blocks. */
static void
sdk_pipe_rem(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct cairn_worker *w = arg;

    (void) ev;
    sdk_lock(w);
    if (w->npipes > 0) {
        w->npipes--;
    }
    sdk_broadcast(w);
    if (!w->sock_open) {
        /* closing: teardown aborts everything itself */
    } else if (w->need_hello) {
        /* No session yet: a hello in flight goes again on the next connection. */
        if (w->ctl_busy) {
            nng_aio_cancel(w->ctl_aio);
        }
    } else if (nng_pipe_id(p) == nng_pipe_id(w->session_pipe)) {
        sdk_session_lost_locked(w);
    }
    /* else an older connection closing late (after the heartbeat dropped it and a new session
     * began): nothing of the current session was on it. */
    sdk_unlock(w);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

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
    if (url == NULL || *url == '\0' || opts->slots > WP_MAX_SLOTS ||
        opts->prefetch > WP_MAX_PREFETCH || (opts->name != NULL && !sdk_name_ok(opts->name)) ||
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
    w->url = cn_xstrdup(url);
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

/* nng_close, bounded. nng 1.5.2 (Debian 12's) can hang for good in nng_close when a pipe is
 * reaped while one of its internal tasks was prepared but never started (nanomsg/nng#1543,
 * fixed in later releases); seen about once in 50 stops of a worker whose runner was
 * resetting its session. A stop that hangs would keep a worker process from exiting on
 * SIGTERM, so the close runs on a thread of its own and, past the deadline, is left behind:
 * the socket (and that thread) leak, logged, and the stop goes on. */
struct sdk_closer {
    pthread_mutex_t mtx;
    pthread_cond_t done_cv;
    nng_socket sock;
    bool done;
    int refs; /* the closing thread and the waiter; the last one frees */
};

static void
sdk_closer_unref(struct sdk_closer *c)
{
    bool last;

    cn_mutex_lock(&c->mtx);
    last = --c->refs == 0;
    cn_mutex_unlock(&c->mtx);
    if (last) {
        cn_cond_destroy(&c->done_cv);
        cn_mutex_destroy(&c->mtx);
        free(c);
    }
}

static void *
sdk_closer_main(void *arg)
{
    struct sdk_closer *c = arg;

    (void) nng_close(c->sock);
    cn_mutex_lock(&c->mtx);
    c->done = true;
    cn_cond_broadcast(&c->done_cv);
    cn_mutex_unlock(&c->mtx);
    sdk_closer_unref(c);
    return NULL;
}

/* Returns false when nng_close did not return within timeout_ms (it goes on in the
 * background). */
static bool
sdk_close_bounded(nng_socket sock, int64_t timeout_ms)
{
    struct sdk_closer *c = cn_xcalloc(1, sizeof(*c));
    int64_t deadline = cn_mono_ms() + timeout_ms;
    pthread_t t;
    bool done;

    cn_mutex_init(&c->mtx);
    cn_cond_init(&c->done_cv);
    c->sock = sock;
    c->refs = 2;
    if (pthread_create(&t, NULL, sdk_closer_main, c) != 0) {
        c->refs = 1;
        (void) nng_close(sock); /* no thread to spare: close here, unbounded */
        sdk_closer_unref(c);
        return true;
    }
    (void) pthread_detach(t);
    cn_mutex_lock(&c->mtx);
    while (!c->done && cn_mono_ms() < deadline) {
        cn_cond_wait_until(&c->done_cv, &c->mtx, deadline);
    }
    done = c->done;
    cn_mutex_unlock(&c->mtx);
    sdk_closer_unref(c);
    return done;
}

/* Closes the socket (aborting every pending operation), ends and joins the threads, and
 * drops what is left (queued attempts, unsent outcomes). */
static void
sdk_teardown(struct cairn_worker *w)
{
    uint32_t i;
    bool was_open;

    sdk_lock(w);
    w->stopping = true;
    w->slots_exit = true;
    sdk_runq_clear_locked(w);
    cn_cond_broadcast(&w->work);
    was_open = w->sock_open;
    w->sock_open = false; /* no new operation starts from here */
    sdk_cancel_ops_locked(w);
    sdk_broadcast(w);
    sdk_unlock(w);
    if (w->ctl_started) {
        (void) pthread_join(w->ctl_thread, NULL);
        w->ctl_started = false;
    }
    sdk_lock(w);
    sdk_fetches_idle_locked(w);
    sdk_unlock(w);
    if (was_open) {
        /* The dialer (waiting for its connection to be gone), the contexts, then the socket:
         * nng 1.5.2 can hang in nng_close when it has to tear those down itself, more so while
         * replies to withdrawn requests still arrive (see sdk_close_bounded). */
        int64_t deadline = cn_mono_ms() + 1000;

        (void) nng_dialer_close(w->dialer);
        sdk_lock(w);
        while (w->npipes > 0 && sdk_wait_until(w, deadline)) {
        }
        sdk_unlock(w);
        for (i = 0; i < SDK_FETCHES; i++) {
            (void) nng_ctx_close(w->fetch[i].ctx);
        }
        (void) nng_ctx_close(w->ctl_ctx);
        if (!sdk_close_bounded(w->sock, SDK_CLOSE_TIMEOUT_MS)) {
            sdk_log(w, CN_LOG_WARN, "socket close did not finish (nng 1.5.2 bug); left behind",
                    NULL);
        }
    }
    for (i = 0; w->slots != NULL && i < w->nslots; i++) {
        if (w->slots[i].thread_started) {
            (void) pthread_join(w->slots[i].thread, NULL);
        }
        cn_cond_destroy(&w->slots[i].wake);
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        if (w->fetch[i].aio != NULL) {
            nng_aio_free(w->fetch[i].aio); /* waits for a callback still running */
            w->fetch[i].aio = NULL;
        }
        w->fetch[i].st = FE_IDLE;
    }
    free(w->slots);
    if (w->ctl_aio != NULL) {
        nng_aio_free(w->ctl_aio);
        w->ctl_aio = NULL;
    }
    sdk_lock(w);
    for (i = 0; i < w->nout; i++) {
        ir_val_release(w->outbox[i].o.value);
    }
    free(w->outbox);
    w->outbox = NULL;
    w->nout = w->capout = 0;
    w->slots = NULL;
    w->started = false;
    w->stopping = false;
    w->failed = false;
    w->slots_exit = false;
    sdk_unlock(w);
}

/* TLS for tls+tcp:// URLs: verify the runner against the CA, present our certificate when
 * configured. Other transports ignore these options. Returns 0 or an nng error. */
static int
sdk_tls_setup(struct cairn_worker *w)
{
    int nrv = 0;

    if (strncmp(w->url, "tls+", 4) != 0) {
        return 0;
    }
    if (w->tls_ca_file != NULL &&
        ((nrv = nng_dialer_set_string(w->dialer, NNG_OPT_TLS_CA_FILE, w->tls_ca_file)) != 0 ||
         (nrv = nng_dialer_set_int(w->dialer, NNG_OPT_TLS_AUTH_MODE, NNG_TLS_AUTH_MODE_REQUIRED)) !=
             0)) {
        return nrv;
    }
    if (w->tls_cert_key_file != NULL &&
        (nrv = nng_dialer_set_string(w->dialer, NNG_OPT_TLS_CERT_KEY_FILE, w->tls_cert_key_file)) !=
            0) {
        return nrv;
    }
    if (w->tls_server_name != NULL &&
        (nrv = nng_dialer_set_string(w->dialer, NNG_OPT_TLS_SERVER_NAME, w->tls_server_name)) !=
            0) {
        return nrv;
    }
    return 0;
}

cn_err
cairn_worker_start(struct cairn_worker *w)
{
    int64_t deadline;
    uint32_t i;
    cn_err rv;
    int nrv;

    w->errtext[0] = '\0';
    if (w->started || w->nactions == 0) {
        return sdk_fail(w, CN_INVAL, "cannot start", w->started ? "already started" : "no actions");
    }
    w->slots = cn_xcalloc(w->nslots, sizeof(*w->slots));
    for (i = 0; i < w->nslots; i++) {
        cn_cond_init(&w->slots[i].wake);
    }
    w->npipes = 0;
    if ((nrv = nng_req0_open(&w->sock)) != 0) {
        for (i = 0; i < w->nslots; i++) {
            cn_cond_destroy(&w->slots[i].wake);
        }
        free(w->slots);
        w->slots = NULL;
        return sdk_fail(w, sdk_nng_err(nrv), "cannot open socket", nng_strerror(nrv));
    }
    sdk_lock(w);
    w->sock_open = true;
    w->need_hello = true;
    w->gen = 0;
    sdk_unlock(w);
    if ((nrv = nng_socket_set_ms(w->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
        (nrv = nng_socket_set_size(w->sock, NNG_OPT_RECVMAXSZ, WP_MAX_MSG)) != 0 ||
        (nrv = nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_POST, sdk_pipe_add, w)) != 0 ||
        (nrv = nng_pipe_notify(w->sock, NNG_PIPE_EV_REM_POST, sdk_pipe_rem, w)) != 0 ||
        (nrv = nng_ctx_open(&w->ctl_ctx, w->sock)) != 0 ||
        (nrv = nng_aio_alloc(&w->ctl_aio, NULL, NULL)) != 0) {
        rv = sdk_fail(w, sdk_nng_err(nrv), "cannot set up socket", nng_strerror(nrv));
        goto fail;
    }
    for (i = 0; i < w->nslots; i++) {
        w->slots[i].w = w;
        atomic_init(&w->slots[i].cancelled, false);
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        w->fetch[i].w = w;
        w->fetch[i].st = FE_IDLE;
        if ((nrv = nng_ctx_open(&w->fetch[i].ctx, w->sock)) != 0 ||
            (nrv = nng_aio_alloc(&w->fetch[i].aio, sdk_fetch_cb, &w->fetch[i])) != 0) {
            rv = sdk_fail(w, sdk_nng_err(nrv), "cannot set up socket", nng_strerror(nrv));
            goto fail;
        }
        nng_aio_set_timeout(w->fetch[i].aio, NNG_DURATION_INFINITE);
    }
    if ((nrv = nng_dialer_create(&w->dialer, w->sock, w->url)) != 0 ||
        (nrv = nng_dialer_set_ms(w->dialer, NNG_OPT_RECONNMINT,
                                 (nng_duration) w->reconnect_min_ms)) != 0 ||
        (nrv = nng_dialer_set_ms(w->dialer, NNG_OPT_RECONNMAXT,
                                 (nng_duration) w->reconnect_max_ms)) != 0 ||
        (nrv = nng_dialer_set_size(w->dialer, NNG_OPT_RECVMAXSZ, WP_MAX_MSG)) != 0 ||
        (nrv = sdk_tls_setup(w)) != 0 ||
        (nrv = nng_dialer_start(w->dialer, NNG_FLAG_NONBLOCK)) != 0) {
        rv = sdk_fail(w, sdk_nng_err(nrv), "cannot dial", nng_strerror(nrv));
        goto fail;
    }
    /* The first session, in the caller's thread, so that a refusal is start()'s error. */
    deadline = w->start_timeout_ms != 0 ? cn_mono_ms() + w->start_timeout_ms : INT64_MAX;
    for (;;) {
        int64_t left = deadline - cn_mono_ms();
        uint64_t gen;

        if (left <= 0) {
            (void) snprintf(w->errtext, sizeof(w->errtext),
                            "no welcome from the runner at %s in time", w->url);
            rv = CN_IO;
            goto fail;
        }
        nng_aio_set_timeout(w->ctl_aio,
                            deadline == INT64_MAX ? NNG_DURATION_INFINITE : (nng_duration) left);
        sdk_lock(w);
        gen = w->gen;
        sdk_unlock(w);
        rv = sdk_hello(w, gen);
        if (rv == CN_OK) {
            sdk_lock(w);
            if (w->gen == gen) {
                w->need_hello = false;
                sdk_unlock(w);
                break;
            }
            sdk_unlock(w);
            continue; /* lost the connection right after welcome: greet the next one */
        }
        if (rv != CN_IO) {
            goto fail;
        }
    }
    w->errtext[0] = '\0';
    nng_aio_set_timeout(w->ctl_aio, NNG_DURATION_INFINITE);
    w->started = true;
    if (pthread_create(&w->ctl_thread, NULL, sdk_ctl_main, w) != 0) {
        abort();
    }
    w->ctl_started = true;
    for (i = 0; i < w->nslots; i++) {
        if (pthread_create(&w->slots[i].thread, NULL, sdk_slot_main, &w->slots[i]) != 0) {
            abort();
        }
        w->slots[i].thread_started = true;
    }
    sdk_lock(w);
    sdk_pump_locked(w); /* the first `ready` */
    sdk_unlock(w);
    return CN_OK;
fail:
    sdk_teardown(w);
    return rv;
}

/* Nothing left to run or report. Disconnected, outcomes cannot go anywhere. After the
 * runner's ack every request out is answered soon (it released them before the ack), so
 * waiting for those replies cannot hang and catches a dispatch still in transit. */
static bool
sdk_quiet_locked(struct cairn_worker *w, bool acked)
{
    uint32_t i;

    if (w->rq_head != NULL || w->nrunning > 0) {
        return false;
    }
    if (!w->sock_open || w->need_hello) {
        return true;
    }
    if (w->nout > 0) {
        return false;
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        if (w->fetch[i].st == FE_SEND || (acked && w->fetch[i].st == FE_RECV)) {
            return false;
        }
    }
    return true;
}

void
cairn_worker_stop(struct cairn_worker *w, uint32_t grace_ms)
{
    int64_t deadline = cn_mono_ms() + grace_ms;
    struct wp_msg m, r;
    bool connected, acked = false;
    nng_msg *msg;
    uint64_t gen;
    uint32_t i;

    if (w == NULL || !w->started) {
        return;
    }
    sdk_lock(w);
    w->stopping = true;
    sdk_broadcast(w);
    if (w->ctl_busy) {
        nng_aio_cancel(w->ctl_aio); /* the parked control request, to make room for goodbye */
    }
    connected = !w->need_hello;
    gen = w->gen;
    sdk_unlock(w);
    if (w->ctl_started) {
        (void) pthread_join(w->ctl_thread, NULL);
        w->ctl_started = false;
    }
    /* Goodbye first, so the runner stops dispatching to us; then let what runs finish. */
    if (connected) {
        int64_t left = deadline - cn_mono_ms();

        nng_aio_set_timeout(w->ctl_aio, (nng_duration) (left > 1000 ? left : 1000));
        wp_msg_init(&m, WP_GOODBYE);
        if (sdk_msg_new(&m, &msg) == CN_OK &&
            sdk_op(w, w->ctl_ctx, w->ctl_aio, msg, gen, true, &w->ctl_busy) == 0 &&
            sdk_recv(w, w->ctl_ctx, w->ctl_aio, gen, true, &w->ctl_busy, &r) == 0) {
            acked = r.kind == WP_ACK;
            wp_msg_fini(&r);
        }
    }
    sdk_lock(w);
    /* Queued and running attempts finish and their outcomes go out. */
    while (!sdk_quiet_locked(w, acked) && sdk_wait_until(w, deadline)) {
    }
    if (!sdk_quiet_locked(w, acked)) {
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
    bool on;

    sdk_lock(w);
    on = w->started && !w->stopping && !w->failed;
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
    free(w->actions);
    free(w->url);
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
