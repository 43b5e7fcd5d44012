/* SPDX-License-Identifier: MIT */
/*
 * The runner's storage interface: claiming due instances under a lease, loading workflow
 * versions, writing progress in the fixed order, and keeping leases (docs/operations.md gives
 * the operator's account). Two implementations with the same semantics: PostgreSQL
 * (store/pg/) and in memory (backend_mem.c, for tests and `cairnctl exec`).
 *
 * Fencing: every claim gets a fresh lock token. Every write names the token it was made under
 * and is applied only while the instance's queue row still carries that token, under a row
 * lock for the whole transaction; a write whose token is gone is dropped and reported as lost,
 * so a runner that lost a lease can never land a stale write.
 *
 * Threads: a backend object is used by one thread at a time (the runner opens one per thread
 * that talks to storage: claimer, persister, lease keeper).
 */
#ifndef RUNNER_BACKEND_H
#define RUNNER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "ir/value.h"
#include "runner/exec/exec.h"

/* Where a child instance's outcome goes: the attempt of the parent's call that started it. */
struct rn_child_link {
    bool has;              /* false: not a child (enqueued by a client) */
    struct rn_iid parent;  /* the parent instance */
    struct rn_xid exec_id; /* the parent's call */
    uint32_t attempt;
};

/* What became of a child start (set by persist). */
#define RN_CHILD_STATUSES(X)                                                                    \
    X(RN_CHILD_CREATED, "created")     /* the child instance was created and queued */          \
    X(RN_CHILD_EXISTS, "exists")       /* it had been created before (a replay): unchanged */   \
    X(RN_CHILD_NOT_FOUND, "not_found") /* no such workflow or version: ChildWorkflowNotFound */ \
    X(RN_CHILD_BAD_INPUT, "bad_input") /* the inputs do not fit its main: ChildInputError */    \
    X(RN_CHILD_TOO_DEEP, "too_deep")   /* past the depth limit: ChildDepthExceeded */
#define RN_CHILD_STATUS_ENUM(e, name) e,
enum rn_child_status { RN_CHILD_STATUSES(RN_CHILD_STATUS_ENUM) RN_CHILD_STATUS_COUNT_ };
#undef RN_CHILD_STATUS_ENUM

/* The status's name ("created"), as cairn.start_children returns it; "" outside the enum. */
static inline const char *
rn_child_status_name(enum rn_child_status s)
{
#define RN_CHILD_STATUS_NAME(e, name) name,
    static const char *const names[] = {RN_CHILD_STATUSES(RN_CHILD_STATUS_NAME)};
#undef RN_CHILD_STATUS_NAME
    return (unsigned) s < RN_CHILD_STATUS_COUNT_ ? names[s] : "";
}

/* A child instance to start, written in the same transaction as the snapshot that records the
 * call (so it is created exactly once: a replay of the call names the same child id, and
 * starting an existing child changes nothing). Borrowed from the caller, but for the status. */
struct rn_child_start {
    struct rn_iid child_id; /* rn_child_id(exec_id, attempt) */
    struct rn_xid exec_id;  /* the parent's call */
    uint32_t attempt;
    const char *workflow;
    const char *version; /* NULL: the newest */
    struct ir_val input; /* a map: the call's keyword arguments */
    int64_t timeout_ms;  /* the call's [timeout: D] (the child's deadline), 0: its own */
    bool detached;       /* `start`: nobody waits for it */
    /* set by persist: */
    enum rn_child_status status;
    char message[200]; /* what did not fit (NOT_FOUND, BAD_INPUT, TOO_DEEP) */
};

/* What became of a `wait for` a started child (set by persist). */
#define RN_JOIN_STATUSES(X)                                                                   \
    X(RN_JOIN_WAITING, "waiting")     /* attached to the call: its end records its outcome */ \
    X(RN_JOIN_ENDED, "ended")         /* it had ended: value is the call's result or error */ \
    X(RN_JOIN_NOT_CHILD, "not_child") /* no child of this instance has that id */             \
    X(RN_JOIN_TAKEN, "taken")         /* another call waits for it already */
