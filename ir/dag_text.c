/* SPDX-License-Identifier: MIT */
/*
 * Text renderings of a DAG template: the canonical text form (stable, line-oriented, used by
 * golden tests and `cairnctl dag`), Graphviz DOT, and a one-line summary.
 */
#include <stdio.h>
#include <string.h>

#include "ir/dag.h"

/* Durations in the largest unit that is exact, as a user would write them. */
static cn_err
put_duration(struct cn_buf *o, int64_t ms)
{
    if (ms % 86400000 == 0) {
        return cn_buf_printf(o, "%lldd", (long long) (ms / 86400000));
    }
    if (ms % 3600000 == 0) {
        return cn_buf_printf(o, "%lldh", (long long) (ms / 3600000));
    }
    if (ms % 60000 == 0) {
        return cn_buf_printf(o, "%lldm", (long long) (ms / 60000));
    }
    if (ms % 1000 == 0) {
        return cn_buf_printf(o, "%llds", (long long) (ms / 1000));
    }
    return cn_buf_printf(o, "%lldms", (long long) ms);
}

static cn_err
put_names(struct cn_buf *o, const char *const *names, uint32_t n, const char *sep)
{
    uint32_t i;

    for (i = 0; i < n; i++) {
        CN_TRY(cn_buf_printf(o, "%s%s", i ? sep : "", names[i]));
    }
    return CN_OK;
}

static cn_err
put_types(struct cn_buf *o, const char *const *types, uint32_t n)
{
    if (n == 1) {
        return cn_buf_puts(o, types[0]);
    }
    CN_TRY(cn_buf_putc(o, '('));
    CN_TRY(put_names(o, types, n, ", "));
    return cn_buf_putc(o, ')');
}

static const char *const call_words[] = {
#define IR_CALL_WORD(id, text) text,
    IR_CALL_KINDS(IR_CALL_WORD)
#undef IR_CALL_WORD
};

static cn_err
put_expr(const struct ir_dag *d, struct cn_buf *o, uint32_t e)
{
    return ir_expr_print(&d->exprs, e, o);
}

static cn_err
put_targets(struct cn_buf *o, const struct ir_node *n)
{
    if (n->ntargets == 0) {
        return CN_OK;
    }
    CN_TRY(put_names(o, n->targets, n->ntargets, ", "));
    return cn_buf_puts(o, n->unpack && n->ntargets == 1 ? ", = " : " = ");
}

/* A wait as written: `wait a, b [timeout: D, default: v]`, `wait event e [key: k, ...]`. */
static cn_err
put_wait(const struct ir_dag *d, struct cn_buf *o, const struct ir_node *n)
{
    const char *p;
    uint32_t i;
    bool open = false;

    CN_TRY(cn_buf_puts(o, n->call == IR_CALL_EVENT ? "wait event " : "wait "));
    for (p = n->name; *p != '\0'; p++) {
        CN_TRY(*p == ',' ? cn_buf_puts(o, ", ") : cn_buf_putc(o, *p));
    }
    for (i = 0; i < n->nargs; i++) { /* key first, as the runner reads it */
        if (strcmp(n->argnames[i], "key") == 0) {
            CN_TRY(cn_buf_puts(o, " [key: "));
            CN_TRY(put_expr(d, o, n->argexprs[i]));
            open = true;
        }
    }
    if (n->timeout_ms > 0) {
        CN_TRY(cn_buf_puts(o, open ? ", timeout: " : " [timeout: "));
        CN_TRY(put_duration(o, n->timeout_ms));
        open = true;
    }
    for (i = 0; i < n->nargs; i++) {
        if (strcmp(n->argnames[i], "default") == 0) {
            CN_TRY(cn_buf_puts(o, open ? ", default: " : " [default: "));
            CN_TRY(put_expr(d, o, n->argexprs[i]));
            open = true;
        }
    }
    return open ? cn_buf_putc(o, ']') : CN_OK;
}

