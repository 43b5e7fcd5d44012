/* SPDX-License-Identifier: MIT */
#include "tests/support/wait.h"

int64_t
t_clock_ms(clockid_t clk)
{
    struct timespec ts;

    clock_gettime(clk, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec
t_deadline_in(int64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t) (ms / 1000);
    ts.tv_nsec += (long) (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

bool
t_wait_count(pthread_mutex_t *mtx, pthread_cond_t *cond, const int *count, int n, int ms)
{
    struct timespec ts = t_deadline_in(ms);
    bool ok;

    pthread_mutex_lock(mtx);
    while (*count < n && pthread_cond_timedwait(cond, mtx, &ts) == 0) {
    }
    ok = *count >= n;
    pthread_mutex_unlock(mtx);
    return ok;
}
