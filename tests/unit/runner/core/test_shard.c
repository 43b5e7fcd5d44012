/* SPDX-License-Identifier: MIT */
/*
 * The shard core driven one event at a time, with the instants stated by the test: the commit
 * barrier (nothing is dispatched before the write recording it is acknowledged), events held
 * during a write, lease loss mid-write and by heartbeat, stale ACKs after a re-claim, timers,
 * long-sleep hand-back, an unresumable snapshot, and the shutdown hand-back. No threads, no
 * database, no clock: what the shard asks for is read from its output.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/base/uuid.h"
#include "ir/error.h"
#include "runner/core/shard.h"
#include "runner/exec/errors.h"
#include "tests/support/compile_util.h"
#include "tests/support/leak.h"

TestSuite(shard, .fini = t_leak_check, .timeout = 60);

/* The actions of these two have a deadline, so their first step reads the clock and is written
 * before its actions go out, like every later step (what most tests here look at: the write
 * barrier). A first step that reads no clock goes out with no write: plain_src, below. */
static const char *const steps_src = "fn main(input: [n], output: [total]):\n"
                                     "    total = 0\n"
                                     "    for i in range(n):\n"
                                     "        r = @t.echo(value=i) [deadline: 1h]\n"
                                     "        total = total + r\n"
                                     "    return total\n";

static const char *const spread_src =
    "fn main(input: [n], output: [count]):\n"
    "    results = spread range(n):i -> @t.noop(i=i) [deadline: 1h]\n"
    "    return len(results)\n";

static const char *const plain_src = "fn main(input: [n], output: [total]):\n"
                                     "    total = 0\n"
                                     "    for i in range(n):\n"
                                     "        r = @t.echo(value=i)\n"
                                     "        total = total + r\n"
                                     "    return total\n";

static const char *const nap_src = "fn main(input: [s], output: [woke]):\n"
                                   "    sleep s\n"
                                   "    woke = @t.echo(value=\"awake\")\n"
                                   "    return woke\n";

struct h {
    struct t_compiled c;
    struct rn_shard *sh;
    struct rn_shard_out out;
    struct cn_now now;
};

static void
h_init(struct h *h, const char *src, uint32_t evict_ms)
{
    struct rn_shard_cfg cfg;

    memset(h, 0, sizeof(*h));
    h->c = t_compile(src);
    cr_assert_eq(h->c.rv, CN_OK, "%s", h->c.errors);
    memset(&cfg, 0, sizeof(cfg));
    cfg.index = 3;
    cfg.exec.default_timeout_ms = 60000;
    cfg.evict_sleep_threshold_ms = evict_ms;
    h->sh = rn_shard_new(&cfg);
    h->now.wall_ms = 1700000000000;
    h->now.mono_us = 5000000;
}

static void
h_fini(struct h *h)
{
    rn_shard_out_fini(&h->out);
    rn_shard_free(h->sh);
    t_compiled_free(&h->c);
}

/* Test ids: the tag in the first byte. */
static void
tag_bytes(uint8_t b[16], uint8_t tag)
{
    memset(b, 0, 16);
    b[0] = tag;
    b[15] = 0x5a;
}

static struct rn_iid
iid_of(uint8_t tag)
{
    struct rn_iid id;

    tag_bytes(id.b, tag);
    return id;
}

static struct rn_token
token_of(uint8_t tag)
{
    struct rn_token t;

    tag_bytes(t.b, tag);
    return t;
}

/* Applies e at the harness's instant after clearing the last output. */
static void
h_apply(struct h *h, struct rn_sev *e)
{
    rn_shard_out_clear(&h->out);
    rn_shard_apply(h->sh, e, h->now, &h->out);
    rn_sev_free(e);
}

/* Claims instance `tag` under token `lock_tag`; started_before, with the results recorded
 * since (done, ndone), for an instance an earlier claim started (no snapshot: its first step
 * went out recorded by that claim). */
static void
h_claim_as(struct h *h, uint8_t tag, uint8_t lock_tag, const char *input_json, bool started_before,
           const struct rn_done *done, size_t ndone)
{
    struct rn_iid iid = iid_of(tag);
    struct rn_sev *e;
    size_t k;

    e = rn_sev_new(RN_SEV_NEW, iid);
    e->claimed.instance_id = iid;
    e->claimed.lock = token_of(lock_tag);
    e->claimed.workflow = strdup("t");
    e->claimed.started_before = started_before;
    T_OK(ir_val_from_json(input_json, strlen(input_json), &e->claimed.input, NULL));
    if (ndone > 0) {
        e->claimed.done = calloc(ndone, sizeof(*done));
        for (k = 0; k < ndone; k++) {
            e->claimed.done[k] = done[k];
            e->claimed.done[k].value = ir_val_retain(done[k].value);
        }
        e->claimed.ndone = ndone;
    }
    e->dag = h->c.dag;
    e->claimed_mono_us = h->now.mono_us;
    h_apply(h, e);
}

static void
h_claim(struct h *h, uint8_t tag, uint8_t lock_tag, const char *input_json)
{
    h_claim_as(h, tag, lock_tag, input_json, false, NULL, 0);
}

static void
h_ack(struct h *h, uint8_t tag, uint8_t lock_tag, bool lost)
{
    struct rn_sev *e;

    e = rn_sev_new(RN_SEV_ACK, iid_of(tag));
    e->lock = token_of(lock_tag);
    e->lost = lost;
    h_apply(h, e);
}

/* The outcome of dispatch d: ok with an int value. */
static void
h_result(struct h *h, const struct rn_pool_dispatch *d, int64_t value)
{
    struct rn_sev *e = rn_sev_new(RN_SEV_RESULT, d->instance_id);

    e->exec_id = d->exec_id;
    e->attempt = d->attempt;
    e->ok = true;
    e->value = ir_int(value);
    h_apply(h, e);
}

/* Copies the output's dispatches out (their kwargs are released with the output). */
static size_t
h_take_dispatches(struct h *h, struct rn_pool_dispatch *into, size_t max)
{
    size_t n = h->out.dispatches.len < max ? h->out.dispatches.len : max, i;

    for (i = 0; i < n; i++) {
        into[i] = h->out.dispatches.items[i];
        into[i].kwargs = ir_null();
        into[i].prev_error = ir_null();
    }
    return n;
}

/* The commit barrier: the write that records an action is acknowledged before it is
 * dispatched, at every step of a sequential workflow. */
Test(shard, an_action_is_never_dispatched_before_its_write_commits)
{
    struct rn_pool_dispatch d[4];
    struct h h;
    int64_t i;

    h_init(&h, steps_src, 60000);
    h_claim(&h, 1, 11, "{\"n\": 3}");
    cr_assert_eq(h.out.leases.len, 1);
    cr_expect(h.out.leases.items[0].take);
    cr_assert_eq(h.out.writes.len, 1, "the first step must write its snapshot");
    cr_assert_not_null(h.out.writes.items[0]->w.state, "a dispatching step writes a snapshot");
    cr_expect_eq(h.out.writes.items[0]->shard, 3, "writes name their shard for the ACK");
    cr_assert_eq(h.out.dispatches.len, 0, "dispatched before its write committed");
    cr_expect_eq(rn_shard_busy(h.sh), 1);

    for (i = 0; i < 3; i++) {
        h_ack(&h, 1, 11, false);
        cr_assert_eq(h.out.committed, 1);
        cr_assert_eq(h.out.writes.len, 0);
        cr_assert_eq(h.out.dispatches.len, 1, "step %lld: the ACK releases the action",
                     (long long) i);
        cr_expect_str_eq(h.out.dispatches.items[0].action, "t.echo");
        {
            const struct ir_val *v = ir_map_get(h.out.dispatches.items[0].kwargs, "value", 5);
            cr_assert_not_null(v);
            cr_expect_eq(v->u.i, i);
        }
        cr_expect_eq(h.out.dispatches.items[0].attempt, 1);
        cr_expect_eq(h.out.dispatches.items[0].ready_us, h.now.mono_us);
        (void) h_take_dispatches(&h, d, 4);

        h.now.wall_ms += 10;
        h.now.mono_us += 10000;
        h_result(&h, &d[0], i);
        cr_assert_eq(h.out.writes.len, 1, "step %lld: the result is recorded", (long long) i);
        cr_assert_eq(h.out.writes.items[0]->w.ndone, 1);
        cr_assert_eq(h.out.dispatches.len, 0, "step %lld: dispatched before its write",
                     (long long) i);
    }
    cr_expect_eq(h.out.writes.items[0]->w.outcome, RN_COMPLETED);
    cr_expect_eq(h.out.writes.items[0]->w.result.u.i, 0 + 1 + 2);
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.completed, 1);
    cr_expect_eq(h.out.removed, 1);
    cr_assert_eq(h.out.leases.len, 1);
    cr_expect_not(h.out.leases.items[0].take, "a finished instance's lease is dropped");
    cr_expect_eq(rn_shard_count(h.sh), 0);
    cr_expect_eq(rn_shard_busy(h.sh), 0);
    cr_expect_eq(rn_shard_claim_latency(h.sh)->count, 1);
    h_fini(&h);
}

/* A new instance's first step that reads no clock is recorded by the claim: its action goes out
 * at once, with no write; every later step goes through the barrier. */
Test(shard, a_first_step_that_reads_no_clock_goes_out_with_no_write)
{
    struct rn_pool_dispatch d[4];
    struct h h;

    h_init(&h, plain_src, 60000);
    h_claim(&h, 1, 11, "{\"n\": 2}");
    cr_assert_eq(h.out.leases.len, 1);
    cr_expect_eq(h.out.writes.len, 0, "the claim records the first step");
    cr_assert_eq(h.out.dispatches.len, 1, "its action goes out at once");
    cr_expect_eq(h.out.dispatches.items[0].attempt, 1);
    cr_expect_eq(h.out.dispatches.items[0].deadline_ms, 0);
    cr_expect_eq(rn_shard_busy(h.sh), 1);
    cr_expect_eq(rn_shard_claim_latency(h.sh)->count, 1);
    (void) h_take_dispatches(&h, d, 4);

    h_result(&h, &d[0], 5);
    cr_assert_eq(h.out.writes.len, 1, "the second step is written");
    cr_assert_eq(h.out.writes.items[0]->w.ndone, 1);
    cr_expect_null(h.out.writes.items[0]->w.state, "recorded by its result alone");
    cr_expect_eq(h.out.writes.items[0]->w.done[0].step, 1, "numbered as the first such step");
    cr_expect_eq(h.out.dispatches.len, 0, "dispatched before its write committed");
    h_ack(&h, 1, 11, false);
    cr_assert_eq(h.out.dispatches.len, 1);
    (void) h_take_dispatches(&h, d, 4);
    h_result(&h, &d[0], 6);
    cr_assert_eq(h.out.writes.len, 1);
    cr_expect_eq(h.out.writes.items[0]->w.outcome, RN_COMPLETED);
    cr_expect_eq(h.out.writes.items[0]->w.result.u.i, 11);
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.completed, 1);
    cr_expect_eq(rn_shard_count(h.sh), 0);
    h_fini(&h);
}

