/* SPDX-License-Identifier: MIT */
/* Compiler tests: golden DAG text for every example, deterministic ids, the msgpack codec
 * (round trips, corrupt input), DAG shapes of each construct, and the compile-time checks of
 * docs/language.md with exact positions. Set CAIRN_UPDATE_GOLDEN=1 to rewrite tests/golden/ after
 * an intended change (then review the diff). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "tests/support/compile_util.h"
#include "tests/support/leak.h"
#include "tests/unit/ir/src_util.h"

TestSuite(ir_compile, .fini = t_leak_check, .timeout = 60);

/* The examples, then sources kept next to their golden text (tests/golden/NAME.cairn) for what
 * the examples do not show. */
static const char *const examples[] = {"cleanup", "hello",    "orders", "poll",   "report",
                                       "welcome", "children", "waits",  "raises", "finally"};
#define NEXAMPLES    (sizeof(examples) / sizeof(examples[0]))
#define NGOLDEN_ONLY 4 /* the last ones live in tests/golden/ */

/* Compiles src, which must compile. */
static struct t_compiled
compile_ok(const char *src)
{
    struct t_compiled c = t_compile(src);

    cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
    return c;
}

static char *
example_source(const char *name)
{
    char rel[128];
    char *src;
    size_t i;

    (void) snprintf(rel, sizeof(rel), "examples/%s.cairn", name);
    for (i = NEXAMPLES - NGOLDEN_ONLY; i < NEXAMPLES; i++) {
        if (strcmp(name, examples[i]) == 0) {
            (void) snprintf(rel, sizeof(rel), "tests/golden/%s.cairn", name);
        }
    }
    src = t_read_source_file(rel, NULL);
    cr_assert_not_null(src, "cannot read %s (is CAIRN_SOURCE_ROOT set?)", rel);
    return src;
}

Test(ir_compile, examples_match_golden_dag_text)
{
    size_t i;

    for (i = 0; i < NEXAMPLES; i++) {
        char rel[128], *src = example_source(examples[i]), *text = t_dag_text(src), *golden;
        (void) snprintf(rel, sizeof(rel), "tests/golden/%s.dag", examples[i]);
        if (getenv("CAIRN_UPDATE_GOLDEN") != NULL) {
            cr_assert_eq(t_write_source_file(rel, text, strlen(text)), 0, "cannot write %s", rel);
        }
        golden = t_read_source_file(rel, NULL);
        cr_assert_not_null(golden, "missing %s (run with CAIRN_UPDATE_GOLDEN=1)", rel);
        cr_expect_str_eq(text, golden, "%s differs from %s:\n%s", examples[i], rel, text);
        free(golden);
        free(text);
        free(src);
    }
}

Test(ir_compile, ids_are_deterministic)
{
    size_t i;

    for (i = 0; i < NEXAMPLES; i++) {
        char *src = example_source(examples[i]);
        struct t_compiled a = t_compile(src), b = t_compile(src);
        struct cn_buf ma = CN_BUF_INIT, mb = CN_BUF_INIT;
        cr_assert_eq(a.rv, CN_OK, "%s", a.errors);
        {
            struct cn_errmsg em = {{0}};
            cr_assert_eq(ir_dag_validate(a.dag, &em), CN_OK, "%s: %s", examples[i], em.text);
        }
        T_OK(ir_dag_encode(a.dag, &ma));
        T_OK(ir_dag_encode(b.dag, &mb));
        cr_assert_eq(ma.len, mb.len);
        cr_assert(memcmp(ma.data, mb.data, ma.len) == 0, "%s compiled differently", examples[i]);
        cn_buf_fini(&ma);
        cn_buf_fini(&mb);
        t_compiled_free(&a);
        t_compiled_free(&b);
        free(src);
    }
}

/* Every form of child workflow call; `f` is both a helper and the registered workflow started on
 * line 8 (which must not inline the helper). */
static const char child_src[] =
    "fn f(input: [v]):\n"
    "    return v\n"
    "fn main(input: [xs, o]):\n"
    "    try:\n"
    "        r = run billing.refund(order=o, n=1) [E -> retry: 3] [timeout: 10m] [version: "
    "\"v2\"]\n"
    "    except E:\n"
    "        r = 0\n"
    "    id = start f(v=o)\n"
    "    ys = spread xs:x -> run each(v=x) [retry: 2] [fail_fast]\n"
    "    ids = spread xs:x -> start each(v=x) [version: \"v1\"]\n"
    "    a, b = parallel:\n"
    "        run g() [timeout: 30s]\n"
    "        @m.h()\n"
    "    run fire(k=id)\n"
    "    return [r, ys, ids, a, b]\n";

/* Encodes, decodes and encodes again: the same bytes, the same text. */
static void
expect_round_trip(const char *what, const char *src)
{
    struct t_compiled a = t_compile(src);
    struct cn_buf m1 = CN_BUF_INIT, m2 = CN_BUF_INIT, t1 = CN_BUF_INIT, t2 = CN_BUF_INIT;
    struct ir_dag *back = NULL;
    struct cn_errmsg em = {{0}};

    cr_assert_eq(a.rv, CN_OK, "%s: %s", what, a.errors);
    T_OK(ir_dag_encode(a.dag, &m1));
    T_OK(ir_dag_decode(m1.data, m1.len, &back, &em));
    T_OK(ir_dag_encode(back, &m2));
    T_OK(ir_dag_text(a.dag, &t1));
    T_OK(ir_dag_text(back, &t2));
    cr_assert_str_eq(t1.data, t2.data);
    cr_assert(m1.len == m2.len && memcmp(m1.data, m2.data, m1.len) == 0, "%s", what);
    ir_dag_free(back);
    cn_buf_fini(&m1);
    cn_buf_fini(&m2);
    cn_buf_fini(&t1);
    cn_buf_fini(&t2);
    t_compiled_free(&a);
}

