/* SPDX-License-Identifier: MIT */
/* Worker SDK tests: a real SDK worker (include/cairn/worker.h) talks to a fake runner, an nng
 * REP socket in this process on ipc:///tmp/cairn-sdk-test-<pid>-<n>.sock that answers with
 * wp_msg messages per docs/protocol.md. The fake runner's thread answers every request:
 * hello -> welcome (or refused), control -> parked (a test may answer it with a cancel),
 * goodbye -> ack, ready -> every queued attempt in one dispatch, else noop for the first
 * `noops` readies, else parked (releasing an older parked ready with a noop, as the pool
 * does). Every request is recorded in order.
 * Waits have deadlines; nothing sleeps a fixed time. nng_fini() is never called (Criterion
 * uses nng itself). */
#include <cairn/worker.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "ir/error.h"
#include "tests/support/compile_util.h"
#include "tests/support/leak.h"
#include "tests/support/wait.h"
#include "worker-protocol/proto.h"

TestSuite(wp_sdk, .fini = t_leak_check_nng, .timeout = 30);

#define FR_CTXS  8
#define FR_LOG   64
#define FR_QUEUE 8
#define WAIT_MS  5000

/* Checks in the fake runner's thread, where Criterion's asserts must not be used. */
#define FR_CHECK(cond)                                                                           \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: fake runner check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

/* The aio callbacks get the index through this. */
struct fr_cbarg {
    struct fr *f;
    size_t i;
};

struct fr {
    nng_socket sock;
    struct fr_cbarg cb[FR_CTXS];
    char url[128];
    nng_ctx ctx[FR_CTXS];
    nng_aio *rx[FR_CTXS];
    nng_aio *tx[FR_CTXS];
    pthread_t thread;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    /* protected by mtx */
    bool stop;
    bool arrived[FR_CTXS]; /* a request waits in rx[i] */
    bool parked_ready[FR_CTXS];
    bool parked_ctl[FR_CTXS];
    struct wp_msg log[FR_LOG];
    size_t nlog;
    struct wp_dispatch queue[FR_QUEUE]; /* attempts to hand out (kwargs owned) */
    size_t nqueue;
    bool hold;            /* do not hand them out yet */
    struct wp_msg cancel; /* to send on the parked control request */
    bool cancel_pending;
    bool left;        /* goodbye received: readies get a noop at once */
    uint32_t idle_ms; /* sent in welcome (default 20000) */
    bool answer_idle; /* answer a control parked for idle_ms with a noop */
    int64_t ctl_parked_at[FR_CTXS];
    int noops;          /* readies to answer with noop first */
    const char *refuse; /* refuse hello with this reason */
};

static int64_t
now_ms(void)
{
    return t_clock_ms(CLOCK_MONOTONIC);
}

static void
fr_timedwait(struct fr *f, int64_t ms)
{
    struct timespec ts = t_deadline_in(ms);

    pthread_cond_timedwait(&f->cond, &f->mtx, &ts);
}


static void
fr_arrive(void *arg)
{
    struct fr_cbarg *a = arg;

    pthread_mutex_lock(&a->f->mtx);
    if (nng_aio_result(a->f->rx[a->i]) == 0) {
        a->f->arrived[a->i] = true;
    }
    pthread_cond_broadcast(&a->f->cond);
    pthread_mutex_unlock(&a->f->mtx);
}

/* Sends reply m on context i (runner thread, without the lock) and re-arms its receive. */
static void
fr_reply(struct fr *f, size_t i, const struct wp_msg *m)
{
    struct cn_buf b = CN_BUF_INIT;
    nng_msg *msg;

    FR_CHECK(wp_msg_encode(m, &b) == CN_OK);
    FR_CHECK(nng_msg_alloc(&msg, 0) == 0);
    FR_CHECK(nng_msg_append(msg, b.data, b.len) == 0);
    cn_buf_fini(&b);
    nng_aio_set_msg(f->tx[i], msg);
    nng_ctx_send(f->ctx[i], f->tx[i]);
    nng_aio_wait(f->tx[i]);
    if (nng_aio_result(f->tx[i]) != 0) {
        nng_msg_free(nng_aio_get_msg(f->tx[i]));
    }
    nng_ctx_recv(f->ctx[i], f->rx[i]);
}

static void
fr_reply_kind(struct fr *f, size_t i, enum wp_kind k)
{
    struct wp_msg m;

    wp_msg_init(&m, k);
    m.session = 1;
    m.idle_ms = f->idle_ms != 0 ? f->idle_ms : 20000;
    m.reason = f->refuse;
    fr_reply(f, i, &m);
}

