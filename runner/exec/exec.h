/* SPDX-License-Identifier: MIT */
/*
 * The executor: advances one workflow instance over its DAG template. A library with no I/O and
 * no clock or randomness of its own: time comes in as `now_ms` arguments, randomness from a
 * per-instance generator seeded from the instance id and persisted in the snapshot, so a
 * replay from a snapshot makes the same choices (execution ids, backoff jitter) as the run it
 * replays. One instance is owned by one thread at a time (a shard); nothing here locks.
 *
 * DESIGN (docs/semantics.md has the user-level account)
 * - Execution graph: the *live* execution nodes only — actions running or waiting for a retry,
 *   sleeps, aggregates waiting for their branches — each keyed by a UUID execution id and
 *   pointing at a template node, plus the variable scopes they use. Inline nodes (assignments,
 *   branches, loop steps, joins, calls) run to completion inside a step and leave nothing
 *   behind, so the snapshot holds the live frontier, never the history: a 10 000-iteration
 *   loop snapshots as one node.
 * - Runtime edges: a node inside a spread/parallel branch points at its aggregate and its
 *   branch index; a scope points at its caller's scope.
 * - Push-based: an event (action result, timer, cancel) touches its node, which advances along
 *   the template's edges, running inline nodes until each thread of control blocks again.
 * - Durability contract with the persister (the commit barrier, runner/core/shard.h): a step
 * reports the action results it consumed (done records, to insert first) and whether the snapshot
 *   must be rewritten. A step that only consumed results into aggregate slots needs no new
 *   snapshot: hydration re-applies those results. Any step that creates a dispatch, a timer or
 *   an outcome does, and its actions must not be dispatched before that snapshot is committed.
 * - Inline budget: one call (start, step, hydrate) runs at most cfg.max_inline_steps inline
 *   nodes; one more fails the instance with StepLimitExceeded (runner/exec/errors.h), an outcome
 * and not an exception, since a workflow that could catch it would go on spinning: an instance that
 * never blocks (`while True:` without an action) must not hold its shard forever.
 */
#ifndef RUNNER_EXEC_H
#define RUNNER_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"
#include "ir/base/uuid.h"
#include "ir/dag.h"
#include "ir/value.h"
#include "runner/exec/ids.h"

/* 2 added first_at and last_error to each node; 3 the cleanup under way (written only while
 * there is one, so a runner of the release before resumes every other snapshot); formats 1 and
 * 2 still decode. */
#define RN_SNAPSHOT_FORMAT_VERSION 3

struct rn_instance;

/* The inline budget of one step when rn_exec_cfg.max_inline_steps is 0. A count of nodes, not
 * CPU time, so a replay from a snapshot makes the same decision as the run it replays. Sized by
 * timing `cairnctl exec` on the development machine (2 shared cores, gcc -O2): a poison
 * `while True: x = x + 1` reaches 5 000 000 nodes and fails 0.25 s after it starts; `while
 * x < n: x = x + 1` runs 16 million nodes a second; a `for` whose body indexes a dict, does
 * arithmetic, concatenates a string and branches (8 nodes an iteration) reaches the budget in
 * 0.45 s. So a spinning instance holds its shard for well under a second, while a `for` over
 * 10 000 items with a few statements each (about 80 000 nodes), a 10 000-action spread (10 000)
 * and the examples (a few hundred) stay 60 times or more below it. */
#define RN_EXEC_DEFAULT_MAX_INLINE_STEPS 5000000

/* The cleanup bound when rn_exec_cfg.cleanup_timeout_ms is 0: ten minutes, twice an attempt's
 * default timeout, so a refund that needs one retry of a slow attempt still fits. */
#define RN_EXEC_DEFAULT_CLEANUP_TIMEOUT_MS 600000

struct rn_exec_cfg {
    int64_t default_timeout_ms; /* per attempt, for actions without [timeout: D] */
    /* Inline nodes one call (start, step or hydrate) may run; past it the instance fails with
     * StepLimitExceeded. 0: RN_EXEC_DEFAULT_MAX_INLINE_STEPS. */
    uint64_t max_inline_steps;
    /* How long the finally blocks a cancel or a timeout runs may take before the cleanup is
     * abandoned (the instance then ends as the interruption said). 0:
     * RN_EXEC_DEFAULT_CLEANUP_TIMEOUT_MS. */
    int64_t cleanup_timeout_ms;
};

