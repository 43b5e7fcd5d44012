/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the expression evaluator (ir/eval.c, builtins.c, numtext.c, error.c). The
 * bulk is eval_cases.txt: Cairn expressions whose expected results Python 3.11 computed
 * (gen_eval_cases.py), each compiled with the real parser and checker inside
 * `fn main(input: [a, b, c, e])` and evaluated with the same bindings, compared type-exactly
 * (1, 1.0 and True differ; floats bit for bit; error type and message word for word). The
 * C-level tests cover what expressions cannot reach: the error value API, numtext.h called
 * directly, ir_unpack, ir_truthy, ir_iter_items, size and depth limits, unbound names and
 * malformed pools.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/compile.h"
#include "ir/error.h"
#include "ir/eval.h"
#include "ir/numtext.h"
#include "ir/parser.h"
#include "tests/support/compile_util.h"
#include "tests/support/leak.h"
#include "tests/unit/ir/value_util.h"

TestSuite(ir_eval, .fini = t_leak_check, .timeout = 60);

/* ---- allocation failure injection (gcc build only) ----
 * glibc supports replacing malloc: every allocation the evaluator makes comes through these.
 * While t_tracking is set on this thread they count live blocks and fail the t_fail_at-th
 * allocation, so a test can fail each allocation of an evaluation in turn and check that the
 * result is CN_NOMEM with nothing leaked. Under ASan the sanitizer owns malloc: the injection
 * test is skipped there and the wrappers are not compiled. */
#if defined(__SANITIZE_ADDRESS__)
#define T_OOM 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_OOM 0
#endif
#endif
#ifndef T_OOM
#define T_OOM 1
#endif

#if T_OOM
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

static _Thread_local bool t_tracking;
static _Thread_local long t_allocs, t_live, t_fail_at = -1;

/* True when this allocation is the one to fail. */
static bool
t_alloc_fails(void)
{
    if (!t_tracking) {
        return false;
    }
    return t_allocs++ == t_fail_at;
}

void *
malloc(size_t n)
{
    void *p = t_alloc_fails() ? NULL : __libc_malloc(n);

    t_live += t_tracking && p != NULL;
    return p;
}

void *
calloc(size_t n, size_t size)
{
    void *p = t_alloc_fails() ? NULL : __libc_calloc(n, size);

    t_live += t_tracking && p != NULL;
    return p;
}

void *
realloc(void *old, size_t n)
{
    void *p;

    if (old == NULL) {
        return malloc(n);
    }
    p = t_alloc_fails() ? NULL : __libc_realloc(old, n);
    return p;
}

void
free(void *p)
{
    t_live -= t_tracking && p != NULL;
    __libc_free(p);
}
#endif

/* ---- environment ---- */

#define T_MAXVARS 8

struct t_env {
    const char *names[T_MAXVARS];
    struct ir_val vals[T_MAXVARS];
    size_t n;
};

static const struct ir_val *
t_lookup(void *ctx, const char *name)
{
    struct t_env *env = ctx;
    size_t i;

    for (i = 0; i < env->n; i++) {
        if (strcmp(env->names[i], name) == 0) {
            return &env->vals[i];
        }
    }
    return NULL;
}

/* Takes ownership of v. */
static void
t_env_bind(struct t_env *env, const char *name, struct ir_val v)
{
    cr_assert(env->n < T_MAXVARS);
    env->names[env->n] = name;
    env->vals[env->n] = v;
    env->n++;
}

/* The bindings gen_eval_cases.py uses (its env()). */
static void
t_env_init(struct t_env *env)
{
    struct ir_val e;

    memset(env, 0, sizeof(*env));
    t_env_bind(env, "a", t_json("{\"k\": \"v\", \"n\": 2, \"l\": [1, 2, 3], \"d\": {\"x\": 1.5}}"));
    t_env_bind(env, "b", t_json("[3, 1, 2]"));
    t_env_bind(env, "c", t_str("h\xc3\xa9llo"));
    T_ERR(ir_raise(&e, "KeyError", "'k'"), CN_RAISED);
    t_env_bind(env, "e", e);
}

static void
t_env_fini(struct t_env *env)
{
    size_t i;

    for (i = 0; i < env->n; i++) {
        ir_val_release(env->vals[i]);
    }
    env->n = 0;
}

/* ---- evaluating source expressions ---- */

/* Compiles `x = <expr>` in a main with inputs a, b, c, d, e, f and evaluates the expression.
 * Returns ir_eval's code (or CN_COMPILE with the diagnostics in *out as a string). */
