/* SPDX-License-Identifier: MIT */
/*
 * The runner engine (see runner.h for the contract and the threads).
 *
 * DESIGN
 * - Ownership: an instance lives in exactly one shard (chosen by a hash of its id) and only
 *   that shard's thread touches it. Other threads send it events through the shard's inbox:
 *   NEW (claimed, from the claimer), RESULT (from the pool's callback), ACK (a write
 *   committed or was fenced off, from the persister), LOST (from the lease keeper).
 * - Commit barrier: a step whose output must be durable (results consumed, a new snapshot,
 *   an outcome) becomes one write; the instance is then `writing` and its actions and timers
 *   are held until the ACK. Events that arrive meanwhile wait on the instance, in order.
 * - A persister takes every queued write (from all shards) into one backend transaction;
 *   the backend fences each write by the claim token, so a write for a lost lease is dropped
 *   and the shard evicts that instance on the ACK. Several persisters run at once, each on
 *   its own connection: since an instance has at most one write in flight, no two
 *   transactions touch the same instance, and their order does not matter.
 * - Timers (sleep, backoff, deadlines) live in a per-shard heap; a timer for an instance that
 *   is gone, or that fires early after a re-claim, is ignored (the executor checks timers).
 * - Lock order: a shard's mutex, the persister's mutex, the registry mutex and the DAG cache
 *   mutex are never held together, and never across a backend or pool call.
 */
#include "runner/runner.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "ir/compile.h"
#include "ir/eval.h"
#include "runner/backend.h"
#include "runner/clock.h"
#include "runner/exec.h"
#include "runner/idmap.h"
#include "runner/log.h"
#include "runner/pool.h"
#define CLAIM_BATCH    256
#define PERSIST_BATCH  1024
#define MAX_PERSISTERS 8

/* ---- clocks ------------------------------------------------------------------------------- */

static int64_t
wall_ms(void)
{
    return rn_clock_ms(CLOCK_REALTIME);
}

/* Waits on cond until the absolute wall-clock ms (pthread condvars use CLOCK_REALTIME). */
static void
cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mtx, int64_t at_ms)
{
    struct timespec ts;

    ts.tv_sec = (time_t) (at_ms / 1000);
    ts.tv_nsec = (long) (at_ms % 1000) * 1000000L;
    (void) pthread_cond_timedwait(cond, mtx, &ts);
}

static uint32_t
id_hash(const uint8_t id[16])
{
    uint32_t h = 2166136261u;
    int i;

    for (i = 0; i < 16; i++) {
        h = (h ^ id[i]) * 16777619u;
    }
    return h;
}

/* ---- types -------------------------------------------------------------------------------- */

struct rn_runner;
struct shard;

enum sev_kind { SEV_NEW, SEV_RESULT, SEV_ACK, SEV_LOST };

struct sev {
    enum sev_kind kind;
    uint8_t iid[16];
    struct sev *next;
    /* NEW */
    struct rn_claimed claimed; /* owned */
    const struct ir_dag *dag;
    int64_t claimed_at; /* monotonic ms */
    /* RESULT */
    uint8_t exec_id[16];
    uint32_t attempt;
    bool ok;
    struct ir_val value; /* owned */
    /* ACK */
    bool lost;
    bool write_failed; /* the write could not be made (runner stopping): nothing was written */
};

/* An event waiting for an instance's write to commit. */
struct held_ev {
    struct rn_event ev; /* value owned */
};

struct inst {
    uint8_t id[16];
    uint8_t lock[16];
    char *workflow;
    const struct ir_dag *dag;
    struct rn_instance *ex;
    bool writing;            /* a write is in flight: actions/timers wait in held */
    bool evicting;           /* the in-flight write hands the instance back */
    struct rn_step_out held; /* the output whose write is in flight */
    int64_t held_us;         /* when held was produced (monotonic µs): its actions' ready time */
    struct held_ev *waiting; /* events that came while writing */
    size_t nwaiting, capwaiting;
    size_t inflight;    /* actions dispatched and not reported back (approximate) */
    bool counted;       /* counted in shard->busy */
    int64_t claimed_at; /* monotonic ms of the claim, until the first dispatch */
    uint32_t slot;      /* index in shard->insts */
};

struct timer {
    int64_t at;
    uint8_t iid[16];
    uint8_t exec_id[16];
};

struct shard {
    struct rn_runner *r;
    uint32_t index;
    pthread_t thread;
    bool started;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    struct sev *head, *tail; /* inbox; protected by mtx */
    bool stop;               /* protected by mtx */
    /* owned by the shard thread: */
    struct inst **insts;
    size_t ninsts, capinsts;
    struct rn_idmap byid;
    struct timer *heap;
    size_t nheap, capheap;
    struct rn_step_out out;
    _Atomic size_t busy; /* instances writing or with actions in flight (for shutdown) */
    /* claim-to-first-dispatch latencies, reported at stop; owned by the shard thread */
    struct rn_lathist claim_lat;
};

/* A write on its way to storage. Owns copies of everything rn_write points at. */
struct preq {
    struct shard *sh;
    struct rn_write w;
    struct rn_done *done; /* values retained */
    size_t ndone;
    struct cn_buf state;
    struct preq *next;
};

struct reg_entry {
    uint8_t iid[16];
    uint8_t lock[16];
    uint32_t shard;
};

struct dag_entry {
    uint8_t version_id[16];
    struct ir_dag *dag;
};

struct rn_runner {
    struct rn_runner_cfg cfg;
    struct rn_exec_cfg exec_cfg;
    struct rn_pool *pool;
    struct shard *shards;
    uint32_t nshards;

    /* claimer */
    pthread_t claimer;
    bool claimer_started;
    struct rn_backend *claim_b;
    atomic_bool stop_claiming;

    /* persisters: each takes what is queued and writes it in one transaction on its own
     * connection, so one commits while another sends (an instance has one write in flight at a
     * time, so no two transactions ever touch the same instance) */
    struct persister {
        struct rn_runner *r;
        pthread_t thread;
        bool started;
        struct rn_backend *b;
    } persisters[MAX_PERSISTERS];
    uint32_t npersisters;
    pthread_mutex_t pmtx;
    pthread_cond_t pcond;
    struct preq *phead, *ptail;    /* protected by pmtx */
    bool pstop;                    /* protected by pmtx */
    struct rn_lathist persist_lat; /* protected by pmtx */

    /* lease keeper */
    pthread_t keeper;
    bool keeper_started;
    struct rn_backend *lease_b;
    pthread_mutex_t kmtx;
    pthread_cond_t kcond;
    bool kstop; /* protected by kmtx */

    /* registry of held leases; protected by rmtx */
    pthread_mutex_t rmtx;
    struct reg_entry *reg;
    size_t nreg, capreg;
    struct rn_idmap reg_byid;

    /* DAG cache; protected by dmtx. DAGs live until the runner stops. */
    pthread_mutex_t dmtx;
    struct dag_entry *dags;
    size_t ndags, capdags;

    /* HTTP endpoints (/metrics, /healthz, /readyz) when configured */
    nng_http_server *http;
    nng_url *http_url;
    atomic_bool ready; /* started and not stopping */

    _Atomic uint64_t claimed, completed, failed, evicted, lost, writes, batches, dispatched;
    _Atomic size_t active;
};

/* ---- registry (leases held) --------------------------------------------------------------- */

