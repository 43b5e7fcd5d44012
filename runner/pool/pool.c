/* SPDX-License-Identifier: MIT */
/*
 * The worker pool (see pool.h for the contract). Its transport is sprep.h (the REP end of
 * nng's REQ/REP over streams, with connections reported from their accept); every request
 * arrives there as a callback and is answered at once or held: a `ready` that finds no work is
 * parked, so idle workers wait without blocking other requests; submitting work answers the
 * parked `ready` of a worker that serves the action and has room.
 *
 * DESIGN
 * - Lock order: `p->mtx`, then sprep's own (rn_sprep_reply and rn_sprep_close queue under
 *   it and never block). The result callback and log lines (struct results collects both) run
 *   with p->mtx released. The one call out under it is the claimer's room wake
 *   (rn_pool_room), which takes only a leaf mutex.
 * - A request (struct pctx) lives on its callback's stack while it is HANDLED; one kept for
 *   later is copied to the heap, PARKED (in p->all, the copy the worker points at), and goes
 *   to p->spare when answered, for the next one parked (a worker parks two at most, so the
 *   spares are bounded by the fleet; freed at stop). A handled one is ANSWERED once its reply
 *   is queued (or MOVED, once parked).
 * - Every dispatch is recorded (token -> exec id, attempt, pipe, deadline) before its reply is
 *   sent; an outcome is accepted only when all four match. When a pipe goes away its records
 *   become WorkerLost results at once, and its parked requests are dropped.
 * - The timer thread answers parked requests idle for idle_ms with `noop` and turns expired
 *   dispatches into ActionTimeout results. It sleeps on a condition variable until the next
 *   such moment (never spins).
 */
#include "runner/pool/pool.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/strmap.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "runner/engine/defaults.h"
#include "runner/exec/errors.h"
#include "runner/exec/idmap.h"
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
    uint32_t cap;        /* slots + prefetch: most attempts it holds at once */
    uint32_t inflight;   /* attempts dispatched to it and not reported back */
    uint32_t said_room;  /* the room its latest `ready` gave (WP_ROOM_ANY: none given) */
    struct pctx *parked; /* its parked `ready`, if any (at most one) */
    struct pctx *ctl;    /* its parked `control`, if any */
    bool leaving;        /* said goodbye: gets no more work */
    int64_t last_seen;   /* monotonic ms of its latest request (heartbeat) */
    struct worker *next;
};

struct flight {
    bool used;
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
    pthread_t timer;
    bool timer_started;
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

/* ---- clocks and small helpers ------------------------------------------------------------- */

static void
token_key(uint64_t token, uint8_t key[16])
{
    memset(key, 0, 16);
    memcpy(key + 8, &token, 8);
}

/* The workers' recent drain rate, sampled every DRAIN_SAMPLE_MS and halved into the running
 * figure (a sample over a long idle gap replaces it, so an idle pool's rate falls to 0). */
#define DRAIN_SAMPLE_MS 100

static double
drain_rate_locked(struct rn_pool *p)
{
    int64_t now = cn_mono_ms(), dt = now - p->drain.at_ms;

    if (dt >= DRAIN_SAMPLE_MS) {
        double rate = (double) (p->st.dispatched - p->drain.at_n) / (double) dt;

        p->drain.per_ms = dt > 4 * DRAIN_SAMPLE_MS ? rate : (p->drain.per_ms + rate) / 2;
        p->drain.at_ms = now;
        p->drain.at_n = p->st.dispatched;
    }
    return p->drain.per_ms;
}

/* Attempts queued at or above this many mean the runner has claimed more than its workers can
 * take soon (pool.h, rn_pool_room): the most of twice what the connected workers hold at once,
 * backlog_horizon_ms of attempts at the rate the workers take them, and a claim batch
 * (so that a runner with few or no workers still takes work). */
static uint64_t
backlog_cap_locked(struct rn_pool *p)
{
    uint64_t cap = 0, ahead = (uint64_t) (drain_rate_locked(p) * p->backlog_horizon_ms);
    const struct worker *w;

    for (w = p->workers; w != NULL; w = w->next) {
        cap += w->cap;
    }
    cap = 2 * cap > ahead ? 2 * cap : ahead;
    return cap > RN_POOL_BACKLOG_MIN ? cap : RN_POOL_BACKLOG_MIN;
}

/* Wakes the claimer that was told there was no room, once the backlog is under half the cap
 * (its wake takes only its own leaf lock). */
static void
room_check_locked(struct rn_pool *p)
{
    if (p->room_wake != NULL && p->st.queued < backlog_cap_locked(p) / 2) {
        void (*wake)(void *) = p->room_wake;

        p->room_wake = NULL;
        wake(p->room_arg);
    }
}

/* The index of action name in p->acts, added when new. Call with the lock held. */
static uint32_t
act_of_locked(struct rn_pool *p, const char *name)
{
    struct act_count a;
    uint32_t i;

    if (cn_strmap_get(&p->act_index, name, &i)) {
        return i;
    }
    a.name = cn_xstrdup(name);
    a.queued = a.inflight = 0;
    CN_VEC_XPUSH(&p->acts, a);
    i = (uint32_t) (p->acts.len - 1);
    if (cn_strmap_put(&p->act_index, p->acts.items[i].name, i) != CN_OK) {
        cn_oom("pool action index");
    }
    return i;
}

static void
queued_inc_locked(struct rn_pool *p, const struct queued *q)
{
    p->st.queued++;
    p->acts.items[q->act].queued++;
}

/* q left the queue (dispatched, dropped or failed). */
static void
queued_dec_locked(struct rn_pool *p, const struct queued *q)
{
    p->st.queued--;
    p->acts.items[q->act].queued--;
    room_check_locked(p);
}

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

/* Adds a warning for results_deliver to log. Out of memory it is lost. */
static void results_note(struct results *rs, const char *fmt, ...) CN_PRINTF(2, 3);

static void
results_note(struct results *rs, const char *fmt, ...)
{
    va_list ap;
    cn_err rv;

    va_start(ap, fmt);
    rv = cn_buf_vprintf(&rs->notes, fmt, ap);
    va_end(ap);
    if (rv != CN_OK || cn_buf_putc(&rs->notes, '\n') != CN_OK) {
        /* out of memory: this warning is not logged */
    }
}

/* Adds a result for delivery. */
static void
results_add(struct results *rs, struct rn_iid iid, struct rn_xid id, uint32_t attempt, bool ok,
            struct ir_val v)
{
    struct out_result o;

