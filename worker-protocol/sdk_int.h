/* SPDX-License-Identifier: MIT */
/*
 * The worker SDK's shared state (include/cairn/worker.h: the worker side of docs/protocol.md
 * over nng REQ sockets), for its four files:
 *   sdk.c           the public API: options, registration, start, stop and teardown, the
 *                   handler's view (cancelled, sleep, error values), error text and logging
 *   sdk_link.c      one runner's transport: socket, dialer, TLS, pipe events, a request on a
 *                   context waited for, the bounded close
 *   sdk_session.c   one runner's session, on its control context and thread: hello, the
 *                   heartbeat, cancels, the end of a session
 *   sdk_dispatch.c  the attempts: fetches (`ready` out, `dispatch` in), the run queue, the
 *                   slot threads that run the handlers, outcomes back, room
 *
 * - A worker serves one runner or several (cairn_worker_add_url): one `link` per runner, each
 *   with its own REQ socket and dialer (nng reconnects, RECONNMINT/MAXT), session, control
 *   thread and requests. The slots, the run queue and the actions are shared: the runners split
 *   the slots by their demand (sdk_dispatch.c, Room).
 * - Threads: the caller's (the API), one per slot (sdk_dispatch.c), one control thread per link
 *   (sdk_session.c), and nng's, which run the aio and pipe callbacks.
 *
 * Lock order: only w->mtx, for every link and in every file. nng calls made under it are
 * asynchronous (ctx send/recv, aio cancel); nng runs our aio callbacks on its own threads,
 * never inside those calls. Functions named *_locked are called with it held.
 *
 * Functions shared by these files are named wp_sdk_*: the archive is linked into programs of
 * other people, where a global sdk_run could clash.
 */
#ifndef WORKER_PROTOCOL_SDK_INT_H
#define WORKER_PROTOCOL_SDK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <nng/nng.h>

#include "cairn/worker.h"
#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
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
    struct cn_thread thread;
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
    bool ctl_busy;           /* control aio has an operation pending */
    uint32_t room_said;      /* the room the latest `ready` sent here gave */
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
    struct cn_thread ctl_thread;
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

/* ---- the worker's lock --------------------------------------------------------------------- */

static inline void
sdk_lock(struct cairn_worker *w)
{
    cn_mutex_lock(&w->mtx);
}

static inline void
sdk_unlock(struct cairn_worker *w)
{
    cn_mutex_unlock(&w->mtx);
}

static inline void
sdk_broadcast(struct cairn_worker *w)
{
    cn_cond_broadcast(&w->cond);
}

/* Waits on w->cond (a monotonic condition variable) until the monotonic deadline; returns
 * false once it has passed. */
static inline bool
sdk_wait_until(struct cairn_worker *w, int64_t deadline_ms)
{
    if (deadline_ms - cn_mono_ms() <= 0) {
        return false;
    }
    cn_cond_wait_until(&w->cond, &w->mtx, deadline_ms);
    return true;
}

/* Attempts the worker takes now, for every runner: slots + prefetch minus what is queued or
 * running. */
static inline uint32_t
sdk_room_locked(const struct cairn_worker *w)
{
    uint32_t cap = w->nslots + w->prefetch, used = w->nqueued + w->nrunning;

    return used < cap ? cap - used : 0;
}

/* ---- shared by the SDK's files ------------------------------------------------------------- */

/* sdk.c */
void wp_sdk_log(const struct sdk_link *l, enum cn_log_level level, const char *what,
                const char *detail);
void wp_sdk_errtext(struct sdk_link *l, const char *fmt, ...) CN_PRINTF(2, 3);
cn_err wp_sdk_fail(struct sdk_link *l, cn_err rv, const char *what, const char *detail);

/* sdk_link.c */
cn_err wp_sdk_link_open(struct sdk_link *l);
void wp_sdk_link_close(struct sdk_link *l);
cn_err wp_sdk_msg_new(const struct wp_msg *m, nng_msg **out);
int wp_sdk_op(struct sdk_link *l, nng_ctx ctx, nng_aio *aio, nng_msg *msg, uint64_t gen,
              bool allow_stopping, bool *busy);
void wp_sdk_cancel_ops_locked(struct sdk_link *l);
void wp_sdk_fetches_idle_locked(struct sdk_link *l);

/* sdk_session.c */
void *wp_sdk_ctl_main(void *arg);
int wp_sdk_recv(struct sdk_link *l, uint64_t gen, bool allow_stopping, struct wp_msg *out);
void wp_sdk_session_lost_locked(struct sdk_link *l);
void wp_sdk_drop_locked(struct sdk_link *l, const char *why);

/* sdk_dispatch.c */
void wp_sdk_fetch_cb(void *arg);
void *wp_sdk_slot_main(void *arg);
void wp_sdk_pump_locked(struct sdk_link *l);
void wp_sdk_pump_others_locked(struct cairn_worker *w, const struct sdk_link *except);
void wp_sdk_runq_clear_locked(struct cairn_worker *w, const struct sdk_link *l);

#endif