Test(ir_compile, msgpack_round_trip_is_exact)
{
    size_t i;

    for (i = 0; i < NEXAMPLES; i++) {
        char *src = example_source(examples[i]);
        expect_round_trip(examples[i], src);
        free(src);
    }
    /* what the examples do not use: retry options, single-target unpacking */
    expect_round_trip("retry options",
                      "fn main():\n"
                      "    r = @m.a() [retry: 3, backoff: 100ms, max_backoff: 2s, multiplier: 1.25]"
                      " [E -> retry: 1, multiplier: 1] [deadline: 90s] [timeout: 5s]\n"
                      "    return r\n");
    expect_round_trip("issue 14 forms", "fn main(input: [xs]) [timeout: 90s]:\n"
                                        "    r = @m.a() [retry: 3, max_elapsed: 10m]\n"
                                        "    ys = spread xs:x -> @m.b(v=x) [fail_fast]\n"
                                        "    a, b = parallel [fail_fast]:\n"
                                        "        @m.c()\n"
                                        "        @m.d()\n"
                                        "    return [r, ys, a, b]\n");
    {
        /* ... and the text form shows them */
        struct t_compiled c = t_compile("fn main(input: [xs]) [timeout: 90s]:\n"
                                        "    r = @m.a() [retry: 3, max_elapsed: 10m]\n"
                                        "    ys = spread xs:x -> @m.b(v=x) [fail_fast]\n"
                                        "    a, = parallel [fail_fast]:\n"
                                        "        @m.c()\n"
                                        "    return [r, ys, a]\n");
        struct cn_buf t = CN_BUF_INIT;
        cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
        cr_assert_eq(c.dag->timeout_ms, 90000);
        T_OK(ir_dag_text(c.dag, &t));
        cr_assert(strstr(t.data, "input: [xs] [timeout: ") != NULL, "%s", t.data);
        cr_assert(strstr(t.data, ", max_elapsed: ") != NULL, "%s", t.data);
        cr_assert(strstr(t.data, "spread xs:x [fail_fast]") != NULL, "%s", t.data);
        cr_assert(strstr(t.data, "| [fail_fast]") != NULL, "%s", t.data);
        cn_buf_fini(&t);
        t_compiled_free(&c);
    }
    expect_round_trip("child workflows", child_src);
    expect_round_trip("unpack one", "fn main(input: [x]):\n"
                                    "    a, = x\n"
                                    "    for b, in [x]:\n"
                                    "        a = b\n"
                                    "    return a\n");
}

/* Flips some bits of one byte of p[0..n), both chosen by the LCG *seed (never a no-op flip). */
static void
flip_a_byte(char *p, size_t n, unsigned *seed)
{
    size_t at;

    *seed = *seed * 1103515245u + 12345u;
    at = (*seed >> 8) % n;
    *seed = *seed * 1103515245u + 12345u;
    p[at] = (char) (p[at] ^ (char) (1 + (*seed >> 16) % 255));
}

Test(ir_compile, decode_rejects_truncated_and_corrupted_input)
{
    char *src = example_source("orders");
    struct t_compiled a = t_compile(src);
    struct cn_buf m = CN_BUF_INIT;
    struct cn_errmsg em;
    struct ir_dag *d = NULL;
    size_t n, i;
    unsigned seed = 12345;
    int accepted = 0;

    cr_assert_eq(a.rv, CN_OK);
    T_OK(ir_dag_encode(a.dag, &m));
    for (n = 0; n < m.len; n++) {
        cr_assert_neq(ir_dag_decode(m.data, n, &d, &em), CN_OK, "prefix of %zu bytes accepted", n);
    }
    /* Random byte flips: each must be rejected or decode into a valid template (a flipped
     * line number is still a valid DAG); never crash or leak. */
    for (i = 0; i < 3000; i++) {
        char *copy = malloc(m.len);
        cr_assert_not_null(copy);
        memcpy(copy, m.data, m.len);
        flip_a_byte(copy, m.len, &seed);
        if (ir_dag_decode(copy, m.len, &d, &em) == CN_OK) {
            struct cn_buf t = CN_BUF_INIT;
            T_OK(ir_dag_text(d, &t)); /* every index in the decoded DAG is usable */
            cn_buf_fini(&t);
            ir_dag_free(d);
            accepted++;
        }
        free(copy);
    }
    cr_assert_lt(accepted, 3000);
    T_ERR(ir_dag_decode("\x81\xa6"
                        "format\x01", /* an older format */
                        9, &d, &em),
          CN_VERSION);
    T_ERR(ir_dag_decode("\x81\xa6"
                        "format\x03", /* the format before child workflow calls */
                        9, &d, &em),
          CN_VERSION);
    cn_buf_fini(&m);
    t_compiled_free(&a);
    free(src);
}

/* Returns the id of the first node of kind k at or after `from`, or IR_NO_NODE. */
static uint32_t
find_node(const struct ir_dag *d, enum ir_node_kind k, uint32_t from)
{
    uint32_t i;

    for (i = from; i < d->nnodes; i++) {
        if (d->nodes[i].kind == k) {
            return i;
        }
    }
    return IR_NO_NODE;
}

/* Kind of the edge from -> to; fails the test when there is none. */
static int
edge_to(const struct ir_dag *d, uint32_t from, uint32_t to)
{
    uint32_t k;

    for (k = 0; k < d->nodes[from].nedges; k++) {
        const struct ir_edge *e = &d->edges[d->nodes[from].first_edge + k];
        if (e->to == to) {
            return e->kind;
        }
    }
    cr_assert_fail("no edge n%u -> n%u", from, to);
    return -1;
}