static cn_err
t_eval(const char *expr, struct t_env *env, struct ir_val *out)
{
    static const char head[] = "fn main(input: [a, b, c, d, e, f]):\n    x = ";
    struct ir_eval_env ee = {t_lookup, env, NULL};
    struct ir_program *prog = NULL;
    struct cn_buf src = CN_BUF_INIT, msg = CN_BUF_INIT;
    struct ir_diags d;
    const struct ir_stmt *s;
    cn_err rv;

    T_OK(cn_buf_printf(&src, "%s%s\n", head, expr));
    ir_diags_init(&d, "case.cairn", src.data, src.len);
    rv = ir_parse(src.data, src.len, &d, &prog);
    if (rv == CN_OK) {
        rv = ir_check(prog, &d);
    }
    if (rv != CN_OK) {
        T_OK(ir_diags_format(&d, &msg));
        T_OK(ir_str_from_cstr(msg.data != NULL ? msg.data : cn_errname(rv), out));
        rv = CN_COMPILE;
    } else {
        s = prog->funcs[0].body.items[0];
        cr_assert_eq(s->kind, IR_S_ASSIGN, "%s: not an assignment", expr);
        rv = ir_eval(&prog->exprs, s->expr, &ee, out);
    }
    ir_program_free(prog);
    ir_diags_fini(&d);
    cn_buf_fini(&src);
    cn_buf_fini(&msg);
    return rv;
}

/* Field of an error value as a C string ("" if missing or not a string). */
static const char *
t_field(struct ir_val err, const char *key)
{
    const struct ir_val *v = ir_map_get(err, key, strlen(key));

    return v != NULL && v->type == IR_T_STR ? ir_str_data(*v) : "";
}

/* Expects `expr` to raise `type` with exactly `message`. */
static void
t_expect_raise(struct t_env *env, const char *expr, const char *type, const char *message)
{
    struct ir_val got;
    cn_err rv = t_eval(expr, env, &got);
    char *r;

    if (rv != CN_RAISED) {
        r = rv == CN_OK || rv == CN_COMPILE ? t_repr(got) : NULL;
        cr_expect_fail("%s: %s (%s), want %s", expr, cn_errname(rv), r ? r : "", type);
        free(r);
        if (rv == CN_OK || rv == CN_COMPILE) {
            ir_val_release(got);
        }
        return;
    }
    cr_expect_str_eq(ir_error_type(got), type, "%s", expr);
    if (message != NULL) {
        cr_expect_str_eq(t_field(got, "message"), message, "%s", expr);
    }
    ir_val_release(got);
}

/* Expects `expr` to evaluate to a value whose repr() is `want`. */
static void
t_expect_repr(struct t_env *env, const char *expr, const char *want)
{
    struct ir_val got;
    cn_err rv = t_eval(expr, env, &got);
    char *r;

    cr_assert(rv == CN_OK || rv == CN_RAISED || rv == CN_COMPILE, "%s: %s", expr, cn_errname(rv));
    r = t_repr(got);
    cr_expect_eq(rv, CN_OK, "%s: %s %s", expr, cn_errname(rv), r);
    cr_expect_str_eq(r, want, "%s", expr);
    free(r);
    ir_val_release(got);
}

/* ---- the Python-generated cases ---- */

/* Bases error.h promises for the inline error types. */
static const char *
t_bases_for(const char *type)
{
    if (strcmp(type, "KeyError") == 0 || strcmp(type, "IndexError") == 0) {
        return "['LookupError', 'Exception']";
    }
    if (strcmp(type, "ZeroDivisionError") == 0 || strcmp(type, "OverflowError") == 0) {
        return "['ArithmeticError', 'Exception']";
    }
    return "['Exception']";
}

/* Checks one case line; returns false (after printing why) on a mismatch. */
static bool
t_check_case(struct t_env *env, char *line, size_t lineno)
{
    char *f[4] = {NULL, NULL, NULL, NULL}, *p = line, *got_repr = NULL, *want_repr = NULL;
    struct ir_val got = ir_null(), want = ir_null();
    const struct ir_val *bases, *details;
    size_t nf = 0;
    bool ok = false;
    cn_err rv;

    while (nf < 4) {
        f[nf++] = p;
        if ((p = strchr(p, '\t')) == NULL) {
            break;
        }
        *p++ = '\0';
    }
    cr_assert(nf >= 3 && strlen(f[1]) == 1, "eval_cases.txt:%zu: malformed line", lineno);
    rv = t_eval(f[0], env, &got);
    if (rv != CN_OK && rv != CN_RAISED && rv != CN_COMPILE) {
        fprintf(stderr, "eval_cases.txt:%zu: %s: returned %s\n", lineno, f[0], cn_errname(rv));
        return false;
    }
    got_repr = t_repr(got);
    switch (f[1][0]) {
    case 'V':
    case 'X':
        want = t_json(f[2]);
        if (f[1][0] == 'X') {
            ir_map_set_error(&want, true);
        }
        ok = rv == CN_OK && ir_val_same(got, want);
        want_repr = t_repr(want);
        break;
    case 'R':
        ok = rv == CN_OK && strcmp(got_repr, f[2]) == 0;
        want_repr = strdup(f[2]);
        break;
    case 'E':
        cr_assert(nf == 4, "eval_cases.txt:%zu: error line needs type and message", lineno);
        bases = rv == CN_RAISED ? ir_map_get(got, "bases", 5) : NULL;
        details = rv == CN_RAISED ? ir_map_get(got, "details", 7) : NULL;
        if (rv == CN_RAISED && bases != NULL && details != NULL) {
            char *br = t_repr(*bases);
            ok = ir_is_error(got) && ir_map_len(got) == 4 &&
                 strcmp(ir_error_type(got), f[2]) == 0 &&
                 strcmp(t_field(got, "message"), f[3]) == 0 && strcmp(br, t_bases_for(f[2])) == 0 &&
                 details->type == IR_T_NULL && ir_error_matches(got, f[2]) &&
                 ir_error_matches(got, "Exception");
            free(br);
        }
        want_repr = malloc(strlen(f[2]) + strlen(f[3]) + 4);
        cr_assert_not_null(want_repr);
        (void) sprintf(want_repr, "%s: %s", f[2], f[3]);
        break;
    default:
        cr_assert_fail("eval_cases.txt:%zu: unknown marker %s", lineno, f[1]);
    }
    if (!ok) {
        fprintf(stderr, "eval_cases.txt:%zu: %s\n    want %s\n    got  %s %s\n", lineno, f[0],
                want_repr, cn_errname(rv), got_repr);
    }
    free(got_repr);
    free(want_repr);
    ir_val_release(got);
    ir_val_release(want);
    return ok;
}

