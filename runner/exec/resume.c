/* SPDX-License-Identifier: MIT */
/*
 * Resuming an instance from what is committed: hydration (a snapshot, with the action results
 * recorded since), redrive (a failed instance queued again: every action that had not
 * succeeded gets a new execution id and a fresh attempt budget, results already recorded are
 * used again), the step log that decides which steps are recorded by their results alone, and
 * their replay in order (rn_instance_resume). Pure, as the rest of the executor (exec.c).
 */
#include <stdlib.h>

#include "ir/base/vec.h"
#include "ir/eval.h"
#include "runner/exec/exec_int.h"

/* Redrive: execution node xi (an action running or waiting to retry in the last snapshot of a
 * run that failed) starts over: a new execution id, attempt 1, a fresh budget of retries and a
 * new deadline; what its old attempts may still report is stale. */
static void
restart_action(struct rn_instance *in, uint32_t xi)
{
    struct rn_xnode *x = &in->x.items[xi];

    if (x->has_id) {
        rn_xidmap_del(&in->ids, x->id);
        x->has_id = false;
    }
    rn_ex_forget_attempts(x);
    x->attempt = 0;
    x->deadline = 0;
    rn_x_move(x, RN_X_ACTIVE);
    rn_ex_dispatch(in, xi, false);
}

/* Redrive: a branch of waiting aggregate ai that ended with an error before the snapshot (its
 * slot holds the error) runs again from the start of the branch. The aggregate still has the
 * scope its fork evaluated the collection in, so a spread's items come out the same. */
static void
restart_failed_branches(struct rn_instance *in, uint32_t ai)
{
    const struct ir_node *fork = tnode(in, tnode(in, in->x.items[ai].node)->link);
    struct ir_val coll = ir_null(), items = ir_null();
    uint32_t k;

    for (k = 0; k < in->x.items[ai].nslots && in->rv == CN_OK; k++) {
        struct rn_slot *sl = &in->x.items[ai].slots[k];
        const struct ir_edge *e;
        uint32_t bi;
        if (!sl->filled || sl->ok) {
            continue;
        }
        if (fork->kind == IR_N_SPREAD && items.type == IR_T_NULL) {
            if (rn_ex_eval(in, ai, fork->expr, &coll) != CN_OK ||
                ir_iter_items(coll, &items) != CN_OK ||
                ir_list_len(items) != in->x.items[ai].nslots) {
                /* Cannot happen: the same expression over the same scope. Leave the error. */
                ir_val_release(coll);
                ir_val_release(items);
                return;
            }
            ir_val_release(coll);
        }
        ir_val_release(sl->value);
        sl->value = ir_null();
        sl->filled = false;
        in->x.items[ai].pending++;
        e = tedge(in, fork, fork->kind == IR_N_SPREAD ? 0 : k);
        bi = rn_ex_x_new(in, e->to, in->x.items[ai].scope, ai, k);
        if (bi == RN_NONE) {
            break;
        }
        if (fork->kind == IR_N_SPREAD) {
            in->x.items[bi].item_name = fork->name;
            in->x.items[bi].item = ir_val_retain(ir_list_items(items)[k]);
        }
        rn_ex_push(in, bi, false, ir_null(), false);
    }
    ir_val_release(items);
}

/* The attempts the snapshot had running (ids[0..n)) and that still run go out again, the same id
 * and attempt, or get their deadline timer when it passed meanwhile. */
static void
resend_running(struct rn_instance *in, const struct rn_xid *ids, size_t n)
{
    size_t i;

    for (i = 0; i < n && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        uint32_t xi;
        if (rn_xidmap_get(&in->ids, ids[i], &xi) && in->x.items[xi].status == RN_X_RUNNING) {
            if (in->x.items[xi].deadline != 0 && in->now >= in->x.items[xi].deadline) {
                rn_ex_out_timer(in, xi, RN_TIMER_DEADLINE, in->x.items[xi].deadline);
            } else {
                rn_ex_dispatch(in, xi, true);
            }
        }
    }
}

/* A cancel asked before this claim came before the results recorded since (the one that held
 * the instance had not applied it yet): it ends the instance now, and the results (a child's
 * outcome, which the cancel itself caused) find it finished. */
