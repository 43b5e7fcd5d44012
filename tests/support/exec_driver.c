/* SPDX-License-Identifier: MIT */
/* The executor test driver; see exec_driver.h. */
#include "tests/support/exec_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/base/vec.h"
#include "ir/error.h"
#include "runner/exec/errors.h"
#include "tests/support/compile_util.h"

#define T_START_MS 1700000000000LL

struct pending {
    struct rn_action_req req; /* kwargs owned */
    bool hang;
    int64_t started; /* when it was dispatched: the driver has a slot for every attempt */
};

/* An attempt that never answers, and when the pool would time it out: its timeout counted from
 * its start, or its schedule-to-close deadline if that comes first (runner/pool/pool.h). */
struct hung {
    struct rn_xid exec_id;
    uint32_t attempt;
    int64_t at;
};

struct world {
    const struct ir_dag *dag;
    struct rn_exec_cfg cfg;
    struct rn_instance *in;
    int64_t now;
    struct {
        struct pending *items;
        size_t len, cap;
    } pend;
    struct {
        struct rn_timer *items;
        size_t len, cap;
    } timers;
    struct {
        struct hung *items;
        size_t len, cap;
    } hung;
    struct {
        struct rn_done *items; /* values owned */
        size_t len, cap;
    } results;
    struct cn_buf snap;
    struct t_result *r;
    struct rn_iid iid;
    struct ir_val input;  /* kept for a resume without a snapshot */
    bool skip_first_snap; /* the next absorb writes no snapshot: the claim records that step */
    bool by_results;      /* opts->steps_by_results */
    uint32_t replay_max;
    int64_t crash_takes_ms;     /* opts->crash_takes_ms */
    const struct rn_event *evs; /* the events of the step absorb takes (NULL: none) */
    size_t nevs;
    struct rn_steplog steps; /* as the shard keeps it */
    uint32_t state_step;     /* the written snapshot's */
};

/* The events of one step. */
struct events {
    struct rn_event *items;
    size_t len, cap;
};

/* ---- actions ------------------------------------------------------------------------------ */

static const struct ir_val *
kw(struct ir_val kwargs, const char *name)
{
    return ir_map_get(kwargs, name, strlen(name));
}

static struct ir_val
make_error(const char *type, const char *message, struct ir_val bases)
{
    struct ir_val e;

    cr_assert_eq(ir_error_new(type, message, bases, ir_null(), &e), CN_OK);
    return e;
}

/* std.until's calls per key (each test runs in a process of its own). */
static struct {
    int64_t key, calls;
} until_calls[16];

void
t_until_reset(void)
{
    memset(until_calls, 0, sizeof(until_calls));
}

