/* SPDX-License-Identifier: MIT */
/*
 * Executor internals shared by exec.c (stepping) and snapshot.c (codec). Not for use outside
 * runner/exec*.c and runner/exec/snapshot.c.
 *
 * Execution node states (only ACTION, SLEEP and AGGREGATE nodes are ever persisted):
 *
 *     ACTIVE --dispatch--> RUNNING --result--> (advances: ACTIVE at the next node)
 *                            |  ^
 *                     error, |  | backoff timer
 *                 retry left v  |
 *                           BACKOFF
 *     ACTIVE --sleep--> SLEEPING --timer--> ACTIVE
 *     ACTIVE --fork--> WAITING (aggregate) --last branch--> ACTIVE
 *
 *   transition                     function
 *   FREE -> ACTIVE                 rn_ex_x_new (graph.c): a new execution node
 *   ACTIVE -> RUNNING              dispatch (exec.c; from run_node, an ACTION node)
 *   RUNNING -> RUNNING             dispatch again (resend after a lost worker)
 *   RUNNING -> ACTIVE / BACKOFF    apply_event: on_action_result / attempt_failed (no retry
 *                                  left: ACTIVE, raising)
 *   BACKOFF -> RUNNING             apply_event (its timer) -> dispatch
 *   RUNNING | BACKOFF -> ACTIVE    restart_action (resume.c): a redrive runs it afresh
 *   ACTIVE -> SLEEPING -> ACTIVE   run_sleep (nodes.c) / apply_event (its timer)
 *   ACTIVE -> WAITING -> ACTIVE    run_fork (nodes.c) / deliver -> run_aggregate_done, or
 *                                  fail_fast (a branch failed)
 *   ACTIVE -> ACTIVE               a node moving along inline edges
 *   any -> FREE                    rn_ex_x_free (graph.c): the node is done or dropped
 * rn_x_move makes every change and asserts it is one of these (RN_X_MOVES); a snapshot's
 * statuses are checked when it is decoded (snapshot.c, status_fits).
 * Guarantees: a RUNNING node has an execution id and a dispatched request for its current
 * attempt; a BACKOFF or SLEEPING node has a timer at scheduled_at; a WAITING node has
 * `pending` unfilled slots and that many live branches reporting to it.
 */
#ifndef RUNNER_EXEC_INT_H
#define RUNNER_EXEC_INT_H

#include <assert.h>

#include "runner/exec/exec.h"
#include "runner/exec/idmap.h"

#define RN_NONE UINT32_MAX

enum rn_xstatus {
    RN_X_FREE = 0,
    RN_X_ACTIVE,   /* moving through inline nodes (only inside a step) */
    RN_X_RUNNING,  /* action attempt dispatched */
    RN_X_BACKOFF,  /* action waiting for its retry timer */
    RN_X_SLEEPING, /* sleep waiting for its timer */
    RN_X_WAITING,  /* aggregate waiting for branches */
    RN_X_STATUS_COUNT_
};

/* The transitions drawn above, one bit per target status for each status (bit s: to s). */
#define RN_X_BIT(s) (1u << (s))
static const unsigned RN_X_MOVES[RN_X_STATUS_COUNT_] = {
    [RN_X_FREE] = RN_X_BIT(RN_X_ACTIVE),
    [RN_X_ACTIVE] = RN_X_BIT(RN_X_ACTIVE) | RN_X_BIT(RN_X_RUNNING) | RN_X_BIT(RN_X_SLEEPING) |
                    RN_X_BIT(RN_X_WAITING) | RN_X_BIT(RN_X_FREE),
    [RN_X_RUNNING] = RN_X_BIT(RN_X_RUNNING) | RN_X_BIT(RN_X_ACTIVE) | RN_X_BIT(RN_X_BACKOFF) |
                     RN_X_BIT(RN_X_FREE),
    [RN_X_BACKOFF] = RN_X_BIT(RN_X_RUNNING) | RN_X_BIT(RN_X_ACTIVE) | RN_X_BIT(RN_X_FREE),
    [RN_X_SLEEPING] = RN_X_BIT(RN_X_ACTIVE) | RN_X_BIT(RN_X_FREE),
    [RN_X_WAITING] = RN_X_BIT(RN_X_ACTIVE) | RN_X_BIT(RN_X_FREE),
};

/* Whether the table allows from -> to. */
static inline bool
rn_x_move_ok(unsigned from, unsigned to)
{
    return from < RN_X_STATUS_COUNT_ && to < RN_X_STATUS_COUNT_ && (RN_X_MOVES[from] >> to & 1u);
}

struct rn_slot {
    bool filled;
    bool ok;
    struct ir_val value;
};