static void
reg_add(struct rn_runner *r, const uint8_t iid[16], const uint8_t lock[16], uint32_t shard)
{
    pthread_mutex_lock(&r->rmtx);
    if (r->nreg == r->capreg) {
        size_t ncap = r->capreg ? r->capreg * 2 : 256;
        struct reg_entry *n = realloc(r->reg, ncap * sizeof(*n));
        if (n == NULL) {
            pthread_mutex_unlock(&r->rmtx);
            return; /* not renewed: the lease expires and the instance is reclaimed */
        }
        r->reg = n;
        r->capreg = ncap;
    }
    if (rn_idmap_put(&r->reg_byid, iid, (uint32_t) r->nreg) == CN_OK) {
        memcpy(r->reg[r->nreg].iid, iid, 16);
        memcpy(r->reg[r->nreg].lock, lock, 16);
        r->reg[r->nreg].shard = shard;
        r->nreg++;
    }
    pthread_mutex_unlock(&r->rmtx);
}

static void
reg_del(struct rn_runner *r, const uint8_t iid[16])
{
    uint32_t i;

    pthread_mutex_lock(&r->rmtx);
    if (rn_idmap_get(&r->reg_byid, iid, &i)) {
        rn_idmap_del(&r->reg_byid, iid);
        if (i != r->nreg - 1) {
            r->reg[i] = r->reg[r->nreg - 1];
            if (rn_idmap_put(&r->reg_byid, r->reg[i].iid, i) != CN_OK) {
                /* cannot happen: the key was present, the map does not grow */
            }
        }
        r->nreg--;
    }
    pthread_mutex_unlock(&r->rmtx);
}

/* ---- shard inbox -------------------------------------------------------------------------- */

static void
shard_post(struct shard *sh, struct sev *e)
{
    pthread_mutex_lock(&sh->mtx);
    e->next = NULL;
    if (sh->tail != NULL) {
        sh->tail->next = e;
    } else {
        sh->head = e;
    }
    sh->tail = e;
    pthread_cond_signal(&sh->cond);
    pthread_mutex_unlock(&sh->mtx);
}

static struct shard *
shard_for(struct rn_runner *r, const uint8_t iid[16])
{
    return &r->shards[id_hash(iid) % r->nshards];
}

static void
sev_free(struct sev *e)
{
    if (e->kind == SEV_NEW) {
        /* the claimed record's parts were moved out, or are freed here */
        free(e->claimed.workflow);
        ir_val_release(e->claimed.input);
        free(e->claimed.state);
        for (size_t k = 0; k < e->claimed.ndone; k++) {
            ir_val_release(e->claimed.done[k].value);
        }
        free(e->claimed.done);
    }
    ir_val_release(e->value);
    free(e);
}

/* A new event for instance iid (its values None), or NULL when out of memory. */
static struct sev *
sev_new(enum sev_kind kind, const uint8_t iid[16])
{
    struct sev *e = calloc(1, sizeof(*e));

    if (e != NULL) {
        e->kind = kind;
        e->value = ir_null();
        e->claimed.input = ir_null();
        memcpy(e->iid, iid, 16);
    }
    return e;
}

/* The pool's result callback: route to the owning shard (no pool lock held here). */
static void
on_pool_result(void *arg, const struct rn_pool_result *res)
{
    struct rn_runner *r = arg;
    struct sev *e = sev_new(SEV_RESULT, res->instance_id);

    if (e == NULL) {
        return; /* out of memory: the executor's deadline timer fails the attempt */
    }
    e->value = ir_val_retain(res->value);
    memcpy(e->exec_id, res->exec_id, 16);
    e->attempt = res->attempt;
    e->ok = res->ok;
    shard_post(shard_for(r, res->instance_id), e);
}

/* ---- timers ------------------------------------------------------------------------------- */

static void
heap_push(struct shard *sh, const struct timer *t)
{
    size_t i;

    if (sh->nheap == sh->capheap) {
        size_t ncap = sh->capheap ? sh->capheap * 2 : 64;
        struct timer *n = realloc(sh->heap, ncap * sizeof(*n));
        if (n == NULL) {
            rn_log(RN_LOG_ERROR, "out of memory arming a timer");
            return;
        }
        sh->heap = n;
        sh->capheap = ncap;
    }
    i = sh->nheap++;
    while (i > 0 && sh->heap[(i - 1) / 2].at > t->at) {
        sh->heap[i] = sh->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    sh->heap[i] = *t;
}

static void
heap_pop(struct shard *sh, struct timer *out)
{
    struct timer last;
    size_t i = 0;

    *out = sh->heap[0];
    last = sh->heap[--sh->nheap];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= sh->nheap) {
            break;
        }
        if (c + 1 < sh->nheap && sh->heap[c + 1].at < sh->heap[c].at) {
            c++;
        }
        if (sh->heap[c].at >= last.at) {
            break;
        }
        sh->heap[i] = sh->heap[c];
        i = c;
    }
    if (sh->nheap > 0) {
        sh->heap[i] = last;
    }
}

/* ---- instances ---------------------------------------------------------------------------- */

static struct inst *
inst_find(struct shard *sh, const uint8_t iid[16])
{
    uint32_t i;

    return rn_idmap_get(&sh->byid, iid, &i) ? sh->insts[i] : NULL;
}

/* Keeps sh->busy (instances writing or with actions in flight; shutdown waits for it) in step
 * with the instance's state; in->counted says whether it is counted now. */
static void
busy_sync(struct shard *sh, struct inst *in)
{
    bool now = in->writing || in->inflight > 0;

    if (now && !in->counted) {
        atomic_fetch_add(&sh->busy, 1);
    } else if (!now && in->counted) {
        atomic_fetch_sub(&sh->busy, 1);
    }
    in->counted = now;
}

/* Forgets an instance (finished, evicted or lost). */
static void
inst_remove(struct shard *sh, struct inst *in)
{
    size_t k;
    uint32_t slot = in->slot;

    if (in->counted) {
        atomic_fetch_sub(&sh->busy, 1);
    }
    reg_del(sh->r, in->id);
    rn_idmap_del(&sh->byid, in->id);
    if (slot != sh->ninsts - 1) {
        sh->insts[slot] = sh->insts[sh->ninsts - 1];
        sh->insts[slot]->slot = slot;
        if (rn_idmap_put(&sh->byid, sh->insts[slot]->id, slot) != CN_OK) {
            /* cannot happen: the key was present */
        }
    }
    sh->ninsts--;
    rn_instance_free(in->ex);
    rn_step_out_fini(&in->held);
    for (k = 0; k < in->nwaiting; k++) {
        ir_val_release(in->waiting[k].ev.value);
    }
    free(in->waiting);
    free(in->workflow);
    free(in);
    atomic_fetch_sub(&sh->r->active, 1);
}

/* Hands the output's actions to the pool and arms its timers; ready_us is when the step made
 * the actions ready (the pool measures from there to the dispatch). */