/* The runner that held it died after the first step's action went out: the next claim runs the
 * first step again and hydrates what it would have written. Without a recorded result the same
 * attempt is requested again (at least once); with one, the action is not run again and the
 * instance goes on from its result. */
Test(shard, a_started_instance_without_a_snapshot_resumes_from_its_first_step)
{
    struct rn_pool_dispatch first[1], d[4];
    struct rn_done done;
    struct h h, again, resumed;

    h_init(&h, plain_src, 60000);
    h_claim(&h, 6, 60, "{\"n\": 2}");
    cr_assert_eq(h_take_dispatches(&h, first, 1), 1);
    h_fini(&h); /* the runner dies */

    h_init(&again, plain_src, 60000);
    h_claim_as(&again, 6, 61, "{\"n\": 2}", true, NULL, 0);
    cr_assert_eq(again.out.writes.len, 1, "a resumed instance writes its snapshot");
    cr_expect_not_null(again.out.writes.items[0]->w.state);
    cr_expect_eq(again.out.dispatches.len, 0);
    h_ack(&again, 6, 61, false);
    cr_assert_eq(again.out.dispatches.len, 1);
    cr_expect(rn_xid_eq(again.out.dispatches.items[0].exec_id, first[0].exec_id),
              "the same execution id is requested again");
    cr_expect_eq(again.out.dispatches.items[0].attempt, 1);
    cr_expect(rn_token_eq(again.out.dispatches.items[0].lock, token_of(61)));
    h_fini(&again);

    h_init(&resumed, plain_src, 60000);
    memset(&done, 0, sizeof(done));
    done.exec_id = first[0].exec_id;
    done.attempt = 1;
    done.ok = true;
    done.value = ir_int(5);
    h_claim_as(&resumed, 6, 62, "{\"n\": 2}", true, &done, 1);
    cr_assert_eq(resumed.out.writes.len, 1, "the step after the recorded result is written");
    cr_expect_eq(resumed.out.writes.items[0]->w.ndone, 0,
                 "a recorded result is not recorded again");
    cr_expect_not_null(resumed.out.writes.items[0]->w.state);
    cr_expect_eq(resumed.out.dispatches.len, 0);
    h_ack(&resumed, 6, 62, false);
    cr_assert_eq(h_take_dispatches(&resumed, d, 4), 1, "only the second action goes out");
    cr_expect_not(rn_xid_eq(d[0].exec_id, first[0].exec_id));
    h_result(&resumed, &d[0], 6);
    cr_assert_eq(resumed.out.writes.len, 1);
    cr_expect_eq(resumed.out.writes.items[0]->w.outcome, RN_COMPLETED);
    cr_expect_eq(resumed.out.writes.items[0]->w.result.u.i, 11, "the recorded 5 plus 6");
    h_ack(&resumed, 6, 62, false);
    cr_expect_eq(resumed.out.completed, 1);
    h_fini(&resumed);
}

/* Steps recorded by their results alone: each write carries its result, numbered, and no
 * snapshot, until RN_STEPLOG_REPLAY_MAX in a row, when a snapshot holding them all is written. A
 * runner that claims the instance after one of them replays the recorded steps from the last
 * snapshot and requests the action in flight again, and none that completed. */
Test(shard, steps_recorded_by_their_results_are_replayed_by_the_next_claim)
{
    struct rn_pool_dispatch d[4];
    struct rn_done done[3];
    struct h h, resumed;
    uint32_t k, snapshot_at = 0;
    int got;

    h_init(&h, plain_src, 60000);
    h_claim(&h, 7, 70, "{\"n\": 80}");
    cr_assert_eq(h_take_dispatches(&h, d, 4), 1);
    for (k = 1; k <= 70; k++) {
        h_result(&h, &d[0], 1);
        cr_assert_eq(h.out.writes.len, 1);
        if (h.out.writes.items[0]->w.state != NULL) {
            cr_expect_eq(snapshot_at, 0, "one snapshot in the first 70 steps");
            cr_expect_eq(h.out.writes.items[0]->w.state_step, k - 1, "it holds the steps before");
            cr_expect_eq(h.out.writes.items[0]->w.done[0].step, 0);
            snapshot_at = k;
        } else {
            cr_expect_eq(h.out.writes.items[0]->w.done[0].step, snapshot_at ? k - 1 : k);
        }
        h_ack(&h, 7, 70, false);
        cr_assert_eq(h_take_dispatches(&h, d, 4), 1);
    }
    cr_expect_eq(snapshot_at, 65, "a snapshot after 64 steps recorded by their results");
    h_fini(&h);

    /* What a claim reads back of a first step recorded by the claim and two steps recorded by
     * their results: the third action was in flight when the runner died. */
    h_init(&h, plain_src, 60000);
    h_claim(&h, 8, 80, "{\"n\": 4}");
    memset(done, 0, sizeof(done));
    for (k = 0; k < 3; k++) {
        cr_assert_eq(h_take_dispatches(&h, d, 4), 1);
        done[k].exec_id = d[0].exec_id;
        done[k].attempt = 1;
        done[k].ok = true;
        done[k].value = ir_int(10 + k);
        if (k == 2) {
            break;
        }
        h_result(&h, &d[0], 10 + (int) k);
        cr_assert_eq(h.out.writes.len, 1);
        done[k].step = h.out.writes.items[0]->w.done[0].step;
        cr_expect_eq(done[k].step, k + 1);
        h_ack(&h, 8, 80, false);
    }
    h_fini(&h); /* the runner dies with the third action in flight */

    h_init(&resumed, plain_src, 60000);
    h_claim_as(&resumed, 8, 81, "{\"n\": 4}", true, done, 2);
    cr_assert_eq(resumed.out.writes.len, 1, "a resumed instance writes its snapshot");
    cr_expect_not_null(resumed.out.writes.items[0]->w.state);
    cr_expect_eq(resumed.out.writes.items[0]->w.state_step, 2, "holding both replayed steps");
    cr_expect_eq(resumed.out.writes.items[0]->w.ndone, 0, "nothing is recorded again");
    h_ack(&resumed, 8, 81, false);
    got = h_take_dispatches(&resumed, d, 4);
    cr_assert_eq(got, 1, "only the action in flight goes out again");
    cr_expect(rn_xid_eq(d[0].exec_id, done[2].exec_id), "the same execution id");
    cr_expect_eq(d[0].attempt, 1);
    h_result(&resumed, &d[0], 12);
    cr_assert_eq(resumed.out.writes.len, 1);
    cr_expect_eq(resumed.out.writes.items[0]->w.done[0].step, 3, "numbering goes on");
    h_ack(&resumed, 8, 81, false);
    cr_assert_eq(h_take_dispatches(&resumed, d, 4), 1);
    h_result(&resumed, &d[0], 13);
    cr_assert_eq(resumed.out.writes.len, 1);
    cr_expect_eq(resumed.out.writes.items[0]->w.outcome, RN_COMPLETED);
    cr_expect_eq(resumed.out.writes.items[0]->w.result.u.i, 10 + 11 + 12 + 13);
    h_ack(&resumed, 8, 81, false);
    h_fini(&resumed);
}

/* A result that arrives while the instance's write is in flight waits, and is applied (and
 * written) once that write is acknowledged. */
Test(shard, events_during_a_write_are_held_and_applied_after_it)
{
    struct rn_pool_dispatch d[4];
    struct h h;

    h_init(&h, spread_src, 60000);
    h_claim(&h, 2, 22, "{\"n\": 2}");
    cr_assert_eq(h.out.writes.len, 1);
    h_ack(&h, 2, 22, false);
    cr_assert_eq(h_take_dispatches(&h, d, 4), 2);

    h_result(&h, &d[0], 0);
    cr_assert_eq(h.out.writes.len, 1, "the first result is recorded");
    cr_expect_eq(h.out.writes.items[0]->w.outcome, RN_RUNNING);

    h_result(&h, &d[1], 0);
    cr_expect_eq(h.out.writes.len, 0, "a second write while one is in flight");
    cr_expect_eq(h.out.dispatches.len, 0);
    cr_expect_eq(h.out.completed, 0);

    h_ack(&h, 2, 22, false);
    cr_assert_eq(h.out.writes.len, 1, "the held result is applied after the ACK");
    cr_expect_eq(h.out.writes.items[0]->w.ndone, 1);
    cr_expect_eq(h.out.writes.items[0]->w.outcome, RN_COMPLETED);
    cr_expect_eq(h.out.writes.items[0]->w.result.u.i, 2);

    h_ack(&h, 2, 22, false);
    cr_expect_eq(h.out.completed, 1);
    cr_expect_eq(rn_shard_count(h.sh), 0);
    h_fini(&h);
}

/* A write fenced off (the lease was lost meanwhile) evicts the instance: no further write, no
 * dispatch, and later results for it are dropped. */
