/* SPDX-License-Identifier: MIT */
/*
 * t_leak_check: a Criterion suite .fini hook that turns a LeakSanitizer finding into a test
 * failure (STYLE 8.4 caveat 2: Criterion otherwise reports leaks but passes). A no-op in
 * builds without AddressSanitizer.
 */
#ifndef TESTS_SUPPORT_LEAK_H
#define TESTS_SUPPORT_LEAK_H

void t_leak_check(void);

#endif
