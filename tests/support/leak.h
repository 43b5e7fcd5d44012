/* SPDX-License-Identifier: MIT */
/*
 * t_leak_check: a Criterion suite .fini hook that turns a LeakSanitizer finding into a test
 * failure (Criterion otherwise reports the leaks and passes the suite). A no-op in
 * builds without AddressSanitizer.
 */
#ifndef TESTS_SUPPORT_LEAK_H
#define TESTS_SUPPORT_LEAK_H

void t_leak_check(void);

/* The same for suites that use nng: nng frees closed pipes and endpoints on its own reaper
 * thread, moments after nng_close returns, so the check waits a little first (100 ms) instead
 * of reporting those objects as leaked. It also removes the ipc socket files the test process
 * named after its pid (/tmp/cairn-*-PID-*.sock, /tmp/cairn-*-PID.sock). */
void t_leak_check_nng(void);

#endif
