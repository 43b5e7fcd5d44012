/* SPDX-License-Identifier: MIT */
/*
 * Cleanup after a cancel or a workflow timeout (docs/semantics.md, "Cancel, timeout and
 * finally"). Owns the instance's cleanup state (rn_instance.cleanup); runs on the thread that
 * steps the instance, like the rest of the executor.
 *
 * An interrupted instance whose live nodes have finally blocks around them does not end at once:
 * every live node stops (running attempts cancelled, waits withdrawn, children cancelled, timers
 * dropped) and the interruption's error (Cancelled, WorkflowTimeout) is raised where it stood.
 * While the instance cleans up, only finally blocks handle errors (run_except skips every
 * `except`), fail_fast waits for every branch, and whatever reaches the top (the error, another
 * one a cleanup raised, or the step limit) ends the instance with the interruption's outcome.
 * A bound (rn_exec_cfg.cleanup_timeout_ms, a timer of its own id) abandons a cleanup that takes
 * too long; a forced cancel abandons it at once. The state rides in the snapshot (format 3), so a
 * runner that resumes the instance resumes the cleanup, not the interrupted work; with it goes
 * the snapshot from just before the interruption, which a redrive (cairn.retry) starts from.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"
#include "runner/exec/errors.h"
#include "runner/exec/exec_int.h"

/* Whether an error raised at template node n meets a finally block on its way out. */
static bool
finally_above(const struct rn_instance *in, uint32_t n)
{
    uint32_t hops;

    for (hops = 0; hops <= in->dag->nnodes; hops++) {
        uint32_t target = tnode(in, n)->exc;
        if (target == IR_NO_NODE) {
            return false;
        }
        if (ir_node_is_finally(tnode(in, target))) {
            return true;
        }
        n = target; /* an except or an aggregate raises on to its own handler */
    }
    return false; /* a cycle: a corrupt template (ir_dag_check refuses one) */
}

/* The error the instance ends with after its cleanup: the interruption's, with what stopped the
 * cleanup short in its details (key: why), if anything did. Consumes why_val. */
static struct ir_val
ending_error(struct rn_instance *in, const char *key, struct ir_val why_val)
{
    const struct ir_val *msg = ir_map_get(in->cleanup.err, "message", 7);
    struct ir_val details, out;

    if (key == NULL) {
        ir_val_release(why_val);
        return ir_val_retain(in->cleanup.err);
    }
    if (ir_map_new(1, &details) != CN_OK || ir_map_set_cstr(&details, key, why_val) != CN_OK ||
        rn_error_detailed(in->cleanup.outcome == RN_TIMED_OUT ? RN_ERR_WORKFLOW_TIMEOUT
                                                              : RN_ERR_CANCELLED,
                          msg != NULL && msg->type == IR_T_STR ? ir_str_data(*msg) : "cancelled",
                          details, &out) != CN_OK) {
        return ir_val_retain(in->cleanup.err); /* the details are a courtesy */
    }
    return out;
}

struct ir_val
rn_ex_cleanup_result(struct rn_instance *in, enum rn_outcome outcome, struct ir_val v)
{
    if (outcome == (enum rn_outcome) in->cleanup.outcome) {
        return v; /* abandoned: v is the ending error already */
    }
    if (outcome == RN_FAILED && !ir_val_equal(v, in->cleanup.err)) {
        return ending_error(in, "cleanup_error", v); /* the cleanup raised an error of its own */
    }
    ir_val_release(v);
    return ending_error(in, NULL, ir_null());
}

/* Abandons the cleanup under way: the instance ends now (rn_ex_finish stops what still runs). */
static void
abandon(struct rn_instance *in, const char *why)
{
    struct ir_val w, err;

    if (ir_str_from_cstr(why, &w) != CN_OK) {
        rn_ex_oom(in);
        return;
    }
    err = ending_error(in, "cleanup_abandoned", w);
    rn_ex_finish(in, in->cleanup.outcome, err);
}

void
rn_ex_cleanup_timer_out(struct rn_instance *in)
{
    struct rn_timer t;

    t.exec_id = in->cleanup.timer;
    t.kind = RN_TIMER_DEADLINE;
    t.at_ms = in->cleanup.until;
    in->out->timed = true;
    if (CN_VEC_PUSH(&in->out->timers, t) != CN_OK) {
        rn_ex_oom(in);
    }
}

bool
rn_ex_cleanup_timer(struct rn_instance *in, const struct rn_event *ev)
{
    char why[96];

    if (!rn_ex_cleaning(in) || !rn_xid_eq(ev->exec_id, in->cleanup.timer)) {
        return false;
    }
    if (in->now < in->cleanup.until) {
        in->stats.stale_events++;
        return true;
    }
    (void) snprintf(why, sizeof(why), "the cleanup did not finish within %" PRId64 " ms",
                    in->cfg.cleanup_timeout_ms);
    abandon(in, why);
    return true;
}

bool
rn_instance_cleaning(const struct rn_instance *in)
{
    return rn_ex_cleaning(in) && in->outcome == RN_RUNNING;
}

void
rn_ex_interrupt(struct rn_instance *in, enum rn_outcome outcome, struct ir_val err, bool force)
{
    uint32_t *live;
    size_t i, n = 0;
    bool cleans = false;

    if (rn_ex_cleaning(in)) {
        /* Cleaning up already: a forced cancel abandons it; anything else (the cancel read
         * again by a new claim, the deadline passing meanwhile) changes nothing. */
        ir_val_release(err);
        if (force) {
            abandon(in, "cancelled with --force");
        } else {
            in->stats.stale_events++;
        }
        return;
    }
    for (i = 0; i < in->x.len && !force && !cleans; i++) {
        const struct rn_xnode *x = &in->x.items[i];
        cleans = x->status != RN_X_FREE && x->status != RN_X_WAITING && finally_above(in, x->node);
    }
    if (!cleans) {
        rn_ex_finish(in, outcome, err);
        return;
    }
    /* Which nodes stop, listed before any moves: raising at one may free or push others. */
    if ((live = calloc(in->x.len, sizeof(*live))) == NULL) {
        ir_val_release(err);
        rn_ex_oom(in);
        return;
    }
    for (i = 0; i < in->x.len; i++) {
        uint8_t st = in->x.items[i].status;
        if (st != RN_X_FREE && st != RN_X_WAITING) {
            live[n++] = (uint32_t) i;
        }
    }
    cn_buf_clear(&in->cleanup.before);
    if (rn_instance_snapshot(in, &in->cleanup.before) != CN_OK) {
        free(live);
        ir_val_release(err);
        rn_ex_oom(in);
        return;
    }
    in->cleanup.outcome = (uint8_t) outcome;
    in->cleanup.err = err;
    in->cleanup.until = in->now + in->cfg.cleanup_timeout_ms;
    rn_ex_new_uuid(in, &in->cleanup.timer);
    in->out->cleanup_until_ms = in->cleanup.until;
    in->out->snapshot_needed = true;
    rn_ex_cleanup_timer_out(in);
    for (i = 0; i < n && in->rv == CN_OK && in->outcome == RN_RUNNING; i++) {
        struct rn_xnode *x = &in->x.items[live[i]];
        if (x->status == RN_X_FREE || !rn_ex_x_stop(in, live[i])) {
            continue; /* freed by a branch that reported before it (cannot happen: the list
                         holds no aggregate) */
        }
        rn_ex_raise_error(in, live[i], ir_val_retain(err));
    }
    free(live);
}