    o.r.instance_id = iid;
    o.r.exec_id = id;
    o.r.attempt = attempt;
    o.r.ok = ok;
    o.r.value = v;
    CN_VEC_XPUSH(rs, o);
}

/* Logs the collected warnings and delivers the collected results, with no lock held. */
static void
results_deliver(struct rn_pool *p, struct results *rs)
{
    const char *line = rs->notes.data, *nl;
    size_t i;

    while (line != NULL && (nl = strchr(line, '\n')) != NULL) {
        cn_log(CN_LOG_WARN, "pool: %.*s", (int) (nl - line), line);
        line = nl + 1;
    }
    cn_buf_fini(&rs->notes);
    for (i = 0; i < rs->len; i++) {
        p->fn(p->arg, &rs->items[i].r);
        ir_val_release(rs->items[i].r.value);
    }
    free(rs->items);
    rs->items = NULL;
    rs->len = rs->cap = 0;
}

static void
synthetic_error(struct results *rs, struct rn_iid iid, struct rn_xid id, uint32_t attempt,
                const char *type, const char *msg)
{
    struct ir_val e;

    if (rn_error_raise(&e, type, msg) == CN_RAISED) {
        results_add(rs, iid, id, attempt, false, e);
    }
}

static struct worker *
worker_find(struct rn_pool *p, uint32_t pipe)
{
    struct worker *w;

    for (w = p->workers; w != NULL; w = w->next) {
        if (w->pipe == pipe) {
            return w;
        }
    }
    return NULL;
}

static bool
worker_serves(const struct worker *w, const char *action)
{
    uint32_t i;

    if (w->leaving) {
        return false;
    }
    for (i = 0; i < w->nactions; i++) {
        if (strcmp(w->actions[i], action) == 0) {
            return true;
        }
    }
    return false;
}

static void
worker_free(struct worker *w)
{
    uint32_t i;

    for (i = 0; i < w->nactions; i++) {
        free(w->actions[i]);
    }
    free(w->actions);
    free(w->name);
    free(w);
}

static void queued_free(struct queued *q);

/* Returns flight entry i to the free stack. Call with the lock held. */
static void
flight_release_locked(struct rn_pool *p, size_t i)
{
    uint8_t key[16];

    token_key(p->fl[i].token, key);
    rn_idmap_del(&p->tokens, key);
    p->fl[i].used = false;
    p->acts.items[p->fl[i].act].inflight--;
    if (p->fl[i].q != NULL) {
        queued_free(p->fl[i].q);
        p->fl[i].q = NULL;
    }
    if (p->nfree == p->capfree) {
        p->capfree = p->capfree ? p->capfree * 2 : 64;
        p->fl_free = cn_xreallocarray(p->fl_free, p->capfree, sizeof(*p->fl_free));
    }
    p->fl_free[p->nfree++] = (uint32_t) i;
}

/* ---- replies ------------------------------------------------------------------------------ */

/* Keeps the request being handled for later (a parked `ready` or `control`): returns its heap
 * copy, the one to answer from now on. Call with the lock held. */
static struct pctx *
park_locked(struct rn_pool *p, struct pctx *handled, bool control)
{
    struct pctx *c = p->spare;

    if (c != NULL) {
        p->spare = c->next;
    } else {
        c = cn_xmalloc(sizeof(*c));
    }
    *c = *handled;
    handled->state = PC_MOVED;
    c->state = PC_PARKED;
    c->control = control;
    c->parked_at = cn_mono_ms();
    c->prev = NULL;
    c->next = p->all;
    if (p->all != NULL) {
        p->all->prev = c;
    }
    p->all = c;
    p->nparked++;
    return c;
}

/* c is answered (or abandoned: its connection is gone, or its reply could not be made): a
 * parked one leaves p->all for p->spare; the one being handled is only marked. */
static void
pctx_done_locked(struct rn_pool *p, struct pctx *c)
{
    if (c->state != PC_PARKED) {
        c->state = PC_ANSWERED;
        return;
    }
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        p->all = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    p->nparked--;
    c->next = p->spare;
    p->spare = c;
}

/* c is about to stop being parked: its worker no longer points at it. */
static void
unpark_locked(struct rn_pool *p, struct pctx *c)
{
    struct worker *w;

    if (c->state != PC_PARKED || (w = worker_find(p, c->pipe)) == NULL) {
        return;
    }
    if (w->parked == c) {
        w->parked = NULL;
    }
    if (w->ctl == c) {
        w->ctl = NULL;
    }
}

/* Sends len bytes as the reply on c (queued: never blocks); c is done. Call with the lock
 * held. */
static void
reply_bytes_locked(struct rn_pool *p, struct pctx *c, const void *data, size_t len)
{
    unpark_locked(p, c);
    /* A connection gone meanwhile: its removal callback fails what it held. */
    (void) rn_sprep_reply(p->srv, c->pipe, &c->rq, data, len);
    pctx_done_locked(p, c);
}

/* Sends m as the reply on c. Call with the lock held. */
static void
reply_locked(struct rn_pool *p, struct pctx *c, const struct wp_msg *m)
{
    struct cn_buf b = CN_BUF_INIT;

    if (wp_msg_encode(m, &b) != CN_OK) {
        cn_buf_fini(&b);
        unpark_locked(p, c);
        pctx_done_locked(p, c); /* abandoned: the worker resends nothing, its SDK times out */
        return;
    }
    reply_bytes_locked(p, c, b.data, b.len);
    cn_buf_fini(&b);
}

static void
send_cancel_locked(struct rn_pool *p, struct pctx *c, struct flight *f)
{
    struct wp_msg m;

    wp_msg_init(&m, WP_CANCEL);
    memcpy(m.exec_id, f->exec_id.b, sizeof(m.exec_id)); /* onto the wire */
    m.attempt = f->attempt;
    m.token = f->token;
    f->cancel_pending = false;
    reply_locked(p, c, &m);
}

/* A control request just parked on c: it carries the first cancel asked for meanwhile. */
static void
send_pending_cancel_locked(struct rn_pool *p, struct pctx *c)
{
    size_t i;

    for (i = 0; i < p->nfl; i++) {
        struct flight *f = &p->fl[i];
        if (f->used && f->cancel_pending && f->pipe == c->pipe) {
            send_cancel_locked(p, c, f);
            return;
        }
    }
}


static void
reply_kind_locked(struct rn_pool *p, struct pctx *c, enum wp_kind kind)
{
    struct wp_msg m;

    wp_msg_init(&m, kind);
    reply_locked(p, c, &m);
}

/* The first queued attempt worker w serves, unlinked; NULL if none. */
static struct queued *
take_for_locked(struct rn_pool *p, const struct worker *w)
{
    struct queued **pp, *q, *prev = NULL;

    for (pp = &p->qhead; (q = *pp) != NULL; prev = q, pp = &q->next) {
        if (worker_serves(w, q->d.action)) {
            *pp = q->next;
            if (p->qtail == q) {
                p->qtail = prev;
            }
            q->next = NULL;
            return q;
        }
    }
    return NULL;
}

/* Puts q back at the head of the queue (it was taken but could not be sent now). */
static void
queue_push_front_locked(struct rn_pool *p, struct queued *q)
{
    q->next = p->qhead;
    p->qhead = q;
    if (p->qtail == NULL) {
        p->qtail = q;
    }
}

static void
queued_free(struct queued *q)
{
    free(q->action);
    ir_val_release(q->d.kwargs);
    ir_val_release(q->d.prev_error);
    free(q);
}

/* A free flight entry's index. */
static size_t
flight_alloc_locked(struct rn_pool *p)
{
    if (p->nfree > 0) {
        return p->fl_free[--p->nfree];
    }
    if (p->nfl == p->capfl) {
        p->capfl = p->capfl ? p->capfl * 2 : 64;
        p->fl = cn_xreallocarray(p->fl, p->capfl, sizeof(*p->fl));
    }
    return p->nfl++;
}

/* Adds q to batch b as an attempt in flight on worker w. Returns CN_OK (q consumed), or the
 * batch's error with nothing recorded (q untouched). Call with the lock held. */
static cn_err
dispatch_one_locked(struct rn_pool *p, struct worker *w, struct wp_batch *b, struct queued *q)
{
    struct wp_dispatch d;
    struct flight *f;
    uint8_t key[16];
    size_t i;
    cn_err rv;

    i = flight_alloc_locked(p);
    /* Recorded before the reply is sent: a pipe that drops from now on returns it as
     * WorkerLost. */
    f = &p->fl[i];
    memset(f, 0, sizeof(*f));
    f->used = true;
    f->token = p->next_token + 1;
    f->instance_id = q->d.instance_id;
    f->lock = q->d.lock;
    f->exec_id = q->d.exec_id;
    f->attempt = q->d.attempt;
    f->pipe = w->pipe;
    /* The attempt starts now, on this worker: its timeout counts from here (waiting in the
     * queue for a slot did not count), bounded by the schedule-to-close deadline if any. */
    f->deadline = q->d.deadline_ms;
    if (q->d.timeout_ms > 0) {
        int64_t by = cn_wall_ms() + q->d.timeout_ms;
        if (f->deadline == 0 || by < f->deadline) {
            f->deadline = by;
        }
    }
    token_key(f->token, key);
    memcpy(d.instance_id, q->d.instance_id.b, sizeof(d.instance_id)); /* onto the wire */
    memcpy(d.exec_id, q->d.exec_id.b, sizeof(d.exec_id));
    d.attempt = q->d.attempt;
    d.token = f->token;
    d.action = q->d.action;
    d.kwargs = q->d.kwargs;
    d.deadline_ms = f->deadline; /* the worker stops the work there too */
    d.last_error = q->d.prev_error;
    if ((rv = rn_idmap_put(&p->tokens, key, (uint32_t) i)) != CN_OK ||
        (rv = wp_batch_add_dispatch(b, &d)) != CN_OK) {
        flight_release_locked(p, i);
        return rv;
    }
    p->next_token++;
    if (f->deadline != 0) {
        /* Wake the timer only when this deadline comes before its planned wake. */
        int64_t due = cn_mono_ms() + (f->deadline - cn_wall_ms());
        if (due < p->timer_wake) {
            cn_cond_signal(&p->cond);
        }
    }
    f->sent_us = cn_mono_us();
    if (q->d.ready_us != 0) {
        rn_lathist_add(&p->st.dispatch_delay, f->sent_us - q->d.ready_us);
    }
    w->inflight++;
    p->st.dispatched++;
    queued_dec_locked(p, q);
    f->act = q->act;
    p->acts.items[q->act].inflight++;
    f->q = q; /* kept while in flight */
    return CN_OK;
}

/* Attempts worker w takes in reply to its latest `ready`: what the runner counts free of its
 * slots + prefetch, capped by the room that ready gave. A worker serving several runners gives
 * one, so that it splits its slots by their demand (docs/protocol.md, Room). */
static uint32_t
worker_room(const struct worker *w)
{
    uint32_t free = w->inflight < w->cap ? w->cap - w->inflight : 0;

    return free < w->said_room ? free : w->said_room;
}

/* Answers c, a request of worker w, with one `dispatch` holding as many queued attempts w
 * serves as it has room for (q first, already unlinked, when not NULL). An attempt whose
 * arguments cannot be sent at all fails with a ValueError into rs. Returns false when nothing
 * was sent (c untouched; q, if any, is back in the queue). Call with the lock held. */
static bool
dispatch_locked(struct rn_pool *p, struct worker *w, struct pctx *c, struct queued *q,
                struct results *rs)
{
    struct wp_batch b;
    cn_err rv;