static void *
fr_main(void *arg)
{
    struct fr *f = arg;
    struct cn_errmsg em;

    pthread_mutex_lock(&f->mtx);
    while (!f->stop) {
        size_t i, pick = FR_CTXS;
        struct wp_msg m, d;
        nng_msg *msg;

        for (i = 0; i < FR_CTXS && pick == FR_CTXS; i++) {
            if (f->arrived[i]) {
                pick = i;
            }
        }
        if (pick == FR_CTXS) {
            bool acted = false;

            /* a parked control request carries a cancel asked for */
            for (i = 0; i < FR_CTXS && f->cancel_pending; i++) {
                if (f->parked_ctl[i]) {
                    f->parked_ctl[i] = false;
                    f->cancel_pending = false;
                    d = f->cancel;
                    pthread_mutex_unlock(&f->mtx);
                    fr_reply(f, i, &d);
                    pthread_mutex_lock(&f->mtx);
                    acted = true;
                }
            }
            /* a parked ready gets every queued attempt */
            for (i = 0; i < FR_CTXS && f->nqueue > 0 && !f->hold; i++) {
                if (f->parked_ready[i]) {
                    struct wp_dispatch items[FR_QUEUE];
                    size_t k, n = f->nqueue;

                    memcpy(items, f->queue, n * sizeof(items[0]));
                    f->nqueue = 0;
                    f->parked_ready[i] = false;
                    wp_msg_init(&d, WP_DISPATCH);
                    d.items = items;
                    d.nitems = (uint32_t) n;
                    pthread_mutex_unlock(&f->mtx);
                    fr_reply(f, i, &d);
                    for (k = 0; k < n; k++) {
                        ir_val_release(items[k].kwargs);
                        ir_val_release(items[k].last_error);
                    }
                    pthread_mutex_lock(&f->mtx);
                    acted = true;
                    break;
                }
            }
            /* the idle cycle, when this fake runner is alive */
            for (i = 0; i < FR_CTXS && f->answer_idle; i++) {
                if (f->parked_ctl[i] && now_ms() - f->ctl_parked_at[i] >= (int64_t) f->idle_ms) {
                    f->parked_ctl[i] = false;
                    pthread_mutex_unlock(&f->mtx);
                    fr_reply_kind(f, i, WP_NOOP);
                    pthread_mutex_lock(&f->mtx);
                    acted = true;
                }
            }
            if (!acted) {
                fr_timedwait(f, 20);
            }
            continue;
        }
        f->arrived[pick] = false;
        msg = nng_aio_get_msg(f->rx[pick]);
        FR_CHECK(wp_msg_decode(nng_msg_body(msg), nng_msg_len(msg), &m, &em) == CN_OK);
        nng_msg_free(msg);
        FR_CHECK(f->nlog < FR_LOG);
        f->log[f->nlog++] = m;
        pthread_cond_broadcast(&f->cond);
        switch (m.kind) {
        case WP_HELLO:
            pthread_mutex_unlock(&f->mtx);
            fr_reply_kind(f, pick, f->refuse != NULL ? WP_REFUSED : WP_WELCOME);
            pthread_mutex_lock(&f->mtx);
            break;
        case WP_GOODBYE:
            f->left = true;
            /* As the runner does: parked readies get their last reply (noop) before the ack. */
            for (i = 0; i < FR_CTXS; i++) {
                if (f->parked_ready[i]) {
                    f->parked_ready[i] = false;
                    pthread_mutex_unlock(&f->mtx);
                    fr_reply_kind(f, i, WP_NOOP);
                    pthread_mutex_lock(&f->mtx);
                }
            }
            pthread_mutex_unlock(&f->mtx);
            fr_reply_kind(f, pick, WP_ACK);
            pthread_mutex_lock(&f->mtx);
            break;
        case WP_READY:
            if (f->noops > 0 || f->left) {
                f->noops -= f->noops > 0;
                pthread_mutex_unlock(&f->mtx);
                fr_reply_kind(f, pick, WP_NOOP);
                pthread_mutex_lock(&f->mtx);
            } else {
                for (i = 0; i < FR_CTXS; i++) {
                    if (f->parked_ready[i]) {
                        f->parked_ready[i] = false;
                        pthread_mutex_unlock(&f->mtx);
                        fr_reply_kind(f, i, WP_NOOP);
                        pthread_mutex_lock(&f->mtx);
                    }
                }
                f->parked_ready[pick] = true;
            }
            break;
        default: /* control: parked until a test asks for a cancel (or the idle cycle) */
            f->parked_ctl[pick] = true;
            f->ctl_parked_at[pick] = now_ms();
            break;
        }
    }
    pthread_mutex_unlock(&f->mtx);
    return NULL;
}

static struct fr *
fr_start(void)
{
    static atomic_int seq;
    struct fr *f = calloc(1, sizeof(*f));
    size_t i;

    cr_assert_not_null(f);
    snprintf(f->url, sizeof(f->url), "ipc:///tmp/cairn-sdk-test-%ld-%d.sock", (long) getpid(),
             atomic_fetch_add(&seq, 1));
    unlink(f->url + strlen("ipc://"));
    pthread_mutex_init(&f->mtx, NULL);
    pthread_cond_init(&f->cond, NULL);
    cr_assert_eq(nng_rep0_open(&f->sock), 0);
    cr_assert_eq(nng_socket_set_size(f->sock, NNG_OPT_RECVMAXSZ, WP_MAX_MSG), 0);
    cr_assert_eq(nng_listen(f->sock, f->url, NULL, 0), 0);
    for (i = 0; i < FR_CTXS; i++) {
        f->cb[i].f = f;
        f->cb[i].i = i;
        cr_assert_eq(nng_ctx_open(&f->ctx[i], f->sock), 0);
        cr_assert_eq(nng_aio_alloc(&f->rx[i], fr_arrive, &f->cb[i]), 0);
        cr_assert_eq(nng_aio_alloc(&f->tx[i], NULL, NULL), 0);
        nng_aio_set_timeout(f->tx[i], 2000);
        nng_ctx_recv(f->ctx[i], f->rx[i]);
    }
    cr_assert_eq(pthread_create(&f->thread, NULL, fr_main, f), 0);
    return f;
}

static void
fr_free(struct fr *f)
{
    size_t i;

    pthread_mutex_lock(&f->mtx);
    f->stop = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mtx);
    pthread_join(f->thread, NULL);
    nng_close(f->sock);
    for (i = 0; i < FR_CTXS; i++) {
        nng_aio_wait(f->rx[i]);
        if (f->arrived[i] && nng_aio_get_msg(f->rx[i]) != NULL) {
            /* a request the runner's thread never took (a worker still talking to it) */
            nng_msg_free(nng_aio_get_msg(f->rx[i]));
        }
        nng_aio_free(f->rx[i]);
        nng_aio_free(f->tx[i]);
    }
    for (i = 0; i < f->nlog; i++) {
        wp_msg_fini(&f->log[i]);
    }
    for (i = 0; i < f->nqueue; i++) {
        ir_val_release(f->queue[i].kwargs);
        ir_val_release(f->queue[i].last_error);
    }
    unlink(f->url + strlen("ipc://"));
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mtx);
    free(f);
}

