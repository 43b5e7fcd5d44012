/* SPDX-License-Identifier: MIT */
/*
 * A snapshot described for people (`cairnctl inspect`): the live execution nodes of an instance
 * with their status, attempt, timers and place in the workflow, as a list of plain values.
 * Pure; decodes with the same codec as hydration, so what it shows is what a runner resumes.
 */
#include <string.h>

#include "ir/base/uuid.h"
#include "runner/exec/exec_int.h"

static const char *const status_names[] = {"free",    "active",   "running",
                                           "backoff", "sleeping", "waiting"};

/* Adds key -> v to *m unless an earlier step failed. */
static void
put(struct ir_val *m, const char *key, struct ir_val v, cn_err *rv)
{
    if (*rv != CN_OK) {
        ir_val_release(v);
        return;
    }
    *rv = ir_map_set_cstr(m, key, v);
}

static void
put_str(struct ir_val *m, const char *key, const char *s, cn_err *rv)
{
    struct ir_val v;

    if (*rv == CN_OK && (*rv = ir_str_from_cstr(s, &v)) == CN_OK) {
        put(m, key, v, rv);
    }
}

static void
put_id(struct ir_val *m, const char *key, struct rn_xid id, cn_err *rv)
{
    char text[CN_UUID_TEXT_LEN + 1];

    cn_uuid_format(id.b, text);
    put_str(m, key, text, rv);
}

static cn_err
describe_node(const struct rn_instance *in, const struct rn_xnode *x, struct ir_val *out)
{
    const struct ir_node *n = &in->dag->nodes[x->node];
    struct ir_val m;
    cn_err rv;

    if ((rv = ir_map_new(10, &m)) != CN_OK) {
        return rv;
    }
    if (x->has_id) {
        put_id(&m, "exec_id", x->id, &rv);
    }
    put_str(&m, "status", x->status < RN_X_STATUS_COUNT_ ? status_names[x->status] : "?", &rv);
    put_str(&m, "kind", ir_node_kind_name((enum ir_node_kind) n->kind), &rv);
    put(&m, "node", ir_int(x->node), &rv);
    put(&m, "line", ir_int(n->line), &rv);
    if (n->kind == IR_N_ACTION && n->name != NULL) {
        put_str(&m, "action", n->name, &rv);
    }
    if (n->kind == IR_N_ACTION && ir_call_is_wait(n->call)) {
        /* the signal names, or the event's; what the wait's key evaluated to is storage's */
        put_str(&m, "call", n->call == IR_CALL_EVENT ? "wait event" : "wait", &rv);
    } else if (n->kind == IR_N_ACTION && ir_call_is_send(n->call)) {
        put_str(&m, "call", "signal", &rv);
    } else if (n->kind == IR_N_ACTION && n->call == IR_CALL_JOIN) {
        put_str(&m, "call", "wait for", &rv); /* which child is storage's (its parent link) */
    } else if (n->kind == IR_N_ACTION && n->call != IR_CALL_ACTION) {
        put_str(&m, "call", n->call == IR_CALL_RUN ? "run" : "start", &rv);
        if (x->status == RN_X_RUNNING && x->has_id) {
            struct rn_iid child = rn_child_id(x->id, x->attempt);
            char text[CN_UUID_TEXT_LEN + 1];
            cn_uuid_format(child.b, text);
            put_str(&m, "child_id", text, &rv); /* the instance this attempt started */
        }
    }
    if (x->status == RN_X_RUNNING || x->status == RN_X_BACKOFF) {
        put(&m, "attempt", ir_int(x->attempt), &rv);
    }
    if (x->status == RN_X_RUNNING && x->deadline != 0) {
        put(&m, "deadline_ms", ir_int(x->deadline), &rv);
    }
    if (x->status == RN_X_BACKOFF || x->status == RN_X_SLEEPING) {
        put(&m, "wake_ms", ir_int(x->scheduled_at), &rv);
    }
    if (x->status == RN_X_WAITING) {
        put(&m, "branches", ir_int(x->nslots), &rv);
        put(&m, "pending", ir_int(x->pending), &rv);
    }
    if (x->fork_agg != RN_NONE && x->fork_agg < in->x.len) {
        const struct rn_xnode *agg = &in->x.items[x->fork_agg];
        if (agg->has_id) {
            put_id(&m, "branch_of", agg->id, &rv);
        }
        put(&m, "branch", ir_int(x->fork_idx), &rv);
    }
    if (x->item_name != NULL) {
        put(&m, "item", ir_val_retain(x->item), &rv);
    }
    if (rv != CN_OK) {
        ir_val_release(m);
        return rv;
    }
    *out = m;
    return CN_OK;
}

cn_err
rn_snapshot_describe(const struct ir_dag *dag, const void *snap, size_t len, struct ir_val *out,
                     struct cn_errmsg *err)
{
    struct rn_exec_cfg cfg = {0};
    struct rn_instance *in;
    struct ir_val list;
    size_t i, n = 0, k = 0;
    cn_err rv;

    if ((rv = rn_snapshot_load(dag, &cfg, snap, len, &in, err)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < in->x.len; i++) {
        n += in->x.items[i].status != RN_X_FREE;
    }
    if ((rv = ir_list_new(n, &list)) != CN_OK) {
        rn_instance_free(in);
        return rv;
    }
    for (i = 0; i < in->x.len && rv == CN_OK; i++) {
        if (in->x.items[i].status != RN_X_FREE) {
            rv = describe_node(in, &in->x.items[i], &ir_list_items(list)[k++]);
        }
    }
    rn_instance_free(in);
    if (rv != CN_OK) {
        ir_val_release(list);
        return rv;
    }
    *out = list;
    return CN_OK;
}