    /* Read at every dispatch, from the clock, so that threads resuming together after a pause
     * cannot dispatch before the keeper has noticed it (pool.h, the lease gate). */
    if (p->confirmed != NULL && cn_mono_ms() - atomic_load(p->confirmed) >= p->lease_ttl_ms) {
        p->st.gated++;
        if (q != NULL) {
            queue_push_front_locked(p, q);
        }
        return false;
    }
    if (worker_room(w) == 0 || wp_batch_begin(&b, WP_DISPATCH) != CN_OK) {
        if (q != NULL) {
            queue_push_front_locked(p, q);
        }
        return false;
    }
    while (b.n < w->said_room && w->inflight < w->cap &&
           (q != NULL || (q = take_for_locked(p, w)) != NULL)) {
        if (q->requeues > 0 && q->d.deadline_ms != 0 && cn_wall_ms() >= q->d.deadline_ms) {
            /* Given back by a dropped worker after its deadline passed. */
            synthetic_error(rs, q->d.instance_id, q->d.exec_id, q->d.attempt,
                            rn_error_name(RN_ERR_ACTION_TIMEOUT),
                            "the attempt did not finish before its deadline");
            p->st.timeouts++;
            queued_dec_locked(p, q);
            queued_free(q);
            q = NULL;
            continue;
        }
        rv = dispatch_one_locked(p, w, &b, q);
        if (rv == CN_OK) {
            q = NULL;
            continue;
        }
        if (b.n == 0 && (rv == CN_TOOBIG || rv == CN_INVAL)) {
            /* Alone in a message and still not sendable: no worker can ever take it. */
            synthetic_error(rs, q->d.instance_id, q->d.exec_id, q->d.attempt, "ValueError",
                            rv == CN_TOOBIG ? "the action's arguments are too large to send "
                                              "to a worker (over 16 MiB)"
                                            : "the action's arguments cannot be encoded");
            queued_dec_locked(p, q);
            queued_free(q);
            q = NULL;
            continue;
        }
        queue_push_front_locked(p, q); /* the next message takes it */
        q = NULL;
        break;
    }
    if (q != NULL) {
        queue_push_front_locked(p, q);
    }
    if (b.n == 0) {
        wp_batch_fini(&b);
        return false;
    }
    wp_batch_finish(&b);
    reply_bytes_locked(p, c, b.buf.data, b.buf.len);
    p->st.dispatch_msgs++;
    wp_batch_fini(&b);
    return true;
}

static void
close_pipe(struct rn_pool *p, uint32_t id)
{
    rn_sprep_close(p->srv, id);
}

/* Pipe id said hello (or went away): it no longer waits for one. */
static void
greeted_locked(struct rn_pool *p, uint32_t id)
{
    size_t i;

    for (i = 0; i < p->greet.len; i++) {
        if (p->greet.items[i].pipe == id) {
            p->greet.items[i] = p->greet.items[--p->greet.len];
            return;
        }
    }
}

/* ---- requests ----------------------------------------------------------------------------- */

/* The attempts in flight on pipe id fail with WorkerLost (those not already timed out) and
 * are forgotten. Call with the lock held. */
static void
fail_pipe_flights_locked(struct rn_pool *p, uint32_t id, struct results *rs)
{
    struct worker *w;
    bool requeued = false;
    size_t i;

    for (i = 0; i < p->nfl; i++) {
        struct flight *f = &p->fl[i];
        if (!f->used || f->pipe != id) {
            continue;
        }
        if (!f->done && f->q != NULL && f->q->requeues < p->requeue_lost) {
            /* Dispatched again, same execution id and attempt (at least once). */
            struct queued *q = f->q;
            f->q = NULL;
            q->requeues++;
            queue_push_front_locked(p, q);
            queued_inc_locked(p, q);
            p->st.requeued++;
            requeued = true;
        } else if (!f->done) {
            synthetic_error(rs, f->instance_id, f->exec_id, f->attempt,
                            rn_error_name(RN_ERR_WORKER_LOST),
                            "the worker running this attempt disconnected");
            p->st.lost++;
        }
        flight_release_locked(p, i);
    }
    if (requeued) {
        for (w = p->workers; w != NULL; w = w->next) {
            if (w->pipe != id && w->parked != NULL && worker_room(w) > 0) {
                (void) dispatch_locked(p, w, w->parked, NULL, rs);
            }
        }
    }
}

static void
on_hello_locked(struct rn_pool *p, struct pctx *c, const struct wp_msg *m, struct results *rs)
{
    struct worker *w;
    struct wp_msg r;
    uint32_t i;

    if (p->credential != NULL &&
        (m->credential == NULL || strcmp(m->credential, p->credential) != 0)) {
        p->st.refused++;
        greeted_locked(p, c->pipe); /* the refusal's grace period closes it */
        wp_msg_init(&r, WP_REFUSED);
        r.reason = "bad credential";
        reply_locked(p, c, &r);
        if (p->nrefused < sizeof(p->refused) / sizeof(p->refused[0])) {
            p->refused[p->nrefused].pipe = c->pipe;
            p->refused[p->nrefused].at = cn_mono_ms();
            p->nrefused++;
        } else {
            close_pipe(p, c->pipe); /* too many at once: no grace */
        }
        if (p->timer_wake > cn_mono_ms() + REFUSE_GRACE_MS) {
            cn_cond_signal(&p->cond);
        }
        return;
    }
    if ((w = worker_find(p, c->pipe)) == NULL) {
        w = cn_xcalloc(1, sizeof(*w));
        w->pipe = c->pipe;
        for (i = 0; i < p->greet.len; i++) {
            if (p->greet.items[i].pipe == c->pipe) {
                memcpy(w->peer, p->greet.items[i].peer, sizeof(w->peer));
            }
        }
        w->last_seen = cn_mono_ms();
        w->next = p->workers;
        p->workers = w;
        p->st.workers++;
    } else {
        /* A new session on the same connection: the worker dropped everything of the old one
         * (it says hello again only after losing track of it), so that is lost too. */
        fail_pipe_flights_locked(p, c->pipe, rs);
        w->inflight = 0;
        w->leaving = false;
        if (w->parked != NULL) {
            reply_kind_locked(p, w->parked, WP_NOOP);
        }
        if (w->ctl != NULL) {
            reply_kind_locked(p, w->ctl, WP_NOOP);
        }
        for (i = 0; i < w->nactions; i++) {
            free(w->actions[i]);
        }
        free(w->actions);
        free(w->name);
    }
    w->name = cn_xstrdup(m->worker);
    w->actions = cn_xcalloc(m->nactions, sizeof(*w->actions));
    for (i = 0; i < m->nactions; i++) {
        w->actions[i] = cn_xstrdup(m->actions[i]);
    }
    w->nactions = m->nactions;
    w->slots = m->slots;
    w->prefetch = m->prefetch;
    w->cap = m->slots + m->prefetch;
    w->said_room = WP_ROOM_ANY;
    greeted_locked(p, c->pipe);
    room_check_locked(p); /* more room for the claimer */
    wp_msg_init(&r, WP_WELCOME);
    r.session = ++p->next_session;
    r.idle_ms = p->idle_ms;
    reply_locked(p, c, &r);
}

/* Accepts an outcome when it answers a dispatch in flight on worker w's pipe. One that came
 * after its deadline is dropped, but frees its room on the worker. */
static void
on_outcome_locked(struct rn_pool *p, struct worker *w, const struct wp_outcome *o,
                  struct results *rs)
{
    uint8_t key[16];
    uint32_t i;
    struct flight *f;