/* Queues a dispatch of action with kwargs (JSON text), and the previous attempt's error (an
 * error value, taken over; None for a first attempt). */
static void
fr_dispatch_after(struct fr *f, const char *action, const char *kwargs, uint8_t id,
                  uint32_t attempt, uint64_t token, struct ir_val last_error)
{
    struct cn_errmsg em;
    struct wp_dispatch d;

    memset(&d, 0, sizeof(d));
    memset(d.instance_id, 0xAB, 16);
    memset(d.exec_id, id, 16);
    d.attempt = attempt;
    d.token = token;
    d.action = action; /* a string literal: outlives the queue */
    d.deadline_ms = 4102444800000LL;
    d.last_error = last_error;
    cr_assert_eq(ir_val_from_json(kwargs, strlen(kwargs), &d.kwargs, &em), CN_OK);
    pthread_mutex_lock(&f->mtx);
    cr_assert_lt(f->nqueue, FR_QUEUE);
    f->queue[f->nqueue++] = d;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mtx);
}

/* Queues a dispatch of action with kwargs (JSON text). */
static void
fr_dispatch(struct fr *f, const char *action, const char *kwargs, uint8_t id, uint32_t attempt,
            uint64_t token)
{
    fr_dispatch_after(f, action, kwargs, id, attempt, token, ir_null());
}

/* Asks for a cancel of (id, attempt, token) on the next parked control request. */
static void
fr_cancel(struct fr *f, uint8_t id, uint32_t attempt, uint64_t token)
{
    pthread_mutex_lock(&f->mtx);
    wp_msg_init(&f->cancel, WP_CANCEL);
    memset(f->cancel.exec_id, id, 16);
    f->cancel.attempt = attempt;
    f->cancel.token = token;
    f->cancel_pending = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mtx);
}

/* The outcome for token, from any logged ready, waiting up to WAIT_MS; NULL if none came. */
static const struct wp_outcome *
fr_await_outcome(struct fr *f, uint64_t token)
{
    int64_t deadline = now_ms() + WAIT_MS;
    const struct wp_outcome *found = NULL;

    pthread_mutex_lock(&f->mtx);
    while (found == NULL && now_ms() < deadline) {
        size_t i;
        uint32_t k;

        for (i = 0; i < f->nlog && found == NULL; i++) {
            for (k = 0; f->log[i].kind == WP_READY && k < f->log[i].noutcomes; k++) {
                if (f->log[i].outcomes[k].token == token) {
                    found = &f->log[i].outcomes[k];
                }
            }
        }
        if (found == NULL) {
            fr_timedwait(f, 50);
        }
    }
    pthread_mutex_unlock(&f->mtx);
    return found;
}

/* Index in the log of the n-th (0-based) message of kind k for which `outcome` matches
 * (-1: any, 0: no outcomes, 1: with outcomes), waiting up to WAIT_MS; -1 if none came. */
static long
fr_await(struct fr *f, enum wp_kind k, int outcome, int n)
{
    int64_t deadline = now_ms() + WAIT_MS;
    long found = -1;

    pthread_mutex_lock(&f->mtx);
    while (found < 0 && now_ms() < deadline) {
        int seen = 0;
        size_t i;

        for (i = 0; i < f->nlog && found < 0; i++) {
            if (f->log[i].kind == k &&
                (outcome < 0 || (int) (f->log[i].noutcomes > 0) == outcome) && seen++ == n) {
                found = (long) i;
            }
        }
        if (found < 0) {
            fr_timedwait(f, 50);
        }
    }
    pthread_mutex_unlock(&f->mtx);
    return found;
}

/* Index in the log of the first `ready` at or after index `from` that gives room `room`,
 * waiting up to WAIT_MS; -1 if none came. */
static long
fr_await_room(struct fr *f, size_t from, uint32_t room)
{
    int64_t deadline = now_ms() + WAIT_MS;
    long found = -1;

    pthread_mutex_lock(&f->mtx);
    while (found < 0 && now_ms() < deadline) {
        size_t i;

        for (i = from; i < f->nlog && found < 0; i++) {
            if (f->log[i].kind == WP_READY && f->log[i].room == room) {
                found = (long) i;
            }
        }
        if (found < 0) {
            fr_timedwait(f, 50);
        }
    }
    pthread_mutex_unlock(&f->mtx);
    return found;
}

/* Number of logged messages of kind k, now. */
static size_t
fr_count(struct fr *f, enum wp_kind k)
{
    size_t i, n = 0;

    pthread_mutex_lock(&f->mtx);
    for (i = 0; i < f->nlog; i++) {
        n += f->log[i].kind == k;
    }
    pthread_mutex_unlock(&f->mtx);
    return n;
}

/* ---- handlers ------------------------------------------------------------------------------- */

static cn_err
h_echo(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    const struct ir_val *v = ir_map_get(kwargs, "value", 5);

    (void) ctx;
    (void) arg;
    *out = v != NULL ? ir_val_retain(*v) : ir_null();
    return CN_OK;
}

static cn_err
h_fail(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    struct ir_val bases;

    (void) ctx;
    (void) kwargs;
    (void) arg;
    T_OK(ir_list_new(2, &bases));
    T_OK(ir_str_from_cstr("LookupError", &ir_list_items(bases)[0]));
    T_OK(ir_str_from_cstr("Exception", &ir_list_items(bases)[1]));
    return cairn_worker_error_new("KeyError", "'k'", bases, out);
}