static void
release_output(struct shard *sh, struct inst *in, struct rn_step_out *o, int64_t ready_us)
{
    struct rn_runner *r = sh->r;
    size_t i;

    for (i = 0; i < o->cancels.len; i++) {
        if (rn_pool_cancel(r->pool, o->cancels.items[i].b, 0) != CN_OK) {
            /* not in flight (already reported): nothing to stop */
        }
    }
    if (o->actions.len > 0 && in->claimed_at != 0) {
        rn_lathist_add(&sh->claim_lat, (rn_clock_ms(CLOCK_MONOTONIC) - in->claimed_at) * 1000);
        in->claimed_at = 0;
    }
    for (i = 0; i < o->actions.len; i++) {
        const struct rn_action_req *a = &o->actions.items[i];
        struct rn_pool_dispatch d;
        memcpy(d.instance_id, in->id, 16);
        memcpy(d.exec_id, a->exec_id, 16);
        d.attempt = a->attempt;
        d.action = a->action;
        d.kwargs = a->kwargs;
        d.deadline_ms = a->deadline_ms;
        d.ready_us = ready_us;
        if (rn_pool_submit(r->pool, &d) != CN_OK) {
            rn_log(RN_LOG_ERROR, "out of memory dispatching %s: its deadline will fail it",
                   a->action);
            continue;
        }
        in->inflight++;
        atomic_fetch_add(&r->dispatched, 1);
    }
    for (i = 0; i < o->timers.len; i++) {
        struct timer t;

        t.at = o->timers.items[i].at_ms;
        memcpy(t.iid, in->id, 16);
        memcpy(t.exec_id, o->timers.items[i].exec_id, 16);
        heap_push(sh, &t);
    }
}

/* Queues a write for the persister. */
static void
persist_post(struct rn_runner *r, struct preq *q)
{
    pthread_mutex_lock(&r->pmtx);
    q->next = NULL;
    if (r->ptail != NULL) {
        r->ptail->next = q;
    } else {
        r->phead = q;
    }
    r->ptail = q;
    pthread_cond_signal(&r->pcond);
    pthread_mutex_unlock(&r->pmtx);
}

static void
preq_free(struct preq *q)
{
    size_t k;

    for (k = 0; k < q->ndone; k++) {
        ir_val_release(q->done[k].value);
    }
    free(q->done);
    cn_buf_fini(&q->state);
    ir_val_release(q->w.result);
    free(q);
}

/* A write for instance in under its claim token, with nothing in it yet; NULL when out of
 * memory. */
static struct preq *
preq_new(struct shard *sh, const struct inst *in)
{
    struct preq *q = calloc(1, sizeof(*q));

    if (q != NULL) {
        q->sh = sh;
        q->w.result = ir_null();
        memcpy(q->w.instance_id, in->id, 16);
        memcpy(q->w.lock, in->lock, 16);
    }
    return q;
}

static void step_events(struct shard *sh, struct inst *in, const struct rn_event *evs, size_t n);

/* Acts on the output of a step (in sh->out): writes what must be durable, holding actions and
 * timers until it commits; releases at once what needs no write. */
static void
handle_output(struct shard *sh, struct inst *in)
{
    struct rn_step_out *o = &sh->out;
    int64_t ready_us = rn_clock_us(CLOCK_MONOTONIC);
    struct preq *q;
    size_t k;

    if (o->done.len == 0 && !o->snapshot_needed && o->outcome == RN_RUNNING) {
        release_output(sh, in, o, ready_us);
        rn_step_out_clear(o);
        busy_sync(sh, in);
        return;
    }
    if ((q = preq_new(sh, in)) == NULL) {
        rn_log(RN_LOG_ERROR, "out of memory writing an instance: handing it back");
        goto lost;
    }
    if (o->done.len > 0) {
        q->done = calloc(o->done.len, sizeof(*q->done));
        if (q->done == NULL) {
            free(q);
            goto lost;
        }
        for (k = 0; k < o->done.len; k++) {
            q->done[k] = o->done.items[k];
            q->done[k].value = ir_val_retain(o->done.items[k].value);
        }
        q->ndone = o->done.len;
        q->w.done = q->done;
        q->w.ndone = q->ndone;
    }
    if (o->snapshot_needed || o->outcome != RN_RUNNING) {
        if (rn_instance_snapshot(in->ex, &q->state) != CN_OK) {
            preq_free(q);
            goto lost;
        }
        q->w.state = q->state.data;
        q->w.state_len = q->state.len;
    }
    q->w.outcome = o->outcome;
    if (o->outcome != RN_RUNNING) {
        q->w.result = ir_val_retain(o->result);
    }
    /* Hold the rest until the write commits. */
    rn_step_out_fini(&in->held);
    in->held = *o;
    in->held_us = ready_us;
    memset(o, 0, sizeof(*o));
    in->writing = true;
    busy_sync(sh, in);
    persist_post(sh->r, q);
    return;
lost:
    /* Nothing can be written for it: drop it; its lease expires and another claim resumes it
     * from the last committed state. */
    rn_step_out_clear(o);
    inst_remove(sh, in);
}

/* Applies events to an instance now, or queues them while its write is in flight. */
static void
step_events(struct shard *sh, struct inst *in, const struct rn_event *evs, size_t n)
{
    size_t k;

    if (in->writing) {
        for (k = 0; k < n; k++) {
            if (in->nwaiting == in->capwaiting) {
                size_t ncap = in->capwaiting ? in->capwaiting * 2 : 8;
                struct held_ev *nw = realloc(in->waiting, ncap * sizeof(*nw));
                if (nw == NULL) {
                    rn_log(RN_LOG_ERROR, "out of memory queueing an event");
                    return;
                }
                in->waiting = nw;
                in->capwaiting = ncap;
            }
            in->waiting[in->nwaiting].ev = evs[k];
            in->waiting[in->nwaiting].ev.value = ir_val_retain(evs[k].value);
            in->nwaiting++;
        }
        return;
    }
    if (rn_instance_step(in->ex, evs, n, wall_ms(), &sh->out) != CN_OK) {
        rn_log(RN_LOG_ERROR, "out of memory stepping an instance: handing it back");
        rn_step_out_clear(&sh->out);
        inst_remove(sh, in);
        return;
    }
    handle_output(sh, in);
}

/* A claimed instance arrives: hydrate it (or start it) and act on the first output. */
static void
on_new(struct shard *sh, struct sev *e)
{
    struct rn_runner *r = sh->r;
    struct rn_claimed *c = &e->claimed;
    struct cn_errmsg em = {{0}};
    struct inst *in;
    cn_err rv;

    if (inst_find(sh, c->instance_id) != NULL) {
        return; /* already ours (a duplicate claim cannot happen, but never run it twice) */
    }
    in = calloc(1, sizeof(*in));
    if (in == NULL ||
        (sh->ninsts == sh->capinsts &&
         (sh->capinsts = sh->capinsts ? sh->capinsts * 2 : 64,
          sh->insts = realloc(sh->insts, sh->capinsts * sizeof(*sh->insts))) == NULL)) {
        rn_log(RN_LOG_ERROR, "out of memory taking an instance");
        free(in);
        atomic_fetch_sub(&r->active, 1);
        return;
    }
    memcpy(in->id, c->instance_id, 16);
    memcpy(in->lock, c->lock, 16);
    in->workflow = c->workflow;
    c->workflow = NULL;
    in->dag = e->dag;
    in->claimed_at = e->claimed_at;
    in->slot = (uint32_t) sh->ninsts;
    if (rn_idmap_put(&sh->byid, in->id, in->slot) != CN_OK) {
        free(in->workflow);
        free(in);
        atomic_fetch_sub(&r->active, 1);
        return;
    }
    sh->insts[sh->ninsts++] = in;
    reg_add(r, in->id, in->lock, sh->index);
    if (c->state != NULL) {
        rv = rn_instance_hydrate(in->dag, c->state, c->state_len, c->done, c->ndone, &r->exec_cfg,
                                 wall_ms(), &in->ex, &sh->out, &em);
    } else {
        rv = rn_instance_start(in->dag, in->id, c->input, &r->exec_cfg, wall_ms(), &in->ex,
                               &sh->out);
    }
    if (rv != CN_OK) {
        char id[37];
        struct ir_val err = ir_null();
        struct preq *q;

        rn_uuid_format(in->id, id);
        rn_log(RN_LOG_ERROR, "instance %s (%s) cannot resume: %s", id, in->workflow,
               em.text[0] ? em.text : cn_strerror(rv));
        rn_step_out_clear(&sh->out);
        /* A poison instance fails alone, through the fenced write path. */
        if (rv != CN_NOMEM &&
            ir_error_new("StateError", em.text[0] ? em.text : cn_strerror(rv), ir_null(), ir_null(),
                         &err) == CN_OK &&
            (q = preq_new(sh, in)) != NULL) {
            q->w.outcome = RN_FAILED;
            q->w.result = err;
            in->writing = true;
            in->held.outcome = RN_FAILED;
            busy_sync(sh, in);
            persist_post(r, q);
            return;
        }
        ir_val_release(err);
        inst_remove(sh, in);
        return;
    }
    handle_output(sh, in);
}