static cn_err
put_action(const struct ir_dag *d, struct cn_buf *o, const struct ir_node *n)
{
    uint32_t i;

    if (ir_call_is_wait(n->call)) {
        return put_wait(d, o, n);
    }
    if (n->call == IR_CALL_JOIN) { /* `wait for id` */
        CN_TRY(cn_buf_puts(o, "wait for "));
        return put_expr(d, o, n->argexprs[0]);
    }

    /* As written in the source: `@mod.action(...)`, `run wf(...)`, `start wf(...)`. */
    if (n->call == IR_CALL_ACTION) {
        CN_TRY(cn_buf_printf(o, "@%s(", n->name));
    } else {
        CN_TRY(cn_buf_printf(o, "%s %s(", call_words[n->call], n->name));
    }
    for (i = 0; i < n->nargs; i++) {
        CN_TRY(cn_buf_printf(o, "%s%s=", i ? ", " : "", n->argnames[i]));
        CN_TRY(put_expr(d, o, n->argexprs[i]));
    }
    CN_TRY(cn_buf_putc(o, ')'));
    for (i = 0; i < n->nretries; i++) {
        const struct ir_retry *r = &n->retries[i];
        CN_TRY(cn_buf_puts(o, " ["));
        if (r->ntypes > 0) {
            CN_TRY(put_types(o, r->types, r->ntypes));
            CN_TRY(cn_buf_puts(o, " -> "));
        }
        CN_TRY(cn_buf_printf(o, "retry: %lld, backoff: ", (long long) r->retries));
        CN_TRY(put_duration(o, r->backoff_ms));
        if (r->max_backoff_ms != IR_MAX_BACKOFF_MS) {
            CN_TRY(cn_buf_puts(o, ", max_backoff: "));
            CN_TRY(put_duration(o, r->max_backoff_ms));
        }
        if (r->multiplier_milli != IR_DEFAULT_BACKOFF_MULTIPLIER_MILLI) {
            /* thousandths, written as the shortest decimal: 1500 is 1.5 */
            char frac[8];
            int len =
                snprintf(frac, sizeof(frac), "%03lld", (long long) (r->multiplier_milli % 1000));
            while (len > 0 && frac[len - 1] == '0') {
                frac[--len] = '\0';
            }
            CN_TRY(cn_buf_printf(o, ", multiplier: %lld%s%s",
                                 (long long) (r->multiplier_milli / 1000), len > 0 ? "." : "",
                                 frac));
        }
        if (r->max_elapsed_ms > 0) {
            CN_TRY(cn_buf_puts(o, ", max_elapsed: "));
            CN_TRY(put_duration(o, r->max_elapsed_ms));
        }
        CN_TRY(cn_buf_putc(o, ']'));
    }
    if (n->timeout_ms > 0) {
        CN_TRY(cn_buf_puts(o, " [timeout: "));
        CN_TRY(put_duration(o, n->timeout_ms));
        CN_TRY(cn_buf_putc(o, ']'));
    }
    if (n->deadline_ms > 0) {
        CN_TRY(cn_buf_puts(o, " [deadline: "));
        CN_TRY(put_duration(o, n->deadline_ms));
        CN_TRY(cn_buf_putc(o, ']'));
    }
    if (n->version != NULL) {
        /* validated: letters, digits and _ . - only, nothing to escape */
        CN_TRY(cn_buf_printf(o, " [version: \"%s\"]", n->version));
    }
    return CN_OK;
}

