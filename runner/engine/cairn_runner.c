/* SPDX-License-Identifier: MIT */
/*
 * cairn-runner: the runner process. Reads its settings from CAIRN_* variables, overridden by
 * flags (`cairn-runner --help` lists them with their defaults; one table, parsed by
 * ir/base/opts.h, drives variables, flags, help and range checks), starts the engine
 * (runner/engine/runner.h) and waits for a signal: SIGTERM or SIGINT stops it gracefully within
 * CAIRN_SHUTDOWN_GRACE_MS; a second signal exits at once; SIGHUP reopens the log file. Tells a
 * service manager (ir/base/notify.h) READY=1 once the engine claims and STOPPING=1 when a
 * graceful stop begins. The main thread is the supervisor; every other thread belongs to the
 * engine. Exit status: 0 after a graceful stop, 1 when it
 * cannot start, 2 for a bad setting, 3 on a second signal.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ir/base/log.h"
#include "ir/base/notify.h"
#include "ir/base/opts.h"
#include "ir/base/sync.h"
#include "runner/engine/defaults.h"
#include "runner/engine/pruner.h"
#include "runner/engine/runner.h"

#define D(x) RN_DEFAULT_TEXT(x)
/* A setting of each kind, one row: its variable, flag, default (d: none when NULL, for an integer
 * a name from defaults.h), range and help line. */
#define SETTING_STR(e, f, d, h)                                              \
    {                                                                        \
        .env = (e), .flag = (f), .kind = CN_OPT_STR, .def = (d), .help = (h) \
    }
#define SETTING_INT(e, f, d, lo, hi, h)                                                     \
    {                                                                                       \
        .env = (e), .flag = (f), .kind = CN_OPT_INT, .def = D(d), .min = (lo), .max = (hi), \
        .help = (h)                                                                         \
    }

