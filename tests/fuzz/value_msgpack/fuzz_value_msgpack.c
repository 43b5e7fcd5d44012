/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the msgpack value decoder: hostile bytes must be rejected cleanly (no
 * crash, no allocation driven by declared sizes), and whatever is accepted must survive an
 * encode/decode round trip unchanged, with a canonical (byte-identical) second encoding.
 *
 * Target Functions: ir_msgpack_shape_ok, ir_val_from_msgpack, ir_val_to_msgpack, ir_val_same
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/value.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Returns whether the decoder accepted the input. */
static bool
round_trip(const uint8_t *data, size_t size, unsigned flags)
{
    struct cn_errmsg err;
    struct cn_buf b1 = CN_BUF_INIT, b2 = CN_BUF_INIT;
    struct ir_val v, w;

    if (ir_val_from_msgpack(data, size, flags, &v, &err) != CN_OK) {
        return false;
    }
    /* Whatever a decoder accepted is within every limit the encoder checks. */
    if (ir_val_to_msgpack(v, flags, &b1) != CN_OK) {
        abort();
    }
    if (ir_val_from_msgpack(b1.data, b1.len, flags, &w, &err) != CN_OK) {
        abort();
    }
    if (!ir_val_same(v, w)) {
        abort();
    }
    if (ir_val_to_msgpack(w, flags, &b2) != CN_OK || b1.len != b2.len ||
        memcmp(b1.data, b2.data, b1.len) != 0) {
        abort();
    }
    ir_val_release(w);
    ir_val_release(v);
    cn_buf_fini(&b1);
    cn_buf_fini(&b2);
    return true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cn_errmsg err;
    bool shape = ir_msgpack_shape_ok(data, size, IR_VALUE_MAX_DEPTH, &err) == CN_OK;

    /* The decoder runs the shape check first, so it can never accept what the check refuses
     * (error-ext payloads are checked again on their own, which can only refuse more). */
    if (round_trip(data, size, IR_MP_PLAIN) && !shape) {
        abort();
    }
    if (round_trip(data, size, IR_MP_INTERNAL) && !shape) {
        abort();
    }
    return 0;
}