static void
on_result(struct shard *sh, struct sev *e)
{
    struct inst *in = inst_find(sh, e->iid);
    struct rn_event ev;

    if (in == NULL) {
        return; /* finished, evicted or lost meanwhile: the result is stale */
    }
    if (in->inflight > 0) {
        in->inflight--;
    }
    memset(&ev, 0, sizeof(ev));
    ev.kind = e->ok ? RN_EV_RESULT : RN_EV_ERROR;
    memcpy(ev.exec_id, e->exec_id, 16);
    ev.attempt = e->attempt;
    ev.value = e->value;
    busy_sync(sh, in);
    step_events(sh, in, &ev, 1);
}

/* A write committed (or was fenced off): release what it held, then what waited. */
static void
on_ack(struct shard *sh, struct sev *e)
{
    struct rn_runner *r = sh->r;
    struct inst *in = inst_find(sh, e->iid);
    struct held_ev *waiting;
    size_t nwaiting, k;

    if (in == NULL) {
        return;
    }
    in->writing = false;
    if (e->lost || e->write_failed) {
        char id[37];

        rn_uuid_format(in->id, id);
        if (e->lost) {
            rn_log(RN_LOG_WARN, "instance %s: lease lost, evicted (no more writes from here)", id);
            atomic_fetch_add(&r->lost, 1);
        }
        inst_remove(sh, in);
        return;
    }
    atomic_fetch_add(&r->writes, 1);
    if (in->evicting) {
        atomic_fetch_add(&r->evicted, 1);
        inst_remove(sh, in);
        return;
    }
    if (in->held.outcome != RN_RUNNING) {
        /* The outcome is committed: cancel what still runs, and forget the instance. */
        release_output(sh, in, &(struct rn_step_out){.cancels = in->held.cancels}, 0);
        atomic_fetch_add(in->held.outcome == RN_COMPLETED ? &r->completed : &r->failed, 1);
        inst_remove(sh, in);
        return;
    }
    release_output(sh, in, &in->held, in->held_us);
    /* A long sleep with nothing in flight: hand the instance back until it is due. */
    if (in->inflight == 0 && in->nwaiting == 0 && in->held.timers.len > 0 &&
        in->held.actions.len == 0) {
        int64_t wake = INT64_MAX;
        for (k = 0; k < in->held.timers.len; k++) {
            if (in->held.timers.items[k].at_ms < wake) {
                wake = in->held.timers.items[k].at_ms;
            }
        }
        if (wake - wall_ms() > (int64_t) r->cfg.evict_sleep_threshold_ms) {
            struct preq *q = preq_new(sh, in);
            if (q != NULL) {
                char id[37];
                rn_uuid_format(in->id, id);
                rn_log(RN_LOG_INFO, "instance %s: sleeping %lld ms, handed back until due", id,
                       (long long) (wake - wall_ms()));
                q->w.release = true;
                q->w.wake_at_ms = wake;
                in->writing = true;
                in->evicting = true;
                rn_step_out_clear(&in->held);
                busy_sync(sh, in);
                persist_post(r, q);
                return;
            }
        }
    }
    rn_step_out_clear(&in->held);
    busy_sync(sh, in);
    if (in->nwaiting > 0) {
        waiting = in->waiting;
        nwaiting = in->nwaiting;
        in->waiting = NULL;
        in->nwaiting = in->capwaiting = 0;
        {
            struct rn_event *evs = malloc(nwaiting * sizeof(*evs));
            if (evs != NULL) {
                for (k = 0; k < nwaiting; k++) {
                    evs[k] = waiting[k].ev;
                }
                step_events(sh, in, evs, nwaiting);
                free(evs);
            }
        }
        for (k = 0; k < nwaiting; k++) {
            ir_val_release(waiting[k].ev.value);
        }
        free(waiting);
    }
}

static void
on_lost(struct shard *sh, struct sev *e)
{
    struct inst *in = inst_find(sh, e->iid);
    char id[37];

    if (in == NULL) {
        return;
    }
    if (in->writing) {
        /* Its write is in flight: the ACK says whether it was fenced off (and then evicts and
         * counts it). Often the queue row is gone because that write finished the instance,
         * which is no loss at all. */
        return;
    }
    rn_uuid_format(in->id, id);
    rn_log(RN_LOG_WARN, "instance %s: lease lost (found by heartbeat), evicted", id);
    atomic_fetch_add(&sh->r->lost, 1);
    inst_remove(sh, in);
}

static void
fire_timers(struct shard *sh)
{
    int64_t now = wall_ms();

    while (sh->nheap > 0 && sh->heap[0].at <= now) {
        struct timer t;
        struct inst *in;
        struct rn_event ev;

        heap_pop(sh, &t);
        if ((in = inst_find(sh, t.iid)) == NULL) {
            continue;
        }
        memset(&ev, 0, sizeof(ev));
        ev.kind = RN_EV_TIMER;
        memcpy(ev.exec_id, t.exec_id, 16);
        ev.value = ir_null();
        step_events(sh, in, &ev, 1);
    }
}

static void *
shard_main(void *arg)
{
    struct shard *sh = arg;

    pthread_mutex_lock(&sh->mtx);
    for (;;) {
        struct sev *batch;

        while (sh->head == NULL && !sh->stop) {
            if (sh->nheap > 0) {
                int64_t at = sh->heap[0].at;
                if (at <= wall_ms()) {
                    break;
                }
                cond_wait_until(&sh->cond, &sh->mtx, at);
            } else {
                pthread_cond_wait(&sh->cond, &sh->mtx);
            }
        }
        if (sh->stop) {
            break;
        }
        batch = sh->head;
        sh->head = sh->tail = NULL;
        pthread_mutex_unlock(&sh->mtx);
        while (batch != NULL) {
            struct sev *e = batch;
            batch = e->next;
            switch (e->kind) {
            case SEV_NEW:
                on_new(sh, e);
                break;
            case SEV_RESULT:
                on_result(sh, e);
                break;
            case SEV_ACK:
                on_ack(sh, e);
                break;
            case SEV_LOST:
                on_lost(sh, e);
                break;
            }
            sev_free(e);
        }
        fire_timers(sh);
        pthread_mutex_lock(&sh->mtx);
    }
    pthread_mutex_unlock(&sh->mtx);
    return NULL;
}