/* Returns the previous attempt's error message, None on a first attempt. */
static cn_err
h_last(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    const struct ir_val *m =
        ctx->last_error.type == IR_T_MAP ? ir_map_get(ctx->last_error, "message", 7) : NULL;

    (void) kwargs;
    (void) arg;
    *out = m != NULL ? ir_val_retain(*m) : ir_null();
    return CN_OK;
}

/* Returns only once stop() has begun (bounded), so stop must wait for it. */
static atomic_bool gate_entered;

static cn_err
h_gate(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    struct cairn_worker *w = arg;
    int64_t deadline = now_ms() + WAIT_MS;

    (void) ctx;
    (void) kwargs;
    atomic_store(&gate_entered, true);
    while (cairn_worker_running(w) && now_ms() < deadline) {
        struct timespec ts = {0, 1000000};

        nanosleep(&ts, NULL);
    }
    return ir_str_from_cstr("finished", out);
}

/* Blocks until block_release is set (bounded). */
static atomic_bool block_entered, block_release;
static atomic_int block_runs;

static cn_err
h_block(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    int64_t deadline = now_ms() + WAIT_MS;

    (void) ctx;
    (void) kwargs;
    (void) arg;
    atomic_fetch_add(&block_runs, 1);
    atomic_store(&block_entered, true);
    while (!atomic_load(&block_release) && now_ms() < deadline) {
        struct timespec ts = {0, 1000000};

        nanosleep(&ts, NULL);
    }
    *out = ir_null();
    return CN_OK;
}

/* Returns an error value that lacks its "type". */
static cn_err
h_typeless(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    (void) ctx;
    (void) kwargs;
    (void) arg;
    T_OK(ir_map_new(1, out));
    T_OK(ir_map_set_cstr(out, "message", ir_int(1)));
    ir_map_set_error(out, true);
    return CN_OK;
}

static struct cairn_worker *
worker_new_pf(struct fr *f, uint32_t slots, uint32_t prefetch)
{
    struct cairn_worker_options o;
    struct cairn_worker *w;

    memset(&o, 0, sizeof(o));
    o.name = "w-test";
    o.slots = slots;
    o.prefetch = prefetch;
    o.credential = "tok";
    o.reconnect_min_ms = 10;
    o.reconnect_max_ms = 100;
    o.start_timeout_ms = WAIT_MS;
    T_OK(cairn_worker_new(f->url, &o, &w));
    T_OK(cairn_worker_register(w, "t.echo", h_echo, NULL));
    T_OK(cairn_worker_register(w, "t.fail", h_fail, NULL));
    T_OK(cairn_worker_register(w, "t.gate", h_gate, w));
    T_OK(cairn_worker_register(w, "t.block", h_block, NULL));
    T_OK(cairn_worker_register(w, "t.typeless", h_typeless, NULL));
    T_OK(cairn_worker_register(w, "t.last", h_last, NULL));
    return w;
}

static struct cairn_worker *
worker_new(struct fr *f, uint32_t slots)
{
    return worker_new_pf(f, slots, 0);
}

/* ---- tests ---------------------------------------------------------------------------------- */

Test(wp_sdk, hello_carries_identity)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new_pf(f, 2, 5);
    long h;

    T_ERR(cairn_worker_register(w, "t.echo", h_echo, NULL), CN_INVAL); /* duplicate */
    T_OK(cairn_worker_start(w));
    cr_assert(cairn_worker_running(w));
    h = fr_await(f, WP_HELLO, -1, 0);
    cr_assert_eq(h, 0, "hello must be the first message");
    cr_assert_str_eq(f->log[h].worker, "w-test");
    cr_assert_str_eq(f->log[h].credential, "tok");
    cr_assert_eq(f->log[h].slots, 2);
    cr_assert_eq(f->log[h].prefetch, 5);
    cr_assert_eq(f->log[h].nactions, 6);
    cr_assert_str_eq(f->log[h].actions[0], "t.echo");
    cr_assert_str_eq(f->log[h].actions[2], "t.gate");
    cr_assert_not_null(strstr(f->log[h].sdk, "libcairn-worker"));
    /* a ready asks for work, and the control request is parked */
    cr_assert_geq(fr_await(f, WP_READY, 0, 0), 0);
    cr_assert_geq(fr_await(f, WP_CONTROL, -1, 0), 0);
    T_ERR(cairn_worker_register(w, "t.late", h_echo, NULL), CN_INVAL); /* after start */
    cairn_worker_stop(w, 1000);
    cr_assert(!cairn_worker_running(w));
    cairn_worker_free(w);
    fr_free(f);
}

Test(wp_sdk, result_comes_back_in_next_ready)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new(f, 1);
    const char *want_text = "[1, \"x\", {\"k\": null}]";
    struct ir_val want;
    struct cn_errmsg em;
    uint8_t id[16];
    const struct wp_outcome *o;

    T_OK(cairn_worker_start(w));
    fr_dispatch(f, "t.echo", "{\"value\": [1, \"x\", {\"k\": null}]}", 0x11, 3, 77);
    o = fr_await_outcome(f, 77);
    cr_assert_not_null(o, "no outcome came back");
    memset(id, 0x11, 16);
    cr_assert_eq(memcmp(o->exec_id, id, 16), 0);
    cr_assert_eq(o->attempt, 3);
    cr_assert(o->ok);
    cr_assert_eq(ir_val_from_json(want_text, strlen(want_text), &want, &em), CN_OK);
    cr_assert(ir_val_same(o->value, want));
    ir_val_release(want);
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(f);
}

