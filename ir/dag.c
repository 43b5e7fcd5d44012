/* SPDX-License-Identifier: MIT */
/* DAG template lifetime and kind names. */
#include "ir/dag.h"

#include <stdlib.h>

static const char *const node_names[] = {
#define IR_NODE_NAME(id, text) text,
    IR_NODE_KINDS(IR_NODE_NAME)
#undef IR_NODE_NAME
};

static const char *const edge_names[] = {
#define IR_EDGE_NAME(id, text) text,
    IR_EDGE_KINDS(IR_EDGE_NAME)
#undef IR_EDGE_NAME
};

const char *
ir_node_kind_name(enum ir_node_kind k)
{
    return (unsigned) k < (unsigned) IR_N_COUNT_ ? node_names[k] : "?";
}

const char *
ir_edge_kind_name(enum ir_edge_kind k)
{
    return (unsigned) k < (unsigned) IR_E_COUNT_ ? edge_names[k] : "?";
}

void
ir_dag_free(struct ir_dag *d)
{
    if (d == NULL) {
        return;
    }
    ir_xpool_fini(&d->exprs);
    cn_arena_free(d->arena);
    free(d);
}