    token_key(o->token, key);
    if (!rn_idmap_get(&p->tokens, key, &i)) {
        p->st.stale++;
        return;
    }
    f = &p->fl[i];
    /* o->exec_id is the wire's raw bytes */
    if (f->pipe != w->pipe || f->attempt != o->attempt ||
        memcmp(f->exec_id.b, o->exec_id, sizeof(o->exec_id)) != 0) {
        p->st.stale++;
        return;
    }
    if (f->done) {
        p->st.stale++;
    } else {
        results_add(rs, f->instance_id, f->exec_id, f->attempt, o->ok, ir_val_retain(o->value));
        p->st.results++;
        rn_lathist_add(&p->st.action_time, cn_mono_us() - f->sent_us);
    }
    flight_release_locked(p, i);
    w->inflight--;
}

static void
on_request_locked(struct rn_pool *p, struct pctx *c, const void *buf, size_t len,
                  struct results *rs)
{
    struct wp_msg m;
    struct cn_errmsg em;
    struct worker *w;

    for (size_t i = 0; i < p->nrefused; i++) {
        if (p->refused[i].pipe == c->pipe) {
            /* Refused at hello: nothing more is answered on this connection. */
            pctx_done_locked(p, c);
            return;
        }
    }
    if (wp_msg_decode(buf, len, &m, &em) != CN_OK) {
        results_note(rs, "dropping worker connection %u: %s", c->pipe, em.text);
        p->st.bad_messages++;
        close_pipe(p, c->pipe);
        pctx_done_locked(p, c);
        return;
    }
    w = worker_find(p, c->pipe);
    if (w != NULL) {
        w->last_seen = cn_mono_ms();
    }
    if (m.kind != WP_HELLO && w == NULL) {
        /* Everything but hello needs a welcomed worker. */
        p->st.bad_messages++;
        close_pipe(p, c->pipe);
        pctx_done_locked(p, c);
        wp_msg_fini(&m);
        return;
    }
    switch (m.kind) {
    case WP_HELLO:
        on_hello_locked(p, c, &m, rs);
        break;
    case WP_READY:
        w->said_room = m.room; /* this request's: an older parked one is released below */
        for (uint32_t i = 0; i < m.noutcomes; i++) {
            on_outcome_locked(p, w, &m.outcomes[i], rs);
        }
        if (w->leaving) {
            reply_kind_locked(p, c, WP_NOOP); /* stopping: outcomes taken, no more work */
        } else if (!dispatch_locked(p, w, c, NULL, rs)) {
            /* One parked `ready` per worker: an older one is released so that the worker
             * always has a request free to carry its next outcomes. */
            if (w->parked != NULL) {
                reply_kind_locked(p, w->parked, WP_NOOP);
            }
            w->parked = park_locked(p, c, false);
        }
        break;
    case WP_CONTROL:
        if (w->ctl != NULL) {
            reply_kind_locked(p, w->ctl, WP_NOOP);
        }
        w->ctl = park_locked(p, c, true);
        send_pending_cancel_locked(p, w->ctl);
        break;
    case WP_GOODBYE:
        w->leaving = true;
        /* Release its parked `ready` before the ack: the pipe keeps order, so when the worker
         * reads the ack, every request it has out already holds its last reply (a dispatch
         * sent before the goodbye, or this noop) and it knows nothing more can come. */
        if (w->parked != NULL) {
            reply_kind_locked(p, w->parked, WP_NOOP);
        }
        reply_kind_locked(p, c, WP_ACK);
        break;
    default:
        /* A runner-to-worker kind sent by a worker. */
        p->st.bad_messages++;
        close_pipe(p, c->pipe);
        pctx_done_locked(p, c);
        break;
    }
    wp_msg_fini(&m);
}

/* A request from connection conn (sprep's callback). */
static void
on_request(void *arg, uint32_t conn, const struct rn_sprep_req *rq, const void *body, size_t len)
{
    struct rn_pool *p = arg;
    struct results rs = RESULTS_INIT;
    struct pctx c;

    memset(&c, 0, sizeof(c));
    c.state = PC_HANDLING;
    c.pipe = conn;
    c.rq = *rq;
    cn_mutex_lock(&p->mtx);
    if (!p->stopping) { /* else a worker's last request racing the stop */
        on_request_locked(p, &c, body, len, &rs);
    }
    cn_mutex_unlock(&p->mtx);
    results_deliver(p, &rs);
}

/* Drops the connection that has waited longest for its hello (counted in ungreeted). Call with
 * the lock held. */
static void
drop_oldest_ungreeted_locked(struct rn_pool *p)
{
    size_t i, oldest = 0;

    for (i = 1; i < p->greet.len; i++) {
        if (p->greet.items[i].at < p->greet.items[oldest].at) {
            oldest = i;
        }
    }
    close_pipe(p, p->greet.items[oldest].pipe); /* its removal callback finds nothing more */
    p->greet.items[oldest] = p->greet.items[--p->greet.len];
    p->st.ungreeted++;
}

/* A connection was accepted, before any byte of it was read: it must complete the transport
 * handshake and say hello within hello_timeout_ms of now (the timer thread drops it
 * otherwise), and at most max_ungreeted wait at once: past that, the one that has waited
 * longest is dropped for it, so that a real worker connecting during a flood of silent
 * connections gets in. With the descriptor budget spent, one waiting for hello makes room the
 * same way, or the transport stops accepting until a connection closes. */
static bool
on_accepted(void *arg, uint32_t conn, const char *peer, bool must_make_room)
{
    struct rn_pool *p = arg;
    struct greet g;

    memset(&g, 0, sizeof(g));
    (void) snprintf(g.peer, sizeof(g.peer), "%s", peer);
    cn_mutex_lock(&p->mtx);
    if (p->stopping || (must_make_room && p->greet.len == 0)) {
        cn_mutex_unlock(&p->mtx);
        return false;
    }
    if (must_make_room || p->greet.len >= p->max_ungreeted) {
        drop_oldest_ungreeted_locked(p);
    }
    g.pipe = conn;
    g.at = cn_mono_ms();
    CN_VEC_XPUSH(&p->greet, g);
    if (p->timer_wake > g.at + (int64_t) p->hello_timeout_ms) {
        cn_cond_signal(&p->cond);
    }
    cn_mutex_unlock(&p->mtx);
    return true;
}

/* A connection went away: its attempts fail now, its parked requests are dropped. */
static void
on_closed(void *arg, uint32_t id)
{
    struct rn_pool *p = arg;
    struct results rs = RESULTS_INIT;
    struct worker **wp, *w;
    struct pctx *c, *next;
    size_t i;

    cn_mutex_lock(&p->mtx);
    if (p->stopping) {
        /* rn_pool_stop returns every attempt in flight itself. */
        cn_mutex_unlock(&p->mtx);
        return;
    }
    for (i = 0; i < p->nrefused; i++) {
        if (p->refused[i].pipe == id) {
            p->refused[i] = p->refused[--p->nrefused];
            break;
        }
    }
    greeted_locked(p, id);
    for (wp = &p->workers; (w = *wp) != NULL; wp = &w->next) {
        if (w->pipe == id) {
            *wp = w->next;
            worker_free(w);
            p->st.workers--;
            break;
        }
    }
    fail_pipe_flights_locked(p, id, &rs);
    for (c = p->all; c != NULL; c = next) {
        next = c->next;
        if (c->pipe == id) {
            pctx_done_locked(p, c); /* nothing can answer it any more */
        }
    }
    cn_mutex_unlock(&p->mtx);
    results_deliver(p, &rs);
}

/* ---- the timer thread --------------------------------------------------------------------- */

static void *
timer_main(void *arg)
{
    struct rn_pool *p = arg;

    cn_mutex_lock(&p->mtx);
    while (!p->stopping) {
        struct results rs = RESULTS_INIT;
        int64_t mono = cn_mono_ms(), wall = cn_wall_ms();
        int64_t next = mono + p->idle_ms, wake;
        struct pctx *c, *cnext;
        struct worker *w;
        size_t i, dropped = 0;

        for (i = 0; i < p->nrefused; i++) {
            if (mono - p->refused[i].at >= REFUSE_GRACE_MS) {
                close_pipe(p, p->refused[i].pipe); /* its removal callback drops the entry */
            } else if (p->refused[i].at + REFUSE_GRACE_MS < next) {
                next = p->refused[i].at + REFUSE_GRACE_MS;
            }
        }
        for (i = 0; i < p->greet.len;) {
            int64_t limit = p->greet.items[i].at + (int64_t) p->hello_timeout_ms;
            if (mono >= limit) {
                /* Forgotten now: its removal callback finds nothing more to do. */
                close_pipe(p, p->greet.items[i].pipe);
                p->greet.items[i] = p->greet.items[--p->greet.len];
                p->st.ungreeted++;
                dropped++;
                continue;
            }
            if (limit < next) {
                next = limit;
            }
            i++;
        }
        if (dropped > 0) {
            results_note(&rs, "dropped %zu connection(s) that said no hello within %u ms", dropped,
                         p->hello_timeout_ms);
        }
        for (w = p->workers; w != NULL; w = w->next) {
            /* Heartbeat: a live worker re-parks each request the idle cycle answers, so three
             * periods of silence mean its host is gone with the connection still open. A
             * worker draining after goodbye parks nothing; its attempts' deadlines bound it. */
            int64_t limit = w->last_seen + 3 * (int64_t) p->idle_ms + 1000;
            if (w->leaving) {
                continue;
            }
            if (mono >= limit) {
                results_note(&rs, "worker %s silent for %lld ms: dropping it",
                             w->name != NULL ? w->name : "?", (long long) (mono - w->last_seen));
                p->st.silent++;
                w->last_seen = mono; /* once: its removal callback fails what it held */
                close_pipe(p, w->pipe);
            } else if (limit < next) {
                next = limit;
            }
        }
        for (c = p->all; c != NULL; c = cnext) {
            cnext = c->next; /* an answer frees c */
            if (mono - c->parked_at >= (int64_t) p->idle_ms) {
                reply_kind_locked(p, c, WP_NOOP); /* liveness for both sides */
            } else if (c->parked_at + p->idle_ms < next) {
                next = c->parked_at + p->idle_ms;
            }
        }
        for (i = 0; i < p->nfl; i++) {
            struct flight *f = &p->fl[i];
            if (!f->used || f->done || f->deadline == 0) {
                continue;
            }
            if (wall >= f->deadline) {
                struct worker *fw = worker_find(p, f->pipe);
                synthetic_error(&rs, f->instance_id, f->exec_id, f->attempt,
                                rn_error_name(RN_ERR_ACTION_TIMEOUT),
                                "the attempt did not finish before its deadline");
                f->done = true;
                p->st.timeouts++;
                /* Stop the work, not only the wait: the worker gets `cancel` (its slot stays
                 * taken until it answers; a worker that never does keeps only that slot). */
                if (fw != NULL && fw->ctl != NULL) {
                    send_cancel_locked(p, fw->ctl, f);
                } else {
                    f->cancel_pending = true;
                }
            } else if (mono + (f->deadline - wall) < next) {
                next = mono + (f->deadline - wall);
            }
        }
        if (rs.len > 0 || rs.notes.len > 0) {
            cn_mutex_unlock(&p->mtx);
            results_deliver(p, &rs);
            cn_mutex_lock(&p->mtx);
            continue;
        }
        /* Sleep until the next idle expiry or deadline, or until woken by activity. */
        wake = next - mono;
        if (wake < 1) {
            wake = 1;
        }
        p->timer_wake = mono + wake;
        cn_cond_wait_until(&p->cond, &p->mtx, mono + wake);
    }
    cn_mutex_unlock(&p->mtx);
    return NULL;
}

/* ---- public API --------------------------------------------------------------------------- */

cn_err
rn_pool_start(const struct rn_pool_cfg *cfg, rn_pool_result_fn fn, void *arg, struct rn_pool **out,
              struct cn_errmsg *err)
{
    struct rn_pool *p;

