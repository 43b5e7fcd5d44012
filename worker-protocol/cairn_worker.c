/* SPDX-License-Identifier: MIT */
/*
 * cairn-worker: the reference worker, built on the C SDK (include/cairn/worker.h). Serves the
 * built-in std.* actions (for tests, demos and smoke checks of a runner) and stops gracefully
 * on SIGTERM/SIGINT. See docs/protocol.md, "Running workers".
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn/worker.h"
#include "ir/eval.h"

#define DEFAULT_URL     "tcp://127.0.0.1:24118"
#define STOP_GRACE_MS   10000
#define MAX_SLEEP_MS    (24LL * 3600 * 1000)
#define MAX_HASH_ROUNDS 100000000LL

/* ---- argument helpers ---------------------------------------------------------------------- */

/* Raises TypeError "action() missing required argument: 'name'" when absent. */
static cn_err
arg_get(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, const char *name,
        struct ir_val *val, struct ir_val *err)
{
    const struct ir_val *v = ir_map_get(kwargs, name, strlen(name));

    if (v == NULL) {
        cn_err rv =
            ir_raise(err, "TypeError", "%s() missing required argument: '%s'", ctx->action, name);

        return rv == CN_RAISED ? CN_NOTFOUND : rv;
    }
    *val = *v;
    return CN_OK;
}

/* Reads an int argument (a float with an integral value is accepted). Absent: *out = def
 * when has_def, else TypeError. */
static cn_err
arg_int(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, const char *name, bool has_def,
        int64_t def, int64_t *out, struct ir_val *err)
{
    const struct ir_val *v = ir_map_get(kwargs, name, strlen(name));
    cn_err rv;

    if (v == NULL && has_def) {
        *out = def;
        return CN_OK;
    }
    if (v == NULL) {
        struct ir_val dummy;

        return arg_get(ctx, kwargs, name, &dummy, err);
    }
    if (v->type == IR_T_INT) {
        *out = v->u.i;
        return CN_OK;
    }
    if (v->type == IR_T_FLOAT && v->u.f >= -9.0e18 && v->u.f <= 9.0e18 &&
        v->u.f == (double) (int64_t) v->u.f) {
        *out = (int64_t) v->u.f;
        return CN_OK;
    }
    rv = ir_raise(err, "TypeError", "%s(): '%s' must be an int, not %s", ctx->action, name,
                  ir_type_name(v->type));
    return rv == CN_RAISED ? CN_TYPE : rv;
}

/* Argument errors come back as CN_NOTFOUND/CN_TYPE/CN_RANGE with *err set: they are the
 * action's result (an error value), not a handler failure. */
static cn_err
arg_done(cn_err rv, struct ir_val *err, struct ir_val *out)
{
    if (rv == CN_NOTFOUND || rv == CN_TYPE || rv == CN_RANGE) {
        *out = *err;
        return CN_OK;
    }
    return rv;
}

/* ---- actions ------------------------------------------------------------------------------- */

static cn_err
act_noop(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    (void) ctx;
    (void) kwargs;
    (void) arg;
    *out = ir_null();
    return CN_OK;
}

static cn_err
act_echo(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    struct ir_val v, err;
    cn_err rv;

    (void) arg;
    if ((rv = arg_get(ctx, kwargs, "value", &v, &err)) != CN_OK) {
        return arg_done(rv, &err, out);
    }
    *out = ir_val_retain(v);
    return CN_OK;
}

static cn_err
act_sleep(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    struct ir_val err;
    struct timespec ts;
    int64_t ms, done = 0;
    cn_err rv;

    (void) arg;
    if ((rv = arg_int(ctx, kwargs, "ms", false, 0, &ms, &err)) != CN_OK) {
        return arg_done(rv, &err, out);
    }
    if (ms < 0 || ms > MAX_SLEEP_MS) {
        rv = ir_raise(&err, "ValueError", "std.sleep(): 'ms' must be between 0 and %lld",
                      (long long) MAX_SLEEP_MS);
        return arg_done(rv == CN_RAISED ? CN_RANGE : rv, &err, out);
    }
    while (done < ms) {
        int64_t step = ms - done < 10 ? ms - done : 10;

        if (cairn_worker_cancelled(ctx)) {
            return cairn_worker_error_new("Cancelled", "std.sleep() cancelled", ir_null(), out);
        }
        ts.tv_sec = 0;
        ts.tv_nsec = (long) step * 1000000L;
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        done += step;
    }
    *out = ir_null();
    return CN_OK;
}

