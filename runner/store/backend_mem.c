/* SPDX-License-Identifier: MIT */
/*
 * The in-memory backend (backend.h): the same claim, lease, fencing and write semantics as the
 * PostgreSQL one, with nothing durable. Used by `cairnctl exec` (try a workflow without a
 * database) and by tests. Thread-safe: one object is shared by every runner thread (a mutex;
 * wait_enqueue sleeps on a condition variable that enqueues signal). Lease expiry reads the wall
 * clock, or the test clock of rn_backend_mem_set_clock (the deterministic simulation, tests/sim).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/buf.h"
#include "ir/base/clock.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/exec/idmap.h"
#include "runner/store/backend.h"

struct mem_version {
    struct rn_vid id;
    char *name;
    char *source;
};

struct mem_instance {
    struct rn_iid id;
    struct rn_vid version_id;
    char *workflow;
    struct ir_val input;
    struct cn_buf state; /* len 0: none yet */
    uint32_t state_step; /* the last step the snapshot holds (rn_done.step) */
    enum rn_outcome outcome;
    bool running;         /* claimed (status running) */
    bool started;         /* claimed at least once (started_at) */
    struct ir_val result; /* COMPLETED: the value; FAILED: the error */
    bool queued;          /* has a queue row */
    int priority;
    int64_t scheduled_at; /* wall ms */
    int64_t deadline_ms;  /* the workflow's deadline (wall ms); 0: none */
    int64_t timeout_ms;
    bool locked;
    struct rn_token lock;
    int64_t lock_expires; /* wall ms */
    struct rn_done *done; /* recorded results (values owned), in order */
    size_t ndone, capdone;
    struct rn_xidmap lastdone; /* execution id -> its latest result in done */
    uint32_t *prevdone;        /* per result: the same id's previous one, or UINT32_MAX */
};

struct mem_backend {
    struct rn_backend base;
    pthread_mutex_t mtx;
    pthread_cond_t enqueued;
    pthread_cond_t finished; /* an instance got its outcome */
    uint64_t seq;            /* id generator */
    struct mem_version *versions;
    size_t nversions;
    struct mem_instance **insts;
    size_t ninsts, capinsts;
    uint64_t enqueue_count;
    /* rn_backend_mem_set_clock: the wall clock lease expiry reads (NULL: cn_wall_ms), and
     * whether ids are made from the counter and that clock alone */
    int64_t (*clock)(void *arg);
    void *clock_arg;
};

static int64_t
mem_now(const struct mem_backend *b)
{
    return b->clock != NULL ? b->clock(b->clock_arg) : cn_wall_ms();
}

/* A fresh, unique 16-byte id of any kind (out: its .b): random bits plus a counter
 * (uniqueness matters, not secrecy). */
static void
mem_id(struct mem_backend *b, uint8_t out[16])
{
    uint64_t s = ++b->seq;
    uint64_t r = b->clock != NULL
                     ? (s * 0x9e3779b97f4a7c15ULL) ^ (uint64_t) mem_now(b)
                     : ((uint64_t) rand() << 32) ^ (uint64_t) rand() ^ (uint64_t) cn_wall_ms();

    memcpy(out, &r, 8);
    memcpy(out + 8, &s, 8);
    out[6] = (uint8_t) ((out[6] & 0x0f) | 0x40); /* looks like a v4 UUID */
    out[8] = (uint8_t) ((out[8] & 0x3f) | 0x80);
}

static struct mem_instance *
mem_find(struct mem_backend *b, struct rn_iid id)
{
    size_t i;

    for (i = 0; i < b->ninsts; i++) {
        if (rn_iid_eq(b->insts[i]->id, id)) {
            return b->insts[i];
        }
    }
    return NULL;
}

static bool
claimable(const struct mem_instance *in, int64_t now)
{
    return in->queued && in->scheduled_at <= now && (!in->locked || in->lock_expires < now);
}

