/* SPDX-License-Identifier: MIT */
/* The shard core (see shard.h for the contract: commit barrier, held events, stale ACKs). */
#include "runner/core/shard.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/log.h"
#include "ir/base/uuid.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "runner/core/timerheap.h"
#include "runner/engine/defaults.h"
#include "runner/exec/errors.h"
#include "runner/exec/idmap.h"

/* An instance's life in the shard (shard.h, THE COMMIT BARRIER):
 *
 *     RUNNING --a write--> WRITING --its ACK, still running--> RUNNING
 *        |                    `--its ACK: the outcome committed, or lost, or failed--> (gone)
 *        `--a hand-back (long sleep, a wait for children only)--> HANDING_BACK --ACK--> (gone)
 *
 * While WRITING or HANDING_BACK the actions and timers of the output being written wait in
 * `held` and events that arrive wait in `waiting` (the commit barrier). inst_move makes every
 * change and asserts it is one of these. */
enum inst_state { INST_RUNNING = 0, INST_WRITING, INST_HANDING_BACK, INST_STATES_ };

static const unsigned inst_moves[INST_STATES_] = {
    [INST_RUNNING] = 1u << INST_WRITING | 1u << INST_HANDING_BACK,
    [INST_WRITING] = 1u << INST_RUNNING,
    [INST_HANDING_BACK] = 0, /* its ACK removes it */
};

struct inst {
    struct rn_iid id;
    struct rn_token lock;
    char *workflow;
    const struct ir_dag *dag;
    struct rn_instance *ex;
    enum inst_state state;   /* its life here (below) */
    struct rn_step_out held; /* the output whose write is in flight */
    int64_t held_us;         /* when held was produced (monotonic µs): its actions' ready time */
    struct {
        struct rn_event *items; /* events that came while writing (values retained) */
        size_t len, cap;
    } waiting;
    struct {
        struct rn_event *items; /* results that came after the outcome, until it commits */
        size_t len, cap;
    } late;
    size_t inflight;             /* actions dispatched and not reported back (approximate) */
    bool counted;                /* bookkeeping: counted in shard->busy (busy_sync) */
    int64_t claimed_mono_us;     /* when claimed, until the first dispatch (then 0) */
    int64_t deadline_ms;         /* the workflow's deadline (wall clock); 0: none */
    int64_t timeout_ms;          /* the timeout it comes from (for the error message) */
    uint32_t slot;               /* index in shard->insts */
    struct rn_child_link parent; /* a child instance: the call its outcome answers */
    int64_t active_ms;           /* wall clock of the last event applied (child-wait hand-back) */
    bool idle_armed;             /* bookkeeping: a child-wait check is in the timer heap */
    struct rn_steplog steps;     /* which steps its results alone record (handle_output) */
};

/* Whether the table allows from -> to. */
static inline bool
inst_move_ok(unsigned from, unsigned to)
{
    return from < INST_STATES_ && to < INST_STATES_ && (inst_moves[from] >> to & 1u);
}

static void
inst_move(struct inst *in, enum inst_state to)
{
    assert(inst_move_ok(in->state, to));
    in->state = to;
}

static bool
inst_writing(const struct inst *in)
{
    return in->state != INST_RUNNING;
}

/* The timer entry of a child-wait check (an execution id no executor makes: version nibble 0). */
static const struct rn_xid idle_check = {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};

/* A parent handed back while it waits only for children is claimed again after this long even
 * if no child wakes it: a bound on what a wake-up lost to a crash could cost. */
#define RN_SHARD_CHILD_WAIT_RECHECK_MS (24LL * 3600 * 1000)

/* Instances this shard finished lately, whose attempts' outcomes may still come back (a cancel
 * stops an attempt, the worker answers later): theirs are recorded as late results. Only
 * those: an instance that left otherwise (lost, handed back) is not this runner's to write for.
 * A ring of the last RN_SHARD_FINISHED_KEEP. */
#define RN_SHARD_FINISHED_KEEP 4096

struct rn_shard {
    struct rn_shard_cfg cfg;
    struct rn_iid finished[RN_SHARD_FINISHED_KEEP];
    size_t nfinished; /* ever added: the next slot is nfinished % KEEP */
    struct rn_iidmap finished_ix;
    struct {
        struct inst **items;
        size_t len, cap;
    } insts;
    struct rn_iidmap byid;
    struct rn_timerheap timers;
    struct rn_step_out step; /* scratch output of the executor */
    size_t busy;             /* instances writing or with actions in flight */
    struct rn_lathist claim_lat;
};

static void
lease_op(struct rn_shard_out *o, bool take, const struct inst *in)
{
    struct rn_lease_op op;

    op.take = take;
    op.iid = in->id;
    op.lock = in->lock;
    CN_VEC_XPUSH(&o->leases, op);
}

/* ---- instances ---------------------------------------------------------------------------- */

static struct inst *
inst_find(const struct rn_shard *sh, struct rn_iid iid)
{
    uint32_t i;

    return rn_iidmap_get(&sh->byid, iid, &i) ? sh->insts.items[i] : NULL;
}

/* Keeps sh->busy in step with the instance's state; in->counted says whether it is counted. */
static void
busy_sync(struct rn_shard *sh, struct inst *in)
{
    bool now = inst_writing(in) || in->inflight > 0;

    if (now && !in->counted) {
        sh->busy++;
    } else if (!now && in->counted) {
        sh->busy--;
    }
    in->counted = now;
}

static void
idmap_xput(struct rn_iidmap *m, struct rn_iid key, uint32_t val)
{
    if (rn_iidmap_put(m, key, val) != CN_OK) {
        cn_oom("shard instance map");
    }
}

static void
inst_free(struct inst *in)
{
    size_t k;

    rn_instance_free(in->ex);
    rn_step_out_fini(&in->held);
    for (k = 0; k < in->waiting.len; k++) {
        ir_val_release(in->waiting.items[k].value);
    }
    free(in->waiting.items);
    for (k = 0; k < in->late.len; k++) {
        ir_val_release(in->late.items[k].value);
    }
    free(in->late.items);
    free(in->workflow);
    free(in);
}

/* An instance this large (execution nodes live at its peak) leaves megabytes of free heap behind
 * when it goes: a fan-out of 2 000 000 actions left the runner at 1.17 GB after it completed (1.68
 * GB at its peak), as glibc keeps freed memory for reuse. Past this size the shard thread asks for
 * it to be returned (malloc_trim), which costs a few milliseconds and happens rarely. */
#define RN_SHARD_LARGE_NODES 10000

/* An instance leaves without finishing: none of its attempts may run here any more. */
static void
withdraw(struct rn_shard_out *out, const struct inst *in)
{
    struct rn_lease l;

    l.instance_id = in->id;
    l.lock = in->lock;
    CN_VEC_XPUSH(&out->withdrawals, l);
}

/* Forgets an instance (finished, evicted, lost or handed back); out may be NULL when the
 * runner is gone and nothing is carried out any more. */
