/* SPDX-License-Identifier: MIT */
/*
 * The runner engine's default settings (struct rn_runner_cfg, runner.h), defined once:
 * cairn-runner's settings table (its CAIRN_* variables and --help) and `cairnctl exec`'s engine
 * in process both take them from here. README's configuration table shows them to users.
 *
 * Plain decimal literals only, or a macro that is one (the executor's own default, next to its
 * reasons): cairn-runner prints them as written (RN_DEFAULT_TEXT).
 */
#ifndef RUNNER_DEFAULTS_H
#define RUNNER_DEFAULTS_H

#include "runner/exec/exec.h"
#include "worker-protocol/proto.h"

#define RN_DEFAULT_WORKER_LISTEN            WP_DEFAULT_URL
#define RN_DEFAULT_SHARDS                   2
#define RN_DEFAULT_PERSISTERS               2
#define RN_DEFAULT_MAX_INSTANCES            10000
#define RN_DEFAULT_POLL_INTERVAL_MS         500
#define RN_DEFAULT_LOCK_TTL_MS              30000
#define RN_DEFAULT_LOCK_HEARTBEAT_MS        10000
#define RN_DEFAULT_RECLAIM_INTERVAL_MS      10000
#define RN_DEFAULT_EVICT_SLEEP_THRESHOLD_MS 60000
#define RN_DEFAULT_ACTION_TIMEOUT_MS        300000
#define RN_DEFAULT_EVICT_CHILD_WAIT_MS      10000
#define RN_DEFAULT_MAX_CHILD_DEPTH          64
#define RN_DEFAULT_SHUTDOWN_GRACE_MS        30000
#define RN_DEFAULT_WORKER_IDLE_MS           20000
#define RN_DEFAULT_MAX_INLINE_STEPS         RN_EXEC_DEFAULT_MAX_INLINE_STEPS   /* why: exec.h */
#define RN_DEFAULT_CLEANUP_TIMEOUT_MS       RN_EXEC_DEFAULT_CLEANUP_TIMEOUT_MS /* why: exec.h */
/* The HTTP listener's bounds (runner/ops/http.h): a real client sends its request head in one
 * packet, within milliseconds; 5 s covers a loaded host and a person typing into telnet no
 * more. 128 connections is far above what operators and a Prometheus server open at once. */
#define RN_DEFAULT_HTTP_MAX_CONNECTIONS   128
#define RN_DEFAULT_HTTP_HEADER_TIMEOUT_MS 5000
#define RN_DEFAULT_HTTP_IDLE_TIMEOUT_MS   5000
/* Off: deleting what users may still want is their decision, and a runner upgraded onto a
 * database with history must not start deleting it unasked. */
#define RN_DEFAULT_RETENTION         "off"
#define RN_DEFAULT_PRUNE_INTERVAL_MS 60000

/* A default as text, for a settings table: RN_DEFAULT_TEXT(RN_DEFAULT_SHARDS) is "2". */
#define RN_DEFAULT_TEXT(x)  RN_DEFAULT_TEXT_(x)
#define RN_DEFAULT_TEXT_(x) #x

#endif