static cn_err
act_fail(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    const struct ir_val *msg = ir_map_get(kwargs, "message", 7);
    const struct ir_val *bases = ir_map_get(kwargs, "bases", 5);
    struct ir_val type, err;
    cn_err rv;

    (void) arg;
    if ((rv = arg_get(ctx, kwargs, "type", &type, &err)) != CN_OK) {
        return arg_done(rv, &err, out);
    }
    if (type.type != IR_T_STR || (msg != NULL && msg->type != IR_T_STR && msg->type != IR_T_NULL)) {
        rv = ir_raise(&err, "TypeError", "std.fail(): 'type' and 'message' must be str");
        return arg_done(rv == CN_RAISED ? CN_TYPE : rv, &err, out);
    }
    rv = cairn_worker_error_new(ir_str_data(type),
                                msg != NULL && msg->type == IR_T_STR ? ir_str_data(*msg) : "",
                                bases != NULL ? ir_val_retain(*bases) : ir_null(), out);
    if (rv == CN_TYPE) {
        rv = ir_raise(&err, "TypeError", "std.fail(): 'bases' must be a list of str or None");
        return arg_done(rv == CN_RAISED ? CN_TYPE : rv, &err, out);
    }
    return rv;
}

static cn_err
act_flaky(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    struct ir_val key, err, map = ir_null();
    int64_t failures;
    cn_err rv;

    (void) arg;
    if ((rv = arg_get(ctx, kwargs, "key", &key, &err)) != CN_OK ||
        (rv = arg_int(ctx, kwargs, "failures", false, 0, &failures, &err)) != CN_OK) {
        return arg_done(rv, &err, out);
    }
    if ((int64_t) ctx->attempt <= failures) {
        rv = ir_raise(out, "FlakyError", "failure %" PRIu32 " of %" PRId64, ctx->attempt, failures);
        return rv == CN_RAISED ? CN_OK : rv;
    }
    if ((rv = ir_map_new(2, &map)) != CN_OK ||
        (rv = ir_map_set_cstr(&map, "key", ir_val_retain(key))) != CN_OK ||
        (rv = ir_map_set_cstr(&map, "attempt", ir_int(ctx->attempt))) != CN_OK) {
        ir_val_release(map);
        return rv;
    }
    *out = map;
    return CN_OK;
}