static void
inst_remove(struct rn_shard *sh, struct inst *in, struct rn_shard_out *out)
{
    uint32_t slot = in->slot;
    size_t last = sh->insts.len - 1;

    if (in->counted) {
        sh->busy--;
    }
    if (out != NULL) {
        struct rn_instance_stats st;

        lease_op(out, false, in);
        out->removed++;
        if (in->ex != NULL) {
            rn_instance_stats(in->ex, &st);
            out->large_freed |= st.node_slots >= RN_SHARD_LARGE_NODES;
        }
    }
    rn_iidmap_del(&sh->byid, in->id);
    if (slot != last) {
        sh->insts.items[slot] = sh->insts.items[last];
        sh->insts.items[slot]->slot = slot;
        idmap_xput(&sh->byid, sh->insts.items[slot]->id, slot);
    }
    sh->insts.len--;
    inst_free(in);
}

static void
log_instance(enum cn_log_level level, const struct inst *in, const char *what)
{
    char id[37];

    cn_uuid_format(in->id.b, id);
    {
        const struct cn_log_field f[] = {{"instance", id}, {"workflow", in->workflow}};
        cn_log_fields(level, f, 2, "instance %s: %s", id, what);
    }
}

/* Hands the output's actions to the caller for dispatch and arms its timers; ready_us is when
 * the step made the actions ready (the pool measures from there to the dispatch). */
static void
release_output(struct rn_shard *sh, struct inst *in, const struct rn_step_out *o, int64_t ready_us,
               struct cn_now now, struct rn_shard_out *out)
{
    size_t i;

    for (i = 0; i < o->cancels.len; i++) {
        CN_VEC_XPUSH(&out->cancels, o->cancels.items[i]);
    }
    if (o->actions.len > 0 && in->claimed_mono_us != 0) {
        rn_lathist_add(&sh->claim_lat, now.mono_us - in->claimed_mono_us);
        in->claimed_mono_us = 0;
    }
    for (i = 0; i < o->actions.len; i++) {
        const struct rn_action_req *a = &o->actions.items[i];
        struct rn_pool_dispatch d;

        d.instance_id = in->id;
        d.lock = in->lock;
        d.exec_id = a->exec_id;
        d.attempt = a->attempt;
        d.action = a->action;
        d.kwargs = ir_val_retain(a->kwargs);
        d.prev_error = ir_val_retain(a->prev_error);
        d.timeout_ms = a->timeout_ms;
        d.deadline_ms = a->deadline_ms;
        d.ready_us = ready_us;
        CN_VEC_XPUSH(&out->dispatches, d);
        in->inflight++;
    }
    for (i = 0; i < o->timers.len; i++) {
        struct rn_timer_ent t;

        t.at_wall_ms = o->timers.items[i].at_ms;
        t.iid = in->id;
        t.exec_id = o->timers.items[i].exec_id;
        rn_timerheap_push(&sh->timers, &t);
    }
}

/* Starts a write of instance in (one that hands it back: hand_back); the instance is WRITING or
 * HANDING_BACK until its ACK. */
static void
write_begin(struct rn_shard *sh, struct inst *in, struct rn_wreq *q, struct rn_shard_out *out,
            bool hand_back)
{
    inst_move(in, hand_back ? INST_HANDING_BACK : INST_WRITING);
    busy_sync(sh, in);
    CN_VEC_XPUSH(&out->writes, q);
}

/* A finishing child's write (q->w.outcome and result set) carries its outcome for its parent:
 * every way an instance ends, or its parent would wait for ever. */
static void
child_answer(const struct inst *in, struct rn_wreq *q)
{
    if (!in->parent.has) {
        return;
    }
    q->w.parent = in->parent;
    if (rn_child_outcome(q->w.outcome, q->w.result, in->id, in->workflow, &q->w.parent_ok,
                         &q->w.parent_value) != CN_OK) {
        cn_oom("child outcome");
    }
}

/* Whether o holds requests that storage answers (child calls, waits), waits to withdraw or
 * values published: they ride in a write. */
static bool
rides_in_write(const struct rn_step_out *o)
{
    size_t k;

    for (k = 0; k < o->actions.len; k++) {
        if (o->actions.items[k].call != IR_CALL_ACTION) {
            return true;
        }
    }
    return o->wait_drops.len > 0 || o->published.len > 0;
}

/* A duration for people, in its largest exact unit (3d, 90m, 1500ms). */
static void
fmt_duration(int64_t ms, char *buf, size_t len)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
    size_t k = 0;

    while (k + 1 < sizeof(units) / sizeof(units[0]) && ms % units[k].ms != 0) {
        k++;
    }
    (void) snprintf(buf, len, "%lld%s", (long long) (ms / units[k].ms), units[k].unit);
}

/* What wait request a answers on timeout, into w: its [default: v] (with several signal names
 * [None, v], as a signal would be [name, payload]), else a WaitTimeout. */
static void
wait_timeout_value(const struct rn_action_req *a, struct rn_wait *w)
{
    const struct ir_val *d = ir_map_get(a->kwargs, "default", 7);
    char msg[IR_MAX_WAIT_NAME * 2 + 96], dur[32];

    if (d != NULL) {
        w->timeout_ok = true;
        if (a->call == IR_CALL_WAIT && strchr(a->action, ',') != NULL) {
            if (ir_list_new(2, &w->timeout_value) != CN_OK) {
                cn_oom("wait default");
            }
            ir_list_items(w->timeout_value)[1] = ir_val_retain(*d);
        } else {
            w->timeout_value = ir_val_retain(*d);
        }
        return;
    }
    fmt_duration(a->timeout_ms, dur, sizeof(dur));
    if (a->call == IR_CALL_EVENT) {
        (void) snprintf(msg, sizeof(msg), "no event %s with key %.*s came within %s", a->action,
                        IR_MAX_WAIT_NAME, w->key, dur);
    } else {
        (void) snprintf(msg, sizeof(msg), "no signal %s came within %s", a->action, dur);
    }
    if (rn_error_new(RN_ERR_WAIT_TIMEOUT, msg, &w->timeout_value) != CN_OK &&
        rn_error_new(RN_ERR_WAIT_TIMEOUT, "the wait timed out", &w->timeout_value) != CN_OK) {
        cn_oom("WaitTimeout");
    }
}

/* Moves the values o published into write q, which stores them with the step. */
static void
take_published(struct rn_step_out *o, struct rn_wreq *q)
{
    if (o->published.len == 0) {
        return;
    }
    q->published = cn_xcalloc(o->published.len, sizeof(*q->published));
    memcpy(q->published, o->published.items, o->published.len * sizeof(*q->published));
    q->npublished = o->published.len;
    o->published.len = 0; /* the values are q's now */
    q->w.published = q->published;
    q->w.npublished = q->npublished;
}

/* Moves the waits among o's requests, and the waits o withdraws, into write q: storage
 * registers, answers or withdraws them in the write that records the step. */