Test(ir_eval, python_cases)
{
    size_t len = 0, lineno = 0, ncases = 0, nfail = 0;
    char *text = t_read_source_file("tests/unit/ir/eval_cases.txt", &len), *line, *next;
    struct t_env env;

    cr_assert_not_null(text, "cannot read tests/unit/ir/eval_cases.txt (CAIRN_SOURCE_ROOT?)");
    t_env_init(&env);
    for (line = text; line < text + len; line = next) {
        next = strchr(line, '\n');
        next = next != NULL ? next + 1 : text + len;
        next[-1] = next[-1] == '\n' ? '\0' : next[-1];
        lineno++;
        if (line[0] == '#' || line[0] == '\0') {
            continue;
        }
        ncases++;
        if (!t_check_case(&env, line, lineno)) {
            nfail++;
        }
    }
    t_env_fini(&env);
    free(text);
    cr_expect_geq(ncases, 400, "only %zu cases", ncases);
    cr_expect_eq(nfail, 0, "%zu of %zu cases failed (see stderr)", nfail, ncases);
}

/* ---- names, ownership, malformed pools ---- */

Test(ir_eval, unbound_name_raises_name_error)
{
    struct t_env env;

    t_env_init(&env);
    t_expect_raise(&env, "d", "NameError", "name 'd' is not defined");
    t_expect_raise(&env, "[a, d]", "NameError", "name 'd' is not defined");
    t_expect_repr(&env, "False and d", "False"); /* never looked up */
    t_env_fini(&env);
}

/* now(), uuid() and instance_id() are the running instance's: without one they raise. */
Test(ir_eval, instance_builtins_need_an_instance)
{
    struct t_env env;

    t_env_init(&env);
    t_expect_raise(&env, "now()", "RuntimeError", "now() has no instance to run in here");
    t_expect_raise(&env, "[1, uuid()]", "RuntimeError", "uuid() has no instance to run in here");
    t_expect_raise(&env, "instance_id()", "RuntimeError",
                   "instance_id() has no instance to run in here");
    t_env_fini(&env);
}

Test(ir_eval, results_share_bindings_without_stealing)
{
    struct t_env env;
    struct ir_val got;

    t_env_init(&env);
    /* The result is a new reference to the bound list: releasing it leaves the binding. */
    T_OK(t_eval("b", &env, &got));
    cr_assert(got.type == IR_T_LIST && got.u.l == env.vals[1].u.l);
    ir_val_release(got);
    T_OK(t_eval("b[:]", &env, &got));
    ir_val_release(got);
    T_OK(t_eval("list(b)", &env, &got));
    ir_val_release(got);
    t_expect_repr(&env, "b", "[3, 1, 2]");
    t_env_fini(&env);
}

/* A pool built by hand: the compiler never makes these, a corrupt DAG could. */
Test(ir_eval, malformed_pool_is_inval)
{
    struct ir_xpool p;
    struct ir_expr e;
    struct t_env env;
    struct ir_eval_env ee = {t_lookup, &env, NULL};
    struct ir_val out = ir_int(42);
    uint32_t one, call, kids[3];

    t_env_init(&env);
    T_OK(ir_xpool_init(&p));
    memset(&e, 0, sizeof(e));
    e.kind = IR_X_CONST;
    e.val = ir_int(1);
    T_OK(ir_xpool_add(&p, &e, NULL, 0, &one));
    memset(&e, 0, sizeof(e));
    e.kind = IR_X_CALL;
    e.name = "helper";
    e.op = IR_B_UNRESOLVED;
    kids[0] = one;
    T_OK(ir_xpool_add(&p, &e, kids, 1, &call));
    T_ERR(ir_eval(&p, call, &ee, &out), CN_INVAL);
    e.op = IR_B_LEN; /* len() with three arguments */
    kids[1] = kids[2] = one;
    T_OK(ir_xpool_add(&p, &e, kids, 3, &call));
    T_ERR(ir_eval(&p, call, &ee, &out), CN_INVAL);
    e.op = IR_B_LEN; /* a keyword argument */
    e.nkw = 1;
    T_OK(ir_xpool_add(&p, &e, kids, 1, &call));
    T_ERR(ir_eval(&p, call, &ee, &out), CN_INVAL);
    T_ERR(ir_eval(&p, (uint32_t) p.len, &ee, &out), CN_INVAL);
    cr_expect(out.type == IR_T_INT && out.u.i == 42, "*out written on CN_INVAL");
    ir_xpool_fini(&p);
    t_env_fini(&env);
}