Test(shard, a_lease_lost_mid_write_evicts_without_further_writes)
{
    struct rn_pool_dispatch d[4];
    struct h h;

    h_init(&h, steps_src, 60000);
    h_claim(&h, 3, 33, "{\"n\": 3}");
    h_ack(&h, 3, 33, false);
    cr_assert_eq(h_take_dispatches(&h, d, 4), 1);
    h_result(&h, &d[0], 0);
    cr_assert_eq(h.out.writes.len, 1);

    h_ack(&h, 3, 33, true);
    cr_expect_eq(h.out.lost, 1);
    cr_assert_eq(h.out.withdrawals.len, 1, "its attempts must leave the pool");
    cr_expect(rn_iid_eq(h.out.withdrawals.items[0].instance_id, iid_of(3)));
    cr_expect(rn_token_eq(h.out.withdrawals.items[0].lock, token_of(33)));
    cr_expect_eq(h.out.writes.len, 0, "a write after the lease was lost");
    cr_expect_eq(h.out.dispatches.len, 0, "a dispatch after the lease was lost");
    cr_expect_eq(h.out.committed, 0);
    cr_expect_eq(h.out.removed, 1);
    cr_assert_eq(h.out.leases.len, 1);
    cr_expect_not(h.out.leases.items[0].take);
    cr_expect_eq(rn_shard_count(h.sh), 0);
    cr_expect_eq(rn_shard_busy(h.sh), 0);

    h_result(&h, &d[0], 0); /* a late duplicate */
    cr_expect_eq(h.out.writes.len + h.out.dispatches.len + h.out.leases.len, 0);
    h_fini(&h);
}

/* The heartbeat's LOST waits for an in-flight write's ACK (which decides), and evicts an idle
 * instance at once; a LOST for another token changes nothing. */
Test(shard, a_lost_lease_evicts_an_idle_instance_and_defers_to_a_write_in_flight)
{
    struct rn_iid iid;
    struct rn_sev *e;
    struct h h;

    h_init(&h, steps_src, 60000);
    h_claim(&h, 4, 44, "{\"n\": 2}");
    iid = iid_of(4);
    e = rn_sev_new(RN_SEV_LOST, iid);
    e->lock = token_of(44);
    h_apply(&h, e);
    cr_expect_eq(h.out.lost, 0, "evicted while its write was in flight");
    cr_expect_eq(h.out.withdrawals.len, 0);
    cr_expect(rn_shard_has(h.sh, iid, NULL));

    h_ack(&h, 4, 44, false);
    cr_assert_eq(h.out.dispatches.len, 1);
    e = rn_sev_new(RN_SEV_LOST, iid);
    e->lock = token_of(45); /* some other claim's token */
    h_apply(&h, e);
    cr_expect_eq(h.out.lost, 0, "a LOST for another token evicted the instance");
    cr_expect_eq(h.out.withdrawals.len, 0, "a LOST for another token withdrew the instance");

    e = rn_sev_new(RN_SEV_LOST, iid);
    e->lock = token_of(44);
    h_apply(&h, e);
    cr_expect_eq(h.out.lost, 1);
    cr_assert_eq(h.out.withdrawals.len, 1, "the dispatched action must leave the pool");
    cr_expect(rn_iid_eq(h.out.withdrawals.items[0].instance_id, iid));
    cr_expect(rn_token_eq(h.out.withdrawals.items[0].lock, token_of(44)));
    cr_expect_eq(h.out.writes.len, 0);
    cr_expect_not(rn_shard_has(h.sh, iid, NULL));
    h_fini(&h);
}

/* Claimed again under a new token while a stale copy is held: the copy is replaced, the old
 * write's ACK is ignored, and the held count stays right. */
Test(shard, a_reclaim_replaces_the_stale_copy_and_ignores_its_acks)
{
    struct rn_iid iid;
    bool writing = false;
    struct h h;

    h_init(&h, steps_src, 60000);
    iid = iid_of(5);
    h_claim(&h, 5, 50, "{\"n\": 2}");
    cr_assert_eq(h.out.writes.len, 1);
    h_claim(&h, 5, 51, "{\"n\": 2}");
    cr_expect_eq(h.out.removed, 1, "the stale copy is let go");
    cr_expect_eq(h.out.lost, 1);
    cr_assert_eq(h.out.withdrawals.len, 1, "the stale copy's attempts must leave the pool");
    cr_expect(rn_iid_eq(h.out.withdrawals.items[0].instance_id, iid));
    cr_expect(rn_token_eq(h.out.withdrawals.items[0].lock, token_of(50)),
              "only the stale claim's attempts are withdrawn");
    cr_assert_eq(h.out.leases.len, 2);
    cr_expect_not(h.out.leases.items[0].take);
    cr_expect(h.out.leases.items[1].take);
    cr_expect_eq(h.out.leases.items[1].lock.b[0], 51);
    cr_assert_eq(h.out.writes.len, 1);
    cr_expect_eq(h.out.writes.items[0]->w.lock.b[0], 51, "the new copy writes under the new token");
    cr_expect_eq(rn_shard_count(h.sh), 1);

    h_ack(&h, 5, 50, true); /* the old write, fenced off */
    cr_expect_eq(h.out.lost + h.out.removed + h.out.dispatches.len, 0, "a stale ACK acted on");
    cr_expect(rn_shard_has(h.sh, iid, &writing));
    cr_expect(writing);
    h_ack(&h, 5, 51, false);
    cr_expect_eq(h.out.dispatches.len, 1);
    h_fini(&h);
}

/* A durable sleep arms a timer only after its snapshot commits; the timer fires at its instant,
 * not before, and the action after it goes through the barrier again. */
Test(shard, timers_fire_at_their_instant_after_the_commit)
{
    int64_t at = 0;
    struct h h;

    h_init(&h, nap_src, 60000);
    h_claim(&h, 6, 66, "{\"s\": 5}");
    cr_assert_eq(h.out.writes.len, 1);
    cr_expect_not(rn_shard_next_timer(h.sh, &at), "a timer armed before its write committed");
    h_ack(&h, 6, 66, false);
    cr_assert(rn_shard_next_timer(h.sh, &at));
    cr_expect_eq(at, h.now.wall_ms + 5000);

    h.now.wall_ms += 4999;
    rn_shard_out_clear(&h.out);
    rn_shard_fire(h.sh, h.now, &h.out);
    cr_expect_eq(h.out.writes.len + h.out.dispatches.len, 0, "fired early");
    h.now.wall_ms += 1;
    rn_shard_fire(h.sh, h.now, &h.out);
    cr_assert_eq(h.out.writes.len, 1);
    cr_expect_eq(h.out.dispatches.len, 0);
    cr_expect_not(rn_shard_next_timer(h.sh, &at));
    h_ack(&h, 6, 66, false);
    cr_assert_eq(h.out.dispatches.len, 1);
    cr_expect_str_eq(h.out.dispatches.items[0].action, "t.echo");
    h_fini(&h);
}

/* A sleep longer than the threshold with nothing in flight is handed back until due: a release
 * write carrying the wake time, then the instance is gone. */
Test(shard, a_long_sleep_is_handed_back_until_due)
{
    struct h h;

    h_init(&h, nap_src, 1000);
    h_claim(&h, 7, 77, "{\"s\": 60}");
    h_ack(&h, 7, 77, false);
    cr_assert_eq(h.out.writes.len, 1);
    cr_expect(h.out.writes.items[0]->w.release);
    cr_expect_eq(h.out.writes.items[0]->w.wake_at_ms, h.now.wall_ms + 60000);
    cr_expect_eq(rn_shard_count(h.sh), 1);
    h_ack(&h, 7, 77, false);
    cr_expect_eq(h.out.evicted, 1);
    cr_expect_eq(h.out.removed, 1);
    cr_expect_eq(rn_shard_count(h.sh), 0);
    h_fini(&h);
}

/* A snapshot that does not decode fails its instance alone, with StateError, through a fenced
 * write: nothing is dispatched. */
Test(shard, an_unresumable_snapshot_fails_the_instance_with_state_error)
{
    struct rn_iid iid;
    struct rn_sev *e;
    struct h h;

    h_init(&h, steps_src, 60000);
    iid = iid_of(8);
    e = rn_sev_new(RN_SEV_NEW, iid);
    e->claimed.instance_id = iid;
    e->claimed.lock = token_of(88);
    e->claimed.workflow = strdup("t");
    e->claimed.state = strdup("not msgpack at all");
    e->claimed.state_len = strlen("not msgpack at all");
    e->dag = h.c.dag;
    h_apply(&h, e);
    cr_assert_eq(h.out.writes.len, 1);
    cr_expect_eq(h.out.dispatches.len, 0);
    cr_expect_eq(h.out.writes.items[0]->w.outcome, RN_FAILED);
    cr_expect_str_eq(ir_error_type(h.out.writes.items[0]->w.result), "StateError");
    h_ack(&h, 8, 88, false);
    cr_expect_eq(h.out.failed, 1);
    cr_expect_eq(rn_shard_count(h.sh), 0);
    h_fini(&h);
}

/* Shutdown: every instance, whatever its state (writing, waiting for a worker, sleeping), is
 * handed back with the token it holds, and nothing is left armed. */
Test(shard, shutdown_hands_every_instance_back)
{
    struct h h, hn;
    bool seen[3] = {false, false, false};
    int64_t at;
    size_t i;

    h_init(&h, steps_src, 60000);
    h_claim(&h, 1, 101, "{\"n\": 2}"); /* writing */
    h_claim(&h, 2, 102, "{\"n\": 2}");
    h_ack(&h, 2, 102, false); /* an action in flight */
    cr_assert_eq(h.out.dispatches.len, 1);
    /* a sleeper on a second template, in the same shard */
    h_init(&hn, nap_src, 60000);
    {
        struct rn_iid iid;
        struct rn_sev *e;
        iid = iid_of(3);
        e = rn_sev_new(RN_SEV_NEW, iid);
        e->claimed.instance_id = iid;
        e->claimed.lock = token_of(103);
        e->claimed.workflow = strdup("nap");
        T_OK(ir_val_from_json("{\"s\": 30}", 9, &e->claimed.input, NULL));
        e->dag = hn.c.dag;
        h_apply(&h, e);
    }
    h_ack(&h, 3, 103, false);
    cr_assert(rn_shard_next_timer(h.sh, &at));
    cr_assert_eq(rn_shard_count(h.sh), 3);
    cr_expect_eq(rn_shard_busy(h.sh), 2);

    rn_shard_out_clear(&h.out);
    rn_shard_hand_back(h.sh, &h.out);
    cr_assert_eq(h.out.handed_back.len, 3);
    for (i = 0; i < 3; i++) {
        const struct rn_lease_op *op = &h.out.handed_back.items[i];
        uint8_t tag = op->iid.b[0];
        cr_assert(tag >= 1 && tag <= 3);
        cr_expect_eq(op->lock.b[0], 100 + tag, "instance %u handed back under the wrong token",
                     tag);
        seen[tag - 1] = true;
    }
    cr_expect(seen[0] && seen[1] && seen[2]);
    cr_expect_eq(h.out.withdrawals.len, 3, "handed-back instances run nothing more here");
    cr_expect_eq(h.out.removed, 3);
    cr_expect_eq(rn_shard_count(h.sh), 0);
    cr_expect_eq(rn_shard_busy(h.sh), 0);
    cr_expect_not(rn_shard_next_timer(h.sh, &at));
    h_fini(&h);
    h_fini(&hn);
}