Test(ir_compile, for_loop_shape)
{
    struct t_compiled c = compile_ok("fn main(input: [xs]):\n    for x in xs:\n        y = x\n"
                                     "    return 1\n");
    const struct ir_dag *d = c.dag;
    uint32_t init, cond, ext, incr, exit_id;

    init = find_node(d, IR_N_LOOP_INIT, 0);
    cond = find_node(d, IR_N_LOOP_COND, 0);
    ext = find_node(d, IR_N_LOOP_EXTRACT, 0);
    incr = find_node(d, IR_N_LOOP_INCR, 0);
    exit_id = find_node(d, IR_N_LOOP_EXIT, 0);
    cr_assert(init < cond && cond < ext && ext < incr && incr < exit_id);
    cr_assert_eq(edge_to(d, init, cond), IR_E_NEXT);
    cr_assert_eq(edge_to(d, cond, ext), IR_E_TRUE);
    cr_assert_eq(edge_to(d, cond, exit_id), IR_E_FALSE);
    cr_assert_eq(edge_to(d, incr, cond), IR_E_BACK);
    cr_assert_eq(d->nodes[ext].loop_depth, 1);
    cr_assert_eq(d->nodes[exit_id].loop_depth, 0);
    cr_assert_eq(d->nodes[ext].ntargets, 1);
    cr_assert_str_eq(d->nodes[ext].targets[0], "x");
    t_compiled_free(&c);
}

Test(ir_compile, while_break_continue_shape)
{
    struct t_compiled c = compile_ok("fn main(input: [n]):\n    while n > 0:\n        n = n - 1\n"
                                     "        if n == 5:\n            break\n        continue\n");
    const struct ir_dag *d = c.dag;
    uint32_t cond, brk, cont, exit_id;

    cond = find_node(d, IR_N_LOOP_COND, 0);
    brk = find_node(d, IR_N_BREAK, 0);
    cont = find_node(d, IR_N_CONTINUE, 0);
    exit_id = find_node(d, IR_N_LOOP_EXIT, 0);
    cr_assert_eq(edge_to(d, brk, exit_id), IR_E_NEXT);
    cr_assert_eq(edge_to(d, cont, cond), IR_E_BACK);
    cr_assert_eq(edge_to(d, cond, exit_id), IR_E_FALSE);
    t_compiled_free(&c);
}

Test(ir_compile, while_with_only_pass_keeps_true_and_back_edges)
{
    struct t_compiled c = compile_ok("fn main(input: [n]):\n    while n:\n        pass\n");
    const struct ir_dag *d = c.dag;
    uint32_t cond, j;

    cond = find_node(d, IR_N_LOOP_COND, 0);
    j = find_node(d, IR_N_JOIN, cond);
    cr_assert_neq(j, IR_NO_NODE);
    cr_assert_eq(edge_to(d, cond, j), IR_E_TRUE);
    cr_assert_eq(edge_to(d, j, cond), IR_E_BACK);
    t_compiled_free(&c);
}

Test(ir_compile, branch_guards_in_order_with_else)
{
    struct t_compiled c = compile_ok("fn main(input: [x]):\n    if x == 1:\n        y = 1\n"
                                     "    elif x == 2:\n        y = 2\n    else:\n        y = 3\n"
                                     "    return y\n");
    const struct ir_dag *d = c.dag;
    const struct ir_node *b;

    b = &d->nodes[find_node(d, IR_N_BRANCH, 0)];
    cr_assert_eq(b->nedges, 3);
    cr_assert_eq(d->edges[b->first_edge].kind, IR_E_GUARD);
    cr_assert_eq(d->edges[b->first_edge + 1].kind, IR_E_GUARD);
    cr_assert_eq(d->edges[b->first_edge + 2].kind, IR_E_ELSE);
    cr_assert_neq(find_node(d, IR_N_JOIN, 0), IR_NO_NODE);
    t_compiled_free(&c);
}

Test(ir_compile, guards_and_handlers_keep_source_order_when_an_arm_is_empty)
{
    struct t_compiled c = compile_ok("fn main(input: [a, b]):\n"
                                     "    if a:\n        pass\n"
                                     "    elif b:\n        y = 2\n"
                                     "    else:\n        y = 3\n"
                                     "    try:\n        z = @m.x()\n"
                                     "    except KeyError:\n        pass\n"
                                     "    except Exception as e:\n        z = 3\n");
    const struct ir_dag *d = c.dag;
    const struct ir_node *b, *x;

    b = &d->nodes[find_node(d, IR_N_BRANCH, 0)];
    cr_assert_eq(b->nedges, 3);
    cr_assert_eq(d->edges[b->first_edge].kind, IR_E_GUARD);
    cr_assert_eq(d->edges[b->first_edge].index, 0); /* `a` is tried first */
    cr_assert_eq(d->edges[b->first_edge + 1].index, 1);
    cr_assert_eq(d->edges[b->first_edge + 2].kind, IR_E_ELSE);
    x = &d->nodes[find_node(d, IR_N_EXCEPT, 0)];
    cr_assert_eq(x->nedges, 2);
    cr_assert_eq(d->edges[x->first_edge].index, 0); /* KeyError before Exception */
    cr_assert_eq(d->edges[x->first_edge + 1].index, 1);
    t_compiled_free(&c);
}

Test(ir_compile, if_without_else_falls_through_to_join)
{
    struct t_compiled c = compile_ok("fn main(input: [x]):\n    y = 0\n    if x:\n        y = 1\n"
                                     "    return y\n");
    const struct ir_dag *d = c.dag;
    uint32_t b, j;

    b = find_node(d, IR_N_BRANCH, 0);
    j = find_node(d, IR_N_JOIN, 0);
    cr_assert_eq(edge_to(d, b, j), IR_E_ELSE);
    t_compiled_free(&c);
}

