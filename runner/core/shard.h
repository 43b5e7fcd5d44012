/* SPDX-License-Identifier: MIT */
/*
 * The shard core: the instances one executor shard owns, and everything that happens to them,
 * as a single-threaded state machine with no clock, no locks and no I/O. The caller (the shard
 * thread in shardloop.c, or a unit test) hands it one event at a time together with the instant
 * it happens (struct cn_now), and carries out what comes back in a struct rn_shard_out: writes
 * to persist, actions to dispatch and to cancel, leases taken and dropped, and counts.
 *
 * THE COMMIT BARRIER
 * - A step whose output must be durable (action results consumed, a new snapshot, an outcome)
 *   becomes one write; the instance is then WRITING (HANDING_BACK when the write hands it
 *   back): its actions and timers are held, and come out only with the ACK of that write. So
 *   an action is never dispatched, a timer never armed and an instance never released before
 *   the write that records them has committed. An instance's states, drawn and asserted, are
 *   in shard.c (enum inst_state):
 *       RUNNING --a write--> WRITING --its ACK, still running--> RUNNING
 *       RUNNING --a hand-back--> HANDING_BACK --its ACK--> (gone)
 *       WRITING --its ACK: the outcome committed, the lease lost, the write failed--> (gone)
 * - An instance has at most one write in flight. Events that arrive meanwhile (results,
 *   timers) wait on the instance, in order, and are applied after the ACK.
 * - An ACK that says the write was fenced off (the lease was lost), or could not be made at all
 *   (the runner is stopping with storage down), evicts the instance without another write: the
 *   runner that holds the lease now, or the next claim, continues from the last committed state.
 * - ACKs and lease losses carry the claim token they concern: one for a token the instance no
 *   longer holds (it was claimed again meanwhile) is stale and changes nothing.
 * - An instance that leaves without finishing (lease lost, replaced by a new claim, handed
 *   back) is withdrawn from the pool: its queued attempts never start here, its running ones
 *   are cancelled, and their outcomes are not waited for. The runner that holds the lease
 *   now runs them from the committed state.
 *
 * CHILD WORKFLOWS
 * - A child call's request is not dispatched: it rides in the write that records the call
 *   (struct rn_child_start), and that write's ACK says what became of it: a `start` call gets
 *   the child's id as its result then, a call that could not start (no such workflow, inputs
 *   that do not fit, too deep) its error; a `run` call waits for the child's outcome, which
 *   comes as a RESULT already recorded (the child's final write recorded it).
 * - A finishing child's write carries its outcome for its parent (rn_child_outcome).
 * - Calls the executor stops waiting for, and every child of an instance that is cancelled or
 *   times out, are listed in out->reaps, to cancel once the write that dropped them committed.
 * - An instance that only waits for children is handed back after evict_child_wait_ms without
 *   an answer (a timer checks), due at its next timer, its deadline, or a day from now.
 *
 * Other duties: timers (a heap on the wall clock; a timer whose instance is gone is dropped),
 * handing back a long sleep (evict_sleep_threshold_ms), failing an instance that cannot resume
 * (StateError, through the fenced write path, so it fails alone), and handing every instance
 * back at shutdown.
 *
 * Threads: none. One shard is owned by one thread; nothing here locks or blocks.
 */
#ifndef RUNNER_SHARD_H
#define RUNNER_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/clock.h"
#include "runner/core/lathist.h"
#include "runner/core/wreq.h"
#include "runner/exec/exec.h"
#include "runner/pool/pool.h"
#include "runner/store/backend.h"

enum rn_sev_kind {
    RN_SEV_NEW,    /* an instance was claimed (from the claimer) */
    RN_SEV_RESULT, /* an action attempt's outcome (from the pool) */
    RN_SEV_ACK,    /* a write committed, was fenced off, or could not be made (persister) */
    RN_SEV_LOST,   /* the lease keeper found the lease gone */
    RN_SEV_CANCEL, /* cancel the instance, if held here (canceller): value = the reason */
};

/* An event for one instance. Made with rn_sev_new, freed with rn_sev_free (which releases what
 * rn_shard_apply did not take). */
struct rn_sev {
    enum rn_sev_kind kind;
    struct rn_iid iid;
    struct rn_sev *next; /* the shard thread's inbox link */
    /* NEW */
    struct rn_claimed claimed; /* owned; the shard takes parts of it */
    const struct ir_dag *dag;  /* the version's template, alive until the runner stops */
    int64_t claimed_mono_us;   /* when it was claimed (for claim-to-first-dispatch) */
    /* RESULT; CANCEL: value only */
    struct rn_xid exec_id;
    uint32_t attempt;
    bool ok;
    struct ir_val value; /* owned */
    bool child;          /* RESULT: a child's outcome, already recorded (canceller), not an
                            attempt of the pool's */
    bool force;          /* CANCEL: asked with --force (no cleanup, or abandon the one under
                            way) */
    /* ACK and LOST: the claim token the write was made, or the lease was held, under */
    struct rn_token lock;
    /* ACK */
    bool lost;                       /* fenced off: the lease was gone, nothing was written */
    bool write_failed;               /* not written at all (stopping with storage down) */
    struct rn_child_start *children; /* the write's child starts, with their status (owned;
                                        inputs None) */
    size_t nchildren;
    struct rn_wait *waits; /* the write's waits that it answered (owned: values; keys and
                              timeout values None) */
    size_t nwaits;
    struct rn_join *joins; /* the write's waits for started children, with what became of them
                              (owned, values owned) */
    size_t njoins;
    struct rn_send *sends; /* the write's signals, with what became of them (owned; payloads
                              None) */
    size_t nsends;
};