/* The statement-like description of a node, shared by the text and DOT forms. */
static cn_err
put_detail(const struct ir_dag *d, struct cn_buf *o, const struct ir_node *n)
{
    uint32_t i;

    switch ((enum ir_node_kind) n->kind) {
    case IR_N_ENTRY:
        CN_TRY(cn_buf_puts(o, "input: ["));
        for (i = 0; i < n->ntargets; i++) {
            CN_TRY(cn_buf_puts(o, i > 0 ? ", " : ""));
            CN_TRY(cn_buf_puts(o, n->targets[i]));
            if (i < n->nargs && n->argexprs[i] != IR_NO_EXPR) {
                CN_TRY(cn_buf_puts(o, " = "));
                CN_TRY(put_expr(d, o, n->argexprs[i]));
            }
        }
        CN_TRY(cn_buf_putc(o, ']'));
        if (n->name != NULL) {
            CN_TRY(cn_buf_puts(o, " schema "));
            CN_TRY(cn_buf_puts(o, n->name));
        }
        if (n->frame == 0 && d->timeout_ms > 0) {
            CN_TRY(cn_buf_puts(o, " [timeout: "));
            CN_TRY(put_duration(o, d->timeout_ms));
            CN_TRY(cn_buf_putc(o, ']'));
        }
        return CN_OK;
    case IR_N_OUTPUT:
        CN_TRY(cn_buf_puts(o, "output: ["));
        CN_TRY(put_names(o, n->targets, n->ntargets, ", "));
        return cn_buf_putc(o, ']');
    case IR_N_ASSIGN:
    case IR_N_LOOP_INIT:
    case IR_N_LOOP_EXTRACT:
    case IR_N_LOOP_INCR:
        CN_TRY(put_targets(o, n));
        return put_expr(d, o, n->expr);
    case IR_N_LOOP_COND:
        return put_expr(d, o, n->expr);
    case IR_N_ACTION:
        CN_TRY(put_targets(o, n));
        return put_action(d, o, n);
    case IR_N_SPREAD:
        CN_TRY(cn_buf_puts(o, "spread "));
        CN_TRY(put_expr(d, o, n->expr));
        return cn_buf_printf(o, ":%s%s", n->name, n->fail_fast ? " [fail_fast]" : "");
    case IR_N_PARALLEL:
        return n->fail_fast ? cn_buf_puts(o, "[fail_fast]") : CN_OK;
    case IR_N_AGGREGATE:
        if (n->ntargets == 0) {
            CN_TRY(cn_buf_puts(o, "(results discarded)"));
        } else {
            CN_TRY(put_names(o, n->targets, n->ntargets, ", "));
            CN_TRY(cn_buf_puts(o, n->unpack ? " = unpack(results)" : " = results"));
        }
        return n->fail_fast ? cn_buf_puts(o, " [fail_fast]") : CN_OK;
    case IR_N_EXCEPT:
        for (i = 0; i < n->nhandlers; i++) {
            const struct ir_handler_info *h = &n->handlers[i];
            CN_TRY(cn_buf_puts(o, i ? ", " : ""));
            if (h->ntypes == 0) {
                CN_TRY(cn_buf_puts(o, "*"));
            } else {
                CN_TRY(put_types(o, h->types, h->ntypes));
            }
            if (h->bind != NULL) {
                CN_TRY(cn_buf_printf(o, " as %s", h->bind));
            }
        }
        return CN_OK;
    case IR_N_SLEEP:
        CN_TRY(cn_buf_puts(o, "sleep "));
        return put_expr(d, o, n->expr);
    case IR_N_PUBLISH:
        CN_TRY(cn_buf_printf(o, "publish %s = ", n->name));
        return put_expr(d, o, n->expr);
    case IR_N_RAISE:
        /* `raise T(str(m), details) bases [...]`, or `raise e` */
        CN_TRY(cn_buf_puts(o, "raise "));
        if (n->name == NULL) {
            return put_expr(d, o, n->expr);
        }
        CN_TRY(cn_buf_printf(o, "%s(", n->name));
        CN_TRY(put_expr(d, o, n->argexprs[0]));
        CN_TRY(cn_buf_puts(o, ", "));
        CN_TRY(put_expr(d, o, n->argexprs[1]));
        CN_TRY(cn_buf_puts(o, ") bases "));
        return put_expr(d, o, n->argexprs[2]);
    case IR_N_RETURN:
        CN_TRY(cn_buf_puts(o, "return"));
        if (n->expr != IR_NO_EXPR) {
            CN_TRY(cn_buf_putc(o, ' '));
            CN_TRY(put_expr(d, o, n->expr));
        }
        return CN_OK;
    case IR_N_CALL_ENTER:
        CN_TRY(cn_buf_printf(o, "%s(", n->name));
        for (i = 0; i < n->nargs; i++) {
            CN_TRY(cn_buf_printf(o, "%s%s=", i ? ", " : "", n->argnames[i]));
            CN_TRY(put_expr(d, o, n->argexprs[i]));
        }
        return cn_buf_printf(o, ") in f%u", n->callee_frame);
    case IR_N_CALL_EXIT:
        CN_TRY(put_targets(o, n));
        return cn_buf_printf(o, "%s() from f%u", n->name, n->callee_frame);
    default:
        return CN_OK;
    }
}