Test(ir_compile, try_except_edges_handlers_and_nesting)
{
    struct t_compiled c = compile_ok("fn main(input: [x]):\n"
                                     "    try:\n"
                                     "        try:\n"
                                     "            a = @m.inner(v=x)\n"
                                     "        except KeyError as e:\n"
                                     "            a = 1\n"
                                     "        b = @m.outer(v=a)\n"
                                     "    except (ValueError, TypeError):\n"
                                     "        b = 2\n"
                                     "    except:\n"
                                     "        b = 3\n"
                                     "    return b\n");
    const struct ir_dag *d = c.dag;
    uint32_t inner_act, outer_act, inner_exc, outer_exc;
    const struct ir_node *n;

    inner_act = find_node(d, IR_N_ACTION, 0);
    outer_act = find_node(d, IR_N_ACTION, inner_act + 1);
    inner_exc = find_node(d, IR_N_EXCEPT, 0);
    outer_exc = find_node(d, IR_N_EXCEPT, inner_exc + 1);
    cr_assert_eq(d->nodes[inner_act].exc, inner_exc);
    cr_assert_eq(d->nodes[inner_act].try_depth, 2);
    cr_assert_eq(d->nodes[outer_act].exc, outer_exc);
    cr_assert_eq(d->nodes[outer_act].try_depth, 1);
    /* An error no inner handler matches is re-raised to the outer try. */
    cr_assert_eq(d->nodes[inner_exc].exc, outer_exc);
    cr_assert_eq(d->nodes[outer_exc].exc, IR_NO_NODE);
    n = &d->nodes[inner_exc];
    cr_assert_eq(n->nhandlers, 1);
    cr_assert_str_eq(n->handlers[0].types[0], "KeyError");
    cr_assert_str_eq(n->handlers[0].bind, "e");
    n = &d->nodes[outer_exc];
    cr_assert_eq(n->nhandlers, 2);
    cr_assert_eq(n->handlers[0].ntypes, 2);
    cr_assert_eq(n->handlers[1].ntypes, 0);
    cr_assert_eq(n->nedges, 2);
    cr_assert_eq(d->edges[n->first_edge].kind, IR_E_HANDLER);
    cr_assert_eq(d->edges[n->first_edge + 1].index, 1);
    /* Handler bodies run outside their own try. */
    cr_assert_eq(d->nodes[d->edges[n->first_edge].to].exc, IR_NO_NODE);
    t_compiled_free(&c);
}

Test(ir_compile, spread_and_parallel_aggregate_branch_errors)
{
    struct t_compiled c = compile_ok("fn h(input: [v]):\n    w = @m.h(v=v)\n    return w\n"
                                     "fn main(input: [xs]):\n"
                                     "    try:\n"
                                     "        ys = spread xs:x -> @m.each(v=x) [retry: 2]\n"
                                     "        a, b = parallel:\n"
                                     "            @m.one()\n"
                                     "            h(v=1)\n"
                                     "    except:\n"
                                     "        ys = []\n"
                                     "    return ys\n");
    const struct ir_dag *d = c.dag;
    uint32_t sp, each, agg1, par, agg2, hact, exc;

    sp = find_node(d, IR_N_SPREAD, 0);
    each = find_node(d, IR_N_ACTION, sp);
    agg1 = find_node(d, IR_N_AGGREGATE, sp);
    par = find_node(d, IR_N_PARALLEL, 0);
    agg2 = find_node(d, IR_N_AGGREGATE, par);
    exc = find_node(d, IR_N_EXCEPT, 0);
    cr_assert_eq(edge_to(d, sp, each), IR_E_FORK);
    cr_assert_str_eq(d->nodes[sp].name, "x");
    cr_assert_eq(d->nodes[sp].link, agg1);
    cr_assert_eq(d->nodes[each].exc, agg1); /* element errors are collected, not raised */
    cr_assert_eq(d->nodes[agg1].exc, exc);  /* the aggregate raises into the try */
    cr_assert_eq(d->nodes[each].nretries, 1);
    cr_assert_eq(d->nodes[par].nedges, 2);
    cr_assert_eq(d->edges[d->nodes[par].first_edge + 1].index, 1);
    hact = find_node(d, IR_N_ACTION, find_node(d, IR_N_CALL_ENTER, par));
    cr_assert_eq(d->nodes[hact].exc, agg2); /* inside the helper branch too */
    cr_assert_eq(d->nodes[agg2].ntargets, 2);
    t_compiled_free(&c);
}

