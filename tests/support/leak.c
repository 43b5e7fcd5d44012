/* SPDX-License-Identifier: MIT */
/* LeakSanitizer hook for Criterion suites; see leak.h. */
#include "tests/support/leak.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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

/* The ipc socket files this test process named after its pid: nng leaves them behind. */
static void
remove_ipc_files(void)
{
    char patterns[2][64];
    size_t f, i;

    (void) snprintf(patterns[0], sizeof(patterns[0]), "/tmp/cairn-*-%ld-*.sock", (long) getpid());
    (void) snprintf(patterns[1], sizeof(patterns[1]), "/tmp/cairn-*-%ld.sock", (long) getpid());
    for (f = 0; f < 2; f++) {
        glob_t g;

        if (glob(patterns[f], 0, NULL, &g) == 0) {
            for (i = 0; i < g.gl_pathc; i++) {
                (void) unlink(g.gl_pathv[i]);
            }
        }
        globfree(&g);
    }
}

void
t_leak_check_nng(void)
{
    struct timespec ts = {0, 100 * 1000000L};

    nanosleep(&ts, NULL);
    remove_ipc_files();
    t_leak_check();
}