/* A result that comes after the instance's cancel, while the cancel is being written, is kept
 * and handed out as a late result once the outcome commits; one that comes after the instance
 * is gone is handed out at once, but only for an instance this shard finished. The final write
 * carries no snapshot: a redrive resumes from the last running one. */
Test(shard, results_after_the_outcome_are_handed_out_as_late)
{
    struct rn_pool_dispatch d[4];
    struct rn_sev *e;
    struct h h;

    h_init(&h, spread_src, 60000);
    h_claim(&h, 1, 11, "{\"n\": 2}");
    h_ack(&h, 1, 11, false);
    cr_assert_eq(h_take_dispatches(&h, d, 4), 2);
    e = rn_sev_new(RN_SEV_CANCEL, iid_of(1));
    T_OK(ir_str_from_cstr("stop", &e->value));
    h_apply(&h, e);
    cr_assert_eq(h.out.writes.len, 1);
    cr_expect_eq(h.out.writes.items[0]->w.outcome, RN_CANCELLED);
    cr_expect_null(h.out.writes.items[0]->w.state, "the last running snapshot is kept");
    h_result(&h, &d[0], 40); /* while the cancel is written */
    cr_expect_eq(h.out.writes.len, 0);
    cr_expect_eq(h.out.late.len, 0, "not before the outcome commits");
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.failed, 1);
    cr_expect_eq(h.out.cancels.len, 2, "both attempts are stopped on their workers");
    cr_expect_eq(h.out.withdrawals.len, 0, "cancelled, not withdrawn: their outcomes come back");
    cr_assert_eq(h.out.late.len, 1);
    cr_expect(rn_iid_eq(h.out.late.items[0].instance_id, iid_of(1)));
    cr_expect(rn_xid_eq(h.out.late.items[0].d.exec_id, d[0].exec_id));
    cr_expect(h.out.late.items[0].d.ok);
    cr_expect_eq(h.out.late.items[0].d.value.u.i, 40);
    h_result(&h, &d[1], 41); /* the instance is gone here */
    cr_assert_eq(h.out.late.len, 1);
    cr_expect(rn_xid_eq(h.out.late.items[0].d.exec_id, d[1].exec_id));

    /* An instance that left otherwise (its lease lost) is not this runner's to write for. */
    h_claim(&h, 2, 12, "{\"n\": 2}");
    h_ack(&h, 2, 12, false);
    cr_assert_eq(h_take_dispatches(&h, d, 4), 2);
    h_result(&h, &d[0], 1);
    cr_assert_eq(h.out.writes.len, 1);
    h_ack(&h, 2, 12, true);
    cr_expect_eq(h.out.lost, 1);
    h_result(&h, &d[1], 2);
    cr_expect_eq(h.out.late.len, 0, "a lost instance's late result is not handed out");
    h_fini(&h);
}

/* ---- child workflows ------------------------------------------------------------------------ */

/* A child call rides in the write that records it (never dispatched); the ACK says what became
 * of the start; a `run` waits for the child's recorded outcome; a finishing child's write
 * carries its outcome for its parent; a parent that only waits for children is handed back;
 * children no longer waited for are reaped after the write that dropped them. */

static const char *const run_src = "fn main(input: [n]):\n"
                                   "    r = run billing.charge(n=n)\n"
                                   "    return r\n";

static const char *const start_src = "fn main():\n"
                                     "    cid = start audit.record(n=1)\n"
                                     "    return cid\n";

static const char *const mixed_src = "fn main():\n"
                                     "    a, b = parallel:\n"
                                     "        run billing.charge(n=1)\n"
                                     "        @t.work(n=2)\n"
                                     "    return [a, b]\n";

static const char *const fan_src = "fn main(input: [n]):\n"
                                   "    xs = spread range(n):i -> run billing.charge(n=i)\n"
                                   "    return xs\n";

static const char *const divide_src = "fn main(input: [d]):\n"
                                      "    return 10 // d\n";

/* h_init with the child settings given (evict_sleep_threshold_ms 60 s). */
static void
h_init_children(struct h *h, const char *src, uint32_t evict_child_wait_ms,
                uint32_t max_child_depth)
{
    struct rn_shard_cfg cfg;

    memset(h, 0, sizeof(*h));
    h->c = t_compile(src);
    cr_assert_eq(h->c.rv, CN_OK, "%s", h->c.errors);
    memset(&cfg, 0, sizeof(cfg));
    cfg.index = 3;
    cfg.exec.default_timeout_ms = 60000;
    cfg.evict_sleep_threshold_ms = 60000;
    cfg.evict_child_wait_ms = evict_child_wait_ms;
    cfg.max_child_depth = max_child_depth;
    h->sh = rn_shard_new(&cfg);
    h->now.wall_ms = 1700000000000;
    h->now.mono_us = 5000000;
}

/* The only write of the last output. */
static const struct rn_write *
h_write(const struct h *h)
{
    cr_assert_eq(h->out.writes.len, 1, "%zu writes, want 1", h->out.writes.len);
    return &h->out.writes.items[0]->w;
}

/* ACKs the write of the last output (instance tag, token lock_tag) as the persister would after
 * starting its children: each with status st (and message msg), inputs None. */
static void
h_ack_children(struct h *h, uint8_t tag, uint8_t lock_tag, enum rn_child_status st, const char *msg)
{
    const struct rn_write *w = h_write(h);
    struct rn_sev *e = rn_sev_new(RN_SEV_ACK, iid_of(tag));
    size_t k;

    e->lock = token_of(lock_tag);
    e->nchildren = w->nchildren;
    e->children = calloc(w->nchildren ? w->nchildren : 1, sizeof(*e->children));
    cr_assert_not_null(e->children);
    for (k = 0; k < w->nchildren; k++) {
        e->children[k] = w->children[k];
        e->children[k].input = ir_null();
        e->children[k].status = st;
        (void) snprintf(e->children[k].message, sizeof(e->children[k].message), "%s",
                        msg ? msg : "");
    }
    h_apply(h, e);
}

/* ACKs the write of the last output (instance tag, token lock_tag) as the persister would after
 * sending its signals: each with status st (answer "delivered" when sent, else message msg). */
static void
h_ack_sends(struct h *h, uint8_t tag, uint8_t lock_tag, enum rn_send_status st, const char *msg)
{
    const struct rn_write *w = h_write(h);
    struct rn_sev *e = rn_sev_new(RN_SEV_ACK, iid_of(tag));
    size_t k;

    e->lock = token_of(lock_tag);
    e->nsends = w->nsends;
    e->sends = calloc(w->nsends ? w->nsends : 1, sizeof(*e->sends));
    cr_assert_not_null(e->sends);
    for (k = 0; k < w->nsends; k++) {
        e->sends[k] = w->sends[k];
        e->sends[k].payload = ir_null();
        e->sends[k].status = st;
        (void) snprintf(e->sends[k].answer, sizeof(e->sends[k].answer), "%s",
                        st == RN_SEND_SENT ? "delivered" : "");
        (void) snprintf(e->sends[k].message, sizeof(e->sends[k].message), "%s", msg ? msg : "");
    }
    h_apply(h, e);
}

/* A child's outcome for call (exec_id, attempt) of instance tag, as the canceller hands it over:
 * already recorded. Takes v. */
static void
h_child_result(struct h *h, uint8_t tag, struct rn_xid exec_id, uint32_t attempt, bool ok,
               struct ir_val v)
{
    struct rn_sev *e = rn_sev_new(RN_SEV_RESULT, iid_of(tag));

    e->exec_id = exec_id;
    e->attempt = attempt;
    e->ok = ok;
    e->value = v;
    e->child = true;
    h_apply(h, e);
}

/* Fires the shard's timers at the harness's instant, after clearing the last output. */
static void
h_fire(struct h *h)
{
    rn_shard_out_clear(&h->out);
    rn_shard_fire(h->sh, h->now, &h->out);
}

/* The error a child that failed with ZeroDivisionError hands its parent. */
static struct ir_val
h_child_failure(void)
{
    struct ir_val cause, out;
    struct rn_iid child = {{0xcd}};
    bool ok = true;

    T_ERR(rn_error_raise(&cause, "ZeroDivisionError", "integer division by zero"), CN_RAISED);
    T_OK(rn_child_outcome(RN_FAILED, cause, child, "billing.charge", &ok, &out));
    ir_val_release(cause);
    return out;
}

/* A `run` call is not dispatched: it rides in the write that records it, as a child start named
 * rn_child_id(call, attempt), with the call's inputs and the shard's depth limit (64 when the
 * configuration says 0). Its ACK dispatches nothing. */
