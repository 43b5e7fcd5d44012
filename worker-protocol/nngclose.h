/* SPDX-License-Identifier: MIT */
/*
 * wp_close_bounded: nng_close with a deadline, for both ends of the worker protocol (the
 * SDK's sockets and the runner's pool). nng 1.5.2 (Debian 12's) can hang for good in
 * nng_close: its reaper thread waits on a pipe task that was counted busy but never run
 * (nanomsg/nng#1543 and #1813, fixed in later releases). Seen about once in 50 stops of a
 * worker whose runner was resetting its session, and about once in 40 runs of `cairnctl exec`
 * of a workflow whose deadline passed with an action running (both ends in one process: once
 * the reaper is stuck, every later nng_close in the process hangs too). A stop that hangs
 * would keep a runner or worker from exiting on SIGTERM, so the close runs on a thread of its
 * own and, past the deadline, is left behind: the socket and that thread leak, and the caller
 * must not free anything nng may still call back into.
 *
 * Threads: each call starts one detached thread, which ends when nng_close returns (never,
 * when it hangs). Locks: one mutex per call, shared by the caller and that thread.
 */
#ifndef WORKER_PROTOCOL_NNGCLOSE_H
#define WORKER_PROTOCOL_NNGCLOSE_H

#include <stdbool.h>
#include <stdint.h>

#include <nng/nng.h>

/* How long stops wait for nng_close before leaving the socket behind. */
#define WP_CLOSE_TIMEOUT_MS 3000

/* Closes sock; true when nng_close returned within timeout_ms, false when it is left running
 * in the background (the socket may still complete operations and call pipe callbacks). */
bool wp_close_bounded(nng_socket sock, int64_t timeout_ms);

#endif
