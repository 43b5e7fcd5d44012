/* SPDX-License-Identifier: MIT */
/*
 * The worker pool: the runner's end of the worker protocol (docs/protocol.md). It listens as
 * the REP end of nng's REQ/REP (sprep.h), bounds connections from their accept (the transport
 * handshake and hello in time, few waiting at once), accepts workers (hello/welcome), keeps
 * their idle `ready` requests parked,
 * answers one with a `dispatch` when work for an action that worker serves is submitted,
 * routes outcomes back through a callback, enforces per-attempt timeouts (counted from when a
 * worker starts the attempt on a slot, so that waiting for a worker or in a worker's prefetch
 * queue does not count, and bounded by the attempt's schedule-to-close deadline: a synthetic
 * ActionTimeout, and `cancel` to the worker), and turns the
 * in-flight attempts of a dropped connection into WorkerLost errors at once.
 *
 * Threads: nng's callback threads run the protocol (through sprep.h); one pool thread runs timers
 * (idle noops, deadlines). All pool state is guarded by one mutex; the result callback is always
 * called with no pool lock held, from an nng or pool thread, and must not block (the shards push
 * the result into their inbox). rn_pool_submit is thread-safe.
 */
#ifndef RUNNER_POOL_H
#define RUNNER_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "ir/value.h"
#include "runner/core/lathist.h"
#include "runner/exec/ids.h"
#include "runner/pool/fdbudget.h"

struct rn_pool;

/* A connection costs a file descriptor from its accept, and nothing but a `hello` proves it
 * is a worker: without a bound, connections that never finish the transport handshake or never
 * say hello (a port scan, a misconfigured client, an attack) exhaust the process's descriptors
 * and with them the runner's database connections. Both are counted from the accept (sprep.h):
 * a real worker says hello within milliseconds of connecting; 5 s covers a loaded host. 128
 * waiting at once is far above any fleet's reconnect burst after a runner restart (each worker
 * connects once); past it the one that has waited longest is dropped for the newcomer. */
#define RN_POOL_HELLO_TIMEOUT_MS 5000
#define RN_POOL_MAX_UNGREETED    128
/* The least backlog that rn_pool_room allows: a claim batch's worth of attempts. It trades
 * one runner's speed against the spread of work over runners: a constant 512 made queue-noop
 * run 13 000-15 600 instances/s instead of 9 000-9 500 (the claimer stopped less often while a
 * batch's first snapshots were written), but a runner with small workers then held every
 * instance of the chaos suite's smoke tier, and a runner restarted after kill -9 got none of
 * the rest; with 16, queue-noop fell to 2 200 (bench/HISTORY.md, "One worker serving several
 * runners"). So the floor stays 256 and
 * the backlog grows past it with the workers' drain rate instead: RN_POOL_BACKLOG_HORIZON_MS
 * of attempts at the rate they were dispatched over the last few hundred ms. Measured against
 * the floor alone, interleaved (bench/HISTORY.md, "The backlog follows the workers' drain
 * rate"): queue-noop +17-41% at 100 ms, +40-60% at
 * 200 ms; sequence and fan-out unchanged. A slow fleet's rate leaves the floor as it was. */
#define RN_POOL_BACKLOG_MIN        256
#define RN_POOL_BACKLOG_HORIZON_MS 200

struct rn_pool_cfg {
    const char *listen_url;      /* ipc://PATH, tcp://HOST:PORT (port 0: any; see rn_pool_port) */
    const char *credential;      /* required in hello when not NULL */
    uint32_t idle_ms;            /* parked requests are answered with noop after this; 0:
                                    RN_DEFAULT_WORKER_IDLE_MS */
    uint32_t requeue_lost;       /* a dropped worker's attempts are dispatched again up to this many
                                    times each before failing with WorkerLost (0: fail at once) */
    uint32_t hello_timeout_ms;   /* a connection that has not said hello by then is dropped (0:
                                    RN_POOL_HELLO_TIMEOUT_MS) */
    uint32_t max_ungreeted;      /* connections waiting to say hello at once; more are dropped as
                                    they arrive (0: RN_POOL_MAX_UNGREETED) */
    uint32_t backlog_horizon_ms; /* rn_pool_room keeps this long of attempts ahead at the
                                    workers' drain rate (0: RN_POOL_BACKLOG_HORIZON_MS) */
    /* The lease gate: attempts are dispatched only while *leases_confirmed_ms (the monotonic
     * instant the runner's last complete lease renewal started) is less than lease_ttl_ms old.
     * Past that, every lease may have expired and been claimed elsewhere (the process was
     * paused, or could not reach the database): work is held until the next renewal says which
     * leases are still ours, then resumes with rn_pool_kick. NULL: no gate. */
    _Atomic int64_t *leases_confirmed_ms;
    uint32_t lease_ttl_ms;
    /* For tls+tcp:// (PEM files): */
    const char *tls_cert_key_file; /* the runner's certificate and key, one file */
    const char *tls_ca_file;       /* CA for worker certificates */
    bool tls_require_client_cert;  /* refuse workers without a certificate from tls_ca_file */
    /* Every connection takes a unit from its accept to its close (fdbudget.h); with the budget
     * spent, one waiting for hello is dropped to make room, or accepting stops until one
     * closes. NULL: none. */
    struct rn_fdbudget *budget;
};

