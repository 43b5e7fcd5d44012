/* SPDX-License-Identifier: MIT */
/*
 * The service manager's readiness protocol (sd_notify(3)) without libsystemd: when
 * NOTIFY_SOCKET is set, each call sends one datagram of newline-separated KEY=VALUE
 * assignments ("READY=1", "STOPPING=1", "STATUS=serving 6 actions") to that AF_UNIX socket: a
 * path, or a name in the abstract namespace when the variable starts with '@'. Unset (not
 * run by systemd with Type=notify): nothing is sent. Used by cairn-runner and cairn-worker.
 *
 * Never fatal: the supervisor not hearing us is its problem to time out on, not a reason to
 * stop serving. The first failure is logged (warn), later ones are not, so a bad variable
 * does not flood the log once per status change.
 *
 * Threads: callable from any thread; no state but the logged-once flag (atomic). Reads the
 * environment on every call, so nothing may setenv concurrently (Cairn's programs do not).
 */
#ifndef IR_BASE_NOTIFY_H
#define IR_BASE_NOTIFY_H

#include "ir/base/err.h"

/* Sends state. Returns CN_OK when sent, CN_NOTFOUND when NOTIFY_SOCKET is unset or empty
 * (nothing to do), CN_INVAL for an address that is not a path or '@' name or does not fit
 * in sockaddr_un, CN_IO when the socket cannot be made or the send fails. Callers may ignore
 * the result: failures are logged. */
cn_err cn_notify(const char *state);

/* cn_notify with a printf-style state ("STATUS=serving %zu actions"); one datagram of at most
 * 1 KiB (longer text is cut). */
cn_err cn_notifyf(const char *fmt, ...) CN_PRINTF(1, 2);

#endif
