/* SPDX-License-Identifier: MIT */
/*
 * Replies to workers: attempts dispatched in batches (each recorded before its reply is sent),
 * noop, refused, cancels, and the parked requests they answer. Locks: p->mtx, as pool.c DESIGN.
 */

#include <stdlib.h>

#include "runner/pool/pool_int.h"

/* ---- replies ------------------------------------------------------------------------------ */

/* Keeps the request being handled for later (a parked `ready` or `control`): returns its heap
 * copy, the one to answer from now on. Call with the lock held. */
struct pctx *
rn_pl_park_locked(struct rn_pool *p, struct pctx *handled, bool control)
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
void
rn_pl_pctx_done_locked(struct rn_pool *p, struct pctx *c)
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

    if (c->state != PC_PARKED || (w = rn_pl_worker_find(p, c->pipe)) == NULL) {
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
    rn_pl_pctx_done_locked(p, c);
}

/* Sends m as the reply on c. Call with the lock held. */
void
rn_pl_reply_locked(struct rn_pool *p, struct pctx *c, const struct wp_msg *m)
{
    struct cn_buf b = CN_BUF_INIT;

    if (wp_msg_encode(m, &b) != CN_OK) {
        cn_buf_fini(&b);
        unpark_locked(p, c);
        rn_pl_pctx_done_locked(p, c); /* abandoned: the worker resends nothing, its SDK times out */
        return;
    }
    reply_bytes_locked(p, c, b.data, b.len);
    cn_buf_fini(&b);
}

void
rn_pl_send_cancel_locked(struct rn_pool *p, struct pctx *c, struct flight *f)
{
    struct wp_msg m;

    wp_msg_init(&m, WP_CANCEL);
    memcpy(m.exec_id, f->exec_id.b, sizeof(m.exec_id)); /* onto the wire */
    m.attempt = f->attempt;
    m.token = f->token;
    f->cancel_pending = false;
    rn_pl_reply_locked(p, c, &m);
}

/* A control request just parked on c: it carries the first cancel asked for meanwhile. */
void
rn_pl_send_pending_cancel_locked(struct rn_pool *p, struct pctx *c)
{
    size_t i;

    for (i = 0; i < p->nfl; i++) {
        struct flight *f = &p->fl[i];
        if (f->used && f->cancel_pending && f->pipe == c->pipe) {
            rn_pl_send_cancel_locked(p, c, f);
            return;
        }
    }
}

void
rn_pl_reply_kind_locked(struct rn_pool *p, struct pctx *c, enum wp_kind kind)
{
    struct wp_msg m;

    wp_msg_init(&m, kind);
    rn_pl_reply_locked(p, c, &m);
}