static void
take_waits(struct rn_step_out *o, struct rn_wreq *q)
{
    size_t k, kept = 0, n = o->wait_drops.len;

    for (k = 0; k < o->actions.len; k++) {
        n += ir_call_is_wait(o->actions.items[k].call);
    }
    if (n == 0) {
        return;
    }
    q->waits = cn_xcalloc(n, sizeof(*q->waits));
    for (k = 0; k < o->wait_drops.len; k++) {
        struct rn_wait *w = &q->waits[q->nwaits++];
        w->exec_id = o->wait_drops.items[k].exec_id;
        w->attempt = o->wait_drops.items[k].attempt;
        w->drop = true;
        w->names = "";
    }
    for (k = 0; k < o->actions.len; k++) {
        struct rn_action_req *a = &o->actions.items[k];
        const struct ir_val *key;
        struct rn_wait *w;

        if (!ir_call_is_wait(a->call)) {
            o->actions.items[kept++] = *a;
            continue;
        }
        w = &q->waits[q->nwaits++];
        w->exec_id = a->exec_id;
        w->attempt = a->attempt;
        w->event = a->call == IR_CALL_EVENT;
        w->expire = a->expire;
        w->names = a->action; /* the template outlives the write */
        key = ir_map_get(a->kwargs, "key", 3);
        if (w->event) {
            /* a str: the executor made an int one and raised for anything else */
            w->key = cn_xstrdup(key != NULL && key->type == IR_T_STR ? ir_str_data(*key) : "");
        }
        w->timeout_ms = a->timeout_ms;
        w->timeout_at_ms = a->deadline_ms;
        if (a->timeout_ms > 0) {
            wait_timeout_value(a, w);
        }
        ir_val_release(a->kwargs);
        ir_val_release(a->prev_error);
    }
    o->actions.len = kept;
    q->w.waits = q->waits;
    q->w.nwaits = q->nwaits;
}

/* Moves the child calls among o's requests into write q: they are started by the write that
 * records them, not dispatched. */
static void
take_children(struct rn_shard *sh, struct rn_step_out *o, struct rn_wreq *q)
{
    size_t k, kept = 0, n = 0;

    for (k = 0; k < o->actions.len; k++) {
        n += ir_call_is_child(o->actions.items[k].call);
    }
    if (n == 0) {
        return;
    }
    q->children = cn_xcalloc(n, sizeof(*q->children));
    for (k = 0; k < o->actions.len; k++) {
        struct rn_action_req *a = &o->actions.items[k];
        struct rn_child_start *c;

        if (!ir_call_is_child(a->call)) {
            o->actions.items[kept++] = *a;
            continue;
        }
        c = &q->children[q->nchildren++];
        c->child_id = rn_child_id(a->exec_id, a->attempt);
        c->exec_id = a->exec_id;
        c->attempt = a->attempt;
        c->workflow = a->action; /* the template outlives the write */
        c->version = a->version;
        c->input = a->kwargs; /* moved */
        c->timeout_ms = a->timeout_ms;
        c->detached = a->call == IR_CALL_START;
        ir_val_release(a->prev_error);
    }
    o->actions.len = kept;
    q->w.children = q->children;
    q->w.nchildren = q->nchildren;
    q->w.max_child_depth = sh->cfg.max_child_depth;
}

/* Moves the signals among o's requests into write q: storage sends them in the write that
 * records them (the executor checked that `to` is an instance id and the payload JSON). */
static void
take_sends(struct rn_step_out *o, struct rn_wreq *q)
{
    size_t k, kept = 0, n = 0;

    for (k = 0; k < o->actions.len; k++) {
        n += ir_call_is_send(o->actions.items[k].call);
    }
    if (n == 0) {
        return;
    }
    q->sends = cn_xcalloc(n, sizeof(*q->sends));
    for (k = 0; k < o->actions.len; k++) {
        struct rn_action_req *a = &o->actions.items[k];
        const struct ir_val *to = ir_map_get(a->kwargs, "to", 2);
        const struct ir_val *payload = ir_map_get(a->kwargs, "payload", 7);
        struct rn_send *s;

        if (!ir_call_is_send(a->call)) {
            o->actions.items[kept++] = *a;
            continue;
        }
        s = &q->sends[q->nsends++];
        s->exec_id = a->exec_id;
        s->attempt = a->attempt;
        s->name = a->action; /* the template outlives the write */
        if (to == NULL || to->type != IR_T_STR || !cn_uuid_parse(ir_str_data(*to), s->to.b)) {
            memset(s->to.b, 0, sizeof(s->to.b)); /* not reached: the executor raised */
        }
        s->payload = payload != NULL ? ir_val_retain(*payload) : ir_null();
        ir_val_release(a->kwargs);
        ir_val_release(a->prev_error);
    }
    o->actions.len = kept;
    q->w.sends = q->sends;
    q->w.nsends = q->nsends;
}

/* Moves the waits for started children among o's requests into write q: storage attaches or
 * answers them in the write that records them (the executor checked that `child` is an id). */
static void
take_joins(struct rn_step_out *o, struct rn_wreq *q)
{
    size_t k, kept = 0, n = 0;

    for (k = 0; k < o->actions.len; k++) {
        n += o->actions.items[k].call == IR_CALL_JOIN;
    }
    if (n == 0) {
        return;
    }
    q->joins = cn_xcalloc(n, sizeof(*q->joins));
    for (k = 0; k < o->actions.len; k++) {
        struct rn_action_req *a = &o->actions.items[k];
        const struct ir_val *child = ir_map_get(a->kwargs, "child", 5);
        struct rn_join *j;

        if (a->call != IR_CALL_JOIN) {
            o->actions.items[kept++] = *a;
            continue;
        }
        j = &q->joins[q->njoins++];
        j->exec_id = a->exec_id;
        j->attempt = a->attempt;
        j->value = ir_null();
        if (child == NULL || child->type != IR_T_STR ||
            !cn_uuid_parse(ir_str_data(*child), j->child.b)) {
            memset(j->child.b, 0, sizeof(j->child.b)); /* not reached: the executor raised */
        }
        ir_val_release(a->kwargs);
        ir_val_release(a->prev_error);
    }
    o->actions.len = kept;
    q->w.joins = q->joins;
    q->w.njoins = q->njoins;
}

/* Acts on the output of a step (in sh->step): writes what must be durable, holding actions and
 * timers until it commits; releases at once what needs no write. */
