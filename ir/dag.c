/* SPDX-License-Identifier: MIT */
/* DAG template lifetime and kind names. */
#include "ir/dag.h"

#include <stdlib.h>
#include <string.h>

#include "ir/base/names.h"
#include "ir/wfname.h"

CN_ENUM_NAMES(ir_node_kind_name, enum ir_node_kind, IR_NODE_KINDS, IR_N_COUNT_)

bool
ir_node_is_finally(const struct ir_node *n)
{
    return n->kind == IR_N_EXCEPT && n->nhandlers == 1 && n->handlers[0].ntypes == 0 &&
           n->handlers[0].bind != NULL && strncmp(n->handlers[0].bind, "$fin", 4) == 0;
}

bool
ir_dag_has_finally(const struct ir_dag *d)
{
    uint32_t i;

    for (i = 0; i < d->nnodes; i++) {
        if (ir_node_is_finally(&d->nodes[i])) {
            return true;
        }
    }
    return false;
}
CN_ENUM_NAMES(ir_edge_kind_name, enum ir_edge_kind, IR_EDGE_KINDS, IR_E_COUNT_)

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

/* ---- structural validation ------------------------------------------------------------ */

static bool
node_is(const struct ir_dag *d, uint32_t n, enum ir_node_kind k)
{
    return n != IR_NO_NODE && n < d->nnodes && d->nodes[n].kind == k;
}

static bool
expr_ok(const struct ir_dag *d, uint32_t e)
{
    return e != IR_NO_EXPR && e < d->exprs.len;
}

static cn_err
vfail(struct cn_errmsg *err, uint32_t n, const char *what)
{
    return cn_errmsg_set(err, CN_RANGE, "dag: node n%u: %s", n, what);
}

/* A signal or event name: a name of the language (letters, digits, '_'; not a digit first). */
static bool
wait_name_ok(const char *s, size_t n)
{
    size_t k;

    if (n == 0 || n > IR_MAX_WAIT_NAME || (s[0] >= '0' && s[0] <= '9')) {
        return false;
    }
    for (k = 0; k < n; k++) {
        char c = s[k];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_')) {
            return false;
        }
    }
    return true;
}

bool
ir_wait_names_ok(const char *names, bool event)
{
    const char *p = names, *c;
    size_t count = 0;

    if (names == NULL) {
        return false;
    }
    for (;;) {
        c = strchr(p, ',');
        if (!wait_name_ok(p, c != NULL ? (size_t) (c - p) : strlen(p))) {
            return false;
        }
        count++;
        if (c == NULL) {
            break;
        }
        p = c + 1;
    }
    return event ? count == 1 : count <= IR_MAX_WAIT_NAMES;
}

/* A wait names what it waits for (one event; one or more signals), takes only `key` (an event's,
 * required) and `default` as arguments, and no policy but its timeout: nothing retries it. */
static cn_err
validate_wait(const struct ir_node *n, uint32_t i, struct cn_errmsg *err)
{
    bool key = false;
    uint32_t k;

    if (!ir_wait_names_ok(n->name, n->call == IR_CALL_EVENT)) {
        return vfail(err, i, "a wait needs valid signal names (an event: one)");
    }
    for (k = 0; k < n->nargs; k++) {
        if (strcmp(n->argnames[k], "key") == 0 && n->call == IR_CALL_EVENT) {
            key = true;
        } else if (strcmp(n->argnames[k], "default") != 0) {
            return vfail(err, i, "a wait takes only key (an event's) and default");
        }
    }
    if (key != (n->call == IR_CALL_EVENT) || n->nretries != 0 || n->deadline_ms != 0 ||
        n->version != NULL) {
        return vfail(err, i, "a wait carries a policy it cannot have, or an event no key");
    }
    return CN_OK;
}

/* A signal names one signal (as a wait would), takes `to` and optionally `payload`, and no
 * policy: storage sends it in the write that records the call. */
static cn_err
validate_send(const struct ir_node *n, uint32_t i, struct cn_errmsg *err)
{
    bool to = false;
    uint32_t k;

    if (!ir_wait_names_ok(n->name, true)) {
        return vfail(err, i, "a signal needs one valid signal name");
    }
    for (k = 0; k < n->nargs; k++) {
        if (strcmp(n->argnames[k], "to") == 0) {
            to = true;
        } else if (strcmp(n->argnames[k], "payload") != 0) {
            return vfail(err, i, "a signal takes only to and payload");
        }
    }
    if (!to || n->nretries != 0 || n->deadline_ms != 0 || n->timeout_ms != 0 ||
        n->version != NULL) {
        return vfail(err, i, "a signal carries a policy it cannot have, or no to");
    }
    return CN_OK;
}

