/* SPDX-License-Identifier: MIT */
/*
 * The worker SDK (include/cairn/worker.h): the worker side of docs/protocol.md over nng REQ
 * sockets. All nng calls of the SDK are in this file.
 *
 * DESIGN
 * - A worker serves one runner or several (cairn_worker_add_url): one `link` per runner, each
 *   with its own REQ socket and dialer (nng reconnects, RECONNMINT/MAXT), session, control
 *   thread and requests. The slots, the run queue and the actions are shared: the runners split
 *   the slots by their demand (below, Room).
 * - Work flows through two `fetch` contexts per link driven by aio callbacks: each carries a
 *   `ready` with every outcome waiting in that link's outbox, and its reply (a `dispatch`
 *   batch) goes into the run queue. One of them is always out (parked at the runner when it has
 *   no work); the other carries outcomes that finish meanwhile. The runner keeps one `ready` per
 *   worker parked and releases the older one, so a fetch is always free within one round trip:
 *   outcomes are never held back, and under load they travel in batches (all that finished
 *   while both fetches were out).
 * - Room: serving several runners, every `ready` says how many more attempts the worker takes
 *   now (slots + prefetch minus what is queued or running, for all runners), and a runner
 *   dispatches no more than that in reply (serving one, the runner's own count is exact). When the
 * room changes (a slot frees, another runner's dispatch arrives), a link whose runner was last told
 * otherwise gets a fresh `ready` (which also releases its parked one), so a runner with a backlog
 * does not keep the slots from another that has work too, and a runner does not queue work here
 * that other workers have room for. Two runners told the same room at once may both fill it: the
 * extra attempts wait in the run queue (as prefetched ones do), at most the room given per runner.
 * - One thread per slot takes attempts from the run queue and runs them. One control thread
 *   per link says `hello` (the first one too: start() waits for the first welcome of any
 *   link), after each reconnect, then keeps a `control` request parked for `cancel`s.
 * - A control thread's aio is waited on synchronously (nng_aio_wait); another thread
 *   interrupts it with nng_aio_cancel, race-free because an operation is started only under
 *   w->mtx after checking the flags that the interrupting thread sets under w->mtx.
 * - Sessions: a link's `gen` counts its connections lost. A pipe removal (nng callback, never
 *   blocks) bumps gen, sets need_hello, drops that link's queued attempts and cancels its
 *   pending operations, so nothing is left for nng's REQ to re-send on the next pipe before
 *   the new `hello`. Outcomes of an older generation are dropped (the runner failed them with
 *   WorkerLost). Other links go on.
 * - REQ re-sends are off (NNG_OPT_REQ_RESENDTIME infinite): a parked `ready` may wait long.
 * - A reply to `control` that does not decode is logged and treated as a noop; one to `ready`
 *   starts a new session (it may have carried attempts we could never report).
 * - A cancel is matched against that link's running and queued attempts, and remembered (a
 *   few, per session) for a dispatch still on its way: a cancelled attempt that has not
 *   started is not run at all.
 *
 * Lock order: only w->mtx, for every link. nng calls made under it are asynchronous (ctx
 * send/recv, aio cancel); nng runs our aio callbacks on its own threads, never inside those
 * calls.
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
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "worker-protocol/include/cairn/worker.h"
#include "worker-protocol/nngclose.h"
#include "worker-protocol/proto.h"

#define SDK_NAME    "libcairn-worker 0.3.0"
#define SDK_FETCHES 2
/* Cancels remembered per session for dispatches not yet seen. */
#define SDK_CANCEL_MEMORY 64

enum sdk_fetch_state { FE_IDLE, FE_SEND, FE_RECV };

struct sdk_action {
    char *name;
    cairn_worker_handler fn;
    void *arg;
};

struct sdk_link;

/* A dispatched attempt, queued or running. */
struct sdk_item {
    struct wp_dispatch d; /* d.action points at `action`; kwargs owned */
    char *action;
    struct sdk_link *link; /* the runner it came from, its outcome goes back to */
    uint64_t gen;          /* that link's session */
    bool cancelled;        /* a cancel came before it started */
    struct sdk_item *next;
};