enum rn_event_kind {
    RN_EV_RESULT = 0, /* an action attempt succeeded: value = its result */
    RN_EV_ERROR,      /* an action attempt failed: value = error map (type, message, bases...) */
    RN_EV_TIMER,      /* a timer this instance asked for fired (sleep, backoff or deadline) */
    RN_EV_CANCEL,     /* cancel the instance: value = the reason (a string, or None) */
    RN_EV_TIMEOUT,    /* the instance passed its deadline (the caller keeps it): it ends
                         TIMED_OUT with a WorkflowTimeout whose message is value (a string) */
};

struct rn_event {
    enum rn_event_kind kind;
    struct rn_xid exec_id;
    uint32_t attempt;    /* RESULT/ERROR: the attempt it answers; stale ones are dropped */
    struct ir_val value; /* borrowed; the executor retains what it keeps */
    bool recorded;       /* RESULT/ERROR: already in storage (a child's outcome, which the child's
                            final write recorded): no done record is made for it */
    bool force;          /* CANCEL: end now, without running finally blocks (cairnctl cancel
                            --force), abandoning a cleanup under way */
};

struct rn_action_req {
    struct rn_xid exec_id; /* idempotency key, with the attempt */
    uint32_t attempt;      /* 1 for the first */
    uint8_t call;          /* enum ir_call_kind: an action for a worker, or a child workflow to
                              start (RUN: its outcome comes back as this attempt's result;
                              START: its id does) */
    const char *action;    /* borrowed from the template: the action, or the child's workflow */
    const char *version;   /* RUN/START: the pinned version; NULL: the newest */
    struct ir_val kwargs;  /* owned by the step output */
    int64_t timeout_ms;    /* start to close: from when a worker starts it (the pool counts);
                              RUN: the child's timeout ([timeout: D]), 0 = none */
    int64_t deadline_ms;   /* schedule to close ([deadline: D]): absolute, wall clock; 0 = none */
    struct ir_val prev_error; /* the previous attempt's error (None for the first); owned by the
                                 step output */
    bool expire;              /* WAIT/EVENT: asked again at its deadline (the [timeout: D]): to
                                 time out unless something came first */
};

enum rn_timer_kind { RN_TIMER_SLEEP = 0, RN_TIMER_BACKOFF, RN_TIMER_DEADLINE };

struct rn_timer {
    struct rn_xid exec_id;
    enum rn_timer_kind kind;
    int64_t at_ms; /* absolute, wall clock */
};

/* An action result the step consumed: the persister writes these before the snapshot. */
struct rn_done {
    struct rn_xid exec_id;
    uint32_t attempt;
    bool ok;
    struct ir_val value; /* owned by the step output */
    /* The step this result makes, for a result whose write carried no snapshot (rn_steplog
     * numbers them; rn_instance_resume replays them in this order); 0: none (its write carried
     * a snapshot or fed an aggregate, or it is a child's outcome). */
    uint32_t step;
};

/* The largest value `publish` takes, as JSON text: an input's limit (cairn.limits()), since a
 * client reads the value whole, as it sends an input. */
#define RN_PUBLISH_MAX_BYTES 262144

/* A value the step published (`publish name = v`): written with the step's snapshot, latest
 * wins per name. */
struct rn_publish {
    const char *name;    /* borrowed from the template */
    struct ir_val value; /* owned by the step output */
};

/* How an instance stands (running, or how it ended), with the name its status has in
 * cairn.runner_instances.status (sql/0002_workflows.sql checks the same words) and in
 * cairnctl's output. X(ENUM, name). Snapshots store the number: append only, RN_RUNNING
 * stays 0. */
#define RN_OUTCOMES(X)           \
    X(RN_RUNNING, "running")     \
    X(RN_COMPLETED, "completed") \
    X(RN_FAILED, "failed")       \
    X(RN_CANCELLED, "cancelled") \
    X(RN_TIMED_OUT, "timed_out")
