/* SPDX-License-Identifier: MIT */
/* The descriptor budget (see fdbudget.h). */
#include "runner/pool/fdbudget.h"

#include <dirent.h>
#include <sys/resource.h>

#include "ir/base/log.h"
#include "ir/base/sync.h"

uint64_t
rn_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    uint64_t n = 0;

    if (d == NULL) {
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    (void) closedir(d);
    return n > 0 ? n - 1 : 0; /* less the walk's own */
}

void
rn_fdbudget_init(struct rn_fdbudget *b, uint64_t reserve)
{
    struct rlimit rl;
    uint64_t open_now = rn_fd_count();

    b->limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                   ? (uint64_t) rl.rlim_cur
                   : UINT32_MAX;
    b->baseline = open_now;
    b->reserve = reserve;
    b->budget = b->limit > open_now + reserve ? b->limit - open_now - reserve : 0;
    atomic_init(&b->used, 0);
    atomic_init(&b->exhausted, 0);
    atomic_init(&b->warned, false);
    atomic_init(&b->waiting, false);
    cn_mutex_init(&b->mtx);
    b->room = NULL;
    b->room_arg = NULL;
    if (b->budget < 64) {
        cn_log(CN_LOG_WARN,
               "the open-file limit (%llu) leaves room for %llu listener connection(s) after "
               "the %llu open now and the %llu kept for the runner itself: raise LimitNOFILE "
               "(ulimit -n)",
               (unsigned long long) b->limit, (unsigned long long) b->budget,
               (unsigned long long) open_now, (unsigned long long) reserve);
    }
}

bool
rn_fdbudget_take(struct rn_fdbudget *b, const char *who)
{
    uint64_t u = atomic_load(&b->used);

    do {
        if (u >= b->budget) {
            atomic_fetch_add(&b->exhausted, 1);
            if (!atomic_exchange(&b->warned, true)) {
                cn_log(CN_LOG_WARN,
                       "descriptor reserve reached: the listeners hold %llu connection(s), all "
                       "the open-file limit of %llu leaves them beside the %llu kept for the "
                       "runner's own database sessions and log; refusing %s connections until "
                       "some close (cairn_fd_budget_exhausted_total)",
                       (unsigned long long) u, (unsigned long long) b->limit,
                       (unsigned long long) b->reserve, who);
            }
            return false;
        }
    } while (!atomic_compare_exchange_weak(&b->used, &u, u + 1));
    return true;
}

void
rn_fdbudget_force(struct rn_fdbudget *b)
{
    atomic_fetch_add(&b->used, 1);
}

void
rn_fdbudget_fini(struct rn_fdbudget *b)
{
    cn_mutex_destroy(&b->mtx);
}

void
rn_fdbudget_on_room(struct rn_fdbudget *b, void (*room)(void *arg), void *arg)
{
    cn_mutex_lock(&b->mtx);
    b->room = room;
    b->room_arg = arg;
    cn_mutex_unlock(&b->mtx);
}

bool
rn_fdbudget_wait(struct rn_fdbudget *b)
{
    atomic_store(&b->waiting, true);
    /* A unit given back before the flag was up would have found no waiter: look again. */
    if (atomic_load(&b->used) < b->budget && atomic_exchange(&b->waiting, false)) {
        return false;
    }
    return true;
}

void
rn_fdbudget_give(struct rn_fdbudget *b)
{
    uint64_t u = atomic_fetch_sub(&b->used, 1) - 1;

    if (u < b->budget && atomic_load(&b->waiting) && atomic_exchange(&b->waiting, false)) {
        cn_mutex_lock(&b->mtx);
        if (b->room != NULL) {
            b->room(b->room_arg);
        }
        cn_mutex_unlock(&b->mtx);
    }

    /* Told once per episode: the warning again only after the listeners are back under 90%. */
    if (u * 10 < b->budget * 9 && atomic_load(&b->warned) && atomic_exchange(&b->warned, false)) {
        cn_log(CN_LOG_INFO, "descriptor reserve clear: the listeners hold %llu of %llu; accepting",
               (unsigned long long) u, (unsigned long long) b->budget);
    }
}
