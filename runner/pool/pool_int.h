/* SPDX-License-Identifier: MIT */
/*
 * The worker pool's insides, shared by the files of runner/pool/ (README.md there says which
 * owns what; pool.c's DESIGN how they fit): a worker's request, a worker, an attempt in
 * flight, the queue, and the pool itself, with the functions the files share. Not for use
 * outside this folder: the engine goes through pool.h.
 *
 * Threads and locks: everything here is under `p->mtx` unless its comment says otherwise
 * (pool.c DESIGN).
 */
#ifndef RUNNER_POOL_POOL_INT_H
#define RUNNER_POOL_POOL_INT_H

#include <pthread.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/strmap.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "runner/engine/defaults.h"
#include "runner/exec/errors.h"
#include "runner/exec/idmap.h"
#include "runner/pool/pool.h"
#include "runner/pool/sprep.h"
#include "worker-protocol/nngclose.h" /* WP_CLOSE_TIMEOUT_MS */
#include "worker-protocol/proto.h"

/* A refused worker gets time to read `refused` before its connection is closed: closing at
 * once can drop the reply still queued on the pipe. */
#define REFUSE_GRACE_MS 500

enum pctx_state { PC_HANDLING = 0, PC_PARKED, PC_ANSWERED, PC_MOVED };

/* A worker's request (pool.c DESIGN). */
struct pctx {
    enum pctx_state state;
    uint32_t pipe; /* its connection */
    struct rn_sprep_req rq;
    bool control;
    int64_t parked_at;        /* monotonic ms */
    struct pctx *prev, *next; /* in p->all, while PARKED */
};

struct worker {
    uint32_t pipe;
    char *name;
    char peer[RN_POOL_PEER_LEN]; /* its address, for people (rn_pool_snapshot) */
    char **actions;
    uint32_t nactions;
    uint32_t slots, prefetch;
    uint32_t cap;      /* slots + prefetch: most attempts it holds at once */
    uint32_t inflight; /* attempts dispatched to it and not reported back */
    uint32_t nwaiting; /* of those, the ones in its own queue (prefetched): not started */
    struct {
        struct wait_ref *items; /* the waiting ones in dispatch order, which it starts in */
        size_t len, cap, head;
    } waitq;
    uint32_t said_room;  /* the room its latest `ready` gave (WP_ROOM_ANY: none given) */
    struct pctx *parked; /* its parked `ready`, if any (at most one) */
    struct pctx *ctl;    /* its parked `control`, if any */
    bool leaving;        /* said goodbye: gets no more work */
    int64_t last_seen;   /* monotonic ms of its latest request (heartbeat) */
    struct worker *next;
};

/* A flight waiting in a worker's queue; token tells a reused slot of p->fl from it. */
struct wait_ref {
    uint32_t fl;
    uint64_t token;
};

struct flight {
    bool used;
    bool waiting;       /* in its worker's own queue: its timeout has not started yet */
    int64_t timeout_ms; /* its timeout, counted from when it starts on the worker; 0 = none */
    bool done; /* its ActionTimeout was delivered, or it was withdrawn: nothing more is delivered
                * for it; kept until the worker reports back, so that a worker stuck on hung
                * attempts is not sent more work in their place */
    uint64_t token;
    struct rn_iid instance_id;
    struct rn_token lock;
    struct rn_xid exec_id;
    uint32_t attempt;
    uint32_t pipe;
    int64_t deadline;    /* wall ms; 0 = none */
    bool cancel_pending; /* asked while the worker had no control request parked */
    struct queued *q;    /* the submitted dispatch, kept to queue it again (requeue_lost) */
    int64_t sent_us;     /* monotonic µs of the dispatch */
    uint32_t act;        /* its action's index in p->acts */
};

struct queued {
    struct rn_pool_dispatch d; /* d.action points at `action`; kwargs retained */
    char *action;
    uint32_t requeues; /* times a dropped worker gave it back */
    uint32_t act;      /* its action's index in p->acts */
    struct queued *next;
};

/* Attempts of one action, queued and in flight, counted as they move so that a snapshot
 * (rn_pool_snapshot) costs nothing per attempt. One entry per action name ever submitted: a
 * deployment has a bounded set of them, and an entry is a few bytes. */
struct act_count {
    char *name;
    uint64_t queued, inflight;
};

struct out_result {
    struct rn_pool_result r; /* value owned */
};