#define RN_OUTCOME_ENUM(e, name) e,
enum rn_outcome { RN_OUTCOMES(RN_OUTCOME_ENUM) RN_OUTCOME_COUNT_ };
#undef RN_OUTCOME_ENUM

/* The status of an instance no runner has claimed yet: stored and shown, but never an
 * executor outcome. */
#define RN_STATUS_QUEUED "queued"

/* The status name of outcome o ("completed"); "" for a value outside the enum. */
const char *rn_outcome_name(enum rn_outcome o);
/* The outcome a status name stands for, in *o; false for "queued" and unknown words. */
bool rn_outcome_parse(const char *name, enum rn_outcome *o);
/* True when name is an instance status: "queued" or an outcome's name. */
bool rn_status_valid(const char *name);

struct rn_step_out {
    struct {
        struct rn_action_req *items;
        size_t len, cap;
    } actions;
    struct {
        struct rn_timer *items;
        size_t len, cap;
    } timers;
    struct {
        struct rn_done *items;
        size_t len, cap;
    } done;
    struct {
        struct rn_xid *items; /* running actions to cancel (instance cancelled or failed) */
        size_t len, cap;
    } cancels;
    struct {
        struct rn_xid *items; /* child calls no longer waited for: their children to cancel */
        size_t len, cap;
    } child_cancels;
    struct {
        struct rn_done *items; /* waits no longer waited for (exec_id and attempt; value None):
                                  to withdraw in the step's write, so that nothing is delivered
                                  to them and what was is given back */
        size_t len, cap;
    } wait_drops;
    struct {
        struct rn_publish *items; /* in the order the step published them */
        size_t len, cap;
    } published;
    bool snapshot_needed;
    /* What this step recorded depends on its clock (now_ms): a timer, an attempt's deadline, the
     * start a retry bound counts from. A step without one computes the same state whenever it
     * runs, so a replay of it recomputes what it recorded (the shard relies on this for the
     * first step of a new instance). */
    bool timed;
    /* The step began a cleanup (a cancel or a timeout with finally blocks to run, cleanup.c):
     * the wall-clock time it is abandoned at, which the step's write records; 0: it did not. */
    int64_t cleanup_until_ms;
    enum rn_outcome outcome;
    struct ir_val result; /* COMPLETED: the workflow's value; FAILED: the error; CANCELLED:
                             a Cancelled error whose message is the reason; TIMED_OUT: a
                             WorkflowTimeout; owned */
};

/* Empties an output for reuse (releases its values). */
void rn_step_out_clear(struct rn_step_out *o);
/* Releases everything in an output. */
void rn_step_out_fini(struct rn_step_out *o);

/* Starts an instance of `dag` (borrowed; must outlive the instance) with `input`, a dict of
 * the entry function's inputs (borrowed). Runs until every thread of control blocks and
 * appends what it produced to *o. An input that is not a dict, or lacks an input name, fails
 * the instance at once (outcome FAILED with a TypeError/KeyError), it is not a C error.
 * Returns CN_OK, CN_NOMEM. */
CN_MUST_CHECK cn_err rn_instance_start(const struct ir_dag *dag, struct rn_iid instance_id,
                                       struct ir_val input, const struct rn_exec_cfg *cfg,
                                       int64_t now_ms, struct rn_instance **out,
                                       struct rn_step_out *o);

/* Applies a batch of events in order, then runs what became ready. Unknown execution ids,
 * stale attempts and early timers are ignored (counted in rn_instance_stats).
 * Returns CN_OK or CN_NOMEM (the instance must then be dropped and rehydrated). */
CN_MUST_CHECK cn_err rn_instance_step(struct rn_instance *in, const struct rn_event *evs, size_t n,
                                      int64_t now_ms, struct rn_step_out *o);

