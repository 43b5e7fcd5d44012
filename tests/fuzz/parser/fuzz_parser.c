/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the workflow compiler: any byte string is compiled; a rejected one must yield
 * diagnostics, an accepted one must render (text, DOT, summary) and survive a msgpack round
 * trip unchanged. Crashes, leaks, sanitizer reports and mismatches are findings.
 *
 * Target Functions: ir_compile_source, ir_diags_format, ir_dag_validate, ir_dag_text, ir_dag_dot,
 * ir_dag_summary, ir_dag_encode, ir_dag_decode
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/compile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *) data;
    struct ir_diags d;
    struct ir_dag *dag = NULL, *back = NULL;
    struct cn_buf out = CN_BUF_INIT, m1 = CN_BUF_INIT, m2 = CN_BUF_INIT;
    struct cn_errmsg em;
    cn_err rv;

    ir_diags_init(&d, "fuzz.cairn", src, size);
    rv = ir_compile_source(src, size, &d, &dag);
    if (rv == CN_OK) {
        if (ir_dag_validate(dag, &em) != CN_OK || ir_dag_text(dag, &out) != CN_OK ||
            ir_dag_dot(dag, &out) != CN_OK || ir_dag_summary(dag, &out) != CN_OK ||
            ir_dag_encode(dag, &m1) != CN_OK ||
            ir_dag_decode(m1.data, m1.len, &back, &em) != CN_OK ||
            ir_dag_encode(back, &m2) != CN_OK || m1.len != m2.len ||
            memcmp(m1.data, m2.data, m1.len) != 0) {
            abort();
        }
    } else if (rv == CN_COMPILE || rv == CN_TOOBIG) {
        if (d.len == 0 || ir_diags_format(&d, &out) != CN_OK) {
            abort(); /* a rejection must say why */
        }
    } else if (rv != CN_NOMEM) {
        abort();
    }
    ir_dag_free(back);
    ir_dag_free(dag);
    cn_buf_fini(&out);
    cn_buf_fini(&m1);
    cn_buf_fini(&m2);
    ir_diags_fini(&d);
    return 0;
}