struct rn_pool {
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    struct cn_thread timer;
    bool stopping;
    struct rn_pool *left_next; /* in left_behind, when its transport did not close */
    struct rn_sprep *srv;
    int port;
    rn_pool_result_fn fn;
    void *arg;
    char *credential;
    uint32_t idle_ms;
    uint32_t backlog_horizon_ms; /* rn_pool_cfg */
    uint32_t requeue_lost;
    struct pctx *all; /* the parked requests */
    size_t nparked;
    struct pctx *spare; /* answered parked requests, reused by park_locked */
    struct worker *workers;
    struct {
        uint32_t pipe;
        int64_t at; /* monotonic ms of the refusal */
    } refused[64];  /* refused at hello: ignored, then closed after REFUSE_GRACE_MS */
    size_t nrefused;
    struct {
        struct greet {
            uint32_t pipe;
            int64_t at;                  /* monotonic ms of its accept */
            char peer[RN_POOL_PEER_LEN]; /* its address, handed to its worker at hello */
        } * items;
        size_t len, cap;
    } greet; /* connections that have not said hello yet, oldest first */
    uint32_t hello_timeout_ms, max_ungreeted;
    _Atomic int64_t *confirmed; /* the lease gate (pool.h); NULL: none */
    uint32_t lease_ttl_ms;
    struct queued *qhead, *qtail;
    struct flight *fl; /* in-flight dispatches */
    size_t nfl, capfl;
    uint32_t *fl_free; /* indices of unused entries below nfl (a stack) */
    size_t nfree, capfree;
    int64_t timer_wake;        /* monotonic ms the timer thread plans to wake at */
    struct rn_idmap tokens;    /* dispatch token (token_key) -> index in fl */
    void (*room_wake)(void *); /* rn_pool_room said no: called once the backlog is low */
    void *room_arg;
    uint64_t next_token, next_session;
    struct {
        struct act_count *items;
        size_t len, cap;
    } acts;
    struct cn_strmap act_index; /* name (borrowed from acts) -> index in acts */
    struct {
        int64_t at_ms; /* monotonic ms of the last sample */
        uint64_t at_n; /* st.dispatched then */
        double per_ms; /* attempts dispatched per ms, smoothed over the samples */
    } drain;           /* how fast the workers take attempts (backlog_cap_locked) */
    struct rn_pool_stats st;
};


/* What a callback collected under p->mtx to hand out once it is released: results for p->fn,
 * and log lines (stderr may block; the pool must not stall behind it). */
struct results {
    struct out_result *items;
    size_t len, cap;
    struct cn_buf notes; /* warnings, one per line */
};

#define RESULTS_INIT            \
    {                           \
        NULL, 0, 0, CN_BUF_INIT \
    }

void rn_pl_results_note(struct results *rs, const char *fmt, ...) CN_PRINTF(2, 3);
void rn_pl_results_deliver(struct rn_pool *p, struct results *rs);
void rn_pl_synthetic_error(struct results *rs, struct rn_iid iid, struct rn_xid id,
                           uint32_t attempt, const char *type, const char *msg);
struct worker *rn_pl_worker_find(struct rn_pool *p, uint32_t pipe);
void rn_pl_send_cancel_locked(struct rn_pool *p, struct pctx *c, struct flight *f);
void rn_pl_reply_kind_locked(struct rn_pool *p, struct pctx *c, enum wp_kind kind);
void rn_pl_close_pipe(struct rn_pool *p, uint32_t id);

void rn_pl_token_key(uint64_t token, uint8_t key[16]);
void rn_pl_room_check_locked(struct rn_pool *p);
void rn_pl_queued_inc_locked(struct rn_pool *p, const struct queued *q);
void rn_pl_results_add(struct results *rs, struct rn_iid iid, struct rn_xid id, uint32_t attempt,
                       bool ok, struct ir_val v);
void rn_pl_worker_free(struct worker *w);
void rn_pl_start_next_waiting_locked(struct rn_pool *p, struct worker *w);
void rn_pl_flight_release_locked(struct rn_pool *p, size_t i);
struct pctx *rn_pl_park_locked(struct rn_pool *p, struct pctx *handled, bool control);
void rn_pl_pctx_done_locked(struct rn_pool *p, struct pctx *c);
void rn_pl_reply_locked(struct rn_pool *p, struct pctx *c, const struct wp_msg *m);
void rn_pl_send_pending_cancel_locked(struct rn_pool *p, struct pctx *c);
void rn_pl_queue_push_front_locked(struct rn_pool *p, struct queued *q);
uint32_t rn_pl_worker_room(const struct worker *w);
bool rn_pl_dispatch_locked(struct rn_pool *p, struct worker *w, struct pctx *c, struct queued *q,
                           struct results *rs);
void rn_pl_greeted_locked(struct rn_pool *p, uint32_t id);

void rn_pl_queued_dec_locked(struct rn_pool *p, const struct queued *q);
bool rn_pl_worker_serves(const struct worker *w, const char *action);
void rn_pl_queued_free(struct queued *q);

/* The transport's callbacks (request.c) and the timer thread (timer.c). */
void rn_pl_on_request(void *arg, uint32_t conn, const struct rn_sprep_req *rq, const void *body,
                      size_t len);
bool rn_pl_on_accepted(void *arg, uint32_t conn, const char *peer, bool must_make_room);
void rn_pl_on_closed(void *arg, uint32_t id);
void *rn_pl_timer_main(void *arg);

#endif
