/* SPDX-License-Identifier: MIT */
/*
 * cairn-pool-bench: the worker pool (runner/pool/pool.c) and the C worker SDK (libcairn-worker)
 * driven together in one process with no-op actions, next to the physical limit of the same
 * design on the same transport: raw nng REQ/REP round trips.
 *   pool  rn_pool_start on URL; W SDK workers with S slots each (and P prefetch) serve
 *         `bench.noop` (returns None); N dispatches are submitted with at most W*S*2 in
 *         flight, refilled from the result callback. Latency: rn_pool_submit -> result
 *         callback, per dispatch. Also reported: attempts per `dispatch` message (batching).
 *   raw   a REP socket with W*S contexts echoing; W REQ sockets with S contexts each, one
 *         thread per context doing synchronous round trips of a 64-byte message (the SDK's
 *         shape: one REQ socket per worker, one context and thread per slot, one round trip
 *         per action). Latency: send -> reply, per round trip.
 *   external  (--external CMD) the pool phase against worker processes instead of SDK
 *         threads: `sh -c CMD` runs with $CAIRN_BENCH_URL set to the pool's address and must
 *         connect W workers serving --action (e.g. the C `cairn-worker` serving std.noop, or a
 *         Python worker); no raw phase. CMD should `exec` its worker: the SIGTERM at the end
 *         goes to the shell's process.
 * Both phases run a short unmeasured warm-up first. Times are CLOCK_MONOTONIC.
 * Usage: cairn-pool-bench [--url ipc|tcp] [--workers W] [--slots S] [--prefetch P] [--n N]
 *                         [--external CMD [--action NAME]] [--markdown]
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "cairn/worker.h"
#include "runner/pool/pool.h"

#define NOOP_ACTION   "bench.noop"
#define RAW_MSG_BYTES 64

static const char *external;                   /* --external CMD; NULL: SDK worker threads */
static const char *bench_action = NOOP_ACTION; /* --action */

static uint64_t
mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

    return (x > y) - (x < y);
}

struct phase_result {
    long n;
    double secs;
    double p50_us, p99_us;
    double batch; /* pool: attempts per dispatch message */
};

/* Sorts lat[0..n) and fills the percentiles. */
static void
percentiles(uint64_t *lat, long n, struct phase_result *r)
{
    qsort(lat, (size_t) n, sizeof(*lat), cmp_u64);
    r->p50_us = (double) lat[n / 2] / 1e3;
    r->p99_us = (double) lat[(n * 99) / 100] / 1e3;
}

/* ---- pool + SDK ---- */

struct pool_run {
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    struct rn_pool *pool;
    struct ir_val kwargs; /* one empty map, shared (atomic refcounts) */
    long n;               /* dispatches in this round */
    long next;            /* next index to submit */
    long done;            /* results seen */
    long failed;          /* results that were not ok, or submit failures */
    uint64_t *t_submit;   /* per index */
    uint64_t *lat;        /* per index */
};

static cn_err
noop_handler(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg,
             struct ir_val *out)
{
    (void) ctx;
    (void) kwargs;
    (void) arg;
    *out = ir_null();
    return CN_OK;
}

/* Submits index i (pr->t_submit[i] set first). Returns 0 or -1. */
static int
pool_submit_one(struct pool_run *pr, long i)
{
    struct rn_pool_dispatch d;
    uint32_t u = (uint32_t) i;

    memset(&d, 0, sizeof(d));
    memcpy(d.exec_id.b, &u, sizeof(u));
    d.attempt = 1;
    d.action = bench_action;
    d.kwargs = pr->kwargs;
    d.deadline_ms = 0;
    pr->t_submit[i] = mono_ns();
    return rn_pool_submit(pr->pool, &d) == CN_OK ? 0 : -1;
}