static void
apply_cancel(struct rn_instance *in, struct ir_val reason, bool force)
{
    struct rn_event ev;

    if (in->outcome != RN_RUNNING) {
        return;
    }
    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_CANCEL;
    ev.value = reason;
    ev.force = force;
    rn_ex_apply_event(in, &ev);
    rn_ex_run_queue(in);
}

/* Sleeps and backoffs of the snapshot, and a cleanup's bound, get their timers again, but those
 * the replay set. */
static void
rearm_timers(struct rn_instance *in, const struct rn_step_out *o)
{
    size_t i;

    bool fresh = false;

    for (i = 0; i < o->timers.len && !fresh; i++) {
        fresh = rn_xid_eq(o->timers.items[i].exec_id, in->cleanup.timer);
    }
    if (rn_instance_cleaning(in) && !fresh) {
        rn_ex_cleanup_timer_out(in); /* the cleanup's bound */
    }
    for (i = 0; i < in->x.len && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        struct rn_xnode *x = &in->x.items[i];
        fresh = false;
        size_t k;
        if ((x->status != RN_X_SLEEPING && x->status != RN_X_BACKOFF) || !x->has_id) {
            continue;
        }
        for (k = 0; k < o->timers.len && !fresh; k++) {
            fresh = rn_xid_eq(o->timers.items[k].exec_id, x->id); /* set by the replay */
        }
        if (!fresh) {
            rn_ex_out_timer(in, (uint32_t) i,
                            x->status == RN_X_SLEEPING ? RN_TIMER_SLEEP : RN_TIMER_BACKOFF,
                            x->scheduled_at);
        }
    }
}

static cn_err
hydrate(const struct ir_dag *dag, const void *snap, size_t len, const struct rn_done *results,
        size_t nresults, const struct rn_exec_cfg *cfg, int64_t now_ms, bool redrive,
        const struct ir_val *cancel, bool force, struct rn_instance **out, struct rn_step_out *o,
        struct cn_errmsg *err)
{
    struct rn_instance *in;
    struct {
        struct rn_xid *items;
        size_t len, cap;
    } running = {NULL, 0, 0};
    size_t i;
    cn_err rv;

    if ((rv = rn_snapshot_load(dag, cfg, snap, len, &in, err)) != CN_OK) {
        return rv;
    }
    if (redrive && rn_ex_cleaning(in)) {
        /* Retried after a cleanup: the run starts over from where the interruption found it,
         * drawing its new ids past those the cleanup drew (their results are recorded). */
        struct rn_instance *before = NULL;
        uint64_t rng = in->rng;
        rv = rn_snapshot_load(dag, cfg, in->cleanup.before.data, in->cleanup.before.len, &before,
                              err);
        rn_instance_free(in);
        if (rv != CN_OK) {
            return rv;
        }
        in = before;
        in->rng = rng;
    }
    rn_ex_begin_step(in, o, now_ms);
    /* Remember what the snapshot had running: only those may be dispatched again below;
     * actions started while replaying results are dispatched by that replay itself. */
    for (i = 0; i < in->x.len; i++) {
        uint8_t st = in->x.items[i].status;
        if (st == RN_X_RUNNING || (redrive && st == RN_X_BACKOFF)) {
            if (CN_VEC_PUSH(&running, in->x.items[i].id) != CN_OK) {
                free(running.items);
                rn_instance_free(in);
                return CN_NOMEM;
            }
        }
    }
    if (cancel != NULL) {
        apply_cancel(in, *cancel, force);
    }
    if (redrive && in->outcome == RN_RUNNING) {
        /* 0. Branches that had already failed into their aggregate run again, before any
         * result arrives that would complete the aggregate and raise their error. */
        size_t n = in->x.len;
        for (i = 0; i < n && in->rv == CN_OK; i++) {
            if (in->x.items[i].status == RN_X_WAITING) {
                restart_failed_branches(in, (uint32_t) i);
            }
        }
        in->out->snapshot_needed = true;
        rn_ex_run_queue(in);
    }
    /* 1. Results recorded after the snapshot, for attempts it has running. */
    for (i = 0; i < nresults && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        struct rn_event ev;
        uint32_t xi;
        if (!rn_xidmap_get(&in->ids, results[i].exec_id, &xi) ||
            in->x.items[xi].status != RN_X_RUNNING ||
            in->x.items[xi].attempt != results[i].attempt || (redrive && !results[i].ok)) {
            continue; /* a redrive runs what failed again instead of raising its error */
        }
        ev.kind = results[i].ok ? RN_EV_RESULT : RN_EV_ERROR;
        ev.exec_id = results[i].exec_id;
        ev.attempt = results[i].attempt;
        ev.value = results[i].value;
        /* Read from storage: recording them again would only be a write that inserts nothing
         * (a parent woken by the last of 10 000 children replays 10 000 of them). */
        ev.recorded = true;
        rn_ex_apply_event(in, &ev);
        rn_ex_run_queue(in);
    }
    /* 2. Dispatches the crash may have lost go out again (same id and attempt: at least
     * once), unless their deadline passed meanwhile: those are not sent again but get their
     * deadline timer, which is due at once and times them out (through the timer, not here:
     * hydration only rebuilds, so a snapshot taken right after it hydrates to itself); sleeps
     * and backoffs get their timers again. */
    if (redrive) {
        /* 2'. Every action of the snapshot still running or waiting to retry (no success
         * recorded) starts over. */
        for (i = 0; i < running.len && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
            uint32_t xi;
            if (rn_xidmap_get(&in->ids, running.items[i], &xi) &&
                (in->x.items[xi].status == RN_X_RUNNING ||
                 in->x.items[xi].status == RN_X_BACKOFF)) {
                restart_action(in, xi);
            }
        }
        rn_ex_run_queue(in);
        running.len = 0;
    }
    resend_running(in, running.items, running.len);
    rearm_timers(in, o);
    free(running.items);
    rv = rn_ex_end_step(in);
    if (rv != CN_OK) {
        rn_instance_free(in);
        return rv;
    }
    *out = in;
    return CN_OK;
}

