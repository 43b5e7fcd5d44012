/* SPDX-License-Identifier: MIT */
/*
 * The attempts of the worker SDK (sdk_int.h): the two fetch contexts per link that carry
 * outcomes out and attempts in, the run queue, the slot threads that run the handlers, and
 * the room every `ready` tells.
 *
 * - Work flows through two `fetch` contexts per link driven by aio callbacks: each carries a
 *   `ready` with every outcome waiting in that link's outbox, and its reply (a `dispatch`
 *   batch) goes into the run queue. One of them is always out (parked at the runner when it has
 *   no work); the other carries outcomes that finish meanwhile. The runner keeps one `ready` per
 *   worker parked and releases the older one, so a fetch is always free within one round trip:
 *   outcomes are never held back, and under load they travel in batches (all that finished
 *   while both fetches were out).
 * - Room: serving several runners, every `ready` says how many more attempts the worker takes
 *   now (slots + prefetch minus what is queued or running, for all runners), and a runner
 *   dispatches no more than that in reply (serving one, the runner's own count is exact). When
 *   the room changes (a slot frees, another runner's dispatch arrives), a link whose runner was
 *   last told otherwise gets a fresh `ready` (which also releases its parked one), so a runner
 *   with a backlog does not keep the slots from another that has work too, and a runner does
 *   not queue work here that other workers have room for. Two runners told the same room at
 *   once may both fill it: the extra attempts wait in the run queue (as prefetched ones do), at
 *   most the room given per runner.
 * - A reply to `ready` that does not decode starts a new session (it may have carried attempts
 *   we could never report).
 *
 * Threads: one per slot takes attempts from the run queue and runs them (wp_sdk_slot_main); nng's
 * threads run the fetch callbacks, which never block for long. Lock: w->mtx only, never held
 * while a handler runs; slots wait for work on w->work.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "ir/base/clock.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "worker-protocol/sdk_int.h"

/* Replaces *v (released) with an error value; on NOMEM leaves None (the runner then records a
 * malformed outcome, which is still a failure). */
static void
sdk_set_error(struct ir_val *v, const char *type, const char *message)
{
    ir_val_release(*v);
    if (ir_error_new(type, message, ir_null(), ir_null(), v) != CN_OK) {
        *v = ir_null();
    }
}

