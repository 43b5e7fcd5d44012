/* SPDX-License-Identifier: MIT */
/*
 * silent-runner URL IDLE_MS [garbage]: a misbehaving runner for the worker SDK's tests, in a
 * process of its own (so that the worker's process sees only the peer). It listens on URL and
 * answers every `hello` with a `welcome` announcing IDLE_MS (printing "hello" on stdout), and
 * answers nothing else: a runner whose host vanished with the connection still open. With
 * `garbage`, the first `ready` of each connection gets bytes that do not decode instead.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "worker-protocol/proto.h"

int
main(int argc, char **argv)
{
    bool garbage = argc == 4 && strcmp(argv[3], "garbage") == 0, garbled = false;
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;
    struct wp_msg m;
    nng_socket s;
    nng_msg *msg;

    if ((argc != 3 && !garbage) || nng_rep0_open(&s) != 0 || nng_listen(s, argv[1], NULL, 0) != 0) {
        fprintf(stderr, "usage: silent-runner URL IDLE_MS [garbage] (URL must be listenable)\n");
        return 2;
    }
    wp_msg_init(&m, WP_WELCOME);
    m.session = 1;
    m.idle_ms = (uint32_t) strtoul(argv[2], NULL, 10);
    if (wp_msg_encode(&m, &b) != CN_OK) {
        return 1;
    }
    /* A new receive on a REP socket abandons the request before it: what is not answered at
     * once is never answered. */
    while (nng_recvmsg(s, &msg, 0) == 0) {
        struct wp_msg in;
        enum wp_kind kind = WP_NOOP;

        if (wp_msg_decode(nng_msg_body(msg), nng_msg_len(msg), &in, &em) == CN_OK) {
            kind = in.kind;
            wp_msg_fini(&in);
        }
        nng_msg_free(msg);
        if (kind == WP_HELLO) {
            garbled = false;
            if (nng_send(s, b.data, b.len, 0) != 0) {
                return 1;
            }
            printf("hello\n");
            fflush(stdout);
        } else if (kind == WP_READY && garbage && !garbled) {
            garbled = true;
            (void) nng_send(s, "\xc1", 1, 0);
        }
    }
    cn_buf_fini(&b);
    return 0;
}
