/* SPDX-License-Identifier: MIT */
/*
 * oversized-sender URL BYTES: a worker that sends one request of BYTES zero bytes to the runner
 * at URL, for the pool's tests, in a process of its own: nng 1.5.2's REQ side of a connection
 * dropped for an oversized message can wedge its process's nng (every nng_close in it hangs,
 * nanomsg/nng#1543; about once in 40 runs when the test did it in its own process). Exits 0
 * once the runner dropped the connection, 1 if it had not within 3 s, 2 on bad usage. It
 * leaves without closing its socket: the process's end is the close.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

static atomic_int removed;

static void
on_removed(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void) p;
    (void) ev;
    (void) arg;
    atomic_fetch_add(&removed, 1);
}

int
main(int argc, char **argv)
{
    nng_socket s;
    nng_msg *m;
    size_t n;
    int i;

    if (argc != 3 || (n = strtoul(argv[2], NULL, 10)) == 0 || nng_req0_open(&s) != 0 ||
        nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, on_removed, NULL) != 0 ||
        nng_dial(s, argv[1], NULL, 0) != 0 || nng_msg_alloc(&m, n) != 0) {
        fprintf(stderr, "usage: oversized-sender URL BYTES (URL must be dialable)\n");
        return 2;
    }
    memset(nng_msg_body(m), 0, n);
    if (nng_sendmsg(s, m, 0) != 0) {
        nng_msg_free(m);
        return 1;
    }
    for (i = 0; i < 300 && atomic_load(&removed) == 0; i++) {
        usleep(10000);
    }
    _exit(atomic_load(&removed) > 0 ? 0 : 1);
}