Test(shard, a_run_call_rides_in_its_write_and_is_never_dispatched)
{
    const struct rn_write *w;
    const struct rn_child_start *cs;
    const struct ir_val *n;
    struct rn_xid call;
    struct h h;

    h_init_children(&h, run_src, 60000, 0);
    h_claim(&h, 1, 11, "{\"n\": 3}");
    w = h_write(&h);
    cr_expect_eq(h.out.dispatches.len, 0, "a child call went to the pool");
    cr_expect_not_null(w->state, "the call must be in the snapshot the write commits");
    cr_expect_eq(w->outcome, RN_RUNNING);
    cr_assert_eq(w->nchildren, 1);
    cs = &w->children[0];
    call = cs->exec_id;
    cr_expect_eq(cs->attempt, 1);
    cr_expect(rn_iid_eq(cs->child_id, rn_child_id(call, 1)));
    cr_expect_str_eq(cs->workflow, "billing.charge");
    cr_expect_null(cs->version);
    cr_expect_not(cs->detached);
    cr_expect_eq(cs->timeout_ms, 0);
    n = ir_map_get(cs->input, "n", 1);
    cr_assert_not_null(n, "the call's kwargs are the child's input");
    cr_expect_eq(n->u.i, 3);
    cr_expect_eq(w->max_child_depth, 64, "the default depth limit");
    cr_expect_not(w->release);
    cr_expect_not(w->parent.has);

    h_ack_children(&h, 1, 11, RN_CHILD_CREATED, NULL);
    cr_expect_eq(h.out.committed, 1);
    cr_expect_eq(h.out.dispatches.len, 0);
    cr_expect_eq(h.out.writes.len, 0, "a child that started needs nothing more written");
    cr_expect_eq(h.out.reaps.len, 0);
    cr_expect(rn_shard_has(h.sh, iid_of(1), NULL));
    cr_expect_eq(rn_shard_busy(h.sh), 0, "a child is not an attempt in flight");
    h_fini(&h);

    /* The configured limit goes with the write; with a version and a timeout, those too. */
    h_init_children(&h,
                    "fn main():\n"
                    "    r = run billing.charge(n=1) [version: \"v7\"] [timeout: 90s]\n"
                    "    return r\n",
                    60000, 7);
    h_claim(&h, 2, 12, "{}");
    w = h_write(&h);
    cr_expect_eq(w->max_child_depth, 7);
    cr_assert_eq(w->nchildren, 1);
    cr_expect_str_eq(w->children[0].version, "v7");
    cr_expect_eq(w->children[0].timeout_ms, 90000);
    h_fini(&h);
}

/* A child that could not start raises its error in the parent when the write's ACK says so:
 * not found, inputs that do not fit, too deep. Uncaught, the parent fails with it; caught by a
 * base of it, the parent goes on. */
Test(shard, a_child_that_cannot_start_raises_its_error_in_the_parent)
{
    static const struct {
        enum rn_child_status st;
        const char *type, *base, *msg;
    } cases[] = {
        {RN_CHILD_NOT_FOUND, "ChildWorkflowNotFound", "LookupError",
         "no workflow billing.charge is registered"},
        {RN_CHILD_BAD_INPUT, "ChildInputError", "TypeError", "main() takes no input 'n'"},
        {RN_CHILD_TOO_DEEP, "ChildDepthExceeded", "ChildDepthExceeded", "deeper than 64"},
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct rn_write *w;
        const struct ir_val *m;
        char src[256];
        struct h h;

        h_init_children(&h, run_src, 60000, 0);
        h_claim(&h, 1, 11, "{\"n\": 1}");
        h_ack_children(&h, 1, 11, cases[i].st, cases[i].msg);
        w = h_write(&h);
        cr_expect_eq(w->outcome, RN_FAILED, "%s: outcome %d", cases[i].type, w->outcome);
        cr_expect_str_eq(ir_error_type(w->result), cases[i].type);
        m = ir_map_get(w->result, "message", 7);
        cr_assert_not_null(m);
        cr_expect_str_eq(ir_str_data(*m), cases[i].msg);
        cr_expect_eq(w->ndone, 1, "%s: the call's error is recorded", cases[i].type);
        cr_expect_eq(h.out.dispatches.len, 0);
        h_ack(&h, 1, 11, false);
        cr_expect_eq(h.out.failed, 1);
        cr_expect_eq(rn_shard_count(h.sh), 0);
        h_fini(&h);

        (void) snprintf(src, sizeof(src),
                        "fn main():\n"
                        "    try:\n"
                        "        r = run billing.charge(n=1)\n"
                        "    except %s as e:\n"
                        "        r = e.type\n"
                        "    return r\n",
                        cases[i].base);
        h_init_children(&h, src, 60000, 0);
        h_claim(&h, 2, 12, "{}");
        h_ack_children(&h, 2, 12, cases[i].st, cases[i].msg);
        w = h_write(&h);
        cr_expect_eq(w->outcome, RN_COMPLETED, "except %s: outcome %d", cases[i].base, w->outcome);
        if (w->outcome == RN_COMPLETED) {
            cr_expect_str_eq(ir_str_data(w->result), cases[i].type);
        }
        h_fini(&h);
    }
}

/* `start`: the ACK of the write that created the child (or found it created, on a replay) gives
 * the call its result, the child's id. */
Test(shard, a_start_call_gets_the_child_id_when_its_write_commits)
{
    static const enum rn_child_status sts[] = {RN_CHILD_CREATED, RN_CHILD_EXISTS};
    size_t i;

    for (i = 0; i < 2; i++) {
        const struct rn_write *w;
        struct rn_iid child;
        char id[37];
        struct h h;

        h_init_children(&h, start_src, 60000, 0);
        h_claim(&h, 1, 11, "{}");
        w = h_write(&h);
        cr_expect_eq(h.out.dispatches.len, 0);
        cr_assert_eq(w->nchildren, 1);
        cr_expect(w->children[0].detached, "a start's child is detached");
        cr_expect_str_eq(w->children[0].workflow, "audit.record");
        child = rn_child_id(w->children[0].exec_id, w->children[0].attempt);
        cr_expect(rn_iid_eq(w->children[0].child_id, child));
        cn_uuid_format(child.b, id);

        h_ack_children(&h, 1, 11, sts[i], NULL);
        w = h_write(&h);
        cr_expect_eq(w->outcome, RN_COMPLETED, "status %s: outcome %d",
                     rn_child_status_name(sts[i]), w->outcome);
        cr_assert_eq(w->result.type, IR_T_STR);
        cr_expect_str_eq(ir_str_data(w->result), id);
        cr_expect_eq(w->nchildren, 0, "the child was started once, by the first write");
        h_ack(&h, 1, 11, false);
        cr_expect_eq(h.out.completed, 1);
        cr_expect_eq(h.out.reaps.len, 0, "a start's child outlives a parent that completes");
        h_fini(&h);
    }
}

/* `signal`: the write that records the call carries the send (receiver, name, payload) and
 * dispatches nothing; its ACK gives the call its answer, recorded by that write (no done record
 * after it), or raises the refusal as a SignalError whose details name the reason, receiver
 * and signal, recorded by the next write. */
Test(shard, a_signal_rides_in_its_write_and_its_ack_answers_or_raises)
{
    static const char src[] = "fn main(input: [to]):\n"
                              "    try:\n"
                              "        r = signal approve(to=to, payload={\"by\": \"ann\"})\n"
                              "    except SignalError as e:\n"
                              "        r = [e.type, e[\"details\"][\"reason\"], e[\"message\"]]\n"
                              "    return r\n";
    static const char to[] = "0b0e0c0a-0000-4000-8000-000000000001";
    const struct rn_write *w;
    const struct ir_val *by;
    struct rn_iid want;
    char input[96];
    struct h h;

    (void) snprintf(input, sizeof(input), "{\"to\": \"%s\"}", to);
    cr_assert(cn_uuid_parse(to, want.b));
    h_init_children(&h, src, 60000, 0);
    h_claim(&h, 1, 11, input);
    w = h_write(&h);
    cr_expect_eq(h.out.dispatches.len, 0, "a signal goes to no worker");
    cr_assert_eq(w->nsends, 1);
    cr_expect_str_eq(w->sends[0].name, "approve");
    cr_expect(rn_iid_eq(w->sends[0].to, want));
    by = ir_map_get(w->sends[0].payload, "by", 2);
    cr_assert_not_null(by);
    cr_expect_str_eq(ir_str_data(*by), "ann");
    cr_expect_not_null(w->state, "the call is durable in the write that sends it");
    h_ack_sends(&h, 1, 11, RN_SEND_SENT, NULL);
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_COMPLETED);
    cr_expect_str_eq(ir_str_data(w->result), "delivered");
    cr_expect_eq(w->ndone, 0, "the answer was recorded by the write that sent it");
    cr_expect_eq(w->nsends, 0, "sent once");
    h_fini(&h);

    h_init_children(&h, src, 60000, 0);
    h_claim(&h, 2, 12, input);
    h_ack_sends(&h, 2, 12, RN_SEND_ENDED, "instance x has ended (completed)");
    w = h_write(&h);
    cr_assert_eq(w->outcome, RN_COMPLETED);
    cr_assert_eq(ir_list_len(w->result), 3);
    cr_expect_str_eq(ir_str_data(ir_list_items(w->result)[0]), "SignalError");
    cr_expect_str_eq(ir_str_data(ir_list_items(w->result)[1]), "ended");
    cr_expect_str_eq(ir_str_data(ir_list_items(w->result)[2]),
                     "signal approve: instance x has ended (completed)");
    cr_expect_eq(w->ndone, 1, "a refusal is recorded like any error, by the next write");
    h_fini(&h);
}

/* A child's outcome (RESULT with child set) is applied to the parent held here, without touching
 * the count of attempts in flight; for an instance not held here it does nothing (its next
 * claim reads it from storage): no write, no late result. */