static void
handle_output(struct rn_shard *sh, struct inst *in, const struct rn_event *evs, size_t nevs,
              bool first_step, struct cn_now now, struct rn_shard_out *out)
{
    struct rn_step_out *o = &sh->step;
    struct rn_wreq *q;
    size_t k;
    /* A new instance's first step that read no clock is recorded by the claim that took it: the
     * claim committed the instance as started (started_at), and the step is a function of its
     * id and input alone, so a runner that claims it next recomputes the snapshot this step
     * would write (rn_instance_resume) and hydrates it with the results recorded
     * meanwhile. Its actions go out without that write: one commit and one row version less
     * per instance (bench/HISTORY.md, "The first step recorded by the claim"). */
    bool claim_records = first_step && !o->timed;
    /* Likewise a later step that read no clock and consumed only results of its own actions
     * (rn_steplog), each one event applied alone (the executor promises a batch behaves so):
     * the state after it is a function of the state before it and those results. Its write
     * records them, each numbered as a step, and no snapshot; a runner that resumes the
     * instance replays them from the last snapshot (rn_instance_resume). One row version and
     * two fifths of the WAL less per step of a sequence (bench/HISTORY.md, "Steps recorded by
     * their results"). */
    bool by_results = rn_steplog_take(&in->steps, o, evs, nevs, RN_STEPLOG_REPLAY_MAX);

    if (o->done.len == 0 && (!o->snapshot_needed || claim_records) && o->outcome == RN_RUNNING &&
        !rides_in_write(o)) {
        release_output(sh, in, o, now.mono_us, now, out);
        rn_step_out_clear(o);
        busy_sync(sh, in);
        return;
    }
    q = rn_wreq_new(sh->cfg.index, in->id, in->lock);
    if (o->done.len > 0) {
        q->done = cn_xcalloc(o->done.len, sizeof(*q->done));
        for (k = 0; k < o->done.len; k++) {
            q->done[k] = o->done.items[k];
            q->done[k].value = ir_val_retain(o->done.items[k].value);
        }
        q->ndone = o->done.len;
        q->w.done = q->done;
        q->w.ndone = q->ndone;
    }
    /* A step recorded by its results (q->done copied their numbers) writes no snapshot. */
    if (!by_results &&
        (o->outcome == RN_RUNNING ? o->snapshot_needed : o->outcome == RN_COMPLETED)) {
        /* A run that fails, is cancelled or times out keeps its last running snapshot: a
         * redrive (cairn.retry) resumes from it, and replays the steps recorded after it. The
         * final one (no live nodes) would leave nothing to run. */
        if (rn_instance_snapshot(in->ex, &q->state) != CN_OK) {
            cn_oom("instance snapshot");
        }
        q->w.state = q->state.data;
        q->w.state_len = q->state.len;
        q->w.state_step = in->steps.seq;
        q->w.cleanup_until_ms = o->cleanup_until_ms;
        rn_steplog_snapshot(&in->steps);
    }
    q->w.outcome = o->outcome;
    if (o->outcome != RN_RUNNING) {
        q->w.result = ir_val_retain(o->result);
        child_answer(in, q);
    } else {
        take_children(sh, o, q);
        take_sends(o, q);
        take_joins(o, q);
    }
    take_waits(o, q); /* an instance that ends withdraws its waits */
    take_published(o, q);
    /* Hold the rest until the write commits. */
    rn_step_out_fini(&in->held);
    in->held = *o;
    in->held_us = now.mono_us;
    memset(o, 0, sizeof(*o));
    write_begin(sh, in, q, out, false);
}

static void
remember_finished(struct rn_shard *sh, struct rn_iid iid)
{
    size_t slot = sh->nfinished % RN_SHARD_FINISHED_KEEP;

    if (sh->nfinished >= RN_SHARD_FINISHED_KEEP) {
        rn_iidmap_del(&sh->finished_ix, sh->finished[slot]);
    }
    sh->finished[slot] = iid;
    idmap_xput(&sh->finished_ix, iid, (uint32_t) slot);
    sh->nfinished++;
}

/* Keeps a result that came after the instance's outcome, to record once the outcome commits. */
static void
keep_late(struct inst *in, const struct rn_event *ev)
{
    struct rn_event e = *ev;

    if (ev->kind != RN_EV_RESULT && ev->kind != RN_EV_ERROR) {
        return;
    }
    e.value = ir_val_retain(ev->value);
    CN_VEC_XPUSH(&in->late, e);
}

/* Hands a late result (its value borrowed) to the caller, to record. */
static void
out_late(struct rn_shard_out *out, struct rn_iid iid, const struct rn_event *ev)
{
    struct rn_late_result l;

    memset(&l, 0, sizeof(l));
    l.instance_id = iid;
    l.d.exec_id = ev->exec_id;
    l.d.attempt = ev->attempt;
    l.d.ok = ev->kind == RN_EV_RESULT;
    l.d.value = ir_val_retain(ev->value);
    CN_VEC_XPUSH(&out->late, l);
}

/* Applies events to an instance now, or queues them while its write is in flight. */
static void
step_events(struct rn_shard *sh, struct inst *in, const struct rn_event *evs, size_t n,
            struct cn_now now, struct rn_shard_out *out)
{
    size_t k;

    if (inst_writing(in)) {
        for (k = 0; k < n; k++) {
            struct rn_event ev = evs[k];

            ev.value = ir_val_retain(evs[k].value);
            CN_VEC_XPUSH(&in->waiting, ev);
        }
        return;
    }
    in->active_ms = now.wall_ms;
    /* One at a time into the same output (the executor promises a batch behaves so): the
     * results after the event that ended the instance are kept as late ones. */
    for (k = 0; k < n && rn_instance_outcome(in->ex) == RN_RUNNING; k++) {
        if (rn_instance_step(in->ex, &evs[k], 1, now.wall_ms, &sh->step) != CN_OK) {
            cn_oom("instance step");
        }
    }
    for (; k < n; k++) {
        keep_late(in, &evs[k]);
    }
    handle_output(sh, in, evs, n, false, now, out);
}

/* Fails an instance that cannot resume (its snapshot does not decode or fit its version):
 * through the fenced write path, so it fails alone and only while this runner holds it. */
static void
fail_unresumable(struct rn_shard *sh, struct inst *in, const char *why, struct rn_shard_out *out)
{
    struct ir_val err = ir_null();
    struct rn_wreq *q;
    cn_err rv = rn_error_new(RN_ERR_STATE, why, &err);

    if (rv == CN_UTF8) { /* the reason quotes bytes that are not text */
        rv = rn_error_new(RN_ERR_STATE, "the instance's snapshot cannot be resumed", &err);
    }
    if (rv != CN_OK) {
        cn_oom("StateError");
    }
    q = rn_wreq_new(sh->cfg.index, in->id, in->lock);
    q->w.outcome = RN_FAILED;
    q->w.result = err;
    child_answer(in, q);
    in->held.outcome = RN_FAILED;
    write_begin(sh, in, q, out, false);
}

/* The WorkflowTimeout message of instance in, in *v (a string; None without memory). */
static void
timeout_message(const struct inst *in, struct ir_val *v)
{
    char msg[96];

    (void) snprintf(msg, sizeof(msg), "the instance did not finish within its timeout of %lld ms",
                    (long long) in->timeout_ms);
    if (ir_str_from_cstr(msg, v) != CN_OK) {
        *v = ir_null();
    }
}

static void timeout_step(struct rn_shard *sh, struct inst *in, struct cn_now now);
static void arm_deadline(struct rn_shard *sh, const struct inst *in, struct cn_now now);

/* A claimed instance resumed from what is committed: the snapshot, or the first step that the
 * claim which started it recorded, and the steps recorded by their results since. */
