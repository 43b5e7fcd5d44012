/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the snapshot decoder: any byte string is hydrated against a fixed template
 * (a helper, a try, a spread and a sleep). A rejected input is fine; an accepted one must
 * re-serialize, hydrate again and serialize to the same bytes, and a redrive of it (cairn.retry)
 * must succeed and leave a snapshot that hydrates. Crashes, leaks, sanitizer reports and
 * mismatches are findings.
 *
 * Target Functions: rn_instance_hydrate, rn_instance_redrive, rn_snapshot_decode,
 * rn_instance_snapshot
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/compile.h"
#include "runner/exec/exec.h"
#include "tests/support/snapshot_workflow.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ir_dag *
template_dag(void)
{
    static struct ir_dag *dag;
    struct ir_diags d;

    if (dag == NULL) {
        ir_diags_init(&d, "fuzz", t_snapshot_src, sizeof(t_snapshot_src) - 1);
        if (ir_compile_source(t_snapshot_src, sizeof(t_snapshot_src) - 1, &d, &dag) != CN_OK) {
            abort();
        }
        ir_diags_fini(&d);
    }
    return dag;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rn_exec_cfg cfg = {.default_timeout_ms = 60000};
    struct rn_instance *a = NULL, *b = NULL;
    struct rn_step_out o;
    struct cn_buf s1 = CN_BUF_INIT, s2 = CN_BUF_INIT;
    struct cn_errmsg em;

    memset(&o, 0, sizeof(o));
    o.result = ir_null();
    if (rn_instance_hydrate(template_dag(), data, size, NULL, 0, &cfg, 5000, &a, &o, &em) ==
        CN_OK) {
        rn_step_out_clear(&o);
        if (rn_instance_snapshot(a, &s1) != CN_OK ||
            rn_instance_hydrate(template_dag(), s1.data, s1.len, NULL, 0, &cfg, 5000, &b, &o,
                                &em) != CN_OK ||
            rn_instance_snapshot(b, &s2) != CN_OK || s1.len != s2.len ||
            memcmp(s1.data, s2.data, s1.len) != 0) {
            abort();
        }
        rn_instance_free(b);
        b = NULL;
        rn_step_out_clear(&o);
        cn_buf_clear(&s2);
        if (rn_instance_redrive(template_dag(), data, size, NULL, 0, &cfg, 6000, &b, &o, &em) !=
                CN_OK ||
            rn_instance_snapshot(b, &s2) != CN_OK) {
            abort();
        }
        rn_instance_free(b);
        b = NULL;
        rn_step_out_clear(&o);
        if (rn_instance_hydrate(template_dag(), s2.data, s2.len, NULL, 0, &cfg, 6000, &b, &o,
                                &em) != CN_OK) {
            abort();
        }
    }
    rn_instance_free(a);
    rn_instance_free(b);
    rn_step_out_fini(&o);
    cn_buf_fini(&s1);
    cn_buf_fini(&s2);
    return 0;
}