Test(shard, a_child_outcome_is_applied_to_a_held_parent_and_dropped_otherwise)
{
    struct rn_pool_dispatch d[4];
    struct rn_xid call;
    const struct rn_write *w;
    struct cn_buf b = CN_BUF_INIT;
    struct h h;

    h_init_children(&h, mixed_src, 60000, 0);
    h_claim(&h, 1, 11, "{}");
    w = h_write(&h);
    cr_assert_eq(w->nchildren, 1);
    call = w->children[0].exec_id;
    h_ack_children(&h, 1, 11, RN_CHILD_CREATED, NULL);
    cr_assert_eq(h_take_dispatches(&h, d, 4), 1, "the action goes out, the child call does not");
    cr_expect_str_eq(d[0].action, "t.work");
    cr_expect_eq(rn_shard_busy(h.sh), 1);

    h.now.wall_ms += 100;
    h_child_result(&h, 1, call, 1, true, ir_int(5));
    cr_expect_eq(h.out.writes.len, 0, "a recorded outcome into a fan-out slot needs no write");
    cr_expect_eq(h.out.dispatches.len + h.out.late.len + h.out.cancels.len, 0);
    cr_expect_eq(rn_shard_busy(h.sh), 1, "the child's outcome was counted as the action's");

    h_result(&h, &d[0], 7);
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_COMPLETED);
    T_OK(ir_val_to_json(w->result, &b, NULL));
    cr_expect_str_eq(b.data, "[5, 7]");
    cr_expect_eq(w->ndone, 1, "only the action's result is recorded here");
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.completed, 1);
    cr_expect_eq(rn_shard_count(h.sh), 0);
    cr_expect_eq(rn_shard_busy(h.sh), 0);

    /* The parent is gone (finished here), or was never held here: nothing at all. */
    h_child_result(&h, 1, call, 1, true, ir_int(5));
    cr_expect_eq(h.out.writes.len + h.out.late.len + h.out.dispatches.len + h.out.leases.len, 0);
    h_child_result(&h, 9, call, 1, false, h_child_failure());
    cr_expect_eq(h.out.writes.len + h.out.late.len + h.out.dispatches.len + h.out.leases.len, 0);
    cn_buf_fini(&b);
    h_fini(&h);

    /* A parent that waits only for its child completes with the child's outcome. */
    h_init_children(&h, run_src, 60000, 0);
    h_claim(&h, 2, 12, "{\"n\": 1}");
    call = h_write(&h)->children[0].exec_id;
    h_ack_children(&h, 2, 12, RN_CHILD_CREATED, NULL);
    h_child_result(&h, 2, call, 1, true, ir_int(42));
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_COMPLETED);
    cr_expect_eq(w->result.u.i, 42);
    cr_expect_eq(w->ndone, 0, "the child recorded its outcome itself");
    cr_expect_eq(rn_shard_busy(h.sh), 1, "its write is in flight");
    h_ack(&h, 2, 12, false);
    cr_expect_eq(h.out.completed, 1);
    cr_expect_eq(rn_shard_busy(h.sh), 0);
    h_fini(&h);
}

/* Claims instance tag as the child of call (exec_id, attempt) of parent ptag. */
static void
h_claim_child(struct h *h, uint8_t tag, uint8_t lock_tag, const char *input_json, uint8_t ptag,
              struct rn_xid exec_id, uint32_t attempt)
{
    struct rn_iid iid = iid_of(tag);
    struct rn_sev *e = rn_sev_new(RN_SEV_NEW, iid);

    e->claimed.instance_id = iid;
    e->claimed.lock = token_of(lock_tag);
    e->claimed.workflow = strdup("billing.charge");
    T_OK(ir_val_from_json(input_json, strlen(input_json), &e->claimed.input, NULL));
    e->claimed.parent.has = true;
    e->claimed.parent.parent = iid_of(ptag);
    e->claimed.parent.exec_id = exec_id;
    e->claimed.parent.attempt = attempt;
    e->dag = h->c.dag;
    e->claimed_mono_us = h->now.mono_us;
    h_apply(h, e);
}

/* A child's final write carries its outcome for its parent's call: the link it was claimed
 * with, and what rn_child_outcome makes of its outcome (the result; a ChildWorkflowError that
 * keeps the child's error type among its bases; ChildWorkflowCancelled). */
Test(shard, a_finishing_child_writes_its_outcome_for_its_parent)
{
    struct rn_xid call = {{0x77, 1, 2, 3}};
    const struct rn_write *w;
    const struct ir_val *details, *v;
    char id[37];
    struct h h;

    h_init_children(&h, divide_src, 60000, 0);
    h_claim_child(&h, 1, 11, "{\"d\": 2}", 0x70, call, 3);
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_COMPLETED);
    cr_expect_eq(w->result.u.i, 5);
    cr_assert(w->parent.has, "a child's final write must name its parent's call");
    cr_expect(rn_iid_eq(w->parent.parent, iid_of(0x70)));
    cr_expect(rn_xid_eq(w->parent.exec_id, call));
    cr_expect_eq(w->parent.attempt, 3);
    cr_expect(w->parent_ok);
    cr_expect_eq(w->parent_value.type, IR_T_INT);
    cr_expect_eq(w->parent_value.u.i, 5);
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.completed, 1);

    h_claim_child(&h, 2, 12, "{\"d\": 0}", 0x70, call, 4);
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_FAILED);
    cr_expect_str_eq(ir_error_type(w->result), "ZeroDivisionError");
    cr_assert(w->parent.has);
    cr_expect_eq(w->parent.attempt, 4);
    cr_expect_not(w->parent_ok);
    cr_expect_str_eq(ir_error_type(w->parent_value), "ChildWorkflowError");
    cr_expect(ir_error_matches(w->parent_value, "ZeroDivisionError"));
    cr_expect(ir_error_matches(w->parent_value, "ArithmeticError"));
    details = ir_map_get(w->parent_value, "details", 7);
    cr_assert_not_null(details);
    cn_uuid_format(iid_of(2).b, id);
    v = ir_map_get(*details, "child_id", 8);
    cr_assert_not_null(v);
    cr_expect_str_eq(ir_str_data(*v), id);
    v = ir_map_get(*details, "workflow", 8);
    cr_assert_not_null(v);
    cr_expect_str_eq(ir_str_data(*v), "billing.charge");
    h_ack(&h, 2, 12, false);
    cr_expect_eq(h.out.failed, 1);

    /* A top-level instance's write names no parent. */
    h_claim(&h, 3, 13, "{\"d\": 5}");
    w = h_write(&h);
    cr_expect_not(w->parent.has);
    cr_expect_eq(w->parent_value.type, IR_T_NULL);
    h_fini(&h);

    /* Cancelled while its action runs. */
    h_init_children(&h, steps_src, 60000, 0);
    h_claim_child(&h, 4, 14, "{\"n\": 2}", 0x70, call, 1);
    h_ack(&h, 4, 14, false);
    cr_assert_eq(h.out.dispatches.len, 1);
    {
        struct rn_sev *e = rn_sev_new(RN_SEV_CANCEL, iid_of(4));
        T_OK(ir_str_from_cstr("parent cancelled", &e->value));
        h_apply(&h, e);
    }
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_CANCELLED);
    cr_assert(w->parent.has);
    cr_expect_not(w->parent_ok);
    cr_expect_str_eq(ir_error_type(w->parent_value), "ChildWorkflowCancelled");
    cr_expect(ir_error_matches(w->parent_value, "ChildWorkflowError"));
    h_fini(&h);
}

/* With evict_child_wait_ms 0 a parent that waits only for a child is handed back as soon as
 * the write that started it commits: a release write, due again within a day. */
Test(shard, a_parent_waiting_only_for_children_is_handed_back_at_once)
{
    const struct rn_write *w;
    struct h h;

    h_init_children(&h, run_src, 0, 0);
    h_claim(&h, 1, 11, "{\"n\": 1}");
    h_ack_children(&h, 1, 11, RN_CHILD_CREATED, NULL);
    w = h_write(&h);
    cr_expect(w->release);
    cr_expect_eq(w->outcome, RN_RUNNING);
    cr_expect_eq(w->nchildren, 0);
    cr_expect_gt(w->wake_at_ms, h.now.wall_ms);
    cr_expect_leq(w->wake_at_ms, h.now.wall_ms + 24LL * 3600 * 1000, "wake at %lld, now %lld",
                  (long long) w->wake_at_ms, (long long) h.now.wall_ms);
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.evicted, 1);
    cr_expect_eq(h.out.removed, 1);
    cr_expect_eq(h.out.reaps.len, 0, "handed back, not finished: its child still runs");
    cr_expect_eq(rn_shard_count(h.sh), 0);
    h_fini(&h);

    /* One that also waits for an action is kept. */
    h_init_children(&h, mixed_src, 0, 0);
    h_claim(&h, 2, 12, "{}");
    h_ack_children(&h, 2, 12, RN_CHILD_CREATED, NULL);
    cr_expect_eq(h.out.writes.len, 0, "handed back with an action running");
    cr_expect_eq(h.out.dispatches.len, 1);
    cr_expect(rn_shard_has(h.sh, iid_of(2), NULL));
    h_fini(&h);
}

/* With evict_child_wait_ms 1000 the parent is kept for a second without an answer: a timer
 * checks then, and hands it back at that instant; an answer meanwhile postpones it. */
Test(shard, a_parent_waiting_for_children_is_handed_back_after_the_quiet_time)
{
    const struct rn_write *w;
    struct rn_xid calls[2];
    int64_t t0, at = 0;
    struct h h;

    h_init_children(&h, run_src, 1000, 0);
    t0 = h.now.wall_ms;
    h_claim(&h, 1, 11, "{\"n\": 1}");
    h_ack_children(&h, 1, 11, RN_CHILD_CREATED, NULL);
    cr_expect_eq(h.out.writes.len, 0, "handed back before its quiet time");
    cr_assert(rn_shard_next_timer(h.sh, &at), "no timer to check again");
    cr_expect_eq(at, t0 + 1000);
    h.now.wall_ms = t0 + 999;
    h_fire(&h);
    cr_expect_eq(h.out.writes.len, 0, "handed back early");
    h.now.wall_ms = t0 + 1000;
    h_fire(&h);
    w = h_write(&h);
    cr_expect(w->release);
    cr_expect_gt(w->wake_at_ms, h.now.wall_ms);
    cr_expect_leq(w->wake_at_ms, h.now.wall_ms + 24LL * 3600 * 1000);
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.evicted, 1);
    cr_expect_eq(rn_shard_count(h.sh), 0);
    h_fini(&h);

    /* Two children: the first answers after half a second, which postpones the hand-back to a
     * second after that answer. */
    h_init_children(&h, fan_src, 1000, 0);
    t0 = h.now.wall_ms;
    h_claim(&h, 2, 12, "{\"n\": 2}");
    w = h_write(&h);
    cr_assert_eq(w->nchildren, 2);
    calls[0] = w->children[0].exec_id;
    calls[1] = w->children[1].exec_id;
    h_ack_children(&h, 2, 12, RN_CHILD_CREATED, NULL);
    cr_expect_eq(h.out.writes.len, 0);
    h.now.wall_ms = t0 + 500;
    h_child_result(&h, 2, calls[0], 1, true, ir_int(1));
    cr_expect_eq(h.out.writes.len, 0);
    h.now.wall_ms = t0 + 1000;
    h_fire(&h);
    cr_expect_eq(h.out.writes.len, 0, "handed back though a child answered 500 ms ago");
    cr_assert(rn_shard_next_timer(h.sh, &at), "no timer to check again");
    cr_expect_eq(at, t0 + 1500);
    h.now.wall_ms = t0 + 1500;
    h_fire(&h);
    w = h_write(&h);
    cr_expect(w->release);
    h_ack(&h, 2, 12, false);
    cr_expect_eq(h.out.evicted, 1);
    h_fini(&h);

    /* The other child answers before the check: the parent completes and nothing is handed
     * back when the timer fires. */
    h_init_children(&h, run_src, 1000, 0);
    t0 = h.now.wall_ms;
    h_claim(&h, 3, 13, "{\"n\": 1}");
    calls[0] = h_write(&h)->children[0].exec_id;
    h_ack_children(&h, 3, 13, RN_CHILD_CREATED, NULL);
    h.now.wall_ms = t0 + 10;
    h_child_result(&h, 3, calls[0], 1, true, ir_int(8));
    cr_expect_eq(h_write(&h)->outcome, RN_COMPLETED);
    h_ack(&h, 3, 13, false);
    cr_expect_eq(h.out.completed, 1);
    h.now.wall_ms = t0 + 1000;
    h_fire(&h);
    cr_expect_eq(h.out.writes.len, 0);
    h_fini(&h);
}