/* ---- limits ---- */

/* Expressions over the string limit (IR_EVAL_MAX_STR bytes) and over the item limit
 * (IR_EVAL_MAX_ITEMS): each must raise before it allocates the result. */
static const char *const t_too_many_bytes[] = {
    "\"x\" * 67108864 + \"y\"",
    "\"x\" * 67108865",
    /* str() of a small list holding many references to one big string. */
    "str([\"x\" * 1000000] * 100)",
    "str({\"k\": \"x\" * 67108863})",
};

static const char *const t_too_many_items[] = {
    "[0] * 10000001",
    "range(10000000) + [1]",
    "range(-9223372036854775808, 9223372036854775807)",
    "enumerate(\"x\" * 10000001)",
    "list(\"x\" * 10000001)",
    "sum([[0] * 6000000, [1] * 5000000], [])",
};

Test(ir_eval, size_limits_raise_before_allocating)
{
    struct t_env env;
    struct ir_val got;
    size_t i;

    t_env_init(&env);
    /* Exactly at the string limit is fine; one byte more is not. */
    T_OK(t_eval("len(\"x\" * 67108864)", &env, &got));
    cr_expect(got.type == IR_T_INT && got.u.i == 67108864);
    for (i = 0; i < sizeof(t_too_many_bytes) / sizeof(t_too_many_bytes[0]); i++) {
        t_expect_raise(&env, t_too_many_bytes[i], "ValueError",
                       "result too large: more than 67108864 bytes");
    }
    for (i = 0; i < sizeof(t_too_many_items) / sizeof(t_too_many_items[0]); i++) {
        t_expect_raise(&env, t_too_many_items[i], "ValueError",
                       "result too large: more than 10000000 items");
    }
    T_OK(t_eval("len(str([\"x\" * 1000000] * 60))", &env, &got));
    cr_expect(got.type == IR_T_INT && got.u.i == 60 * 1000002 + 2 * 59 + 2);
    t_env_fini(&env);
}

/* Nested lists deeper than any decoder accepts (t_nest builds them by a loop): comparing and
 * printing them must raise, not overflow the stack. */
Test(ir_eval, deep_values_raise_recursion_error)
{
    struct t_env env;
    struct ir_val got, err;

    t_env_init(&env);
    t_env_bind(&env, "d", t_nest(IR_REPR_MAX_DEPTH + 10, ir_int(1)));
    t_env_bind(&env, "f", t_nest(IR_REPR_MAX_DEPTH + 10, ir_int(2)));
    t_expect_raise(&env, "d < f", "RecursionError",
                   "maximum recursion depth exceeded in comparison");
    t_expect_raise(&env, "str(d)", "RecursionError",
                   "maximum recursion depth exceeded while getting the repr of an object");
    T_ERR(t_eval("max(d, f)", &env, &err), CN_RAISED);
    cr_expect(ir_error_matches(err, "RuntimeError"));
    cr_expect(ir_error_matches(err, "Exception"));
    ir_val_release(err);
    T_OK(t_eval("d == d", &env, &got));
    cr_expect(got.type == IR_T_BOOL && got.u.b);
    t_env_fini(&env);
}

/* ---- truthiness and iteration ---- */

/* Asserts ir_truthy(v) == want and releases v; `what` names the case. */
static void
t_expect_truthy(struct ir_val v, bool want, const char *what)
{
    cr_expect_eq(ir_truthy(v), want, "truthy(%s) should be %s", what, want ? "true" : "false");
    ir_val_release(v);
}

Test(ir_eval, truthy_follows_python)
{
    struct ir_val err;

    cr_expect(!ir_truthy(ir_null()));
    cr_expect(!ir_truthy(ir_bool(false)));
    cr_expect(ir_truthy(ir_bool(true)));
    cr_expect(!ir_truthy(ir_int(0)));
    cr_expect(ir_truthy(ir_int(-1)));
    cr_expect(!ir_truthy(ir_float(0.0)));
    cr_expect(!ir_truthy(ir_float(-0.0)));
    cr_expect(ir_truthy(ir_float(NAN)));
    cr_expect(ir_truthy(ir_float(1e-300)));
    t_expect_truthy(t_str(""), false, "''");
    t_expect_truthy(t_str("0"), true, "'0'");
    t_expect_truthy(t_json("[]"), false, "[]");
    t_expect_truthy(t_json("[null]"), true, "[None]");
    t_expect_truthy(t_json("{}"), false, "{}");
    T_ERR(ir_raise(&err, "ValueError", "x"), CN_RAISED);
    cr_expect(ir_truthy(err));
    ir_val_release(err);
}

/* Asserts that iterating v gives a list whose repr is want; releases v. */
static void
t_expect_items(struct ir_val v, const char *want)
{
    struct ir_val out;
    char *r;

    T_OK(ir_iter_items(v, &out));
    r = t_repr(out);
    cr_expect_str_eq(r, want);
    free(r);
    ir_val_release(out);
    ir_val_release(v);
}