/* A retry's handler sees the previous attempt's error in its context; a first attempt's none. */
Test(wp_sdk, a_retry_sees_the_previous_attempts_error)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new(f, 1);
    struct ir_val prev;
    const struct wp_outcome *o;

    T_OK(cairn_worker_start(w));
    T_OK(ir_error_new("Boom", "it broke", ir_null(), ir_null(), &prev));
    fr_dispatch_after(f, "t.last", "{}", 0x21, 2, 81, prev);
    fr_dispatch(f, "t.last", "{}", 0x22, 1, 82);
    o = fr_await_outcome(f, 81);
    cr_assert_not_null(o, "no outcome came back");
    cr_assert(o->ok);
    cr_assert_eq(o->value.type, IR_T_STR);
    cr_assert_str_eq(ir_str_data(o->value), "it broke");
    o = fr_await_outcome(f, 82);
    cr_assert_not_null(o, "no outcome came back");
    cr_assert_eq(o->value.type, IR_T_NULL);
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(f);
}

Test(wp_sdk, error_arrives_with_ok_false)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new(f, 1);
    const struct ir_val *type;
    const struct wp_outcome *o;

    T_OK(cairn_worker_start(w));
    fr_dispatch(f, "t.fail", "{}", 0x22, 1, 5);
    fr_dispatch(f, "t.unknown", "{}", 0x23, 1, 6);
    o = fr_await_outcome(f, 5);
    cr_assert_not_null(o);
    cr_assert(!o->ok);
    type = ir_map_get(o->value, "type", 4);
    cr_assert_not_null(type);
    cr_assert_str_eq(ir_str_data(*type), "KeyError");
    cr_assert_not_null(ir_map_get(o->value, "bases", 5));
    /* an action the worker does not serve is an error too, never a crash */
    o = fr_await_outcome(f, 6);
    cr_assert_not_null(o);
    cr_assert(!o->ok);
    cr_assert_str_eq(ir_str_data(*ir_map_get(o->value, "type", 4)), "WorkerError");
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(f);
}

Test(wp_sdk, noop_makes_the_worker_ask_again)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new(f, 1);
    const struct wp_outcome *o;

    f->noops = 3;
    T_OK(cairn_worker_start(w));
    /* three noops, then a fourth ready that stays parked and gets work */
    cr_assert_geq(fr_await(f, WP_READY, 0, 3), 0);
    fr_dispatch(f, "t.echo", "{\"value\": 9}", 0x33, 1, 1);
    o = fr_await_outcome(f, 1);
    cr_assert_not_null(o);
    cr_assert(o->ok);
    cr_assert_eq(o->value.u.i, 9);
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(f);
}

Test(wp_sdk, refused_fails_start)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new(f, 1);

    f->refuse = "bad credential";
    T_ERR(cairn_worker_start(w), CN_PROTO);
    cr_assert_not_null(strstr(cairn_worker_error(w), "bad credential"));
    cr_assert(!cairn_worker_running(w));
    cr_assert_eq(fr_count(f, WP_READY), 0, "no ready after a refusal");
    cairn_worker_free(w);
    fr_free(f);
}

static void *
stopper(void *arg)
{
    cairn_worker_stop(arg, 5000);
    return NULL;
}

/* stop() says goodbye first (so the runner stops dispatching) and still delivers the outcome
 * of what was running; the two may cross, so only their presence is asserted. */
Test(wp_sdk, stop_says_goodbye_and_delivers_in_flight_work, .timeout = 30)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new(f, 2);
    int64_t deadline = now_ms() + WAIT_MS;
    pthread_t t;
    const struct wp_outcome *o;
    long g;

    T_OK(cairn_worker_start(w));
    fr_dispatch(f, "t.gate", "{}", 0x44, 2, 9);
    while (!atomic_load(&gate_entered) && now_ms() < deadline) {
        struct timespec ts = {0, 1000000};

        nanosleep(&ts, NULL);
    }
    cr_assert(atomic_load(&gate_entered));
    cr_assert_eq(pthread_create(&t, NULL, stopper, w), 0);
    g = fr_await(f, WP_GOODBYE, -1, 0);
    pthread_join(t, NULL);
    o = fr_await_outcome(f, 9);
    cr_assert_not_null(o, "the in-flight outcome was not sent");
    cr_assert_geq(g, 0, "no goodbye");
    cr_assert_str_eq(ir_str_data(o->value), "finished");
    cr_assert_eq(fr_count(f, WP_GOODBYE), 1, "goodbye sent twice");
    cairn_worker_free(w);
    fr_free(f);
}

/* One dispatch may carry several attempts: a worker with fewer slots queues them and reports
 * every one, each answering its own token. */
Test(wp_sdk, a_batch_of_attempts_runs_and_every_outcome_comes_back)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new_pf(f, 2, 4);
    uint64_t t;

    pthread_mutex_lock(&f->mtx);
    f->hold = true;
    pthread_mutex_unlock(&f->mtx);
    T_OK(cairn_worker_start(w));
    for (t = 1; t <= 6; t++) {
        char kw[32];

        snprintf(kw, sizeof(kw), "{\"value\": %d}", (int) t * 10);
        fr_dispatch(f, "t.echo", kw, (uint8_t) t, 1, 100 + t);
    }
    pthread_mutex_lock(&f->mtx);
    f->hold = false; /* all six in one dispatch */
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mtx);
    for (t = 1; t <= 6; t++) {
        const struct wp_outcome *o = fr_await_outcome(f, 100 + t);

        cr_assert_not_null(o, "no outcome for token %d", (int) (100 + t));
        cr_assert(o->ok);
        cr_assert_eq(o->exec_id[0], t);
        cr_assert_eq(o->value.u.i, (int64_t) t * 10);
    }
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(f);
}