struct rn_pool_dispatch {
    struct rn_iid instance_id;
    struct rn_token lock; /* the claim under which it was dispatched (rn_pool_withdraw) */
    struct rn_xid exec_id;
    uint32_t attempt;
    const char *action;       /* copied */
    struct ir_val kwargs;     /* retained */
    struct ir_val prev_error; /* the previous attempt's error, or None; retained */
    int64_t timeout_ms;       /* from the moment a worker starts it (on a slot); 0 = none */
    int64_t deadline_ms;      /* absolute wall clock, whether started or not; 0 = none */
    int64_t ready_us; /* CLOCK_MONOTONIC µs when the action became ready; 0 = not measured */
};

struct rn_pool_result {
    struct rn_iid instance_id; /* as submitted */
    struct rn_xid exec_id;
    uint32_t attempt;
    bool ok;
    struct ir_val value; /* borrowed for the duration of the callback */
};

/* Called once per submitted attempt: with the worker's outcome, an ActionTimeout at the
 * deadline, or a WorkerLost when the worker's connection dropped. */
typedef void (*rn_pool_result_fn)(void *arg, const struct rn_pool_result *r);

struct rn_pool_stats {
    uint64_t workers;       /* connected now */
    uint64_t dispatched;    /* attempts sent to workers */
    uint64_t dispatch_msgs; /* `dispatch` messages that carried them (batches) */
    uint64_t results;       /* outcomes accepted */
    uint64_t stale;         /* outcomes dropped: unknown, late or duplicate */
    uint64_t timeouts;      /* ActionTimeout delivered */
    uint64_t lost;          /* WorkerLost delivered */
    uint64_t requeued;      /* attempts given back by a dropped worker and queued again */
    uint64_t withdrawn;     /* attempts withdrawn (rn_pool_withdraw): queued or in flight */
    uint64_t bad_messages;  /* connections dropped for a malformed message */
    uint64_t refused;       /* hellos refused */
    uint64_t silent;        /* connections dropped after 3 idle periods without a request */
    uint64_t ungreeted;     /* connections dropped without a hello: too slow, or too many */
    uint64_t greeting;      /* connections waiting for their hello now */
    uint64_t connections;   /* connections open now, from their accept (workers and others) */
    uint64_t accept_paused; /* times accepting stopped: the descriptor budget was spent */
    uint64_t gated;         /* dispatches held because the leases were not confirmed recently */
    uint64_t queued;        /* submitted attempts waiting for a worker now */
    uint64_t backlog_cap;   /* the most attempts that may wait before the claimer stops
                               (rn_pool_room: the workers' slots, their drain rate, the floor) */
    uint64_t parked;        /* requests parked now (a worker's `ready` and `control`) */
    struct rn_lathist dispatch_delay; /* ready_us to the dispatch's send, per measured attempt */
    struct rn_lathist action_time;    /* the dispatch's send to its outcome's arrival */
};

/* Creates and starts a pool listening on cfg->listen_url. Returns CN_OK, CN_IO (cannot
 * listen; err says why), CN_INVAL, CN_NOMEM. */
CN_MUST_CHECK cn_err rn_pool_start(const struct rn_pool_cfg *cfg, rn_pool_result_fn fn, void *arg,
                                   struct rn_pool **out, struct cn_errmsg *err);

/* The TCP port actually bound (for tcp://...:0), or 0. */
int rn_pool_port(const struct rn_pool *p);