static cn_err
mem_claim(struct rn_backend *base, size_t max, size_t max_bytes, size_t max_orphans,
          size_t max_fresh, int64_t lease_ms, struct rn_claimed **out, size_t *nout,
          struct cn_errmsg *err)
{
    struct mem_backend *b = (struct mem_backend *) base;
    struct rn_claimed *cl;
    int64_t now = mem_now(b);
    size_t n = 0, k, bytes = 0, orphans = 0, fresh = 0;

    (void) err;
    *out = NULL;
    *nout = 0;
    cn_mutex_lock(&b->mtx);
    cl = cn_xcalloc(max ? max : 1, sizeof(*cl));
    while (n < max) {
        struct mem_instance *best = NULL;
        size_t i;

        /* ORDER BY priority DESC, scheduled_at, as the SQL claim does */
        for (i = 0; i < b->ninsts; i++) {
            struct mem_instance *in = b->insts[i];
            if (claimable(in, now) && (in->locked ? orphans < max_orphans : fresh < max_fresh) &&
                (best == NULL || in->priority > best->priority ||
                 (in->priority == best->priority && in->scheduled_at < best->scheduled_at))) {
                best = in;
            }
        }
        /* Snapshots count as their size; inputs, held as values here, are not measured. */
        if (best == NULL || (n > 0 && bytes + best->state.len > max_bytes)) {
            break;
        }
        bytes += best->state.len;
        orphans += best->locked; /* claimable while locked: its lease expired */
        fresh += !best->locked;
        best->locked = true;
        mem_id(b, best->lock.b);
        best->lock_expires = now + lease_ms;
        best->running = true;
        cl[n].started_before = best->started;
        best->started = true;
        cl[n].instance_id = best->id;
        cl[n].lock = best->lock;
        cl[n].version_id = best->version_id;
        cl[n].workflow = cn_xstrdup(best->workflow);
        cl[n].input = ir_val_retain(best->input);
        cl[n].deadline_ms = best->deadline_ms;
        cl[n].timeout_ms = best->timeout_ms;
        if (best->state.len > 0) {
            cl[n].state = cn_xmalloc(best->state.len);
            memcpy(cl[n].state, best->state.data, best->state.len);
            cl[n].state_len = best->state.len;
        }
        cl[n].state_step = best->state_step;
        /* As the PostgreSQL backend: the latest result per execution id of those that are no step,
         * and every step after the snapshot. */
        cl[n].done = cn_xcalloc(best->ndone ? best->ndone : 1, sizeof(*cl[n].done));
        for (k = best->ndone; k > 0; k--) {
            const struct rn_done *d = &best->done[k - 1];
            size_t j;
            bool seen = d->step > 0 && d->step <= best->state_step;
            for (j = 0; j < cl[n].ndone && !seen && d->step == 0; j++) {
                seen = cl[n].done[j].step == 0 && rn_xid_eq(cl[n].done[j].exec_id, d->exec_id);
            }
            if (!seen) {
                cl[n].done[cl[n].ndone] = *d;
                cl[n].done[cl[n].ndone].value = ir_val_retain(d->value);
                cl[n].ndone++;
            }
        }
        n++;
    }
    cn_mutex_unlock(&b->mtx);
    *out = cl;
    *nout = n;
    return CN_OK;
}

static cn_err
mem_version_source(struct rn_backend *base, struct rn_vid version_id, char **src,
                   struct cn_errmsg *err)
{
    struct mem_backend *b = (struct mem_backend *) base;
    size_t i;

    *src = NULL;
    cn_mutex_lock(&b->mtx);
    for (i = 0; i < b->nversions && *src == NULL; i++) {
        if (rn_vid_eq(b->versions[i].id, version_id)) {
            *src = cn_xstrdup(b->versions[i].source);
        }
    }
    cn_mutex_unlock(&b->mtx);
    if (*src == NULL) {
        return cn_errmsg_set(err, CN_NOTFOUND, "workflow version not found");
    }
    return CN_OK;
}

static bool
holds(const struct mem_instance *in, struct rn_token lock)
{
    return in != NULL && in->queued && in->locked && rn_token_eq(in->lock, lock);
}