/* Every setting: its variable, flag, range, default (runner/engine/defaults.h) and help line. */
static struct cn_opt settings[] = {
    SETTING_STR("CAIRN_DATABASE_URL", "database-url", NULL, "libpq URL of the database (required)"),
    SETTING_STR("CAIRN_WORKER_LISTEN", "worker-listen", RN_DEFAULT_WORKER_LISTEN,
                "where workers connect: tcp://HOST:PORT, ipc://PATH, tls+tcp://HOST:PORT"),
    SETTING_STR("CAIRN_WORKER_CREDENTIAL", "worker-credential", NULL,
                "shared token workers must send in hello (none: not checked)"),
    SETTING_STR("CAIRN_WORKER_TLS_CERT_KEY", "worker-tls-cert-key", NULL,
                "with tls+tcp://: PEM file holding the runner's certificate chain and key"),
    SETTING_STR("CAIRN_WORKER_TLS_CA", "worker-tls-ca", NULL,
                "with tls+tcp://: PEM CA that signs worker certificates; workers must present "
                "one it signed"),
    SETTING_STR("CAIRN_HTTP_LISTEN", "http-listen", NULL,
                "HOST:PORT for /metrics (Prometheus), /healthz, /readyz and the status page at / "
                "and /status (none: no HTTP)"),
    SETTING_INT("CAIRN_HTTP_MAX_CONNECTIONS", "http-max-connections",
                RN_DEFAULT_HTTP_MAX_CONNECTIONS, 1, 65536,
                "HTTP connections open at once; a new one past it closes the oldest that is "
                "waiting for a request"),
    SETTING_INT("CAIRN_HTTP_HEADER_TIMEOUT_MS", "http-header-timeout-ms",
                RN_DEFAULT_HTTP_HEADER_TIMEOUT_MS, 100, 600000,
                "an HTTP connection's first request line and headers must arrive within this of "
                "its opening"),
    SETTING_INT("CAIRN_HTTP_IDLE_TIMEOUT_MS", "http-idle-timeout-ms",
                RN_DEFAULT_HTTP_IDLE_TIMEOUT_MS, 100, 600000,
                "a kept-alive HTTP connection's next request head must arrive within this of the "
                "last response"),
    SETTING_INT("CAIRN_SHARDS", "shards", RN_DEFAULT_SHARDS, 1, 256, "executor threads"),
    SETTING_INT("CAIRN_PERSISTERS", "persisters", RN_DEFAULT_PERSISTERS, 1, 8,
                "persist threads, one database connection each (one commits while another sends)"),
    SETTING_INT("CAIRN_MAX_INSTANCES", "max-instances", RN_DEFAULT_MAX_INSTANCES, 1, 10000000,
                "most instances held at once"),
    SETTING_INT("CAIRN_POLL_INTERVAL_MS", "poll-interval-ms", RN_DEFAULT_POLL_INTERVAL_MS, 10,
                3600000, "claim poll period (an enqueue NOTIFY wakes the claimer sooner)"),
    SETTING_INT("CAIRN_LOCK_TTL_MS", "lock-ttl-ms", RN_DEFAULT_LOCK_TTL_MS, 1000, 86400000,
                "lease length: how long a crashed runner's instances wait before another takes "
                "them"),
    SETTING_INT("CAIRN_LOCK_HEARTBEAT_MS", "lock-heartbeat-ms", RN_DEFAULT_LOCK_HEARTBEAT_MS, 100,
                86400000, "lease renewal period (below CAIRN_LOCK_TTL_MS)"),
    SETTING_INT("CAIRN_RECLAIM_INTERVAL_MS", "reclaim-interval-ms", RN_DEFAULT_RECLAIM_INTERVAL_MS,
                0, 86400000,
                "how often expired leases (of runners that died) are cleared, 0 = never (the claim "
                "takes them anyway; this keeps their status truthful)"),
    SETTING_INT("CAIRN_EVICT_SLEEP_THRESHOLD_MS", "evict-sleep-threshold-ms",
                RN_DEFAULT_EVICT_SLEEP_THRESHOLD_MS, 0, UINT32_MAX,
                "an instance sleeping longer than this is handed back until it is due"),
    SETTING_INT("CAIRN_EVICT_CHILD_WAIT_MS", "evict-child-wait-ms", RN_DEFAULT_EVICT_CHILD_WAIT_MS,
                0, UINT32_MAX,
                "an instance waiting only for child workflows, none of which answered for this "
                "long, is handed back until one does"),
    /* At most 256: cairn.cancel walks a tree recursively, and a chain of 600 overflowed its
     * stack. */
    SETTING_INT("CAIRN_MAX_CHILD_DEPTH", "max-child-depth", RN_DEFAULT_MAX_CHILD_DEPTH, 1, 256,
                "how deep child workflows may nest (a child of a child is at depth 2); a call "
                "past it raises ChildDepthExceeded (1-256)"),
    SETTING_INT(
        "CAIRN_DEFAULT_ACTION_TIMEOUT_MS", "default-action-timeout-ms",
        RN_DEFAULT_ACTION_TIMEOUT_MS, 1, UINT32_MAX,
        "per-attempt timeout of actions without [timeout: D], from their start on a worker"),
    SETTING_INT("CAIRN_CLEANUP_TIMEOUT_MS", "cleanup-timeout-ms", RN_DEFAULT_CLEANUP_TIMEOUT_MS, 1,
                UINT32_MAX,
                "how long the finally blocks a cancel or a workflow timeout runs may take before "
                "the cleanup is abandoned"),
    SETTING_INT("CAIRN_SHUTDOWN_GRACE_MS", "shutdown-grace-ms", RN_DEFAULT_SHUTDOWN_GRACE_MS, 0,
                UINT32_MAX,
                "on SIGTERM/SIGINT: how long running actions get to report before instances are "
                "handed back"),
    SETTING_INT("CAIRN_WORKER_IDLE_MS", "worker-idle-ms", RN_DEFAULT_WORKER_IDLE_MS, 100, 3600000,
                "workers' idle cycle (heartbeat): a worker silent for 3 of these plus 1 s is "
                "dropped"),
    /* At most 100 million: a step must end well within the lease (CAIRN_LOCK_TTL_MS), since the
     * leases of instances claimed while their shard is busy are renewed only once it takes
     * them, and 100 million trivial nodes take about 6 s (exec.h has the measurement). */
    SETTING_INT("CAIRN_MAX_INLINE_STEPS", "max-inline-steps", RN_DEFAULT_MAX_INLINE_STEPS, 1000,
                100000000,
                "inline statements an instance may run between two actions, sleeps or timers; "
                "more fail it with StepLimitExceeded"),
    {.env = "CAIRN_RETENTION",
     .flag = "retention",
     .kind = CN_OPT_STR,
     .def = RN_DEFAULT_RETENTION,
     .arg = "D",
     .help = "delete finished instances (and their action results) D after they finished, "
             "and keyed events older than D nobody can take: 30d, 36h, 90m; off keeps them (a "
             "workflow's own: cairnctl retention set)"},
    SETTING_INT("CAIRN_PRUNE_INTERVAL_MS", "prune-interval-ms", RN_DEFAULT_PRUNE_INTERVAL_MS, 100,
                86400000, "how often retention looks for finished instances and events to delete"),
    CN_OPTS_LOG_ROWS,
};

