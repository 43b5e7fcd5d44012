/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the JSON value decoder and encoder: any text must be accepted or
 * rejected cleanly, and an accepted document must re-encode to JSON that decodes to the very
 * same value (types kept: 3.0 stays a float, 3 an int; key order kept), with a stable second
 * encoding. The decoded value is also pushed through msgpack, which must accept it.
 *
 * Target Functions: ir_val_from_json, ir_val_to_json, ir_val_to_msgpack, ir_val_same
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/value.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cn_errmsg err;
    struct cn_buf b1 = CN_BUF_INIT, b2 = CN_BUF_INIT, mp = CN_BUF_INIT;
    struct ir_val v, w, m;

    if (ir_val_from_json((const char *) data, size, &v, &err) != CN_OK) {
        return 0;
    }
    /* JSON never yields NaN or infinities, and depth is already bounded. */
    if (ir_val_to_json(v, &b1, &err) != CN_OK) {
        abort();
    }
    if (ir_val_from_json(b1.data, b1.len, &w, &err) != CN_OK) {
        abort();
    }
    if (!ir_val_same(v, w)) {
        abort();
    }
    if (ir_val_to_json(w, &b2, &err) != CN_OK || b1.len != b2.len ||
        memcmp(b1.data, b2.data, b1.len) != 0) {
        abort();
    }
    if (ir_val_to_msgpack(v, IR_MP_PLAIN, &mp) != CN_OK ||
        ir_val_from_msgpack(mp.data, mp.len, IR_MP_PLAIN, &m, &err) != CN_OK) {
        abort();
    }
    if (!ir_val_same(v, m)) {
        abort();
    }
    ir_val_release(m);
    ir_val_release(w);
    ir_val_release(v);
    cn_buf_fini(&b1);
    cn_buf_fini(&b2);
    cn_buf_fini(&mp);
    return 0;
}