cn_err
rn_instance_hydrate(const struct ir_dag *dag, const void *snap, size_t len,
                    const struct rn_done *results, size_t nresults, const struct rn_exec_cfg *cfg,
                    int64_t now_ms, struct rn_instance **out, struct rn_step_out *o,
                    struct cn_errmsg *err)
{
    return hydrate(dag, snap, len, results, nresults, cfg, now_ms, false, NULL, false, out, o, err);
}

cn_err
rn_instance_redrive(const struct ir_dag *dag, const void *snap, size_t len,
                    const struct rn_done *results, size_t nresults, const struct rn_exec_cfg *cfg,
                    int64_t now_ms, struct rn_instance **out, struct rn_step_out *o,
                    struct cn_errmsg *err)
{
    return hydrate(dag, snap, len, results, nresults, cfg, now_ms, true, NULL, false, out, o, err);
}

/* Whether o, made from evs[0..n), is a step that its results alone record (rn_steplog). */
static bool
by_results(const struct rn_step_out *o, const struct rn_event *evs, size_t n)
{
    size_t k;

    if (o->timed || o->outcome != RN_RUNNING || o->cancels.len > 0 || o->child_cancels.len > 0 ||
        o->wait_drops.len > 0 || o->published.len > 0 || n == 0 || o->done.len != n) {
        return false;
    }
    for (k = 0; k < o->actions.len; k++) {
        if (o->actions.items[k].call != IR_CALL_ACTION) {
            return false;
        }
    }
    for (k = 0; k < n; k++) {
        const struct rn_done *d = &o->done.items[k];
        if ((evs[k].kind != RN_EV_RESULT && evs[k].kind != RN_EV_ERROR) || evs[k].recorded ||
            !rn_xid_eq(d->exec_id, evs[k].exec_id) || d->attempt != evs[k].attempt ||
            d->ok != (evs[k].kind == RN_EV_RESULT)) {
            return false;
        }
    }
    return true;
}

bool
rn_steplog_take(struct rn_steplog *l, struct rn_step_out *o, const struct rn_event *evs, size_t n,
                uint32_t max)
{
    size_t k;

    if (l->inexact || l->unsnapped + n > max || l->seq > INT32_MAX - n || !by_results(o, evs, n)) {
        /* Whatever changed is recorded otherwise: by a snapshot, which clears this
         * (rn_steplog_snapshot), or by nothing that a replay could put in its place. */
        l->inexact = l->inexact || n > 0;
        return false;
    }
    for (k = 0; k < n; k++) {
        o->done.items[k].step = ++l->seq;
    }
    l->unsnapped += (uint32_t) n;
    return true;
}

void
rn_steplog_snapshot(struct rn_steplog *l)
{
    l->unsnapped = 0;
    l->inexact = false;
}