Test(ir_eval, iter_items_lists_strings_and_keys)
{
    struct ir_val v, out;

    v = t_json("[1, [2]]");
    T_OK(ir_iter_items(v, &out));
    cr_expect(out.u.l == v.u.l, "a list iterates as itself");
    ir_val_release(out);
    ir_val_release(v);
    t_expect_items(t_str("a\xc3\xa9\xf0\x9f\x98\x80"), "['a', '\xc3\xa9', '\xf0\x9f\x98\x80']");
    t_expect_items(t_json("{\"b\": 1, \"a\": 2}"), "['b', 'a']");
    T_ERR(ir_iter_items(ir_float(1.5), &out), CN_RAISED);
    cr_expect_str_eq(ir_error_type(out), "TypeError");
    cr_expect_str_eq(t_field(out, "message"), "'float' object is not iterable");
    ir_val_release(out);
}

/* ---- ir_unpack ---- */

/* Asserts that v unpacks into exactly the two strings a and b; releases v. */
static void
t_expect_unpack_pair(struct ir_val v, const char *a, const char *b)
{
    struct ir_val items[2], err = ir_int(7);

    T_OK(ir_unpack(v, 2, items, &err));
    cr_expect_str_eq(ir_str_data(items[0]), a);
    cr_expect_str_eq(ir_str_data(items[1]), b);
    ir_val_release(items[0]);
    ir_val_release(items[1]);
    ir_val_release(v);
    cr_expect(err.type == IR_T_INT && err.u.i == 7, "err written on success");
}

Test(ir_eval, unpack_list_string_and_dict)
{
    struct ir_val v, items[3], err = ir_int(7);

    v = t_json("[1, \"x\", [2]]");
    T_OK(ir_unpack(v, 3, items, &err));
    cr_expect(items[0].type == IR_T_INT && items[0].u.i == 1);
    cr_expect_str_eq(ir_str_data(items[1]), "x");
    cr_expect(items[2].type == IR_T_LIST && items[2].u.l == ir_list_items(v)[2].u.l);
    ir_val_release(v); /* the items hold their own references */
    cr_expect_eq(ir_list_len(items[2]), 1);
    ir_val_release(items[0]);
    ir_val_release(items[1]);
    ir_val_release(items[2]);
    t_expect_unpack_pair(t_str("h\xc3\xa9"), "h", "\xc3\xa9");
    t_expect_unpack_pair(t_json("{\"k\": 1, \"j\": 2}"), "k", "j");
    v = t_json("[]");
    T_OK(ir_unpack(v, 0, items, &err));
    ir_val_release(v);
    cr_expect(err.type == IR_T_INT && err.u.i == 7, "err written on success");
}

static void
t_expect_unpack_error(struct ir_val v, size_t n, const char *type, const char *message)
{
    struct ir_val items[4], err;

    items[0] = items[1] = items[2] = items[3] = ir_int(-1);
    T_ERR(ir_unpack(v, n, items, &err), CN_RAISED);
    cr_expect_str_eq(ir_error_type(err), type);
    cr_expect_str_eq(t_field(err, "message"), message);
    cr_expect(items[0].type == IR_T_INT && items[0].u.i == -1, "items written on error");
    ir_val_release(err);
}

Test(ir_eval, unpack_errors_match_python)
{
    struct ir_val v;

    v = t_json("[1]");
    t_expect_unpack_error(v, 2, "ValueError", "not enough values to unpack (expected 2, got 1)");
    ir_val_release(v);
    v = t_json("[1, 2, 3]");
    t_expect_unpack_error(v, 2, "ValueError", "too many values to unpack (expected 2)");
    ir_val_release(v);
    v = t_str("abc");
    t_expect_unpack_error(v, 4, "ValueError", "not enough values to unpack (expected 4, got 3)");
    t_expect_unpack_error(v, 2, "ValueError", "too many values to unpack (expected 2)");
    ir_val_release(v);
    v = t_json("{}");
    t_expect_unpack_error(v, 1, "ValueError", "not enough values to unpack (expected 1, got 0)");
    ir_val_release(v);
    t_expect_unpack_error(ir_int(5), 2, "TypeError", "cannot unpack non-iterable int object");
    t_expect_unpack_error(ir_null(), 2, "TypeError", "cannot unpack non-iterable NoneType object");
    t_expect_unpack_error(ir_float(1.0), 1, "TypeError", "cannot unpack non-iterable float object");
}

/* ---- error values ---- */