/* What an ACTION's `call` promises the runner: a child workflow call names a workflow it could
 * look up, pins at most a valid version, and a `start` carries no policy (nothing waits for it,
 * so nothing could retry or time it out). */
static cn_err
validate_call(const struct ir_dag *d, uint32_t i, struct cn_errmsg *err)
{
    const struct ir_node *n = &d->nodes[i];

    if (n->call >= IR_CALL_COUNT_ || (n->call != IR_CALL_ACTION && n->kind != IR_N_ACTION)) {
        return vfail(err, i, "only an action node calls something");
    }
    if (n->version != NULL &&
        (n->call == IR_CALL_ACTION || !ir_workflow_version_ok(n->version, strlen(n->version)))) {
        return vfail(err, i, "a version pins a child workflow call and follows the version rule");
    }
    if (n->call == IR_CALL_ACTION) {
        return CN_OK;
    }
    if (ir_call_is_wait(n->call)) {
        return validate_wait(n, i, err);
    }
    if (ir_call_is_send(n->call)) {
        return validate_send(n, i, err);
    }
    if (n->call == IR_CALL_JOIN) {
        if (n->nargs != 1 || strcmp(n->argnames[0], "child") != 0 || n->nretries != 0 ||
            n->deadline_ms != 0 || n->timeout_ms != 0 || n->version != NULL) {
            return vfail(err, i, "a wait for a child takes its id (child) and no policy");
        }
        return CN_OK;
    }
    if (!ir_workflow_name_ok(n->name)) {
        return vfail(err, i, "a child workflow call needs a valid workflow name");
    }
    if (n->deadline_ms != 0 ||
        (n->call == IR_CALL_START && (n->nretries != 0 || n->timeout_ms != 0))) {
        return vfail(err, i, "a child workflow call carries a policy it cannot have");
    }
    return CN_OK;
}

/* Edges of n whose kinds, indices and guards fit what its kind promises the executor. */
static cn_err
validate_edges(const struct ir_dag *d, uint32_t i, struct cn_errmsg *err)
{
    const struct ir_node *n = &d->nodes[i];
    uint32_t k, forks = 0;

    for (k = 0; k < n->nedges; k++) {
        const struct ir_edge *e = &d->edges[n->first_edge + k];
        switch ((enum ir_node_kind) n->kind) {
        case IR_N_BRANCH:
            if (e->kind == IR_E_GUARD ? !expr_ok(d, e->expr)
                                      : (e->kind != IR_E_ELSE || k + 1 != n->nedges)) {
                return vfail(err, i, "a branch has guard edges then one else edge");
            }
            break;
        case IR_N_LOOP_COND:
            if (n->nedges != 2 || d->edges[n->first_edge].kind != IR_E_TRUE ||
                d->edges[n->first_edge + 1].kind != IR_E_FALSE) {
                return vfail(err, i, "a loop condition has a true and a false edge");
            }
            break;
        case IR_N_EXCEPT:
            if (e->kind != IR_E_HANDLER || e->index != k) {
                return vfail(err, i, "an except node has handler edges in order");
            }
            break;
        case IR_N_SPREAD:
        case IR_N_PARALLEL:
            if (e->kind != IR_E_FORK || e->index != k) {
                return vfail(err, i, "a fork has fork edges in order");
            }
            forks++;
            break;
        default:
            if (e->kind != IR_E_NEXT && e->kind != IR_E_BACK) {
                return vfail(err, i, "unexpected edge kind");
            }
            break;
        }
    }
    if (n->kind == IR_N_EXCEPT && n->nedges != n->nhandlers) {
        return vfail(err, i, "handler edges do not match the handlers");
    }
    if (n->kind == IR_N_SPREAD &&
        (forks != 1 || !node_is(d, d->edges[n->first_edge].to, IR_N_ACTION))) {
        return vfail(err, i, "a spread forks into exactly one action");
    }
    if (n->kind == IR_N_PARALLEL && forks == 0) {
        return vfail(err, i, "a parallel block has branches");
    }
    if (n->kind == IR_N_OUTPUT || n->kind == IR_N_RAISE
            ? n->nedges != 0
            : (n->nedges == 0 && n->kind != IR_N_EXCEPT)) {
        return vfail(err, i,
                     n->kind == IR_N_OUTPUT  ? "output has successors"
                     : n->kind == IR_N_RAISE ? "a raise has successors"
                                             : "node without a successor");
    }
    return CN_OK;
}