static uint64_t
fnv1a64(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ULL;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* hex(d1) with d1 = FNV-1a-64(json(data)), d(k+1) = FNV-1a-64(hex(dk)), `iterations` rounds. */
static cn_err
act_hash(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    struct cn_buf json = CN_BUF_INIT;
    struct cn_errmsg em;
    struct ir_val data, err;
    int64_t rounds, i;
    char hex[17];
    uint64_t h;
    cn_err rv;

    (void) arg;
    if ((rv = arg_get(ctx, kwargs, "data", &data, &err)) != CN_OK ||
        (rv = arg_int(ctx, kwargs, "iterations", true, 1, &rounds, &err)) != CN_OK) {
        return arg_done(rv, &err, out);
    }
    if (rounds < 1 || rounds > MAX_HASH_ROUNDS) {
        rv = ir_raise(&err, "ValueError", "std.hash(): 'iterations' must be between 1 and %lld",
                      (long long) MAX_HASH_ROUNDS);
        return arg_done(rv == CN_RAISED ? CN_RANGE : rv, &err, out);
    }
    if ((rv = ir_val_to_json(data, &json, &em)) != CN_OK) {
        cn_buf_fini(&json);
        if (rv == CN_NOMEM) {
            return rv;
        }
        rv = ir_raise(&err, "ValueError", "std.hash(): data is not JSON: %s", em.text);
        return arg_done(rv == CN_RAISED ? CN_RANGE : rv, &err, out);
    }
    h = fnv1a64(json.data, json.len);
    cn_buf_fini(&json);
    for (i = 1; i < rounds; i++) {
        if ((i & 0xffff) == 0 && cairn_worker_cancelled(ctx)) {
            return cairn_worker_error_new("Cancelled", "std.hash() cancelled", ir_null(), out);
        }
        (void) snprintf(hex, sizeof(hex), "%016" PRIx64, h);
        h = fnv1a64(hex, 16);
    }
    (void) snprintf(hex, sizeof(hex), "%016" PRIx64, h);
    return ir_str_from_cstr(hex, out);
}

/* ---- main ---------------------------------------------------------------------------------- */

static void
usage(FILE *f)
{
    (void) fprintf(
        f,
        "usage: cairn-worker [--url URL] [--name NAME] [--slots N] [--credential TOKEN]\n"
        "Serves std.noop, std.echo, std.sleep, std.fail, std.flaky and std.hash to a Cairn\n"
        "runner. SIGTERM/SIGINT stop it after running actions finish (grace %d s).\n"
        "  --url URL           runner address (env CAIRN_WORKER_URL; default " DEFAULT_URL ")\n"
        "  --name NAME         worker name (default HOST-PID)\n"
        "  --slots N           actions run at once, 1..4096 (default 1)\n"
        "  --credential TOKEN  shared token (env CAIRN_WORKER_CREDENTIAL)\n"
        "  --help              this text\n",
        STOP_GRACE_MS / 1000);
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},   {"name", required_argument, NULL, 'n'},
        {"slots", required_argument, NULL, 's'}, {"credential", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    static const struct {
        const char *name;
        cairn_worker_handler fn;
    } actions[] = {
        {"std.noop", act_noop}, {"std.echo", act_echo},   {"std.sleep", act_sleep},
        {"std.fail", act_fail}, {"std.flaky", act_flaky}, {"std.hash", act_hash},
    };
    struct cairn_worker_options opts;
    struct cairn_worker *w = NULL;
    const char *url = getenv("CAIRN_WORKER_URL");
    struct timespec poll = {0, 200 * 1000000L};
    sigset_t sigs;
    bool waiting_logged = false;
    char *end;
    long slots;
    size_t i;
    cn_err rv;
    int opt, sig = 0;

    memset(&opts, 0, sizeof(opts));
    opts.credential = getenv("CAIRN_WORKER_CREDENTIAL");
    if (opts.credential != NULL && *opts.credential == '\0') {
        opts.credential = NULL;
    }
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'u':
            url = optarg;
            break;
        case 'n':
            opts.name = optarg;
            break;
        case 's':
            errno = 0;
            slots = strtol(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || slots < 1 || slots > 4096) {
                (void) fprintf(stderr, "cairn-worker: --slots must be 1..4096\n");
                return 2;
            }
            opts.slots = (uint32_t) slots;
            break;
        case 'c':
            opts.credential = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (url == NULL || *url == '\0') {
        url = DEFAULT_URL;
    }
    /* Signals are taken synchronously (sigtimedwait) by this thread; every thread the SDK
     * starts inherits the blocked mask. */
    (void) sigemptyset(&sigs);
    (void) sigaddset(&sigs, SIGTERM);
    (void) sigaddset(&sigs, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0) {
        return 1;
    }
    opts.start_timeout_ms = 1000; /* retried below, so that a signal can interrupt */
    if ((rv = cairn_worker_new(url, &opts, &w)) != CN_OK) {
        (void) fprintf(stderr, "cairn-worker: %s\n", cn_strerror(rv));
        return 2;
    }
    for (i = 0; i < sizeof(actions) / sizeof(actions[0]); i++) {
        if ((rv = cairn_worker_register(w, actions[i].name, actions[i].fn, NULL)) != CN_OK) {
            (void) fprintf(stderr, "cairn-worker: %s\n", cn_strerror(rv));
            cairn_worker_free(w);
            return 1;
        }
    }
    for (;;) {
        rv = cairn_worker_start(w);
        if (rv == CN_OK) {
            break;
        }
        if (rv != CN_IO || sigtimedwait(&sigs, NULL, &(struct timespec){0, 0}) > 0) {
            (void) fprintf(stderr, "cairn-worker: %s\n",
                           rv == CN_IO ? "stopped before connecting" : cairn_worker_error(w));
            cairn_worker_free(w);
            return rv == CN_IO ? 0 : 1;
        }
        if (!waiting_logged) {
            (void) fprintf(stderr, "cairn-worker: waiting for a runner at %s\n", url);
            waiting_logged = true;
        }
    }
    (void) fprintf(stderr, "cairn-worker: serving %zu actions at %s\n",
                   sizeof(actions) / sizeof(actions[0]), url);
    while (cairn_worker_running(w)) {
        sig = sigtimedwait(&sigs, NULL, &poll);
        if (sig > 0) {
            break;
        }
    }
    rv = cairn_worker_running(w) || sig > 0 ? CN_OK : CN_PROTO;
    if (sig > 0) {
        (void) fprintf(stderr, "cairn-worker: %s, stopping\n", strsignal(sig));
    }
    cairn_worker_stop(w, STOP_GRACE_MS);
    cairn_worker_free(w);
    return rv == CN_OK ? 0 : 1;
}
