/* SPDX-License-Identifier: MIT */
/* The canceller (see canceller.h). */
#include "runner/engine/canceller.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/uuid.h"
#include "ir/base/vec.h"
#include "ir/base/xalloc.h"
#include "runner/engine/backoff.h"
#include "runner/engine/stop.h"

struct rn_canceller {
    struct rn_canceller_cfg cfg;
    struct rn_canceller_hooks hooks;
    struct rn_stop stop;
    _Atomic uint64_t runs, failures; /* waits for notices, and those that failed */
    struct {
        struct rn_child_link *items; /* child notices of the last wait */
        size_t len, cap;
    } heard;
};

static void
heard_cancel(void *arg, struct rn_iid iid, const char *reason, bool force)
{
    struct rn_canceller *c = arg;

    c->hooks.cancel(c->hooks.arg, iid, reason, force);
}

static void
heard_children(void *arg, const struct rn_child_link *done, size_t n)
{
    struct rn_canceller *c = arg;
    size_t i;

    for (i = 0; i < n; i++) {
        if (c->hooks.holds == NULL || c->hooks.holds(c->hooks.arg, done[i].parent)) {
            CN_VEC_XPUSH(&c->heard, done[i]); /* most are for other runners' parents */
        }
    }
}

/* Reads the outcomes of the children heard of whose parents are held here and hands them over.
 * One that cannot be read now is left to the parent's next claim. */
static cn_err
deliver_children(struct rn_canceller *c, struct cn_errmsg *err)
{
    struct rn_backend *b = c->cfg.backend;
    struct rn_done *out;
    size_t i, n = c->heard.len;
    cn_err rv;

    if (n == 0 || b->ops->child_results == NULL) {
        c->heard.len = 0;
        return CN_OK;
    }
    out = cn_xcalloc(n, sizeof(*out));
    rv = b->ops->child_results(b, c->heard.items, n, out, err);
    for (i = 0; i < n; i++) {
        if (rv == CN_OK && !rn_xid_is_nil(out[i].exec_id) && c->hooks.child_result != NULL) {
            c->hooks.child_result(c->hooks.arg, c->heard.items[i].parent, &out[i]);
        }
        ir_val_release(out[i].value);
    }
    free(out);
    c->heard.len = 0;
    return rv;
}

static void *
canceller_main(void *arg)
{
    struct rn_canceller *c = arg;
    struct rn_backend *b = c->cfg.backend;
    struct rn_backoff backoff = RN_BACKOFF_INIT;
    bool listening = false; /* since the last (re)connection: the ticker has been told */

    while (!rn_stop_is_set(&c->stop)) {
        struct cn_errmsg em = {{0}};
        /* The wait (re)issues LISTEN first: once it returned, every notification from then on
         * reaches this session, and the ticker's sweep finds what came before. */
        cn_err rv = b->ops->wait_notices(b, listening ? RN_CANCELLER_WAIT_MS : 0, heard_cancel,
                                         heard_children, c, &em);

        if (rv == CN_OK) {
            rv = deliver_children(c, &em);
        }
        atomic_fetch_add(&c->runs, 1);
        if (rv != CN_OK) {
            int64_t pause = rn_backoff_next(&backoff);
            atomic_fetch_add(&c->failures, 1);
            cn_log(CN_LOG_WARN,
                   "listening for cancels and children's outcomes failed (retrying in "
                   "%lld ms): %s",
                   (long long) pause, em.text);
            listening = false; /* notifications sent meanwhile are lost */
            (void) rn_stop_pause(&c->stop, pause);
            continue;
        }
        if (!listening) {
            rn_ticker_poke(c->cfg.ticker, RN_JOB_SWEEP);
            listening = true;
        }
        rn_backoff_reset(&backoff);
    }
    return NULL;
}

cn_err
rn_canceller_start(const struct rn_canceller_cfg *cfg, const struct rn_canceller_hooks *hooks,
                   struct rn_canceller **out, struct cn_errmsg *err)
{
    struct rn_canceller *c;
    cn_err rv;

    *out = NULL;
    if (cfg->backend->ops->wait_notices == NULL || cfg->backend->ops->sweep_cancels == NULL) {
        return CN_OK; /* a backend without cancels (in memory): nothing to hear */
    }
    c = cn_xcalloc(1, sizeof(*c));
    c->cfg = *cfg;
    c->hooks = *hooks;
    if ((rv = rn_stop_start(&c->stop, "cairn-canceller", canceller_main, c, err)) != CN_OK) {
        free(c);
        return rv;
    }
    *out = c;
    return CN_OK;
}

void
rn_canceller_stop(struct rn_canceller *c)
{
    if (c == NULL) {
        return;
    }
    rn_stop_join(&c->stop);
    free(c->heard.items);
    free(c);
}

void
rn_canceller_stats(struct rn_canceller *c, uint64_t *runs, uint64_t *failures)
{
    *runs = c != NULL ? atomic_load(&c->runs) : 0;
    *failures = c != NULL ? atomic_load(&c->failures) : 0;
}