Test(ir_compile, child_workflow_calls_are_action_nodes)
{
    struct t_compiled c = compile_ok(child_src);
    const struct ir_dag *d = c.dag;
    const struct ir_node *n;
    struct cn_errmsg em = {{0}};
    uint32_t run1, start1, sp, each, sp2, each2, par, g, h, fire, exc, agg;

    T_OK(ir_dag_validate(d, &em));
    cr_assert_eq(d->nframes, 1); /* `start f(...)` did not inline the helper f */
    cr_assert_eq(find_node(d, IR_N_CALL_ENTER, 0), IR_NO_NODE);
    run1 = find_node(d, IR_N_ACTION, 0);
    exc = find_node(d, IR_N_EXCEPT, 0);
    n = &d->nodes[run1];
    cr_assert_eq(n->call, IR_CALL_RUN);
    cr_assert_str_eq(n->name, "billing.refund");
    cr_assert_str_eq(n->version, "v2");
    cr_assert_eq(n->line, 5);
    cr_assert_eq(n->col, 13); /* the `run` keyword, for cairnctl register to point at */
    cr_assert_eq(n->nargs, 2);
    cr_assert_str_eq(n->argnames[0], "order");
    cr_assert_str_eq(n->argnames[1], "n");
    cr_assert_eq(n->nretries, 1);
    cr_assert_eq(n->retries[0].retries, 3);
    cr_assert_str_eq(n->retries[0].types[0], "E");
    cr_assert_eq(n->timeout_ms, 600000);
    cr_assert_eq(n->deadline_ms, 0);
    cr_assert_eq(n->ntargets, 1);
    cr_assert_str_eq(n->targets[0], "r");
    cr_assert_eq(n->exc, exc); /* errors go to the try's handlers, as an action's do */
    cr_assert_eq(n->try_depth, 1);
    start1 = find_node(d, IR_N_ACTION, run1 + 1);
    n = &d->nodes[start1];
    cr_assert_eq(n->call, IR_CALL_START);
    cr_assert_str_eq(n->name, "f");
    cr_assert_null(n->version);
    cr_assert_eq(n->nretries, 0);
    cr_assert_eq(n->timeout_ms, 0);
    cr_assert_eq(n->line, 8);
    cr_assert_eq(n->col, 10);
    cr_assert_str_eq(n->targets[0], "id");
    sp = find_node(d, IR_N_SPREAD, 0);
    each = find_node(d, IR_N_ACTION, sp);
    agg = find_node(d, IR_N_AGGREGATE, sp);
    cr_assert_eq(edge_to(d, sp, each), IR_E_FORK);
    cr_assert_eq(d->nodes[each].call, IR_CALL_RUN);
    cr_assert_str_eq(d->nodes[each].name, "each");
    cr_assert_eq(d->nodes[each].nretries, 1);
    cr_assert_eq(d->nodes[each].exc, agg);
    cr_assert_eq(d->nodes[each].col, 25);
    cr_assert(d->nodes[sp].fail_fast && d->nodes[agg].fail_fast);
    sp2 = find_node(d, IR_N_SPREAD, sp + 1);
    each2 = find_node(d, IR_N_ACTION, sp2);
    cr_assert_eq(edge_to(d, sp2, each2), IR_E_FORK);
    cr_assert_eq(d->nodes[each2].call, IR_CALL_START);
    cr_assert_str_eq(d->nodes[each2].version, "v1");
    par = find_node(d, IR_N_PARALLEL, 0);
    g = find_node(d, IR_N_ACTION, par);
    h = find_node(d, IR_N_ACTION, g + 1);
    cr_assert_eq(edge_to(d, par, g), IR_E_FORK);
    cr_assert_eq(edge_to(d, par, h), IR_E_FORK);
    cr_assert_eq(d->nodes[g].call, IR_CALL_RUN);
    cr_assert_eq(d->nodes[g].timeout_ms, 30000);
    cr_assert_eq(d->nodes[g].line, 12);
    cr_assert_eq(d->nodes[g].col, 9);
    cr_assert_eq(d->nodes[h].call, IR_CALL_ACTION);
    cr_assert_str_eq(d->nodes[h].name, "m.h");
    fire = find_node(d, IR_N_ACTION, h + 1);
    cr_assert_eq(d->nodes[fire].call, IR_CALL_RUN);
    cr_assert_eq(d->nodes[fire].ntargets, 0);
    cr_assert_eq(d->nodes[fire].col, 5);
    {
        /* DOT draws children in a shape of their own; the summary lists them apart */
        struct cn_buf dot = CN_BUF_INIT, sum = CN_BUF_INIT;
        T_OK(ir_dag_dot(d, &dot));
        T_OK(ir_dag_summary(d, &sum));
        cr_assert(strstr(dot.data,
                         "shape=component, label=\"n2 action\\nr = run billing.refund(") != NULL,
                  "%s", dot.data);
        cr_assert(strstr(sum.data,
                         "  actions: @m.h\n  child workflows: run billing.refund, start f, "
                         "run each, start each, run g, run fire\n") != NULL,
                  "%s", sum.data);
        cn_buf_fini(&dot);
        cn_buf_fini(&sum);
    }
    t_compiled_free(&c);
}

/* The runner checks a child's inputs against the entry function's parameters, which the ENTRY
 * node carries as its targets (helpers' parameters are not there). */
Test(ir_compile, entry_node_targets_are_the_entry_functions_inputs)
{
    struct t_compiled c = compile_ok("fn h(input: [z]):\n    return z\n"
                                     "fn main(input: [order, items]):\n    y = h(order)\n"
                                     "    return y\n");
    const struct ir_node *e;

    e = &c.dag->nodes[c.dag->entry];
    cr_assert_eq(e->kind, IR_N_ENTRY);
    cr_assert_eq(e->frame, 0);
    cr_assert_eq(e->ntargets, 2);
    cr_assert_str_eq(e->targets[0], "order");
    cr_assert_str_eq(e->targets[1], "items");
    t_compiled_free(&c);
}

/* One broken promise per case, each on a freshly compiled template; ir_dag_decode must refuse
 * the same template once encoded. */
Test(ir_compile, validate_refuses_misplaced_child_calls)
{
    static const char *const src = "fn main(input: [o]):\n"
                                   "    r = run wf(o=o) [retry: 1]\n"
                                   "    id = start wf2(o=o)\n"
                                   "    x = @m.a()\n"
                                   "    return [r, id, x]\n";
    int k;

    for (k = 0; k < 11; k++) {
        struct t_compiled c = t_compile(src);
        struct ir_dag *d = c.dag, *back = NULL;
        struct ir_node *run, *start, *act;
        struct cn_errmsg em = {{0}};
        struct cn_buf m = CN_BUF_INIT;
        cr_assert_eq(c.rv, CN_OK, "%s", c.errors);
        run = &d->nodes[find_node(d, IR_N_ACTION, 0)];
        start = run + 1;
        act = run + 2;
        cr_assert(run->call == IR_CALL_RUN && start->call == IR_CALL_START &&
                  act->call == IR_CALL_ACTION);
        switch (k) {
        case 0: /* a call on a node that is not an action */
            d->nodes[d->entry].call = IR_CALL_RUN;
            break;
        case 1:
            d->nodes[d->output].call = IR_CALL_START;
            break;
        case 2: /* an unknown call kind */
            act->call = IR_CALL_COUNT_;
            break;
        case 3: /* a version on a plain action */
            act->version = "v1";
            break;
        case 4: /* a version the registry could not hold */
            run->version = "v 1";
            break;
        case 5:
            run->version = "";
            break;
        case 6: /* a name the language cannot call */
            run->name = "billing-refund";
            break;
        case 7:
            start->name = "1wf";
            break;
        case 8: /* policies nothing could apply */
            start->timeout_ms = 1000;
            break;
        case 9:
            start->retries = run->retries;
            start->nretries = run->nretries;
            break;
        case 10:
            run->deadline_ms = 1000;
            break;
        default:
            break;
        }
        T_ERR(ir_dag_validate(d, &em), CN_RANGE);
        if (k != 2) { /* the decoder already refuses an unknown call kind as a parse error */
            T_OK(ir_dag_encode(d, &m));
            T_ERR(ir_dag_decode(m.data, m.len, &back, &em), CN_RANGE);
        }
        cn_buf_fini(&m);
        t_compiled_free(&c);
    }
}