/* The first queued attempt worker w serves, unlinked; NULL if none. */
static struct queued *
take_for_locked(struct rn_pool *p, const struct worker *w)
{
    struct queued **pp, *q, *prev = NULL;

    for (pp = &p->qhead; (q = *pp) != NULL; prev = q, pp = &q->next) {
        if (rn_pl_worker_serves(w, q->d.action)) {
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
void
rn_pl_queue_push_front_locked(struct rn_pool *p, struct queued *q)
{
    q->next = p->qhead;
    p->qhead = q;
    if (p->qtail == NULL) {
        p->qtail = q;
    }
}

void
rn_pl_queued_free(struct queued *q)
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

/* Attempt f starts now on its worker: its timeout counts from here, bounded by the
 * schedule-to-close deadline if any, and the timer is woken when that comes before its planned
 * wake. An attempt already given up on (done) gets no deadline. */
static void
flight_start_locked(struct rn_pool *p, struct flight *f)
{
    f->waiting = false;
    if (f->done) {
        return;
    }
    if (f->timeout_ms > 0) {
        int64_t by = cn_wall_ms() + f->timeout_ms;
        if (f->deadline == 0 || by < f->deadline) {
            f->deadline = by;
        }
    }
    if (f->deadline != 0 && cn_mono_ms() + (f->deadline - cn_wall_ms()) < p->timer_wake) {
        cn_cond_signal(&p->cond);
    }
}

/* A slot of worker w freed (it reported an attempt it ran): the oldest attempt waiting in its
 * queue starts, as the SDKs start them, in the order they came. Entries for attempts reported
 * or released meanwhile are skipped. Call with the lock held. */
void
rn_pl_start_next_waiting_locked(struct rn_pool *p, struct worker *w)
{
    while (w->waitq.head < w->waitq.len) {
        struct wait_ref r = w->waitq.items[w->waitq.head++];
        struct flight *f = r.fl < p->nfl ? &p->fl[r.fl] : NULL;

        if (f != NULL && f->used && f->waiting && f->token == r.token && f->pipe == w->pipe) {
            w->nwaiting--;
            flight_start_locked(p, f);
            break;
        }
    }
    if (w->waitq.head == w->waitq.len) {
        w->waitq.head = w->waitq.len = 0;
    }
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
    f->deadline = q->d.deadline_ms;
    f->timeout_ms = q->d.timeout_ms;
    /* Waiting in the runner's queue for a slot did not count; neither does waiting in the
     * worker's own (prefetch): a worker that serves this runner alone (it gives no room of its
     * own) starts attempts in the order they come, one per free slot, so one dispatched past
     * its slots starts when a slot frees for it (rn_pl_start_next_waiting_locked). A worker
     * that gives room shares its slots with other runners, which this count cannot see: its
     * attempts start here. */
    f->waiting = w->said_room == WP_ROOM_ANY && w->inflight - w->nwaiting >= w->slots;
    if (!f->waiting) {
        flight_start_locked(p, f);
    }
    rn_pl_token_key(f->token, key);
    memcpy(d.instance_id, q->d.instance_id.b, sizeof(d.instance_id)); /* onto the wire */
    memcpy(d.exec_id, q->d.exec_id.b, sizeof(d.exec_id));
    d.attempt = q->d.attempt;
    d.token = f->token;
    d.action = q->d.action;
    d.kwargs = q->d.kwargs;
    /* The worker stops the work at the sooner of the two, its timeout counted from when it
     * starts it (the deadline, for one waiting here, is the schedule-to-close one alone). */
    d.deadline_ms = f->deadline;
    d.timeout_ms = f->timeout_ms > 0 ? (uint64_t) f->timeout_ms : 0;
    d.last_error = q->d.prev_error;
    if ((rv = rn_idmap_put(&p->tokens, key, (uint32_t) i)) != CN_OK ||
        (rv = wp_batch_add_dispatch(b, &d)) != CN_OK) {
        rn_pl_flight_release_locked(p, i);
        return rv;
    }
    p->next_token++;
    if (f->waiting) {
        struct wait_ref r = {(uint32_t) i, f->token};
        if (w->waitq.len == w->waitq.cap) {
            w->waitq.cap = w->waitq.cap ? w->waitq.cap * 2 : 16;
            w->waitq.items = cn_xreallocarray(w->waitq.items, w->waitq.cap, sizeof(r));
        }
        w->waitq.items[w->waitq.len++] = r;
        w->nwaiting++;
    }
    f->sent_us = cn_mono_us();
    if (q->d.ready_us != 0) {
        rn_lathist_add(&p->st.dispatch_delay, f->sent_us - q->d.ready_us);
    }
    w->inflight++;
    p->st.dispatched++;
    rn_pl_queued_dec_locked(p, q);
    f->act = q->act;
    p->acts.items[q->act].inflight++;
    f->q = q; /* kept while in flight */
    return CN_OK;
}

/* Attempts worker w takes in reply to its latest `ready`: what the runner counts free of its
 * slots + prefetch, capped by the room that ready gave. A worker serving several runners gives
 * one, so that it splits its slots by their demand (docs/protocol.md, Room). */
uint32_t
rn_pl_worker_room(const struct worker *w)
{
    uint32_t free = w->inflight < w->cap ? w->cap - w->inflight : 0;

    return free < w->said_room ? free : w->said_room;
}

/* Answers c, a request of worker w, with one `dispatch` holding as many queued attempts w
 * serves as it has room for (q first, already unlinked, when not NULL). An attempt whose
 * arguments cannot be sent at all fails with a ValueError into rs. Returns false when nothing
 * was sent (c untouched; q, if any, is back in the queue). Call with the lock held. */
bool
rn_pl_dispatch_locked(struct rn_pool *p, struct worker *w, struct pctx *c, struct queued *q,
                      struct results *rs)
{
    struct wp_batch b;
    cn_err rv;

    /* Read at every dispatch, from the clock, so that threads resuming together after a pause
     * cannot dispatch before the keeper has noticed it (pool.h, the lease gate). */
    if (p->confirmed != NULL && cn_mono_ms() - atomic_load(p->confirmed) >= p->lease_ttl_ms) {
        p->st.gated++;
        if (q != NULL) {
            rn_pl_queue_push_front_locked(p, q);
        }
        return false;
    }
    if (rn_pl_worker_room(w) == 0 || wp_batch_begin(&b, WP_DISPATCH) != CN_OK) {
        if (q != NULL) {
            rn_pl_queue_push_front_locked(p, q);
        }
        return false;
    }
    while (b.n < w->said_room && w->inflight < w->cap &&
           (q != NULL || (q = take_for_locked(p, w)) != NULL)) {
        if (q->requeues > 0 && q->d.deadline_ms != 0 && cn_wall_ms() >= q->d.deadline_ms) {
            /* Given back by a dropped worker after its deadline passed. */
            rn_pl_synthetic_error(rs, q->d.instance_id, q->d.exec_id, q->d.attempt,
                                  rn_error_name(RN_ERR_ACTION_TIMEOUT),
                                  "the attempt did not finish before its deadline");
            p->st.timeouts++;
            rn_pl_queued_dec_locked(p, q);
            rn_pl_queued_free(q);
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
            rn_pl_synthetic_error(rs, q->d.instance_id, q->d.exec_id, q->d.attempt, "ValueError",
                                  rv == CN_TOOBIG ? "the action's arguments are too large to send "
                                                    "to a worker (over 16 MiB)"
                                                  : "the action's arguments cannot be encoded");
            rn_pl_queued_dec_locked(p, q);
            rn_pl_queued_free(q);
            q = NULL;
            continue;
        }
        rn_pl_queue_push_front_locked(p, q); /* the next message takes it */
        q = NULL;
        break;
    }
    if (q != NULL) {
        rn_pl_queue_push_front_locked(p, q);
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

void
rn_pl_close_pipe(struct rn_pool *p, uint32_t id)
{
    rn_sprep_close(p->srv, id);
}

/* Pipe id said hello (or went away): it no longer waits for one. */
void
rn_pl_greeted_locked(struct rn_pool *p, uint32_t id)
{
    size_t i;

    for (i = 0; i < p->greet.len; i++) {
        if (p->greet.items[i].pipe == id) {
            p->greet.items[i] = p->greet.items[--p->greet.len];
            return;
        }
    }
}