static cn_err
resume_claimed(struct rn_shard *sh, struct inst *in, const struct rn_claimed *c, struct cn_now now,
               struct cn_errmsg *em)
{
    struct ir_val cancel = ir_null();
    struct rn_resume r;
    cn_err rv;

    memset(&r, 0, sizeof(r));
    r.snap = c->state;
    r.len = c->state_len;
    r.instance_id = in->id;
    r.input = c->input;
    r.state_step = c->state_step;
    r.results = c->done;
    r.nresults = c->ndone;
    r.redrive = c->redrive;
    if (c->cancel_reason != NULL) {
        /* Cancelled while another runner held it: the cancel ends it before the results
         * recorded since arrive, and nothing of the resumed step is dispatched. */
        if (ir_str_from_cstr(c->cancel_reason, &cancel) != CN_OK) {
            cancel = ir_null();
        }
        r.cancel = &cancel;
        r.cancel_force = c->cancel_force;
    }
    rn_steplog_resumed(&in->steps, c->state_step, c->done, c->ndone);
    if (c->redrive) {
        log_instance(CN_LOG_INFO, in, "redriven: what had not succeeded starts over");
    }
    rv = rn_instance_resume(in->dag, &r, &sh->cfg.exec, now.wall_ms, &in->ex, &sh->step, em);
    ir_val_release(cancel);
    return rv;
}

/* A claimed instance arrives: hydrate it (or start it) and act on the first output. */
static void
on_new(struct rn_shard *sh, struct rn_sev *e, struct cn_now now, struct rn_shard_out *out)
{
    struct rn_claimed *c = &e->claimed;
    struct cn_errmsg em = {{0}};
    struct inst *in = inst_find(sh, c->instance_id);
    bool first_step = false; /* a new instance's first step, not a resumed one */
    cn_err rv;

    if (in != NULL) {
        /* Claimed again while we still hold a copy: our lease expired (the claim only takes
         * expired leases) and the new claim's token supersedes the old, which can no longer
         * write. The copy is stale: drop it and run the new claim from the committed state. */
        log_instance(CN_LOG_WARN, in,
                     "lease lost (it expired here and was claimed again); resuming from the "
                     "last commit");
        out->lost++;
        withdraw(out, in); /* before the new copy dispatches the same attempts again */
        inst_remove(sh, in, out);
    }
    in = cn_xcalloc(1, sizeof(*in));
    in->id = c->instance_id;
    in->lock = c->lock;
    in->workflow = c->workflow;
    c->workflow = NULL;
    in->dag = e->dag;
    in->claimed_mono_us = e->claimed_mono_us;
    in->slot = (uint32_t) sh->insts.len;
    idmap_xput(&sh->byid, in->id, in->slot);
    CN_VEC_XPUSH(&sh->insts, in);
    lease_op(out, true, in);
    in->deadline_ms = c->deadline_ms;
    in->timeout_ms = c->timeout_ms;
    in->parent = c->parent;
    in->active_ms = now.wall_ms;
    if (c->state != NULL || c->started_before) {
        rv = resume_claimed(sh, in, c, now, &em);
    } else {
        rv = rn_instance_start(in->dag, in->id, c->input, &sh->cfg.exec, now.wall_ms, &in->ex,
                               &sh->step);
        first_step = true;
    }
    if (rv == CN_NOMEM) {
        cn_oom("instance hydration");
    }
    if (rv != CN_OK) {
        const char *why = em.text[0] ? em.text : cn_strerror(rv);
        char id[37];

        cn_uuid_format(in->id.b, id);
        {
            const struct cn_log_field f[] = {{"instance", id}, {"workflow", in->workflow}};
            cn_log_fields(CN_LOG_ERROR, f, 2, "instance %s (%s) cannot resume: %s", id,
                          in->workflow, why);
        }
        rn_step_out_clear(&sh->step);
        fail_unresumable(sh, in, why, out);
        return;
    }
    if (c->cancel_reason != NULL && first_step) {
        /* Cancelled before its first step went out (a claim racing the cancel): nothing of
         * that step is dispatched; the cancel is its only output. */
        struct rn_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.kind = RN_EV_CANCEL;
        ev.force = c->cancel_force;
        if (ir_str_from_cstr(c->cancel_reason, &ev.value) != CN_OK) {
            ev.value = ir_null();
        }
        rn_step_out_clear(&sh->step);
        if (rn_instance_step(in->ex, &ev, 1, now.wall_ms, &sh->step) != CN_OK) {
            cn_oom("instance cancel");
        }
        ir_val_release(ev.value);
    } else if (in->deadline_ms != 0 && now.wall_ms >= in->deadline_ms &&
               rn_instance_outcome(in->ex) == RN_RUNNING && !rn_instance_cleaning(in->ex)) {
        /* Past its deadline already (claimed late, or its lease lapsed meanwhile): nothing of
         * the resumed step is dispatched. (One cleaning up after its timeout goes on with what
         * its cleanup had running.) */
        rn_step_out_clear(&sh->step);
        timeout_step(sh, in, now);
    } else if (in->deadline_ms != 0) {
        arm_deadline(sh, in, now);
    }
    handle_output(sh, in, NULL, 0, first_step, now, out);
}

/* The heap cannot drop an entry, and a deadline may be months away: an entry stays in it at
 * most RN_SHARD_DEADLINE_REARM_MS past its instance (it is armed for the deadline or that much
 * later, whichever is first, and armed again when it fires early). */
#define RN_SHARD_DEADLINE_REARM_MS (3600 * 1000)

static void
arm_deadline(struct rn_shard *sh, const struct inst *in, struct cn_now now)
{
    struct rn_timer_ent t;

    memset(&t, 0, sizeof(t));
    t.at_wall_ms = in->deadline_ms - now.wall_ms > RN_SHARD_DEADLINE_REARM_MS
                       ? now.wall_ms + RN_SHARD_DEADLINE_REARM_MS
                       : in->deadline_ms;
    t.iid = in->id; /* exec_id all zero: the instance's own deadline */
    rn_timerheap_push(&sh->timers, &t);
}

/* Steps instance in with RN_EV_TIMEOUT into sh->step (its deadline passed). */
static void
timeout_step(struct rn_shard *sh, struct inst *in, struct cn_now now)
{
    struct rn_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_TIMEOUT;
    timeout_message(in, &ev.value);
    if (rn_instance_step(in->ex, &ev, 1, now.wall_ms, &sh->step) != CN_OK) {
        cn_oom("instance timeout");
    }
    ir_val_release(ev.value);
}

/* A cancel (cairn.cancel, through the canceller): the instance ends `cancelled`, its running
 * attempts are cancelled, and the final write goes through the fenced path like any other. */
static void
on_cancel(struct rn_shard *sh, struct rn_sev *e, struct cn_now now, struct rn_shard_out *out)
{
    struct inst *in = inst_find(sh, e->iid);
    struct rn_event ev;

    if (in == NULL || in->held.outcome != RN_RUNNING) {
        return; /* not held here, or already finishing: nothing to cancel */
    }
    memset(&ev, 0, sizeof(ev));
    ev.kind = RN_EV_CANCEL;
    ev.value = e->value;
    ev.force = e->force;
    step_events(sh, in, &ev, 1, now, out);
}