/* A cancel for an attempt still queued behind a busy slot, or not seen yet at all, keeps it
 * from running: its outcome is a Cancelled error. */
Test(wp_sdk, a_cancelled_attempt_that_has_not_started_is_not_run)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new(f, 1);
    int64_t deadline = now_ms() + WAIT_MS;
    const struct wp_outcome *o;

    atomic_store(&block_entered, false);
    atomic_store(&block_release, false);
    atomic_store(&block_runs, 0);
    pthread_mutex_lock(&f->mtx);
    f->hold = true;
    pthread_mutex_unlock(&f->mtx);
    T_OK(cairn_worker_start(w));
    cr_assert_geq(fr_await(f, WP_CONTROL, -1, 0), 0);
    /* Token 3 is cancelled before the worker has seen it. */
    fr_cancel(f, 3, 1, 3);
    while (fr_count(f, WP_CONTROL) < 2 && now_ms() < deadline) {
        struct timespec ts = {0, 1000000};

        nanosleep(&ts, NULL); /* the cancel was delivered: control parked again */
    }
    cr_assert_geq(fr_count(f, WP_CONTROL), 2);
    fr_dispatch(f, "t.block", "{}", 1, 1, 1);
    fr_dispatch(f, "t.block", "{}", 2, 1, 2);
    fr_dispatch(f, "t.block", "{}", 3, 1, 3);
    pthread_mutex_lock(&f->mtx);
    f->hold = false;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mtx);
    while (!atomic_load(&block_entered) && now_ms() < deadline) {
        struct timespec ts = {0, 1000000};

        nanosleep(&ts, NULL);
    }
    cr_assert(atomic_load(&block_entered));
    /* Token 2 waits in the queue behind token 1 (one slot). */
    fr_cancel(f, 2, 1, 2);
    while (fr_count(f, WP_CONTROL) < 3 && now_ms() < deadline) {
        struct timespec ts = {0, 1000000};

        nanosleep(&ts, NULL);
    }
    atomic_store(&block_release, true);
    o = fr_await_outcome(f, 1);
    cr_assert_not_null(o);
    cr_assert(o->ok, "the running attempt finishes normally");
    o = fr_await_outcome(f, 2);
    cr_assert_not_null(o);
    cr_assert(!o->ok);
    cr_assert_str_eq(ir_error_type(o->value), "Cancelled");
    o = fr_await_outcome(f, 3);
    cr_assert_not_null(o);
    cr_assert(!o->ok);
    cr_assert_str_eq(ir_error_type(o->value), "Cancelled");
    cr_assert_eq(atomic_load(&block_runs), 1, "a cancelled attempt was run");
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(f);
}

/* ---- tests against silent-runner, a misbehaving runner in a process of its own ---------- */

/* Starts silent-runner on a fresh ipc URL (written to url) with idle_ms and mode (NULL or
 * "garbage"); its stdout goes to out_fd when that is not -1. */
static pid_t
silent_start(char *url, size_t n, const char *idle_ms, const char *mode, int out_fd)
{
    const char *bin = getenv("CAIRN_SILENT_RUNNER_BIN");
    static int seq;
    pid_t pid;

    cr_assert_not_null(bin, "CAIRN_SILENT_RUNNER_BIN not set (run through meson)");
    snprintf(url, n, "ipc:///tmp/cairn-sdk-silent-%ld-%d.sock", (long) getpid(), ++seq);
    unlink(url + strlen("ipc://"));
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (out_fd >= 0) {
            dup2(out_fd, 1);
        }
        execl(bin, bin, url, idle_ms, mode, (char *) NULL);
        _exit(127);
    }
    return pid;
}

static void
silent_stop(pid_t pid, const char *url)
{
    int status;

    kill(pid, SIGKILL);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    unlink(url + strlen("ipc://"));
}

/* A started worker for url that reconnects quickly. */
static struct cairn_worker *
quick_worker(const char *url, const char *name)
{
    struct cairn_worker_options o;
    struct cairn_worker *w;

    memset(&o, 0, sizeof(o));
    o.name = name;
    o.reconnect_min_ms = 10;
    o.reconnect_max_ms = 50;
    o.start_timeout_ms = WAIT_MS;
    T_OK(cairn_worker_new(url, &o, &w));
    T_OK(cairn_worker_register(w, "t.echo", h_echo, NULL));
    T_OK(cairn_worker_start(w));
    return w;
}

/* Appends what can be read from the non-blocking fd to buf (NUL-terminated, cap bytes). */
static void
read_available(int fd, char *buf, size_t *len, size_t cap)
{
    ssize_t n;

    while (*len < cap - 1 && (n = read(fd, buf + *len, cap - 1 - *len)) > 0) {
        *len += (size_t) n;
    }
    buf[*len] = '\0';
}

/* The worker mirrors the runner's heartbeat rule: a runner that answers nothing for three
 * idle periods (plus a second) is gone even if the connection looks open; the worker drops
 * the connection and dials again. The silent runner welcomes the worker and then never
 * answers; after the drop it sees a second connection, which it never welcomes, so the worker
 * logs the drop and keeps trying. A runner that answers the idle cycle is kept (next test). */
