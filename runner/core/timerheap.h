/* SPDX-License-Identifier: MIT */
/*
 * A shard's timers (sleeps, retry backoffs, action deadlines): a binary min-heap on the wall
 * clock instant each is due, since the executor's timers are wall-clock instants that survive
 * a snapshot. A timer names its instance and execution node, not a pointer, so one left behind
 * by an instance that finished or moved is harmless (the shard finds no instance, or the
 * executor sees an early or stale timer, and ignores it). Not thread-safe: one shard owns it.
 */
#ifndef RUNNER_TIMERHEAP_H
#define RUNNER_TIMERHEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/exec/ids.h"

struct rn_timer_ent {
    int64_t at_wall_ms;
    struct rn_iid iid;
    struct rn_xid exec_id;
};

struct rn_timerheap {
    struct rn_timer_ent *items;
    size_t len, cap;
};

/* Adds a timer (aborts if memory is exhausted: a dropped timer would strand its instance). */
void rn_timerheap_push(struct rn_timerheap *h, const struct rn_timer_ent *t);
/* True, with *at_wall_ms the earliest instant, when a timer is armed. */
bool rn_timerheap_next(const struct rn_timerheap *h, int64_t *at_wall_ms);
/* Removes the earliest timer into *out if it is due at now_wall_ms; false otherwise. */
bool rn_timerheap_pop_due(struct rn_timerheap *h, int64_t now_wall_ms, struct rn_timer_ent *out);
void rn_timerheap_fini(struct rn_timerheap *h);

#endif