struct sdk_out {
    struct wp_outcome o; /* value owned */
    uint64_t gen;
};

struct sdk_fetch {
    struct sdk_link *l;
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
    struct sdk_link *link;
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

/* One runner served: its connection, session and requests. */
struct sdk_link {
    struct cairn_worker *w;
    char *url;
    /* protected by w->mtx */
    bool sock_open;
    bool failed;             /* refused after a hello: this runner is not served any more */
    bool need_hello;         /* connection lost since the last welcome */
    bool acked;              /* stop(): the runner acknowledged our goodbye */
    uint32_t hello_delay_ms; /* wait before that hello: grows while sessions keep failing */
    uint64_t gen;            /* connections lost so far */
    uint64_t welcomes;       /* sessions opened */
    bool ctl_started;
    bool ctl_busy;      /* control aio has an operation pending */
    uint32_t room_said; /* the room the latest `ready` sent here gave */
    struct sdk_out *outbox;
    uint32_t nout, capout;
    struct sdk_cancel cancels[SDK_CANCEL_MEMORY];
    uint32_t ncancels;     /* total remembered this session; the ring holds the latest */
    uint32_t npipes;       /* connections up (pipe callbacks) */
    nng_pipe ctl_pipe;     /* connection of the latest control reply */
    nng_pipe session_pipe; /* connection of the current session (its welcome) */
    uint32_t idle_ms;      /* from welcome: the runner answers a parked request within it */
    /* set up by start(), torn down by teardown */
    nng_socket sock;
    nng_dialer dialer;
    nng_ctx ctl_ctx;
    nng_aio *ctl_aio;
    pthread_t ctl_thread;
    struct sdk_fetch fetch[SDK_FETCHES];
};

/* Links one worker serves at most (include/cairn/worker.h). */
#define SDK_MAX_LINKS CAIRN_WORKER_MAX_URLS

struct cairn_worker {
    char *name;
    char *credential;
    char *tls_ca_file, *tls_cert_key_file, *tls_server_name;
    uint32_t nslots, prefetch;
    uint32_t reconnect_min_ms, reconnect_max_ms, start_timeout_ms;
    struct sdk_action *actions;
    uint32_t nactions;
    struct sdk_link *links[SDK_MAX_LINKS];
    uint32_t nlinks;
    char errtext[320]; /* mtx */