/* The children a committed write stopped waiting for are reaped after its ACK: all of them when
 * the instance was cancelled (n == 0), the other calls of a fail_fast spread whose first child
 * failed (caught or not). */
Test(shard, children_no_longer_waited_for_are_reaped_after_the_write_commits)
{
    static const char *const fast_srcs[] = {
        "fn main(input: [n]):\n"
        "    xs = spread range(n):i -> run billing.charge(n=i) [fail_fast]\n"
        "    return xs\n",
        "fn main(input: [n]):\n"
        "    try:\n"
        "        xs = spread range(n):i -> run billing.charge(n=i) [fail_fast]\n"
        "    except ChildWorkflowError:\n"
        "        xs = @t.fallback()\n"
        "    return xs\n",
    };
    const struct rn_write *w;
    struct rn_xid calls[3];
    size_t s, k;
    struct h h;

    h_init_children(&h, run_src, 60000, 0);
    h_claim(&h, 1, 11, "{\"n\": 1}");
    h_ack_children(&h, 1, 11, RN_CHILD_CREATED, NULL);
    {
        struct rn_sev *e = rn_sev_new(RN_SEV_CANCEL, iid_of(1));
        T_OK(ir_str_from_cstr("operator", &e->value));
        h_apply(&h, e);
    }
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_CANCELLED);
    cr_expect_eq(h.out.reaps.len, 0, "reaped before the cancel committed");
    cr_expect_eq(h.out.cancels.len, 0, "a child call is not a worker's attempt");
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.failed, 1);
    cr_assert_eq(h.out.reaps.len, 1);
    cr_expect(rn_iid_eq(h.out.reaps.items[0].parent, iid_of(1)));
    cr_expect_eq(h.out.reaps.items[0].n, 0, "a cancelled parent's children all go");
    h_fini(&h);

    for (s = 0; s < 2; s++) {
        struct rn_xid others[2];
        h_init_children(&h, fast_srcs[s], 60000, 0);
        h_claim(&h, 2, 12, "{\"n\": 3}");
        w = h_write(&h);
        cr_assert_eq(w->nchildren, 3);
        for (k = 0; k < 3; k++) {
            const struct ir_val *n = ir_map_get(w->children[k].input, "n", 1);
            cr_assert_not_null(n);
            calls[n->u.i] = w->children[k].exec_id;
        }
        h_ack_children(&h, 2, 12, RN_CHILD_CREATED, NULL);
        h_child_result(&h, 2, calls[1], 1, false, h_child_failure());
        w = h_write(&h);
        cr_expect_eq(w->outcome, s == 0 ? RN_FAILED : RN_RUNNING);
        cr_expect_eq(h.out.reaps.len, 0, "reaped before the write committed");
        cr_expect_eq(h.out.cancels.len, 0);
        h_ack(&h, 2, 12, false);
        cr_assert_eq(h.out.reaps.len, 1, "variant %zu: no reap", s);
        cr_expect(rn_iid_eq(h.out.reaps.items[0].parent, iid_of(2)));
        cr_assert_eq(h.out.reaps.items[0].n, 2, "variant %zu: %zu calls reaped", s,
                     h.out.reaps.items[0].n);
        others[0] = calls[0];
        others[1] = calls[2];
        for (k = 0; k < 2; k++) {
            const struct rn_xid *r = h.out.reaps.items[0].exec_ids;
            cr_expect(rn_xid_eq(r[0], others[k]) || rn_xid_eq(r[1], others[k]),
                      "variant %zu: call %zu not reaped", s, k == 0 ? (size_t) 0 : (size_t) 2);
        }
        cr_expect_eq(h.out.cancels.len, 0);
        if (s == 1) {
            cr_expect_eq(h.out.dispatches.len, 1, "the handler's action goes out");
        }
        h_fini(&h);
    }
}

/* A run call whose child exists already (the call replayed after a crash) waits for it as for
 * a new one; handed back, a parent with a deadline is due again at its deadline when that comes
 * before the day's recheck. */
Test(shard, a_replayed_run_call_waits_and_a_handed_back_parent_wakes_by_its_deadline)
{
    struct rn_iid iid = iid_of(1);
    const struct rn_write *w;
    struct rn_sev *e;
    struct h h;

    h_init_children(&h, run_src, 0, 0);
    e = rn_sev_new(RN_SEV_NEW, iid);
    e->claimed.instance_id = iid;
    e->claimed.lock = token_of(11);
    e->claimed.workflow = strdup("t");
    T_OK(ir_val_from_json("{\"n\": 1}", 8, &e->claimed.input, NULL));
    e->claimed.deadline_ms = h.now.wall_ms + 3600 * 1000;
    e->claimed.timeout_ms = 3600 * 1000;
    e->dag = h.c.dag;
    h_apply(&h, e);
    h_ack_children(&h, 1, 11, RN_CHILD_EXISTS, NULL);
    w = h_write(&h);
    cr_expect(w->release, "an existing child is an error, or not waited for");
    cr_expect_eq(w->outcome, RN_RUNNING);
    cr_expect_eq(w->wake_at_ms, h.now.wall_ms + 3600 * 1000, "due at its deadline");
    h_ack(&h, 1, 11, false);
    cr_expect_eq(h.out.evicted, 1);
    h_fini(&h);
}

/* An instance whose deadline passes while it waits for a child times out, and every child of
 * it is reaped (n == 0) once that outcome commits. */
Test(shard, a_parent_that_times_out_reaps_all_its_children)
{
    struct rn_iid iid = iid_of(1);
    struct rn_sev *e;
    struct h h;

    h_init_children(&h, run_src, 60000, 0);
    e = rn_sev_new(RN_SEV_NEW, iid);
    e->claimed.instance_id = iid;
    e->claimed.lock = token_of(11);
    e->claimed.workflow = strdup("t");
    T_OK(ir_val_from_json("{\"n\": 1}", 8, &e->claimed.input, NULL));
    e->claimed.deadline_ms = h.now.wall_ms + 5000;
    e->claimed.timeout_ms = 5000;
    e->dag = h.c.dag;
    h_apply(&h, e);
    h_ack_children(&h, 1, 11, RN_CHILD_CREATED, NULL);
    cr_expect_eq(h.out.writes.len, 0);
    h.now.wall_ms += 5000;
    h_fire(&h);
    cr_expect_eq(h_write(&h)->outcome, RN_TIMED_OUT);
    cr_expect_eq(h.out.reaps.len, 0);
    h_ack(&h, 1, 11, false);
    cr_assert_eq(h.out.reaps.len, 1);
    cr_expect(rn_iid_eq(h.out.reaps.items[0].parent, iid));
    cr_expect_eq(h.out.reaps.items[0].n, 0);
    h_fini(&h);
}

/* Found by review: a child instance whose snapshot cannot be resumed fails with StateError
 * through the fenced write path; that write is its final write, so it must carry its outcome
 * for its parent like any other (a ChildWorkflowError), or the parent's `run` call never gets
 * an answer: the write that finishes an instance is the only place a child's outcome is handed
 * over (store/pg/control.c, cairn_child_done), and its queue row is gone after it. */
Test(shard, an_unresumable_child_still_answers_its_parent)
{
    struct rn_xid call = {{0x77, 9}};
    struct rn_iid iid = iid_of(8);
    const struct rn_write *w;
    struct rn_sev *e;
    struct h h;

    h_init_children(&h, divide_src, 60000, 0);
    e = rn_sev_new(RN_SEV_NEW, iid);
    e->claimed.instance_id = iid;
    e->claimed.lock = token_of(88);
    e->claimed.workflow = strdup("billing.charge");
    e->claimed.state = strdup("not msgpack at all");
    e->claimed.state_len = strlen("not msgpack at all");
    e->claimed.parent.has = true;
    e->claimed.parent.parent = iid_of(0x70);
    e->claimed.parent.exec_id = call;
    e->claimed.parent.attempt = 1;
    e->dag = h.c.dag;
    h_apply(&h, e);
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_FAILED);
    cr_expect_str_eq(ir_error_type(w->result), "StateError");
    cr_expect(w->parent.has, "the parent of an unresumable child is never answered");
    if (w->parent.has) {
        cr_expect(rn_iid_eq(w->parent.parent, iid_of(0x70)));
        cr_expect(rn_xid_eq(w->parent.exec_id, call));
        cr_expect_not(w->parent_ok);
        cr_expect_str_eq(ir_error_type(w->parent_value), "ChildWorkflowError");
        cr_expect(ir_error_matches(w->parent_value, "StateError"));
    }
    h_ack(&h, 8, 88, false);
    cr_expect_eq(h.out.failed, 1);
    h_fini(&h);
}