/* Runs the handler for item it on slot s and fills outcome o (which owns its value). */
static void
sdk_run(struct sdk_slot *s, const struct sdk_item *it, struct wp_outcome *o)
{
    struct cairn_worker *w = s->w;
    const struct wp_dispatch *d = &it->d;
    const struct sdk_action *a = NULL;
    struct cairn_worker_ctx ctx;
    struct ir_val v = ir_null();
    char text[96];
    uint32_t i;
    cn_err rv;

    memcpy(o->exec_id, d->exec_id, 16);
    o->attempt = d->attempt;
    o->token = d->token;
    o->ok = false;
    for (i = 0; i < w->nactions; i++) {
        if (strcmp(w->actions[i].name, d->action) == 0) {
            a = &w->actions[i];
        }
    }
    if (it->cancelled) {
        sdk_set_error(&v, "Cancelled", "cancelled before it started");
        o->value = v;
        return;
    }
    if (a == NULL) {
        sdk_set_error(&v, "WorkerError", "action not served by this worker");
        o->value = v;
        return;
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.action = d->action;
    memcpy(ctx.instance_id, d->instance_id, 16);
    memcpy(ctx.exec_id, d->exec_id, 16);
    ctx.attempt = d->attempt;
    /* The timeout counts from now, when a slot takes the attempt: time in the run queue
     * (prefetched) does not count, as the runner does not count it either. */
    ctx.deadline_ms = d->deadline_ms;
    if (d->timeout_ms > 0 && d->timeout_ms <= (uint64_t) INT64_MAX / 2) {
        int64_t by = cn_wall_ms() + (int64_t) d->timeout_ms;
        if (ctx.deadline_ms <= 0 || by < ctx.deadline_ms) {
            ctx.deadline_ms = by;
        }
    }
    ctx.last_error = d->last_error;
    ctx.internal = s;
    rv = a->fn(&ctx, d->kwargs, a->arg, &v);
    if (rv != CN_OK) {
        (void) snprintf(text, sizeof(text), "handler failed: %s", cn_strerror(rv));
        v = ir_null();
        sdk_set_error(&v, "WorkerError", text);
    } else if (ir_val_deeper_than(v, IR_VALUE_MAX_DEPTH)) {
        sdk_set_error(&v, "ValueError", "action result nests deeper than 32 levels");
    } else if (ir_is_error(v)) {
        /* The runner refuses an error without a string "type" (and drops the connection,
         * with everything else in flight on it): fix it here. */
        const struct ir_val *t = v.type == IR_T_MAP ? ir_map_get(v, "type", 4) : NULL;
        if (t == NULL || t->type != IR_T_STR) {
            sdk_set_error(&v, "WorkerError", "the handler returned an error without a type");
        }
    }
    o->ok = !ir_is_error(v);
    o->value = v;
}

/* Drops outcomes of l's older sessions: the runner already failed those attempts. */
static void
sdk_outbox_prune_locked(struct sdk_link *l)
{
    uint32_t i, n = 0;

    for (i = 0; i < l->nout; i++) {
        if (l->outbox[i].gen == l->gen) {
            l->outbox[n++] = l->outbox[i];
        } else {
            ir_val_release(l->outbox[i].o.value);
        }
    }
    l->nout = n;
}

/* Adds the outbox's first outcome to b. One that cannot travel even alone is replaced by an
 * error saying why. Returns CN_OK, or CN_TOOBIG/CN_NOMEM when it must wait for the next
 * message. */
static cn_err
sdk_batch_outcome(struct wp_batch *b, struct wp_outcome *o)
{
    cn_err rv = wp_batch_add_outcome(b, o);

    if ((rv == CN_TOOBIG || rv == CN_INVAL) && b->n == 0) {
        sdk_set_error(&o->value, "ValueError",
                      rv == CN_TOOBIG ? "action result too large to send"
                                      : "action result cannot be encoded");
        o->ok = false;
        rv = wp_batch_add_outcome(b, o);
    }
    return rv;
}

/* Sends a `ready` on l's idle fetch f with as many outbox outcomes as fit in one message, and,
 * serving several runners, the room the worker has now. Serving one, it leaves the room to the
 * runner's count, which is never larger (it counts what is on its way both ways too) and never
 * stale: a `ready` parked while the slots were full would otherwise go on saying 0 after they
 * freed until the next outcome, as only several runners are told of changes. */
static void
sdk_send_ready_locked(struct sdk_link *l, struct sdk_fetch *f)
{
    uint32_t i, taken = 0, room = l->w->nlinks > 1 ? sdk_room_locked(l->w) : WP_ROOM_ANY;
    struct wp_batch b;
    nng_msg *msg = NULL;

    if (wp_batch_begin_ready(&b, room) != CN_OK) {
        return; /* out of memory: the next event tries again */
    }
    while (taken < l->nout && sdk_batch_outcome(&b, &l->outbox[taken].o) == CN_OK) {
        taken++;
    }
    wp_batch_finish(&b);
    if ((taken == 0 && l->nout > 0) || nng_msg_alloc(&msg, 0) != 0 ||
        nng_msg_append(msg, b.buf.data, b.buf.len) != 0) {
        if (msg != NULL) {
            nng_msg_free(msg);
        }
        wp_batch_fini(&b);
        return;
    }
    wp_batch_fini(&b);
    if (taken > 0) {
        for (i = 0; i < taken; i++) {
            ir_val_release(l->outbox[i].o.value);
        }
        memmove(l->outbox, l->outbox + taken, (l->nout - taken) * sizeof(*l->outbox));
        l->nout -= taken;
    }
    l->room_said = room;
    f->st = FE_SEND;
    f->gen = l->gen;
    nng_aio_set_msg(f->aio, msg);
    nng_ctx_send(f->ctx, f->aio);
}

/* Keeps l's protocol moving: outcomes waiting go out on an idle fetch, and one `ready` is
 * always out asking for work (unless stopping); with several runners, one whose latest `ready`
 * gave another room than the worker has now is told again (the runner then releases the older
 * one): more, so that it is not kept from slots another runner left; less, so that it sends
 * its work to workers that have room instead of queueing it here. Call after every change. */
void
wp_sdk_pump_locked(struct sdk_link *l)
{
    struct cairn_worker *w = l->w;
    uint32_t i;

    sdk_outbox_prune_locked(l);
    if (!l->sock_open || l->need_hello || l->failed) {
        return;
    }
    for (i = 0; i < SDK_FETCHES; i++) {
        bool other_out = l->fetch[(i + 1) % SDK_FETCHES].st != FE_IDLE;
        bool room_moved = w->nlinks > 1 && sdk_room_locked(w) != l->room_said;

        if (l->fetch[i].st != FE_IDLE ||
            (l->nout == 0 && (w->stopping || (other_out && !room_moved)))) {
            continue;
        }
        sdk_send_ready_locked(l, &l->fetch[i]);
    }
}

/* Every link but `except` (NULL: every link), after a change of room (a slot freed, a
 * dispatch arrived, a session's attempts dropped). Serving one runner, that is no other. */
void
wp_sdk_pump_others_locked(struct cairn_worker *w, const struct sdk_link *except)
{
    uint32_t i;

    for (i = 0; i < w->nlinks; i++) {
        if (w->links[i] != except) {
            wp_sdk_pump_locked(w->links[i]);
        }
    }
}

/* A remembered cancel matching d (consumed), if any. */
static bool
sdk_cancel_remembered_locked(struct sdk_link *l, const struct wp_dispatch *d)
{
    uint32_t i, n = l->ncancels < SDK_CANCEL_MEMORY ? l->ncancels : SDK_CANCEL_MEMORY;

    for (i = 0; i < n; i++) {
        struct sdk_cancel *c = &l->cancels[i];
        if (c->token == d->token && c->attempt == d->attempt &&
            memcmp(c->exec_id, d->exec_id, 16) == 0) {
            c->attempt = 0; /* attempts start at 1: never matches again */
            return true;
        }
    }
    return false;
}

static void
sdk_item_free(struct sdk_item *it)
{
    free(it->action);
    ir_val_release(it->d.kwargs);
    ir_val_release(it->d.last_error);
    free(it);
}

/* Queues the attempts of a dispatch from l for the slots and wakes one idle slot; a slot that
 * takes an attempt wakes the next while more are queued. Waking one per attempt instead would
 * wake slots that find the queue already drained by a faster one: with short actions most
 * wake-ups would be wasted, and on a small machine they cost more than the actions. */
static void
sdk_enqueue_locked(struct sdk_link *l, const struct wp_msg *r)
{
    struct cairn_worker *w = l->w;
    uint32_t i;

    for (i = 0; i < r->nitems; i++) {
        struct sdk_item *it = cn_xcalloc(1, sizeof(*it));

        it->action = cn_xstrdup(r->items[i].action);
        it->d = r->items[i];
        it->d.action = it->action;
        it->d.kwargs = ir_val_retain(r->items[i].kwargs);
        it->d.last_error = ir_val_retain(r->items[i].last_error);
        it->link = l;
        it->gen = l->gen;
        it->cancelled = sdk_cancel_remembered_locked(l, &it->d);
        if (w->rq_tail != NULL) {
            w->rq_tail->next = it;
        } else {
            w->rq_head = it;
        }
        w->rq_tail = it;
        w->nqueued++;
    }
    if (w->nidle > 0 && w->rq_head != NULL) {
        cn_cond_signal(&w->work);
    }
}

/* Frees the queued attempts of link l, or of every link when l is NULL (they will not run). */
void
wp_sdk_runq_clear_locked(struct cairn_worker *w, const struct sdk_link *l)
{
    struct sdk_item *it, *next, *keep = NULL, *tail = NULL;

    for (it = w->rq_head; it != NULL; it = next) {
        next = it->next;
        if (l == NULL || it->link == l) {
            sdk_item_free(it);
            w->nqueued--;
            continue;
        }
        it->next = NULL;
        if (tail != NULL) {
            tail->next = it;
        } else {
            keep = it;
        }
        tail = it;
    }
    w->rq_head = keep;
    w->rq_tail = tail;
}

/* nng callback for a fetch's aio: never blocks for long (decodes, queues, pumps). */
void
wp_sdk_fetch_cb(void *arg)
{
    struct sdk_fetch *f = arg;
    struct sdk_link *l = f->l;
    struct cairn_worker *w = l->w;
    int rv = nng_aio_result(f->aio);
    struct cn_errmsg em = {{0}};
    enum sdk_fetch_state st;
    struct wp_msg r;
    nng_msg *msg;

    bool undecodable = false;

    wp_msg_init(&r, WP_NOOP);
    sdk_lock(w);
    st = f->st;
    sdk_unlock(w);
    if (st == FE_RECV && rv == 0) {
        msg = nng_aio_get_msg(f->aio);
        nng_aio_set_msg(f->aio, NULL);
        if (wp_msg_decode(nng_msg_body(msg), nng_msg_len(msg), &r, &em) != CN_OK) {
            wp_sdk_log(l, CN_LOG_WARN, "undecodable reply to ready", em.text);
            wp_msg_init(&r, WP_NOOP);
            undecodable = true; /* it may have carried attempts we can never report */
        }
        nng_msg_free(msg);
    }
    sdk_lock(w);
    if (st == FE_SEND) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(f->aio));
            nng_aio_set_msg(f->aio, NULL);
            f->st = FE_IDLE; /* its outcomes are lost with the connection (WorkerLost) */
        } else {
            f->st = FE_RECV;
            nng_ctx_recv(f->ctx, f->aio);
            if (f->gen != l->gen || !l->sock_open) {
                /* The connection dropped as the send finished: withdraw the request, or
                 * nng's REQ would resend it on the next connection before our hello. */
                nng_aio_cancel(f->aio);
            }
        }
    } else if (st == FE_RECV) {
        f->st = FE_IDLE;
        if (undecodable && f->gen == l->gen) {
            wp_sdk_drop_locked(l, "a reply to ready did not decode");
        } else if (r.kind == WP_DISPATCH) {
            /* Run even while stopping: the runner assigned it before it saw our goodbye,
             * and stop() waits for it. Not from an older session (the runner failed those
             * with WorkerLost when that connection dropped), nor once teardown began. */
            if (f->gen == l->gen && l->sock_open) {
                l->hello_delay_ms = 0;
                sdk_enqueue_locked(l, &r);
            } else {
                wp_sdk_log(l, CN_LOG_INFO, "dispatch from a previous connection: not run", NULL);
            }
        } else if (rv == 0 && r.kind != WP_NOOP) {
            wp_sdk_log(l, CN_LOG_WARN, "unexpected reply to ready, treated as noop",
                       wp_kind_name(r.kind));
        } else if (rv == 0 && f->gen == l->gen) {
            l->hello_delay_ms = 0;
        }
    }
    if (rv != NNG_ECLOSED) {
        wp_sdk_pump_locked(l);
        wp_sdk_pump_others_locked(w, l); /* a dispatch took room the others were told of */
    }
    sdk_broadcast(w);
    sdk_unlock(w);
    wp_msg_fini(&r);
}