/* Runs an action. Returns true with *ev filled, or false when the action never answers. */
static bool
run_action(const struct rn_action_req *q, struct rn_event *ev)
{
    const char *a = q->action;
    const struct ir_val *v;

    ev->exec_id = q->exec_id;
    ev->attempt = q->attempt;
    ev->kind = RN_EV_RESULT;
    if (strcmp(a, "std.echo") == 0) {
        v = kw(q->kwargs, "value");
        ev->value = v ? ir_val_retain(*v) : ir_null();
    } else if (strcmp(a, "std.noop") == 0) {
        ev->value = ir_null();
    } else if (strcmp(a, "std.add") == 0) {
        ev->value = ir_int(kw(q->kwargs, "a")->u.i + kw(q->kwargs, "b")->u.i);
    } else if (strcmp(a, "std.flaky") == 0) {
        int64_t failures = kw(q->kwargs, "failures")->u.i;
        if ((int64_t) q->attempt <= failures) {
            char msg[64];
            (void) snprintf(msg, sizeof(msg), "attempt %u failed", q->attempt);
            ev->kind = RN_EV_ERROR;
            ev->value = make_error("FlakyError", msg, ir_null());
        } else {
            struct ir_val m;
            cr_assert_eq(ir_map_new(2, &m), CN_OK);
            cr_assert_eq(ir_map_set_cstr(&m, "key", ir_val_retain(*kw(q->kwargs, "key"))), CN_OK);
            cr_assert_eq(ir_map_set_cstr(&m, "attempt", ir_int(q->attempt)), CN_OK);
            ev->value = m;
        }
    } else if (strcmp(a, "std.fail") == 0) {
        const struct ir_val *t = kw(q->kwargs, "type"), *m = kw(q->kwargs, "message");
        const struct ir_val *b = kw(q->kwargs, "bases"), *r = kw(q->kwargs, "retryable");
        ev->kind = RN_EV_ERROR;
        ev->value = make_error(ir_str_data(*t), m ? ir_str_data(*m) : "",
                               b ? ir_val_retain(*b) : ir_null());
        if (r != NULL && r->type == IR_T_BOOL && !r->u.b) {
            cr_assert_eq(ir_error_set_final(&ev->value), CN_OK);
        }
    } else if (strcmp(a, "std.fail_if") == 0) {
        const struct ir_val *val = kw(q->kwargs, "value"), *bad = kw(q->kwargs, "bad");
        size_t i;
        ev->value = ir_val_retain(*val);
        for (i = 0; i < ir_list_len(*bad); i++) {
            if (ir_val_equal(ir_list_items(*bad)[i], *val)) {
                struct cn_buf b = CN_BUF_INIT;
                cr_assert_eq(ir_val_repr(*val, &b), CN_OK);
                ir_val_release(ev->value);
                ev->kind = RN_EV_ERROR;
                ev->value = make_error("BadValue", b.data, ir_null());
                cn_buf_fini(&b);
                break;
            }
        }
    } else if (strcmp(a, "std.until") == 0) {
        int64_t key = kw(q->kwargs, "key")->u.i, calls = 0;
        size_t i;
        for (i = 0; i < 16; i++) {
            if (until_calls[i].calls == 0 || until_calls[i].key == key) {
                until_calls[i].key = key;
                calls = ++until_calls[i].calls;
                break;
            }
        }
        cr_assert_neq(calls, 0, "std.until: too many keys");
        if (calls <= kw(q->kwargs, "failures")->u.i) {
            ev->kind = RN_EV_ERROR;
            ev->value = make_error("NotYet", "not yet", ir_null());
        } else {
            ev->value = ir_int(calls);
        }
    } else if (strcmp(a, "std.recall") == 0) {
        if ((int64_t) q->attempt <= kw(q->kwargs, "failures")->u.i) {
            char msg[64];
            (void) snprintf(msg, sizeof(msg), "attempt %u failed", q->attempt);
            ev->kind = RN_EV_ERROR;
            ev->value = make_error("FlakyError", msg, ir_null());
        } else if (q->prev_error.type == IR_T_NULL) {
            ev->value = ir_null();
        } else {
            const struct ir_val *m = ir_map_get(q->prev_error, "message", 7);
            ev->value = m != NULL ? ir_val_retain(*m) : ir_null();
        }
    } else if (strcmp(a, "std.hang") == 0) {
        return false;
    } else if (strcmp(a, "std.hash") == 0) {
        struct cn_buf j = CN_BUF_INIT;
        uint64_t h = 1469598103934665603ULL;
        int64_t it, n = kw(q->kwargs, "iterations")->u.i;
        size_t i;
        char hex[17];
        cr_assert_eq(ir_val_to_json(*kw(q->kwargs, "data"), &j, NULL), CN_OK);
        for (it = 0; it < n; it++) {
            for (i = 0; i < j.len; i++) {
                h = (h ^ (unsigned char) j.data[i]) * 1099511628211ULL;
            }
        }
        (void) snprintf(hex, sizeof(hex), "%016llx", (unsigned long long) h);
        cr_assert_eq(ir_str_from_cstr(hex, &ev->value), CN_OK);
        cn_buf_fini(&j);
    } else {
        ev->kind = RN_EV_ERROR;
        ev->value = make_error("UnknownAction", a, ir_null());
    }
    return true;
}

/* ---- the persister and the clock ----------------------------------------------------------- */

