/* SPDX-License-Identifier: MIT */
/* Checked pthread calls and monotonic condition waits (see sync.h). */
#define _GNU_SOURCE /* pthread_setname_np; must precede every include */
#include "ir/base/sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/xalloc.h"

static _Noreturn void
sync_fail(const char *call, int rv)
{
    (void) fprintf(stderr, "cairn: %s failed: %s: aborting\n", call, strerror(rv));
    abort();
}

#define CHECK(call)                \
    do {                           \
        int rv_ = (call);          \
        if (rv_ != 0) {            \
            sync_fail(#call, rv_); \
        }                          \
    } while (0)

void
cn_mutex_init(pthread_mutex_t *m)
{
    CHECK(pthread_mutex_init(m, NULL));
}

/* The calls that take their one object and cannot fail but by a bug: each checked alike. */
#define CHECKED(fn, type, call, x) \
    void fn(type x)                \
    {                              \
        CHECK(call(x));            \
    }
CHECKED(cn_mutex_destroy, pthread_mutex_t *, pthread_mutex_destroy, m)
CHECKED(cn_mutex_lock, pthread_mutex_t *, pthread_mutex_lock, m)
CHECKED(cn_mutex_unlock, pthread_mutex_t *, pthread_mutex_unlock, m)
CHECKED(cn_cond_destroy, pthread_cond_t *, pthread_cond_destroy, c)
CHECKED(cn_cond_signal, pthread_cond_t *, pthread_cond_signal, c)
CHECKED(cn_cond_broadcast, pthread_cond_t *, pthread_cond_broadcast, c)
#undef CHECKED

void
cn_cond_init(pthread_cond_t *c)
{
    pthread_condattr_t a;

    CHECK(pthread_condattr_init(&a));
    CHECK(pthread_condattr_setclock(&a, CLOCK_MONOTONIC));
    CHECK(pthread_cond_init(c, &a));
    CHECK(pthread_condattr_destroy(&a));
}

void
cn_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    CHECK(pthread_cond_wait(c, m));
}

void
cn_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t at_mono_ms)
{
    struct timespec ts;
    int rv;

    ts.tv_sec = (time_t) (at_mono_ms / 1000);
    ts.tv_nsec = (long) (at_mono_ms % 1000) * 1000000L;
    rv = pthread_cond_timedwait(c, m, &ts);
    if (rv != 0 && rv != ETIMEDOUT) {
        sync_fail("pthread_cond_timedwait", rv);
    }
}

void
cn_thread_join(pthread_t t)
{
    CHECK(pthread_join(t, NULL));
}

void
cn_cond_raise(pthread_mutex_t *m, pthread_cond_t *c, bool *flag)
{
    cn_mutex_lock(m);
    *flag = true;
    cn_cond_broadcast(c);
    cn_mutex_unlock(m);
}

/* What a new thread runs first: it names itself, so that it carries its name from its first
 * instruction (named from outside after pthread_create, it could run a while as the process). */
struct thread_start {
    void *(*fn)(void *);
    void *arg;
    char name[16]; /* the kernel keeps 15 characters; a longer name would fail with ERANGE */
};

static void *
thread_main(void *p)
{
    struct thread_start s = *(struct thread_start *) p;

    free(p);
    (void) pthread_setname_np(pthread_self(), s.name);
    return s.fn(s.arg);
}

cn_err
cn_thread_start(struct cn_thread *t, const char *name, void *(*fn)(void *), void *arg,
                struct cn_errmsg *err)
{
    struct thread_start *s = cn_xmalloc(sizeof(*s));
    int rv;

    s->fn = fn;
    s->arg = arg;
    (void) snprintf(s->name, sizeof(s->name), "%s", name);
    t->started = false;
    if ((rv = pthread_create(&t->id, NULL, thread_main, s)) != 0) {
        free(s);
        return cn_errmsg_set(err, CN_NOMEM, "cannot start the %s thread: %s", name, strerror(rv));
    }
    t->started = true;
    return CN_OK;
}

void
cn_thread_wait(struct cn_thread *t)
{
    if (t->started) {
        cn_thread_join(t->id);
        t->started = false;
    }
}