Test(ir_eval, raise_builds_flagged_map_in_key_order)
{
    static const char *const types[][2] = {
        {"KeyError", "['LookupError', 'Exception']"},
        {"IndexError", "['LookupError', 'Exception']"},
        {"ZeroDivisionError", "['ArithmeticError', 'Exception']"},
        {"OverflowError", "['ArithmeticError', 'Exception']"},
        {"TypeError", "['Exception']"},
        {"ValueError", "['Exception']"},
        {"NameError", "['Exception']"},
        {"RecursionError", "['RuntimeError', 'Exception']"},
        {"SmtpError", "['Exception']"},
    };
    struct ir_val err;
    size_t i;
    char *r;

    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        T_ERR(ir_raise(&err, types[i][0], "m %d", 1), CN_RAISED);
        cr_expect(ir_is_error(err));
        cr_assert_eq(ir_map_len(err), 4);
        cr_expect_str_eq(ir_str_data(ir_map_key_at(err, 0)), "type");
        cr_expect_str_eq(ir_str_data(ir_map_key_at(err, 1)), "message");
        cr_expect_str_eq(ir_str_data(ir_map_key_at(err, 2)), "bases");
        cr_expect_str_eq(ir_str_data(ir_map_key_at(err, 3)), "details");
        cr_expect_str_eq(ir_error_type(err), types[i][0]);
        cr_expect_str_eq(t_field(err, "message"), "m 1");
        r = t_repr(ir_map_val_at(err, 2));
        cr_expect_str_eq(r, types[i][1], "%s", types[i][0]);
        free(r);
        cr_expect(ir_map_val_at(err, 3).type == IR_T_NULL);
        ir_val_release(err);
    }
}

Test(ir_eval, raise_handles_long_and_invalid_messages)
{
    struct ir_val err;
    char long_msg[1000];

    memset(long_msg, 'y', sizeof(long_msg) - 1);
    long_msg[sizeof(long_msg) - 1] = '\0';
    T_ERR(ir_raise(&err, "ValueError", "%s!", long_msg), CN_RAISED);
    cr_expect_eq(strlen(t_field(err, "message")), 1000);
    ir_val_release(err);
    /* A cut multi-byte sequence and a stray continuation byte become U+FFFD. */
    T_ERR(ir_raise(&err, "ValueError", "a%sb%sc", "\xc3", "\x80"), CN_RAISED);
    cr_expect_str_eq(t_field(err, "message"), "a\xef\xbf\xbd"
                                              "b\xef\xbf\xbd"
                                              "c");
    ir_val_release(err);
}

Test(ir_eval, error_new_validates_and_owns)
{
    struct ir_val bases, details, err;
    char *r;

    bases = t_json("[\"MailError\", \"Exception\"]");
    details = t_json("{\"code\": 550}");
    T_OK(ir_error_new("SmtpError", "mailbox full", bases, details, &err));
    cr_expect(ir_is_error(err));
    r = t_repr(err);
    cr_expect_str_eq(r, "{'type': 'SmtpError', 'message': 'mailbox full', 'bases': ['MailError', "
                        "'Exception'], 'details': {'code': 550}}");
    free(r);
    cr_expect(ir_error_matches(err, "SmtpError"));
    cr_expect(ir_error_matches(err, "MailError"));
    cr_expect(ir_error_matches(err, "Exception"));
    cr_expect(!ir_error_matches(err, "KeyError"));
    cr_expect(!ir_error_matches(err, "Smtp"));
    ir_val_release(err);

    T_OK(ir_error_new("Boom", NULL, ir_null(), ir_int(3), &err));
    r = t_repr(err);
    cr_expect_str_eq(r, "{'type': 'Boom', 'message': '', 'bases': ['Exception'], 'details': 3}");
    free(r);
    ir_val_release(err);

    /* Bad bases: CN_TYPE, and both values are released (ASan checks). */
    bases = t_json("[\"A\", 1]");
    details = t_json("[1, 2]");
    T_ERR(ir_error_new("X", "m", bases, details, &err), CN_TYPE);
    details = t_json("[1, 2]");
    T_ERR(ir_error_new("X", "m", ir_int(1), details, &err), CN_TYPE);
    details = t_json("[1, 2]");
    T_ERR(ir_error_new("X\xff", "m", ir_null(), details, &err), CN_UTF8);
}

Test(ir_eval, error_type_and_matches_need_the_flag)
{
    struct ir_val plain, err;

    /* Same shape, no flag: a successful action result is never mistaken for an error. */
    plain = t_json("{\"type\": \"KeyError\", \"message\": \"m\", \"bases\": [\"LookupError\", "
                   "\"Exception\"], \"details\": null}");
    cr_expect_str_eq(ir_error_type(plain), "");
    cr_expect(!ir_error_matches(plain, "KeyError"));
    cr_expect(!ir_error_matches(plain, "Exception"));
    cr_expect(!ir_is_error(plain));
    ir_val_release(plain);
    cr_expect_str_eq(ir_error_type(ir_int(1)), "");
    cr_expect(!ir_error_matches(ir_null(), "Exception"));

    T_ERR(ir_raise(&err, "IndexError", "list index out of range"), CN_RAISED);
    cr_expect_str_eq(ir_error_type(err), "IndexError");
    cr_expect(ir_error_matches(err, "IndexError"));
    cr_expect(ir_error_matches(err, "LookupError"));
    cr_expect(ir_error_matches(err, "Exception"));
    cr_expect(!ir_error_matches(err, "KeyError"));
    cr_expect(!ir_error_matches(err, "ArithmeticError"));
    cr_expect(!ir_error_matches(err, ""));
    ir_val_release(err);
}