Test(wp_sdk, a_silent_runner_is_dropped_and_the_worker_reconnects)
{
    struct cairn_worker *w;
    char url[128], buf[4096] = "";
    int64_t t0, deadline;
    size_t len = 0;
    int p[2], saved;
    pid_t pid = silent_start(url, sizeof(url), "100", NULL, -1);

    /* The worker's log goes to stderr: capture it to see the drop. */
    cr_assert_eq(pipe(p), 0);
    (void) fcntl(p[0], F_SETFL, O_NONBLOCK);
    saved = dup(2);
    cr_assert_eq(dup2(p[1], 2), 2);
    w = quick_worker(url, "w-silent");
    t0 = now_ms();
    deadline = t0 + WAIT_MS;
    while (strstr(buf, "runner silent") == NULL && now_ms() < deadline) {
        struct timespec ts = {0, 20000000};

        nanosleep(&ts, NULL);
        read_available(p[0], buf, &len, sizeof(buf));
    }
    cr_assert_eq(dup2(saved, 2), 2);
    close(saved);
    cr_assert_not_null(strstr(buf, "runner silent"), "the worker kept a silent runner: %s", buf);
    cr_assert_geq(now_ms() - t0, 1200, "dropped after %lld ms", (long long) (now_ms() - t0));
    cr_assert(cairn_worker_running(w), "a dropped connection is not a stopped worker");
    /* The runner goes first. Stopped while the worker was mid-reconnect to a live runner,
     * nng 1.5.2 leaked the dialer and a half-made pipe (no reference of ours; LeakSanitizer
     * failed the suite about once in 50 runs). Stops with a live runner: stop_says_goodbye_... */
    silent_stop(pid, url);
    cairn_worker_stop(w, 200);
    cairn_worker_free(w);
    close(p[0]);
    close(p[1]);
}

Test(wp_sdk, a_runner_answering_the_idle_cycle_is_kept)
{
    struct fr *f = fr_start();
    struct cairn_worker *w;
    int64_t end;

    pthread_mutex_lock(&f->mtx);
    f->idle_ms = 100;
    f->answer_idle = true;
    pthread_mutex_unlock(&f->mtx);
    w = worker_new(f, 1);
    T_OK(cairn_worker_start(w));
    /* Past the silence limit (1.3 s), and several idle cycles answered meanwhile. */
    end = now_ms() + 2000;
    while (now_ms() < end) {
        struct timespec ts = {0, 20000000};

        nanosleep(&ts, NULL);
    }
    cr_assert_geq(fr_count(f, WP_CONTROL), 5, "the idle cycle did not run");
    cr_assert_eq(fr_count(f, WP_HELLO), 1, "a live runner was dropped");
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(f);
}

/* A handler's error without a "type" would make the runner drop the connection (and all in
 * flight on it): the SDK reports a WorkerError instead. */
Test(wp_sdk, an_error_without_a_type_is_reported_as_a_worker_error)
{
    struct fr *f = fr_start();
    struct cairn_worker *w = worker_new(f, 1);
    const struct wp_outcome *o;

    T_OK(cairn_worker_start(w));
    fr_dispatch(f, "t.typeless", "{}", 0x51, 1, 51);
    o = fr_await_outcome(f, 51);
    cr_assert_not_null(o);
    cr_assert(!o->ok);
    cr_assert_str_eq(ir_error_type(o->value), "WorkerError");
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(f);
}

/* A reply to ready that does not decode may have carried attempts the worker can never report;
 * the worker starts a new session (a new hello on the same connection, after which the runner
 * fails the old session's attempts with WorkerLost and frees their room). The runner here is
 * silent-runner in `garbage` mode: it garbles the first ready of each session and prints
 * "hello" per session. */
Test(wp_sdk, an_undecodable_reply_to_ready_drops_the_session)
{
    struct cairn_worker *w;
    char url[128], buf[16384] = "", *q;
    int64_t deadline;
    size_t len = 0;
    int p[2], hellos = 0, later;
    pid_t pid;

    cr_assert_eq(pipe(p), 0);
    (void) fcntl(p[0], F_SETFL, O_NONBLOCK);
    pid = silent_start(url, sizeof(url), "20000", "garbage", p[1]);
    close(p[1]);
    w = quick_worker(url, "w-garbage");
    deadline = now_ms() + WAIT_MS;
    while (hellos < 2 && now_ms() < deadline) {
        struct timespec ts = {0, 10000000};

        nanosleep(&ts, NULL);
        read_available(p[0], buf, &len, sizeof(buf));
        for (hellos = 0, q = buf; (q = strstr(q, "hello")) != NULL; q += 5) {
            hellos++;
        }
    }
    cr_assert_geq(hellos, 2, "no new session after a garbage reply (%d hello)", hellos);
    cr_assert(cairn_worker_running(w));
    /* A runner that garbles every session is asked again with the reconnect backoff (10 ms
     * doubling to 50 ms here: about a dozen sessions in half a second), not in a hot loop
     * (thousands a second without it). */
    deadline = now_ms() + 500;
    while (now_ms() < deadline) {
        struct timespec ts = {0, 20000000};

        nanosleep(&ts, NULL);
    }
    read_available(p[0], buf, &len, sizeof(buf));
    for (later = 0, q = buf; (q = strstr(q, "hello")) != NULL; q += 5) {
        later++;
    }
    cr_assert_leq(later - hellos, 30, "%d new sessions in 500 ms", later - hellos);
    cairn_worker_stop(w, 200);
    cairn_worker_free(w);
    close(p[0]);
    silent_stop(pid, url);
}

/* One worker, two runners: each gets its own hello and session, every `ready` says the room
 * the worker has for all of them (so a runner whose work would only queue here sends it to
 * another worker), outcomes go back to the runner that dispatched the attempt, and a runner
 * that goes away leaves the worker serving the other. */
