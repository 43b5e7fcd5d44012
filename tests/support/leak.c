/* SPDX-License-Identifier: MIT */
/* LeakSanitizer hook for Criterion suites; see leak.h. */
#include "tests/support/leak.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define T_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_HAVE_ASAN 1
#endif
#endif

#ifdef T_HAVE_ASAN
int __lsan_do_recoverable_leak_check(void);

void
t_leak_check(void)
{
    if (__lsan_do_recoverable_leak_check() != 0) {
        fprintf(stderr, "t_leak_check: LeakSanitizer found leaks\n");
        abort();
    }
}
#else
void
t_leak_check(void)
{
}
#endif

void
t_leak_check_nng(void)
{
    struct timespec ts = {0, 100 * 1000000L};

    nanosleep(&ts, NULL);
    t_leak_check();
}