#define RN_JOIN_STATUS_ENUM(e, name) e,
enum rn_join_status { RN_JOIN_STATUSES(RN_JOIN_STATUS_ENUM) RN_JOIN_STATUS_COUNT_ };
#undef RN_JOIN_STATUS_ENUM

/* The status's name ("waiting"), as cairn.join_children returns it; "" outside the enum. */
static inline const char *
rn_join_status_name(enum rn_join_status s)
{
#define RN_JOIN_STATUS_NAME(e, name) name,
    static const char *const names[] = {RN_JOIN_STATUSES(RN_JOIN_STATUS_NAME)};
#undef RN_JOIN_STATUS_NAME
    return (unsigned) s < RN_JOIN_STATUS_COUNT_ ? names[s] : "";
}

/* A wait for a child the instance started (`wait for id`), made in the write that records the
 * call: storage attaches the child to the call, so that the child's end records its outcome
 * as the call's result (as for `run`), or, when the child has ended already, answers at once.
 * Attaching again (a replay) changes nothing. Borrowed from the caller, but for what persist
 * sets. */
struct rn_join {
    struct rn_xid exec_id; /* the parent's call */
    uint32_t attempt;
    struct rn_iid child;
    /* set by persist: */
    enum rn_join_status status;
    bool ok;             /* ENDED: the child completed */
    struct ir_val value; /* ENDED: the call's result (rn_child_outcome; owned) */
    char message[200];   /* NOT_CHILD, TAKEN: why */
};

/* What became of a wait of a write (set by persist). */
#define RN_WAIT_STATUSES(X)                                                                     \
    X(RN_WAIT_WAITING, "waiting")   /* registered, nothing for it yet: a send will answer it */ \
    X(RN_WAIT_ANSWERED, "answered") /* answered in this write (recorded): a signal or event     \
                                       taken, or its timeout */                                 \
    X(RN_WAIT_DROPPED, "dropped")   /* withdrawn; what was delivered to it was given back */
#define RN_WAIT_STATUS_ENUM(e, name) e,
enum rn_wait_status { RN_WAIT_STATUSES(RN_WAIT_STATUS_ENUM) RN_WAIT_STATUS_COUNT_ };
#undef RN_WAIT_STATUS_ENUM

/* A wait of the write's instance (`wait`, `wait event`), registered in the same transaction as
 * the snapshot that records it: storage answers it at once when a signal or event it takes is
 * there already (buffered; the oldest first), else keeps it, and a send then answers it by
 * recording the attempt's result itself and waking the instance (docs/semantics.md "Waiting
 * for the outside world"). Registering again (a replay, a resumed instance) changes nothing.
 * Borrowed from the caller, but for what persist sets. */
struct rn_wait {
    struct rn_xid exec_id; /* the wait node's execution */
    uint32_t attempt;
    bool drop;             /* the step stopped waiting: withdraw it (and give back what came) */
    bool event;            /* a keyed event, else signals */
    bool expire;           /* its timeout passed: answer with the timeout unless something came */
    const char *names;     /* signal names joined by ',', or the event's name */
    char *key;             /* event: the key (owned by the write) */
    int64_t timeout_ms;    /* its [timeout: D]; 0: none */
    int64_t timeout_at_ms; /* wall clock; 0: none */
    /* What the timeout answers: a value ([default: v]) or a WaitTimeout error. */
    bool timeout_ok;
    struct ir_val timeout_value;
    /* set by persist: */
    enum rn_wait_status status;
    bool ok;
    struct ir_val value; /* ANSWERED: the recorded answer (owned by the write) */
};

/* What became of a signal a write sends (set by persist): sent, or why it was refused, each
 * refusal named as the SignalError's details give it (docs/language.md "Signalling another
 * instance"). X(ENUM, name). */