/* How many more instances the runner should claim: the attempts that may still queue before
 * they reach twice what the connected workers hold at once, or RN_POOL_BACKLOG_HORIZON_MS of
 * their recent drain rate, whichever is more (and at least RN_POOL_BACKLOG_MIN), as
 * an instance has at least one. Claiming past that only hoards work that other runners' idle
 * workers could run: after a runner restart the survivor took every orphan and the restarted
 * runner's workers sat idle. When it returns 0, wake(arg) is called once the backlog is under
 * half that (replacing any earlier wake); wake is called with the pool's lock held and may
 * take only a leaf lock of its own. Thread-safe. */
size_t rn_pool_room(struct rn_pool *p, void (*wake)(void *), void *arg);

/* Queues an attempt for a worker serving d->action. Thread-safe. Returns CN_OK (memory
 * exhaustion aborts the process: ir/base/xalloc.h). */
CN_MUST_CHECK cn_err rn_pool_submit(struct rn_pool *p, const struct rn_pool_dispatch *d);

/* Asks the worker running (exec_id, attempt) (attempt 0: whichever is in flight) to stop it, over
 * that worker's parked control request, or over its next one when none is parked right now (a
 * worker answers one cancel per control request and re-parks at once); an attempt still queued
 * is dropped (no result comes for it). Best effort: returns CN_NOTFOUND when the attempt is
 * neither queued nor in flight, else CN_OK. The result of one in flight, if it still comes, is
 * delivered as usual. Thread-safe. */
CN_MUST_CHECK cn_err rn_pool_cancel(struct rn_pool *p, struct rn_xid exec_id, uint32_t attempt);

/* Withdraws every attempt dispatched for instance iid under claim token lock, because this
 * runner no longer holds that lease (it was lost, or handed back); the attempts of a newer claim
 * of the same instance stay. Attempts still queued are dropped, and attempts in flight
 * are cancelled on their workers (as rn_pool_cancel) and forgotten: no outcome, timeout or
 * WorkerLost is delivered for them, and a dropped worker does not give them back to be
 * dispatched again. A withdrawn attempt keeps its room on its worker until the worker reports
 * it. Returns how many attempts were withdrawn. Thread-safe. */
size_t rn_pool_withdraw(struct rn_pool *p, struct rn_iid iid, struct rn_token lock);

/* Dispatches queued attempts to every parked worker with room (after the lease gate opens
 * again). Thread-safe. */
void rn_pool_kick(struct rn_pool *p);

void rn_pool_stats(struct rn_pool *p, struct rn_pool_stats *st);

/* A worker's address as text, for people: "HOST:PORT", "[V6]:PORT", "ipc, pid N", or "". */
#define RN_POOL_PEER_LEN 64

struct rn_pool_worker_info {
    char *name;                  /* as it said in hello */
    char peer[RN_POOL_PEER_LEN]; /* its address */
    char **actions;              /* the actions it serves */
    uint32_t nactions;
    uint32_t slots, prefetch; /* as it said in hello: it holds slots + prefetch at once */
    uint32_t inflight;        /* attempts dispatched to it and not reported back */
    bool leaving;             /* said goodbye: takes no more work */
    int64_t idle_ms;          /* since its latest request */
};

struct rn_pool_action_info {
    char *name;
    uint32_t workers; /* connected workers serving it (not leaving) */
    uint64_t slots;   /* their slots added up */
    uint64_t busy;    /* its attempts in flight */
    uint64_t waiting; /* its attempts submitted and not dispatched: waiting for a slot, or for
                         any worker at all when workers is 0 */
};

/* What the pool holds now, for people (the status page, cairn.runners): the connected workers,
 * and per action (sorted by name) the figures above; actions with no worker and nothing waiting
 * or running are left out. */
struct rn_pool_snapshot {
    struct rn_pool_worker_info *workers;
    size_t nworkers;
    struct rn_pool_action_info *actions;
    size_t nactions;
    uint64_t queued; /* attempts waiting, all actions */
};

/* Fills out (rn_pool_snapshot_fini frees it). Thread-safe; takes the pool's mutex for a copy
 * that costs O(workers x their actions + action names ever submitted), never per attempt: the
 * per-action counts are kept as attempts move. */
void rn_pool_snapshot(struct rn_pool *p, struct rn_pool_snapshot *out);
void rn_pool_snapshot_fini(struct rn_pool_snapshot *s);

/* Stops listening, drops every connection (in-flight attempts come back as WorkerLost), joins
 * the timer thread and frees everything. Returns within about WP_CLOSE_TIMEOUT_MS even when
 * nng_close hangs (nngclose.h): the pool is then logged and kept, not freed. Never call from
 * the result callback. NULL: no-op. */
void rn_pool_stop(struct rn_pool *p);

#endif