static void
on_result(struct rn_shard *sh, struct rn_sev *e, struct cn_now now, struct rn_shard_out *out)
{
    struct inst *in = inst_find(sh, e->iid);
    struct rn_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.kind = e->ok ? RN_EV_RESULT : RN_EV_ERROR;
    ev.exec_id = e->exec_id;
    ev.attempt = e->attempt;
    ev.value = e->value;
    ev.recorded = e->child;
    if (e->child) {
        /* A child's outcome: recorded by the child, nothing of the pool's. For an instance not
         * held here (or finishing) there is nothing to do: its next claim reads it. */
        if (in != NULL && in->held.outcome == RN_RUNNING) {
            step_events(sh, in, &ev, 1, now, out);
        }
        return;
    }
    if (in == NULL) {
        uint32_t slot;
        /* Finished here lately: recorded if it ended failed, cancelled or timed out. */
        if (rn_iidmap_get(&sh->finished_ix, e->iid, &slot)) {
            out_late(out, e->iid, &ev);
        }
        return; /* or evicted or lost meanwhile: not ours to write */
    }
    if (in->inflight > 0) {
        in->inflight--;
    }
    if (!e->ok && cn_log_enabled(CN_LOG_DEBUG)) {
        char id[37], xid[37], att[12];
        const struct cn_log_field f[] = {
            {"instance", id}, {"workflow", in->workflow}, {"exec_id", xid}, {"attempt", att}};
        cn_uuid_format(in->id.b, id);
        cn_uuid_format(e->exec_id.b, xid);
        (void) snprintf(att, sizeof(att), "%u", e->attempt);
        cn_log_fields(CN_LOG_DEBUG, f, 4, "attempt failed: %s", ir_error_type(e->value));
    }
    if (in->held.outcome != RN_RUNNING) {
        keep_late(in, &ev); /* its outcome is being written: recorded after it commits */
        return;
    }
    busy_sync(sh, in);
    step_events(sh, in, &ev, 1, now, out);
}

/* After a committed write that left the instance running: a long sleep with nothing in flight
 * is handed back until it is due. Returns true when the instance is now being handed back. */
static bool
maybe_evict_sleeper(struct rn_shard *sh, struct inst *in, struct cn_now now,
                    struct rn_shard_out *out)
{
    int64_t wake = INT64_MAX;
    struct rn_wreq *q;
    char msg[96];
    size_t k;

    struct rn_instance_waits iw;

    if (in->inflight != 0 || in->waiting.len != 0 || in->held.timers.len == 0 ||
        in->held.actions.len != 0) {
        return false;
    }
    rn_instance_waits(in->ex, &iw);
    if (iw.waits > 0) {
        return false; /* a wait's timeout is no sleep: kept while a signal may come soon, then
                         handed back like a child waiter (maybe_evict_child_waiter) */
    }
    for (k = 0; k < in->held.timers.len; k++) {
        if (in->held.timers.items[k].at_ms < wake) {
            wake = in->held.timers.items[k].at_ms;
        }
    }
    if (in->deadline_ms != 0 && in->deadline_ms < wake) {
        wake = in->deadline_ms; /* claimed again at its deadline, it times out then */
    }
    if (wake - now.wall_ms <= (int64_t) sh->cfg.evict_sleep_threshold_ms) {
        return false;
    }
    (void) snprintf(msg, sizeof(msg), "sleeping %lld ms, handed back until due",
                    (long long) (wake - now.wall_ms));
    log_instance(CN_LOG_INFO, in, msg);
    q = rn_wreq_new(sh->cfg.index, in->id, in->lock);
    q->w.release = true;
    q->w.wake_at_ms = wake;
    rn_step_out_clear(&in->held);
    write_begin(sh, in, q, out, true);
    return true;
}

/* The children a committed write stopped waiting for go to be cancelled: those of the calls
 * its step dropped, and all of them when the instance was cancelled or timed out. */
static void
queue_reaps(const struct inst *in, struct rn_shard_out *out)
{
    const struct rn_step_out *h = &in->held;
    struct rn_shard_reap r;

    memset(&r, 0, sizeof(r));
    r.parent = in->id;
    if (h->outcome == RN_CANCELLED || h->outcome == RN_TIMED_OUT) {
        CN_VEC_XPUSH(&out->reaps, r); /* n == 0: every child, `start`ed ones too */
        return;
    }
    if (h->child_cancels.len == 0) {
        return;
    }
    r.n = h->child_cancels.len;
    r.exec_ids = cn_xcalloc(r.n, sizeof(*r.exec_ids));
    memcpy(r.exec_ids, h->child_cancels.items, r.n * sizeof(*r.exec_ids));
    CN_VEC_XPUSH(&out->reaps, r);
}

/* What a committed write's child starts came to, as events for the instance (queued in
 * in->waiting, applied next): a `start` call's result is the child's id; a call whose child
 * could not start raises. A `run` call whose child started waits for its outcome. */
static void
children_started(struct inst *in, const struct rn_sev *e)
{
    size_t k;

    for (k = 0; k < e->nchildren; k++) {
        const struct rn_child_start *c = &e->children[k];
        enum rn_error kind = RN_ERR_CHILD_NOT_FOUND;
        struct rn_event ev;
        char id[37];

        memset(&ev, 0, sizeof(ev));
        ev.exec_id = c->exec_id;
        ev.attempt = c->attempt;
        switch (c->status) {
        case RN_CHILD_CREATED:
        case RN_CHILD_EXISTS:
            if (!c->detached) {
                continue;
            }
            cn_uuid_format(c->child_id.b, id);
            ev.kind = RN_EV_RESULT;
            if (ir_str_from_cstr(id, &ev.value) != CN_OK) {
                cn_oom("child id");
            }
            break;
        case RN_CHILD_BAD_INPUT:
            kind = RN_ERR_CHILD_INPUT;
            goto error;
        case RN_CHILD_TOO_DEEP:
            kind = RN_ERR_CHILD_DEPTH;
            goto error;
        case RN_CHILD_NOT_FOUND:
        default:
error:
            ev.kind = RN_EV_ERROR;
            if (rn_error_new(kind, c->message, &ev.value) != CN_OK &&
                rn_error_new(kind, "the child workflow could not start", &ev.value) != CN_OK) {
                cn_oom("child error");
            }
            break;
        }
        CN_VEC_XPUSH(&in->waiting, ev); /* the value moves into the queue */
    }
}

/* What a committed write's waits for started children came to, as events for the instance
 * (queued in in->waiting, applied next): a child that had ended gives its outcome as the call's
 * result (recorded by the next write, like an action's); one that has not gives nothing yet
 * (its end records the outcome, which comes back as a child's does); a wait for an id that is
 * no child of this instance, or one another wait takes, raises ChildWorkflowNotFound. */