cn_err
ir_dag_text(const struct ir_dag *d, struct cn_buf *o)
{
    uint32_t i, k;

    CN_TRY(cn_buf_printf(o, "dag %s format=%d nodes=%u edges=%u frames=%u\n", d->entry_func,
                         IR_DAG_FORMAT_VERSION, d->nnodes, d->nedges, d->nframes));
    for (i = 0; i < d->nframes; i++) {
        const struct ir_frame *f = &d->frames[i];
        CN_TRY(cn_buf_printf(o, "frame f%u %s", i, f->func));
        if (f->parent != IR_NO_NODE) {
            CN_TRY(cn_buf_printf(o, " parent=f%u call=n%u", f->parent, f->call_node));
        }
        CN_TRY(cn_buf_putc(o, '\n'));
    }
    for (i = 0; i < d->nnodes; i++) {
        const struct ir_node *n = &d->nodes[i];
        CN_TRY(cn_buf_printf(o, "n%u %s f%u %u:%u", i, ir_node_kind_name(n->kind), n->frame,
                             n->line, n->col));
        if (n->try_depth > 0) {
            CN_TRY(cn_buf_printf(o, " try=%u", n->try_depth));
        }
        if (n->loop_depth > 0) {
            CN_TRY(cn_buf_printf(o, " loop=%u", n->loop_depth));
        }
        if (n->exc != IR_NO_NODE) {
            CN_TRY(cn_buf_printf(o, " exc=n%u", n->exc));
        }
        if (n->link != IR_NO_NODE) {
            CN_TRY(cn_buf_printf(o, " link=n%u", n->link));
        }
        {
            size_t mark = o->len;
            CN_TRY(cn_buf_puts(o, " | "));
            CN_TRY(put_detail(d, o, n));
            if (o->len == mark + 3) {
                o->len = mark; /* no detail: no separator */
                o->data[mark] = '\0';
            }
        }
        CN_TRY(cn_buf_putc(o, '\n'));
        for (k = 0; k < n->nedges; k++) {
            const struct ir_edge *e = &d->edges[n->first_edge + k];
            CN_TRY(cn_buf_printf(o, "    -> n%u %s", e->to, ir_edge_kind_name(e->kind)));
            if (e->kind == IR_E_GUARD) {
                CN_TRY(cn_buf_putc(o, ' '));
                CN_TRY(put_expr(d, o, e->expr));
            } else if (e->kind == IR_E_HANDLER || e->kind == IR_E_FORK) {
                CN_TRY(cn_buf_printf(o, " #%u", e->index));
            }
            CN_TRY(cn_buf_putc(o, '\n'));
        }
    }
    return CN_OK;
}

/* Escapes text for a double-quoted DOT string. */
static cn_err
put_dot_str(struct cn_buf *o, const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"' || c == '\\') {
            CN_TRY(cn_buf_putc(o, '\\'));
            CN_TRY(cn_buf_putc(o, c));
        } else if (c == '\n') {
            CN_TRY(cn_buf_puts(o, "\\n"));
        } else {
            CN_TRY(cn_buf_putc(o, c));
        }
    }
    return CN_OK;
}

static const char *
dot_shape(const struct ir_node *n)
{
    switch ((enum ir_node_kind) n->kind) {
    case IR_N_ENTRY:
    case IR_N_OUTPUT:
        return "oval";
    case IR_N_ACTION:
        /* an action, a wait for the outside world, a signal sent out, a child workflow */
        return n->call == IR_CALL_ACTION  ? "box3d"
               : ir_call_is_wait(n->call) ? "cds"
               : ir_call_is_send(n->call) ? "rarrow"
                                          : "component";
    case IR_N_BRANCH:
    case IR_N_LOOP_COND:
    case IR_N_EXCEPT:
        return "diamond";
    case IR_N_JOIN:
    case IR_N_LOOP_EXIT:
        return "circle";
    case IR_N_SPREAD:
    case IR_N_PARALLEL:
    case IR_N_AGGREGATE:
        return "trapezium";
    default:
        return "box";
    }
}