static bool
has_result(const struct world *w, struct rn_xid id, uint32_t attempt)
{
    size_t i;

    for (i = 0; i < w->results.len; i++) {
        if (w->results.items[i].attempt == attempt && rn_xid_eq(w->results.items[i].exec_id, id)) {
            return true;
        }
    }
    return false;
}

/* Takes what a step produced, in the persister's order: results, then the snapshot. */
static void
absorb(struct world *w, struct rn_step_out *o)
{
    size_t i;
    bool by_results =
        w->by_results && rn_steplog_take(&w->steps, o, w->evs, w->nevs, w->replay_max);

    for (i = 0; i < o->done.len; i++) {
        struct rn_done d = o->done.items[i];
        d.value = ir_val_retain(d.value);
        cr_assert_eq(CN_VEC_PUSH(&w->results, d), CN_OK);
    }
    w->evs = NULL;
    w->nevs = 0;
    /* As the shard writes them: a run that fails keeps its last running snapshot (redrive). */
    if (w->skip_first_snap) {
        w->skip_first_snap = false;
        w->r->first_unwritten = true;
    } else if (by_results) {
        w->r->by_results++;
    } else if (o->outcome == RN_RUNNING ? o->snapshot_needed : o->outcome == RN_COMPLETED) {
        w->state_step = w->steps.seq;
        rn_steplog_snapshot(&w->steps);
        cn_buf_clear(&w->snap);
        cr_assert_eq(rn_instance_snapshot(w->in, &w->snap), CN_OK);
        w->r->snapshots++;
        if (w->r->first_snapshot_bytes == 0) {
            w->r->first_snapshot_bytes = w->snap.len;
        }
        w->r->last_snapshot_bytes = w->snap.len;
        if (w->snap.len > w->r->max_snapshot_bytes) {
            w->r->max_snapshot_bytes = w->snap.len;
        }
    }
    for (i = 0; i < o->cancels.len; i++) {
        /* Before this step's requests, as the pool does: a cancelled attempt is not answered, nor
         * timed out later. */
        size_t k, kept = 0;
        w->r->cancels++;
        for (k = 0; k < w->pend.len; k++) {
            if (rn_xid_eq(w->pend.items[k].req.exec_id, o->cancels.items[i])) {
                ir_val_release(w->pend.items[k].req.kwargs);
                ir_val_release(w->pend.items[k].req.prev_error);
            } else {
                w->pend.items[kept++] = w->pend.items[k];
            }
        }
        w->pend.len = kept;
        kept = 0;
        for (k = 0; k < w->hung.len; k++) {
            if (!rn_xid_eq(w->hung.items[k].exec_id, o->cancels.items[i])) {
                w->hung.items[kept++] = w->hung.items[k];
            }
        }
        w->hung.len = kept;
    }
    for (i = 0; i < o->actions.len; i++) {
        struct pending p;
        w->r->dispatches++;
        if (has_result(w, o->actions.items[i].exec_id, o->actions.items[i].attempt)) {
            w->r->duplicate_done++;
        }
        p.req = o->actions.items[i];
        p.req.kwargs = ir_val_retain(p.req.kwargs);
        p.req.prev_error = ir_val_retain(p.req.prev_error);
        p.hang = false;
        p.started = w->now;
        cr_assert_eq(CN_VEC_PUSH(&w->pend, p), CN_OK);
    }
    for (i = 0; i < o->timers.len; i++) {
        const struct rn_timer *t = &o->timers.items[i];
        if (t->kind == RN_TIMER_BACKOFF && w->r->nbackoff < 64) {
            w->r->backoff_ms[w->r->nbackoff] = t->at_ms - w->now;
            w->r->nbackoff++;
        }
        cr_assert_eq(CN_VEC_PUSH(&w->timers, *t), CN_OK);
    }
    if (o->outcome != RN_RUNNING) {
        struct cn_buf b = CN_BUF_INIT;
        w->r->outcome = o->outcome;
        cr_assert_eq(ir_val_to_json(o->result, &b, NULL), CN_OK, "result is not JSON");
        w->r->json = strdup(b.data ? b.data : "null");
        if (o->outcome != RN_COMPLETED) {
            w->r->error_type = strdup(ir_error_type(o->result));
        }
        cn_buf_fini(&b);
    }
    rn_step_out_clear(o);
}