Test(wp_sdk, one_worker_serves_two_runners_and_tells_each_its_room)
{
    struct fr *fa = fr_start(), *fb = fr_start();
    struct cairn_worker *w = worker_new(fa, 2);
    int64_t deadline;
    long at;
    size_t i;

    atomic_store(&block_entered, false);
    atomic_store(&block_release, false);
    atomic_store(&block_runs, 0);
    T_ERR(cairn_worker_add_url(w, fa->url), CN_INVAL); /* the same runner twice */
    T_ERR(cairn_worker_add_url(w, ""), CN_INVAL);
    T_OK(cairn_worker_add_url(w, fb->url));
    T_OK(cairn_worker_start(w));
    T_ERR(cairn_worker_add_url(w, "ipc:///tmp/late.sock"), CN_INVAL); /* after start */
    cr_assert_eq(fr_await(fa, WP_HELLO, -1, 0), 0);
    cr_assert_eq(fr_await(fb, WP_HELLO, -1, 0), 0, "the second runner got no hello");
    cr_assert_geq(fr_await_room(fa, 0, 2), 0, "A was not told the room of 2 free slots");
    cr_assert_geq(fr_await_room(fb, 0, 2), 0, "B was not told the room of 2 free slots");

    /* A fills both slots: B is told there is no room. */
    fr_dispatch(fa, "t.block", "{}", 0x21, 1, 11);
    fr_dispatch(fa, "t.block", "{}", 0x22, 1, 12);
    deadline = now_ms() + WAIT_MS;
    while (atomic_load(&block_runs) < 2 && now_ms() < deadline) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(atomic_load(&block_runs), 2, "A's two attempts did not both start");
    at = fr_await_room(fb, 0, 0);
    cr_assert_geq(at, 0, "B was not told that the slots are taken");

    /* They finish: their outcomes go to A, and B is told the room is back. */
    atomic_store(&block_release, true);
    cr_assert_not_null(fr_await_outcome(fa, 11));
    cr_assert_not_null(fr_await_outcome(fa, 12));
    cr_assert_geq(fr_await_room(fb, (size_t) at + 1, 2), 0, "B was not told the room is back");
    pthread_mutex_lock(&fb->mtx);
    for (i = 0; i < fb->nlog; i++) {
        cr_assert(fb->log[i].kind != WP_READY || fb->log[i].noutcomes == 0,
                  "B got an outcome of A's attempts");
    }
    pthread_mutex_unlock(&fb->mtx);

    /* B's work runs and its outcome goes to B. */
    fr_dispatch(fb, "t.echo", "{\"value\": 5}", 0x31, 1, 21);
    cr_assert_not_null(fr_await_outcome(fb, 21));
    cairn_worker_stop(w, 1000);
    cr_assert_geq(fr_await(fa, WP_GOODBYE, -1, 0), 0, "A got no goodbye");
    cr_assert_geq(fr_await(fb, WP_GOODBYE, -1, 0), 0, "B got no goodbye");
    cairn_worker_free(w);
    fr_free(fa);
    fr_free(fb);
}

/* Every runner refused the worker: start() fails with the refusal; one that welcomes it is
 * enough for start() to succeed while another is not there yet. */
Test(wp_sdk, start_needs_one_runner_of_several)
{
    struct fr *fa = fr_start(), *fb = fr_start();
    struct cairn_worker *w;
    char absent[160];

    fa->refuse = "bad credential";
    fb->refuse = "bad credential";
    w = worker_new(fa, 1);
    T_OK(cairn_worker_add_url(w, fb->url));
    T_ERR(cairn_worker_start(w), CN_PROTO);
    cr_assert_not_null(strstr(cairn_worker_error(w), "refused: bad credential"), "%s",
                       cairn_worker_error(w));
    cairn_worker_free(w);
    fr_free(fa);
    fr_free(fb);

    fa = fr_start();
    snprintf(absent, sizeof(absent), "ipc:///tmp/cairn-sdk-test-absent-%ld.sock", (long) getpid());
    w = worker_new(fa, 1);
    T_OK(cairn_worker_add_url(w, absent));
    T_OK(cairn_worker_start(w));
    cr_assert(cairn_worker_running(w));
    fr_dispatch(fa, "t.echo", "{\"value\": 1}", 0x41, 1, 31);
    cr_assert_not_null(fr_await_outcome(fa, 31));
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    fr_free(fa);
}

/* A runner that dies (kill -9 of its process) leaves the worker serving the other runner. */
Test(wp_sdk, a_runner_that_dies_leaves_the_worker_serving_the_others)
{
    struct fr *fb = fr_start();
    struct cairn_worker *w = worker_new(fb, 1);
    char url[128], buf[64] = "";
    int64_t deadline;
    size_t got = 0;
    int out[2];
    pid_t pid;

    cr_assert_eq(pipe(out), 0);
    pid = silent_start(url, sizeof(url), "60000", NULL, out[1]);
    close(out[1]);
    T_OK(cairn_worker_add_url(w, url));
    T_OK(cairn_worker_start(w));
    cr_assert_eq(fcntl(out[0], F_SETFL, O_NONBLOCK), 0);
    deadline = now_ms() + WAIT_MS;
    while (strstr(buf, "hello") == NULL && now_ms() < deadline) {
        struct timespec ts = {0, 5000000};

        read_available(out[0], buf, &got, sizeof(buf));
        nanosleep(&ts, NULL);
    }
    cr_assert_not_null(strstr(buf, "hello"), "the second runner got no hello");
    cr_assert_eq(fr_await(fb, WP_HELLO, -1, 0), 0);
    silent_stop(pid, url);
    cr_assert(cairn_worker_running(w));
    fr_dispatch(fb, "t.echo", "{\"value\": 6}", 0x32, 1, 22);
    cr_assert_not_null(fr_await_outcome(fb, 22), "not served after the other runner died");
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    close(out[0]);
    fr_free(fb);
}