/* Serializes the live state (format RN_SNAPSHOT_FORMAT_VERSION). Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err rn_instance_snapshot(const struct rn_instance *in, struct cn_buf *out);

/* Rebuilds an instance from a snapshot plus the latest recorded result per execution id
 * (results for ids or attempts the snapshot does not have running are ignored), then continues
 * as a step would. Actions that were running without a recorded result are requested again
 * (same execution id and attempt: at-least-once), timers are set again.
 * Returns CN_OK, CN_NOMEM, or CN_PARSE/CN_VERSION/CN_RANGE for a snapshot that does not
 * decode or does not fit the template (err says why). */
CN_MUST_CHECK cn_err rn_instance_hydrate(const struct ir_dag *dag, const void *snap, size_t len,
                                         const struct rn_done *results, size_t nresults,
                                         const struct rn_exec_cfg *cfg, int64_t now_ms,
                                         struct rn_instance **out, struct rn_step_out *o,
                                         struct cn_errmsg *err);

/* Redrive (cairn.retry): rebuilds an instance from the last snapshot it had while running, like
 * rn_instance_hydrate, except that the run that follows starts over what had not succeeded:
 * recorded errors are not applied, every action running or waiting to retry gets a new
 * execution id, attempt 1, a fresh retry budget and a new deadline, and a fan-out branch that
 * had already failed into its aggregate runs again from its start. Successful results recorded
 * after the snapshot are applied as in hydration, so completed actions do not run again.
 * Always asks for a snapshot (the new ids must be durable before they are dispatched). */
CN_MUST_CHECK cn_err rn_instance_redrive(const struct ir_dag *dag, const void *snap, size_t len,
                                         const struct rn_done *results, size_t nresults,
                                         const struct rn_exec_cfg *cfg, int64_t now_ms,
                                         struct rn_instance **out, struct rn_step_out *o,
                                         struct cn_errmsg *err);

/* Which steps of a run are recorded by their results alone, with no snapshot: the caller (the
 * shard; the tests' driver) keeps one per instance and asks it about every step's output.
 *
 * A step qualifies when it read no clock (not timed), the instance runs on, it started no child
 * and stopped nothing, and it consumed exactly its events evs[0..n), each a result of one of the
 * instance's own actions that made one done record, in order (a child's outcome, a timer, a
 * cancel, or a stale result that made no record does not). Its results are then numbered, in
 * that order, and rn_instance_resume replays them, each alone, on the last snapshot. Replay is
 * exact only while every change of state since that snapshot was such a step: after one that
 * was neither numbered nor followed by a snapshot (a child's outcome fed to an aggregate, say),
 * a later numbered step would be replayed before it and could draw the instance's execution
 * ids in another order. So none is numbered until the next snapshot; nor more than max in a
 * row, which bounds a replay. */
/* How many steps in a row a run records by their results (rn_steplog_take's max) before the
 * next writes a snapshot: that bounds a resume's replay and the results a claim reads back.
 * Replaying one step costs microseconds; a snapshot, an update, a row version and its WAL
 * (bench/HISTORY.md, "Steps recorded by their results"). */
#define RN_STEPLOG_REPLAY_MAX 64

struct rn_steplog {
    uint32_t seq;       /* the last step numbered */
    uint32_t unsnapped; /* steps numbered since the last snapshot */
    bool inexact;       /* the state changed since the last snapshot outside a numbered step */
};

/* Decides for the step whose output is o and whose events were evs[0..n) (none for a start or a
 * resume): true when it is recorded by its results, which are numbered in o->done. Call
 * rn_steplog_snapshot when the step writes a snapshot instead. */
bool rn_steplog_take(struct rn_steplog *l, struct rn_step_out *o, const struct rn_event *evs,
                     size_t n, uint32_t max);
/* A snapshot holding every step so far is being written: its state_step is l->seq. */
void rn_steplog_snapshot(struct rn_steplog *l);
/* An instance resumed from state_step and the recorded results[0..n): numbering goes on after
 * the last, and the state is inexact until the next snapshot (the resume applied the other
 * results after the replayed steps). */
void rn_steplog_resumed(struct rn_steplog *l, uint32_t state_step, const struct rn_done *results,
                        size_t n);

