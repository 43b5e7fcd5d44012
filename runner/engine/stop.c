/* SPDX-License-Identifier: MIT */
/* A stop flag a thread can pause on (see stop.h). */
#include "runner/engine/stop.h"

#include "ir/base/clock.h"
#include "ir/base/sync.h"

void
rn_stop_init(struct rn_stop *s)
{
    atomic_init(&s->set, false);
    cn_mutex_init(&s->mtx);
    cn_cond_init(&s->cond);
}

void
rn_stop_fini(struct rn_stop *s)
{
    cn_cond_destroy(&s->cond);
    cn_mutex_destroy(&s->mtx);
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