/* Found by review: the child-wait hand-back is checked after an ACK only when no event waited
 * for that write; when one did (a child's outcome that came while the write was in flight) and
 * applying it needs no write (it fills a fan-out slot), nothing checks again: no hand-back, no
 * timer, and the parent stays held while it waits for its other child. */
Test(shard, a_child_outcome_during_a_write_does_not_keep_the_parent_from_being_handed_back)
{
    struct rn_pool_dispatch d[4];
    const struct rn_write *w;
    struct rn_xid calls[2];
    int64_t at = 0;
    struct h h;

    h_init_children(&h,
                    "fn main():\n"
                    "    a, b, c = parallel:\n"
                    "        run billing.charge(n=1)\n"
                    "        run billing.charge(n=2)\n"
                    "        @t.work(n=3)\n"
                    "    return [a, b, c]\n",
                    0, 0);
    h_claim(&h, 1, 11, "{}");
    w = h_write(&h);
    cr_assert_eq(w->nchildren, 2);
    calls[0] = w->children[0].exec_id;
    calls[1] = w->children[1].exec_id;
    h_ack_children(&h, 1, 11, RN_CHILD_CREATED, NULL);
    cr_expect_eq(h.out.writes.len, 0, "handed back with an action running");
    cr_assert_eq(h_take_dispatches(&h, d, 4), 1);

    /* The action's result is written; meanwhile the first child finishes. */
    h.now.wall_ms += 10;
    h_result(&h, &d[0], 3);
    cr_expect_eq(h_write(&h)->outcome, RN_RUNNING);
    h.now.wall_ms += 10;
    h_child_result(&h, 1, calls[0], 1, true, ir_int(1));
    cr_expect_eq(h.out.writes.len, 0, "a write while one is in flight");
    h.now.wall_ms += 10;
    h_ack(&h, 1, 11, false);
    cr_expect(rn_shard_has(h.sh, iid_of(1), NULL));
    /* Now it waits only for the second child: evict_child_wait_ms is 0, so it is handed back
     * at once, or at the latest when a timer looks again. */
    if (h.out.writes.len == 0) {
        cr_expect(rn_shard_next_timer(h.sh, &at),
                  "a parent waiting only for a child is held with no timer to hand it back");
        h.now.wall_ms += 1000;
        h_fire(&h);
    }
    cr_assert_eq(h.out.writes.len, 1, "the parent waiting only for a child was not handed back");
    cr_expect(h.out.writes.items[0]->w.release);
    cr_expect_eq(h.out.writes.items[0]->w.outcome, RN_RUNNING);
    (void) calls[1];
    h_fini(&h);
}

/* A cancel asked while another runner held a parent (it had not applied it when it handed the
 * parent back), and the outcome of its child that the cancel itself caused, recorded since: the
 * next claim ends the parent cancelled, not failed by the child's ChildWorkflowCancelled. */
Test(shard, a_claimed_cancel_comes_before_the_results_recorded_since)
{
    struct rn_iid iid = iid_of(1);
    const struct rn_write *w;
    struct rn_done done;
    struct ir_val cause, outcome;
    struct rn_iid child = {{0xcd}};
    struct rn_sev *e;
    void *snap;
    size_t snap_len;
    bool ok = true;
    struct h h;

    h_init_children(&h, run_src, 0, 0);
    h_claim(&h, 1, 11, "{\"n\": 1}");
    w = h_write(&h);
    cr_assert_not_null(w->state, "the call's write holds a snapshot");
    cr_assert_eq(w->nchildren, 1);
    snap_len = w->state_len;
    snap = malloc(snap_len);
    cr_assert_not_null(snap);
    memcpy(snap, w->state, snap_len);
    memset(&done, 0, sizeof(done));
    done.exec_id = w->children[0].exec_id;
    done.attempt = 1;
    h_ack_children(&h, 1, 11, RN_CHILD_CREATED, NULL);
    h_fini(&h);

    T_ERR(rn_error_raise(&cause, "Cancelled", "stop the tree"), CN_RAISED);
    T_OK(rn_child_outcome(RN_CANCELLED, cause, child, "billing.charge", &ok, &outcome));
    ir_val_release(cause);
    cr_assert_not(ok);
    done.ok = false;
    done.value = outcome;

    h_init_children(&h, run_src, 0, 0);
    e = rn_sev_new(RN_SEV_NEW, iid);
    e->claimed.instance_id = iid;
    e->claimed.lock = token_of(12);
    e->claimed.workflow = strdup("t");
    e->claimed.started_before = true;
    e->claimed.state = snap;
    e->claimed.state_len = snap_len;
    e->claimed.cancel_reason = strdup("stop the tree");
    T_OK(ir_val_from_json("{\"n\": 1}", 8, &e->claimed.input, NULL));
    e->claimed.done = calloc(1, sizeof(done));
    e->claimed.done[0] = done;
    e->claimed.ndone = 1;
    e->dag = h.c.dag;
    h_apply(&h, e);
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_CANCELLED, "outcome %d: the child's result came first", w->outcome);
    cr_expect_eq(h.out.dispatches.len, 0, "nothing of the resumed step is dispatched");
    h_ack(&h, 1, 12, false);
    h_fini(&h);
}

/* ---- waits ---------------------------------------------------------------------------------- */

/* ACKs the write of the last output, its waits answered as storage would: answered ones with
 * (ok, v) (v taken; ir_null() leaves every wait waiting). */
static void
h_ack_waits(struct h *h, uint8_t tag, uint8_t lock_tag, bool ok, struct ir_val v)
{
    const struct rn_write *w = h_write(h);
    struct rn_sev *e = rn_sev_new(RN_SEV_ACK, iid_of(tag));
    size_t k;

    e->lock = token_of(lock_tag);
    e->waits = calloc(w->nwaits ? w->nwaits : 1, sizeof(*e->waits));
    cr_assert_not_null(e->waits);
    for (k = 0; k < w->nwaits && v.type != IR_T_NULL; k++) {
        e->waits[e->nwaits] = w->waits[k];
        e->waits[e->nwaits].key = NULL;
        e->waits[e->nwaits].timeout_value = ir_null();
        e->waits[e->nwaits].status = RN_WAIT_ANSWERED;
        e->waits[e->nwaits].ok = ok;
        e->waits[e->nwaits].value = k == 0 ? v : ir_null();
        e->nwaits++;
    }
    h_apply(h, e);
}

/* A wait rides in the write that records it (never dispatched), with its names, its key as
 * text, its durable timeout and what the timeout answers; the answer in the ACK is applied as a
 * recorded result, and a wait the instance stops waiting for is withdrawn in its final write. */
Test(shard, a_wait_rides_in_its_write_and_its_answer_comes_with_the_ack)
{
    const struct rn_write *w;
    struct ir_val v;
    struct h h;

    h_init_children(&h,
                    "fn main():\n"
                    "    p = wait approve, reject [timeout: 2d, default: 5]\n"
                    "    e = wait event paid [key: 7, timeout: 90s]\n"
                    "    return [p, e]\n",
                    60000, 0);
    h_claim(&h, 1, 11, "{}");
    w = h_write(&h);
    cr_expect_eq(h.out.dispatches.len, 0, "a wait went to the pool");
    cr_expect_not_null(w->state, "the wait must be in the snapshot the write commits");
    cr_assert_eq(w->nwaits, 1);
    cr_expect_str_eq(w->waits[0].names, "approve,reject");
    cr_expect_not(w->waits[0].event);
    cr_expect_not(w->waits[0].drop);
    cr_expect_not(w->waits[0].expire);
    cr_expect_eq(w->waits[0].timeout_ms, 2 * 86400000LL);
    cr_expect_eq(w->waits[0].timeout_at_ms, h.now.wall_ms + 2 * 86400000LL);
    cr_expect(w->waits[0].timeout_ok, "a default answers the timeout");
    cr_assert_eq(w->waits[0].timeout_value.type, IR_T_LIST, "[None, default] for several names");
    cr_expect_eq(ir_list_items(w->waits[0].timeout_value)[1].u.i, 5);

    T_OK(ir_str_from_cstr("yes", &v));
    h_ack_waits(&h, 1, 11, true, v);
    w = h_write(&h); /* the answer applied: the next wait's write */
    cr_expect_eq(w->ndone, 0, "a recorded answer makes no done record");
    cr_assert_eq(w->nwaits, 1);
    cr_expect(w->waits[0].event);
    cr_expect_str_eq(w->waits[0].names, "paid");
    cr_expect_str_eq(w->waits[0].key, "7");
    cr_expect_not(w->waits[0].timeout_ok);
    cr_expect_str_eq(ir_error_type(w->waits[0].timeout_value), "WaitTimeout");

    /* Nothing yet: the instance waits (a storage answer), so it is handed back like a child
     * waiter once quiet; here evict_child_wait_ms is 60 s, so it is kept. */
    h_ack_waits(&h, 1, 11, true, ir_null());
    cr_expect_eq(h.out.writes.len, 0);
    cr_expect(rn_shard_has(h.sh, iid_of(1), NULL));

    /* A cancel ends it: the final write withdraws the wait. */
    {
        struct rn_sev *e = rn_sev_new(RN_SEV_CANCEL, iid_of(1));
        T_OK(ir_str_from_cstr("stop", &e->value));
        h_apply(&h, e);
    }
    w = h_write(&h);
    cr_expect_eq(w->outcome, RN_CANCELLED);
    cr_assert_eq(w->nwaits, 1);
    cr_expect(w->waits[0].drop);
    h_fini(&h);
}

/* With evict_child_wait_ms 0, an instance that waits only for a signal is handed back at once,
 * due by its wait's timeout at the latest. */
Test(shard, an_instance_waiting_only_for_a_signal_is_handed_back)
{
    const struct rn_write *w;
    struct h h;

    h_init_children(&h, "fn main():\n    p = wait approve [timeout: 1h]\n    return p\n", 0, 0);
    h_claim(&h, 1, 11, "{}");
    h_ack_waits(&h, 1, 11, true, ir_null());
    w = h_write(&h);
    cr_expect(w->release);
    cr_expect_eq(w->nwaits, 0);
    cr_expect_eq(w->wake_at_ms, h.now.wall_ms + 3600000, "due at the wait's timeout");
    h_fini(&h);
}