/* ---- a few semantics spelled out in C, beyond the generated cases ---- */

Test(ir_eval, error_values_flow_through_expressions)
{
    struct t_env env;
    struct ir_val got;

    t_env_init(&env);
    T_OK(t_eval("[e][0]", &env, &got));
    cr_expect(ir_is_error(got), "the flag survives a list round trip");
    ir_val_release(got);
    T_OK(t_eval("e if True else 1", &env, &got));
    cr_expect(ir_is_error(got));
    ir_val_release(got);
    T_OK(t_eval("e | {}", &env, &got));
    cr_expect(!ir_is_error(got), "merge makes a plain dict");
    ir_val_release(got);
    t_expect_repr(&env, "isexception([e][0])", "True");
    t_expect_repr(&env, "e.message", "\"'k'\"");
    t_env_fini(&env);
}

Test(ir_eval, long_sorts_are_stable_and_raise_cleanly)
{
    struct t_env env;
    struct ir_val got;
    size_t i;

    t_env_init(&env);
    /* 200 mixed 1 / 1.0 / True keys: stability decides the order. */
    T_OK(t_eval("sorted([1, 1.0, True, 0] * 50)", &env, &got));
    cr_assert_eq(ir_list_len(got), 200);
    for (i = 0; i < 50; i++) {
        cr_expect(ir_list_items(got)[i].type == IR_T_INT && ir_list_items(got)[i].u.i == 0);
    }
    for (i = 50; i < 200; i++) {
        enum ir_type want = (i - 50) % 3 == 0   ? IR_T_INT
                            : (i - 50) % 3 == 1 ? IR_T_FLOAT
                                                : IR_T_BOOL;
        cr_expect_eq(ir_list_items(got)[i].type, want, "item %zu", i);
    }
    ir_val_release(got);
    t_expect_raise(&env, "sorted(range(100) + [\"x\"] + range(100))", "TypeError", NULL);
    t_expect_repr(&env, "sorted(range(100, 0, -1)) == range(1, 101)", "True");
    t_env_fini(&env);
}

/* ---- number text (numtext.h), called directly ---- */

/* fn(s) must raise `type` with `message`; releases s. */
static void
t_expect_text_raise(cn_err (*fn)(struct ir_val, struct ir_val *), struct ir_val s, const char *type,
                    const char *message)
{
    struct ir_val err;

    T_ERR(fn(s, &err), CN_RAISED);
    cr_expect_str_eq(ir_error_type(err), type);
    cr_expect_str_eq(t_field(err, "message"), message);
    ir_val_release(err);
    ir_val_release(s);
}

static cn_err
t_int_base10(struct ir_val s, struct ir_val *out)
{
    return ir_int_from_str(s, 10, out);
}

Test(ir_eval, numtext_entry_points_match_python)
{
    struct ir_val s, v;
    char buf[IR_FLOAT_REPR_MAX];

    /* int(" 0x_1f ", 0) == 31; Arabic-Indic digits are decimal digits. */
    s = t_str(" 0x_1f ");
    T_OK(ir_int_from_str(s, 0, &v));
    cr_expect(v.type == IR_T_INT && v.u.i == 31);
    ir_val_release(s);
    s = t_str("\u0661\u0662");
    T_OK(ir_int_from_str(s, 10, &v));
    cr_expect(v.type == IR_T_INT && v.u.i == 12);
    ir_val_release(s);
    t_expect_text_raise(t_int_base10, t_str("9223372036854775808"), "OverflowError",
                        "integer overflow: result does not fit in 64 bits");
    t_expect_text_raise(t_int_base10, t_str("1__0"), "ValueError",
                        "invalid literal for int() with base 10: '1__0'");

    s = t_str(" -1_0.5e1 ");
    T_OK(ir_float_from_str(s, &v));
    cr_expect(v.type == IR_T_FLOAT && v.u.f == -105.0);
    ir_val_release(s);
    s = t_str("-Infinity");
    T_OK(ir_float_from_str(s, &v));
    cr_expect(v.type == IR_T_FLOAT && isinf(v.u.f) && v.u.f < 0);
    ir_val_release(s);
    t_expect_text_raise(ir_float_from_str, t_str("1_"), "ValueError",
                        "could not convert string to float: '1_'");

    /* round(): halves to even, on the exact binary value for round(x, n). */
    T_OK(ir_float_round_to_int(2.5, &v));
    cr_expect(v.type == IR_T_INT && v.u.i == 2);
    T_OK(ir_float_round_to_int(-3.5, &v));
    cr_expect(v.type == IR_T_INT && v.u.i == -4);
    T_OK(ir_float_round(2.675, 2, &v));
    cr_expect(v.type == IR_T_FLOAT && v.u.f == 2.67);
    T_OK(ir_int_round(25, -1, &v));
    cr_expect(v.type == IR_T_INT && v.u.i == 20);
    T_OK(ir_int_round(35, -1, &v));
    cr_expect(v.type == IR_T_INT && v.u.i == 40);
    T_ERR(ir_int_round(INT64_MAX, -19, &v), CN_RAISED);
    cr_expect_str_eq(ir_error_type(v), "OverflowError");
    ir_val_release(v);
    T_ERR(ir_int_from_double(NAN, &v), CN_RAISED);
    cr_expect_str_eq(t_field(v, "message"), "cannot convert float NaN to integer");
    ir_val_release(v);

    cr_expect_eq(ir_float_repr(0.1, buf), 3);
    cr_expect_str_eq(buf, "0.1");
    cr_expect_eq(ir_float_repr(1e16, buf), 5);
    cr_expect_str_eq(buf, "1e+16");
}

