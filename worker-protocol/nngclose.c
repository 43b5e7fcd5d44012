/* SPDX-License-Identifier: MIT */
/* nng_close with a deadline; see nngclose.h. */
#include "worker-protocol/nngclose.h"

#include <pthread.h>
#include <stdlib.h>

#include "ir/base/clock.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"

struct closer {
    pthread_mutex_t mtx;
    pthread_cond_t done_cv;
    nng_socket sock;
    bool done;
    int refs; /* the closing thread and the waiter; the last one frees */
};

static void
closer_unref(struct closer *c)
{
    bool last;

    cn_mutex_lock(&c->mtx);
    last = --c->refs == 0;
    cn_mutex_unlock(&c->mtx);
    if (last) {
        cn_cond_destroy(&c->done_cv);
        cn_mutex_destroy(&c->mtx);
        free(c);
    }
}

static void *
closer_main(void *arg)
{
    struct closer *c = arg;

    (void) nng_close(c->sock);
    cn_mutex_lock(&c->mtx);
    c->done = true;
    cn_cond_broadcast(&c->done_cv);
    cn_mutex_unlock(&c->mtx);
    closer_unref(c);
    return NULL;
}

bool
wp_close_bounded(nng_socket sock, int64_t timeout_ms)
{
    struct closer *c = cn_xcalloc(1, sizeof(*c));
    int64_t deadline = cn_mono_ms() + timeout_ms;
    pthread_t t;
    bool done;

    cn_mutex_init(&c->mtx);
    cn_cond_init(&c->done_cv);
    c->sock = sock;
    c->refs = 2;
    if (pthread_create(&t, NULL, closer_main, c) != 0) {
        c->refs = 1;
        (void) nng_close(sock); /* no thread to spare: close here, unbounded */
        closer_unref(c);
        return true;
    }
    (void) pthread_detach(t);
    cn_mutex_lock(&c->mtx);
    while (!c->done && cn_mono_ms() < deadline) {
        cn_cond_wait_until(&c->done_cv, &c->mtx, deadline);
    }
    done = c->done;
    cn_mutex_unlock(&c->mtx);
    closer_unref(c);
    return done;
}