static struct cn_opts opts = {
    .prog = "cairn-runner",
    .usage = "cairn-runner [--FLAG VALUE]...",
    .hint = "--help",
    .opts = settings,
    .nopts = sizeof(settings) / sizeof(settings[0]),
};

/* The runner's own layout of the table (variable and default on the flag's line): operators
 * look settings up by variable. */
static void
usage(FILE *f)
{
    size_t i;

    (void) fprintf(f,
                   "Usage: %s\n"
                   "Runs Cairn workflows: claims due instances from the database, runs them, "
                   "and dispatches\ntheir actions to workers. Every setting is a CAIRN_* "
                   "variable, overridden by its flag.\n\n",
                   opts.usage);
    for (i = 0; i < opts.nopts; i++) {
        (void) fprintf(f, "  --%-26s %-32s default: %s\n      %s\n", settings[i].flag,
                       settings[i].env, settings[i].def != NULL ? settings[i].def : "(none)",
                       settings[i].help);
    }
    (void) fprintf(f, "\nSIGTERM/SIGINT stop it gracefully; a second signal exits at once. SIGHUP "
                      "reopens\nthe log file. Under systemd (NOTIFY_SOCKET) it reports READY=1 "
                      "once it claims work\nand STOPPING=1 when a graceful stop begins.\n"
                      "Exit status: 0 stopped, 1 cannot start, 2 bad setting, 3 second signal.\n");
}

static const char *
get(const char *flag)
{
    return cn_opts_str(&opts, flag);
}

static uint32_t
u32(const char *flag)
{
    return (uint32_t) cn_opts_int(&opts, flag); /* checked against its range */
}

static int64_t retention_s; /* CAIRN_RETENTION, read by resolve */

/* Resolves and checks every setting; prints the first problem naming the variable. */
static bool
resolve(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("%s %s\n", "cairn-runner", CAIRN_VERSION);
        exit(0); /* as --help does */
    }
    switch (cn_opts_parse(&opts, argc - 1, argv + 1)) {
    case CN_OPTS_HELP:
        usage(stdout);
        exit(0);
    case CN_OPTS_BAD:
        return false;
    case CN_OPTS_OK:
        break;
    }
    if (get("database-url") == NULL) {
        (void) fprintf(stderr, "cairn-runner: CAIRN_DATABASE_URL (--database-url) is required\n");
        return false;
    }
    if (!cn_opts_log_setup(&opts)) {
        return false;
    }
    if ((get("worker-tls-cert-key") != NULL || get("worker-tls-ca") != NULL) !=
        (strncmp(get("worker-listen"), "tls+tcp://", 10) == 0)) {
        (void) fprintf(stderr, "cairn-runner: CAIRN_WORKER_TLS_CERT_KEY and CAIRN_WORKER_TLS_CA "
                               "go with a tls+tcp:// CAIRN_WORKER_LISTEN, and it needs the "
                               "first\n");
        return false;
    }
    if (strncmp(get("worker-listen"), "tls+tcp://", 10) == 0 &&
        get("worker-tls-cert-key") == NULL) {
        (void) fprintf(stderr, "cairn-runner: a tls+tcp:// CAIRN_WORKER_LISTEN needs "
                               "CAIRN_WORKER_TLS_CERT_KEY\n");
        return false;
    }
    if (!rn_retention_parse(get("retention"), &retention_s)) {
        (void) fprintf(stderr,
                       "cairn-runner: CAIRN_RETENTION '%s' is not off nor a whole number of "
                       "s, m, h or d up to 100 years (30d, 36h)\n",
                       get("retention"));
        return false;
    }
    if (u32("lock-heartbeat-ms") >= u32("lock-ttl-ms")) {
        (void) fprintf(stderr, "cairn-runner: CAIRN_LOCK_HEARTBEAT_MS must be below "
                               "CAIRN_LOCK_TTL_MS, or leases expire between renewals\n");
        return false;
    }
    return true;
}

/* The graceful stop runs on its own thread so that the main thread stays in sigwait for a
 * second signal; it tells the main thread it is done with SIGUSR1 (the flag tells that apart
 * from a SIGUSR1 someone else sends). */
struct stopper {
    struct rn_runner *r;
    uint32_t grace;
    pthread_t main;
    atomic_bool done;
};

/* Raises the soft limit on open files to the hard limit. Every worker connection and every
 * database connection takes a descriptor, and Debian's default soft limit (1 024) is reached by
 * a modest fleet plus a burst of connections that never say hello (the pool drops those, but
 * only after RN_POOL_HELLO_TIMEOUT_MS); the hard limit is the operator's real ceiling. */