#define RN_SEND_STATUSES(X)                                                                    \
    X(RN_SEND_SENT, "sent")                 /* sent: `answer` says how; recorded as the call's \
                                               result by the write */                          \
    X(RN_SEND_NOT_FOUND, "not_found")       /* no such instance (or one of another tenant) */  \
    X(RN_SEND_ENDED, "ended")               /* the instance has ended */                       \
    X(RN_SEND_UNKNOWN_NAME, "unknown_name") /* its workflow never waits for that signal */     \
    X(RN_SEND_LIMIT, "limit") /* too many unconsumed signals there, or too large a payload */
#define RN_SEND_STATUS_ENUM(e, name) e,
enum rn_send_status { RN_SEND_STATUSES(RN_SEND_STATUS_ENUM) RN_SEND_STATUS_COUNT_ };
#undef RN_SEND_STATUS_ENUM

/* The status's name ("not_found"); "" outside the enum. */
static inline const char *
rn_send_status_name(enum rn_send_status s)
{
#define RN_SEND_STATUS_NAME(e, name) name,
    static const char *const names[] = {RN_SEND_STATUSES(RN_SEND_STATUS_NAME)};
#undef RN_SEND_STATUS_NAME
    return (unsigned) s < RN_SEND_STATUS_COUNT_ ? names[s] : "";
}

/* A signal the write's instance sends another (`signal s(to=id, payload=v)`), sent in the same
 * transaction as the snapshot that records the call, under a dedup key made of the call's
 * execution id and attempt, and its answer recorded there as the call's result: sent exactly
 * once, and a replay of the write changes nothing (sql/api/35_signals.sql, runner_signals).
 * Borrowed from the caller, but for what persist sets. */
struct rn_send {
    struct rn_xid exec_id; /* the signal node's execution */
    uint32_t attempt;
    struct rn_iid to;      /* the instance it goes to */
    const char *name;      /* the signal's */
    struct ir_val payload; /* what JSON holds (the executor checked) */
    /* set by persist: */
    enum rn_send_status status;
    char answer[16];   /* SENT: "delivered", "buffered" (cairn.signal's words) */
    char message[200]; /* refused: why, in the words of cairn.signal */
};

/* A claimed instance, ready to hydrate. Owned by the array it is in (rn_claimed_free). */
struct rn_claimed {
    struct rn_iid instance_id;
    struct rn_token lock;     /* this claim's token */
    struct rn_vid version_id; /* workflow_versions.id */
    char *workflow;           /* name, for logs */
    struct ir_val input;      /* the input object */
    void *state;              /* the last committed snapshot; NULL for a fresh instance */
    size_t state_len;
    uint32_t state_step;  /* the last step the snapshot holds (rn_done.step; 0: none) */
    struct rn_done *done; /* the latest recorded result per execution id, and every result
                             numbered as a step after state_step (values owned) */
    size_t ndone;
    char *cancel_reason; /* a cancel was asked for (cairn.cancel) while another runner held it:
                            its reason (malloc'd); NULL: none */
    bool cancel_force;   /* with cancel_reason: asked with --force (no cleanup) */
    int64_t deadline_ms; /* the instance's deadline (wall clock ms; its workflow timeout); 0:
                            none */
    int64_t timeout_ms;  /* the timeout the deadline comes from, for the error message */
    bool redrive;        /* queued again by cairn.retry: resume with rn_instance_redrive */
    bool started_before; /* an earlier claim started it: without a snapshot, its first step went
                            out recorded by that claim (rn_instance_resume) */
    struct rn_child_link parent; /* a child instance: the parent call it answers */
};

void rn_claimed_free(struct rn_claimed *c, size_t n);

/* A recorded result's value as the PostgreSQL backend stores it (runner_actions_done.result):
 * JSON text when json (status 'json': a send's answer to a wait), else msgpack
 * (IR_MP_INTERNAL); false when it does not decode. */
bool rn_stored_value(const char *data, size_t len, bool json, struct ir_val *out);