struct rn_xnode {
    struct rn_xid id;
    bool has_id;
    uint8_t status; /* enum rn_xstatus */
    uint32_t node;  /* template node */
    uint32_t scope;
    uint32_t fork_agg; /* the aggregate node this branch reports to, or RN_NONE */
    uint32_t fork_idx;
    uint32_t attempt;
    int64_t scheduled_at;     /* BACKOFF, SLEEPING */
    int64_t deadline;         /* RUNNING */
    int64_t first_at;         /* RUNNING, BACKOFF: when attempt 1 was dispatched (max_elapsed) */
    struct ir_val last_error; /* BACKOFF, RUNNING after a retry: the previous attempt's error */
    const char *item_name;    /* spread item variable (borrowed from the template) or NULL */
    struct ir_val item;
    uint32_t nslots, pending; /* WAITING */
    struct rn_slot *slots;
    uint32_t next_free;
};

/* Every status change of an execution node goes through here (the table above). */
static inline void
rn_x_move(struct rn_xnode *x, enum rn_xstatus to)
{
    assert(rn_x_move_ok(x->status, to));
    x->status = (uint8_t) to;
}

struct rn_scope {
    bool live;
    uint32_t frame;
    uint32_t parent;    /* caller's scope, or RN_NONE */
    uint32_t refs;      /* execution nodes and child scopes using it */
    struct ir_val vars; /* a map, owned, never shared */
    uint32_t next_free;
};

struct rn_work {
    uint32_t x;
    bool has_val;  /* carrying a value: a return value, a branch result, an error */
    bool agg_done; /* an aggregate whose last branch reported */
    struct ir_val val;
};

struct rn_instance {
    const struct ir_dag *dag;
    struct rn_exec_cfg cfg;
    struct rn_iid id;
    uint64_t rng;
    enum rn_outcome outcome;
    struct ir_val result;
    struct {
        struct rn_xnode *items;
        size_t len, cap;
    } x;
    uint32_t x_free;
    struct {
        struct rn_scope *items;
        size_t len, cap;
    } s;
    uint32_t s_free;
    size_t live_x, live_s;
    struct rn_xidmap ids;
    struct {
        struct rn_work *items;
        size_t head, len, cap;
    } q;
    /* A cancel or timeout whose finally blocks run (cleanup.c): the outcome the instance ends
     * with (RN_RUNNING: not cleaning up), its error, the wall-clock bound after which the
     * cleanup is abandoned, and the id of that bound's timer. In the snapshot (format 3). */
    struct {
        uint8_t outcome;
        struct ir_val err;
        int64_t until;
        struct rn_xid timer;
        struct cn_buf before; /* the snapshot from just before the interruption: a redrive
                                 (cairn.retry) starts from it, not from the cleanup */
    } cleanup;
    /* per step */
    struct rn_step_out *out;
    int64_t now;
    const struct ir_val *input; /* only while starting */
    uint64_t step_nodes;        /* inline nodes run in this call, against cfg.max_inline_steps */
    cn_err rv;
    struct rn_instance_stats stats;
};

/* Allocation helpers used by the codec when rebuilding state. */
uint32_t rn_x_alloc(struct rn_instance *in);
uint32_t rn_s_alloc(struct rn_instance *in);
struct rn_instance *rn_instance_alloc(const struct ir_dag *dag, const struct rn_exec_cfg *cfg);

/* Snapshot decode into a fresh instance (ids map, refs rebuilt). Returns CN_OK or an error. */
CN_MUST_CHECK cn_err rn_snapshot_decode(struct rn_instance *in, const void *buf, size_t len,
                                        struct cn_errmsg *err);
/* A new instance of dag rebuilt from the snapshot buf[0..len) into *out; on an error, none. */
CN_MUST_CHECK cn_err rn_snapshot_load(const struct ir_dag *dag, const struct rn_exec_cfg *cfg,
                                      const void *buf, size_t len, struct rn_instance **out,
                                      struct cn_errmsg *err);

/* The template node n and edge k of node n. */
static inline const struct ir_node *
tnode(const struct rn_instance *in, uint32_t n)
{
    return &in->dag->nodes[n];
}

static inline const struct ir_edge *
tedge(const struct rn_instance *in, const struct ir_node *n, uint32_t k)
{
    return &in->dag->edges[n->first_edge + k];
}

/* The executor's parts that its files share; each is described where it is defined.
 * graph.c: the live graph's storage. */
uint32_t rn_ex_x_new(struct rn_instance *in, uint32_t node, uint32_t scope, uint32_t fork_agg,
                     uint32_t idx);
