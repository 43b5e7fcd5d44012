/* SPDX-License-Identifier: MIT */
/*
 * The descriptor budget: how many connections the runner's listeners (HTTP, workers) may hold
 * at once, so that no client of either can take the descriptors the runner needs for itself.
 * Without it, 1 100 connections that each sent half a request (or never finished a transport
 * handshake) filled a table of 1 024 descriptors, and the runner could not reconnect to
 * PostgreSQL after its sessions were terminated: its instances stalled and /healthz timed out.
 *
 * The budget is set once, at start: the open-file limit (RLIMIT_NOFILE, which cairn-runner
 * raises to its hard limit), less the descriptors open at that moment, less a reserve for what
 * the runner opens later (RN_FD_RESERVE: every database session twice over, since a reconnect
 * may open the new socket before the old one is closed, the log file twice for a SIGHUP
 * reopen, and room for the libraries' own pipes and lookups). A listener takes one unit per
 * connection from the moment it accepts it and gives it back when the connection closes; a
 * listener that finds the budget spent stops accepting (or closes the new connection at once,
 * or one of its own idle ones to make room: then it is over the budget by the few closing, at
 * most RN_FD_CLOSING_MAX per listener, which the reserve's slack covers) until one is given back,
 * and says so once in the log.
 *
 * Threads: any; take and give are lock-free (one atomic counter) but for a give while a
 * listener waits for room, which calls its callback under the budget's leaf mutex.
 */
#ifndef RUNNER_FDBUDGET_H
#define RUNNER_FDBUDGET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Descriptors kept back for the runner itself: 2 per database session (sessions: the claimer,
 * keeper, canceller, ticker, pruner, status page and each persister), 2 for the log file, and 64
 * for everything else it or its libraries open after start (nng's and libmicrohttpd's pipes, name
 * lookups, /proc reads). */
#define RN_FD_RESERVE(persisters) (2u * (6u + (persisters)) + 2u + 64u)

/* Connections a listener may hold past the budget while the ones it closed to make room for
 * them are not freed yet: past this many it refuses the new one instead. Without the cap, a
 * burst of connections that each displaced a closing one kept the count rising until the
 * process ran out of descriptors (a worker listener, 256 of 256, under ASan's slower frees). */
#define RN_FD_CLOSING_MAX 16u

struct rn_fdbudget {
    uint64_t limit;             /* RLIMIT_NOFILE's soft limit at start */
    uint64_t baseline;          /* descriptors open at start */
    uint64_t reserve;           /* kept back (RN_FD_RESERVE) */
    uint64_t budget;            /* what the listeners may hold: limit - baseline - reserve */
    _Atomic uint64_t used;      /* held by the listeners now */
    _Atomic uint64_t exhausted; /* times a listener found it spent */
    _Atomic bool warned;        /* a log line said so; cleared when it has room again */
    /* One listener that stopped accepting is told when a unit comes back (rn_fdbudget_wait):
     * `waiting` is the fast path, `mtx` (a leaf) guards the callback. */
    _Atomic bool waiting;
    pthread_mutex_t mtx;
    void (*room)(void *arg);
    void *room_arg;
};

/* Sets the budget from the process's open-file limit and its open descriptors now. */
void rn_fdbudget_init(struct rn_fdbudget *b, uint64_t reserve);
void rn_fdbudget_fini(struct rn_fdbudget *b);
/* Takes one unit for a connection that who (for the log: "HTTP", "worker") accepted: false
 * when the budget is spent (the caller refuses it; logged once until there is room again). */
bool rn_fdbudget_take(struct rn_fdbudget *b, const char *who);
/* Takes one unit whatever the budget says: for a connection accepted while another of the
 * same listener is being closed to make room (that one gives its unit back within a moment,
 * and the reserve's slack covers the moment). */
void rn_fdbudget_force(struct rn_fdbudget *b);
/* Gives back a unit taken; calls the waiter's room callback if it waits (from this thread:
 * the callback must not block or take a lock the caller may hold). */
void rn_fdbudget_give(struct rn_fdbudget *b);
/* Sets (NULL: clears) the callback of the one listener that may stop accepting. */
void rn_fdbudget_on_room(struct rn_fdbudget *b, void (*room)(void *arg), void *arg);
/* The waiter stopped accepting: its room callback runs once when a unit comes back. Returns
 * false when there is room already (it must not wait, then). */
bool rn_fdbudget_wait(struct rn_fdbudget *b);
/* Descriptors open in this process now (a walk of /proc/self/fd), or 0 if unknown. */
uint64_t rn_fd_count(void);

#endif
