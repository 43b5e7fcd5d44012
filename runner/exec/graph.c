/* SPDX-License-Identifier: MIT */
/*
 * The live execution graph's storage: execution nodes and scopes in slot arrays with free lists,
 * scopes reference counted (each live execution node holds its scope, each scope its caller's),
 * and execution ids drawn from the instance's own generator. Pure, as the rest of the executor.
 */

#include <stdlib.h>

#include "ir/base/vec.h"
#include "runner/exec/exec_int.h"

/* ---- scopes and nodes --------------------------------------------------------------------- */

/* Takes a slot of a pool threaded by a free list through each slot's `next_free` field (at
 * next_off), or appends one; the slot comes back zeroed. RN_NONE on OOM. */
static uint32_t
slot_take(void **items, size_t *len, size_t *cap, size_t elem, uint32_t *free_head, size_t next_off)
{
    uint32_t i;

    if (*free_head != RN_NONE) {
        i = *free_head;
        memcpy(free_head, (char *) *items + (size_t) i * elem + next_off, sizeof(*free_head));
    } else {
        if (cn_vec_grow(items, cap, elem, *len + 1) != CN_OK) {
            return RN_NONE;
        }
        i = (uint32_t) (*len)++;
    }
    memset((char *) *items + (size_t) i * elem, 0, elem);
    return i;
}

uint32_t
rn_s_alloc(struct rn_instance *in)
{
    uint32_t i = slot_take((void **) &in->s.items, &in->s.len, &in->s.cap, sizeof(*in->s.items),
                           &in->s_free, offsetof(struct rn_scope, next_free));
    struct rn_scope *s;

    if (i == RN_NONE) {
        rn_ex_oom(in);
        return RN_NONE;
    }
    s = &in->s.items[i];
    s->live = true;
    s->parent = RN_NONE;
    s->vars = ir_null();
    in->live_s++;
    return i;
}

void
rn_ex_scope_rele(struct rn_instance *in, uint32_t i)
{
    /* Iterative: releasing a helper scope may release its caller chain. */
    while (i != RN_NONE) {
        struct rn_scope *s = &in->s.items[i];
        uint32_t parent;
        if (--s->refs > 0) {
            return;
        }
        parent = s->parent;
        ir_val_release(s->vars);
        s->vars = ir_null();
        s->live = false;
        s->next_free = in->s_free;
        in->s_free = i;
        in->live_s--;
        i = parent;
    }
}

void
rn_ex_scope_hold(struct rn_instance *in, uint32_t i)
{
    if (i != RN_NONE) {
        in->s.items[i].refs++;
    }
}

/* A new scope for `frame`, child of `parent`, with an empty variable map. */
uint32_t
rn_ex_scope_new(struct rn_instance *in, uint32_t frame, uint32_t parent)
{
    uint32_t i = rn_s_alloc(in);

    if (i == RN_NONE) {
        return RN_NONE;
    }
    if (ir_map_new(8, &in->s.items[i].vars) != CN_OK) {
        in->s.items[i].refs = 1;
        rn_ex_scope_rele(in, i);
        rn_ex_oom(in);
        return RN_NONE;
    }
    in->s.items[i].frame = frame;
    in->s.items[i].parent = parent;
    rn_ex_scope_hold(in, parent);
    return i;
}

uint32_t
rn_x_alloc(struct rn_instance *in)
{
    uint32_t i = slot_take((void **) &in->x.items, &in->x.len, &in->x.cap, sizeof(*in->x.items),
                           &in->x_free, offsetof(struct rn_xnode, next_free));
    struct rn_xnode *x;

    if (i == RN_NONE) {
        rn_ex_oom(in);
        return RN_NONE;
    }
    x = &in->x.items[i];
    rn_x_move(x, RN_X_ACTIVE);
    x->scope = RN_NONE;
    x->fork_agg = RN_NONE;
    x->item = ir_null();
    x->last_error = ir_null();
    in->live_x++;
    return i;
}

void
rn_ex_x_free(struct rn_instance *in, uint32_t i)
{
    struct rn_xnode *x = &in->x.items[i];
    uint32_t k;

    if (x->has_id) {
        rn_xidmap_del(&in->ids, x->id);
    }
    for (k = 0; k < x->nslots && x->slots != NULL; k++) {
        ir_val_release(x->slots[k].value);
    }
    free(x->slots);
    ir_val_release(x->item);
    ir_val_release(x->last_error);
    rn_ex_scope_rele(in, x->scope);
    rn_x_move(x, RN_X_FREE);
    memset(x, 0, sizeof(*x)); /* RN_X_FREE is 0 */
    x->next_free = in->x_free;
    in->x_free = i;
    in->live_x--;
}

/* A new execution node at template node `node`, sharing `scope` and the fork context. */
uint32_t
rn_ex_x_new(struct rn_instance *in, uint32_t node, uint32_t scope, uint32_t fork_agg, uint32_t idx)
{
    uint32_t i = rn_x_alloc(in);
    struct rn_xnode *x;

    if (i == RN_NONE) {
        return RN_NONE;
    }
    x = &in->x.items[i];
    x->node = node;
    x->scope = scope;
    rn_ex_scope_hold(in, scope);
    x->fork_agg = fork_agg;
    x->fork_idx = idx;
    return i;
}

cn_err
rn_ex_x_ensure_id(struct rn_instance *in, uint32_t i)
{
    struct rn_xnode *x = &in->x.items[i];

    if (x->has_id) {
        return CN_OK;
    }
    rn_ex_new_uuid(in, &x->id);
    x->has_id = true;
    return rn_xidmap_put(&in->ids, x->id, i);
}