/* ---- out of memory ---- */

/* Every allocation of every one of these evaluations fails in turn: the result must be
 * CN_NOMEM with *out untouched and no block left behind, or (when the failed allocation was
 * not needed) the normal result. */
Test(ir_eval, allocation_failures_return_nomem_and_leak_nothing)
{
#if T_OOM
    static const char *const exprs[] = {
        "[a, b, c, [1, 2.5]]",
        "{\"x\": b, \"y\": c, \"x\": 3}",
        "a | {\"k\": [1]}",
        "b + b * 3",
        "c + \"!\" * 4",
        "c[1:4] + c[-1]",
        "b[1:] + b[:1]",
        "1 // 0",
        "a.missing",
        "a[\"zz\"]",
        "b[9]",
        "[1] < [\"a\"]",
        "\"l\" in c",
        "\"llo\" in c",
        "1 in c",
        "len(c) + len(b)",
        "range(1, 20, 3)",
        "enumerate(c, 2)",
        "zip(b, c, a)",
        "min(c)",
        "max([[1], [2]], [[0]])",
        "sum([[1], [2]], [])",
        "sum(b, 0.5)",
        "round(2.675, 2)",
        "round(1e300)",
        "str(a)",
        "str(1.5)",
        "str(b) + str(None)",
        "int(\" 1_000 \")",
        "int(\"x\" * 300)",
        "int(\"١٢٣\")",
        "float(\" 1.5e3 \")",
        "float(\"bad\")",
        "sorted(c)",
        "sorted([3, 1.0, True] * 30)",
        "sorted([1, \"a\"])",
        "list(c)",
        "keys(a)",
        "values(a)",
        "items(a)",
        "isexception(e)",
        "e.type",
        "b if c else a",
        "not b and c or a",
        "1 < 2 < 3 < c",
        "[x] if False else c",
        "-(-9223372036854775807 - 1)",
        "abs(-2) + abs(-2.5)",
        "bool(a)",
        "str(d)",
    };
    struct t_env env;
    struct ir_eval_env ee = {t_lookup, &env, NULL};
    size_t i;

    t_env_init(&env);
    for (i = 0; i < sizeof(exprs) / sizeof(exprs[0]); i++) {
        static const char head[] = "fn main(input: [a, b, c, d, e, f, x]):\n    y = ";
        struct ir_program *prog = NULL;
        struct cn_buf src = CN_BUF_INIT;
        struct ir_diags dg;
        struct ir_val want, got;
        cn_err want_rv, rv;
        uint32_t ex;
        long k;
        char *wr, *gr;

        T_OK(cn_buf_printf(&src, "%s%s\n", head, exprs[i]));
        ir_diags_init(&dg, "oom.cairn", src.data, src.len);
        T_OK(ir_parse(src.data, src.len, &dg, &prog));
        T_OK(ir_check(prog, &dg));
        ex = prog->funcs[0].body.items[0]->expr;
        want_rv = ir_eval(&prog->exprs, ex, &ee, &want);
        cr_assert(want_rv == CN_OK || want_rv == CN_RAISED, "%s: %s", exprs[i],
                  cn_errname(want_rv));
        wr = t_repr(want);
        for (k = 0;; k++) {
            got = ir_int(-77);
            t_allocs = 0;
            t_live = 0;
            t_fail_at = k;
            t_tracking = true;
            rv = ir_eval(&prog->exprs, ex, &ee, &got);
            if (rv == CN_OK || rv == CN_RAISED) {
                t_tracking = false;
                gr = t_repr(got);
                t_tracking = true;
                ir_val_release(got);
            }
            t_tracking = false;
            if (rv == CN_NOMEM) {
                cr_expect(got.type == IR_T_INT && got.u.i == -77,
                          "%s: *out written on CN_NOMEM (fail at %ld)", exprs[i], k);
                cr_expect_eq(t_live, 0, "%s: %ld blocks leaked (fail at %ld)", exprs[i], t_live, k);
                continue;
            }
            cr_expect_eq(t_live, 0, "%s: %ld blocks leaked", exprs[i], t_live);
            cr_expect_eq(rv, want_rv, "%s: %s after failing allocation %ld", exprs[i],
                         cn_errname(rv), k);
            cr_expect_str_eq(gr, wr, "%s (fail at %ld)", exprs[i], k);
            free(gr);
            if (t_allocs <= k) {
                break; /* every allocation has been failed once */
            }
        }
        free(wr);
        ir_val_release(want);
        ir_program_free(prog);
        ir_diags_fini(&dg);
        cn_buf_fini(&src);
    }
    t_env_fini(&env);
#else
    cr_skip_test("allocation failure injection needs the libc allocator (not under ASan)");
#endif
}