/* A slot's thread: runs attempts from the run queue one at a time and puts each outcome in the
 * outbox of the link it came from, until the teardown. */
void *
wp_sdk_slot_main(void *arg)
{
    struct sdk_slot *s = arg;
    struct cairn_worker *w = s->w;
    struct sdk_item *it;
    struct sdk_link *l;
    struct wp_outcome o;

    sdk_lock(w);
    for (;;) {
        while (w->rq_head == NULL && !w->slots_exit) {
            w->nidle++;
            cn_cond_wait(&w->work, &w->mtx);
            w->nidle--;
        }
        if (w->slots_exit || (it = w->rq_head) == NULL) {
            break;
        }
        if ((w->rq_head = it->next) == NULL) {
            w->rq_tail = NULL;
        } else if (w->nidle > 0) {
            cn_cond_signal(&w->work); /* pass the baton */
        }
        w->nqueued--;
        s->running = true;
        s->link = it->link;
        memcpy(s->exec_id, it->d.exec_id, 16);
        s->attempt = it->d.attempt;
        s->token = it->d.token;
        atomic_store_explicit(&s->cancelled, it->cancelled, memory_order_relaxed);
        w->nrunning++;
        sdk_unlock(w);
        sdk_run(s, it, &o);
        sdk_lock(w);
        s->running = false;
        s->link = NULL;
        w->nrunning--;
        l = it->link;
        if (l->nout == l->capout) {
            l->capout = l->capout ? l->capout * 2 : 16;
            l->outbox = cn_xreallocarray(l->outbox, l->capout, sizeof(*l->outbox));
        }
        l->outbox[l->nout].o = o;
        l->outbox[l->nout].gen = it->gen;
        l->nout++;
        wp_sdk_pump_locked(l); /* its outcome first: the slot is free for that runner too */
        wp_sdk_pump_others_locked(w, l);
        sdk_broadcast(w);
        sdk_unlock(w);
        sdk_item_free(it);
        sdk_lock(w);
    }
    sdk_unlock(w);
    return NULL;
}
