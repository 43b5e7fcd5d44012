/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the worker frame decoder: any byte string is decoded as a protocol message; an
 * accepted one must encode again and decode to the same fields. Crashes, leaks, sanitizer
 * reports and mismatches are findings.
 *
 * Target Functions: wp_msg_decode, wp_msg_encode
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker-protocol/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wp_msg m, r;
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;

    if (wp_msg_decode(data, size, &m, &em) != CN_OK) {
        return 0;
    }
    if (wp_msg_encode(&m, &b) != CN_OK || wp_msg_decode(b.data, b.len, &r, &em) != CN_OK ||
        r.kind != m.kind || r.attempt != m.attempt || r.token != m.token || r.slots != m.slots ||
        r.nactions != m.nactions || r.has_outcome != m.has_outcome ||
        !ir_val_same(r.kwargs, m.kwargs) || !ir_val_same(r.outcome.value, m.outcome.value)) {
        abort();
    }
    wp_msg_fini(&r);
    wp_msg_fini(&m);
    cn_buf_fini(&b);
    return 0;
}