cn_err
ir_dag_validate(const struct ir_dag *d, struct cn_errmsg *err)
{
    uint32_t i;
    cn_err rv;

    if (!node_is(d, d->entry, IR_N_ENTRY) || !node_is(d, d->output, IR_N_OUTPUT)) {
        return cn_errmsg_set(err, CN_RANGE, "dag: entry/output nodes are wrong");
    }
    for (i = 0; i < d->nframes; i++) {
        const struct ir_frame *f = &d->frames[i];
        if ((i == 0) != (f->parent == IR_NO_NODE) || (i > 0 && f->parent >= i) ||
            (i > 0 && !node_is(d, f->call_node, IR_N_CALL_ENTER))) {
            return cn_errmsg_set(err, CN_RANGE, "dag: frame f%u is malformed", i);
        }
    }
    for (i = 0; i < d->nnodes; i++) {
        const struct ir_node *n = &d->nodes[i];
        if (n->exc != IR_NO_NODE && !node_is(d, n->exc, IR_N_EXCEPT) &&
            !node_is(d, n->exc, IR_N_AGGREGATE)) {
            return vfail(err, i, "exception edge to a node that cannot handle errors");
        }
        if ((rv = validate_edges(d, i, err)) != CN_OK || (rv = validate_call(d, i, err)) != CN_OK) {
            return rv;
        }
        switch ((enum ir_node_kind) n->kind) {
        case IR_N_ACTION:
            if (n->name == NULL || n->timeout_ms < 0) {
                return vfail(err, i, "an action needs a name");
            }
            break;
        case IR_N_ASSIGN:
        case IR_N_LOOP_INIT:
        case IR_N_LOOP_EXTRACT:
        case IR_N_LOOP_INCR:
        case IR_N_LOOP_COND:
        case IR_N_SLEEP:
            if (!expr_ok(d, n->expr)) {
                return vfail(err, i, "missing expression");
            }
            break;
        case IR_N_PUBLISH:
            if (!expr_ok(d, n->expr) || !ir_wait_names_ok(n->name, true)) {
                return vfail(err, i, "a publish needs a value and a name");
            }
            break;
        case IR_N_SPREAD:
            if (!expr_ok(d, n->expr) || n->name == NULL || !node_is(d, n->link, IR_N_AGGREGATE)) {
                return vfail(err, i, "a spread needs a collection, an item name and an aggregate");
            }
            break;
        case IR_N_PARALLEL:
            if (!node_is(d, n->link, IR_N_AGGREGATE)) {
                return vfail(err, i, "a parallel block needs an aggregate");
            }
            break;
        case IR_N_AGGREGATE:
            if (!node_is(d, n->link, IR_N_SPREAD) && !node_is(d, n->link, IR_N_PARALLEL)) {
                return vfail(err, i, "an aggregate belongs to a fork");
            }
            break;
        case IR_N_CALL_ENTER:
            if (n->callee_frame == IR_NO_NODE || n->callee_frame >= d->nframes ||
                !node_is(d, n->link, IR_N_CALL_EXIT) || n->name == NULL) {
                return vfail(err, i, "a call needs its frame and its exit");
            }
            for (uint32_t k = 0; k < n->nargs; k++) {
                if (!expr_ok(d, n->argexprs[k])) {
                    return vfail(err, i, "a call argument has no expression");
                }
            }
            break;
        case IR_N_CALL_EXIT:
            if (!node_is(d, n->link, IR_N_CALL_ENTER) || n->callee_frame >= d->nframes) {
                return vfail(err, i, "a call exit needs its call");
            }
            break;
        case IR_N_TRY:
            if (!node_is(d, n->link, IR_N_EXCEPT)) {
                return vfail(err, i, "a try needs its except node");
            }
            break;
        case IR_N_RAISE:
            if (n->name == NULL ? !expr_ok(d, n->expr)
                                : n->nargs != 3 || !expr_ok(d, n->argexprs[0]) ||
                                      !expr_ok(d, n->argexprs[1]) || !expr_ok(d, n->argexprs[2])) {
                return vfail(err, i, "a raise needs an error, or a type with its three parts");
            }
            break;
        default:
            break;
        }
        if (n->kind == IR_N_ACTION) {
            for (uint32_t k = 0; k < n->nargs; k++) {
                if (!expr_ok(d, n->argexprs[k]) || n->argnames[k] == NULL) {
                    return vfail(err, i, "an action argument has no expression");
                }
            }
        }
    }
    return CN_OK;
}