static void
drop_pending(struct world *w)
{
    size_t i;

    for (i = 0; i < w->pend.len; i++) {
        ir_val_release(w->pend.items[i].req.kwargs);
        ir_val_release(w->pend.items[i].req.prev_error);
    }
    w->pend.len = 0;
    w->timers.len = 0;
    w->hung.len = 0;
}

/* Resumes from what was written, as a runner claiming the instance does (shard.c on_new). */
static cn_err
resume(struct world *w, bool redrive, struct rn_step_out *o, struct cn_errmsg *em)
{
    struct rn_resume r;

    memset(&r, 0, sizeof(r));
    r.snap = w->snap.len > 0 ? w->snap.data : NULL;
    r.len = w->snap.len;
    r.instance_id = w->iid;
    r.input = w->input;
    r.state_step = w->state_step;
    r.results = w->results.items;
    r.nresults = w->results.len;
    r.redrive = redrive;
    rn_steplog_resumed(&w->steps, w->state_step, w->results.items, w->results.len);
    w->r->replayed += w->steps.unsnapped > 0;
    return rn_instance_resume(w->dag, &r, &w->cfg, w->now, &w->in, o, em);
}

static void
crash(struct world *w, struct rn_step_out *o)
{
    struct rn_instance_stats st;
    struct cn_errmsg em = {{0}};
    cn_err rv;

    rn_instance_stats(w->in, &st);
    w->r->stale += (int) st.stale_events;
    rn_instance_free(w->in);
    w->in = NULL;
    drop_pending(w); /* in-flight dispatches and timers die with the runner */
    cr_assert(w->snap.len > 0 || w->r->first_unwritten,
              "a crash with no snapshot and a written first step");
    w->now += w->crash_takes_ms;
    rv = resume(w, false, o, &em);
    cr_assert_eq(rv, CN_OK, "hydrate failed: %s (%s)", cn_errname(rv), em.text);
    w->r->crashes++;
    absorb(w, o);
}

static void
crash_or_pause(struct world *w, struct rn_step_out *o, bool pause)
{
    if (pause) {
        w->now += w->crash_takes_ms;
    } else {
        crash(w, o);
    }
}

/* Appends an event of kind for exec_id (all else zero) to evs; returns it for the rest. */
static struct rn_event *
push_event(struct events *evs, enum rn_event_kind kind, struct rn_xid exec_id)
{
    struct rn_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.kind = kind;
    ev.exec_id = exec_id;
    cr_assert_eq(CN_VEC_PUSH(evs, ev), CN_OK);
    return &evs->items[evs->len - 1];
}

/* When no action was answered this step: moves the clock to the earliest timer or pool timeout
 * and appends the events of those now due (take: the pending actions taken this step). */
static void
fire_due(struct world *w, struct events *evs, size_t take)
{
    int64_t next = INT64_MAX;
    size_t kept = 0, k;

    for (k = 0; k < w->timers.len; k++) {
        if (w->timers.items[k].at_ms < next) {
            next = w->timers.items[k].at_ms;
        }
    }
    for (k = 0; k < w->hung.len; k++) {
        if (w->hung.items[k].at < next) {
            next = w->hung.items[k].at;
        }
    }
    cr_assert(next != INT64_MAX || take > 0, "stuck: no pending action and no timer");
    if (next != INT64_MAX && next > w->now) {
        w->now = next;
    }
    for (k = 0; k < w->timers.len; k++) {
        struct rn_timer *t = &w->timers.items[k];
        if (t->at_ms <= w->now) {
            (void) push_event(evs, RN_EV_TIMER, t->exec_id);
        } else {
            w->timers.items[kept++] = *t;
        }
    }
    w->timers.len = kept;
    kept = 0;
    for (k = 0; k < w->hung.len; k++) { /* the pool's timeouts */
        struct hung *h = &w->hung.items[k];
        if (h->at <= w->now) {
            struct rn_event *ev = push_event(evs, RN_EV_ERROR, h->exec_id);
            ev->attempt = h->attempt;
            cr_assert_eq(rn_error_new(RN_ERR_ACTION_TIMEOUT,
                                      "the attempt did not finish before its deadline", &ev->value),
                         CN_OK);
        } else {
            w->hung.items[kept++] = *h;
        }
    }
    w->hung.len = kept;
}