    if (cfg->listen_url == NULL || fn == NULL) {
        return CN_INVAL;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return CN_NOMEM;
    }
    p->fn = fn;
    p->arg = arg;
    p->idle_ms = cfg->idle_ms ? cfg->idle_ms : RN_DEFAULT_WORKER_IDLE_MS;
    p->backlog_horizon_ms =
        cfg->backlog_horizon_ms ? cfg->backlog_horizon_ms : RN_POOL_BACKLOG_HORIZON_MS;
    p->requeue_lost = cfg->requeue_lost;
    p->hello_timeout_ms = cfg->hello_timeout_ms ? cfg->hello_timeout_ms : RN_POOL_HELLO_TIMEOUT_MS;
    p->max_ungreeted = cfg->max_ungreeted ? cfg->max_ungreeted : RN_POOL_MAX_UNGREETED;
    p->confirmed = cfg->leases_confirmed_ms;
    p->lease_ttl_ms = cfg->lease_ttl_ms;
    p->credential = cfg->credential ? strdup(cfg->credential) : NULL;
    cn_mutex_init(&p->mtx);
    cn_cond_init(&p->cond);
    {
        struct rn_sprep_cfg scfg = {cfg->listen_url,  WP_MAX_MSG,
                                    cfg->budget,      cfg->tls_cert_key_file,
                                    cfg->tls_ca_file, cfg->tls_require_client_cert};
        struct rn_sprep_ops ops = {on_accepted, on_request, on_closed, p};
        struct cn_errmsg em;
        cn_err rv;
        if ((rv = rn_sprep_start(&scfg, &ops, &p->srv, &em)) != CN_OK) {
            cn_mutex_destroy(&p->mtx);
            cn_cond_destroy(&p->cond);
            free(p->credential);
            free(p);
            return cn_errmsg_set(err, rv, "worker pool: %s", em.text);
        }
    }
    p->port = rn_sprep_port(p->srv);
    if (pthread_create(&p->timer, NULL, timer_main, p) != 0) {
        rn_pool_stop(p);
        return CN_NOMEM;
    }
    p->timer_started = true;
    *out = p;
    return CN_OK;
}

int
rn_pool_port(const struct rn_pool *p)
{
    return p->port;
}

size_t
rn_pool_room(struct rn_pool *p, void (*wake)(void *), void *arg)
{
    uint64_t cap;
    size_t room;

    cn_mutex_lock(&p->mtx);
    cap = backlog_cap_locked(p);
    room = p->st.queued < cap ? (size_t) (cap - p->st.queued) : 0;
    p->room_wake = room > 0 ? NULL : wake;
    p->room_arg = room > 0 ? NULL : arg;
    cn_mutex_unlock(&p->mtx);
    return room;
}

cn_err
rn_pool_submit(struct rn_pool *p, const struct rn_pool_dispatch *d)
{
    struct queued *q = cn_xcalloc(1, sizeof(*q));
    struct results rs = RESULTS_INIT;
    struct worker *w;

    q->action = cn_xstrdup(d->action);
    q->d.action = q->action;
    q->d.instance_id = d->instance_id;
    q->d.lock = d->lock;
    q->d.exec_id = d->exec_id;
    q->d.attempt = d->attempt;
    q->d.kwargs = ir_val_retain(d->kwargs);
    q->d.prev_error = ir_val_retain(d->prev_error);
    q->d.timeout_ms = d->timeout_ms;
    q->d.deadline_ms = d->deadline_ms;
    q->d.ready_us = d->ready_us;
    cn_mutex_lock(&p->mtx);
    q->act = act_of_locked(p, q->action);
    queued_inc_locked(p, q);
    /* A worker with a parked `ready` and room, serving the action, takes it at once (with
     * whatever else is queued for it); else it waits for the next `ready`. */
    for (w = p->workers; w != NULL; w = w->next) {
        if (w->parked != NULL && worker_room(w) > 0 && worker_serves(w, q->d.action)) {
            (void) dispatch_locked(p, w, w->parked, q, &rs);
            cn_mutex_unlock(&p->mtx);
            results_deliver(p, &rs);
            return CN_OK;
        }
    }
    if (p->qtail != NULL) {
        p->qtail->next = q;
    } else {
        p->qhead = q;
    }
    p->qtail = q;
    cn_mutex_unlock(&p->mtx);
    return CN_OK;
}

/* Drops the queued (not yet sent) attempts `match` accepts; returns how many. A walk of the
 * queue: cancels and withdrawals are rare. Call with the lock held. */
static size_t
queue_drop_locked(struct rn_pool *p, bool (*match)(const struct rn_pool_dispatch *, const void *),
                  const void *arg)
{
    struct queued **pp, *q, *prev = NULL;
    size_t n = 0;

    for (pp = &p->qhead; (q = *pp) != NULL;) {
        if (!match(&q->d, arg)) {
            prev = q;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        if (p->qtail == q) {
            p->qtail = prev;
        }
        queued_dec_locked(p, q);
        queued_free(q);
        n++;
    }
    return n;
}

struct attempt_key {
    struct rn_xid exec_id;
    uint32_t attempt; /* 0: any */
};

static bool
is_attempt(const struct rn_pool_dispatch *d, const void *arg)
{
    const struct attempt_key *k = arg;

    return rn_xid_eq(d->exec_id, k->exec_id) && (k->attempt == 0 || d->attempt == k->attempt);
}

struct claim_key {
    struct rn_iid instance_id;
    struct rn_token lock;
};

static bool
is_claims(const struct rn_pool_dispatch *d, const void *arg)
{
    const struct claim_key *k = arg;

    return rn_iid_eq(d->instance_id, k->instance_id) && rn_token_eq(d->lock, k->lock);
}

cn_err
rn_pool_cancel(struct rn_pool *p, struct rn_xid exec_id, uint32_t attempt)
{
    struct attempt_key key = {exec_id, attempt};
    size_t i;
    cn_err rv = CN_NOTFOUND;

    cn_mutex_lock(&p->mtx);
    if (queue_drop_locked(p, is_attempt, &key) > 0) { /* not sent yet */
        rv = CN_OK;
    }
    for (i = 0; i < p->nfl; i++) {
        struct flight *f = &p->fl[i];
        struct worker *w;
        if (!f->used || f->done || (attempt != 0 && f->attempt != attempt) ||
            !rn_xid_eq(f->exec_id, exec_id)) {
            continue;
        }
        rv = CN_OK;
        if ((w = worker_find(p, f->pipe)) != NULL && w->ctl != NULL) {
            send_cancel_locked(p, w->ctl, f);
        } else {
            /* Its control request is in transit (it answers one cancel per request). */
            f->cancel_pending = true;
        }
        break;
    }
    cn_mutex_unlock(&p->mtx);
    return rv;
}

void
rn_pool_kick(struct rn_pool *p)
{
    struct results rs = RESULTS_INIT;
    struct worker *w;

    cn_mutex_lock(&p->mtx);
    for (w = p->workers; w != NULL; w = w->next) {
        if (w->parked != NULL && worker_room(w) > 0 && p->qhead != NULL) {
            (void) dispatch_locked(p, w, w->parked, NULL, &rs);
        }
    }
    cn_mutex_unlock(&p->mtx);
    results_deliver(p, &rs);
}

size_t
rn_pool_withdraw(struct rn_pool *p, struct rn_iid iid, struct rn_token lock)
{
    struct claim_key claim = {iid, lock};
    size_t i, n;

    cn_mutex_lock(&p->mtx);
    n = queue_drop_locked(p, is_claims, &claim);
    for (i = 0; i < p->nfl; i++) {
        struct flight *f = &p->fl[i];
        struct worker *w;
        if (!f->used || f->done || !rn_iid_eq(f->instance_id, iid) || !rn_token_eq(f->lock, lock)) {
            continue;
        }
        f->done = true;
        if (f->q != NULL) {
            queued_free(f->q); /* never dispatched again */
            f->q = NULL;
        }
        if ((w = worker_find(p, f->pipe)) != NULL && w->ctl != NULL) {
            send_cancel_locked(p, w->ctl, f);
        } else {
            f->cancel_pending = true;
        }
        n++;
    }
    p->st.withdrawn += n;
    cn_mutex_unlock(&p->mtx);
    return n;
}

void
rn_pool_stats(struct rn_pool *p, struct rn_pool_stats *st)
{
    cn_mutex_lock(&p->mtx);
    *st = p->st;
    st->backlog_cap = backlog_cap_locked(p);
    st->parked = p->nparked;
    st->greeting = p->greet.len;
    cn_mutex_unlock(&p->mtx);
    {
        size_t open;
        rn_sprep_counts(p->srv, &open, &st->accept_paused);
        st->connections = open;
    }
}

static int
action_info_cmp(const void *a, const void *b)
{
    return strcmp(((const struct rn_pool_action_info *) a)->name,
                  ((const struct rn_pool_action_info *) b)->name);
}

void
rn_pool_snapshot(struct rn_pool *p, struct rn_pool_snapshot *out)
{
    const struct worker *w;
    struct cn_strmap seen = CN_STRMAP_INIT;
    size_t i, k, cap;

    memset(out, 0, sizeof(*out));
    cn_mutex_lock(&p->mtx);
    for (w = p->workers; w != NULL; w = w->next) {
        out->nworkers++;
    }
    out->workers = cn_xcalloc(out->nworkers > 0 ? out->nworkers : 1, sizeof(*out->workers));
    cap = p->acts.len;
    for (w = p->workers, k = 0; w != NULL; w = w->next, k++) {
        struct rn_pool_worker_info *wi = &out->workers[k];
        wi->name = cn_xstrdup(w->name != NULL ? w->name : "");
        memcpy(wi->peer, w->peer, sizeof(wi->peer));
        wi->actions = cn_xcalloc(w->nactions > 0 ? w->nactions : 1, sizeof(*wi->actions));
        for (i = 0; i < w->nactions; i++) {
            wi->actions[i] = cn_xstrdup(w->actions[i]);
        }
        wi->nactions = w->nactions;
        wi->slots = w->slots;
        wi->prefetch = w->prefetch;
        wi->inflight = w->inflight;
        wi->leaving = w->leaving;
        wi->idle_ms = cn_mono_ms() - w->last_seen;
        cap += w->nactions;
    }
    /* Every action with attempts here, and every action a worker serves (a worker's action
     * never submitted has no counter entry yet). */
    out->actions = cn_xcalloc(cap > 0 ? cap : 1, sizeof(*out->actions));
    for (i = 0; i < p->acts.len; i++) {
        const struct act_count *a = &p->acts.items[i];
        struct rn_pool_action_info *ai = &out->actions[out->nactions];
        ai->name = a->name; /* copied below, outside the lock */
        ai->waiting = a->queued;
        ai->busy = a->inflight;
        if (cn_strmap_put(&seen, a->name, (uint32_t) out->nactions) != CN_OK) {
            cn_oom("pool snapshot");
        }
        out->nactions++;
    }
    for (w = p->workers; w != NULL; w = w->next) {
        if (w->leaving) {
            continue; /* takes no more work: it serves nothing any more */
        }
        for (i = 0; i < w->nactions; i++) {
            uint32_t at;
            if (!cn_strmap_get(&seen, w->actions[i], &at)) {
                at = (uint32_t) out->nactions++;
                out->actions[at].name = w->actions[i];
                if (cn_strmap_put(&seen, w->actions[i], at) != CN_OK) {
                    cn_oom("pool snapshot");
                }
            }
            out->actions[at].workers++;
            out->actions[at].slots += w->slots;
        }
    }
    out->queued = p->st.queued;
    for (i = 0; i < out->nactions; i++) {
        out->actions[i].name = cn_xstrdup(out->actions[i].name);
    }
    cn_mutex_unlock(&p->mtx);
    cn_strmap_fini(&seen);
    /* Actions once submitted with nothing left and no worker are history: dropped. */
    for (i = 0, k = 0; i < out->nactions; i++) {
        struct rn_pool_action_info *ai = &out->actions[i];
        if (ai->workers == 0 && ai->waiting == 0 && ai->busy == 0) {
            free(ai->name);
            continue;
        }
        out->actions[k++] = *ai;
    }
    out->nactions = k;
    qsort(out->actions, out->nactions, sizeof(*out->actions), action_info_cmp);
}

void
rn_pool_snapshot_fini(struct rn_pool_snapshot *s)
{
    size_t i, k;

    for (i = 0; i < s->nworkers; i++) {
        for (k = 0; k < s->workers[i].nactions; k++) {
            free(s->workers[i].actions[k]);
        }
        free(s->workers[i].actions);
        free(s->workers[i].name);
    }
    free(s->workers);
    for (i = 0; i < s->nactions; i++) {
        free(s->actions[i].name);
    }
    free(s->actions);
    memset(s, 0, sizeof(*s));
}

/* Pools whose transport did not close in time (rn_sprep_stop): nng may still call back into
 * them, so they are never freed; kept here so that they are not reported as leaks either. */
static struct rn_pool *left_behind;
static pthread_mutex_t left_behind_mtx = PTHREAD_MUTEX_INITIALIZER;

/* A stopping pool reports every attempt still in flight lost (WorkerLost): their instances
 * run them again, nothing is dropped. */
static void
report_in_flight_lost(struct rn_pool *p)
{
    struct results rs = RESULTS_INIT;
    size_t i;

    cn_mutex_lock(&p->mtx);
    for (i = 0; i < p->nfl; i++) {
        if (p->fl[i].used && !p->fl[i].done) {
            synthetic_error(&rs, p->fl[i].instance_id, p->fl[i].exec_id, p->fl[i].attempt,
                            rn_error_name(RN_ERR_WORKER_LOST), "the worker pool stopped");
            p->fl[i].done = true;
        }
    }
    cn_mutex_unlock(&p->mtx);
    results_deliver(p, &rs);
}

/* The stop of a pool whose transport does not close in time: the attempts in flight are
 * reported lost as in a normal stop, and the pool is kept. The callbacks nng may still run
 * see `stopping` and return without calling out. */
static void
pool_leave_behind(struct rn_pool *p)
{
    cn_log(CN_LOG_WARN, "pool: the worker connections did not close within %d ms; left behind",
           WP_CLOSE_TIMEOUT_MS);
    report_in_flight_lost(p);
    cn_mutex_lock(&left_behind_mtx);
    p->left_next = left_behind;
    left_behind = p;
    cn_mutex_unlock(&left_behind_mtx);
}

void
rn_pool_stop(struct rn_pool *p)
{
    struct pctx *c, *next;
    struct worker *w, *wn;
    struct queued *q, *qn;
    size_t i;

    if (p == NULL) {
        return;
    }
    cn_mutex_lock(&p->mtx);
    p->stopping = true;
    cn_cond_signal(&p->cond);
    cn_mutex_unlock(&p->mtx);
    if (p->timer_started) {
        cn_thread_join(p->timer);
    }
    if (!rn_sprep_stop(p->srv, WP_CLOSE_TIMEOUT_MS)) {
        pool_leave_behind(p);
        return;
    }
    /* Every connection is closed and no callback runs again. */
    for (c = p->all; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    for (c = p->spare; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    report_in_flight_lost(p);
    for (i = 0; i < p->nfl; i++) {
        if (p->fl[i].used && p->fl[i].q != NULL) {
            queued_free(p->fl[i].q);
        }
    }
    for (w = p->workers; w != NULL; w = wn) {
        wn = w->next;
        worker_free(w);
    }
    for (q = p->qhead; q != NULL; q = qn) {
        qn = q->next;
        queued_free(q);
    }
    rn_idmap_fini(&p->tokens);
    for (i = 0; i < p->acts.len; i++) {
        free(p->acts.items[i].name);
    }
    free(p->acts.items);
    cn_strmap_fini(&p->act_index);
    free(p->fl);
    free(p->fl_free);
    free(p->greet.items);
    free(p->credential);
    cn_mutex_destroy(&p->mtx);
    cn_cond_destroy(&p->cond);
    free(p);
}