cn_err
ir_dag_dot(const struct ir_dag *d, struct cn_buf *o)
{
    struct cn_buf label = CN_BUF_INIT;
    uint32_t i, k;
    cn_err rv = CN_OK;

    CN_TRY(cn_buf_puts(o, "digraph \""));
    CN_TRY(put_dot_str(o, d->entry_func, strlen(d->entry_func)));
    CN_TRY(cn_buf_puts(o, "\" {\n  node [fontname=\"monospace\", fontsize=10];\n"
                          "  edge [fontname=\"monospace\", fontsize=9];\n"));
    for (i = 0; i < d->nnodes && rv == CN_OK; i++) {
        const struct ir_node *n = &d->nodes[i];
        cn_buf_clear(&label);
        rv = cn_buf_printf(&label, "n%u %s\n", i, ir_node_kind_name(n->kind));
        if (rv == CN_OK) {
            rv = put_detail(d, &label, n);
        }
        if (rv == CN_OK) {
            rv = cn_buf_printf(o, "  n%u [shape=%s, label=\"", i, dot_shape(n));
        }
        if (rv == CN_OK) {
            rv = put_dot_str(o, label.data, label.len);
        }
        if (rv == CN_OK) {
            rv = cn_buf_puts(o, "\"];\n");
        }
    }
    cn_buf_fini(&label);
    CN_TRY(rv);
    for (i = 0; i < d->nnodes; i++) {
        const struct ir_node *n = &d->nodes[i];
        for (k = 0; k < n->nedges; k++) {
            const struct ir_edge *e = &d->edges[n->first_edge + k];
            CN_TRY(cn_buf_printf(o, "  n%u -> n%u", e->from, e->to));
            if (e->kind == IR_E_BACK) {
                CN_TRY(
                    cn_buf_puts(o, " [style=bold, color=blue, label=\"back\", constraint=false]"));
            } else if (e->kind == IR_E_GUARD) {
                struct cn_buf g = CN_BUF_INIT;
                rv = put_expr(d, &g, e->expr);
                if (rv == CN_OK) {
                    rv = cn_buf_puts(o, " [label=\"");
                }
                if (rv == CN_OK) {
                    rv = put_dot_str(o, g.data ? g.data : "", g.len);
                }
                cn_buf_fini(&g);
                CN_TRY(rv);
                CN_TRY(cn_buf_puts(o, "\"]"));
            } else if (e->kind != IR_E_NEXT) {
                CN_TRY(cn_buf_printf(o, " [label=\"%s", ir_edge_kind_name(e->kind)));
                if (e->kind == IR_E_HANDLER || e->kind == IR_E_FORK) {
                    CN_TRY(cn_buf_printf(o, " #%u", e->index));
                }
                CN_TRY(cn_buf_puts(o, "\"]"));
            }
            CN_TRY(cn_buf_puts(o, ";\n"));
        }
        if (n->exc != IR_NO_NODE) {
            CN_TRY(cn_buf_printf(o, "  n%u -> n%u [style=dashed, color=red, label=\"exc\"];\n", i,
                                 n->exc));
        }
    }
    return cn_buf_puts(o, "}\n");
}

cn_err
ir_dag_summary(const struct ir_dag *d, struct cn_buf *o)
{
    uint32_t counts[IR_N_COUNT_] = {0}, i, nexc = 0;
    bool first = true;

    for (i = 0; i < d->nnodes; i++) {
        counts[d->nodes[i].kind]++;
        nexc += d->nodes[i].exc != IR_NO_NODE;
    }
    CN_TRY(cn_buf_printf(o, "%s: %u nodes, %u edges (+%u exception edges), %u frame%s\n",
                         d->entry_func, d->nnodes, d->nedges, nexc, d->nframes,
                         d->nframes == 1 ? "" : "s"));
    CN_TRY(cn_buf_puts(o, "  kinds:"));
    for (i = 0; i < IR_N_COUNT_; i++) {
        if (counts[i] > 0) {
            CN_TRY(cn_buf_printf(o, "%s %s=%u", first ? "" : ",", ir_node_kind_name(i), counts[i]));
            first = false;
        }
    }
    CN_TRY(cn_buf_puts(o, "\n  actions:"));
    first = true;
    for (i = 0; i < d->nnodes; i++) {
        if (d->nodes[i].kind == IR_N_ACTION && d->nodes[i].call == IR_CALL_ACTION) {
            CN_TRY(cn_buf_printf(o, "%s @%s", first ? "" : ",", d->nodes[i].name));
            first = false;
        }
    }
    if (first) {
        CN_TRY(cn_buf_puts(o, " (none)"));
    }
    /* A line of its own, and only when there are children: summaries of workflows without
     * them read as before. */
    first = true;
    for (i = 0; i < d->nnodes; i++) {
        const struct ir_node *n = &d->nodes[i];
        if (n->kind == IR_N_ACTION && ir_call_is_child(n->call)) {
            CN_TRY(cn_buf_printf(o, "%s %s %s", first ? "\n  child workflows:" : ",",
                                 call_words[n->call], n->name));
            first = false;
        }
    }
    first = true;
    for (i = 0; i < d->nnodes; i++) {
        const struct ir_node *n = &d->nodes[i];
        if (n->kind == IR_N_ACTION && ir_call_is_wait(n->call)) {
            CN_TRY(cn_buf_printf(o, "%s %s %s", first ? "\n  waits:" : ",", call_words[n->call],
                                 n->name));
            first = false;
        }
    }
    first = true;
    for (i = 0; i < d->nnodes; i++) {
        const struct ir_node *n = &d->nodes[i];
        if (n->kind == IR_N_ACTION && ir_call_is_send(n->call)) {
            CN_TRY(cn_buf_printf(o, "%s signal %s", first ? "\n  sends:" : ",", n->name));
            first = false;
        }
    }
    return cn_buf_putc(o, '\n');
}