/* ---- persister ---------------------------------------------------------------------------- */

static void *
persister_main(void *arg)
{
    struct persister *self = arg;
    struct rn_runner *r = self->r;
    struct rn_write *ws = NULL;
    struct preq **qs = NULL;
    int64_t backoff = 200;

    ws = calloc(PERSIST_BATCH, sizeof(*ws));
    qs = calloc(PERSIST_BATCH, sizeof(*qs));
    if (ws == NULL || qs == NULL) {
        rn_log(RN_LOG_ERROR, "persister: out of memory");
        free(ws);
        free(qs);
        return NULL;
    }
    pthread_mutex_lock(&r->pmtx);
    for (;;) {
        struct cn_errmsg em = {{0}};
        size_t n = 0, i;
        int64_t t_us;
        cn_err rv;

        while (r->phead == NULL && !r->pstop) {
            pthread_cond_wait(&r->pcond, &r->pmtx);
        }
        if (r->phead == NULL) {
            break; /* stopping, and everything is written */
        }
        while (r->phead != NULL && n < PERSIST_BATCH) {
            qs[n] = r->phead;
            r->phead = r->phead->next;
            ws[n] = qs[n]->w;
            n++;
        }
        if (r->phead == NULL) {
            r->ptail = NULL;
        }
        pthread_mutex_unlock(&r->pmtx);
        t_us = rn_clock_us(CLOCK_MONOTONIC);
        rv = self->b->ops->persist(self->b, ws, n, &em);
        t_us = rn_clock_us(CLOCK_MONOTONIC) - t_us;
        if (rv != CN_OK) {
            bool stopping;

            rn_log(RN_LOG_ERROR, "persist of %zu writes failed (retrying in %lld ms): %s", n,
                   (long long) backoff, em.text);
            pthread_mutex_lock(&r->pmtx);
            /* Put the batch back in front, in order, and retry after a pause. */
            for (i = n; i > 0; i--) {
                qs[i - 1]->next = r->phead;
                r->phead = qs[i - 1];
                if (r->ptail == NULL) {
                    r->ptail = qs[i - 1];
                }
            }
            stopping = r->pstop;
            if (!stopping) {
                cond_wait_until(&r->pcond, &r->pmtx, wall_ms() + backoff);
                backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
                continue;
            }
            /* Stopping with storage down: give up; nothing was written, so another runner
             * redoes this work from the last committed state. */
            while (r->phead != NULL) {
                struct preq *q = r->phead;
                struct sev *e = sev_new(SEV_ACK, q->w.instance_id);
                r->phead = q->next;
                if (e != NULL) {
                    e->write_failed = true;
                    shard_post(q->sh, e);
                }
                preq_free(q);
            }
            r->ptail = NULL;
            continue;
        }
        backoff = 200;
        atomic_fetch_add(&r->batches, 1);
        for (i = 0; i < n; i++) {
            struct sev *e = sev_new(SEV_ACK, ws[i].instance_id);
            if (e != NULL) {
                e->lost = ws[i].lost;
                shard_post(qs[i]->sh, e);
            }
            preq_free(qs[i]);
        }
        pthread_mutex_lock(&r->pmtx);
        rn_lathist_add(&r->persist_lat, t_us);
    }
    pthread_mutex_unlock(&r->pmtx);
    free(ws);
    free(qs);
    return NULL;
}

/* ---- claimer ------------------------------------------------------------------------------ */

/* The compiled template of a version: from the cache, else compiled from its source. */
static const struct ir_dag *
dag_for(struct rn_runner *r, const struct rn_claimed *c, struct cn_errmsg *err)
{
    struct ir_diags diags;
    struct ir_dag *dag = NULL;
    char *src = NULL;
    size_t i;
    cn_err rv;

    pthread_mutex_lock(&r->dmtx);
    for (i = 0; i < r->ndags; i++) {
        if (memcmp(r->dags[i].version_id, c->version_id, 16) == 0) {
            dag = r->dags[i].dag;
            break;
        }
    }
    pthread_mutex_unlock(&r->dmtx);
    if (dag != NULL) {
        return dag;
    }
    if ((rv = r->claim_b->ops->version_source(r->claim_b, c->version_id, &src, err)) != CN_OK) {
        return NULL;
    }
    ir_diags_init(&diags, c->workflow, src, strlen(src));
    rv = ir_compile_source(src, strlen(src), &diags, &dag);
    if (rv != CN_OK) {
        struct cn_buf msg = CN_BUF_INIT;
        if (diags.len > 0 && ir_diags_format(&diags, &msg) == CN_OK) {
            (void) cn_errmsg_set(err, CN_COMPILE, "%.200s", msg.data);
        } else {
            (void) cn_errmsg_set(err, CN_COMPILE, "%s", cn_strerror(rv));
        }
        cn_buf_fini(&msg);
        ir_diags_fini(&diags);
        free(src);
        return NULL;
    }
    ir_diags_fini(&diags);
    free(src);
    pthread_mutex_lock(&r->dmtx);
    if (r->ndags == r->capdags) {
        size_t ncap = r->capdags ? r->capdags * 2 : 16;
        struct dag_entry *n = realloc(r->dags, ncap * sizeof(*n));
        if (n == NULL) {
            pthread_mutex_unlock(&r->dmtx);
            ir_dag_free(dag);
            (void) cn_errmsg_set(err, CN_NOMEM, "out of memory");
            return NULL;
        }
        r->dags = n;
        r->capdags = ncap;
    }
    memcpy(r->dags[r->ndags].version_id, c->version_id, 16);
    r->dags[r->ndags].dag = dag;
    r->ndags++;
    pthread_mutex_unlock(&r->dmtx);
    return dag;
}