static void
joins_done(struct inst *in, const struct rn_sev *e)
{
    size_t k;

    for (k = 0; k < e->njoins; k++) {
        const struct rn_join *j = &e->joins[k];
        struct rn_event ev;

        if (j->status == RN_JOIN_WAITING) {
            continue;
        }
        memset(&ev, 0, sizeof(ev));
        ev.exec_id = j->exec_id;
        ev.attempt = j->attempt;
        if (j->status == RN_JOIN_ENDED) {
            ev.kind = j->ok ? RN_EV_RESULT : RN_EV_ERROR;
            ev.value = ir_val_retain(j->value);
        } else {
            ev.kind = RN_EV_ERROR;
            if (rn_error_new(RN_ERR_CHILD_NOT_FOUND, j->message, &ev.value) != CN_OK &&
                rn_error_new(RN_ERR_CHILD_NOT_FOUND, "no such child", &ev.value) != CN_OK) {
                cn_oom("child error");
            }
        }
        CN_VEC_XPUSH(&in->waiting, ev); /* the value moves into the queue */
    }
}

/* Sets key to the string text in map m; false without memory. */
static bool
put_text(struct ir_val *m, const char *key, const char *text)
{
    struct ir_val v;

    return ir_str_from_cstr(text, &v) == CN_OK && ir_map_set_cstr(m, key, v) == CN_OK;
}

/* What a committed write's signals came to, as events for the instance (queued in in->waiting,
 * applied next): a signal sent gives cairn.signal's answer, recorded by that write; a refused
 * one raises SignalError (recorded by the next write, like any error: sending it again would
 * be refused again, so a replay before then raises the same). */
static void
sends_done(struct inst *in, const struct rn_sev *e)
{
    size_t k;

    for (k = 0; k < e->nsends; k++) {
        const struct rn_send *s = &e->sends[k];
        struct rn_event ev;
        struct ir_val details;
        char id[37], msg[sizeof(s->message) + IR_MAX_WAIT_NAME + 16];

        memset(&ev, 0, sizeof(ev));
        ev.exec_id = s->exec_id;
        ev.attempt = s->attempt;
        if (s->status == RN_SEND_SENT) {
            ev.kind = RN_EV_RESULT;
            ev.recorded = true;
            if (ir_str_from_cstr(s->answer, &ev.value) != CN_OK) {
                cn_oom("signal answer");
            }
            CN_VEC_XPUSH(&in->waiting, ev);
            continue;
        }
        cn_uuid_format(s->to.b, id);
        (void) snprintf(msg, sizeof(msg), "signal %s: %s", s->name, s->message);
        if (ir_map_new(3, &details) != CN_OK ||
            !put_text(&details, "reason", rn_send_status_name(s->status)) ||
            !put_text(&details, "to", id) || !put_text(&details, "signal", s->name)) {
            cn_oom("signal error");
        }
        ev.kind = RN_EV_ERROR;
        if (rn_error_detailed(RN_ERR_SIGNAL, msg, details, &ev.value) != CN_OK) {
            cn_oom("signal error");
        }
        CN_VEC_XPUSH(&in->waiting, ev);
    }
}

/* What a committed write's waits were answered with (a signal or event taken at once, or the
 * timeout), as events for the instance (queued in in->waiting, applied next): recorded by that
 * write, so no done record is made for them. */
static void
waits_answered(struct inst *in, struct rn_sev *e)
{
    size_t k;

    for (k = 0; k < e->nwaits; k++) {
        struct rn_event ev;

        memset(&ev, 0, sizeof(ev));
        ev.kind = e->waits[k].ok ? RN_EV_RESULT : RN_EV_ERROR;
        ev.exec_id = e->waits[k].exec_id;
        ev.attempt = e->waits[k].attempt;
        ev.value = e->waits[k].value; /* moves into the queue */
        ev.recorded = true;
        e->waits[k].value = ir_null();
        CN_VEC_XPUSH(&in->waiting, ev);
    }
}

/* After a committed write that left the instance running: one that waits only for child
 * workflows is handed back once none has answered for evict_child_wait_ms (a timer checks
 * again until then). Returns true when the instance is now being handed back. */
static bool
maybe_evict_child_waiter(struct rn_shard *sh, struct inst *in, struct cn_now now,
                         struct rn_shard_out *out)
{
    struct rn_instance_waits w;
    int64_t wake, quiet_until = in->active_ms + (int64_t) sh->cfg.evict_child_wait_ms;
    struct rn_wreq *q;

    if (inst_writing(in) || in->inflight != 0 || in->waiting.len != 0 ||
        in->held.outcome != RN_RUNNING) {
        return false;
    }
    rn_instance_waits(in->ex, &w);
    if (w.children + w.waits == 0 || w.actions != 0) {
        return false;
    }
    if (w.next_ms != INT64_MAX &&
        w.next_ms - now.wall_ms <= (int64_t) sh->cfg.evict_sleep_threshold_ms) {
        return false; /* a timer soon: kept, and looked at again after it */
    }
    if (now.wall_ms < quiet_until) {
        if (!in->idle_armed) {
            struct rn_timer_ent t;
            memset(&t, 0, sizeof(t));
            t.at_wall_ms = quiet_until;
            t.iid = in->id;
            t.exec_id = idle_check;
            rn_timerheap_push(&sh->timers, &t);
            in->idle_armed = true;
        }
        return false;
    }
    wake = now.wall_ms + RN_SHARD_CHILD_WAIT_RECHECK_MS;
    if (w.next_ms < wake) {
        wake = w.next_ms;
    }
    if (in->deadline_ms != 0 && in->deadline_ms < wake) {
        wake = in->deadline_ms;
    }
    log_instance(CN_LOG_INFO, in,
                 w.waits > 0 ? "waiting for a signal or event: handed back until one comes"
                             : "waiting for child workflows: handed back until one answers");
    q = rn_wreq_new(sh->cfg.index, in->id, in->lock);
    q->w.release = true;
    q->w.wake_at_ms = wake;
    write_begin(sh, in, q, out, true);
    return true;
}

