/* SPDX-License-Identifier: MIT */
/*
 * A worker's requests, as its connection's callback receives them: hello, ready (answered or
 * parked), results, heartbeats, goodbye; checked against the records of what was dispatched to
 * it. Locks: p->mtx, as pool.c DESIGN.
 */

#include <stdio.h>
#include <stdlib.h>

#include "runner/pool/pool_int.h"

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
            rn_pl_queue_push_front_locked(p, q);
            rn_pl_queued_inc_locked(p, q);
            p->st.requeued++;
            requeued = true;
        } else if (!f->done) {
            rn_pl_synthetic_error(rs, f->instance_id, f->exec_id, f->attempt,
                                  rn_error_name(RN_ERR_WORKER_LOST),
                                  "the worker running this attempt disconnected");
            p->st.lost++;
        }
        rn_pl_flight_release_locked(p, i);
    }
    if (requeued) {
        for (w = p->workers; w != NULL; w = w->next) {
            if (w->pipe != id && w->parked != NULL && rn_pl_worker_room(w) > 0) {
                (void) rn_pl_dispatch_locked(p, w, w->parked, NULL, rs);
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
        rn_pl_greeted_locked(p, c->pipe); /* the refusal's grace period closes it */
        wp_msg_init(&r, WP_REFUSED);
        r.reason = "bad credential";
        rn_pl_reply_locked(p, c, &r);
        if (p->nrefused < sizeof(p->refused) / sizeof(p->refused[0])) {
            p->refused[p->nrefused].pipe = c->pipe;
            p->refused[p->nrefused].at = cn_mono_ms();
            p->nrefused++;
        } else {
            rn_pl_close_pipe(p, c->pipe); /* too many at once: no grace */
        }
        if (p->timer_wake > cn_mono_ms() + REFUSE_GRACE_MS) {
            cn_cond_signal(&p->cond);
        }
        return;
    }
    if ((w = rn_pl_worker_find(p, c->pipe)) == NULL) {
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
        w->nwaiting = 0;
        w->waitq.head = w->waitq.len = 0;
        w->leaving = false;
        if (w->parked != NULL) {
            rn_pl_reply_kind_locked(p, w->parked, WP_NOOP);
        }
        if (w->ctl != NULL) {
            rn_pl_reply_kind_locked(p, w->ctl, WP_NOOP);
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
    rn_pl_greeted_locked(p, c->pipe);
    rn_pl_room_check_locked(p); /* more room for the claimer */
    wp_msg_init(&r, WP_WELCOME);
    r.session = ++p->next_session;
    r.idle_ms = p->idle_ms;
    rn_pl_reply_locked(p, c, &r);
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
    bool ran;

    rn_pl_token_key(o->token, key);
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
        rn_pl_results_add(rs, f->instance_id, f->exec_id, f->attempt, o->ok,
                          ir_val_retain(o->value));
        p->st.results++;
        rn_lathist_add(&p->st.action_time, cn_mono_us() - f->sent_us);
    }
    /* One reported while waiting in the worker's queue (cancelled before it started, or
     * reported out of order) freed no slot. */
    ran = !f->waiting;
    if (f->waiting) {
        f->waiting = false;
        w->nwaiting--;
    }
    rn_pl_flight_release_locked(p, i);
    w->inflight--;
    if (ran) {
        rn_pl_start_next_waiting_locked(p, w);
    }
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
            rn_pl_pctx_done_locked(p, c);
            return;
        }
    }
    if (wp_msg_decode(buf, len, &m, &em) != CN_OK) {
        rn_pl_results_note(rs, "dropping worker connection %u: %s", c->pipe, em.text);
        p->st.bad_messages++;
        rn_pl_close_pipe(p, c->pipe);
        rn_pl_pctx_done_locked(p, c);
        return;
    }
    w = rn_pl_worker_find(p, c->pipe);
    if (w != NULL) {
        w->last_seen = cn_mono_ms();
    }
    if (m.kind != WP_HELLO && w == NULL) {
        /* Everything but hello needs a welcomed worker. */
        p->st.bad_messages++;
        rn_pl_close_pipe(p, c->pipe);
        rn_pl_pctx_done_locked(p, c);
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
            rn_pl_reply_kind_locked(p, c, WP_NOOP); /* stopping: outcomes taken, no more work */
        } else if (!rn_pl_dispatch_locked(p, w, c, NULL, rs)) {
            /* One parked `ready` per worker: an older one is released so that the worker
             * always has a request free to carry its next outcomes. */
            if (w->parked != NULL) {
                rn_pl_reply_kind_locked(p, w->parked, WP_NOOP);
            }
            w->parked = rn_pl_park_locked(p, c, false);
        }
        break;
    case WP_CONTROL:
        if (w->ctl != NULL) {
            rn_pl_reply_kind_locked(p, w->ctl, WP_NOOP);
        }
        w->ctl = rn_pl_park_locked(p, c, true);
        rn_pl_send_pending_cancel_locked(p, w->ctl);
        break;
    case WP_GOODBYE:
        w->leaving = true;
        /* Release its parked `ready` before the ack: the pipe keeps order, so when the worker
         * reads the ack, every request it has out already holds its last reply (a dispatch
         * sent before the goodbye, or this noop) and it knows nothing more can come. */
        if (w->parked != NULL) {
            rn_pl_reply_kind_locked(p, w->parked, WP_NOOP);
        }
        rn_pl_reply_kind_locked(p, c, WP_ACK);
        break;
    default:
        /* A runner-to-worker kind sent by a worker. */
        p->st.bad_messages++;
        rn_pl_close_pipe(p, c->pipe);
        rn_pl_pctx_done_locked(p, c);
        break;
    }
    wp_msg_fini(&m);
}

/* A request from connection conn (sprep's callback). */
void
rn_pl_on_request(void *arg, uint32_t conn, const struct rn_sprep_req *rq, const void *body,
                 size_t len)
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
    rn_pl_results_deliver(p, &rs);
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
    rn_pl_close_pipe(p, p->greet.items[oldest].pipe); /* its removal callback finds nothing more */
    p->greet.items[oldest] = p->greet.items[--p->greet.len];
    p->st.ungreeted++;
}

/* A connection was accepted, before any byte of it was read: it must complete the transport
 * handshake and say hello within hello_timeout_ms of now (the timer thread drops it
 * otherwise), and at most max_ungreeted wait at once: past that, the one that has waited
 * longest is dropped for it, so that a real worker connecting during a flood of silent
 * connections gets in. With the descriptor budget spent, one waiting for hello makes room the
 * same way, or the transport stops accepting until a connection closes. */
bool
rn_pl_on_accepted(void *arg, uint32_t conn, const char *peer, bool must_make_room)
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
void
rn_pl_on_closed(void *arg, uint32_t id)
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
    rn_pl_greeted_locked(p, id);
    for (wp = &p->workers; (w = *wp) != NULL; wp = &w->next) {
        if (w->pipe == id) {
            *wp = w->next;
            rn_pl_worker_free(w);
            p->st.workers--;
            break;
        }
    }
    fail_pipe_flights_locked(p, id, &rs);
    for (c = p->all; c != NULL; c = next) {
        next = c->next;
        if (c->pipe == id) {
            rn_pl_pctx_done_locked(p, c); /* nothing can answer it any more */
        }
    }
    cn_mutex_unlock(&p->mtx);
    rn_pl_results_deliver(p, &rs);
}
