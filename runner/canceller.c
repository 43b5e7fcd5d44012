/* SPDX-License-Identifier: MIT */
/* The canceller (see canceller.h). */
#include "runner/canceller.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/backoff.h"

struct rn_canceller {
    struct rn_canceller_cfg cfg;
    rn_cancel_fn fn;
    void *arg;
    pthread_t thread;
    atomic_bool stop;
};

static void
pause_ms(struct rn_canceller *c, int64_t ms)
{
    int64_t until = cn_mono_ms() + ms;

    while (!atomic_load(&c->stop) && cn_mono_ms() < until) {
        struct timespec ts = {0, 50 * 1000000L};
        (void) nanosleep(&ts, NULL);
    }
}

static void *
canceller_main(void *arg)
{
    struct rn_canceller *c = arg;
    struct rn_backend *b = c->cfg.backend;
    struct rn_backoff backoff = RN_BACKOFF_INIT;
    int64_t next_sweep = 0; /* at once: what waited while no runner listened */

    while (!atomic_load(&c->stop)) {
        struct cn_errmsg em = {{0}};
        cn_err rv = CN_OK;

        if (cn_mono_ms() >= next_sweep) {
            rv = b->ops->sweep_cancels(b, c->fn, c->arg, &em);
            if (rv == CN_OK) {
                next_sweep = cn_mono_ms() + c->cfg.sweep_interval_ms;
            }
        }
        if (rv == CN_OK) {
            rv = b->ops->wait_cancels(b, RN_CANCELLER_WAIT_MS, c->fn, c->arg, &em);
        }
        if (rv != CN_OK) {
            int64_t pause = rn_backoff_next(&backoff);
            cn_log(CN_LOG_WARN, "listening for cancels failed (retrying in %lld ms): %s",
                   (long long) pause, em.text);
            next_sweep = 0; /* notifications sent meanwhile are lost: sweep once back */
            pause_ms(c, pause);
            continue;
        }
        rn_backoff_reset(&backoff);
    }
    return NULL;
}

cn_err
rn_canceller_start(const struct rn_canceller_cfg *cfg, rn_cancel_fn fn, void *arg,
                   struct rn_canceller **out, struct cn_errmsg *err)
{
    struct rn_canceller *c;

    *out = NULL;
    if (cfg->backend->ops->wait_cancels == NULL || cfg->backend->ops->sweep_cancels == NULL) {
        return CN_OK; /* a backend without cancels (in memory): nothing to hear */
    }
    c = cn_xcalloc(1, sizeof(*c));
    c->cfg = *cfg;
    c->fn = fn;
    c->arg = arg;
    atomic_init(&c->stop, false);
    if (pthread_create(&c->thread, NULL, canceller_main, c) != 0) {
        free(c);
        return cn_errmsg_set(err, CN_IO, "cannot start the canceller thread");
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
    atomic_store(&c->stop, true);
    cn_thread_join(c->thread);
    free(c);
}