Test(ir_compile, helpers_inline_into_their_own_frames)
{
    struct t_compiled c = compile_ok("fn add(input: [a, b]):\n    return a + b\n"
                                     "fn main(input: [x]):\n    y = add(x, b=1)\n"
                                     "    z = add(a=y, b=y)\n    return add(z, 0)\n");
    const struct ir_dag *d = c.dag;
    uint32_t e1, x1, e2;

    cr_assert_eq(d->nframes, 4);
    e1 = find_node(d, IR_N_CALL_ENTER, 0);
    x1 = find_node(d, IR_N_CALL_EXIT, 0);
    e2 = find_node(d, IR_N_CALL_ENTER, e1 + 1);
    cr_assert_eq(d->nodes[e1].link, x1);
    cr_assert_eq(d->nodes[e1].callee_frame, 1);
    cr_assert_eq(d->nodes[e2].callee_frame, 2);
    cr_assert_eq(d->frames[1].parent, 0);
    cr_assert_eq(d->frames[1].call_node, e1);
    cr_assert_str_eq(d->frames[1].func, "add");
    cr_assert_eq(d->nodes[e1].nargs, 2);
    cr_assert_str_eq(d->nodes[e1].argnames[1], "b");
    cr_assert_eq(d->nodes[e1 + 1].frame, 1); /* the helper's return runs in its frame */
    cr_assert_eq(d->nodes[x1].frame, 0);
    cr_assert_str_eq(d->nodes[x1].targets[0], "y");
    t_compiled_free(&c);
}

Test(ir_compile, unreachable_statements_are_not_emitted)
{
    struct t_compiled c = compile_ok("fn main():\n    return 1\n    x = @m.never()\n");

    cr_assert_eq(find_node(c.dag, IR_N_ACTION, 0), IR_NO_NODE);
    t_compiled_free(&c);
}

struct check_case {
    const char *src;
    uint32_t line, col;
    const char *needle;
};