/* An action result that came after its instance ended (cancelled, timed out, failed): the
 * instance no longer takes it, but it is recorded if the instance ended that way, so that it is
 * in the history and a redrive (cairn.retry) does not run a completed action again. */
struct rn_late_result {
    struct rn_iid instance_id;
    struct rn_done d; /* value owned by whoever holds the record */
};

/* A lease this runner holds: the instance and the claim token it holds it under. */
struct rn_lease {
    struct rn_iid instance_id;
    struct rn_token lock;
};

/* One instance's progress in a persist batch, written in the fixed order: done records, then
 * the snapshot, then the queue row; a finished instance also gets its outcome and loses its
 * queue row. Everything is borrowed from the caller. */
struct rn_write {
    struct rn_iid instance_id;
    struct rn_token lock;
    const struct rn_done *done; /* action results to record (insert first) */
    size_t ndone;
    const void *state; /* the new snapshot, or NULL to keep the stored one */
    size_t state_len;
    uint32_t state_step;      /* with state: the last step it holds (rn_done.step) */
    int64_t cleanup_until_ms; /* with state: the step began a cleanup, which may run until
                                 then (wall ms); 0: it did not */
    enum rn_outcome outcome;  /* RN_RUNNING: not finished */
    struct ir_val result;     /* COMPLETED: the value; FAILED: the error map */
    int64_t wake_at_ms;       /* with release: when to claim it again (wall ms); else unused */
    bool release;             /* hand the instance back (eviction): clear the lease */
    struct rn_child_start *children; /* child instances to start (before the snapshot) */
    size_t nchildren;
    struct rn_wait *waits; /* waits to register, expire or withdraw (after the children) */
    size_t nwaits;
    /* Values the step published (after the waits), in order: the last per name is kept. */
    const struct rn_publish *published;
    size_t npublished;
    struct rn_send *sends; /* signals to other instances (after the published values) */
    size_t nsends;
    struct rn_join *joins; /* waits for started children (after the children) */
    size_t njoins;
    uint32_t max_child_depth; /* a child deeper than this is not started (TOO_DEEP) */
    /* A finishing child (outcome not RUNNING, parent.has): its outcome goes to its parent as
     * the call's result, in the same transaction (rn_child_outcome made parent_value). */
    struct rn_child_link parent;
    bool parent_ok;
    struct ir_val parent_value;
    /* set by persist: */
    bool lost; /* the lease was gone: nothing was written for this instance */
};

struct rn_backend;

/* Told that child instances finished, whose parents may be held here: each has recorded its
 * outcome as the result of attempt `attempt` of the parent's call exec_id. */
typedef void (*rn_child_done_fn)(void *arg, const struct rn_child_link *done, size_t n);

/* Told of a cancel asked for an instance a runner holds (by whichever runner: the callee
 * ignores instances it does not hold). reason is borrowed (NULL: none given); force: asked with
 * --force (no cleanup). */
typedef void (*rn_cancel_fn)(void *arg, struct rn_iid instance_id, const char *reason, bool force);

/* Leases renewed per heartbeat call. One statement renewing every lease at once held its row
 * locks until all were taken: each write of the runner's own that touched a renewed row waited
 * for the whole statement, and the statement waited for every write it met. With 10 000 leases
 * (default settings, 12 000 instances sleeping in an action) renewal took 8 to 26 s, writes 10 to
 * 15 s, and half the leases expired. A few hundred rows lock and commit in milliseconds. */
#define RN_HEARTBEAT_BATCH 500

/* What a heartbeat found for one lease. */
enum rn_lease_state {
    RN_LEASE_RENEWED = 0, /* held, and extended */
    RN_LEASE_LOST,        /* no longer held under this token */
    RN_LEASE_BUSY,        /* held, but its row is being written right now: not extended; ask
                             again shortly (renewal never waits for a write) */
};

