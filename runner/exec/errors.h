/* SPDX-License-Identifier: MIT */
/*
 * The error types the runner raises itself, with their bases, defined once. ir/ knows only
 * the types expressions raise (ir/error.h); these are built here with ir_error_new and an
 * explicit bases list, so `except TimeoutError` catches an ActionTimeout because this table
 * says so (docs/language.md "Policies", docs/semantics.md "Actions, retries and timeouts").
 * Pure: no I/O, no state; safe from any thread.
 *
 * Not listed: the inline types the runner sometimes raises too (ValueError for an attempt the
 * pool cannot send), which ir_raise already gives Python's bases. Workers report Cancelled for
 * an attempt they stopped (worker-protocol/, docs/protocol.md) under the same name.
 */
#ifndef RUNNER_ERRORS_H
#define RUNNER_ERRORS_H

#include <stdbool.h>

#include "ir/base/err.h"
#include "ir/value.h"
#include "runner/exec/exec.h"
#include "runner/exec/ids.h"

/* X(ENUM, type, base, base2): the type's name and its bases besides "Exception" (NULL: none).
 *   Cancelled      the instance was cancelled (cairn.cancel): its error when it ends
 *                  `cancelled`, as cairn.cancel records for one it cancels itself
 *   ActionTimeout  an attempt still running at its deadline (executor timer, pool timer)
 *   WorkerLost     the worker running an attempt disconnected, or the pool stopped
 *   StateError     an instance cannot resume (its snapshot does not decode): a poison instance
 *   WorkflowError  an instance's workflow version cannot run (it no longer compiles)
 *   WorkflowTimeout  an instance still unfinished at its deadline (`fn main(...) [timeout: D]`,
 *                  or the enqueue's): its error when it ends `timed_out`. No handler sees it
 *   StepLimitExceeded  one step ran more inline nodes than its budget (struct rn_exec_cfg):
 *                  the executor fails the instance with it directly, no handler ever sees it,
 *                  so it has no base: one would only suggest that `except RuntimeError` (say)
 *                  could catch it. Uncatchable because a catch-all `try` inside the loop would
 *                  otherwise keep the loop, and the shard it runs on, going.
 *   ChildWorkflowError      a child workflow (`run wf(...)`) failed; built by rn_child_outcome,
 *                  which puts the child's own error type and bases among its bases
 *   ChildWorkflowCancelled  the child was cancelled
 *   ChildWorkflowTimeout    the child passed its deadline (its own `[timeout: D]` or the call's)
 *   ChildWorkflowNotFound   no such workflow (or version) is registered when the call runs
 *   ChildInputError         the call's inputs do not fit the child's `main` parameters
 *   ChildDepthExceeded      the child would nest deeper than the runner's CAIRN_MAX_CHILD_DEPTH
 *   WaitTimeout    a `wait` got nothing within its [timeout: D] (and has no [default: v])
 *   SignalError    a `signal` was refused: no such instance, one that has ended, a signal its
 *                  workflow never waits for, a limit (details {"reason", "to", "signal"}) */
#define RN_ERRORS(X)                                                                      \
    X(RN_ERR_CANCELLED, "Cancelled", NULL, NULL)                                          \
    X(RN_ERR_ACTION_TIMEOUT, "ActionTimeout", "TimeoutError", NULL)                       \
    X(RN_ERR_WORKER_LOST, "WorkerLost", NULL, NULL)                                       \
    X(RN_ERR_STATE, "StateError", NULL, NULL)                                             \
    X(RN_ERR_WORKFLOW, "WorkflowError", NULL, NULL)                                       \
    X(RN_ERR_STEP_LIMIT, "StepLimitExceeded", NULL, NULL)                                 \
    X(RN_ERR_WORKFLOW_TIMEOUT, "WorkflowTimeout", "TimeoutError", NULL)                   \
    X(RN_ERR_CHILD, "ChildWorkflowError", NULL, NULL)                                     \
    X(RN_ERR_CHILD_CANCELLED, "ChildWorkflowCancelled", "ChildWorkflowError", NULL)       \
    X(RN_ERR_CHILD_TIMEOUT, "ChildWorkflowTimeout", "ChildWorkflowError", "TimeoutError") \
    X(RN_ERR_CHILD_NOT_FOUND, "ChildWorkflowNotFound", "LookupError", NULL)               \
    X(RN_ERR_CHILD_INPUT, "ChildInputError", "TypeError", NULL)                           \
    X(RN_ERR_CHILD_DEPTH, "ChildDepthExceeded", NULL, NULL)                               \
    X(RN_ERR_WAIT_TIMEOUT, "WaitTimeout", "TimeoutError", NULL)                           \
    X(RN_ERR_SIGNAL, "SignalError", NULL, NULL)

#define RN_ERROR_ENUM(e, type, base, base2) e,
enum rn_error { RN_ERRORS(RN_ERROR_ENUM) RN_ERROR_COUNT_ };
#undef RN_ERROR_ENUM

/* The type name of e ("ActionTimeout"); a static string. */
const char *rn_error_name(enum rn_error e);

/* Builds the error value of type e with `message` (valid UTF-8; NULL means "") and e's bases
 * ([base, "Exception"] or ["Exception"]); details None. Borrows message. Returns CN_OK with
 * *out a new error value, CN_NOMEM, or CN_UTF8 (message not valid UTF-8); *out is untouched
 * on failure. */
CN_MUST_CHECK cn_err rn_error_new(enum rn_error e, const char *message, struct ir_val *out);
/* The same with details (None for none), which it takes whatever it returns. */
CN_MUST_CHECK cn_err rn_error_detailed(enum rn_error e, const char *message, struct ir_val details,
                                       struct ir_val *out);

/* What a finished child instance hands its parent (the value of the parent's `run` call):
 * COMPLETED: *ok and the child's result (retained); FAILED: a ChildWorkflowError whose bases
 * are the child error's type, its bases, then "ChildWorkflowError" and "Exception" (so `except
 * PaymentDeclined` catches a child's PaymentDeclined, and `except ChildWorkflowError` any child
 * failure), details {"child_id", "workflow", "error": the child's error}; CANCELLED and
 * TIMED_OUT: ChildWorkflowCancelled / ChildWorkflowTimeout with the same details. result is
 * the child's result or error (borrowed). Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err rn_child_outcome(enum rn_outcome o, struct ir_val result,
                                      struct rn_iid child_id, const char *workflow, bool *ok,
                                      struct ir_val *out);

/* Raises an error whose type is named at run time: one of the table's types gets its bases
 * from the table, any other type goes through ir_raise (the inline types' bases, else
 * ["Exception"]). Returns CN_RAISED with *out set, or CN_NOMEM / CN_UTF8 with *out untouched. */
cn_err rn_error_raise(struct ir_val *out, const char *type, const char *message);

#endif
