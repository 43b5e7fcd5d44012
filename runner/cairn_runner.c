/* SPDX-License-Identifier: MIT */
/*
 * cairn-runner: the runner process. Reads its settings from CAIRN_* variables, overridden by
 * flags (`cairn-runner --help` lists them with their defaults), starts the engine
 * (runner/runner.h) and waits for a signal: SIGTERM or SIGINT stops it gracefully within
 * CAIRN_SHUTDOWN_GRACE_MS; a second signal exits at once. The main thread is the supervisor;
 * every other thread belongs to the engine. Exit status: 0 after a graceful stop, 1 when it
 * cannot start, 2 for a bad setting, 3 on a second signal.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ir/base/log.h"
#include "runner/runner.h"

#define DEFAULT_LISTEN "tcp://127.0.0.1:24118"

enum setting_kind { S_STR, S_U32 };

struct setting {
    const char *env;
    const char *flag;
    enum setting_kind kind;
    const char *def; /* default, as text; NULL: none */
    uint32_t min, max;
    const char *help;
    const char *value; /* resolved */
};

static struct setting settings[] = {
    {"CAIRN_DATABASE_URL", "database-url", S_STR, NULL, 0, 0,
     "libpq URL of the database (required)", NULL},
    {"CAIRN_WORKER_LISTEN", "worker-listen", S_STR, DEFAULT_LISTEN, 0, 0,
     "where workers connect: tcp://HOST:PORT, ipc://PATH, tls+tcp://HOST:PORT", NULL},
    {"CAIRN_WORKER_CREDENTIAL", "worker-credential", S_STR, NULL, 0, 0,
     "shared token workers must send in hello (none: not checked)", NULL},
    {"CAIRN_HTTP_LISTEN", "http-listen", S_STR, NULL, 0, 0,
     "HOST:PORT for /metrics (Prometheus), /healthz and /readyz (none: no HTTP)", NULL},
    {"CAIRN_SHARDS", "shards", S_U32, "2", 1, 256, "executor threads", NULL},
    {"CAIRN_PERSISTERS", "persisters", S_U32, "2", 1, 8,
     "persist threads, one database connection each (one commits while another sends)", NULL},
    {"CAIRN_MAX_INSTANCES", "max-instances", S_U32, "10000", 1, 10000000,
     "most instances held at once", NULL},
    {"CAIRN_POLL_INTERVAL_MS", "poll-interval-ms", S_U32, "500", 10, 3600000,
     "claim poll period (an enqueue NOTIFY wakes the claimer sooner)", NULL},
    {"CAIRN_LOCK_TTL_MS", "lock-ttl-ms", S_U32, "30000", 1000, 86400000,
     "lease length: how long a crashed runner's instances wait before another takes them", NULL},
    {"CAIRN_LOCK_HEARTBEAT_MS", "lock-heartbeat-ms", S_U32, "10000", 100, 86400000,
     "lease renewal period (below CAIRN_LOCK_TTL_MS)", NULL},
    {"CAIRN_RECLAIM_INTERVAL_MS", "reclaim-interval-ms", S_U32, "10000", 0, 86400000,
     "how often expired leases (of runners that died) are cleared, 0 = never (the claim takes "
     "them anyway; this keeps their status truthful)",
     NULL},
    {"CAIRN_EVICT_SLEEP_THRESHOLD_MS", "evict-sleep-threshold-ms", S_U32, "60000", 0, UINT32_MAX,
     "an instance sleeping longer than this is handed back until it is due", NULL},
    {"CAIRN_DEFAULT_ACTION_TIMEOUT_MS", "default-action-timeout-ms", S_U32, "300000", 1, UINT32_MAX,
     "per-attempt deadline of actions without [timeout: D]", NULL},
    {"CAIRN_SHUTDOWN_GRACE_MS", "shutdown-grace-ms", S_U32, "30000", 0, UINT32_MAX,
     "on SIGTERM/SIGINT: how long running actions get to report before instances are handed "
     "back",
     NULL},
    {"CAIRN_WORKER_IDLE_MS", "worker-idle-ms", S_U32, "20000", 100, 3600000,
     "workers' idle cycle (heartbeat): a worker silent for 3 of these plus 1 s is dropped", NULL},
    {"CAIRN_LOG_LEVEL", "log-level", S_STR, "info", 0, 0, "debug, info, warn or error", NULL},
    {"CAIRN_LOG_FORMAT", "log-format", S_STR, "text", 0, 0, "text or json", NULL},
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static void
usage(FILE *f)
{
    size_t i;

    (void) fprintf(f, "usage: cairn-runner [--FLAG VALUE]...\n"
                      "Runs Cairn workflows: claims due instances from the database, runs them, "
                      "and dispatches\ntheir actions to workers. Every setting is a CAIRN_* "
                      "variable, overridden by its flag.\n\n");
    for (i = 0; i < NSETTINGS; i++) {
        (void) fprintf(f, "  --%-26s %-32s default: %s\n      %s\n", settings[i].flag,
                       settings[i].env, settings[i].def != NULL ? settings[i].def : "(none)",
                       settings[i].help);
    }
    (void) fprintf(f, "\nSIGTERM/SIGINT stop it gracefully; a second signal exits at once.\n"
                      "Exit status: 0 stopped, 1 cannot start, 2 bad setting, 3 second signal.\n");
}

static struct setting *
setting_by_flag(const char *flag)
{
    size_t i;

    for (i = 0; i < NSETTINGS; i++) {
        if (strcmp(settings[i].flag, flag) == 0) {
            return &settings[i];
        }
    }
    return NULL;
}

static const char *
get(const char *env)
{
    size_t i;

    for (i = 0; i < NSETTINGS; i++) {
        if (strcmp(settings[i].env, env) == 0) {
            return settings[i].value;
        }
    }
    return NULL;
}

/* Resolves and checks every setting; prints the first problem naming the variable. */
static bool
resolve(int argc, char **argv)
{
    size_t i;
    int a;

    for (i = 0; i < NSETTINGS; i++) {
        const char *v = getenv(settings[i].env);
        settings[i].value = v != NULL && *v != '\0' ? v : settings[i].def;
    }
    for (a = 1; a < argc; a++) {
        struct setting *s;

        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strncmp(argv[a], "--", 2) != 0 || (s = setting_by_flag(argv[a] + 2)) == NULL) {
            (void) fprintf(stderr, "cairn-runner: unknown argument '%s' (see --help)\n", argv[a]);
            return false;
        }
        if (a + 1 >= argc) {
            (void) fprintf(stderr, "cairn-runner: %s needs a value\n", argv[a]);
            return false;
        }
        s->value = argv[++a];
    }
    for (i = 0; i < NSETTINGS; i++) {
        struct setting *s = &settings[i];
        char *end;
        unsigned long long u;

        if (s->kind != S_U32 || s->value == NULL) {
            continue;
        }
        errno = 0;
        u = strtoull(s->value, &end, 10);
        if (errno != 0 || end == s->value || *end != '\0' || s->value[0] == '-' || u < s->min ||
            u > s->max) {
            (void) fprintf(stderr,
                           "cairn-runner: %s (--%s) must be an integer in %u..%u, got '%s'\n",
                           s->env, s->flag, s->min, s->max, s->value);
            return false;
        }
    }
    if (get("CAIRN_DATABASE_URL") == NULL) {
        (void) fprintf(stderr, "cairn-runner: CAIRN_DATABASE_URL (--database-url) is required\n");
        return false;
    }
    if (strcmp(get("CAIRN_LOG_FORMAT"), "text") != 0 &&
        strcmp(get("CAIRN_LOG_FORMAT"), "json") != 0) {
        (void) fprintf(stderr, "cairn-runner: CAIRN_LOG_FORMAT must be text or json, got '%s'\n",
                       get("CAIRN_LOG_FORMAT"));
        return false;
    }
    {
        static const char *const levels[] = {"debug", "info", "warn", "error"};
        for (i = 0; i < 4 && strcmp(get("CAIRN_LOG_LEVEL"), levels[i]) != 0; i++) {
        }
        if (i == 4) {
            (void) fprintf(stderr,
                           "cairn-runner: CAIRN_LOG_LEVEL must be debug, info, warn or error, "
                           "got '%s'\n",
                           get("CAIRN_LOG_LEVEL"));
            return false;
        }
        cn_log_setup((enum cn_log_level) i, strcmp(get("CAIRN_LOG_FORMAT"), "json") == 0);
    }
    if (strtoul(get("CAIRN_LOCK_HEARTBEAT_MS"), NULL, 10) >=
        strtoul(get("CAIRN_LOCK_TTL_MS"), NULL, 10)) {
        (void) fprintf(stderr, "cairn-runner: CAIRN_LOCK_HEARTBEAT_MS must be below "
                               "CAIRN_LOCK_TTL_MS, or leases expire between renewals\n");
        return false;
    }
    return true;
}

