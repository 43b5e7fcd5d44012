/* SPDX-License-Identifier: MIT */
/*
 * The shard core driven one event at a time, with the instants stated by the test: the commit
 * barrier (nothing is dispatched before the write recording it is acknowledged), events held
 * during a write, lease loss mid-write and by heartbeat, stale ACKs after a re-claim, timers,
 * long-sleep hand-back, an unresumable snapshot, and the shutdown hand-back. No threads, no
 * database, no clock: what the shard asks for is read from its output.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/error.h"
#include "runner/shard.h"
#include "tests/support/compile_util.h"
#include "tests/support/leak.h"

TestSuite(shard, .fini = t_leak_check, .timeout = 60);

static const char *const steps_src = "fn main(input: [n], output: [total]):\n"
                                     "    total = 0\n"
                                     "    for i in range(n):\n"
                                     "        r = @t.echo(value=i)\n"
                                     "        total = total + r\n"
                                     "    return total\n";

static const char *const spread_src = "fn main(input: [n], output: [count]):\n"
                                      "    results = spread range(n):i -> @t.noop(i=i)\n"
                                      "    return len(results)\n";

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

static void
h_claim(struct h *h, uint8_t tag, uint8_t lock_tag, const char *input_json)
{
    struct rn_iid iid = iid_of(tag);
    struct rn_sev *e;

    e = rn_sev_new(RN_SEV_NEW, iid);
    e->claimed.instance_id = iid;
    e->claimed.lock = token_of(lock_tag);
    e->claimed.workflow = strdup("t");
    T_OK(ir_val_from_json(input_json, strlen(input_json), &e->claimed.input, NULL));
    e->dag = h->c.dag;
    e->claimed_mono_us = h->now.mono_us;
    h_apply(h, e);
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