static void *
claimer_main(void *arg)
{
    struct rn_runner *r = arg;
    int64_t backoff = 200;

    while (!atomic_load(&r->stop_claiming)) {
        struct cn_errmsg em = {{0}};
        struct rn_claimed *cl = NULL;
        size_t n = 0, i, room, active = atomic_load(&r->active);
        cn_err rv;

        room = active < r->cfg.max_instances ? r->cfg.max_instances - active : 0;
        if (room > CLAIM_BATCH) {
            room = CLAIM_BATCH;
        }
        if (room > 0) {
            rv = r->claim_b->ops->claim(r->claim_b, room, r->cfg.lock_ttl_ms, &cl, &n, &em);
            if (rv != CN_OK) {
                rn_log(RN_LOG_ERROR, "claim failed (retrying in %lld ms): %s", (long long) backoff,
                       em.text);
                struct timespec ts = {(time_t) (backoff / 1000),
                                      (long) (backoff % 1000) * 1000000L};
                nanosleep(&ts, NULL);
                backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
                continue;
            }
            backoff = 200;
        }
        for (i = 0; i < n; i++) {
            struct rn_claimed *c = &cl[i];
            const struct ir_dag *dag = dag_for(r, c, &em);
            struct sev *e;

            if (dag == NULL) {
                char id[37];
                struct ir_val err;
                struct cn_errmsg em2;

                rn_uuid_format(c->instance_id, id);
                rn_log(RN_LOG_ERROR, "instance %s (%s): its workflow version cannot run: %s", id,
                       c->workflow, em.text);
                if (ir_error_new("WorkflowError", em.text, ir_null(), ir_null(), &err) == CN_OK) {
                    if (r->claim_b->ops->fail(r->claim_b, c->instance_id, c->lock, err, &em2) !=
                        CN_OK) {
                        rn_log(RN_LOG_ERROR, "cannot mark %s failed: %s", id, em2.text);
                    }
                    ir_val_release(err);
                }
                continue;
            }
            if ((e = sev_new(SEV_NEW, c->instance_id)) == NULL) {
                continue; /* its lease expires and it is claimed again */
            }
            e->claimed = *c;
            memset(c, 0, sizeof(*c)); /* moved */
            c->input = ir_null();
            e->dag = dag;
            e->claimed_at = rn_clock_ms(CLOCK_MONOTONIC);
            atomic_fetch_add(&r->active, 1);
            atomic_fetch_add(&r->claimed, 1);
            shard_post(shard_for(r, e->iid), e);
        }
        rn_claimed_free(cl, n);
        if (n == room && room > 0) {
            continue; /* more may be due right now */
        }
        if (r->claim_b->ops->wait_enqueue(r->claim_b, (int) r->cfg.poll_interval_ms, &em) !=
            CN_OK) {
            rn_log(RN_LOG_WARN, "waiting for enqueue notifications failed: %s", em.text);
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* ---- lease keeper ------------------------------------------------------------------------- */

/* The reclaimer's part of the keeper thread: clears expired leases (runners that died) so their
 * instances show as queued again, in batches. */
static void
reclaim_expired(struct rn_runner *r)
{
    struct cn_errmsg em = {{0}};
    size_t n = 0, total = 0;

    do {
        if (r->lease_b->ops->reclaim(r->lease_b, 1000, &n, &em) != CN_OK) {
            rn_log(RN_LOG_ERROR, "reclaiming expired leases failed: %s", em.text);
            return;
        }
        total += n;
    } while (n == 1000);
    if (total > 0) {
        rn_log(RN_LOG_INFO, "reclaimed %zu expired lease(s)", total);
    }
}

static void *
keeper_main(void *arg)
{
    struct rn_runner *r = arg;
    int64_t next_reclaim = rn_clock_ms(CLOCK_MONOTONIC) + r->cfg.reclaim_interval_ms;

    pthread_mutex_lock(&r->kmtx);
    while (!r->kstop) {
        struct reg_entry *copy = NULL;
        uint8_t(*locks)[16] = NULL;
        bool *lost = NULL;
        size_t n, i;
        struct cn_errmsg em = {{0}};

        cond_wait_until(&r->kcond, &r->kmtx, wall_ms() + r->cfg.lock_heartbeat_ms);
        if (r->kstop) {
            break;
        }
        pthread_mutex_unlock(&r->kmtx);
        pthread_mutex_lock(&r->rmtx);
        n = r->nreg;
        if (n > 0 && (copy = malloc(n * sizeof(*copy))) != NULL) {
            memcpy(copy, r->reg, n * sizeof(*copy));
        }
        pthread_mutex_unlock(&r->rmtx);
        if (copy != NULL && (locks = malloc(n * 16)) != NULL &&
            (lost = calloc(n, sizeof(*lost))) != NULL) {
            for (i = 0; i < n; i++) {
                memcpy(locks[i], copy[i].lock, 16);
            }
            if (r->lease_b->ops->heartbeat(r->lease_b, (const uint8_t(*)[16]) locks, n,
                                           r->cfg.lock_ttl_ms, lost, &em) != CN_OK) {
                rn_log(RN_LOG_ERROR, "lease heartbeat failed: %s", em.text);
            }
            for (i = 0; i < n; i++) {
                struct sev *e;
                if (lost[i] && (e = sev_new(SEV_LOST, copy[i].iid)) != NULL) {
                    shard_post(&r->shards[copy[i].shard], e);
                }
            }
        }
        free(copy);
        free(locks);
        free(lost);
        if (r->cfg.reclaim_interval_ms != 0 && rn_clock_ms(CLOCK_MONOTONIC) >= next_reclaim) {
            reclaim_expired(r);
            next_reclaim = rn_clock_ms(CLOCK_MONOTONIC) + r->cfg.reclaim_interval_ms;
        }
        pthread_mutex_lock(&r->kmtx);
    }
    pthread_mutex_unlock(&r->kmtx);
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

void
rn_runner_stats(struct rn_runner *r, struct rn_runner_stats *st)
{
    st->claimed = atomic_load(&r->claimed);
    st->completed = atomic_load(&r->completed);
    st->failed = atomic_load(&r->failed);
    st->evicted = atomic_load(&r->evicted);
    st->lost = atomic_load(&r->lost);
    st->writes = atomic_load(&r->writes);
    st->batches = atomic_load(&r->batches);
    st->dispatched = atomic_load(&r->dispatched);
    st->active = atomic_load(&r->active);
    pthread_mutex_lock(&r->pmtx);
    st->persist = r->persist_lat;
    pthread_mutex_unlock(&r->pmtx);
}

static void runner_free(struct rn_runner *r);

/* ---- HTTP: /metrics, /healthz, /readyz ---------------------------------------------------- */

/* Appends one Prometheus sample with its HELP and TYPE lines. */
static bool
metric(struct cn_buf *b, const char *name, const char *type, const char *help, uint64_t v)
{
    return cn_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                         (unsigned long long) v) == CN_OK;
}

/* Appends a latency histogram as a Prometheus summary: p50, p95, p99 and the max (quantile 1),
 * over the runner's life, within the histogram's 12.5% bucket error. */
static bool
summary(struct cn_buf *b, const char *name, const char *help, const struct rn_lathist *h)
{
    static const double qs[] = {0.5, 0.95, 0.99, 1.0};
    size_t i;

    if (cn_buf_printf(b, "# HELP %s %s\n# TYPE %s summary\n", name, help, name) != CN_OK) {
        return false;
    }
    for (i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        if (cn_buf_printf(b, "%s{quantile=\"%g\"} %.6f\n", name, qs[i],
                          (double) rn_lathist_quantile(h, qs[i]) / 1e6) != CN_OK) {
            return false;
        }
    }
    return cn_buf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name, (double) h->sum_us / 1e6, name,
                         (unsigned long long) h->count) == CN_OK;
}

static void
http_reply(nng_aio *aio, uint16_t status, const char *type, const void *body, size_t len)
{
    nng_http_res *res = NULL;

    if (nng_http_res_alloc(&res) != 0 || nng_http_res_set_status(res, status) != 0 ||
        nng_http_res_set_header(res, "Content-Type", type) != 0 ||
        nng_http_res_copy_data(res, body, len) != 0) {
        if (res != NULL) {
            nng_http_res_free(res);
        }
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static void
http_metrics(nng_aio *aio)
{
    struct rn_runner *r = nng_http_handler_get_data(nng_aio_get_input(aio, 1));
    struct rn_runner_stats st;
    struct rn_pool_stats ps;
    struct cn_buf b = CN_BUF_INIT;
    bool ok;

    rn_runner_stats(r, &st);
    rn_pool_stats(r->pool, &ps);
    ok = metric(&b, "cairn_instances_claimed_total", "counter", "Instances claimed.", st.claimed) &&
         metric(&b, "cairn_instances_completed_total", "counter", "Instances completed.",
                st.completed) &&
         metric(&b, "cairn_instances_failed_total", "counter", "Instances failed or cancelled.",
                st.failed) &&
         metric(&b, "cairn_instances_evicted_total", "counter",
                "Instances handed back while sleeping.", st.evicted) &&
         metric(&b, "cairn_leases_lost_total", "counter", "Instances evicted for a lost lease.",
                st.lost) &&
         metric(&b, "cairn_instances_active", "gauge", "Instances held now.", st.active) &&
         metric(&b, "cairn_writes_total", "counter", "Instance writes committed.", st.writes) &&
         metric(&b, "cairn_write_batches_total", "counter", "Persist transactions committed.",
                st.batches) &&
         metric(&b, "cairn_actions_dispatched_total", "counter", "Actions handed to the pool.",
                st.dispatched) &&
         metric(&b, "cairn_workers", "gauge", "Workers connected.", ps.workers) &&
         metric(&b, "cairn_pool_queued", "gauge", "Attempts waiting for a worker.", ps.queued) &&
         metric(&b, "cairn_pool_results_total", "counter", "Worker outcomes accepted.",
                ps.results) &&
         metric(&b, "cairn_pool_stale_total", "counter", "Late or duplicate outcomes dropped.",
                ps.stale) &&
         metric(&b, "cairn_pool_timeouts_total", "counter", "Attempts past their deadline.",
                ps.timeouts) &&
         metric(&b, "cairn_pool_lost_total", "counter", "Attempts failed with WorkerLost.",
                ps.lost) &&
         metric(&b, "cairn_pool_requeued_total", "counter",
                "Attempts of a dropped worker dispatched again.", ps.requeued) &&
         metric(&b, "cairn_pool_bad_messages_total", "counter",
                "Worker connections dropped for a malformed message.", ps.bad_messages) &&
         metric(&b, "cairn_pool_silent_total", "counter", "Worker connections dropped for silence.",
                ps.silent) &&
         summary(&b, "cairn_persist_seconds",
                 "Duration of each committed persist transaction (the commit barrier's floor).",
                 &st.persist) &&
         summary(&b, "cairn_action_seconds",
                 "From an action's dispatch to its outcome's arrival: the worker's run time plus "
                 "the transport.",
                 &ps.action_time) &&
         summary(&b, "cairn_action_dispatch_delay_seconds",
                 "From an action becoming ready to its dispatch to a worker (commit barrier and "
                 "waiting for a worker).",
                 &ps.dispatch_delay);
    if (!ok) {
        cn_buf_fini(&b);
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    http_reply(aio, 200, "text/plain; version=0.0.4", b.data, b.len);
    cn_buf_fini(&b);
}

static void
http_healthz(nng_aio *aio)
{
    http_reply(aio, 200, "text/plain", "ok\n", 3);
}

static void
http_readyz(nng_aio *aio)
{
    struct rn_runner *r = nng_http_handler_get_data(nng_aio_get_input(aio, 1));

    if (atomic_load(&r->ready)) {
        http_reply(aio, 200, "text/plain", "ready\n", 6);
    } else {
        http_reply(aio, 503, "text/plain", "stopping\n", 9);
    }
}

static cn_err
http_start(struct rn_runner *r, const char *listen, struct cn_errmsg *err)
{
    static const struct {
        const char *path;
        void (*fn)(nng_aio *);
    } routes[] = {{"/metrics", http_metrics}, {"/healthz", http_healthz}, {"/readyz", http_readyz}};
    char url[300];
    size_t i;
    int rv;

    (void) snprintf(url, sizeof(url), "%s%s", strncmp(listen, "http://", 7) == 0 ? "" : "http://",
                    listen);
    if ((rv = nng_url_parse(&r->http_url, url)) != 0 ||
        (rv = nng_http_server_hold(&r->http, r->http_url)) != 0) {
        return cn_errmsg_set(err, CN_INVAL, "CAIRN_HTTP_LISTEN %s: %s", listen, nng_strerror(rv));
    }
    for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        nng_http_handler *h;
        if ((rv = nng_http_handler_alloc(&h, routes[i].path, routes[i].fn)) != 0) {
            return cn_errmsg_set(err, CN_NOMEM, "http: %s", nng_strerror(rv));
        }
        if ((rv = nng_http_handler_set_data(h, r, NULL)) != 0 ||
            (rv = nng_http_server_add_handler(r->http, h)) != 0) {
            nng_http_handler_free(h);
            return cn_errmsg_set(err, CN_NOMEM, "http: %s", nng_strerror(rv));
        }
    }
    if ((rv = nng_http_server_start(r->http)) != 0) {
        return cn_errmsg_set(err, CN_IO, "cannot listen on %s: %s", url, nng_strerror(rv));
    }
    return CN_OK;
}
cn_err
rn_runner_start(const struct rn_runner_cfg *cfg, struct rn_runner **out, struct cn_errmsg *err)
{
    struct rn_pool_cfg pcfg;
    struct rn_runner *r;
    uint32_t i;
    cn_err rv;

    *out = NULL;
    if (cfg->shards == 0 || cfg->max_instances == 0 || cfg->worker_listen == NULL ||
        cfg->persisters > MAX_PERSISTERS) {
        return cn_errmsg_set(err, CN_INVAL, "invalid runner configuration");
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return CN_NOMEM;
    }
    r->cfg = *cfg;
    r->exec_cfg.default_timeout_ms = cfg->default_action_timeout_ms;
    pthread_mutex_init(&r->pmtx, NULL);
    pthread_cond_init(&r->pcond, NULL);
    pthread_mutex_init(&r->kmtx, NULL);
    pthread_cond_init(&r->kcond, NULL);
    pthread_mutex_init(&r->rmtx, NULL);
    pthread_mutex_init(&r->dmtx, NULL);
    r->nshards = cfg->shards;
    r->npersisters = cfg->persisters != 0 ? cfg->persisters : 2;
    r->shards = calloc(r->nshards, sizeof(*r->shards));
    if (r->shards == NULL) {
        free(r);
        return CN_NOMEM;
    }
    for (i = 0; i < r->nshards; i++) {
        r->shards[i].r = r;
        r->shards[i].index = i;
        pthread_mutex_init(&r->shards[i].mtx, NULL);
        pthread_cond_init(&r->shards[i].cond, NULL);
        atomic_init(&r->shards[i].busy, 0);
    }
    if (cfg->backend != NULL) {
        r->claim_b = r->lease_b = cfg->backend;
        for (i = 0; i < r->npersisters; i++) {
            r->persisters[i].b = cfg->backend;
        }
    } else if ((rv = rn_backend_pg_open(cfg->database_url, &r->claim_b, err)) != CN_OK ||
               (rv = rn_backend_pg_open(cfg->database_url, &r->lease_b, err)) != CN_OK) {
        runner_free(r);
        return rv;
    }
    for (i = 0; cfg->backend == NULL && i < r->npersisters; i++) {
        if ((rv = rn_backend_pg_open(cfg->database_url, &r->persisters[i].b, err)) != CN_OK) {
            runner_free(r);
            return rv;
        }
    }
    memset(&pcfg, 0, sizeof(pcfg));
    pcfg.listen_url = cfg->worker_listen;
    pcfg.credential = cfg->worker_credential;
    pcfg.idle_ms = cfg->worker_idle_ms;
    /* A crashed worker is an infrastructure failure, not the action's: its attempts go to
     * another worker (same execution id and attempt) before the workflow sees WorkerLost. */
    pcfg.requeue_lost = 3;
    if ((rv = rn_pool_start(&pcfg, on_pool_result, r, &r->pool, err)) != CN_OK) {
        runner_free(r);
        return rv;
    }
    if (cfg->http_listen != NULL && *cfg->http_listen != '\0' &&
        (rv = http_start(r, cfg->http_listen, err)) != CN_OK) {
        runner_free(r);
        return rv;
    }
    for (i = 0; i < r->nshards; i++) {
        if (pthread_create(&r->shards[i].thread, NULL, shard_main, &r->shards[i]) != 0) {
            rn_runner_stop(r, 0);
            return cn_errmsg_set(err, CN_NOMEM, "cannot start a shard thread");
        }
        r->shards[i].started = true;
    }
    for (i = 0; i < r->npersisters; i++) {
        r->persisters[i].r = r;
        if (pthread_create(&r->persisters[i].thread, NULL, persister_main, &r->persisters[i]) !=
            0) {
            rn_runner_stop(r, 0);
            return cn_errmsg_set(err, CN_NOMEM, "cannot start a persister");
        }
        r->persisters[i].started = true;
    }
    if (pthread_create(&r->keeper, NULL, keeper_main, r) != 0) {
        rn_runner_stop(r, 0);
        return cn_errmsg_set(err, CN_NOMEM, "cannot start the lease keeper");
    }
    r->keeper_started = true;
    if (pthread_create(&r->claimer, NULL, claimer_main, r) != 0) {
        rn_runner_stop(r, 0);
        return cn_errmsg_set(err, CN_NOMEM, "cannot start the claimer");
    }
    r->claimer_started = true;
    atomic_store(&r->ready, true);
    *out = r;
    return CN_OK;
}

static size_t
busy_total(struct rn_runner *r)
{
    size_t n = 0;
    uint32_t i;

    for (i = 0; i < r->nshards; i++) {
        n += atomic_load(&r->shards[i].busy);
    }
    return n;
}

/* Logs the claim-to-first-dispatch latency over this runner's life (shards are stopped). */
static void
report_latency(struct rn_runner *r)
{
    struct rn_lathist all;
    uint32_t s;

    memset(&all, 0, sizeof(all));
    for (s = 0; s < r->nshards; s++) {
        rn_lathist_merge(&all, &r->shards[s].claim_lat);
    }
    if (all.count == 0) {
        return;
    }
    rn_log(RN_LOG_INFO,
           "claim-to-first-dispatch: p50 %llu ms, p99 %llu ms, max %llu ms over %llu instances",
           (unsigned long long) rn_lathist_quantile(&all, 0.5) / 1000,
           (unsigned long long) rn_lathist_quantile(&all, 0.99) / 1000,
           (unsigned long long) all.max_us / 1000, (unsigned long long) all.count);
}

void
rn_runner_stop(struct rn_runner *r, uint32_t grace_ms)
{
    int64_t deadline = rn_clock_ms(CLOCK_MONOTONIC) + grace_ms;
    struct cn_errmsg em;
    uint32_t i;

    if (r == NULL) {
        return;
    }
    atomic_store(&r->ready, false);
    atomic_store(&r->stop_claiming, true);
    if (r->claimer_started) {
        pthread_join(r->claimer, NULL);
        r->claimer_started = false;
    }
    /* Let running actions report and their writes commit, up to the grace period. */
    while (busy_total(r) > 0 && rn_clock_ms(CLOCK_MONOTONIC) < deadline) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (busy_total(r) > 0) {
        rn_log(RN_LOG_WARN,
               "shutdown: %zu instance(s) still busy after the grace period; "
               "handing them back",
               busy_total(r));
    }
    for (i = 0; i < r->nshards; i++) {
        struct shard *sh = &r->shards[i];
        pthread_mutex_lock(&sh->mtx);
        sh->stop = true;
        pthread_cond_signal(&sh->cond);
        pthread_mutex_unlock(&sh->mtx);
        if (sh->started) {
            pthread_join(sh->thread, NULL);
            sh->started = false;
        }
    }
    pthread_mutex_lock(&r->pmtx);
    r->pstop = true;
    pthread_cond_broadcast(&r->pcond);
    pthread_mutex_unlock(&r->pmtx);
    for (i = 0; i < r->npersisters; i++) {
        if (r->persisters[i].started) {
            pthread_join(r->persisters[i].thread, NULL);
            r->persisters[i].started = false;
        }
    }
    pthread_mutex_lock(&r->kmtx);
    r->kstop = true;
    pthread_cond_signal(&r->kcond);
    pthread_mutex_unlock(&r->kmtx);
    if (r->keeper_started) {
        pthread_join(r->keeper, NULL);
        r->keeper_started = false;
    }
    report_latency(r);
    /* Hand back everything still held: another runner continues it at once. */
    if (r->nreg > 0 && r->lease_b != NULL) {
        uint8_t(*locks)[16] = malloc(r->nreg * 16);
        if (locks != NULL) {
            size_t k;
            for (k = 0; k < r->nreg; k++) {
                memcpy(locks[k], r->reg[k].lock, 16);
            }
            if (r->lease_b->ops->release(r->lease_b, (const uint8_t(*)[16]) locks, r->nreg, &em) !=
                CN_OK) {
                rn_log(RN_LOG_ERROR,
                       "could not hand back %zu instance(s): %s (their leases "
                       "expire instead)",
                       r->nreg, em.text);
            } else {
                rn_log(RN_LOG_INFO, "handed back %zu instance(s)", r->nreg);
            }
            free(locks);
        }
    }
    runner_free(r);
}

static void
runner_free(struct rn_runner *r)
{
    uint32_t i;
    size_t k;

    if (r->http != NULL) {
        nng_http_server_stop(r->http);
        nng_http_server_release(r->http);
        r->http = NULL;
    }
    if (r->http_url != NULL) {
        nng_url_free(r->http_url);
        r->http_url = NULL;
    }
    rn_pool_stop(r->pool); /* WorkerLost results go to shard inboxes, freed below */
    r->pool = NULL;
    for (i = 0; r->shards != NULL && i < r->nshards; i++) {
        struct shard *sh = &r->shards[i];
        struct sev *e, *next;

        for (e = sh->head; e != NULL; e = next) {
            next = e->next;
            sev_free(e);
        }
        while (sh->ninsts > 0) {
            inst_remove(sh, sh->insts[sh->ninsts - 1]);
        }
        free(sh->insts);
        rn_idmap_fini(&sh->byid);
        free(sh->heap);
        rn_step_out_fini(&sh->out);
        pthread_mutex_destroy(&sh->mtx);
        pthread_cond_destroy(&sh->cond);
    }
    free(r->shards);
    while (r->phead != NULL) {
        struct preq *q = r->phead;
        r->phead = q->next;
        preq_free(q);
    }
    for (k = 0; k < r->ndags; k++) {
        ir_dag_free(r->dags[k].dag);
    }
    free(r->dags);
    free(r->reg);
    rn_idmap_fini(&r->reg_byid);
    if (r->cfg.backend == NULL) {
        if (r->claim_b != NULL) {
            r->claim_b->ops->close(r->claim_b);
        }
        for (k = 0; k < r->npersisters; k++) {
            if (r->persisters[k].b != NULL) {
                r->persisters[k].b->ops->close(r->persisters[k].b);
            }
        }
        if (r->lease_b != NULL) {
            r->lease_b->ops->close(r->lease_b);
        }
    }
    pthread_mutex_destroy(&r->pmtx);
    pthread_cond_destroy(&r->pcond);
    pthread_mutex_destroy(&r->kmtx);
    pthread_cond_destroy(&r->kcond);
    pthread_mutex_destroy(&r->rmtx);
    pthread_mutex_destroy(&r->dmtx);
    free(r);
}