/* A backfill's progress, for /metrics (sql/0015). */
struct rn_backfill_stat {
    char id[40];
    char workflow[132];
    char state[12];
    int64_t done, failed, running, remaining;
};

/* The signals' figures, for /metrics (sql/0023, 0025): read by one statement, every runner
 * the same (they are the database's, not a runner's). */
struct rn_signal_stat {
    int64_t sent;          /* signal ids taken: every send, one that rolled back too */
    int64_t events;        /* event ids taken, likewise */
    int64_t buffered;      /* signals sent and not yet taken by a wait */
    double oldest_seconds; /* the age of the oldest of those; 0 when none */
    int64_t waits_signal;  /* registered waits nothing has answered yet: for signals */
    int64_t waits_event;   /* ... and for keyed events */
};

/* Room for a prune walk's position (a timestamp as PostgreSQL prints it). */
#define RN_PRUNE_CURSOR_LEN 64

/* What one batch of retention deleted. */
struct rn_prune_counts {
    size_t instances, actions; /* finished instances, their action results */
    size_t events;             /* keyed events nobody can take any more */
};

struct rn_backend_ops {
    /* Claims up to max due instances, leasing each for lease_ms, marks them running and loads
     * their input, snapshot and recorded results. Stops adding instances once their inputs and
     * snapshots (as stored) pass max_bytes; the first is always claimed. Of instances whose
     * lease expired (their runner died or stalled) it takes at most max_orphans (0: none), and
     * of instances nobody holds at most max_fresh (expired leases come first). */
    cn_err (*claim)(struct rn_backend *b, size_t max, size_t max_bytes, size_t max_orphans,
                    size_t max_fresh, int64_t lease_ms, struct rn_claimed **out, size_t *n,
                    struct cn_errmsg *err);
    /* The source of a workflow version (malloc'd, NUL-terminated). CN_NOTFOUND if none. */
    cn_err (*version_source)(struct rn_backend *b, struct rn_vid version_id, char **src,
                             struct cn_errmsg *err);
    /* Writes a batch in one transaction (see struct rn_write); sets w[i].lost. On an error
     * return nothing was written (the transaction rolled back). */
    cn_err (*persist)(struct rn_backend *b, struct rn_write *w, size_t n, struct cn_errmsg *err);
    /* Extends leases[0..n) to lease_ms from now and says what it found for each in st[i].
     * Callers pass at most RN_HEARTBEAT_BATCH leases per call (each call is one short
     * transaction). */
    cn_err (*heartbeat)(struct rn_backend *b, const struct rn_lease *leases, size_t n,
                        int64_t lease_ms, enum rn_lease_state *st, struct cn_errmsg *err);
    /* Hands instances back at once (shutdown): clears the leases still held by locks. */
    cn_err (*release)(struct rn_backend *b, const struct rn_token *locks, size_t n,
                      struct cn_errmsg *err);
    /* Marks an instance that cannot run (its version does not compile, its snapshot does not
     * decode) as failed with error, if the lock is still held. */
    cn_err (*fail)(struct rn_backend *b, struct rn_iid instance_id, struct rn_token lock,
                   struct ir_val error, struct cn_errmsg *err);
    /* Clears up to max leases that expired more than grace_ms ago (their runner died or
     * stalled) and marks those instances queued again; *n says how many. The claim takes
     * expired leases anyway, whatever the claiming runner's backlog; this keeps the status of a
     * dead runner's instances truthful once no claim has taken them for a while. */
    cn_err (*reclaim)(struct rn_backend *b, size_t max, int64_t grace_ms, size_t *n,
                      struct cn_errmsg *err);
    /* Waits up to timeout_ms for a hint that instances were enqueued (NOTIFY cairn_enqueue);
     * returns early when one comes. A hint only: callers poll anyway. */
    cn_err (*wait_enqueue)(struct rn_backend *b, int timeout_ms, struct cn_errmsg *err);
    /* Says that this claimer waits for that hint for the next for_ms, so that enqueues send it
     * (cairn.wake_claimers: they notify only while a claimer waits). The caller claims once more
     * after it, before waiting, for what was enqueued unannounced. NULL in a backend whose enqueues
     * always wake. */
    cn_err (*announce_wait)(struct rn_backend *b, int64_t for_ms, struct cn_errmsg *err);
    /* Waits up to timeout_ms for cancels of held instances (NOTIFY cairn_cancel: fn for each)
     * and for children that finished (NOTIFY cairn_child: child_fn with those that came);
     * returns early when one comes. NULL in a backend without cancels. */
    cn_err (*wait_notices)(struct rn_backend *b, int timeout_ms, rn_cancel_fn fn,
                           rn_child_done_fn child_fn, void *arg, struct cn_errmsg *err);
    /* The recorded outcomes of the given child calls (parent, exec_id, attempt), as results of
     * the parents' calls: out[i] is set for those found (ok and value; out[i].exec_id is the
     * nil id for one not found). */
    cn_err (*child_results)(struct rn_backend *b, const struct rn_child_link *calls, size_t n,
                            struct rn_done *out, struct cn_errmsg *err);
    /* Children's outcomes that storage produced itself (a cancel of a child nobody held, a
     * deadline passed while queued, a child that could not run) are handed to their parents
     * here: recorded as the calls' results and the parents woken. Then cancels what nobody
     * waits for any more: the children of instances that ended (but for those started with
     * `start`, unless the parent was cancelled or timed out). *n says how many were handed
     * over. NULL in a backend without child workflows. */
    cn_err (*sweep_children)(struct rn_backend *b, size_t *n, struct cn_errmsg *err);
    /* Cancels the unfinished children of parent: those of the calls exec_ids[0..n), or all of
     * them (n == 0), with reason. For the canceller, after a parent's write that dropped
     * them. */
    cn_err (*cancel_children)(struct rn_backend *b, struct rn_iid parent,
                              const struct rn_xid *exec_ids, size_t n, const char *reason,
                              struct cn_errmsg *err);
    /* Drives the active backfills (cairn.backfill_tick: counts, the next partitions, states)
     * and returns the progress of those active or finished in the last 10 minutes (at most
     * 100; *out malloc'd, NULL when none). NULL in a backend without backfills. */
    cn_err (*tick_backfills)(struct rn_backend *b, struct rn_backfill_stat **out, size_t *n,
                             struct cn_errmsg *err);
    /* The signals' figures (struct rn_signal_stat). NULL in a backend without signals. */
    cn_err (*signal_stats)(struct rn_backend *b, struct rn_signal_stat *out, struct cn_errmsg *err);
    /* Fires the schedules that are due (runner/ops/schedule.h); *n counts the instances enqueued.
     * NULL in a backend without schedules. */
    cn_err (*fire_schedules)(struct rn_backend *b, size_t *n, struct cn_errmsg *err);
    /* Records late results (struct rn_late_result) for the instances among them that ended
     * failed, cancelled or timed_out, each (execution id, attempt) once; the others (completed,
     * or not finished: handed back, claimed elsewhere) are dropped. NULL in a backend that
     * keeps no such record. */
    cn_err (*record_late)(struct rn_backend *b, const struct rn_late_result *r, size_t n,
                          struct cn_errmsg *err);
    /* The cancels still waiting for a runner (missed notifications): cancels those nobody
     * holds any more (a sleep handed back, an expired lease) itself, and calls fn for those
     * still held. Then times out the instances past their deadline that nobody holds
     * (cairn.expire_overdue). NULL in a backend without cancels. */
    cn_err (*sweep_cancels)(struct rn_backend *b, rn_cancel_fn fn, void *arg,
                            struct cn_errmsg *err);
    /* One batch of retention (runner/engine/pruner.h): deletes at most batch finished instances
     * past their workflow's retention (retention_s for workflows without their own; 0: keep those),
     * with their action results, and, starting a round with retention_s > 0, at most batch keyed
     * events past retention_s that nobody can take; says how many of each. cursor (in and out)
     * is where the walk goes on: "" starts a round; back to "" when the walk reached its end.
     * NULL in a backend that keeps nothing for long. */
    cn_err (*prune_due)(struct rn_backend *b, int64_t retention_s, size_t batch,
                        char cursor[RN_PRUNE_CURSOR_LEN], struct rn_prune_counts *n,
                        struct cn_errmsg *err);
    void (*close)(struct rn_backend *b);
};