static const struct check_case check_errors[] = {
    {"fn helper() [timeout: 5s]:\n    return 1\nfn main():\n    return helper()\n", 1, 13,
     "only the entry function takes it (helper is a helper)"},
    {"fn main(input: [x]):\n    if x:\n        y = 1\n    return y\n", 4, 12,
     "variable 'y' may be used before it is assigned"},
    {"fn main(input: [xs]):\n    for v in xs:\n        y = v\n    return y\n", 4, 12,
     "variable 'y' may be used before it is assigned"},
    {"fn main(input: [xs]):\n    for v in xs:\n        pass\n    return v\n", 4, 12,
     "variable 'v' may be used before it is assigned"},
    {"fn main():\n    try:\n        y = @m.a()\n    except:\n        pass\n    return y\n", 6, 12,
     "variable 'y' may be used before it is assigned"},
    {"fn main():\n    y = x\n", 2, 9, "name 'x' is not defined"},
    {"fn main():\n    y = foo(1)\n", 2, 9, "unknown function 'foo'"},
    {"fn main():\n    y = run(order=1)\n", 2, 9,
     "unknown function 'run'; to call a child workflow, write its name after 'run' (run "
     "billing.refund(order=o))"},
    {"fn main(input: [xs]):\n    ids = spread xs:x -> start w(v=y)\n", 2, 36,
     "name 'y' is not defined"},
    {"fn main():\n    x = run w(v=x)\n", 2, 17, "variable 'x' may be used before it is assigned"},
    {"fn main():\n    y = len(1, 2)\n", 2, 9, "len() takes exactly 1 argument (2 given)"},
    {"fn main():\n    y = range()\n", 2, 9, "range() takes 1 to 3 arguments (0 given)"},
    {"fn main():\n    y = min()\n", 2, 9, "min() takes at least 1 argument (0 given)"},
    {"fn main():\n    y = len(x=1)\n", 2, 9, "builtin 'len' takes no keyword arguments"},
    {"fn h(input: [a]):\n    return a\nfn main():\n    y = h(1, 2)\n", 4, 9,
     "helper 'h' takes 1 argument (2 given)"},
    {"fn h(input: [a]):\n    return a\nfn main():\n    y = h(b=1)\n", 4, 9,
     "helper 'h' has no input named 'b'"},
    {"fn h(input: [a, b]):\n    return a\nfn main():\n    y = h(1)\n", 4, 9,
     "missing argument 'b' in call to helper 'h'"},
    {"fn h(input: [a]):\n    return a\nfn main():\n    y = h(1, a=2)\n", 4, 9,
     "argument 'a' given twice"},
    {"fn h(input: [a]):\n    return a\nfn main():\n    y = h(1) + 1\n", 4, 9,
     "helper 'h' must be called as a statement of its own"},
    {"fn main():\n    break\n", 2, 5, "'break' outside a loop"},
    {"fn main():\n    continue\n", 2, 5, "'continue' outside a loop"},
    {"fn h():\n    break\nfn main(input: [xs]):\n    for x in xs:\n        h()\n", 2, 5,
     "'break' outside a loop"},
    {"fn h(input: [n]):\n    r = h(n)\n    return r\nfn main():\n    x = h(1)\n", 2, 9,
     "recursive call: h -> h"},
    {"fn a(input: [n]):\n    r = b(n)\n    return r\nfn b(input: [n]):\n    return a(n)\n"
     "fn main():\n    x = a(1)\n",
     5, 12, "recursive call: a -> b -> a"},
    {"fn a():\n    pass\nfn b():\n    pass\n", 1, 4, "no entry function"},
    {"fn len(input: [x]):\n    return x\nfn main():\n    pass\n", 1, 4,
     "has the name of a builtin"},
    {"fn h():\n    pass\nfn main():\n    y = h\n", 4, 9, "function 'h' cannot be used as a value"},
    {"fn main():\n    a, b = parallel:\n        @m.x()\n        @m.y()\n        @m.z()\n", 2, 5,
     "parallel block has 3 calls but 2 targets"},
    {"fn main():\n    a = parallel:\n        len(1)\n", 3, 9,
     "only actions and helper functions can run in parallel; 'len' is a builtin"},
    {"fn main(input: [xs]):\n    ys = spread xs:x -> @m.a(v=y)\n", 2, 32,
     "name 'y' is not defined"},
    /* the spread item exists only inside the spread's arguments */
    {"fn main(input: [xs]):\n    ys = spread xs:u -> @m.a(v=u)\n    return u\n", 3, 12,
     "name 'u' is not defined"},
    /* Python deletes an `except ... as e` name when the handler ends */
    {"fn main():\n    try:\n        x = 1\n    except KeyError as x:\n        pass\n"
     "    return x\n",
     6, 12, "variable 'x' may be used before it is assigned"},
    {"fn main():\n    y = {1: 2}\n", 2, 10, "dict keys must be strings, not int"},
    {"fn main():\n    a, b = parallel:\n        @m.x()\n", 2, 5,
     "parallel block has 1 call but 2 targets"},
    /* one target with a trailing comma unpacks too, so it must match the calls */
    {"fn main():\n    p, = parallel:\n        @m.x()\n        @m.y()\n", 2, 5,
     "parallel block has 2 calls but 1 target to unpack into"},
    /* the instance's builtins take no argument, and their names are taken */
    {"fn main():\n    t = now(1)\n", 2, 9, "now"},
    {"fn uuid():\n    pass\nfn main():\n    pass\n", 1, 4,
     "function 'uuid' has the name of a builtin"},
    /* finally */
    {"fn main():\n    try:\n        pass\n    finally:\n        return 1\n", 5, 9,
     "'return' inside a 'finally' block would drop the error it may be running for"},
    {"fn main(input: [xs]):\n    for x in xs:\n        try:\n            pass\n        finally:\n"
     "            continue\n",
     6, 13, "'continue' would leave the 'finally' block"},
    {"fn main():\n    try:\n        y = 1\n    finally:\n        z = y\n", 5, 13,
     "variable 'y' may be used before it is assigned"},
    {"fn main():\n    try:\n        pass\n    return 1\n", 4, 5,
     "expected 'except' or 'finally' after the try block"},
    /* raise and error types */
    {"fn main():\n    raise\n", 2, 5, "a bare raise re-raises the error an except handler caught"},
    {"fn h():\n    raise\nfn main():\n    try:\n        pass\n    except:\n        h()\n", 2, 5,
     "a bare raise re-raises"},
    {"fn main():\n    raise Oops(\"x\")\n", 2, 11, "unknown error type 'Oops'"},
    {"fn main():\n    raise ValueError(\"a\", 1, 2)\n", 2, 11,
     "ValueError(...) takes a message and, optionally, details"},
    {"fn main():\n    raise ValueError(msg=\"a\")\n", 2, 11, "takes a message and"},
    {"fn main():\n    e = ValueError(\"x\")\n", 2, 9,
     "ValueError(...) makes an error only in a raise statement"},
    {"class ValueError(Exception): pass\nfn main():\n    pass\n", 1, 7,
     "ValueError is a built-in error type"},
    {"class E(Exception): pass\nclass E(Exception): pass\nfn main():\n    pass\n", 2, 7,
     "error type 'E' is already declared at line 1"},
    {"class E(Nope): pass\nfn main():\n    pass\n", 1, 9, "unknown base 'Nope'"},
    {"class A(B): pass\nclass B(A): pass\nfn main():\n    pass\n", 1, 7,
     "error type 'A' is among its own bases"},
    {"class main(Exception): pass\nfn main():\n    pass\n", 1, 7,
     "'main' is both a function and an error type"},
    /* nothing after a raise runs: a name assigned only there is not assigned after */
    {"fn main(input: [n]):\n    if n:\n        raise ValueError(\"n\")\n        y = 1\n    else:\n"
     "        pass\n    return y\n",
     7, 12, "variable 'y' may be used before it is assigned"},
};

Test(ir_compile, compile_time_checks_with_positions)
{
    size_t i, k;

    for (i = 0; i < sizeof(check_errors) / sizeof(check_errors[0]); i++) {
        const struct check_case *cc = &check_errors[i];
        struct t_compiled c = t_compile(cc->src);
        struct ir_diags d;
        bool found = false;
        cr_assert_eq(c.rv, CN_COMPILE, "accepted:\n%s", cc->src);
        /* Parse the formatted errors back: "test.cairn:L:C: error: msg". */
        for (k = 0; c.errors[k] != '\0';) {
            unsigned l, col;
            int used = 0;
            if (sscanf(c.errors + k, "test.cairn:%u:%u: error: %n", &l, &col, &used) == 2 &&
                used > 0) {
                const char *msg = c.errors + k + used, *nl = strchr(msg, '\n');
                size_t mlen = nl ? (size_t) (nl - msg) : strlen(msg);
                char *m = strndup(msg, mlen);
                if (strstr(m, cc->needle) != NULL) {
                    found = true;
                    cr_expect_eq(l, cc->line, "'%s': line %u, want %u", cc->needle, l, cc->line);
                    cr_expect_eq(col, cc->col, "'%s': col %u, want %u", cc->needle, col, cc->col);
                }
                free(m);
            }
            while (c.errors[k] != '\0' && c.errors[k] != '\n') {
                k++;
            }
            if (c.errors[k] == '\n') {
                k++;
            }
        }
        cr_expect(found, "no error containing '%s' for:\n%s\ngot:\n%s", cc->needle, cc->src,
                  c.errors);
        (void) d;
        t_compiled_free(&c);
    }
}