void
rn_steplog_resumed(struct rn_steplog *l, uint32_t state_step, const struct rn_done *results,
                   size_t n)
{
    size_t k;

    l->seq = state_step;
    l->unsnapped = 0;
    for (k = 0; k < n; k++) {
        if (results[k].step > state_step) {
            l->unsnapped++;
            l->seq = results[k].step > l->seq ? results[k].step : l->seq;
        }
    }
    l->inexact = true;
}

static int
cmp_step(const void *x, const void *y)
{
    const struct rn_done *a = *(const struct rn_done *const *) x;
    const struct rn_done *b = *(const struct rn_done *const *) y;

    return a->step < b->step ? -1 : a->step > b->step;
}

/* The state of r before its hydration (rn_instance_resume): its snapshot, or its first step,
 * with the steps recorded by their results replayed on it in order. Those no longer running at
 * their turn are appended to rest[*nrest]. */
static cn_err
replay(const struct ir_dag *dag, const struct rn_resume *r, const struct rn_done **steps,
       size_t nsteps, const struct rn_exec_cfg *cfg, int64_t now_ms, struct rn_done *rest,
       size_t *nrest, struct cn_buf *snap, struct cn_errmsg *err)
{
    struct rn_instance *in = NULL;
    struct rn_step_out scratch;
    size_t i;
    cn_err rv;

    memset(&scratch, 0, sizeof(scratch));
    scratch.result = ir_null();
    /* What either call asks for (dispatches, timers) is what the hydration at the end asks
     * for again: dropped here. */
    rv = r->snap != NULL
             ? hydrate(dag, r->snap, r->len, NULL, 0, cfg, now_ms, false, NULL, false, &in,
                       &scratch, err)
             : rn_instance_start(dag, r->instance_id, r->input, cfg, now_ms, &in, &scratch);
    for (i = 0; rv == CN_OK && i < nsteps; i++) {
        struct rn_event ev;

        rn_step_out_clear(&scratch);
        memset(&ev, 0, sizeof(ev));
        ev.kind = steps[i]->ok ? RN_EV_RESULT : RN_EV_ERROR;
        ev.exec_id = steps[i]->exec_id;
        ev.attempt = steps[i]->attempt;
        ev.value = steps[i]->value;
        rv = rn_instance_step(in, &ev, 1, now_ms, &scratch);
        if (rv == CN_OK && scratch.done.len == 0) {
            rest[(*nrest)++] = *steps[i];
        }
    }
    rn_step_out_fini(&scratch);
    if (rv == CN_OK) {
        rv = rn_instance_snapshot(in, snap);
    }
    rn_instance_free(in);
    return rv;
}

cn_err
rn_instance_resume(const struct ir_dag *dag, const struct rn_resume *r,
                   const struct rn_exec_cfg *cfg, int64_t now_ms, struct rn_instance **out,
                   struct rn_step_out *o, struct cn_errmsg *err)
{
    const struct rn_done **steps;
    struct rn_done *rest;
    struct cn_buf snap = CN_BUF_INIT;
    size_t i, nsteps = 0, nrest = 0;
    cn_err rv;

    *out = NULL;
    steps = malloc((r->nresults ? r->nresults : 1) * sizeof(*steps));
    rest = malloc((r->nresults ? r->nresults : 1) * sizeof(*rest));
    if (steps == NULL || rest == NULL) {
        free(steps);
        free(rest);
        return CN_NOMEM;
    }
    for (i = 0; i < r->nresults; i++) {
        if (r->results[i].step > r->state_step) {
            steps[nsteps++] = &r->results[i];
        } else if (r->results[i].step == 0) {
            rest[nrest++] = r->results[i];
        } /* else held by the snapshot already */
    }
    if (nsteps == 0 && r->snap != NULL) {
        rv = hydrate(dag, r->snap, r->len, rest, nrest, cfg, now_ms, r->redrive, r->cancel,
                     r->cancel_force, out, o, err);
    } else {
        qsort(steps, nsteps, sizeof(*steps), cmp_step);
        rv = replay(dag, r, steps, nsteps, cfg, now_ms, rest, &nrest, &snap, err);
        if (rv == CN_OK) {
            rv = hydrate(dag, snap.data, snap.len, rest, nrest, cfg, now_ms, r->redrive, r->cancel,
                         r->cancel_force, out, o, err);
        }
    }
    cn_buf_fini(&snap);
    free(steps);
    free(rest);
    return rv;
}
