/* SPDX-License-Identifier: MIT */
/* Write requests (see wreq.h). */
#include "runner/core/wreq.h"

#include <stdlib.h>
#include <string.h>

#include "ir/base/xalloc.h"

struct rn_wreq *
rn_wreq_new(uint32_t shard, struct rn_iid iid, struct rn_token lock)
{
    struct rn_wreq *q = cn_xcalloc(1, sizeof(*q));

    q->shard = shard;
    q->w.result = ir_null();
    q->w.parent_value = ir_null();
    q->w.instance_id = iid;
    q->w.lock = lock;
    return q;
}

void
rn_wreq_free(struct rn_wreq *q)
{
    size_t k;

    if (q == NULL) {
        return;
    }
    for (k = 0; k < q->ndone; k++) {
        ir_val_release(q->done[k].value);
    }
    free(q->done);
    for (k = 0; k < q->nchildren; k++) {
        ir_val_release(q->children[k].input);
    }
    free(q->children);
    for (k = 0; k < q->nwaits; k++) {
        free(q->waits[k].key);
        ir_val_release(q->waits[k].timeout_value);
        ir_val_release(q->waits[k].value);
    }
    free(q->waits);
    for (k = 0; k < q->npublished; k++) {
        ir_val_release(q->published[k].value);
    }
    free(q->published);
    for (k = 0; k < q->nsends; k++) {
        ir_val_release(q->sends[k].payload);
    }
    free(q->sends);
    for (k = 0; k < q->njoins; k++) {
        ir_val_release(q->joins[k].value);
    }
    free(q->joins);
    cn_buf_fini(&q->state);
    ir_val_release(q->w.result);
    ir_val_release(q->w.parent_value);
    free(q);
}
