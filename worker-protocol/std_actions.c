/* SPDX-License-Identifier: MIT */
/*
 * The built-in std.* actions of the reference worker (docs/protocol.md, "cairn-worker"):
 * std.noop, std.echo, std.sleep, std.fail, std.flaky, std.hash. Shared by cairn-worker and by
 * `cairnctl exec`, which runs them in-process. Handlers are thread-safe (no state).
 */
#include "worker-protocol/std_actions.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ir/error.h"

#define STD_MAX_HASH_ROUNDS 100000000LL

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
    int64_t ms = 0;
    cn_err rv;

    (void) arg;
    if ((rv = arg_int(ctx, kwargs, "ms", false, 0, &ms, &err)) != CN_OK) {
        return arg_done(rv, &err, out);
    }
    if (ms < 0 || ms > CAIRN_STD_MAX_SLEEP_MS) {
        rv = ir_raise(&err, "ValueError", "std.sleep(): 'ms' must be between 0 and %lld",
                      (long long) CAIRN_STD_MAX_SLEEP_MS);
        return arg_done(rv == CN_RAISED ? CN_RANGE : rv, &err, out);
    }
    if (!cairn_worker_sleep(ctx, (uint32_t) ms)) {
        return cairn_worker_error_new("Cancelled", "std.sleep() cancelled", ir_null(), out);
    }
    *out = ir_null();
    return CN_OK;
}

static cn_err
act_fail(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    const struct ir_val *msg = ir_map_get(kwargs, "message", 7);
    const struct ir_val *bases = ir_map_get(kwargs, "bases", 5);
    const struct ir_val *retryable = ir_map_get(kwargs, "retryable", 9);
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
    if (retryable != NULL && retryable->type != IR_T_BOOL) {
        rv = ir_raise(&err, "TypeError", "std.fail(): 'retryable' must be a bool");
        return arg_done(rv == CN_RAISED ? CN_TYPE : rv, &err, out);
    }
    rv = cairn_worker_error_new(ir_str_data(type),
                                msg != NULL && msg->type == IR_T_STR ? ir_str_data(*msg) : "",
                                bases != NULL ? ir_val_retain(*bases) : ir_null(), out);
    if (rv == CN_TYPE) {
        rv = ir_raise(&err, "TypeError", "std.fail(): 'bases' must be a list of str or None");
        return arg_done(rv == CN_RAISED ? CN_TYPE : rv, &err, out);
    }
    if (rv == CN_OK && retryable != NULL && !retryable->u.b) {
        rv = cairn_worker_error_final(out);
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
    if (rounds < 1 || rounds > STD_MAX_HASH_ROUNDS) {
        rv = ir_raise(&err, "ValueError", "std.hash(): 'iterations' must be between 1 and %lld",
                      (long long) STD_MAX_HASH_ROUNDS);
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

const struct cairn_std_action cairn_std_actions[] = {
    {"std.noop", act_noop}, {"std.echo", act_echo},   {"std.sleep", act_sleep},
    {"std.fail", act_fail}, {"std.flaky", act_flaky}, {"std.hash", act_hash},
};
const size_t cairn_n_std = sizeof(cairn_std_actions) / sizeof(cairn_std_actions[0]);