Test(ir_compile, valid_programs_compile)
{
    static const char *const ok[] = {
        /* while True ends only through break, so y is assigned after it */
        "fn main():\n    while True:\n        y = 1\n        break\n    return y\n",
        /* assigned on every branch */
        "fn main(input: [x]):\n    if x:\n        y = 1\n    else:\n        y = 2\n    return y\n",
        /* a branch that returns does not need to assign */
        "fn main(input: [x]):\n    if x:\n        return 0\n    else:\n        y = 2\n    return "
        "y\n",
        /* try and every handler assign */
        "fn main():\n    try:\n        y = @m.a()\n    except E as e:\n        y = e\n    return "
        "y\n",
        /* helpers called from helpers, keyword and positional */
        ("fn a(input: [x]):\n    return x\nfn b(input: [x, y]):\n    r = a(x=y)\n    return r\n"
         "fn main():\n    z = b(1, y=2)\n    return z\n"),
        /* a single function need not be called main */
        "fn only(input: [x]):\n    return x\n",
        /* unpacking, expression statements, pass, sleep with an expression */
        "fn main(input: [p]):\n    a, b = p\n    len(p)\n    pass\n    sleep a * 2\n",
        /* while 1 is as final as while True */
        "fn main():\n    while 1:\n        x = 1\n        break\n    return x\n",
        /* keywords are fine inside dotted action names */
        "fn main():\n    x = @db.input(v=1)\n    @queue.sleep(s=1)\n",
        /* run and start are names unless a workflow name follows; a helper may be called run,
         * and `run y(...)` starts the workflow y even where y is a variable */
        ("fn run(input: [x]):\n    return x\nfn main(input: [start]):\n    y = run(start)\n"
         "    z = run y(v=start)\n    start = len([z]) + start\n    return [y, z, start]\n"),
        /* the workflow's own name: recursion across instances is the runner's to bound */
        "fn main(input: [n]):\n    if n > 0:\n        r = run main(n=n - 1)\n        return r\n"
        "    return 0\n",
    };
    size_t i;

    for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct t_compiled c = t_compile(ok[i]);
        cr_expect_eq(c.rv, CN_OK, "rejected:\n%s\n%s", ok[i], c.errors);
        t_compiled_free(&c);
    }
}

Test(ir_compile, helper_diamond_is_refused_at_the_call_before_building)
{
    struct cn_buf src = CN_BUF_INIT;
    struct t_compiled c;
    int i;

    /* main calls h0; each h_i calls h_{i+1} twice: 2^30 copies of the leaf. */
    t_puts(&src, "fn main(input: [a]):\n    x = h0(a)\n    return x\n");
    for (i = 0; i < 30; i++) {
        t_printf(&src, "fn h%d(input: [b]):\n    y = h%d(b)\n    z = h%d(y)\n    return z\n", i,
                 i + 1, i + 1);
    }
    t_puts(&src, "fn h30(input: [b]):\n    return b + 1\n");
    c = t_compile(src.data);
    cr_assert_eq(c.rv, CN_TOOBIG, "%s", cn_errname(c.rv));
    cr_assert(strstr(c.errors, "test.cairn:2:9: error: workflow is too large: inlining the "
                               "helpers makes at least") != NULL,
              "%s", c.errors);
    t_compiled_free(&c);
    cn_buf_fini(&src);
}

/* ir_compile_source_limited: the source's size is refused before parsing (nothing of it is
 * quoted), the graph's at the limit given, and a source within both compiles the same graph as
 * under the ceilings. */
Test(ir_compile, limits_refuse_a_large_source_and_a_large_graph)
{
    const char *src = "fn main(input: [a]):\n    x = a + 1\n    y = x + 2\n    return y\n";
    struct ir_compile_limits small_src = {20, IR_COMPILE_MAX_NODES};
    struct ir_compile_limits few_nodes = {IR_COMPILE_MAX_SOURCE_BYTES, 3};
    struct ir_compile_limits ok = {strlen(src), 64};
    struct ir_dag *dag = NULL;
    struct ir_diags d;
    struct cn_buf b = CN_BUF_INIT;

    ir_diags_init(&d, "t.cairn", src, strlen(src));
    cr_assert_eq(ir_compile_source_limited(src, strlen(src), &small_src, &d, &dag), CN_TOOBIG);
    cr_assert_null(dag);
    cr_assert_eq(ir_diags_format(&d, &b), CN_OK);
    cr_assert(strstr(b.data, "t.cairn:1:1: error: source is 62 bytes, over the limit of 20 "
                             "bytes") != NULL,
              "%s", b.data);
    cn_buf_fini(&b);
    ir_diags_fini(&d);

    ir_diags_init(&d, "t.cairn", src, strlen(src));
    cr_assert_eq(ir_compile_source_limited(src, strlen(src), &few_nodes, &d, &dag), CN_TOOBIG);
    cr_assert_null(dag);
    cr_assert_eq(ir_diags_format(&d, &b), CN_OK);
    cr_assert(strstr(b.data, "graph nodes (limit 3)") != NULL, "%s", b.data);
    cn_buf_fini(&b);
    ir_diags_fini(&d);

    ir_diags_init(&d, "t.cairn", src, strlen(src));
    cr_assert_eq(ir_compile_source_limited(src, strlen(src), &ok, &d, &dag), CN_OK);
    cr_assert_eq(dag->nnodes, 5);
    ir_dag_free(dag);
    ir_diags_fini(&d);
}