/* Whether d's execution id and attempt already have a result: a write is sent again when its
 * outcome is unknown, and a claim re-delivers recorded results that hydration then reports
 * again, so recording is idempotent here as in PostgreSQL (its persist skips existing rows).
 * Looked up by execution id, then along that id's few attempts: a large fan-out records
 * hundreds of thousands of results. */
static bool
mem_recorded(const struct mem_instance *in, const struct rn_done *d)
{
    uint32_t k;

    if (!rn_xidmap_get(&in->lastdone, d->exec_id, &k)) {
        return false;
    }
    for (; k != UINT32_MAX; k = in->prevdone[k]) {
        if (in->done[k].attempt == d->attempt) {
            return true;
        }
    }
    return false;
}

/* Records result d of instance in (once). */
static cn_err
mem_record(struct mem_instance *in, const struct rn_done *d)
{
    if (mem_recorded(in, d)) {
        return CN_OK;
    }
    if (in->ndone == in->capdone) {
        in->capdone = in->capdone ? in->capdone * 2 : 8;
        in->done = cn_xreallocarray(in->done, in->capdone, sizeof(*in->done));
        in->prevdone = cn_xreallocarray(in->prevdone, in->capdone, sizeof(*in->prevdone));
    }
    if (!rn_xidmap_get(&in->lastdone, d->exec_id, &in->prevdone[in->ndone])) {
        in->prevdone[in->ndone] = UINT32_MAX;
    }
    if (rn_xidmap_put(&in->lastdone, d->exec_id, (uint32_t) in->ndone) != CN_OK) {
        return CN_NOMEM;
    }
    in->done[in->ndone] = *d;
    in->done[in->ndone].value = ir_val_retain(d->value);
    in->ndone++;
    return CN_OK;
}

/* A wait of instance in: nothing can be sent to a workflow run in memory (cairnctl exec has no
 * database for a sender to reach), so a wait waits until its timeout, which answers it
 * (recorded, as storage records a signal it delivers); a withdrawn one is dropped. */
static cn_err
mem_wait(struct mem_instance *in, struct rn_wait *w)
{
    struct rn_done d;

    w->value = ir_null();
    if (w->drop) {
        w->status = RN_WAIT_DROPPED;
        return CN_OK;
    }
    if (!w->expire) {
        w->status = RN_WAIT_WAITING;
        return CN_OK;
    }
    memset(&d, 0, sizeof(d));
    d.exec_id = w->exec_id;
    d.attempt = w->attempt;
    d.ok = w->timeout_ok;
    d.value = w->timeout_value;
    w->status = RN_WAIT_ANSWERED;
    w->ok = w->timeout_ok;
    w->value = ir_val_retain(w->timeout_value);
    return mem_record(in, &d);
}

