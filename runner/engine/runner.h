/* SPDX-License-Identifier: MIT */
/*
 * The runner engine: claims due instances from a backend, runs each on the shard that owns it,
 * dispatches its actions to workers through the worker pool, and persists progress in the fixed
 * write order (action results, then the snapshot, then the queue row) with a commit barrier: an
 * action is dispatched, a timer armed and an instance released only after the write that
 * records it has committed (shard.h states the barrier; docs/operations.md the operator's view).
 *
 * Threads (each module's header says more): a claimer (claimer.h), CAIRN_SHARDS shard threads
 * (shardloop.h; each owns its instances exclusively, the executor runs there), CAIRN_PERSISTERS
 * persisters (persister.h; each batches the writes queued by every shard into one transaction
 * on its own connection), a lease keeper that also runs the reclaimer (keeper.h), the
 * canceller, which listens for cancels and child workflows' outcomes (canceller.h), the ticker,
 * which runs the periodic jobs (sweeps, schedules, backfills, late results; ticker.h), the
 * pruner (retention, pruner.h), the status page's reader (runner/ops/status.h), the worker
 * pool's threads (pool.h) and the HTTP listener's thread (http.h); each with its own database
 * session where it has one.
 * They talk through queues; locks nest only as runner.c's lock order says, and none is held
 * across storage or network calls. rn_runner_start, rn_runner_stop and rn_runner_stats are
 * called from one controlling thread; rn_runner_stats may also run concurrently with the engine.
 */
#ifndef RUNNER_RUNNER_H
#define RUNNER_RUNNER_H

#include <stdint.h>

#include "ir/base/err.h"
#include "runner/core/lathist.h"
#include "runner/engine/ticker.h"
#include "runner/ops/http.h"

struct rn_backend;

struct rn_runner_cfg {
    struct rn_backend *backend;      /* a thread-safe backend shared by every thread (the in-memory
                                        one); NULL: PostgreSQL at database_url. Not freed by stop. */
    const char *database_url;        /* NULL: CAIRN_DATABASE_URL */
    const char *worker_listen;       /* the pool's listen URL */
    const char *worker_credential;   /* required in worker hellos when not NULL */
    const char *worker_tls_cert_key; /* tls+tcp://: the runner's PEM certificate and key */
    const char *worker_tls_ca;       /* tls+tcp://: CA workers' certificates must chain to
                                        (then required); NULL: no client certificates */
    const char *http_listen;         /* HOST:PORT for /metrics, /healthz, /readyz; NULL: none */
    uint32_t http_max_connections;   /* http.h; 0: the defaults (defaults.h) */
    uint32_t http_header_timeout_ms;
    uint32_t http_idle_timeout_ms;
    uint32_t shards;                   /* executor threads */
    uint32_t persisters;               /* persist threads, one connection each (1 to 8) */
    uint32_t max_instances;            /* most instances held at once */
    uint32_t poll_interval_ms;         /* claim poll when no NOTIFY comes */
    uint32_t lock_ttl_ms;              /* lease length */
    uint32_t lock_heartbeat_ms;        /* lease renewal period */
    uint32_t reclaim_interval_ms;      /* expired-lease sweep period (0: never) */
    uint32_t evict_sleep_threshold_ms; /* sleeps longer than this are handed back */
    uint32_t evict_child_wait_ms; /* a parent waiting only for children this long is handed back */
    uint32_t max_child_depth;     /* children nest at most this deep */
    uint32_t default_action_timeout_ms;
    uint32_t worker_idle_ms;     /* the pool's idle cycle (0: its default) */
    uint32_t max_inline_steps;   /* inline nodes one executor step may run (0: its default) */
    uint32_t cleanup_timeout_ms; /* how long a cancel's or a timeout's finally blocks may run
                                    (0: the executor's default) */
    int64_t retention_s;         /* finished instances are deleted this long after (0: kept) */
    uint32_t prune_interval_ms;  /* between retention rounds (0: its default) */
};

/* The ticker's jobs, the canceller's "notices" and retention's "retention". */
#define RN_RUNNER_JOBS (RN_JOB_COUNT + 2)

struct rn_runner_stats {
    uint64_t claimed;          /* instances claimed */
    uint64_t completed;        /* instances finished: completed */
    uint64_t failed;           /* finished: failed or cancelled */
    uint64_t evicted;          /* handed back while sleeping */
    uint64_t lost;             /* evicted because the lease was lost */
    uint64_t writes;           /* instance writes committed */
    uint64_t batches;          /* persist transactions committed */
    uint64_t dispatched;       /* actions handed to the pool */
    uint64_t active;           /* instances held now */
    uint64_t pruned;           /* finished instances deleted by retention */
    uint64_t pruned_actions;   /* their action results */
    uint64_t pruned_events;    /* keyed events deleted by retention */
    struct rn_lathist persist; /* duration of each committed persist transaction */
    struct rn_http_stats http; /* the HTTP listener's (zero without one) */
    uint64_t fd_budget;        /* connections the listeners may hold (fdbudget.h) */
    uint64_t fd_used;          /* held now */
    uint64_t fd_exhausted;     /* connections refused because the budget was spent */
    /* The background jobs (the ticker's, the canceller's wait for notices, retention's
     * rounds): each one's runs and failed runs, by name. */
    struct rn_job_stat {
        const char *name;
        uint64_t runs, failures;
    } jobs[RN_RUNNER_JOBS];
    size_t njobs;
};

struct rn_runner;

/* Connects to storage, starts the pool and every thread. Returns CN_OK, or CN_IO/CN_INVAL/
 * CN_NOMEM with err saying why (cannot connect, cannot listen). */
CN_MUST_CHECK cn_err rn_runner_start(const struct rn_runner_cfg *cfg, struct rn_runner **out,
                                     struct cn_errmsg *err);

/* Graceful stop: claims nothing more, waits up to grace_ms for actions in flight to report
 * and for their writes to commit, hands every instance still held back (their leases are
 * cleared, so another runner continues them at once), stops and frees everything. */
void rn_runner_stop(struct rn_runner *r, uint32_t grace_ms);

void rn_runner_stats(struct rn_runner *r, struct rn_runner_stats *st);

#endif
