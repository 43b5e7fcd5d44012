/* SPDX-License-Identifier: MIT */
/*
 * silent-runner URL IDLE_MS: a runner whose host "vanished" with the connection still open, for
 * the worker SDK's heartbeat test. It listens on URL, answers the first `hello` with a
 * `welcome` announcing IDLE_MS, then reads every request and answers none, until killed. A
 * separate process on purpose: the worker's own process must see only a silent peer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "worker-protocol/proto.h"

int
main(int argc, char **argv)
{
    struct cn_buf b = CN_BUF_INIT;
    struct wp_msg m;
    nng_socket s;
    nng_msg *msg;

    if (argc != 3 || nng_rep0_open(&s) != 0 || nng_listen(s, argv[1], NULL, 0) != 0) {
        fprintf(stderr, "usage: silent-runner URL IDLE_MS (and URL must be listenable)\n");
        return 2;
    }
    if (nng_recvmsg(s, &msg, 0) != 0) {
        return 1;
    }
    nng_msg_free(msg); /* the hello */
    wp_msg_init(&m, WP_WELCOME);
    m.session = 1;
    m.idle_ms = (uint32_t) strtoul(argv[2], NULL, 10);
    if (wp_msg_encode(&m, &b) != CN_OK || nng_send(s, b.data, b.len, 0) != 0) {
        return 1;
    }
    cn_buf_fini(&b);
    /* A new receive on a REP socket abandons the request before it: nothing is ever answered. */
    while (nng_recvmsg(s, &msg, 0) == 0) {
        nng_msg_free(msg);
    }
    return 0;
}
