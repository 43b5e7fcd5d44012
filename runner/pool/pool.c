/* SPDX-License-Identifier: MIT */
/*
 * The worker pool (see pool.h for the contract). Its transport is sprep.h (the REP end of
 * nng's REQ/REP over streams, with connections reported from their accept); every request
 * arrives there as a callback and is answered at once or held: a `ready` that finds no work is
 * parked, so idle workers wait without blocking other requests; submitting work answers the
 * parked `ready` of a worker that serves the action and has room.
 *
 * DESIGN (the files: requests in request.c, replies in reply.c, the timer thread in timer.c,
 * the shared types in pool_int.h)
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

#include <stdlib.h>

#include "runner/pool/pool_int.h"

/* ---- clocks and small helpers ------------------------------------------------------------- */

void
rn_pl_token_key(uint64_t token, uint8_t key[16])
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
void
rn_pl_room_check_locked(struct rn_pool *p)
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

void
rn_pl_queued_inc_locked(struct rn_pool *p, const struct queued *q)
{
    p->st.queued++;
    p->acts.items[q->act].queued++;
}

/* q left the queue (dispatched, dropped or failed). */
void
rn_pl_queued_dec_locked(struct rn_pool *p, const struct queued *q)
{
    p->st.queued--;
    p->acts.items[q->act].queued--;
    rn_pl_room_check_locked(p);
}

/* Adds a warning for results_deliver to log. Out of memory it is lost. */
void
rn_pl_results_note(struct results *rs, const char *fmt, ...)
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
void
rn_pl_results_add(struct results *rs, struct rn_iid iid, struct rn_xid id, uint32_t attempt,
                  bool ok, struct ir_val v)
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
void
rn_pl_results_deliver(struct rn_pool *p, struct results *rs)
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

void
rn_pl_synthetic_error(struct results *rs, struct rn_iid iid, struct rn_xid id, uint32_t attempt,
                      const char *type, const char *msg)
{
    struct ir_val e;

    if (rn_error_raise(&e, type, msg) == CN_RAISED) {
        rn_pl_results_add(rs, iid, id, attempt, false, e);
    }
}

struct worker *
rn_pl_worker_find(struct rn_pool *p, uint32_t pipe)
{
    struct worker *w;

    for (w = p->workers; w != NULL; w = w->next) {
        if (w->pipe == pipe) {
            return w;
        }
    }
    return NULL;
}

bool
rn_pl_worker_serves(const struct worker *w, const char *action)
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

void
rn_pl_worker_free(struct worker *w)
{
    uint32_t i;

    for (i = 0; i < w->nactions; i++) {
        free(w->actions[i]);
    }
    free(w->actions);
    free(w->waitq.items);
    free(w->name);
    free(w);
}

/* Returns flight entry i to the free stack. Call with the lock held. */
void
rn_pl_flight_release_locked(struct rn_pool *p, size_t i)
{
    uint8_t key[16];

    rn_pl_token_key(p->fl[i].token, key);
    rn_idmap_del(&p->tokens, key);
    p->fl[i].used = false;
    p->acts.items[p->fl[i].act].inflight--;
    if (p->fl[i].q != NULL) {
        rn_pl_queued_free(p->fl[i].q);
        p->fl[i].q = NULL;
    }
    if (p->nfree == p->capfree) {
        p->capfree = p->capfree ? p->capfree * 2 : 64;
        p->fl_free = cn_xreallocarray(p->fl_free, p->capfree, sizeof(*p->fl_free));
    }
    p->fl_free[p->nfree++] = (uint32_t) i;
}

/* ---- public API --------------------------------------------------------------------------- */

cn_err
rn_pool_start(const struct rn_pool_cfg *cfg, rn_pool_result_fn fn, void *arg, struct rn_pool **out,
              struct cn_errmsg *err)
{
    struct rn_pool *p;
    cn_err rv;

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
        struct rn_sprep_ops ops = {rn_pl_on_accepted, rn_pl_on_request, rn_pl_on_closed, p};
        struct cn_errmsg em;
        if ((rv = rn_sprep_start(&scfg, &ops, &p->srv, &em)) != CN_OK) {
            cn_mutex_destroy(&p->mtx);
            cn_cond_destroy(&p->cond);
            free(p->credential);
            free(p);
            return cn_errmsg_set(err, rv, "worker pool: %s", em.text);
        }
    }
    p->port = rn_sprep_port(p->srv);
    if ((rv = cn_thread_start(&p->timer, "cairn-pool-timer", rn_pl_timer_main, p, err)) != CN_OK) {
        rn_pool_stop(p);
        return rv;
    }
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
    rn_pl_queued_inc_locked(p, q);
    /* A worker with a parked `ready` and room, serving the action, takes it at once (with
     * whatever else is queued for it); else it waits for the next `ready`. */
    for (w = p->workers; w != NULL; w = w->next) {
        if (w->parked != NULL && rn_pl_worker_room(w) > 0 && rn_pl_worker_serves(w, q->d.action)) {
            (void) rn_pl_dispatch_locked(p, w, w->parked, q, &rs);
            cn_mutex_unlock(&p->mtx);
            rn_pl_results_deliver(p, &rs);
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
        rn_pl_queued_dec_locked(p, q);
        rn_pl_queued_free(q);
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
        if ((w = rn_pl_worker_find(p, f->pipe)) != NULL && w->ctl != NULL) {
            rn_pl_send_cancel_locked(p, w->ctl, f);
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
        if (w->parked != NULL && rn_pl_worker_room(w) > 0 && p->qhead != NULL) {
            (void) rn_pl_dispatch_locked(p, w, w->parked, NULL, &rs);
        }
    }
    cn_mutex_unlock(&p->mtx);
    rn_pl_results_deliver(p, &rs);
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
            rn_pl_queued_free(f->q); /* never dispatched again */
            f->q = NULL;
        }
        if ((w = rn_pl_worker_find(p, f->pipe)) != NULL && w->ctl != NULL) {
            rn_pl_send_cancel_locked(p, w->ctl, f);
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
            rn_pl_synthetic_error(&rs, p->fl[i].instance_id, p->fl[i].exec_id, p->fl[i].attempt,
                                  rn_error_name(RN_ERR_WORKER_LOST), "the worker pool stopped");
            p->fl[i].done = true;
        }
    }
    cn_mutex_unlock(&p->mtx);
    rn_pl_results_deliver(p, &rs);
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
    cn_thread_wait(&p->timer);
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
            rn_pl_queued_free(p->fl[i].q);
        }
    }
    for (w = p->workers; w != NULL; w = wn) {
        wn = w->next;
        rn_pl_worker_free(w);
    }
    for (q = p->qhead; q != NULL; q = qn) {
        qn = q->next;
        rn_pl_queued_free(q);
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