struct rn_sev *rn_sev_new(enum rn_sev_kind kind, struct rn_iid iid);
void rn_sev_free(struct rn_sev *e);

/* A lease to add to or remove from the lease keeper's registry, in the order they happened. */
struct rn_lease_op {
    bool take; /* true: now held under lock; false: forgotten */
    struct rn_iid iid;
    struct rn_token lock;
};

/* Children of parent to cancel: those of the calls exec_ids[0..n) (malloc'd), or all of them
 * (n == 0: the parent was cancelled or timed out). */
struct rn_shard_reap {
    struct rn_iid parent;
    struct rn_xid *exec_ids;
    size_t n;
};

/* What the caller must carry out after rn_shard_apply / rn_shard_fire / rn_shard_hand_back,
 * in this order: lease ops, writes (to the persister), withdrawals, cancels, dispatches (to
 * the pool). */
struct rn_shard_out {
    struct {
        struct rn_wreq **items; /* owned: hand to the persister, or free */
        size_t len, cap;
    } writes;
    struct {
        struct rn_pool_dispatch *items; /* kwargs retained by the output */
        size_t len, cap;
    } dispatches;
    struct {
        struct rn_lease *items; /* leases this runner no longer holds (lost, a stale copy
                                   replaced by a new claim, handed back): every attempt
                                   dispatched under them, queued or running, must be
                                   withdrawn (rn_pool_withdraw) */
        size_t len, cap;
    } withdrawals;
    struct {
        struct rn_xid *items; /* execution ids whose running attempts should stop */
        size_t len, cap;
    } cancels;
    struct {
        struct rn_lease_op *items;
        size_t len, cap;
    } leases;
    struct {
        struct rn_lease_op *items; /* instances handed back at shutdown: release their leases */
        size_t len, cap;
    } handed_back;
    struct {
        struct rn_shard_reap *items; /* children no longer waited for, to cancel (after the
                                        write that stopped waiting committed); owned */
        size_t len, cap;
    } reaps;
    struct {
        struct rn_late_result *items; /* results that came after their instance's outcome was
                                         committed (or for an instance not held here): to record
                                         (backend record_late); values owned by the output */
        size_t len, cap;
    } late;
    uint64_t completed; /* instances whose COMPLETED outcome committed */
    uint64_t failed;    /* FAILED, CANCELLED or TIMED_OUT committed */
    uint64_t evicted;   /* handed back while sleeping */
    uint64_t lost;      /* evicted for a lost lease */
    uint64_t committed; /* writes acknowledged as written */
    uint64_t removed;   /* instances this shard stopped holding (for any reason) */
    bool large_freed;   /* a large instance was let go: give free memory back to the system */
};

/* Empties an output after it was carried out: frees writes still in it, releases kwargs. */
void rn_shard_out_clear(struct rn_shard_out *o);
void rn_shard_out_fini(struct rn_shard_out *o);

struct rn_shard_cfg {
    uint32_t index; /* stamped on writes, so their ACKs come back here */
    struct rn_exec_cfg exec;
    uint32_t evict_sleep_threshold_ms; /* sleeps longer than this are handed back */
    /* An instance that waits only for child workflows (nothing on a worker, no timer sooner
     * than evict_sleep_threshold_ms) is handed back once no child has answered for this long
     * (0: at once); a child's outcome makes it due again. */
    uint32_t evict_child_wait_ms;
    uint32_t max_child_depth; /* children nest at most this deep (the root is depth 0) */
};

struct rn_shard;

struct rn_shard *rn_shard_new(const struct rn_shard_cfg *cfg);
/* Forgets every instance without output (the runner is gone) and frees the shard. */
void rn_shard_free(struct rn_shard *sh);

/* Applies one event at instant now; appends what to carry out to *out. Takes what it keeps
 * out of e (the caller still frees e). */
void rn_shard_apply(struct rn_shard *sh, struct rn_sev *e, struct cn_now now,
                    struct rn_shard_out *out);
/* Fires every timer due at now.wall_ms. */
void rn_shard_fire(struct rn_shard *sh, struct cn_now now, struct rn_shard_out *out);
/* The wall-clock instant the next timer is due; false when none is armed. */
bool rn_shard_next_timer(const struct rn_shard *sh, int64_t *at_wall_ms);
/* Shutdown: forgets every instance, listing each (with its token) in out->handed_back so that
 * its lease is cleared and another runner continues it at once. */
void rn_shard_hand_back(struct rn_shard *sh, struct rn_shard_out *out);

/* Instances held now. */
size_t rn_shard_count(const struct rn_shard *sh);
/* Instances with a write in flight or actions dispatched and not reported: what a graceful
 * stop waits for. */
size_t rn_shard_busy(const struct rn_shard *sh);
/* Whether the shard holds instance iid, and if so whether it is writing. */
bool rn_shard_has(const struct rn_shard *sh, struct rn_iid iid, bool *writing);
/* Claim-to-first-dispatch latency of this shard's instances so far. */
const struct rn_lathist *rn_shard_claim_latency(const struct rn_shard *sh);

#endif
