/* SPDX-License-Identifier: MIT */
/*
 * A shard's events and outputs as values: making and freeing an event, clearing an output for
 * the next event (and letting go of lists one large step grew). Pure, as the shard core.
 */

#include <stdlib.h>

#include "ir/base/xalloc.h"
#include "runner/core/shard.h"

/* ---- events and outputs ------------------------------------------------------------------- */

struct rn_sev *
rn_sev_new(enum rn_sev_kind kind, struct rn_iid iid)
{
    struct rn_sev *e = cn_xcalloc(1, sizeof(*e));

    e->kind = kind;
    e->value = ir_null();
    e->claimed.input = ir_null();
    e->iid = iid;
    return e;
}

void
rn_sev_free(struct rn_sev *e)
{
    size_t k;

    if (e == NULL) {
        return;
    }
    /* The claimed record's parts were moved out by the shard, or are freed here. */
    free(e->claimed.workflow);
    free(e->claimed.cancel_reason);
    ir_val_release(e->claimed.input);
    free(e->claimed.state);
    for (k = 0; k < e->claimed.ndone; k++) {
        ir_val_release(e->claimed.done[k].value);
    }
    free(e->claimed.done);
    ir_val_release(e->value);
    free(e->children);
    for (k = 0; k < e->nwaits; k++) {
        ir_val_release(e->waits[k].value);
    }
    free(e->waits);
    free(e->sends);
    for (k = 0; k < e->njoins; k++) {
        ir_val_release(e->joins[k].value);
    }
    free(e->joins);
    free(e);
}

#define RN_SHARD_OUT_KEEP 4096
#define OUT_SHRINK(list)                      \
    do {                                      \
        if ((list).cap > RN_SHARD_OUT_KEEP) { \
            free((list).items);               \
            (list).items = NULL;              \
            (list).cap = 0;                   \
        }                                     \
    } while (0)

void
rn_shard_out_clear(struct rn_shard_out *o)
{
    size_t i;

    for (i = 0; i < o->writes.len; i++) {
        rn_wreq_free(o->writes.items[i]);
    }
    for (i = 0; i < o->dispatches.len; i++) {
        ir_val_release(o->dispatches.items[i].kwargs);
        ir_val_release(o->dispatches.items[i].prev_error);
    }
    for (i = 0; i < o->late.len; i++) {
        ir_val_release(o->late.items[i].d.value);
    }
    o->late.len = 0;
    for (i = 0; i < o->reaps.len; i++) {
        free(o->reaps.items[i].exec_ids);
    }
    o->reaps.len = 0;
    o->writes.len = o->dispatches.len = o->cancels.len = o->leases.len = o->handed_back.len = 0;
    o->withdrawals.len = 0;
    o->completed = o->failed = o->evicted = o->lost = o->committed = o->removed = 0;
    o->large_freed = false;
    /* The lists are reused from event to event, but one step of a large fan-out grows them to
     * its size (300 000 dispatches: about 50 MiB) and nothing else needs that again: let go
     * of any grown past RN_SHARD_OUT_KEEP items. */
    OUT_SHRINK(o->writes);
    OUT_SHRINK(o->dispatches);
    OUT_SHRINK(o->withdrawals);
    OUT_SHRINK(o->cancels);
    OUT_SHRINK(o->leases);
    OUT_SHRINK(o->handed_back);
    OUT_SHRINK(o->late);
    OUT_SHRINK(o->reaps);
}

void
rn_shard_out_fini(struct rn_shard_out *o)
{
    rn_shard_out_clear(o);
    free(o->writes.items);
    free(o->dispatches.items);
    free(o->cancels.items);
    free(o->withdrawals.items);
    free(o->leases.items);
    free(o->handed_back.items);
    free(o->late.items);
    free(o->reaps.items);
    memset(o, 0, sizeof(*o));
}