/* Records the result and refills the window with the next index, if any. */
static void
pool_on_result(void *arg, const struct rn_pool_result *r)
{
    struct pool_run *pr = arg;
    uint64_t now = mono_ns();
    uint32_t i;
    long nxt = -1;

    memcpy(&i, r->exec_id.b, sizeof(i));
    pthread_mutex_lock(&pr->mtx);
    if ((long) i < pr->n) {
        pr->lat[i] = now - pr->t_submit[i];
    }
    if (!r->ok) {
        pr->failed++;
    }
    pr->done++;
    if (pr->next < pr->n) {
        nxt = pr->next++;
    }
    if (pr->done >= pr->n) {
        pthread_cond_broadcast(&pr->cond);
    }
    pthread_mutex_unlock(&pr->mtx);
    if (nxt >= 0 && pool_submit_one(pr, nxt) != 0) {
        pthread_mutex_lock(&pr->mtx);
        pr->failed++;
        pr->done++;
        pthread_cond_broadcast(&pr->cond);
        pthread_mutex_unlock(&pr->mtx);
    }
}

/* One round of n dispatches with `window` in flight. Returns 0 or -1. */
static int
pool_round(struct pool_run *pr, long n, long window, struct phase_result *res)
{
    struct timespec dl;
    uint64_t t0, t1;
    long i, first;
    int rc = 0;

    pthread_mutex_lock(&pr->mtx);
    pr->n = n;
    pr->done = 0;
    pr->failed = 0;
    first = window < n ? window : n;
    pr->next = first;
    pthread_mutex_unlock(&pr->mtx);
    t0 = mono_ns();
    for (i = 0; i < first; i++) {
        /* The index's t_submit is written before the pool can see it. */
        if (pool_submit_one(pr, i) != 0) {
            fprintf(stderr, "pool: submit failed\n");
            return -1;
        }
    }
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 120;
    pthread_mutex_lock(&pr->mtx);
    while (pr->done < pr->n) {
        if (pthread_cond_timedwait(&pr->cond, &pr->mtx, &dl) != 0) {
            fprintf(stderr, "pool: timed out with %ld of %ld results\n", pr->done, pr->n);
            rc = -1;
            break;
        }
    }
    t1 = mono_ns();
    if (pr->failed != 0) {
        fprintf(stderr, "pool: %ld of %ld dispatches failed\n", pr->failed, pr->n);
        rc = -1;
    }
    pthread_mutex_unlock(&pr->mtx);
    if (rc == 0 && res != NULL) {
        res->n = n;
        res->secs = (double) (t1 - t0) / 1e9;
        percentiles(pr->lat, n, res);
    }
    return rc;
}

/* Runs the --external command with $CAIRN_BENCH_URL set to wurl. Returns its pid (-1: no fork). */
static pid_t
start_external(const char *wurl)
{
    pid_t pid = fork();

    if (pid == 0) {
        (void) setenv("CAIRN_BENCH_URL", wurl, 1);
        execl("/bin/sh", "sh", "-c", external, (char *) NULL);
        _exit(127);
    }
    return pid;
}

/* Starts `workers` SDK workers on wurl, each serving NOOP_ACTION with `slots` slots and
 * `prefetch`. Returns 0 or -1 (said why); ws[0..*started) are started either way. */
static int
start_sdk_workers(const char *wurl, int workers, int slots, int prefetch, struct cairn_worker **ws,
                  int *started)
{
    int i;

    for (i = 0; i < workers; i++) {
        struct cairn_worker_options o;
        char name[32];

        memset(&o, 0, sizeof(o));
        (void) snprintf(name, sizeof(name), "bench-%d", i);
        o.name = name;
        o.slots = (uint32_t) slots;
        o.prefetch = (uint32_t) prefetch;
        o.start_timeout_ms = 10000;
        if (cairn_worker_new(wurl, &o, &ws[i]) != CN_OK ||
            cairn_worker_register(ws[i], NOOP_ACTION, noop_handler, NULL) != CN_OK) {
            fprintf(stderr, "pool: cannot create worker %d\n", i);
            return -1;
        }
        if (cairn_worker_start(ws[i]) != CN_OK) {
            fprintf(stderr, "pool: worker %d: %s\n", i, cairn_worker_error(ws[i]));
            return -1;
        }
        (*started)++;
    }
    return 0;
}