static void
raise_fd_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) {
        return;
    }
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        cn_log(CN_LOG_WARN, "cannot raise the open-file limit to %llu",
               (unsigned long long) rl.rlim_max);
    }
}

static void *
stopper_main(void *arg)
{
    struct stopper *s = arg;

    rn_runner_stop(s->r, s->grace);
    atomic_store(&s->done, true);
    (void) pthread_kill(s->main, SIGUSR1);
    return NULL;
}

int
main(int argc, char **argv)
{
    struct rn_runner_cfg cfg;
    struct rn_runner *r = NULL;
    struct cn_errmsg em = {{0}};
    struct stopper st;
    pthread_t stopper;
    bool stopping = false;
    sigset_t sigs;
    cn_err rv;

    if (!resolve(argc, argv)) {
        return 2;
    }
    /* Signals go to sigwait below only: every thread inherits this mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    (void) signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    memset(&cfg, 0, sizeof(cfg));
    cfg.database_url = get("database-url");
    cfg.worker_listen = get("worker-listen");
    cfg.worker_credential = get("worker-credential");
    cfg.worker_tls_cert_key = get("worker-tls-cert-key");
    cfg.worker_tls_ca = get("worker-tls-ca");
    cfg.http_listen = get("http-listen");
    cfg.http_max_connections = u32("http-max-connections");
    cfg.http_header_timeout_ms = u32("http-header-timeout-ms");
    cfg.http_idle_timeout_ms = u32("http-idle-timeout-ms");
    cfg.shards = u32("shards");
    cfg.persisters = u32("persisters");
    cfg.max_instances = u32("max-instances");
    cfg.poll_interval_ms = u32("poll-interval-ms");
    cfg.lock_ttl_ms = u32("lock-ttl-ms");
    cfg.lock_heartbeat_ms = u32("lock-heartbeat-ms");
    cfg.reclaim_interval_ms = u32("reclaim-interval-ms");
    cfg.evict_sleep_threshold_ms = u32("evict-sleep-threshold-ms");
    cfg.evict_child_wait_ms = u32("evict-child-wait-ms");
    cfg.max_child_depth = u32("max-child-depth");
    cfg.retention_s = retention_s;
    cfg.prune_interval_ms = u32("prune-interval-ms");
    cfg.default_action_timeout_ms = u32("default-action-timeout-ms");
    cfg.cleanup_timeout_ms = u32("cleanup-timeout-ms");
    cfg.worker_idle_ms = u32("worker-idle-ms");
    cfg.max_inline_steps = u32("max-inline-steps");
    if ((rv = rn_runner_start(&cfg, &r, &em)) != CN_OK) {
        cn_log(CN_LOG_ERROR, "cannot start: %s", em.text);
        return rv == CN_INVAL ? 2 : 1; /* a setting the engine refused (an address) */
    }
    cn_log(CN_LOG_INFO, "started: %u shard(s), workers on %s, pid %ld", cfg.shards,
           cfg.worker_listen, (long) getpid());
    /* rn_runner_start returned after the schema check, the listeners and the claimer. */
    (void) cn_notifyf("READY=1\nSTATUS=claiming: %u shard(s), workers on %s", cfg.shards,
                      cfg.worker_listen);
    atomic_init(&st.done, false);
    for (;;) {
        int sig = 0;

        if (sigwait(&sigs, &sig) != 0) {
            continue;
        }
        if (sig == SIGUSR1) {
            if (stopping && atomic_load(&st.done)) {
                cn_thread_join(stopper);
                cn_log(CN_LOG_INFO, "stopped");
                return 0;
            }
            continue; /* not ours */
        }
        if (sig == SIGHUP) {
            cn_log_sighup();
            continue;
        }
        if (stopping) {
            cn_log(CN_LOG_WARN, "second signal (%s): exiting now", strsignal(sig));
            _exit(3);
        }
        cn_log(CN_LOG_INFO, "%s: stopping (grace %u ms; a second signal exits at once)",
               strsignal(sig), u32("shutdown-grace-ms"));
        (void) cn_notifyf("STOPPING=1\nSTATUS=%s: stopping (grace %u ms)", strsignal(sig),
                          u32("shutdown-grace-ms"));
        stopping = true;
        st.r = r;
        st.grace = u32("shutdown-grace-ms");
        st.main = pthread_self();
        if (pthread_create(&stopper, NULL, stopper_main, &st) != 0) {
            rn_runner_stop(r, st.grace);
            return 0;
        }
    }
}
