/* SPDX-License-Identifier: MIT */
/*
 * A test driver for the executor: compiles a workflow, runs it to completion against actions
 * implemented in C (below), with a simulated clock, and plays the persister: after each step it
 * appends the step's done records to a results table and keeps the latest snapshot when the
 * step asks for one. With crash points it throws the instance away after a step and rebuilds it
 * from the last snapshot plus the results table, as a new runner would after a crash.
 *
 * Actions: std.echo(value) -> value; std.noop() -> None; std.add(a, b) -> a + b;
 * std.flaky(key, failures) -> fails with FlakyError while attempt <= failures, then
 * {"key": key, "attempt": attempt}; std.fail(type, message, bases) -> that error;
 * std.fail_if(value, bad) -> error BadValue if value in bad, else value; std.hang() -> never
 * answers (its deadline timer fires); std.hash(data, iterations) -> a hex digest string;
 * std.recall(failures) -> fails like std.flaky, then returns the previous attempt's error
 * message from its request (None on a first attempt); std.until(key, failures) -> fails with
 * NotYet on its first `failures` calls with that key (across attempts and execution ids), then
 * returns the number of calls. Cancelled attempts are dropped, as the
 * pool drops them.
 */
#ifndef TESTS_SUPPORT_EXEC_DRIVER_H
#define TESTS_SUPPORT_EXEC_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/exec/exec.h"

struct t_opts {
    int crash_after_step;  /* 0: never; k: crash and rehydrate after step k (once) */
    bool crash_every_step; /* crash and rehydrate after every step */
    bool one_at_a_time;    /* answer one pending action per step instead of all */
    int64_t default_timeout_ms;
    uint64_t max_inline_steps; /* the executor's budget per step; 0: its default */
    int max_steps;             /* safety net; 0 = 100000 */
    int redrives;              /* redrive (cairn.retry) a run that fails, up to this many times */
    /* As the shard does: a first step that is not `timed` writes no snapshot (its claim records
     * it), and a crash or redrive resumes through rn_instance_resume. */
    bool first_step_by_claim;
    /* Also as the shard does: a later step that rn_step_by_results allows records its results,
     * numbered as steps, and no snapshot, up to replay_max of them in a row (0:
     * RN_STEPLOG_REPLAY_MAX). */
    bool steps_by_results;
    uint32_t replay_max;
    bool crash_after_start; /* crash and rehydrate once right after the first step */
    int64_t crash_takes_ms; /* the clock moves on this much at each crash (the next runner
                               claims the instance later): what a step computed from the clock
                               must come back as it was, not be computed again */
    bool crash_is_pause;    /* at each crash point the clock moves on crash_takes_ms and
                               nothing crashes: the run the crashing one must match */
    /* After step k (0: never), the next step's only event is `interrupt` (RN_EV_CANCEL or
     * RN_EV_TIMEOUT; 0 means RN_EV_CANCEL), nothing pending answered in it; force_after_step
     * sends a forced cancel the same way. */
    int interrupt_after_step;
    enum rn_event_kind interrupt;
    int force_after_step;
    int again_after_step;       /* the same interruption again, not forced */
    int64_t cleanup_timeout_ms; /* the executor's cleanup bound; 0: its default */
};

struct t_result {
    enum rn_outcome outcome;
    char *json;       /* COMPLETED: the result as JSON; FAILED: the error as JSON; malloc'd */
    char *error_type; /* FAILED: the error's type; malloc'd or NULL */
    int steps;
    int crashes;
    int redrives;
    int dispatches;     /* action requests seen */
    int cancels;        /* attempts the executor cancelled (fail_fast, timeouts, the end) */
    int duplicate_done; /* requests for an (id, attempt) that already had a recorded result */
    int stale;          /* events the executor dropped as stale, summed over incarnations */
    size_t max_live_nodes;
    size_t snapshots;     /* snapshots written */
    bool first_unwritten; /* first_step_by_claim: the first step wrote no snapshot */
    int by_results;       /* steps_by_results: steps recorded by their results alone */
    int replayed;         /* resumes (crash or redrive) that replayed such steps */
    size_t first_snapshot_bytes, last_snapshot_bytes, max_snapshot_bytes;
    int64_t elapsed_ms;     /* simulated time from start to outcome */
    char *echoed;           /* the values std.echo answered with, as JSON, comma-separated, in
                               order; malloc'd ("" when none) */
    int64_t backoff_ms[64]; /* delays of the retry timers, in the order they were set */
    int nbackoff;
};

/* Runs src with input_json. Asserts (Criterion) on driver-level failures such as a stuck
 * instance. Free the result with t_result_free. */
struct t_result t_run(const char *src, const char *input_json, const struct t_opts *opts);
void t_result_free(struct t_result *r);
/* Forgets std.until's call counts. */
void t_until_reset(void);

#endif