static cn_err
mem_persist(struct rn_backend *base, struct rn_write *w, size_t n, struct cn_errmsg *err)
{
    struct mem_backend *b = (struct mem_backend *) base;
    size_t i, k;

    (void) err;
    cn_mutex_lock(&b->mtx);
    for (i = 0; i < n; i++) {
        struct mem_instance *in = mem_find(b, w[i].instance_id);

        w[i].lost = !holds(in, w[i].lock);
        if (w[i].lost) {
            continue;
        }
        for (k = 0; k < w[i].nchildren; k++) {
            /* Child workflows need the database: every instance of a tree may run anywhere. */
            w[i].children[k].status = RN_CHILD_NOT_FOUND;
            (void) snprintf(w[i].children[k].message, sizeof(w[i].children[k].message),
                            "child workflows need the PostgreSQL backend (cairnctl exec runs one "
                            "workflow in memory): cannot start %s",
                            w[i].children[k].workflow);
        }
        for (k = 0; k < w[i].njoins; k++) {
            /* No child ever starts here, so none is waited for. */
            w[i].joins[k].status = RN_JOIN_NOT_CHILD;
            (void) snprintf(w[i].joins[k].message, sizeof(w[i].joins[k].message),
                            "child workflows need the PostgreSQL backend (cairnctl exec runs one "
                            "workflow in memory)");
        }
        for (k = 0; k < w[i].nsends; k++) {
            /* Likewise signals: the only instance in memory is the one sending. */
            w[i].sends[k].status = RN_SEND_NOT_FOUND;
            (void) snprintf(w[i].sends[k].message, sizeof(w[i].sends[k].message),
                            "signals to other instances need the PostgreSQL backend (cairnctl "
                            "exec runs one workflow in memory)");
        }
        for (k = 0; k < w[i].ndone; k++) {
            if (mem_record(in, &w[i].done[k]) != CN_OK) {
                cn_mutex_unlock(&b->mtx);
                return CN_NOMEM;
            }
        }
        for (k = 0; k < w[i].nwaits; k++) {
            if (mem_wait(in, &w[i].waits[k]) != CN_OK) {
                cn_mutex_unlock(&b->mtx);
                return CN_NOMEM;
            }
        }
        if (w[i].state != NULL) {
            cn_buf_clear(&in->state);
            if (cn_buf_append(&in->state, w[i].state, w[i].state_len) != CN_OK) {
                cn_mutex_unlock(&b->mtx);
                return CN_NOMEM;
            }
            if (w[i].outcome == RN_RUNNING) {
                in->state_step = w[i].state_step;
            }
        }
        if (w[i].outcome != RN_RUNNING) {
            cn_cond_broadcast(&b->finished);
            in->outcome = w[i].outcome;
            ir_val_release(in->result);
            in->result = ir_val_retain(w[i].result);
            in->queued = false;
            in->running = false;
            in->locked = false;
        } else if (w[i].release) {
            in->locked = false;
            in->running = false;
            in->scheduled_at = w[i].wake_at_ms;
        }
    }
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

static cn_err
mem_heartbeat(struct rn_backend *base, const struct rn_lease *leases, size_t n, int64_t lease_ms,
              enum rn_lease_state *st, struct cn_errmsg *err)
{
    struct mem_backend *b = (struct mem_backend *) base;
    int64_t now = mem_now(b);
    size_t i;

    (void) err;
    cn_mutex_lock(&b->mtx);
    for (i = 0; i < n; i++) {
        struct mem_instance *in = mem_find(b, leases[i].instance_id);
        st[i] = holds(in, leases[i].lock) ? RN_LEASE_RENEWED : RN_LEASE_LOST;
        if (st[i] == RN_LEASE_RENEWED) {
            in->lock_expires = now + lease_ms;
        }
    }
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

static cn_err
mem_release(struct rn_backend *base, const struct rn_token *locks, size_t n, struct cn_errmsg *err)
{
    struct mem_backend *b = (struct mem_backend *) base;
    size_t i, j;

    (void) err;
    cn_mutex_lock(&b->mtx);
    for (i = 0; i < n; i++) {
        for (j = 0; j < b->ninsts; j++) {
            if (holds(b->insts[j], locks[i])) {
                b->insts[j]->locked = false;
                b->insts[j]->running = false;
            }
        }
    }
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

static cn_err
mem_fail(struct rn_backend *base, struct rn_iid instance_id, struct rn_token lock,
         struct ir_val error, struct cn_errmsg *err)
{
    struct mem_backend *b = (struct mem_backend *) base;
    struct mem_instance *in;

    (void) err;
    cn_mutex_lock(&b->mtx);
    in = mem_find(b, instance_id);
    if (holds(in, lock)) {
        cn_cond_broadcast(&b->finished);
        in->outcome = RN_FAILED;
        ir_val_release(in->result);
        in->result = ir_val_retain(error);
        in->queued = false;
        in->running = false;
        in->locked = false;
    }
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

static cn_err
mem_reclaim(struct rn_backend *base, size_t max, int64_t grace_ms, size_t *n, struct cn_errmsg *err)
{
    struct mem_backend *b = (struct mem_backend *) base;
    int64_t now = mem_now(b);
    size_t i;

    (void) err;
    *n = 0;
    cn_mutex_lock(&b->mtx);
    for (i = 0; i < b->ninsts && *n < max; i++) {
        struct mem_instance *in = b->insts[i];
        if (in->queued && in->locked && in->lock_expires < now - grace_ms) {
            in->locked = false;
            in->running = false;
            (*n)++;
        }
    }
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

static cn_err
mem_wait_enqueue(struct rn_backend *base, int timeout_ms, struct cn_errmsg *err)
{
    struct mem_backend *b = (struct mem_backend *) base;
    int64_t at = cn_mono_ms() + timeout_ms;
    uint64_t seen;

    (void) err;
    cn_mutex_lock(&b->mtx);
    seen = b->enqueue_count;
    while (b->enqueue_count == seen && cn_mono_ms() < at) {
        cn_cond_wait_until(&b->enqueued, &b->mtx, at);
    }
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

/* The shared object outlives the runner that uses it: close does nothing; rn_backend_mem_free
 * frees it. */
static void
mem_close(struct rn_backend *base)
{
    (void) base;
}

static const struct rn_backend_ops mem_ops = {
    .claim = mem_claim,
    .version_source = mem_version_source,
    .persist = mem_persist,
    .heartbeat = mem_heartbeat,
    .release = mem_release,
    .fail = mem_fail,
    .reclaim = mem_reclaim,
    .wait_enqueue = mem_wait_enqueue,
    .close = mem_close,
};

cn_err
rn_backend_mem_new(struct rn_backend **out)
{
    struct mem_backend *b = cn_xcalloc(1, sizeof(*b));

    b->base.ops = &mem_ops;
    cn_mutex_init(&b->mtx);
    cn_cond_init(&b->enqueued);
    cn_cond_init(&b->finished);
    srand((unsigned) cn_wall_ms());
    *out = &b->base;
    return CN_OK;
}

void
rn_backend_mem_set_clock(struct rn_backend *base, int64_t (*now_ms)(void *arg), void *arg)
{
    struct mem_backend *b = (struct mem_backend *) base;

    cn_mutex_lock(&b->mtx);
    b->clock = now_ms;
    b->clock_arg = arg;
    cn_mutex_unlock(&b->mtx);
}

cn_err
rn_backend_mem_register(struct rn_backend *base, const char *name, const char *source,
                        struct rn_vid *version_id)
{
    struct mem_backend *b = (struct mem_backend *) base;
    struct mem_version *n;

    cn_mutex_lock(&b->mtx);
    b->versions = cn_xreallocarray(b->versions, b->nversions + 1, sizeof(*b->versions));
    n = &b->versions[b->nversions];
    mem_id(b, n->id.b);
    n->name = cn_xstrdup(name);
    n->source = cn_xstrdup(source);
    *version_id = n->id;
    b->nversions++;
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

cn_err
rn_backend_mem_enqueue(struct rn_backend *base, const char *name, struct ir_val input,
                       int64_t scheduled_at_ms, struct rn_iid *instance_id)
{
    struct mem_backend *b = (struct mem_backend *) base;
    struct mem_instance *in;
    const struct mem_version *v = NULL;
    size_t i;

    if (input.type != IR_T_MAP) {
        return CN_TYPE;
    }
    cn_mutex_lock(&b->mtx);
    for (i = b->nversions; i > 0 && v == NULL; i--) { /* the newest version */
        if (strcmp(b->versions[i - 1].name, name) == 0) {
            v = &b->versions[i - 1];
        }
    }
    if (v == NULL) {
        cn_mutex_unlock(&b->mtx);
        return CN_NOTFOUND;
    }
    if (b->ninsts == b->capinsts) {
        b->capinsts = b->capinsts ? b->capinsts * 2 : 16;
        b->insts = cn_xreallocarray(b->insts, b->capinsts, sizeof(*b->insts));
    }
    in = cn_xcalloc(1, sizeof(*in));
    in->workflow = cn_xstrdup(name);
    mem_id(b, in->id.b);
    in->version_id = v->id;
    in->input = ir_val_retain(input);
    in->result = ir_null();
    in->queued = true;
    in->scheduled_at = scheduled_at_ms != 0 ? scheduled_at_ms : mem_now(b);
    b->insts[b->ninsts++] = in;
    *instance_id = in->id;
    b->enqueue_count++;
    cn_cond_broadcast(&b->enqueued);
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

cn_err
rn_backend_mem_set_timeout(struct rn_backend *base, struct rn_iid instance_id, int64_t timeout_ms)
{
    struct mem_backend *b = (struct mem_backend *) base;
    struct mem_instance *in;

    cn_mutex_lock(&b->mtx);
    in = mem_find(b, instance_id);
    if (in != NULL) {
        in->timeout_ms = timeout_ms;
        in->deadline_ms = timeout_ms > 0 ? in->scheduled_at + timeout_ms : 0;
    }
    cn_mutex_unlock(&b->mtx);
    return in != NULL ? CN_OK : CN_NOTFOUND;
}

cn_err
rn_backend_mem_steal(struct rn_backend *base, struct rn_iid instance_id, bool *stolen)
{
    struct mem_backend *b = (struct mem_backend *) base;
    struct mem_instance *in;

    *stolen = false;
    cn_mutex_lock(&b->mtx);
    in = mem_find(b, instance_id);
    if (in != NULL && in->queued && in->locked) {
        mem_id(b, in->lock.b); /* the thief's token, which no runner holds */
        *stolen = true;
        in->lock_expires = mem_now(b) - 1;
        b->enqueue_count++; /* claimers waiting for work look again */
        cn_cond_broadcast(&b->enqueued);
    }
    cn_mutex_unlock(&b->mtx);
    return in != NULL ? CN_OK : CN_NOTFOUND;
}

cn_err
rn_backend_mem_outcome(struct rn_backend *base, struct rn_iid instance_id, enum rn_outcome *outcome,
                       struct ir_val *result, size_t *nresults)
{
    return rn_backend_mem_wait(base, instance_id, 0, outcome, result, nresults);
}

cn_err
rn_backend_mem_wait(struct rn_backend *base, struct rn_iid instance_id, int64_t until_mono_ms,
                    enum rn_outcome *outcome, struct ir_val *result, size_t *nresults)
{
    struct mem_backend *b = (struct mem_backend *) base;
    struct mem_instance *in;

    cn_mutex_lock(&b->mtx);
    in = mem_find(b, instance_id);
    if (in == NULL) {
        cn_mutex_unlock(&b->mtx);
        return CN_NOTFOUND;
    }
    while (in->outcome == RN_RUNNING && cn_mono_ms() < until_mono_ms) {
        cn_cond_wait_until(&b->finished, &b->mtx, until_mono_ms);
    }
    *outcome = in->outcome;
    *result = ir_val_retain(in->result);
    if (nresults != NULL) {
        *nresults = in->ndone;
    }
    cn_mutex_unlock(&b->mtx);
    return CN_OK;
}

void
rn_backend_mem_free(struct rn_backend *base)
{
    struct mem_backend *b = (struct mem_backend *) base;
    size_t i, k;

    if (b == NULL) {
        return;
    }
    for (i = 0; i < b->nversions; i++) {
        free(b->versions[i].name);
        free(b->versions[i].source);
    }
    free(b->versions);
    for (i = 0; i < b->ninsts; i++) {
        struct mem_instance *in = b->insts[i];
        for (k = 0; k < in->ndone; k++) {
            ir_val_release(in->done[k].value);
        }
        free(in->done);
        free(in->prevdone);
        rn_xidmap_fini(&in->lastdone);
        free(in->workflow);
        ir_val_release(in->input);
        ir_val_release(in->result);
        cn_buf_fini(&in->state);
        free(in);
    }
    free(b->insts);
    cn_mutex_destroy(&b->mtx);
    cn_cond_destroy(&b->enqueued);
    cn_cond_destroy(&b->finished);
    free(b);
}