    pthread_mutex_t mtx;
    pthread_cond_t cond; /* state changes that stop(), start() and control threads wait for */
    pthread_cond_t work; /* slot threads wait here for the run queue */
    /* protected by mtx */
    bool started;    /* between start()'s first step and the end of stop() or a failed start */
    bool stopping;   /* stop() called: no new work asked for */
    bool slots_exit; /* teardown: slot threads end */
    struct sdk_item *rq_head, *rq_tail;
    uint32_t nqueued, nidle, nrunning;
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

/* Through the host process's log (ir/base/log.h): its level and format apply. A worker
 * serving several runners names the one concerned. */
static void
sdk_log(const struct sdk_link *l, enum cn_log_level level, const char *what, const char *detail)
{
    const struct cairn_worker *w = l->w;

    if (w->nlinks > 1) {
        cn_log(level, "worker %s (%s): %s%s%s", w->name, l->url, what, detail ? ": " : "",
               detail ? detail : "");
    } else {
        cn_log(level, "worker %s: %s%s%s", w->name, what, detail ? ": " : "", detail ? detail : "");
    }
}

static void sdk_errtext(struct sdk_link *l, const char *fmt, ...) CN_PRINTF(2, 3);

/* Sets the text cairn_worker_error returns; with several runners it names the one. */
static void
sdk_errtext(struct sdk_link *l, const char *fmt, ...)
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
static cn_err
sdk_fail(struct sdk_link *l, cn_err rv, const char *what, const char *detail)
{
    sdk_errtext(l, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
    sdk_log(l, CN_LOG_ERROR, what, detail);
    return rv;
}

/* Attempts the worker takes now, for every runner: slots + prefetch minus what is queued or
 * running. */
static uint32_t
sdk_room_locked(const struct cairn_worker *w)
{
    uint32_t cap = w->nslots + w->prefetch, used = w->nqueued + w->nrunning;

    return used < cap ? cap - used : 0;
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

/* Starts op (send when msg != NULL, else receive) on ctx/aio of link l unless its session
 * changed or the worker is stopping (`allow_stopping` lets a goodbye out). Waits for it.
 * Returns 0 or an nng error (NNG_ECANCELED when not started). On a failed send msg is freed. */
static int
sdk_op(struct sdk_link *l, nng_ctx ctx, nng_aio *aio, nng_msg *msg, uint64_t gen,
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

/* Receives a reply on l's control context and decodes it. An undecodable one is logged and
 * becomes a noop. */
static int
sdk_recv(struct sdk_link *l, uint64_t gen, bool allow_stopping, struct wp_msg *out)
{
    struct cn_errmsg em = {{0}};
    nng_msg *msg;
    int rv;

    wp_msg_init(out, WP_NOOP);
    if ((rv = sdk_op(l, l->ctl_ctx, l->ctl_aio, NULL, gen, allow_stopping, &l->ctl_busy)) != 0) {
        return rv;
    }
    msg = nng_aio_get_msg(l->ctl_aio);
    nng_aio_set_msg(l->ctl_aio, NULL);
    sdk_lock(l->w);
    l->ctl_pipe = nng_msg_get_pipe(msg); /* the connection to drop if the runner goes silent */
    sdk_unlock(l->w);
    if (wp_msg_decode(nng_msg_body(msg), nng_msg_len(msg), out, &em) != CN_OK) {
        sdk_log(l, CN_LOG_WARN, "undecodable reply, treated as noop", em.text);
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
    rv = sdk_msg_new(&m, &msg);
    free(names);
    if (rv != CN_OK) {
        return sdk_fail(l, rv, "cannot encode hello", cn_strerror(rv));
    }
    if ((nrv = sdk_op(l, l->ctl_ctx, l->ctl_aio, msg, gen, false, &l->ctl_busy)) != 0 ||
        (nrv = sdk_recv(l, gen, false, &r)) != 0) {
        /* not logged: the control thread retries, and start() says what it waited for */
        sdk_errtext(l, "hello not answered: %s", nng_strerror(nrv));
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
        sdk_errtext(l, "refused: %s", r.reason);
        sdk_log(l, CN_LOG_ERROR, "refused", r.reason);
        rv = CN_PROTO;
        break;
    case WP_NOOP:
        rv = CN_IO; /* retried by the caller */
        break;
    default:
        rv = sdk_fail(l, CN_PROTO, "unexpected reply to hello", wp_kind_name(r.kind));
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

/* Drops outcomes of l's older sessions: the runner already failed those attempts. */
static void
sdk_outbox_prune_locked(struct sdk_link *l)
{
    uint32_t i, n = 0;

    for (i = 0; i < l->nout; i++) {
        if (l->outbox[i].gen == l->gen) {
            l->outbox[n++] = l->outbox[i];
        } else {
            ir_val_release(l->outbox[i].o.value);
        }
    }
    l->nout = n;
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

/* Sends a `ready` on l's idle fetch f with as many outbox outcomes as fit in one message, and,
 * serving several runners, the room the worker has now. Serving one, it leaves the room to the
 * runner's count, which is never larger (it counts what is on its way both ways too) and never
 * stale: a `ready` parked while the slots were full would otherwise go on saying 0 after they
 * freed until the next outcome, as only several runners are told of changes. */
static void
sdk_send_ready_locked(struct sdk_link *l, struct sdk_fetch *f)
{
    uint32_t i, taken = 0, room = l->w->nlinks > 1 ? sdk_room_locked(l->w) : WP_ROOM_ANY;
    struct wp_batch b;
    nng_msg *msg = NULL;

    if (wp_batch_begin_ready(&b, room) != CN_OK) {
        return; /* out of memory: the next event tries again */
    }
    while (taken < l->nout && sdk_batch_outcome(&b, &l->outbox[taken].o) == CN_OK) {
        taken++;
    }
    wp_batch_finish(&b);
    if ((taken == 0 && l->nout > 0) || nng_msg_alloc(&msg, 0) != 0 ||
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
            ir_val_release(l->outbox[i].o.value);
        }
        memmove(l->outbox, l->outbox + taken, (l->nout - taken) * sizeof(*l->outbox));
        l->nout -= taken;
    }
    l->room_said = room;
    f->st = FE_SEND;
    f->gen = l->gen;
    nng_aio_set_msg(f->aio, msg);
    nng_ctx_send(f->ctx, f->aio);
}

/* Keeps l's protocol moving: outcomes waiting go out on an idle fetch, and one `ready` is
 * always out asking for work (unless stopping); with several runners, one whose latest `ready`
 * gave another room than the worker has now is told again (the runner then releases the older
 * one): more, so that it is not kept from slots another runner left; less, so that it sends
 * its work to workers that have room instead of queueing it here. Call after every change. */
static void
sdk_pump_locked(struct sdk_link *l)
{
    struct cairn_worker *w = l->w;
    uint32_t i;

    sdk_outbox_prune_locked(l);
    if (!l->sock_open || l->need_hello || l->failed) {
        return;
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        bool other_out = l->fetch[(i + 1) % SDK_FETCHES].st != FE_IDLE;
        bool room_moved = w->nlinks > 1 && sdk_room_locked(w) != l->room_said;

        if (l->fetch[i].st != FE_IDLE ||
            (l->nout == 0 && (w->stopping || (other_out && !room_moved)))) {
            continue;
        }
        sdk_send_ready_locked(l, &l->fetch[i]);
    }
}

/* Every link but `except` (NULL: every link), after a change of room (a slot freed, a
 * dispatch arrived, a session's attempts dropped). Serving one runner, that is no other. */
static void
sdk_pump_others_locked(struct cairn_worker *w, const struct sdk_link *except)
{
    uint32_t i;

    for (i = 0; i < w->nlinks; i++) {
        if (w->links[i] != except) {
            sdk_pump_locked(w->links[i]);
        }
    }
}

/* A remembered cancel matching d (consumed), if any. */
static bool
sdk_cancel_remembered_locked(struct sdk_link *l, const struct wp_dispatch *d)
{
    uint32_t i, n = l->ncancels < SDK_CANCEL_MEMORY ? l->ncancels : SDK_CANCEL_MEMORY;

    for (i = 0; i < n; i++) {
        struct sdk_cancel *c = &l->cancels[i];
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

/* Queues the attempts of a dispatch from l for the slots and wakes one idle slot; a slot that
 * takes an attempt wakes the next while more are queued. Waking one per attempt instead would
 * wake slots that find the queue already drained by a faster one: with short actions most
 * wake-ups would be wasted, and on a small machine they cost more than the actions. */
static void
sdk_enqueue_locked(struct sdk_link *l, const struct wp_msg *r)
{
    struct cairn_worker *w = l->w;
    uint32_t i;

    for (i = 0; i < r->nitems; i++) {
        struct sdk_item *it = cn_xcalloc(1, sizeof(*it));

        it->action = cn_xstrdup(r->items[i].action);
        it->d = r->items[i];
        it->d.action = it->action;
        it->d.kwargs = ir_val_retain(r->items[i].kwargs);
        it->d.last_error = ir_val_retain(r->items[i].last_error);
        it->link = l;
        it->gen = l->gen;
        it->cancelled = sdk_cancel_remembered_locked(l, &it->d);
        if (w->rq_tail != NULL) {
            w->rq_tail->next = it;
        } else {
            w->rq_head = it;
        }
        w->rq_tail = it;
        w->nqueued++;
    }
    if (w->nidle > 0 && w->rq_head != NULL) {
        cn_cond_signal(&w->work);
    }
}

static void sdk_session_lost_locked(struct sdk_link *l);

/* An attempt of l's session can no longer be reported (a dispatch that did not decode): end
 * the session and say hello again on the same connection. The runner treats a hello on a
 * connection that has a session as a new session and fails what the old one held with
 * WorkerLost, freeing its room, instead of keeping that room taken for good. (Closing the
 * pipe would do the same, but nng 1.5.2 can hang in a later nng_close after nng_pipe_close.) */
static void
sdk_drop_locked(struct sdk_link *l, const char *why)
{
    if (l->sock_open && !l->need_hello) {
        sdk_log(l, CN_LOG_WARN, "starting a new session", why);
        sdk_session_lost_locked(l);
        /* A runner that garbles every session would otherwise be asked a thousand times a
         * second; back off as a reconnect does. A reply that decodes resets it. */
        l->hello_delay_ms = l->hello_delay_ms == 0 ? l->w->reconnect_min_ms
                            : l->hello_delay_ms >= l->w->reconnect_max_ms / 2
                                ? l->w->reconnect_max_ms
                                : 2 * l->hello_delay_ms;
    }
}

/* nng callback for a fetch's aio: never blocks for long (decodes, queues, pumps). */
static void
sdk_fetch_cb(void *arg)
{
    struct sdk_fetch *f = arg;
    struct sdk_link *l = f->l;
    struct cairn_worker *w = l->w;
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
            sdk_log(l, CN_LOG_WARN, "undecodable reply to ready", em.text);
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
            if (f->gen != l->gen || !l->sock_open) {
                /* The connection dropped as the send finished: withdraw the request, or
                 * nng's REQ would resend it on the next connection before our hello. */
                nng_aio_cancel(f->aio);
            }
        }
    } else if (st == FE_RECV) {
        f->st = FE_IDLE;
        if (undecodable && f->gen == l->gen) {
            sdk_drop_locked(l, "a reply to ready did not decode");
        } else if (r.kind == WP_DISPATCH) {
            /* Run even while stopping: the runner assigned it before it saw our goodbye,
             * and stop() waits for it. Not from an older session (the runner failed those
             * with WorkerLost when that connection dropped), nor once teardown began. */
            if (f->gen == l->gen && l->sock_open) {
                l->hello_delay_ms = 0;
                sdk_enqueue_locked(l, &r);
            } else {
                sdk_log(l, CN_LOG_INFO, "dispatch from a previous connection: not run", NULL);
            }
        } else if (rv == 0 && r.kind != WP_NOOP) {
            sdk_log(l, CN_LOG_WARN, "unexpected reply to ready, treated as noop",
                    wp_kind_name(r.kind));
        } else if (rv == 0 && f->gen == l->gen) {
            l->hello_delay_ms = 0;
        }
    }
    if (rv != NNG_ECLOSED) {
        sdk_pump_locked(l);
        sdk_pump_others_locked(w, l); /* a dispatch took room the others were told of */
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
    struct sdk_link *l;
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
        w->nqueued--;
        s->running = true;
        s->link = it->link;
        memcpy(s->exec_id, it->d.exec_id, 16);
        s->attempt = it->d.attempt;
        s->token = it->d.token;
        atomic_store_explicit(&s->cancelled, it->cancelled, memory_order_relaxed);
        w->nrunning++;
        sdk_unlock(w);
        sdk_run(s, it, &o);
        sdk_lock(w);
        s->running = false;
        s->link = NULL;
        w->nrunning--;
        l = it->link;
        if (l->nout == l->capout) {
            l->capout = l->capout ? l->capout * 2 : 16;
            l->outbox = cn_xreallocarray(l->outbox, l->capout, sizeof(*l->outbox));
        }
        l->outbox[l->nout].o = o;
        l->outbox[l->nout].gen = it->gen;
        l->nout++;
        sdk_pump_locked(l); /* its outcome first: the slot is free for that runner too */
        sdk_pump_others_locked(w, l);
        sdk_broadcast(w);
        sdk_unlock(w);
        sdk_item_free(it);
        sdk_lock(w);
    }
    sdk_unlock(w);
    return NULL;
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

/* Frees the queued attempts of link l, or of every link when l is NULL (they will not run). */
static void
sdk_runq_clear_locked(struct cairn_worker *w, const struct sdk_link *l)
{
    struct sdk_item *it, *next, *keep = NULL, *tail = NULL;

    for (it = w->rq_head; it != NULL; it = next) {
        next = it->next;
        if (l == NULL || it->link == l) {
            sdk_item_free(it);
            w->nqueued--;
            continue;
        }
        it->next = NULL;
        if (tail != NULL) {
            tail->next = it;
        } else {
            keep = it;
        }
        tail = it;
    }
    w->rq_head = keep;
    w->rq_tail = tail;
}

/* Withdraws every request l has out (their callbacks then see NNG_ECANCELED). */
static void
sdk_cancel_ops_locked(struct sdk_link *l)
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

/* l's session is over: what it dispatched is dropped (the runner fails it with WorkerLost),
 * nothing is sent to it until the next welcome, and the other runners get the room. */
static void
sdk_session_lost_locked(struct sdk_link *l)
{
    l->gen++;
    l->need_hello = true;
    l->ncancels = 0;
    sdk_runq_clear_locked(l->w, l);
    sdk_cancel_ops_locked(l);
    if (!l->w->stopping) {
        sdk_pump_others_locked(l->w, l);
    }
    sdk_broadcast(l->w);
}

/* Waits (bounded) until no fetch of l has a request out. The SDK withdraws its requests
 * before it closes a pipe or the socket, so that nng's REQ has nothing to reschedule while
 * closing (nng 1.5.2 has known hangs in nng_close around that: nanomsg/nng#1543, #1813). */
static void
sdk_fetches_idle_locked(struct sdk_link *l)
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

static void *
sdk_ctl_main(void *arg)
{
    struct sdk_link *l = arg;
    struct cairn_worker *w = l->w;
    struct wp_msg m, r;
    bool hello, done;
    nng_duration silence;
    nng_msg *msg;
    uint64_t gen;
    cn_err rv;
    int nrv;

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
                sdk_pump_locked(l); /* ask for work in the new session */
            } else if (rv == CN_PROTO) {
                l->failed = true; /* refused: this runner is not served; running() tells */
            } else if (rv != CN_OK && !w->stopping) {
                (void) sdk_wait_until(w, cn_mono_ms() + w->reconnect_min_ms);
            }
            sdk_broadcast(w);
            sdk_unlock(w);
            continue;
        }
        wp_msg_init(&m, WP_CONTROL);
        if ((rv = sdk_msg_new(&m, &msg)) != CN_OK) {
            sdk_log(l, CN_LOG_ERROR, "cannot build control", cn_strerror(rv));
            break;
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
        nrv = sdk_op(l, l->ctl_ctx, l->ctl_aio, msg, gen, false, &l->ctl_busy);
        if (nrv == 0) {
            nrv = sdk_recv(l, gen, false, &r);
        }
        nng_aio_set_timeout(l->ctl_aio, NNG_DURATION_INFINITE);
        if (nrv == NNG_ECLOSED) {
            break;
        }
        if (nrv == NNG_ETIMEDOUT) {
            nng_pipe pp;

            sdk_log(l, CN_LOG_WARN, "runner silent for three idle periods: reconnecting", NULL);
            sdk_lock(w);
            pp = l->session_pipe;
            sdk_session_lost_locked(l);
            sdk_fetches_idle_locked(l);
            sdk_unlock(w);
            (void) nng_pipe_close(pp);
            continue;
        }
        if (nrv != 0) {
            continue;
        }
        if (r.kind == WP_CANCEL) {
            sdk_cancel_attempt(l, &r);
        } else if (r.kind != WP_NOOP && r.kind != WP_ACK) {
            sdk_log(l, CN_LOG_WARN, "unexpected reply to control, treated as noop",
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
        sdk_session_lost_locked(l);
    }
    /* else an older connection closing late (after the heartbeat dropped it and a new session
     * began): nothing of the current session was on it. */
    sdk_unlock(w);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

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

/* Closes l's dialer, contexts and socket. The dialer (waiting for its connection to be gone),
 * the contexts, then the socket: nng 1.5.2 can hang in nng_close when it has to tear those
 * down itself, more so while replies to withdrawn requests still arrive (wp_close_bounded). */
static void
sdk_link_close(struct sdk_link *l)
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
        sdk_log(l, CN_LOG_WARN, "socket close did not finish (nng 1.5.2 bug); left behind", NULL);
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
    sdk_runq_clear_locked(w, NULL);
    cn_cond_broadcast(&w->work);
    for (k = 0; k < w->nlinks; k++) {
        struct sdk_link *l = w->links[k];

        was_open[k] = l->sock_open;
        l->sock_open = false; /* no new operation starts from here */
        sdk_cancel_ops_locked(l);
    }
    sdk_broadcast(w);
    sdk_unlock(w);
    for (k = 0; k < w->nlinks; k++) {
        if (w->links[k]->ctl_started) {
            (void) pthread_join(w->links[k]->ctl_thread, NULL);
            w->links[k]->ctl_started = false;
        }
    }
    for (k = 0; k < w->nlinks; k++) {
        sdk_lock(w);
        sdk_fetches_idle_locked(w->links[k]);
        sdk_unlock(w);
        if (was_open[k]) {
            sdk_link_close(w->links[k]);
        }
    }
    for (i = 0; w->slots != NULL && i < w->nslots; i++) {
        if (w->slots[i].thread_started) {
            (void) pthread_join(w->slots[i].thread, NULL);
        }
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
static cn_err
sdk_link_open(struct sdk_link *l)
{
    struct cairn_worker *w = l->w;
    uint32_t i;
    int nrv;

    l->npipes = 0;
    if ((nrv = nng_req0_open(&l->sock)) != 0) {
        return sdk_fail(l, sdk_nng_err(nrv), "cannot open socket", nng_strerror(nrv));
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
        return sdk_fail(l, sdk_nng_err(nrv), "cannot set up socket", nng_strerror(nrv));
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        l->fetch[i].l = l;
        l->fetch[i].st = FE_IDLE;
        if ((nrv = nng_ctx_open(&l->fetch[i].ctx, l->sock)) != 0 ||
            (nrv = nng_aio_alloc(&l->fetch[i].aio, sdk_fetch_cb, &l->fetch[i])) != 0) {
            return sdk_fail(l, sdk_nng_err(nrv), "cannot set up socket", nng_strerror(nrv));
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
        return sdk_fail(l, sdk_nng_err(nrv), "cannot dial", nng_strerror(nrv));
    }
    return CN_OK;
}

cn_err
cairn_worker_start(struct cairn_worker *w)
{
    int64_t deadline;
    uint32_t i, k, welcomed, refused;
    cn_err rv = CN_OK;

    sdk_lock(w);
    w->errtext[0] = '\0';
    sdk_unlock(w);
    if (w->started || w->nactions == 0) {
        return sdk_fail(w->links[0], CN_INVAL, "cannot start",
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
        if ((rv = sdk_link_open(w->links[k])) != CN_OK) {
            goto fail;
        }
    }
    /* The control threads say hello; start() returns once any runner welcomed the worker (the
     * others are greeted as they come up), or fails when every one refused it. */
    for (k = 0; k < w->nlinks; k++) {
        if (pthread_create(&w->links[k]->ctl_thread, NULL, sdk_ctl_main, w->links[k]) != 0) {
            abort();
        }
        w->links[k]->ctl_started = true;
    }
    for (i = 0; i < w->nslots; i++) {
        if (pthread_create(&w->slots[i].thread, NULL, sdk_slot_main, &w->slots[i]) != 0) {
            abort();
        }
        w->slots[i].thread_started = true;
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
    for (k = 0; k < w->nlinks; k++) {
        if (w->links[k]->ctl_started) {
            (void) pthread_join(w->links[k]->ctl_thread, NULL);
            w->links[k]->ctl_started = false;
        }
    }
    /* Goodbye first, so the runners stop dispatching to us; then let what runs finish. */
    for (k = 0; k < w->nlinks; k++) {
        struct sdk_link *l = w->links[k];
        int64_t left = deadline - cn_mono_ms();

        if (!connected[k]) {
            continue;
        }
        nng_aio_set_timeout(l->ctl_aio, (nng_duration) (left > 1000 ? left : 1000));
        wp_msg_init(&m, WP_GOODBYE);
        if (sdk_msg_new(&m, &msg) == CN_OK &&
            sdk_op(l, l->ctl_ctx, l->ctl_aio, msg, gen[k], true, &l->ctl_busy) == 0 &&
            sdk_recv(l, gen[k], true, &r) == 0) {
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