/* A write committed (or was fenced off, or failed): release what it held, then what waited. */
static void
on_ack(struct rn_shard *sh, struct rn_sev *e, struct cn_now now, struct rn_shard_out *out)
{
    struct inst *in = inst_find(sh, e->iid);
    struct rn_event *evs;
    size_t nevs, k;

    if (in == NULL || !rn_token_eq(in->lock, e->lock)) {
        return; /* the instance is gone, or this is the ACK of a copy claimed again since */
    }
    if (e->lost || e->write_failed) {
        if (e->lost) {
            log_instance(CN_LOG_WARN, in, "lease lost, evicted (no more writes from here)");
            out->lost++;
        }
        withdraw(out, in);
        inst_remove(sh, in, out);
        return;
    }
    out->committed++;
    if (in->state == INST_HANDING_BACK) {
        out->evicted++;
        inst_remove(sh, in, out);
        return;
    }
    inst_move(in, INST_RUNNING);
    queue_reaps(in, out);
    if (in->held.outcome != RN_RUNNING) {
        /* The outcome is committed: cancel what still runs, and forget the instance. A cancel
         * drops an attempt still waiting in the pool's queue (a cancel right after its
         * dispatch) and stops one in flight, whose outcome still comes back: a late result,
         * recorded (below, on_result) if the instance ended failed, cancelled or timed out.
         * (A withdrawal would drop that outcome in the pool.) */
        for (k = 0; k < in->held.cancels.len; k++) {
            CN_VEC_XPUSH(&out->cancels, in->held.cancels.items[k]);
        }
        if (in->held.outcome == RN_COMPLETED) {
            out->completed++;
        } else {
            out->failed++;
        }
        for (k = 0; k < in->waiting.len; k++) { /* results queued behind the outcome */
            keep_late(in, &in->waiting.items[k]);
        }
        for (k = 0; k < in->late.len && in->held.outcome != RN_COMPLETED; k++) {
            out_late(out, in->id, &in->late.items[k]); /* a completed one keeps none */
        }
        if (in->held.outcome != RN_COMPLETED) {
            remember_finished(sh, in->id);
        }
        inst_remove(sh, in, out);
        return;
    }
    release_output(sh, in, &in->held, in->held_us, now, out);
    children_started(in, e);
    joins_done(in, e);
    waits_answered(in, e);
    sends_done(in, e);
    if (maybe_evict_sleeper(sh, in, now, out)) {
        return;
    }
    rn_step_out_clear(&in->held);
    busy_sync(sh, in);
    if (in->waiting.len == 0 && maybe_evict_child_waiter(sh, in, now, out)) {
        return;
    }
    if (in->waiting.len > 0) {
        evs = in->waiting.items;
        nevs = in->waiting.len;
        memset(&in->waiting, 0, sizeof(in->waiting));
        step_events(sh, in, evs, nevs, now, out);
        for (k = 0; k < nevs; k++) {
            ir_val_release(evs[k].value);
        }
        free(evs);
        /* What waited may have needed no write (a child's outcome filling a slot) and left the
         * instance waiting only for children: looked at here, since no ACK follows. */
        (void) maybe_evict_child_waiter(sh, in, now, out);
    }
}

static void
on_lost(struct rn_shard *sh, struct rn_sev *e, struct rn_shard_out *out)
{
    struct inst *in = inst_find(sh, e->iid);

    if (in == NULL || !rn_token_eq(in->lock, e->lock)) {
        return; /* gone, or claimed again since under another token */
    }
    if (inst_writing(in)) {
        /* Its write is in flight: the ACK says whether it was fenced off (and then evicts and
         * counts it). Often the queue row is gone because that write finished the instance,
         * which is no loss at all. */
        return;
    }
    log_instance(CN_LOG_WARN, in, "lease lost (found by heartbeat), evicted");
    out->lost++;
    withdraw(out, in);
    inst_remove(sh, in, out);
}

/* ---- public ------------------------------------------------------------------------------- */

struct rn_shard *
rn_shard_new(const struct rn_shard_cfg *cfg)
{
    struct rn_shard *sh = cn_xcalloc(1, sizeof(*sh));

    sh->cfg = *cfg;
    if (sh->cfg.max_child_depth == 0) {
        sh->cfg.max_child_depth = RN_DEFAULT_MAX_CHILD_DEPTH;
    }
    sh->step.result = ir_null();
    return sh;
}

void
rn_shard_free(struct rn_shard *sh)
{
    if (sh == NULL) {
        return;
    }
    while (sh->insts.len > 0) {
        inst_remove(sh, sh->insts.items[sh->insts.len - 1], NULL);
    }
    free(sh->insts.items);
    rn_iidmap_fini(&sh->byid);
    rn_iidmap_fini(&sh->finished_ix);
    rn_timerheap_fini(&sh->timers);
    rn_step_out_fini(&sh->step);
    free(sh);
}

void
rn_shard_apply(struct rn_shard *sh, struct rn_sev *e, struct cn_now now, struct rn_shard_out *out)
{
    switch (e->kind) {
    case RN_SEV_NEW:
        on_new(sh, e, now, out);
        break;
    case RN_SEV_RESULT:
        on_result(sh, e, now, out);
        break;
    case RN_SEV_ACK:
        on_ack(sh, e, now, out);
        break;
    case RN_SEV_LOST:
        on_lost(sh, e, out);
        break;
    case RN_SEV_CANCEL:
        on_cancel(sh, e, now, out);
        break;
    }
}

void
rn_shard_fire(struct rn_shard *sh, struct cn_now now, struct rn_shard_out *out)
{
    struct rn_timer_ent t;

    while (rn_timerheap_pop_due(&sh->timers, now.wall_ms, &t)) {
        struct inst *in = inst_find(sh, t.iid);
        struct rn_event ev;

        if (in == NULL) {
            continue;
        }
        if (rn_xid_eq(t.exec_id, idle_check)) {
            in->idle_armed = false;
            (void) maybe_evict_child_waiter(sh, in, now, out);
            continue;
        }
        memset(&ev, 0, sizeof(ev));
        ev.kind = RN_EV_TIMER;
        ev.exec_id = t.exec_id;
        ev.value = ir_null();
        if (rn_xid_is_nil(t.exec_id)) {
            /* The instance's deadline (a stale entry of an earlier claim is harmless: the
             * check is against the deadline this claim holds). */
            if (in->deadline_ms != 0 && now.wall_ms < in->deadline_ms) {
                arm_deadline(sh, in, now); /* an early wake-up (see arm_deadline) */
                continue;
            }
            if (in->deadline_ms == 0 || in->held.outcome != RN_RUNNING) {
                continue;
            }
            ev.kind = RN_EV_TIMEOUT;
            timeout_message(in, &ev.value);
        }
        step_events(sh, in, &ev, 1, now, out);
        ir_val_release(ev.value);
    }
}

bool
rn_shard_next_timer(const struct rn_shard *sh, int64_t *at_wall_ms)
{
    return rn_timerheap_next(&sh->timers, at_wall_ms);
}

void
rn_shard_hand_back(struct rn_shard *sh, struct rn_shard_out *out)
{
    while (sh->insts.len > 0) {
        struct inst *in = sh->insts.items[sh->insts.len - 1];
        struct rn_lease_op op;

        op.take = false;
        op.iid = in->id;
        op.lock = in->lock;
        CN_VEC_XPUSH(&out->handed_back, op);
        withdraw(out, in);
        inst_remove(sh, in, out);
    }
    rn_timerheap_fini(&sh->timers);
}

size_t
rn_shard_count(const struct rn_shard *sh)
{
    return sh->insts.len;
}

size_t
rn_shard_busy(const struct rn_shard *sh)
{
    return sh->busy;
}

bool
rn_shard_has(const struct rn_shard *sh, struct rn_iid iid, bool *writing)
{
    const struct inst *in = inst_find(sh, iid);

    if (in != NULL && writing != NULL) {
        *writing = inst_writing(in);
    }
    return in != NULL;
}

const struct rn_lathist *
rn_shard_claim_latency(const struct rn_shard *sh)
{
    return &sh->claim_lat;
}
