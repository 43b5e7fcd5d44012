/* SPDX-License-Identifier: MIT */
/* The shard timer heap (see timerheap.h). */
#include "runner/core/timerheap.h"

#include <stdlib.h>

#include "ir/base/xalloc.h"

void
rn_timerheap_push(struct rn_timerheap *h, const struct rn_timer_ent *t)
{
    size_t i;

    CN_VEC_XRESERVE(h, h->len + 1);
    i = h->len++;
    while (i > 0 && h->items[(i - 1) / 2].at_wall_ms > t->at_wall_ms) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i] = *t;
}

bool
rn_timerheap_next(const struct rn_timerheap *h, int64_t *at_wall_ms)
{
    if (h->len == 0) {
        return false;
    }
    *at_wall_ms = h->items[0].at_wall_ms;
    return true;
}

bool
rn_timerheap_pop_due(struct rn_timerheap *h, int64_t now_wall_ms, struct rn_timer_ent *out)
{
    struct rn_timer_ent last;
    size_t i = 0;

    if (h->len == 0 || h->items[0].at_wall_ms > now_wall_ms) {
        return false;
    }
    *out = h->items[0];
    last = h->items[--h->len];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len) {
            break;
        }
        if (c + 1 < h->len && h->items[c + 1].at_wall_ms < h->items[c].at_wall_ms) {
            c++;
        }
        if (h->items[c].at_wall_ms >= last.at_wall_ms) {
            break;
        }
        h->items[i] = h->items[c];
        i = c;
    }
    if (h->len > 0) {
        h->items[i] = last;
    } else if (h->cap > 4096) {
        /* Emptied after a large fan-out (a deadline per action): give its room back. */
        rn_timerheap_fini(h);
    }
    return true;
}

void
rn_timerheap_fini(struct rn_timerheap *h)
{
    free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}