static uint32_t
u32(const char *env)
{
    return (uint32_t) strtoul(get(env), NULL, 10);
}

struct stopper {
    struct rn_runner *r;
    uint32_t grace;
    volatile sig_atomic_t done;
};

static void *
stopper_main(void *arg)
{
    struct stopper *s = arg;

    rn_runner_stop(s->r, s->grace);
    s->done = 1;
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
    /* Signals go to sigtimedwait below only: every thread inherits this mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    (void) signal(SIGPIPE, SIG_IGN);
    memset(&cfg, 0, sizeof(cfg));
    cfg.database_url = get("CAIRN_DATABASE_URL");
    cfg.worker_listen = get("CAIRN_WORKER_LISTEN");
    cfg.worker_credential = get("CAIRN_WORKER_CREDENTIAL");
    cfg.http_listen = get("CAIRN_HTTP_LISTEN");
    cfg.shards = u32("CAIRN_SHARDS");
    cfg.persisters = u32("CAIRN_PERSISTERS");
    cfg.max_instances = u32("CAIRN_MAX_INSTANCES");
    cfg.poll_interval_ms = u32("CAIRN_POLL_INTERVAL_MS");
    cfg.lock_ttl_ms = u32("CAIRN_LOCK_TTL_MS");
    cfg.lock_heartbeat_ms = u32("CAIRN_LOCK_HEARTBEAT_MS");
    cfg.reclaim_interval_ms = u32("CAIRN_RECLAIM_INTERVAL_MS");
    cfg.evict_sleep_threshold_ms = u32("CAIRN_EVICT_SLEEP_THRESHOLD_MS");
    cfg.default_action_timeout_ms = u32("CAIRN_DEFAULT_ACTION_TIMEOUT_MS");
    cfg.worker_idle_ms = u32("CAIRN_WORKER_IDLE_MS");
    if ((rv = rn_runner_start(&cfg, &r, &em)) != CN_OK) {
        cn_log(CN_LOG_ERROR, "cannot start: %s", em.text);
        return rv == CN_INVAL ? 2 : 1; /* a setting the engine refused (an address) */
    }
    cn_log(CN_LOG_INFO, "started: %u shard(s), workers on %s, pid %ld", cfg.shards,
           cfg.worker_listen, (long) getpid());
    for (;;) {
        struct timespec ts = {0, 100 * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);

        if (stopping && st.done) {
            pthread_join(stopper, NULL);
            cn_log(CN_LOG_INFO, "stopped");
            return 0;
        }
        if (sig < 0) {
            continue;
        }
        if (stopping) {
            cn_log(CN_LOG_WARN, "second signal (%s): exiting now", strsignal(sig));
            _exit(3);
        }
        cn_log(CN_LOG_INFO, "%s: stopping (grace %u ms; a second signal exits at once)",
               strsignal(sig), u32("CAIRN_SHUTDOWN_GRACE_MS"));
        stopping = true;
        st.r = r;
        st.grace = u32("CAIRN_SHUTDOWN_GRACE_MS");
        st.done = 0;
        if (pthread_create(&stopper, NULL, stopper_main, &st) != 0) {
            rn_runner_stop(r, st.grace);
            return 0;
        }
    }
}