struct t_result
t_run(const char *src, const char *input_json, const struct t_opts *opts)
{
    struct t_result r;
    struct world w;
    struct t_compiled c = t_compile(src);
    struct rn_step_out o;
    struct ir_val input;
    struct cn_errmsg em = {{0}};
    struct rn_iid iid;
    int max_steps = opts->max_steps ? opts->max_steps : 100000;
    struct cn_buf echoed = CN_BUF_INIT;
    size_t i;

    memset(&r, 0, sizeof(r));
    memset(&w, 0, sizeof(w));
    memset(&o, 0, sizeof(o));
    o.result = ir_null();
    cr_assert_eq(c.rv, CN_OK, "compile failed:\n%s", c.errors);
    cr_assert_eq(ir_val_from_json(input_json, strlen(input_json), &input, &em), CN_OK, "input: %s",
                 em.text);
    w.dag = c.dag;
    w.by_results = opts->steps_by_results;
    w.crash_takes_ms = opts->crash_takes_ms;
    w.replay_max = opts->replay_max ? opts->replay_max : RN_STEPLOG_REPLAY_MAX;
    w.cfg.default_timeout_ms = opts->default_timeout_ms ? opts->default_timeout_ms : 60000;
    w.cfg.max_inline_steps = opts->max_inline_steps;
    w.cfg.cleanup_timeout_ms = opts->cleanup_timeout_ms;
    w.now = T_START_MS;
    w.r = &r;
    for (i = 0; i < 16; i++) {
        iid.b[i] = (uint8_t) (i * 17 + 3);
    }
    cr_assert_eq(rn_instance_start(w.dag, iid, input, &w.cfg, w.now, &w.in, &o), CN_OK);
    w.iid = iid;
    w.input = input;
    if (opts->first_step_by_claim && o.outcome == RN_RUNNING && !o.timed && o.done.len == 0) {
        size_t k;
        w.skip_first_snap = true;
        for (k = 0; k < o.actions.len; k++) {
            w.skip_first_snap = w.skip_first_snap && o.actions.items[k].call == IR_CALL_ACTION;
        }
    }
    absorb(&w, &o);
    if (opts->crash_after_start && r.outcome == RN_RUNNING) {
        crash_or_pause(&w, &o, opts->crash_is_pause);
    }
    while (r.outcome == RN_RUNNING) {
        struct events evs = {NULL, 0, 0};
        struct rn_instance_stats st;
        size_t take, k;

        cr_assert_lt(r.steps, max_steps, "workflow did not finish in %d steps", max_steps);
        /* Answer pending actions (all, or one), else fire the earliest timers; or interrupt. */
        take = opts->one_at_a_time && w.pend.len > 0 ? 1 : w.pend.len;
        if (r.steps > 0 &&
            (r.steps == opts->interrupt_after_step || r.steps == opts->force_after_step ||
             r.steps == opts->again_after_step)) {
            struct rn_event *ev = push_event(
                &evs,
                opts->interrupt != 0 && r.steps != opts->force_after_step ? opts->interrupt
                                                                          : RN_EV_CANCEL,
                (struct rn_xid){{0}});
            ev->force = r.steps == opts->force_after_step;
            cr_assert_eq(ir_str_from_cstr("stop", &ev->value), CN_OK);
            take = 0;
        }
        for (k = 0; k < take; k++) {
            struct rn_event ev;
            memset(&ev, 0, sizeof(ev));
            if (run_action(&w.pend.items[k].req, &ev)) {
                if (strcmp(w.pend.items[k].req.action, "std.echo") == 0) {
                    if (echoed.len > 0) {
                        cr_assert_eq(cn_buf_putc(&echoed, ','), CN_OK);
                    }
                    cr_assert_eq(ir_val_to_json(ev.value, &echoed, NULL), CN_OK);
                }
                cr_assert_eq(CN_VEC_PUSH(&evs, ev), CN_OK);
            } else if (w.pend.items[k].req.timeout_ms > 0 || w.pend.items[k].req.deadline_ms > 0) {
                const struct pending *pk = &w.pend.items[k];
                struct hung h;
                h.exec_id = pk->req.exec_id;
                h.attempt = pk->req.attempt;
                h.at = pk->req.timeout_ms > 0 ? pk->started + pk->req.timeout_ms : INT64_MAX;
                if (pk->req.deadline_ms > 0 && pk->req.deadline_ms < h.at) {
                    h.at = pk->req.deadline_ms;
                }
                cr_assert_eq(CN_VEC_PUSH(&w.hung, h), CN_OK);
            }
            ir_val_release(w.pend.items[k].req.kwargs);
            ir_val_release(w.pend.items[k].req.prev_error);
        }
        if (take > 0) {
            memmove(w.pend.items, w.pend.items + take, (w.pend.len - take) * sizeof(*w.pend.items));
            w.pend.len -= take;
        }
        if (evs.len == 0) {
            fire_due(&w, &evs, take);
        }
        w.now += 1; /* every step takes a little time */
        cr_assert_eq(rn_instance_step(w.in, evs.items, evs.len, w.now, &o), CN_OK);
        r.steps++;
        rn_instance_stats(w.in, &st);
        if (st.live_nodes > r.max_live_nodes) {
            r.max_live_nodes = st.live_nodes;
        }
        w.evs = evs.items;
        w.nevs = evs.len;
        absorb(&w, &o);
        for (k = 0; k < evs.len; k++) {
            ir_val_release(evs.items[k].value);
        }
        free(evs.items);
        if (r.outcome == RN_RUNNING &&
            (opts->crash_every_step || opts->crash_after_step == r.steps)) {
            crash_or_pause(&w, &o, opts->crash_is_pause);
        }
        if ((r.outcome == RN_FAILED || r.outcome == RN_CANCELLED || r.outcome == RN_TIMED_OUT) &&
            r.redrives < opts->redrives) {
            /* cairn.retry: the instance is claimed again and redriven from its last running
             * snapshot and every result recorded so far. */
            cn_err rv;
            cr_assert(w.snap.len > 0 || r.first_unwritten, "nothing to redrive from");
            rn_instance_stats(w.in, &st);
            r.stale += (int) st.stale_events;
            rn_instance_free(w.in);
            w.in = NULL;
            drop_pending(&w);
            free(r.json);
            free(r.error_type);
            r.json = r.error_type = NULL;
            r.outcome = RN_RUNNING;
            r.redrives++;
            rv = resume(&w, true, &o, &em);
            cr_assert_eq(rv, CN_OK, "redrive failed: %s (%s)", cn_errname(rv), em.text);
            absorb(&w, &o);
        }
    }
    {
        struct rn_instance_stats st;
        rn_instance_stats(w.in, &st);
        r.stale += (int) st.stale_events;
    }
    r.elapsed_ms = w.now - T_START_MS;
    r.echoed = strdup(echoed.data != NULL ? echoed.data : "");
    cn_buf_fini(&echoed);
    drop_pending(&w);
    free(w.pend.items);
    free(w.timers.items);
    free(w.hung.items);
    for (i = 0; i < w.results.len; i++) {
        ir_val_release(w.results.items[i].value);
    }
    free(w.results.items);
    ir_val_release(w.input);
    cn_buf_fini(&w.snap);
    rn_instance_free(w.in);
    rn_step_out_fini(&o);
    t_compiled_free(&c);
    return r;
}

void
t_result_free(struct t_result *r)
{
    free(r->json);
    free(r->error_type);
    free(r->echoed);
    memset(r, 0, sizeof(*r));
}