/* What is committed of an instance that was started before (rn_instance_resume). */
struct rn_resume {
    const void *snap; /* its last snapshot; NULL: none (its first step went out recorded by the
                         claim that started it, and is run again from instance_id and input) */
    size_t len;
    struct rn_iid instance_id;
    struct ir_val input;           /* borrowed */
    uint32_t state_step;           /* the last step the snapshot holds (0: none) */
    const struct rn_done *results; /* recorded results (borrowed): those with a step greater
                                      than state_step are steps to replay, the rest as in
                                      rn_instance_hydrate */
    size_t nresults;
    bool redrive; /* resume with rn_instance_redrive's rules */
    /* A cancel asked before the claim (its reason, borrowed), applied once the committed state
     * is rebuilt and before the results recorded since: the instance ends cancelled, whatever
     * those results would have done (a child's outcome the cancel caused). NULL: none. */
    const struct ir_val *cancel;
    bool cancel_force; /* with cancel: without running finally blocks (cairnctl cancel --force) */
};

/* Resumes an instance from what is committed: its snapshot, or for an instance without one its
 * first step run again; then, in step order, every step recorded by its result alone (one
 * event each, as the step that recorded it applied it; the shard writes no snapshot for a step
 * that read no clock and consumed only results of its own, each numbered); then hydrates, or
 * redrives when redrive, the state so rebuilt with the other results. Equivalent to hydrating
 * the snapshot the last of those steps would have written, because each is a function of the
 * state before it and its result. A recorded step that no longer applies (its attempt is not
 * running at its turn) is handed to the hydration like any other result. Returns what
 * rn_instance_start and rn_instance_hydrate return. */
CN_MUST_CHECK cn_err rn_instance_resume(const struct ir_dag *dag, const struct rn_resume *r,
                                        const struct rn_exec_cfg *cfg, int64_t now_ms,
                                        struct rn_instance **out, struct rn_step_out *o,
                                        struct cn_errmsg *err);

/* Describes a snapshot for people (cairnctl inspect): a list with one map per live execution
 * node: exec_id, status (running, backoff, sleeping, waiting), kind (the template node's kind:
 * action, sleep, spread...), node, line, and as they apply action, attempt, deadline_ms,
 * wake_ms (backoff and sleep), branches and pending (aggregates), branch_of and branch (a node
 * inside a fan-out), item (a spread's item). Returns CN_OK, CN_NOMEM, or the decode errors of
 * rn_instance_hydrate. */
CN_MUST_CHECK cn_err rn_snapshot_describe(const struct ir_dag *dag, const void *snap, size_t len,
                                          struct ir_val *out, struct cn_errmsg *err);

/* The id of the child instance that attempt `attempt` of child call exec_id starts: derived
 * from both, so a replay of the call (after a crash, from the same snapshot) names the same
 * child and starting it again changes nothing, while a retry (a new attempt) starts a new one. */
struct rn_iid rn_child_id(struct rn_xid exec_id, uint32_t attempt);

/* What a live instance waits for (the shard hands back one that only waits for children). */
struct rn_instance_waits {
    size_t actions;  /* action attempts running (dispatched to workers), and signals being sent */
    size_t children; /* child calls running (RUN waits for the child; START for its creation) */
    size_t waits;    /* waits for signals or events */
    int64_t next_ms; /* the earliest timer (sleep, backoff, deadline); INT64_MAX: none */
};
void rn_instance_waits(const struct rn_instance *in, struct rn_instance_waits *w);

/* Frees the instance. NULL is a no-op. */
void rn_instance_free(struct rn_instance *in);

enum rn_outcome rn_instance_outcome(const struct rn_instance *in);
/* True while the instance runs the finally blocks of a cancel or a timeout (cleanup.c): another
 * cancel or timeout changes nothing then. */
bool rn_instance_cleaning(const struct rn_instance *in);

struct rn_instance_stats {
    size_t live_nodes;     /* execution nodes in the graph now */
    size_t node_slots;     /* node slots ever used: the most nodes live at once (the peak) */
    size_t live_scopes;    /* scopes in the graph now */
    uint64_t stale_events; /* events dropped: unknown id, stale attempt, early timer */
};
void rn_instance_stats(const struct rn_instance *in, struct rn_instance_stats *st);

#endif
