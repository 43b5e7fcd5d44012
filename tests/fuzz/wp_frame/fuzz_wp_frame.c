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

/* The batches of a and b hold the same entries. */
static int
same_batches(const struct wp_msg *a, const struct wp_msg *b)
{
    uint32_t i;

    if (a->noutcomes != b->noutcomes || a->nitems != b->nitems) {
        return 0;
    }
    for (i = 0; i < a->noutcomes; i++) {
        const struct wp_outcome *x = &a->outcomes[i], *y = &b->outcomes[i];
        if (x->ok != y->ok || x->attempt != y->attempt || x->token != y->token ||
            memcmp(x->exec_id, y->exec_id, 16) != 0 || !ir_val_same(x->value, y->value)) {
            return 0;
        }
    }
    for (i = 0; i < a->nitems; i++) {
        const struct wp_dispatch *x = &a->items[i], *y = &b->items[i];
        if (x->attempt != y->attempt || x->token != y->token || x->deadline_ms != y->deadline_ms ||
            strcmp(x->action, y->action) != 0 || memcmp(x->exec_id, y->exec_id, 16) != 0 ||
            memcmp(x->instance_id, y->instance_id, 16) != 0 || !ir_val_same(x->kwargs, y->kwargs)) {
            return 0;
        }
    }
    return 1;
}

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
        r.prefetch != m.prefetch || r.nactions != m.nactions || !same_batches(&r, &m)) {
        abort();
    }
    wp_msg_fini(&r);
    wp_msg_fini(&m);
    cn_buf_fini(&b);
    return 0;
}