struct rn_backend {
    const struct rn_backend_ops *ops;
};

/* Opens a PostgreSQL backend on url (NULL: CAIRN_DATABASE_URL). Returns CN_OK, CN_INVAL (no
 * URL), CN_IO (cannot connect), CN_NOMEM; err says why. */
CN_MUST_CHECK cn_err rn_backend_pg_open(const char *url, struct rn_backend **out,
                                        struct cn_errmsg *err);

/* The in-memory backend: one thread-safe object, shared by every runner thread (pass it in
 * rn_runner_cfg.backend). Not durable; for `cairnctl exec` and tests. */
CN_MUST_CHECK cn_err rn_backend_mem_new(struct rn_backend **out);
/* Registers source as the newest version of workflow name. */
CN_MUST_CHECK cn_err rn_backend_mem_register(struct rn_backend *b, const char *name,
                                             const char *source, struct rn_vid *version_id);
/* Enqueues an instance of the newest version of name (input: a map, retained); 0 for now.
 * Returns CN_OK, CN_NOTFOUND (no such workflow), CN_TYPE (input not a map). */
/* Gives an enqueued instance a workflow timeout: its deadline is its due time plus timeout_ms
 * (0: none). Returns CN_OK or CN_NOTFOUND. */
CN_MUST_CHECK cn_err rn_backend_mem_set_timeout(struct rn_backend *b, struct rn_iid instance_id,
                                                int64_t timeout_ms);
