#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Meson test (suite unit): the executor and the shard core are pure. Each static library given
# must not call, directly, anything that starts a thread, takes a lock, reads a clock, draws
# randomness, sleeps, or touches a socket, a file or the database: time comes in as arguments,
# randomness from the instance's own generator, and every effect goes out as the core's output
# (runner/README.md). The layer-check shared libraries prove they call nothing of the rest of
# runner/; this proves what they call of the system. Arguments: NM LIB.a...
set -uo pipefail
nm=${1:?usage: pure_libs.sh NM LIB.a...}
shift
# Symbols a pure library may not use, as extended regular expressions over nm's names.
forbidden='^(pthread_|PQ|nng_|clock_gettime$|gettimeofday$|time$|clock$|nanosleep$|usleep$|sleep$|'
forbidden+='rand$|srand$|random$|srandom$|rand_r$|getrandom$|arc4random|socket$|connect$|accept|'
forbidden+='bind$|listen$|send|recv|poll$|epoll_|select$|open$|openat$|fopen|read$|write$|fork$|'
forbidden+='exec[lv]|system$|getenv$|mtx_|cnd_|thrd_|cn_clock_|cn_mutex_|cn_cond_)'
status=0
n=0
for lib in "$@"; do
    n=$((n + 1))
    bad=$("$nm" -u --format=just-symbols "$lib" | sort -u | grep -E "$forbidden")
    if [[ -z $bad ]]; then
        echo "ok $n - $(basename "$lib") calls nothing impure"
    else
        echo "not ok $n - $(basename "$lib") calls: $(echo $bad)"
        status=1
    fi
done
echo "1..$n"
exit $status
