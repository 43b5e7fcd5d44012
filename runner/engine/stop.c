/* SPDX-License-Identifier: MIT */
/* A stop flag a thread can pause on (see stop.h). */
#include "runner/engine/stop.h"

#include "ir/base/clock.h"
#include "ir/base/sync.h"

static void
stop_fini(struct rn_stop *s)
{
    cn_cond_destroy(&s->cond);
    cn_mutex_destroy(&s->mtx);
}

cn_err
rn_stop_start(struct rn_stop *s, const char *name, void *(*fn)(void *), void *arg,
              struct cn_errmsg *err)
{
    cn_err rv;

    atomic_init(&s->set, false);
    cn_mutex_init(&s->mtx);
    cn_cond_init(&s->cond);
    if ((rv = cn_thread_start(&s->thread, name, fn, arg, err)) != CN_OK) {
        stop_fini(s);
    }
    return rv;
}

void
rn_stop_join(struct rn_stop *s)
{
    rn_stop_set(s);
    cn_thread_wait(&s->thread);
    stop_fini(s);
}

void
rn_stop_set(struct rn_stop *s)
{
    /* Under the mutex, so that a thread between its check and its wait cannot miss it. */
    cn_mutex_lock(&s->mtx);
    atomic_store(&s->set, true);
    cn_cond_broadcast(&s->cond);
    cn_mutex_unlock(&s->mtx);
}

bool
rn_stop_is_set(struct rn_stop *s)
{
    return atomic_load(&s->set);
}

bool
rn_stop_wait_until(struct rn_stop *s, int64_t at_mono_ms)
{
    bool set;

    cn_mutex_lock(&s->mtx);
    while (!atomic_load(&s->set) && cn_mono_ms() < at_mono_ms) {
        cn_cond_wait_until(&s->cond, &s->mtx, at_mono_ms);
    }
    set = atomic_load(&s->set);
    cn_mutex_unlock(&s->mtx);
    return set;
}

bool
rn_stop_pause(struct rn_stop *s, int64_t ms)
{
    return rn_stop_wait_until(s, cn_mono_ms() + ms);
}