CN_MUST_CHECK cn_err rn_backend_mem_enqueue(struct rn_backend *b, const char *name,
                                            struct ir_val input, int64_t scheduled_at_ms,
                                            struct rn_iid *instance_id);
/* Takes the instance's lease from its holder, as if another runner had claimed it and then
 * died at once (for tests of lease loss): the holder finds the lease lost at its next write or
 * heartbeat, and any runner may claim the instance now. *stolen says whether it was leased.
 * CN_OK, CN_NOTFOUND. */
CN_MUST_CHECK cn_err rn_backend_mem_steal(struct rn_backend *b, struct rn_iid instance_id,
                                          bool *stolen);
/* The instance's outcome (RN_RUNNING until it finishes), its result or error (retained), and
 * how many action results were recorded for it. CN_NOTFOUND for an unknown id. */
CN_MUST_CHECK cn_err rn_backend_mem_outcome(struct rn_backend *b, struct rn_iid instance_id,
                                            enum rn_outcome *outcome, struct ir_val *result,
                                            size_t *nresults);
/* Like rn_backend_mem_outcome, but first waits until the instance finishes or the monotonic
 * instant until_mono_ms (cn_mono_ms()) passes. */
CN_MUST_CHECK cn_err rn_backend_mem_wait(struct rn_backend *b, struct rn_iid instance_id,
                                         int64_t until_mono_ms, enum rn_outcome *outcome,
                                         struct ir_val *result, size_t *nresults);
/* Test seam for the deterministic simulation (tests/sim/): from now on lease expiry, claims,
 * steals and enqueues read the wall clock from now_ms(arg) instead of cn_wall_ms, and new ids
 * (instances, versions, claim tokens) come from a counter and that clock alone, so a
 * single-threaded run is reproducible. NULL restores the real clock. Call before use, from the
 * thread that uses it. */
void rn_backend_mem_set_clock(struct rn_backend *b, int64_t (*now_ms)(void *arg), void *arg);
void rn_backend_mem_free(struct rn_backend *b);

#endif
