/* SPDX-License-Identifier: MIT */
/*
 * The pool's timer thread: answers parked requests idle for idle_ms with `noop`, turns expired
 * dispatches into ActionTimeout results and checks the workers' heartbeats. It sleeps on a
 * condition variable until the next such moment (never spins). Locks: p->mtx, as pool.c DESIGN.
 */

#include "runner/pool/pool_int.h"

/* ---- the timer thread --------------------------------------------------------------------- */

void *
rn_pl_timer_main(void *arg)
{
    struct rn_pool *p = arg;

    cn_mutex_lock(&p->mtx);
    while (!p->stopping) {
        struct results rs = RESULTS_INIT;
        int64_t mono = cn_mono_ms(), wall = cn_wall_ms();
        int64_t next = mono + p->idle_ms, wake;
        struct pctx *c, *cnext;
        struct worker *w;
        size_t i, dropped = 0;

        for (i = 0; i < p->nrefused; i++) {
            if (mono - p->refused[i].at >= REFUSE_GRACE_MS) {
                rn_pl_close_pipe(p, p->refused[i].pipe); /* its removal callback drops the entry */
            } else if (p->refused[i].at + REFUSE_GRACE_MS < next) {
                next = p->refused[i].at + REFUSE_GRACE_MS;
            }
        }
        for (i = 0; i < p->greet.len;) {
            int64_t limit = p->greet.items[i].at + (int64_t) p->hello_timeout_ms;
            if (mono >= limit) {
                /* Forgotten now: its removal callback finds nothing more to do. */
                rn_pl_close_pipe(p, p->greet.items[i].pipe);
                p->greet.items[i] = p->greet.items[--p->greet.len];
                p->st.ungreeted++;
                dropped++;
                continue;
            }
            if (limit < next) {
                next = limit;
            }
            i++;
        }
        if (dropped > 0) {
            rn_pl_results_note(&rs, "dropped %zu connection(s) that said no hello within %u ms",
                               dropped, p->hello_timeout_ms);
        }
        for (w = p->workers; w != NULL; w = w->next) {
            /* Heartbeat: a live worker re-parks each request the idle cycle answers, so three
             * periods of silence mean its host is gone with the connection still open. A
             * worker draining after goodbye parks nothing; its attempts' deadlines bound it. */
            int64_t limit = w->last_seen + 3 * (int64_t) p->idle_ms + 1000;
            if (w->leaving) {
                continue;
            }
            if (mono >= limit) {
                rn_pl_results_note(&rs, "worker %s silent for %lld ms: dropping it",
                                   w->name != NULL ? w->name : "?",
                                   (long long) (mono - w->last_seen));
                p->st.silent++;
                w->last_seen = mono; /* once: its removal callback fails what it held */
                rn_pl_close_pipe(p, w->pipe);
            } else if (limit < next) {
                next = limit;
            }
        }
        for (c = p->all; c != NULL; c = cnext) {
            cnext = c->next; /* an answer frees c */
            if (mono - c->parked_at >= (int64_t) p->idle_ms) {
                rn_pl_reply_kind_locked(p, c, WP_NOOP); /* liveness for both sides */
            } else if (c->parked_at + p->idle_ms < next) {
                next = c->parked_at + p->idle_ms;
            }
        }
        for (i = 0; i < p->nfl; i++) {
            struct flight *f = &p->fl[i];
            if (!f->used || f->done || f->deadline == 0) {
                continue;
            }
            if (wall >= f->deadline) {
                struct worker *fw = rn_pl_worker_find(p, f->pipe);
                rn_pl_synthetic_error(&rs, f->instance_id, f->exec_id, f->attempt,
                                      rn_error_name(RN_ERR_ACTION_TIMEOUT),
                                      "the attempt did not finish before its deadline");
                f->done = true;
                p->st.timeouts++;
                /* Stop the work, not only the wait: the worker gets `cancel` (its slot stays
                 * taken until it answers; a worker that never does keeps only that slot). */
                if (fw != NULL && fw->ctl != NULL) {
                    rn_pl_send_cancel_locked(p, fw->ctl, f);
                } else {
                    f->cancel_pending = true;
                }
            } else if (mono + (f->deadline - wall) < next) {
                next = mono + (f->deadline - wall);
            }
        }
        if (rs.len > 0 || rs.notes.len > 0) {
            cn_mutex_unlock(&p->mtx);
            rn_pl_results_deliver(p, &rs);
            cn_mutex_lock(&p->mtx);
            continue;
        }
        /* Sleep until the next idle expiry or deadline, or until woken by activity. */
        wake = next - mono;
        if (wake < 1) {
            wake = 1;
        }
        p->timer_wake = mono + wake;
        cn_cond_wait_until(&p->cond, &p->mtx, mono + wake);
    }
    cn_mutex_unlock(&p->mtx);
    return NULL;
}