/* Waits up to ten seconds for `workers` workers to be connected to the pool. Returns 0 or -1. */
static int
wait_for_workers(struct rn_pool *pool, int workers)
{
    struct rn_pool_stats st;
    int i;

    for (i = 0; i < 1000; i++) {
        rn_pool_stats(pool, &st);
        if (st.workers == (uint64_t) workers) {
            return 0;
        }
        usleep(10000);
    }
    fprintf(stderr, "pool: %llu of %d workers connected\n", (unsigned long long) st.workers,
            workers);
    return -1;
}

static int
run_pool(const char *url_kind, int workers, int slots, int prefetch, long n,
         struct phase_result *res)
{
    struct pool_run pr;
    struct rn_pool_cfg cfg;
    struct cn_errmsg em = {{0}};
    struct cairn_worker **ws = calloc((size_t) workers, sizeof(*ws));
    struct rn_pool_stats st, st0;
    char url[128], wurl[128];
    long warm = n / 10 < 2000 ? n / 10 : 2000;
    int i, started = 0, rc = -1;
    pid_t ext_pid = -1;

    memset(&pr, 0, sizeof(pr));
    pthread_mutex_init(&pr.mtx, NULL);
    pthread_cond_init(&pr.cond, NULL);
    pr.t_submit = calloc((size_t) n, sizeof(uint64_t));
    pr.lat = calloc((size_t) n, sizeof(uint64_t));
    if (ws == NULL || pr.t_submit == NULL || pr.lat == NULL || ir_map_new(0, &pr.kwargs) != CN_OK) {
        fprintf(stderr, "pool: out of memory\n");
        goto out;
    }
    if (strcmp(url_kind, "ipc") == 0) {
        (void) snprintf(url, sizeof(url), "ipc:///tmp/cairn-pool-bench-%d.sock", (int) getpid());
    } else {
        (void) snprintf(url, sizeof(url), "tcp://127.0.0.1:0");
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.listen_url = url;
    if (rn_pool_start(&cfg, pool_on_result, &pr, &pr.pool, &em) != CN_OK) {
        fprintf(stderr, "pool: cannot start on %s: %s\n", url, em.text);
        goto out;
    }
    if (strcmp(url_kind, "ipc") == 0) {
        (void) snprintf(wurl, sizeof(wurl), "%s", url);
    } else {
        (void) snprintf(wurl, sizeof(wurl), "tcp://127.0.0.1:%d", rn_pool_port(pr.pool));
    }
    if (external != NULL) {
        ext_pid = start_external(wurl);
    } else if (start_sdk_workers(wurl, workers, slots, prefetch, ws, &started) != 0) {
        goto out;
    }
    if (wait_for_workers(pr.pool, workers) != 0) {
        goto out;
    }
    if (warm > 0 && pool_round(&pr, warm, (long) workers * slots * 2, NULL) != 0) {
        goto out;
    }
    rn_pool_stats(pr.pool, &st0);
    if (pool_round(&pr, n, (long) workers * slots * 2, res) != 0) {
        goto out;
    }
    rn_pool_stats(pr.pool, &st);
    res->batch = st.dispatch_msgs > st0.dispatch_msgs
                     ? (double) (st.dispatched - st0.dispatched) /
                           (double) (st.dispatch_msgs - st0.dispatch_msgs)
                     : 0;
    rc = 0;
out:
    if (ext_pid > 0) {
        (void) kill(ext_pid, SIGTERM);
        (void) waitpid(ext_pid, NULL, 0);
    }
    for (i = 0; i < started; i++) {
        cairn_worker_stop(ws[i], 1000);
    }
    rn_pool_stop(pr.pool);
    if (ws != NULL) {
        for (i = 0; i < workers; i++) {
            cairn_worker_free(ws[i]);
        }
    }
    free(ws);
    ir_val_release(pr.kwargs);
    free(pr.t_submit);
    free(pr.lat);
    pthread_cond_destroy(&pr.cond);
    pthread_mutex_destroy(&pr.mtx);
    return rc;
}

/* ---- raw nng REQ/REP ---- */

/* One REP context: recv -> send the same message back -> recv ... */
struct rep_ctx {
    nng_ctx ctx;
    nng_aio *aio;
    int sending;
};

static void
rep_cb(void *arg)
{
    struct rep_ctx *c = arg;
    nng_msg *m;

    if (nng_aio_result(c->aio) != 0) {
        if (c->sending) {
            nng_msg_free(nng_aio_get_msg(c->aio));
        }
        return; /* closed */
    }
    if (c->sending) {
        c->sending = 0;
        nng_ctx_recv(c->ctx, c->aio);
        return;
    }
    m = nng_aio_get_msg(c->aio);
    nng_aio_set_msg(c->aio, m);
    c->sending = 1;
    nng_ctx_send(c->ctx, c->aio);
}

struct raw_client {
    nng_ctx ctx;
    nng_aio *aio;
    pthread_t th;
    atomic_long *next;
    long n;
    uint64_t *lat;
    long failed;
};

static void *
raw_client_main(void *arg)
{
    struct raw_client *c = arg;
    long i;

    while ((i = atomic_fetch_add(c->next, 1)) < c->n) {
        nng_msg *m;
        uint64_t t0 = mono_ns();

        if (nng_msg_alloc(&m, RAW_MSG_BYTES) != 0) {
            c->failed++;
            continue;
        }
        memset(nng_msg_body(m), (int) (i & 0x7f), RAW_MSG_BYTES);
        nng_aio_set_msg(c->aio, m);
        nng_ctx_send(c->ctx, c->aio);
        nng_aio_wait(c->aio);
        if (nng_aio_result(c->aio) != 0) {
            nng_msg_free(m);
            c->failed++;
            continue;
        }
        nng_ctx_recv(c->ctx, c->aio);
        nng_aio_wait(c->aio);
        if (nng_aio_result(c->aio) != 0) {
            c->failed++;
            continue;
        }
        nng_msg_free(nng_aio_get_msg(c->aio));
        c->lat[i] = mono_ns() - t0;
    }
    return NULL;
}

/* One round of n round trips over all client contexts. Returns 0 or -1. */
static int
raw_round(struct raw_client *cl, int ncl, long n, uint64_t *lat, struct phase_result *res)
{
    atomic_long next;
    uint64_t t0, t1;
    long failed = 0;
    int i;

    atomic_init(&next, 0);
    for (i = 0; i < ncl; i++) {
        cl[i].next = &next;
        cl[i].n = n;
        cl[i].lat = lat;
        cl[i].failed = 0;
    }
    t0 = mono_ns();
    for (i = 0; i < ncl; i++) {
        if (pthread_create(&cl[i].th, NULL, raw_client_main, &cl[i]) != 0) {
            fprintf(stderr, "raw: cannot start a client thread\n");
            atomic_store(&next, n);
            while (--i >= 0) {
                pthread_join(cl[i].th, NULL);
            }
            return -1;
        }
    }
    for (i = 0; i < ncl; i++) {
        pthread_join(cl[i].th, NULL);
        failed += cl[i].failed;
    }
    t1 = mono_ns();
    if (failed != 0) {
        fprintf(stderr, "raw: %ld of %ld round trips failed\n", failed, n);
        return -1;
    }
    if (res != NULL) {
        res->n = n;
        res->secs = (double) (t1 - t0) / 1e9;
        percentiles(lat, n, res);
    }
    return 0;
}

static int
run_raw(const char *url_kind, int workers, int slots, long n, struct phase_result *res)
{
    int nctx = workers * slots, i, nrep = 0, nreq = 0, ncl = 0, rv, port = 0;
    struct rep_ctx *reps = calloc((size_t) nctx, sizeof(*reps));
    struct raw_client *cl = calloc((size_t) nctx, sizeof(*cl));
    nng_socket *reqs = calloc((size_t) workers, sizeof(*reqs));
    uint64_t *lat = calloc((size_t) n, sizeof(uint64_t));
    nng_socket rep = NNG_SOCKET_INITIALIZER;
    nng_listener l;
    char url[128], durl[128];
    long warm = n / 10 < 2000 ? n / 10 : 2000;
    int rc = -1, rep_open = 0;

    if (reps == NULL || cl == NULL || reqs == NULL || lat == NULL) {
        fprintf(stderr, "raw: out of memory\n");
        goto out;
    }
    if (strcmp(url_kind, "ipc") == 0) {
        (void) snprintf(url, sizeof(url), "ipc:///tmp/cairn-pool-bench-%d-raw.sock",
                        (int) getpid());
    } else {
        (void) snprintf(url, sizeof(url), "tcp://127.0.0.1:0");
    }
    if ((rv = nng_rep0_open(&rep)) != 0) {
        fprintf(stderr, "raw: rep0_open: %s\n", nng_strerror(rv));
        goto out;
    }
    rep_open = 1;
    for (i = 0; i < nctx; i++) {
        if ((rv = nng_ctx_open(&reps[i].ctx, rep)) != 0 ||
            (rv = nng_aio_alloc(&reps[i].aio, rep_cb, &reps[i])) != 0) {
            fprintf(stderr, "raw: rep context: %s\n", nng_strerror(rv));
            goto out;
        }
        nrep++;
        nng_ctx_recv(reps[i].ctx, reps[i].aio);
    }
    if ((rv = nng_listener_create(&l, rep, url)) != 0 || (rv = nng_listener_start(l, 0)) != 0) {
        fprintf(stderr, "raw: listen %s: %s\n", url, nng_strerror(rv));
        goto out;
    }
    if (strcmp(url_kind, "ipc") == 0) {
        (void) snprintf(durl, sizeof(durl), "%s", url);
    } else {
        if ((rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port)) != 0) {
            fprintf(stderr, "raw: bound port: %s\n", nng_strerror(rv));
            goto out;
        }
        (void) snprintf(durl, sizeof(durl), "tcp://127.0.0.1:%d", port);
    }
    for (i = 0; i < workers; i++) {
        if ((rv = nng_req0_open(&reqs[i])) != 0) {
            fprintf(stderr, "raw: req0_open: %s\n", nng_strerror(rv));
            goto out;
        }
        nreq++;
        if ((rv = nng_socket_set_ms(reqs[i], NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
            (rv = nng_dial(reqs[i], durl, NULL, 0)) != 0) {
            fprintf(stderr, "raw: dial %s: %s\n", durl, nng_strerror(rv));
            goto out;
        }
    }
    for (i = 0; i < nctx; i++) {
        if ((rv = nng_ctx_open(&cl[i].ctx, reqs[i / slots])) != 0 ||
            (rv = nng_aio_alloc(&cl[i].aio, NULL, NULL)) != 0) {
            fprintf(stderr, "raw: req context: %s\n", nng_strerror(rv));
            goto out;
        }
        ncl++;
    }
    if (warm > 0 && raw_round(cl, ncl, warm, lat, NULL) != 0) {
        goto out;
    }
    if (raw_round(cl, ncl, n, lat, res) != 0) {
        goto out;
    }
    rc = 0;
out:
    for (i = 0; i < ncl; i++) {
        nng_aio_free(cl[i].aio);
        nng_ctx_close(cl[i].ctx);
    }
    for (i = 0; i < nreq; i++) {
        nng_close(reqs[i]);
    }
    if (rep_open) {
        nng_close(rep);
    }
    for (i = 0; i < nrep; i++) {
        if (reps[i].aio != NULL) {
            nng_aio_stop(reps[i].aio);
            nng_aio_free(reps[i].aio);
        }
    }
    free(reps);
    free(cl);
    free(reqs);
    free(lat);
    return rc;
}

int
main(int argc, char **argv)
{
    const char *url_kind = "ipc";
    int workers = 1, slots = 8, prefetch = 0, markdown = 0, i;
    long n = 20000;
    struct phase_result pool, raw;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
            url_kind = argv[++i];
        } else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc) {
            workers = (int) strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--slots") == 0 && i + 1 < argc) {
            slots = (int) strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--prefetch") == 0 && i + 1 < argc) {
            prefetch = (int) strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            n = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--external") == 0 && i + 1 < argc) {
            external = argv[++i];
        } else if (strcmp(argv[i], "--action") == 0 && i + 1 < argc) {
            bench_action = argv[++i];
        } else if (strcmp(argv[i], "--markdown") == 0) {
            markdown = 1;
        } else {
            argc = -1;
            break;
        }
    }
    if (argc < 0 || (strcmp(url_kind, "ipc") != 0 && strcmp(url_kind, "tcp") != 0) || workers < 1 ||
        workers > 256 || slots < 1 || slots > 4096 || prefetch < 0 || prefetch > 4096 || n < 1 ||
        n > 100000000) {
        fprintf(stderr, "usage: cairn-pool-bench [--url ipc|tcp] [--workers W] [--slots S] "
                        "[--prefetch P] [--n N] [--external CMD [--action NAME]] "
                        "[--markdown]\n");
        return 2;
    }
    if (run_pool(url_kind, workers, slots, prefetch, n, &pool) != 0) {
        fprintf(stderr, "pool phase failed\n");
        return 1;
    }
    if (external != NULL) {
        double tp = (double) pool.n / pool.secs;
        if (markdown) {
            printf("| %s, W=%d, S=%d, P=%d, N=%ld | %.0f | %.1f | %.0f / %.0f |\n", url_kind,
                   workers, slots, prefetch, n, tp, pool.batch, pool.p50_us, pool.p99_us);
        } else {
            printf("%s W=%d S=%d P=%d N=%ld external: %.0f actions/s  %.1f per dispatch  "
                   "p50=%.0f us  p99=%.0f us  (%.3f s)\n",
                   url_kind, workers, slots, prefetch, n, tp, pool.batch, pool.p50_us, pool.p99_us,
                   pool.secs);
        }
        return 0;
    }
    if (run_raw(url_kind, workers, slots, n, &raw) != 0) {
        fprintf(stderr, "raw phase failed\n");
        return 1;
    }
    {
        double pool_tp = (double) pool.n / pool.secs, raw_tp = (double) raw.n / raw.secs;

        if (markdown) {
            printf("| %s, W=%d, S=%d, P=%d, N=%ld | %.0f | %.1f | %.0f / %.0f | %.0f | %.0f / %.0f "
                   "| %.0f%% |\n",
                   url_kind, workers, slots, prefetch, n, pool_tp, pool.batch, pool.p50_us,
                   pool.p99_us, raw_tp, raw.p50_us, raw.p99_us, 100.0 * pool_tp / raw_tp);
        } else {
            printf("%s W=%d S=%d P=%d N=%ld in-flight=%d\n", url_kind, workers, slots, prefetch, n,
                   workers * slots * 2);
            printf(
                "  pool: %.0f actions/s  %.1f per dispatch  p50=%.0f us  p99=%.0f us  (%.3f s)\n",
                pool_tp, pool.batch, pool.p50_us, pool.p99_us, pool.secs);
            printf("  raw:  %.0f round trips/s  p50=%.0f us  p99=%.0f us  (%.3f s)\n", raw_tp,
                   raw.p50_us, raw.p99_us, raw.secs);
            printf("  pool / raw: %.0f%%\n", 100.0 * pool_tp / raw_tp);
        }
    }
    return 0;
}