void rn_ex_x_free(struct rn_instance *in, uint32_t i);
cn_err rn_ex_x_ensure_id(struct rn_instance *in, uint32_t i);
uint32_t rn_ex_scope_new(struct rn_instance *in, uint32_t frame, uint32_t parent);
void rn_ex_scope_hold(struct rn_instance *in, uint32_t i);
void rn_ex_scope_rele(struct rn_instance *in, uint32_t i);

/* exec.c: the work queue, outputs, evaluation, control flow, actions, events, a step's frame. */
void rn_ex_oom(struct rn_instance *in);
void rn_ex_new_uuid(struct rn_instance *in, struct rn_xid *id);
void rn_ex_push(struct rn_instance *in, uint32_t x, bool has_val, struct ir_val val, bool agg_done);
void rn_ex_out_timer(struct rn_instance *in, uint32_t xi, enum rn_timer_kind kind, int64_t at);
cn_err rn_ex_eval(struct rn_instance *in, uint32_t xi, uint32_t e, struct ir_val *out);
/* rn_ex_eval for a node that stops without a value: false when e gave none, an error it
 * raised having gone where xi's errors go (or the instance having run out of memory). */
bool rn_ex_value(struct rn_instance *in, uint32_t xi, uint32_t e, struct ir_val *out);
cn_err rn_ex_check_storable(struct rn_instance *in, struct ir_val v, struct ir_val *err);
cn_err rn_ex_bind(struct rn_instance *in, uint32_t xi, const struct ir_node *t, struct ir_val v,
                  struct ir_val *err);
void rn_ex_scope_to_frame(struct rn_instance *in, uint32_t xi, uint32_t frame);
void rn_ex_finish(struct rn_instance *in, enum rn_outcome outcome, struct ir_val v);
void rn_ex_deliver(struct rn_instance *in, uint32_t ai, uint32_t idx, bool ok, struct ir_val v);
void rn_ex_follow(struct rn_instance *in, uint32_t xi, const struct ir_edge *edge, bool has_val,
                  struct ir_val val);
void rn_ex_follow_first(struct rn_instance *in, uint32_t xi, bool has_val, struct ir_val val);
/* Binds t's targets to val, then goes on along xi's first edge carrying val; an error the
 * binding raises goes where xi's errors go. Consumes val. */
void rn_ex_bind_follow(struct rn_instance *in, uint32_t xi, const struct ir_node *t,
                       struct ir_val val);
void rn_ex_raise_error(struct rn_instance *in, uint32_t xi, struct ir_val err);
void rn_ex_raise_new(struct rn_instance *in, uint32_t xi, const char *type, const char *msg);
/* Whether v can travel as JSON to a client or another instance (a published value, a signal's
 * payload): what JSON holds (no NaN or infinity, no U+0000) and at most RN_PUBLISH_MAX_BYTES
 * of it, as an input. Else raises a ValueError at node xi that says so, prefixed by `what`
 * ("publish stage"), and returns false (also without memory, the instance failed). */
bool rn_ex_json_ok(struct rn_instance *in, uint32_t xi, struct ir_val v, const char *what);
void rn_ex_forget_attempts(struct rn_xnode *x);
bool rn_ex_x_stop(struct rn_instance *in, uint32_t i);
void rn_ex_dispatch(struct rn_instance *in, uint32_t xi, bool resend);
void rn_ex_apply_event(struct rn_instance *in, const struct rn_event *ev);
void rn_ex_begin_step(struct rn_instance *in, struct rn_step_out *o, int64_t now);
cn_err rn_ex_end_step(struct rn_instance *in);

/* cleanup.c: a cancel or a timeout that runs finally blocks first. */
/* Whether a cleanup was begun (and the instance ends as its interruption said). */
static inline bool
rn_ex_cleaning(const struct rn_instance *in)
{
    return in->cleanup.outcome != RN_RUNNING;
}
/* Applies a cancel or a timeout (outcome, and its error err, consumed): ends the instance at
 * once when force or when no live node has a finally block around it; else begins the cleanup.
 * While one is under way, force abandons it and anything else is stale. */
void rn_ex_interrupt(struct rn_instance *in, enum rn_outcome outcome, struct ir_val err,
                     bool force);
/* The error an instance that cleans up ends with when it reaches outcome with v (consumed):
 * the interruption's, with an error the cleanup raised of its own in its details. */
struct ir_val rn_ex_cleanup_result(struct rn_instance *in, enum rn_outcome outcome,
                                   struct ir_val v);
/* Asks for the cleanup bound's timer again (a hydration). */
void rn_ex_cleanup_timer_out(struct rn_instance *in);
/* True when ev is the cleanup bound's timer (handled: the cleanup is abandoned when due). */
bool rn_ex_cleanup_timer(struct rn_instance *in, const struct rn_event *ev);

/* nodes.c: the step loop. */
void rn_ex_run_queue(struct rn_instance *in);

#endif
