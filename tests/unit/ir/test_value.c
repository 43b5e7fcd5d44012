/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the value model (ir/value.c) and its codecs (ir/value_json.c,
 * ir/value_msgpack.c): constructors and reference counts, UTF-8, maps, Python equality and
 * hashing, repr (a float's is ir/numtext.c's), JSON and msgpack both ways, hostile msgpack, and
 * seeded round-trip properties.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/numtext.h"
#include "ir/value.h"
#include "tests/support/leak.h"
#include "tests/unit/ir/value_util.h"

TestSuite(ir_value, .fini = t_leak_check, .timeout = 30);

/* ---- helpers ---- */

static cn_err
t_json_err(const char *text, struct cn_errmsg *em)
{
    struct ir_val v;
    cn_err rv = ir_val_from_json(text, strlen(text), &v, em);

    if (rv == CN_OK) {
        ir_val_release(v);
    }
    return rv;
}

/* Asserts that the JSON decoder refuses each of texts with want. */
static void
t_json_rejects(const char *const *texts, size_t n, cn_err want)
{
    struct cn_errmsg em = {{0}};
    size_t i;
    cn_err rv;

    for (i = 0; i < n; i++) {
        rv = t_json_err(texts[i], &em);
        cr_assert_eq(rv, want, "json %s: got %s, want %s", texts[i], cn_errname(rv),
                     cn_errname(want));
    }
}

#define T_NCASES(a) (sizeof(a) / sizeof((a)[0]))

static void
t_assert_repr(struct ir_val v, const char *want)
{
    char *got = t_repr(v);

    cr_assert_str_eq(got, want);
    free(got);
}

/* repr() of the string s, which must be want. */
static void
t_assert_str_repr(const char *s, const char *want)
{
    struct ir_val v = t_str(s);

    t_assert_repr(v, want);
    ir_val_release(v);
}

static char *
t_to_json(struct ir_val v)
{
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    char *s;
    size_t n;
    cn_err rv = ir_val_to_json(v, &b, &em);

    cr_assert_eq(rv, CN_OK, "to_json: %s %s", cn_errname(rv), em.text);
    T_OK(cn_buf_take(&b, &s, &n));
    return s;
}

static cn_err
t_mp_dec(const void *p, size_t n, unsigned flags)
{
    struct ir_val v;
    struct cn_errmsg em = {{0}};
    cn_err rv = ir_val_from_msgpack(p, n, flags, &v, &em);

    if (rv == CN_OK) {
        ir_val_release(v);
    }
    return rv;
}

static char *
t_brackets(int n, const char *inner)
{
    size_t il = strlen(inner);
    char *s = malloc(2 * (size_t) n + il + 1);
    int i;

    cr_assert_not_null(s);
    for (i = 0; i < n; i++) {
        s[i] = '[';
    }
    memcpy(s + n, inner, il);
    for (i = 0; i < n; i++) {
        s[(size_t) n + il + (size_t) i] = ']';
    }
    s[2 * (size_t) n + il] = '\0';
    return s;
}

/* n objects {"a": {"a": ... 1}} nested around a scalar. */
static char *
t_objects(int n)
{
    char *s = malloc(7 * (size_t) n + 2);
    size_t o = 0;
    int i;

    cr_assert_not_null(s);
    for (i = 0; i < n; i++) {
        memcpy(s + o, "{\"a\": ", 6);
        o += 6;
    }
    s[o++] = '1';
    for (i = 0; i < n; i++) {
        s[o++] = '}';
    }
    s[o] = '\0';
    return s;
}

/* ---- constructors and reference counts ---- */

Test(ir_value, scalars)
{
    cr_assert_eq(ir_null().type, IR_T_NULL);
    cr_assert_eq(ir_bool(true).type, IR_T_BOOL);
    cr_assert(ir_bool(true).u.b);
    cr_assert_eq(ir_int(-5).u.i, -5);
    cr_assert_eq(ir_int(INT64_MIN).u.i, INT64_MIN);
    cr_assert_eq(ir_float(2.5).type, IR_T_FLOAT);
    cr_assert_eq(ir_float(2.5).u.f, 2.5);
    /* Scalars have nothing to release. */
    ir_val_release(ir_int(3));
    ir_val_release(ir_val_retain(ir_float(1.0)));
}

Test(ir_value, type_names)
{
    cr_assert_str_eq(ir_type_name(IR_T_NULL), "NoneType");
    cr_assert_str_eq(ir_type_name(IR_T_BOOL), "bool");
    cr_assert_str_eq(ir_type_name(IR_T_INT), "int");
    cr_assert_str_eq(ir_type_name(IR_T_FLOAT), "float");
    cr_assert_str_eq(ir_type_name(IR_T_STR), "str");
    cr_assert_str_eq(ir_type_name(IR_T_LIST), "list");
    cr_assert_str_eq(ir_type_name(IR_T_MAP), "dict");
}

Test(ir_value, refcount_shared_string)
{
    struct ir_val s = t_str("shared"), l, m, s2;

    T_OK(ir_list_new(2, &l));
    ir_list_items(l)[0] = ir_val_retain(s);
    ir_list_items(l)[1] = ir_val_retain(s);
    T_OK(ir_map_new(0, &m));
    T_OK(ir_map_set_cstr(&m, "k", ir_val_retain(s)));
    s2 = ir_val_retain(s);
    cr_assert_eq(s2.u.s, s.u.s, "retain shares the object");
    ir_val_release(l);
    ir_val_release(m);
    ir_val_release(s);
    /* Still alive through s2. */
    cr_assert_str_eq(ir_str_data(s2), "shared");
    ir_val_release(s2);
}

Test(ir_value, refcount_shared_containers)
{
    struct ir_val inner = t_json("[1, {\"a\": \"x\"}]"), outer, copy;

    T_OK(ir_list_new(3, &outer));
    ir_list_items(outer)[0] = ir_val_retain(inner);
    ir_list_items(outer)[1] = ir_val_retain(inner);
    ir_list_items(outer)[2] = inner;
    copy = ir_val_retain(outer);
    ir_val_release(outer);
    cr_assert_eq(ir_list_len(copy), 3);
    cr_assert(ir_val_equal(ir_list_items(copy)[0], ir_list_items(copy)[2]));
    ir_val_release(copy);
}

Test(ir_value, release_very_deep_value_iteratively)
{
    /* Far deeper than any decoder allows: release must not recurse. */
    struct ir_val v = t_nest(200000, t_str("leaf"));

    ir_val_release(v);
}

struct t_share {
    struct ir_val v;
    int rounds;
    int bad;
};

/* Each worker owns the reference it was handed and drops it last, as a pool thread would. */
static void *
t_share_worker(void *arg)
{
    struct t_share *sh = arg;
    struct ir_val own = sh->v, c;
    int i;

    for (i = 0; i < sh->rounds; i++) {
        c = ir_val_retain(own);
        if (ir_list_len(c) != 2) {
            sh->bad++;
        }
        ir_val_release(c);
    }
    ir_val_release(own);
    return NULL;
}

Test(ir_value, refcount_across_threads)
{
    struct ir_val v = t_json("[\"a\", {\"b\": [1]}]");
    struct t_share sh[4];
    pthread_t th[4];
    int i;

    for (i = 0; i < 4; i++) {
        sh[i].v = ir_val_retain(v); /* taken before the thread exists */
        sh[i].rounds = 20000;
        sh[i].bad = 0;
        cr_assert_eq(pthread_create(&th[i], NULL, t_share_worker, &sh[i]), 0);
    }
    /* Drop the creator's reference while the workers still run. */
    ir_val_release(v);
    for (i = 0; i < 4; i++) {
        cr_assert_eq(pthread_join(th[i], NULL), 0);
        cr_assert_eq(sh[i].bad, 0);
    }
}

/* ---- strings and UTF-8 ---- */

Test(ir_value, string_basics)
{
    struct ir_val s;

    T_OK(ir_str_new("a\0b", 3, &s));
    cr_assert_eq(ir_str_len(s), 3);
    cr_assert_eq(ir_str_cplen(s), 3);
    cr_assert_eq(memcmp(ir_str_data(s), "a\0b", 4), 0, "bytes plus a terminating NUL");
    ir_val_release(s);

    T_OK(ir_str_new(NULL, 0, &s));
    cr_assert_eq(ir_str_len(s), 0);
    cr_assert_str_eq(ir_str_data(s), "");
    ir_val_release(s);

    s = t_str("h\xc3\xa9llo");
    cr_assert_eq(ir_str_len(s), 6);
    cr_assert_eq(ir_str_cplen(s), 5, "len('héllo') == 5");
    ir_val_release(s);
}

Test(ir_value, utf8_rejects_malformed)
{
    static const char *const bad[] = {
        "\xc0\x80",           /* overlong NUL */
        "\xc1\xbf",           /* overlong 2-byte */
        "\xe0\x80\x80",       /* overlong 3-byte */
        "\xe0\x9f\xbf",       /* overlong 3-byte, top */
        "\xf0\x80\x80\x80",   /* overlong 4-byte */
        "\xf0\x8f\xbf\xbf",   /* overlong 4-byte, top */
        "\xed\xa0\x80",       /* surrogate U+D800 */
        "\xed\xbf\xbf",       /* surrogate U+DFFF */
        "\xf4\x90\x80\x80",   /* U+110000 */
        "\xf5\x80\x80\x80",   /* above range lead */
        "\xff",               /* never valid */
        "\xfe",               /* never valid */
        "\x80",               /* lone continuation */
        "a\xbf",              /* continuation after ASCII */
        "\xc3",               /* truncated 2-byte */
        "\xe2\x82",           /* truncated 3-byte */
        "\xf0\x9f\x98",       /* truncated 4-byte */
        "x\xf0\x9f",          /* truncated at end */
        "\xe2\x28\xa1",       /* bad continuation */
        "\xc3\x28",           /* bad continuation */
        "\xf0\x9f\x98\x28",   /* bad last continuation */
        "ok\xed\xb2\x80tail", /* surrogate inside */
    };
    struct ir_val v;
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_not(ir_utf8_valid(bad[i], strlen(bad[i]), NULL), "case %zu", i);
        T_ERR(ir_str_new(bad[i], strlen(bad[i]), &v), CN_UTF8);
    }
}

Test(ir_value, utf8_accepts_valid)
{
    static const struct {
        const char *s;
        size_t cplen;
    } good[] = {
        {"", 0},
        {"plain", 5},
        {"\xc2\x80", 1},         /* U+0080 */
        {"\xdf\xbf", 1},         /* U+07FF */
        {"\xe0\xa0\x80", 1},     /* U+0800 */
        {"\xed\x9f\xbf", 1},     /* U+D7FF, just below surrogates */
        {"\xee\x80\x80", 1},     /* U+E000, just above */
        {"\xef\xbf\xbf", 1},     /* U+FFFF */
        {"\xf0\x90\x80\x80", 1}, /* U+10000 */
        {"\xf0\x9f\x98\x80", 1}, /* U+1F600 */
        {"\xf4\x8f\xbf\xbf", 1}, /* U+10FFFF */
        {"a\xf0\x9f\x98\x80z", 3},
        {"\xe6\x97\xa5\xe6\x9c\xac", 2},
    };
    struct ir_val v;
    size_t i, cp;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        cr_assert(ir_utf8_valid(good[i].s, strlen(good[i].s), &cp), "case %zu", i);
        cr_assert_eq(cp, good[i].cplen, "case %zu", i);
        T_OK(ir_str_new(good[i].s, strlen(good[i].s), &v));
        cr_assert_eq(ir_str_cplen(v), good[i].cplen);
        ir_val_release(v);
    }
}

/* ---- lists and maps ---- */

Test(ir_value, list_new_is_nulls)
{
    struct ir_val l;
    size_t i;

    T_OK(ir_list_new(4, &l));
    cr_assert_eq(ir_list_len(l), 4);
    for (i = 0; i < 4; i++) {
        cr_assert_eq(ir_list_items(l)[i].type, IR_T_NULL);
    }
    ir_list_items(l)[2] = t_str("x");
    t_assert_repr(l, "[None, None, 'x', None]");
    ir_val_release(l);

    T_OK(ir_list_new(0, &l));
    cr_assert_eq(ir_list_len(l), 0);
    ir_val_release(l);
}

Test(ir_value, map_insertion_order_and_replace)
{
    struct ir_val m;
    const struct ir_val *got;

    T_OK(ir_map_new(0, &m));
    T_OK(ir_map_set_cstr(&m, "c", ir_int(1)));
    T_OK(ir_map_set_cstr(&m, "a", ir_int(2)));
    T_OK(ir_map_set_cstr(&m, "b", t_str("old")));
    T_OK(ir_map_set_cstr(&m, "a", t_str("new a")));
    T_OK(ir_map_set_cstr(&m, "b", ir_int(3)));
    cr_assert_eq(ir_map_len(m), 3);
    cr_assert_str_eq(ir_str_data(ir_map_key_at(m, 0)), "c");
    cr_assert_str_eq(ir_str_data(ir_map_key_at(m, 1)), "a");
    cr_assert_str_eq(ir_str_data(ir_map_key_at(m, 2)), "b");
    got = ir_map_get(m, "a", 1);
    cr_assert_not_null(got);
    cr_assert_str_eq(ir_str_data(*got), "new a");
    cr_assert_eq(ir_map_val_at(m, 2).u.i, 3);
    cr_assert_null(ir_map_get(m, "z", 1));
    cr_assert_null(ir_map_get(m, "", 0));
    t_assert_repr(m, "{'c': 1, 'a': 'new a', 'b': 3}");
    ir_val_release(m);
}

static void
t_map_lookup_n(size_t n)
{
    struct ir_val m, k;
    const struct ir_val *got;
    char key[32];
    size_t i;

    T_OK(ir_map_new(n / 2, &m));
    for (i = 0; i < n; i++) {
        (void) snprintf(key, sizeof(key), "key-%zu", i * 7919);
        T_OK(ir_map_set_cstr(&m, key, ir_int((int64_t) i)));
    }
    cr_assert_eq(ir_map_len(m), n);
    for (i = 0; i < n; i++) {
        (void) snprintf(key, sizeof(key), "key-%zu", i * 7919);
        got = ir_map_get(m, key, strlen(key));
        cr_assert_not_null(got, "n=%zu key %s", n, key);
        cr_assert_eq(got->u.i, (int64_t) i);
        cr_assert_str_eq(ir_str_data(ir_map_key_at(m, i)), key, "order kept");
    }
    cr_assert_null(ir_map_get(m, "key-1", 5));
    cr_assert_null(ir_map_get(m, "nope", 4));
    /* Replacing in the middle keeps the position, with or without the index. */
    (void) snprintf(key, sizeof(key), "key-%zu", (n / 2) * 7919);
    T_OK(ir_str_from_cstr(key, &k));
    T_OK(ir_map_set(&m, k, t_str("replaced")));
    cr_assert_eq(ir_map_len(m), n);
    cr_assert_str_eq(ir_str_data(ir_map_val_at(m, n / 2)), "replaced");
    ir_val_release(m);
}

Test(ir_value, map_lookup_small_linear)
{
    t_map_lookup_n(3);
    t_map_lookup_n(8);
}

Test(ir_value, map_lookup_indexed)
{
    t_map_lookup_n(9);
    t_map_lookup_n(100);
    t_map_lookup_n(5000);
}

Test(ir_value, map_keys_with_nul_bytes)
{
    struct ir_val m, k;
    const struct ir_val *got;
    size_t i;

    T_OK(ir_map_new(0, &m));
    for (i = 0; i < 20; i++) {
        char key[3] = {'a', '\0', (char) ('a' + i)};

        T_OK(ir_str_new(key, 3, &k));
        T_OK(ir_map_set(&m, k, ir_int((int64_t) i)));
    }
    cr_assert_eq(ir_map_len(m), 20);
    got = ir_map_get(m, "a\0c", 3);
    cr_assert_not_null(got);
    cr_assert_eq(got->u.i, 2);
    cr_assert_null(ir_map_get(m, "a", 1));
    ir_val_release(m);
}

Test(ir_value, map_set_rejects_non_string_key)
{
    struct ir_val m;

    T_OK(ir_map_new(2, &m));
    /* Ownership is taken on error too: the leak check sees the released list. */
    T_ERR(ir_map_set(&m, ir_int(1), t_json("[\"x\"]")), CN_TYPE);
    T_ERR(ir_map_set(&m, t_json("[\"k\"]"), t_str("v")), CN_TYPE);
    cr_assert_eq(ir_map_len(m), 0);
    ir_val_release(m);
}

Test(ir_value, map_error_flag)
{
    struct ir_val m = t_json("{\"type\": \"ValueError\", \"message\": \"bad\"}");
    struct ir_val plain = t_json("{\"message\": \"bad\", \"type\": \"ValueError\"}");

    cr_assert_not(ir_map_is_error(m));
    ir_map_set_error(&m, true);
    cr_assert(ir_map_is_error(m));
    cr_assert_not(ir_map_is_error(ir_int(1)));
    cr_assert(ir_val_equal(m, plain), "the flag does not take part in equality");
    cr_assert_eq(ir_val_hash(m), ir_val_hash(plain));
    cr_assert_not(ir_val_same(m, plain));
    ir_map_set_error(&m, false);
    cr_assert_not(ir_map_is_error(m));
    ir_val_release(m);
    ir_val_release(plain);
}

/* ---- equality and hashing ---- */

static void
t_eq(struct ir_val a, struct ir_val b, bool want)
{
    cr_assert_eq(ir_val_equal(a, b), want);
    cr_assert_eq(ir_val_equal(b, a), want, "symmetric");
    if (want) {
        cr_assert_eq(ir_val_hash(a), ir_val_hash(b), "equal values hash equally");
    }
    ir_val_release(a);
    ir_val_release(b);
}

Test(ir_value, equality_numbers)
{
    t_eq(ir_int(1), ir_float(1.0), true);
    t_eq(ir_int(1), ir_bool(true), true);
    t_eq(ir_bool(true), ir_float(1.0), true);
    t_eq(ir_bool(false), ir_int(0), true);
    t_eq(ir_float(-0.0), ir_int(0), true);
    t_eq(ir_float(-0.0), ir_float(0.0), true);
    t_eq(ir_bool(false), ir_float(-0.0), true);
    t_eq(ir_int(2), ir_bool(true), false);
    t_eq(ir_int(1), ir_float(1.5), false);
    t_eq(ir_float(NAN), ir_float(NAN), false);
    t_eq(ir_float(INFINITY), ir_float(INFINITY), true);
    t_eq(ir_float(INFINITY), ir_int(INT64_MAX), false);
    /* Exact comparison, as Python: 2**53 + 1 is not the float 2**53. */
    t_eq(ir_int(9007199254740993LL), ir_float(9007199254740992.0), false);
    t_eq(ir_int(9007199254740992LL), ir_float(9007199254740992.0), true);
    t_eq(ir_int(INT64_MAX), ir_float(9223372036854775808.0), false);
    t_eq(ir_int(INT64_MIN), ir_float(-9223372036854775808.0), true);
    t_eq(ir_null(), ir_null(), true);
    t_eq(ir_null(), ir_int(0), false);
    t_eq(ir_null(), ir_bool(false), false);
}

Test(ir_value, equality_strings_and_containers)
{
    t_eq(ir_int(1), t_str("1"), false);
    t_eq(t_str("abc"), t_str("abc"), true);
    t_eq(t_str("abc"), t_str("abd"), false);
    t_eq(t_str(""), ir_null(), false);
    t_eq(t_json("[1, [2, 3.0], {\"a\": true}]"), t_json("[1.0, [2, 3], {\"a\": 1}]"), true);
    t_eq(t_json("[1, 2]"), t_json("[2, 1]"), false);
    t_eq(t_json("[1, 2]"), t_json("[1, 2, 3]"), false);
    t_eq(t_json("[]"), t_json("{}"), false);
    t_eq(t_json("{\"a\": 1, \"b\": [2]}"), t_json("{\"b\": [2], \"a\": 1}"), true);
    t_eq(t_json("{\"a\": 1, \"b\": 2}"), t_json("{\"a\": 1, \"c\": 2}"), false);
    t_eq(t_json("{\"a\": 1}"), t_json("{\"a\": 1, \"b\": 2}"), false);
    t_eq(t_json("{\"a\": {\"x\": [1, {\"y\": null}]}}"),
         t_json("{\"a\": {\"x\": [1.0, {\"y\": null}]}}"), true);
    t_eq(t_json("{\"a\": {\"x\": [1, {\"y\": null}]}}"),
         t_json("{\"a\": {\"x\": [1.0, {\"y\": false}]}}"), false);
}

Test(ir_value, equality_large_maps_any_order)
{
    struct ir_val a, b;
    char key[16];
    int i;

    T_OK(ir_map_new(0, &a));
    T_OK(ir_map_new(0, &b));
    for (i = 0; i < 50; i++) {
        (void) snprintf(key, sizeof(key), "k%d", i);
        T_OK(ir_map_set_cstr(&a, key, ir_int(i)));
        (void) snprintf(key, sizeof(key), "k%d", 49 - i);
        T_OK(ir_map_set_cstr(&b, key, ir_float((double) (49 - i))));
    }
    t_eq(a, b, true);
}

Test(ir_value, hash_is_deterministic_and_spreads)
{
    struct ir_val a = t_str("hello"), b = t_str("hello"), c = t_str("hellp");

    cr_assert_eq(ir_val_hash(a), ir_val_hash(b));
    cr_assert_neq(ir_val_hash(a), ir_val_hash(c));
    cr_assert_neq(ir_val_hash(ir_int(1)), ir_val_hash(ir_int(2)));
    cr_assert_eq(ir_val_hash(ir_float(NAN)), ir_val_hash(ir_float(NAN)));
    ir_val_release(a);
    ir_val_release(b);
    ir_val_release(c);
}

Test(ir_value, same_is_strict)
{
    struct ir_val a = t_json("{\"a\": 1, \"b\": 2}"), b = t_json("{\"b\": 2, \"a\": 1}");

    cr_assert_not(ir_val_same(ir_int(1), ir_float(1.0)));
    cr_assert_not(ir_val_same(ir_int(1), ir_bool(true)));
    cr_assert(ir_val_same(ir_float(NAN), ir_float(NAN)));
    cr_assert_not(ir_val_same(ir_float(0.0), ir_float(-0.0)));
    cr_assert_not(ir_val_same(a, b), "order matters");
    cr_assert(ir_val_equal(a, b));
    cr_assert(ir_val_same(a, a));
    ir_val_release(a);
    ir_val_release(b);
}

/* ---- float repr and value repr ---- */

Test(ir_value, float_repr_matches_python)
{
    /* Expected texts are Python 3's repr(). */
    static const struct {
        double f;
        const char *want;
    } tab[] = {
        {0.1, "0.1"},
        {1.0 / 3.0, "0.3333333333333333"},
        {2.0 / 3.0, "0.6666666666666666"},
        {1e16, "1e+16"},
        {1e15, "1000000000000000.0"},
        {1e-5, "1e-05"},
        {1e-4, "0.0001"},
        {123.0, "123.0"},
        {3.0, "3.0"},
        {2.5e-7, "2.5e-07"},
        {1.5e-7, "1.5e-07"},
        {-0.0, "-0.0"},
        {0.0, "0.0"},
        {1e22, "1e+22"},
        {1e23, "1e+23"},
        {5e-324, "5e-324"},
        {2.2250738585072014e-308, "2.2250738585072014e-308"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {123456789012345.0, "123456789012345.0"},
        {1234567890123456.0, "1234567890123456.0"},
        {12345678901234567.0, "1.2345678901234568e+16"},
        {9007199254740993.0, "9007199254740992.0"},
        {0.30000000000000004, "0.30000000000000004"},
        {-1.5, "-1.5"},
        {100.5, "100.5"},
        {5.316911983139664e+36, "5.316911983139664e+36"}, /* 2**122: lopsided interval */
        {INFINITY, "inf"},
        {-INFINITY, "-inf"},
        {NAN, "nan"},
    };
    char buf[IR_FLOAT_REPR_MAX];
    size_t i, n;

    for (i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        n = ir_float_repr(tab[i].f, buf);
        cr_assert_str_eq(buf, tab[i].want, "case %zu", i);
        cr_assert_eq(n, strlen(tab[i].want));
    }
}

Test(ir_value, float_repr_round_trips_random_bits)
{
    char buf[IR_FLOAT_REPR_MAX];
    uint64_t x = 0x9e3779b97f4a7c15u, bits;
    double f;
    int i;

    for (i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bits = x;
        memcpy(&f, &bits, sizeof(f));
        if (isnan(f)) {
            continue;
        }
        cr_assert_lt(ir_float_repr(f, buf), (size_t) IR_FLOAT_REPR_MAX);
        cr_assert_eq(strtod(buf, NULL), f, "%s", buf);
        cr_assert(strchr(buf, '.') != NULL || strchr(buf, 'e') != NULL ||
                      strstr(buf, "inf") != NULL,
                  "%s keeps a float form", buf);
    }
}

Test(ir_value, repr_scalars_and_strings)
{
    struct ir_val v;

    t_assert_repr(ir_null(), "None");
    t_assert_repr(ir_bool(true), "True");
    t_assert_repr(ir_bool(false), "False");
    t_assert_repr(ir_int(INT64_MIN), "-9223372036854775808");
    t_assert_repr(ir_float(1e16), "1e+16");
    t_assert_str_repr("it's", "\"it's\"");
    t_assert_str_repr("a\"b", "'a\"b'");
    t_assert_str_repr("it's \"x\"", "'it\\'s \"x\"'");
    t_assert_str_repr("a\nb\t\\\r", "'a\\nb\\t\\\\\\r'");
    t_assert_str_repr("\x01\x7f\xc3\xa9\xe2\x80\x8b\xf3\xa0\x80\x81\xc2\xa0\xf0\x9f\x98\x80",
                      "'\\x01\\x7f\xc3\xa9\\u200b\\U000e0001\\xa0\xf0\x9f\x98\x80'");
    T_OK(ir_str_new("\0", 1, &v));
    t_assert_repr(v, "'\\x00'");
    ir_val_release(v);
}

Test(ir_value, repr_nested)
{
    struct ir_val v = t_json("{\"a\": [1, 2.5, null, true, \"x\"], \"b\": {}, \"c\": [[], [3.0]]}");

    t_assert_repr(v, "{'a': [1, 2.5, None, True, 'x'], 'b': {}, 'c': [[], [3.0]]}");
    ir_val_release(v);
    v = t_json("[1e16, -0.0, {\"it's\": \"q\"}]");
    t_assert_repr(v, "[1e+16, -0.0, {\"it's\": 'q'}]");
    ir_val_release(v);
}

Test(ir_value, repr_depth_limit)
{
    struct ir_val v = t_nest(IR_REPR_MAX_DEPTH + 5, ir_int(1));
    struct cn_buf b = CN_BUF_INIT;

    T_ERR(ir_val_repr(v, &b), CN_DEPTH);
    cn_buf_fini(&b);
    ir_val_release(v);
}

/* ---- JSON decode ---- */

Test(ir_value, json_decode_types)
{
    struct ir_val v = t_json("{\"n\": null, \"t\": true, \"f\": false, \"i\": -42, \"x\": 3.0, "
                             "\"e\": 1E2, \"z\": -0.0, \"s\": \"hi\", \"l\": [1, \"2\"], "
                             "\"m\": {\"k\": {}}}");
    const struct ir_val *g;

    cr_assert_eq(ir_map_len(v), 10);
    cr_assert_eq(ir_map_get(v, "n", 1)->type, IR_T_NULL);
    cr_assert_eq(ir_map_get(v, "t", 1)->type, IR_T_BOOL);
    cr_assert(ir_map_get(v, "t", 1)->u.b);
    cr_assert_not(ir_map_get(v, "f", 1)->u.b);
    g = ir_map_get(v, "i", 1);
    cr_assert(g->type == IR_T_INT && g->u.i == -42);
    g = ir_map_get(v, "x", 1);
    cr_assert(g->type == IR_T_FLOAT && g->u.f == 3.0, "3.0 stays a float");
    g = ir_map_get(v, "e", 1);
    cr_assert(g->type == IR_T_FLOAT && g->u.f == 100.0);
    g = ir_map_get(v, "z", 1);
    cr_assert(g->type == IR_T_FLOAT && signbit(g->u.f));
    cr_assert_str_eq(ir_str_data(*ir_map_get(v, "s", 1)), "hi");
    cr_assert_eq(ir_list_len(*ir_map_get(v, "l", 1)), 2);
    cr_assert_eq(ir_map_get(v, "m", 1)->type, IR_T_MAP);
    cr_assert_str_eq(ir_str_data(ir_map_key_at(v, 9)), "m", "key order kept");
    ir_val_release(v);

    v = t_json("  7 ");
    cr_assert(v.type == IR_T_INT && v.u.i == 7, "scalars at top level");
    v = t_json("\"top\"");
    cr_assert_str_eq(ir_str_data(v), "top");
    ir_val_release(v);
    v = t_json("null");
    cr_assert_eq(v.type, IR_T_NULL);
}

Test(ir_value, json_decode_unicode)
{
    struct ir_val v = t_json("\"\\u00e9\\ud83d\\ude00\\n\\u0000x\"");

    cr_assert_eq(ir_str_len(v), 2 + 4 + 1 + 1 + 1);
    cr_assert_eq(ir_str_cplen(v), 5);
    cr_assert_eq(memcmp(ir_str_data(v), "\xc3\xa9\xf0\x9f\x98\x80\n\0x", 9), 0);
    ir_val_release(v);
    v = t_json("\"h\xc3\xa9llo\"");
    cr_assert_eq(ir_str_cplen(v), 5);
    ir_val_release(v);
}

Test(ir_value, json_decode_duplicate_keys)
{
    struct ir_val v = t_json("{\"a\": 1, \"b\": 2, \"a\": 3}");

    /* Python: the last value, at the first key's position. */
    cr_assert_eq(ir_map_len(v), 2);
    cr_assert_str_eq(ir_str_data(ir_map_key_at(v, 0)), "a");
    cr_assert_eq(ir_map_val_at(v, 0).u.i, 3);
    cr_assert_str_eq(ir_str_data(ir_map_key_at(v, 1)), "b");
    ir_val_release(v);
}

Test(ir_value, json_decode_integer_limits)
{
    static const char *const out_of_range[] = {"9223372036854775808", "-9223372036854775809",
                                               "[1, 100000000000000000000000]", "1e400"};
    struct ir_val v;

    v = t_json("9223372036854775807");
    cr_assert_eq(v.u.i, INT64_MAX);
    v = t_json("-9223372036854775808");
    cr_assert_eq(v.u.i, INT64_MIN);
    t_json_rejects(out_of_range, T_NCASES(out_of_range), CN_RANGE);
}

Test(ir_value, json_decode_depth)
{
    struct cn_errmsg em = {{0}};
    struct ir_val v;
    char *s;

    /* 31 lists around a scalar: depth 32. */
    s = t_brackets(31, "1");
    v = t_json(s);
    ir_val_release(v);
    free(s);
    /* 32 nested lists, the innermost empty: depth 32. */
    s = t_brackets(32, "");
    v = t_json(s);
    ir_val_release(v);
    free(s);
    s = t_brackets(32, "1");
    T_ERR(t_json_err(s, &em), CN_DEPTH);
    cr_assert(strstr(em.text, "32") != NULL, "%s", em.text);
    free(s);
    s = t_brackets(33, "");
    T_ERR(t_json_err(s, &em), CN_DEPTH);
    free(s);
    /* Objects count the same way. */
    s = t_objects(31);
    v = t_json(s);
    ir_val_release(v);
    free(s);
    s = t_objects(32);
    T_ERR(t_json_err(s, &em), CN_DEPTH);
    free(s);
    /* Past jansson's own limit (2048) the parser reports it; still CN_DEPTH. */
    s = t_brackets(5000, "");
    T_ERR(t_json_err(s, &em), CN_DEPTH);
    free(s);
}

Test(ir_value, json_decode_syntax_errors)
{
    static const char *const malformed[] = {
        "", "[1, 2", "[1] x", "{1: 2}", "NaN", "\"\\ud800\"", "'single'",
    };
    struct cn_errmsg em = {{0}};

    T_ERR(t_json_err("{\n  \"a\": 1,\n  \"b\": ]\n}", &em), CN_PARSE);
    cr_assert(strstr(em.text, "line 3") != NULL, "%s", em.text);
    cr_assert(strstr(em.text, "column") != NULL, "%s", em.text);
    t_json_rejects(malformed, T_NCASES(malformed), CN_PARSE);
}

Test(ir_value, json_decode_rejects_invalid_utf8)
{
    static const char *const bad[] = {
        "\"\xc3\x28\"",
        "\"\xed\xa0\x80\"",
        "{\"\xff\": 1}",
        "[\"ok\", \"\xf4\x90\x80\x80\"]",
    };

    t_json_rejects(bad, T_NCASES(bad), CN_UTF8);
}

/* ---- JSON encode ---- */

Test(ir_value, json_encode_python_form)
{
    struct ir_val v = ir_null();
    char *s;

    T_OK(ir_str_new("a\"b\\c\n\x01\x7f\xc3\xa9\0", 11, &v));
    s = t_to_json(v);
    cr_assert_str_eq(s, "\"a\\\"b\\\\c\\n\\u0001\x7f\xc3\xa9\\u0000\"");
    free(s);
    ir_val_release(v);

    v = t_json("[1, 2.5, null, true, false, {\"k\": [], \"e\": {}}, 3.0, -0.0, 1e16, 1e-05]");
    s = t_to_json(v);
    cr_assert_str_eq(
        s, "[1, 2.5, null, true, false, {\"k\": [], \"e\": {}}, 3.0, -0.0, 1e+16, 1e-05]");
    free(s);
    ir_val_release(v);

    v = t_json("\"\\b\\f\\r\\t\\u001f\"");
    s = t_to_json(v);
    cr_assert_str_eq(s, "\"\\b\\f\\r\\t\\u001f\"");
    free(s);
    ir_val_release(v);
}

Test(ir_value, json_encode_floats_stay_floats)
{
    struct ir_val v = ir_float(3.0), back;
    char *s = t_to_json(v);

    cr_assert_str_eq(s, "3.0");
    back = t_json(s);
    cr_assert_eq(back.type, IR_T_FLOAT);
    free(s);

    s = t_to_json(ir_float(1e16));
    cr_assert_str_eq(s, "1e+16");
    back = t_json(s);
    cr_assert(back.type == IR_T_FLOAT && back.u.f == 1e16, "1e+16 is valid JSON");
    free(s);

    s = t_to_json(ir_int(3));
    cr_assert_str_eq(s, "3");
    free(s);
}

Test(ir_value, json_encode_rejects_nan_inf)
{
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    struct ir_val l;

    T_ERR(ir_val_to_json(ir_float(NAN), &b, &em), CN_RANGE);
    cr_assert(strstr(em.text, "nan") != NULL, "%s", em.text);
    T_ERR(ir_val_to_json(ir_float(-INFINITY), &b, &em), CN_RANGE);
    cr_assert(strstr(em.text, "-inf") != NULL, "%s", em.text);
    T_OK(ir_list_new(2, &l));
    ir_list_items(l)[1] = ir_float(INFINITY);
    T_ERR(ir_val_to_json(l, &b, &em), CN_RANGE);
    ir_val_release(l);
    cn_buf_fini(&b);
}

Test(ir_value, json_encode_error_map_is_plain)
{
    struct ir_val v = t_json("{\"type\": \"KeyError\", \"message\": \"k\", \"bases\": "
                             "[\"LookupError\", \"Exception\"], \"details\": null}");
    char *s;

    ir_map_set_error(&v, true);
    s = t_to_json(v);
    cr_assert_str_eq(s, "{\"type\": \"KeyError\", \"message\": \"k\", \"bases\": "
                        "[\"LookupError\", \"Exception\"], \"details\": null}");
    free(s);
    ir_val_release(v);
}

Test(ir_value, encoders_reject_too_deep)
{
    struct ir_val ok = t_nest(31, ir_int(1)), deep = t_nest(32, ir_int(1));
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};

    T_OK(ir_val_to_json(ok, &b, &em));
    cn_buf_clear(&b);
    T_OK(ir_val_to_msgpack(ok, IR_MP_PLAIN, &b));
    T_OK(t_mp_dec(b.data, b.len, IR_MP_PLAIN));
    cn_buf_clear(&b);
    T_ERR(ir_val_to_json(deep, &b, &em), CN_DEPTH);
    cn_buf_clear(&b);
    T_ERR(ir_val_to_msgpack(deep, IR_MP_PLAIN, &b), CN_DEPTH);
    cn_buf_fini(&b);
    ir_val_release(ok);
    ir_val_release(deep);
}

/* ---- msgpack ---- */

static void
t_mp_bytes(struct ir_val v, const unsigned char *want, size_t n)
{
    struct cn_buf b = CN_BUF_INIT;

    T_OK(ir_val_to_msgpack(v, IR_MP_PLAIN, &b));
    cr_assert_eq(b.len, n);
    cr_assert_eq(memcmp(b.data, want, n), 0);
    cn_buf_fini(&b);
    ir_val_release(v);
}

Test(ir_value, msgpack_encoding_forms)
{
    t_mp_bytes(ir_int(1), (const unsigned char *) "\x01", 1);
    t_mp_bytes(ir_int(-1), (const unsigned char *) "\xff", 1);
    t_mp_bytes(ir_int(200), (const unsigned char *) "\xcc\xc8", 2);
    t_mp_bytes(ir_int(-33), (const unsigned char *) "\xd0\xdf", 2);
    t_mp_bytes(ir_int(70000), (const unsigned char *) "\xce\x00\x01\x11\x70", 5);
    t_mp_bytes(ir_int(INT64_MIN), (const unsigned char *) "\xd3\x80\0\0\0\0\0\0\0", 9);
    t_mp_bytes(ir_float(1.5), (const unsigned char *) "\xcb\x3f\xf8\0\0\0\0\0\0", 9);
    t_mp_bytes(ir_null(), (const unsigned char *) "\xc0", 1);
    t_mp_bytes(ir_bool(true), (const unsigned char *) "\xc3", 1);
    t_mp_bytes(t_str("abc"),
               (const unsigned char *) "\xa3"
                                       "abc",
               4);
    t_mp_bytes(t_json("{\"a\": [1]}"),
               (const unsigned char *) "\x81\xa1"
                                       "a\x91\x01",
               5);
}

Test(ir_value, msgpack_round_trip)
{
    struct ir_val v = t_json("{\"s\": \"h\xc3\xa9llo\", \"i\": [0, -1, 127, 128, 255, 256, "
                             "65535, 65536, 4294967295, 4294967296, -32, -33, -128, -129, "
                             "-32768, -32769, -2147483648, -2147483649, 9223372036854775807, "
                             "-9223372036854775808], \"f\": [0.1, -0.0, 5e-324, 1e300], "
                             "\"n\": null, \"b\": [true, false], \"m\": {\"x\": {}, \"y\": []}}");
    struct ir_val back;
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};

    T_OK(ir_val_to_msgpack(v, IR_MP_PLAIN, &b));
    T_OK(ir_msgpack_shape_ok(b.data, b.len, IR_VALUE_MAX_DEPTH, &em));
    T_OK(ir_val_from_msgpack(b.data, b.len, IR_MP_PLAIN, &back, &em));
    cr_assert(ir_val_same(v, back));
    ir_val_release(back);
    cn_buf_fini(&b);
    ir_val_release(v);
}

Test(ir_value, msgpack_float32_and_str8_forms)
{
    struct ir_val v;
    struct cn_errmsg em = {{0}};

    T_OK(ir_val_from_msgpack("\xca\x3f\xc0\x00\x00", 5, IR_MP_PLAIN, &v, &em));
    cr_assert(v.type == IR_T_FLOAT && v.u.f == 1.5);
    T_OK(ir_val_from_msgpack("\xd9\x02hi", 4, IR_MP_PLAIN, &v, &em));
    cr_assert_str_eq(ir_str_data(v), "hi");
    ir_val_release(v);
    T_OK(ir_val_from_msgpack("\xdc\x00\x01\xc0", 4, IR_MP_PLAIN, &v, &em));
    cr_assert_eq(ir_list_len(v), 1);
    ir_val_release(v);
    T_OK(ir_val_from_msgpack("\x82\xa1"
                             "a\x01\xa1"
                             "a\x02",
                             7, IR_MP_PLAIN, &v, &em));
    cr_assert_eq(ir_map_len(v), 1, "duplicate keys collapse");
    cr_assert_eq(ir_map_val_at(v, 0).u.i, 2);
    ir_val_release(v);
}

Test(ir_value, msgpack_truncated_at_every_prefix)
{
    struct ir_val v = t_json("{\"key\": [1, 300, 70000, -5000000000, 2.5, \"text\", null, "
                             "{\"deep\": [[true]]}], \"other\": \"\xf0\x9f\x98\x80\"}");
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    size_t n;

    T_OK(ir_val_to_msgpack(v, IR_MP_PLAIN, &b));
    for (n = 0; n < b.len; n++) {
        T_ERR(ir_msgpack_shape_ok(b.data, n, IR_VALUE_MAX_DEPTH, &em), CN_PARSE);
        T_ERR(t_mp_dec(b.data, n, IR_MP_PLAIN), CN_PARSE);
    }
    T_OK(t_mp_dec(b.data, b.len, IR_MP_PLAIN));
    cn_buf_fini(&b);
    ir_val_release(v);
}

Test(ir_value, msgpack_hostile_headers)
{
    static const unsigned char arr32[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03};
    static const unsigned char map32[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a', 0x01, 0xa1, 'b'};
    static const unsigned char str32[] = {0xdb, 0xff, 0xff, 0xff, 0xff, 'a', 'b'};
    static const unsigned char bin32[] = {0xc6, 0xff, 0xff, 0xff, 0xff, 'a'};
    static const unsigned char ext32[] = {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 'a'};
    /* Each header alone fits, but together they owe more elements than bytes remain. */
    static const unsigned char nested[] = {0x93, 0x93, 0x01, 0x02};
    static const unsigned char arr16[] = {0x92, 0xdc, 0x00, 0x03, 0x01, 0x02, 0x03};
    struct cn_errmsg em = {{0}};

    T_ERR(ir_msgpack_shape_ok(arr32, sizeof(arr32), IR_VALUE_MAX_DEPTH, &em), CN_PARSE);
    cr_assert(strstr(em.text, "declares") != NULL, "%s", em.text);
    T_ERR(t_mp_dec(arr32, sizeof(arr32), IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec(map32, sizeof(map32), IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec(str32, sizeof(str32), IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec(bin32, sizeof(bin32), IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec(ext32, sizeof(ext32), IR_MP_INTERNAL), CN_PARSE);
    T_ERR(t_mp_dec(nested, sizeof(nested), IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec(arr16, sizeof(arr16), IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec(arr16, 3, IR_MP_PLAIN), CN_PARSE);
}

Test(ir_value, msgpack_reserved_trailing_and_empty)
{
    struct cn_errmsg em = {{0}};

    T_ERR(t_mp_dec("\xc1", 1, IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec("\x92\x01\xc1", 3, IR_MP_PLAIN), CN_PARSE);
    T_ERR(ir_msgpack_shape_ok("\x01\x02", 2, IR_VALUE_MAX_DEPTH, &em), CN_PARSE);
    cr_assert(strstr(em.text, "trailing") != NULL, "%s", em.text);
    T_ERR(t_mp_dec("\x01\x02", 2, IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec("\x90\x90", 2, IR_MP_PLAIN), CN_PARSE);
    T_ERR(t_mp_dec("", 0, IR_MP_PLAIN), CN_PARSE);
    T_ERR(ir_msgpack_shape_ok("\x01", 1, 0, &em), CN_INVAL);
    T_ERR(ir_msgpack_shape_ok("\x01", 1, IR_MSGPACK_SHAPE_MAX_DEPTH + 1, &em), CN_INVAL);
    T_OK(ir_msgpack_shape_ok("\x01", 1, IR_MSGPACK_SHAPE_MAX_DEPTH, &em));
}

Test(ir_value, msgpack_depth_limits)
{
    unsigned char buf[200];
    struct cn_errmsg em = {{0}};
    int i;

    /* 31 fixarrays around a scalar: depth 32, accepted. */
    for (i = 0; i < 31; i++) {
        buf[i] = 0x91;
    }
    buf[31] = 0x01;
    T_OK(t_mp_dec(buf, 32, IR_MP_PLAIN));
    /* 31 fixarrays around an empty one: depth 32, accepted. */
    buf[31] = 0x90;
    T_OK(t_mp_dec(buf, 32, IR_MP_PLAIN));
    /* One more level either way: CN_DEPTH, never a msgpack-c failure. */
    buf[31] = 0x91;
    buf[32] = 0x01;
    T_ERR(t_mp_dec(buf, 33, IR_MP_PLAIN), CN_DEPTH);
    buf[32] = 0x90;
    T_ERR(t_mp_dec(buf, 33, IR_MP_PLAIN), CN_DEPTH);
    /* A depth bomb: 100 nested fixarrays. */
    for (i = 0; i < 100; i++) {
        buf[i] = 0x91;
    }
    buf[100] = 0xc0;
    T_ERR(ir_msgpack_shape_ok(buf, 101, IR_VALUE_MAX_DEPTH, &em), CN_DEPTH);
    T_ERR(t_mp_dec(buf, 101, IR_MP_PLAIN), CN_DEPTH);
    /* Maps count the same way: 31 single-entry maps around a scalar. */
    for (i = 0; i < 31; i++) {
        buf[3 * i] = 0x81;
        buf[3 * i + 1] = 0xa1;
        buf[3 * i + 2] = 'k';
    }
    buf[93] = 0x07;
    T_OK(t_mp_dec(buf, 94, IR_MP_PLAIN));
    buf[93] = 0x91;
    buf[94] = 0x07;
    T_ERR(t_mp_dec(buf, 95, IR_MP_PLAIN), CN_DEPTH);
}

Test(ir_value, msgpack_rejects_foreign_types)
{
    static const struct {
        const char *what, *bytes;
        size_t n;
        unsigned flags;
        cn_err want;
    } cases[] = {
        {"bin 8, plain",
         "\xc4\x01"
         "A",
         3, IR_MP_PLAIN, CN_TYPE},
        {"bin 8, internal",
         "\xc4\x01"
         "A",
         3, IR_MP_INTERNAL, CN_TYPE},
        {"fixext 1, plain", "\xd4\x05\x00", 3, IR_MP_PLAIN, CN_TYPE},
        {"fixext 1, internal", "\xd4\x05\x00", 3, IR_MP_INTERNAL, CN_TYPE},
        {"timestamp", "\xd6\xff\0\0\0\0", 6, IR_MP_INTERNAL, CN_TYPE},
        {"uint64 max", "\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 9, IR_MP_PLAIN, CN_RANGE},
        {"uint64 2^63", "\xcf\x80\0\0\0\0\0\0\0", 9, IR_MP_PLAIN, CN_RANGE},
        {"int key", "\x81\x01\x02", 3, IR_MP_PLAIN, CN_TYPE},
        {"nil key", "\x81\xc0\x02", 3, IR_MP_PLAIN, CN_TYPE},
        {"array key",
         "\x82\xa1"
         "a\x01\x90\x02",
         6, IR_MP_PLAIN, CN_TYPE},
        {"bad UTF-8 string", "\xa2\xc3\x28", 3, IR_MP_PLAIN, CN_UTF8},
        {"surrogate in a key", "\x81\xa2\xed\xa0\x01", 5, IR_MP_PLAIN, CN_UTF8},
        {"bad UTF-8 in a list", "\x92\x01\xa1\xff", 4, IR_MP_PLAIN, CN_UTF8},
    };
    struct cn_errmsg em = {{0}};
    struct ir_val v;
    size_t i;
    cn_err rv;

    for (i = 0; i < T_NCASES(cases); i++) {
        rv = t_mp_dec(cases[i].bytes, cases[i].n, cases[i].flags);
        cr_assert_eq(rv, cases[i].want, "%s: got %s, want %s", cases[i].what, cn_errname(rv),
                     cn_errname(cases[i].want));
    }
    T_OK(ir_val_from_msgpack("\xcf\x7f\xff\xff\xff\xff\xff\xff\xff", 9, IR_MP_PLAIN, &v, &em));
    cr_assert_eq(v.u.i, INT64_MAX);
}

static struct ir_val
t_error_val(void)
{
    struct ir_val e = t_json("{\"type\": \"ValueError\", \"message\": \"bad input\", "
                             "\"bases\": [\"Exception\"], \"details\": {\"n\": 3}}");

    ir_map_set_error(&e, true);
    return e;
}

Test(ir_value, msgpack_error_ext_round_trip)
{
    struct ir_val e = t_error_val(), wrapped, back;
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    unsigned char t;

    T_OK(ir_val_to_msgpack(e, IR_MP_INTERNAL, &b));
    t = (unsigned char) b.data[0];
    cr_assert(t == 0xc7 || t == 0xc8 || t == 0xc9 || (t >= 0xd4 && t <= 0xd8), "ext: %02x", t);
    cr_assert_eq(b.data[t == 0xc7 ? 2 : (t == 0xc8 ? 3 : (t == 0xc9 ? 5 : 1))], IR_MP_EXT_ERROR);
    T_OK(ir_val_from_msgpack(b.data, b.len, IR_MP_INTERNAL, &back, &em));
    cr_assert(ir_map_is_error(back));
    cr_assert(ir_val_same(e, back));
    ir_val_release(back);
    /* Without IR_MP_INTERNAL the ext is a foreign type. */
    T_ERR(t_mp_dec(b.data, b.len, IR_MP_PLAIN), CN_TYPE);
    cn_buf_clear(&b);

    /* Plain encoding: a normal map, and the flag is gone. */
    T_OK(ir_val_to_msgpack(e, IR_MP_PLAIN, &b));
    cr_assert_eq((unsigned char) b.data[0], 0x84);
    T_OK(ir_val_from_msgpack(b.data, b.len, IR_MP_INTERNAL, &back, &em));
    cr_assert_not(ir_map_is_error(back));
    cr_assert(ir_val_equal(e, back));
    ir_val_release(back);
    cn_buf_clear(&b);

    /* An error nested in a list and in another error's details. */
    T_OK(ir_map_new(2, &wrapped));
    T_OK(ir_map_set_cstr(&wrapped, "type", t_str("RuntimeError")));
    T_OK(ir_map_set_cstr(&wrapped, "details", ir_val_retain(e)));
    ir_map_set_error(&wrapped, true);
    back = t_nest(3, wrapped);
    wrapped = back;
    T_OK(ir_val_to_msgpack(wrapped, IR_MP_INTERNAL, &b));
    T_OK(ir_val_from_msgpack(b.data, b.len, IR_MP_INTERNAL, &back, &em));
    cr_assert(ir_val_same(wrapped, back));
    cr_assert(ir_map_is_error(
        *ir_map_get(ir_list_items(ir_list_items(ir_list_items(back)[0])[0])[0], "details", 7)));
    ir_val_release(back);
    ir_val_release(wrapped);
    cn_buf_fini(&b);
    ir_val_release(e);
}

Test(ir_value, msgpack_error_ext_bad_payloads)
{
    T_ERR(t_mp_dec("\xd4\x01\x01", 3, IR_MP_INTERNAL), CN_PARSE);     /* not a map */
    T_ERR(t_mp_dec("\xd4\x01\x90", 3, IR_MP_INTERNAL), CN_PARSE);     /* a list */
    T_ERR(t_mp_dec("\xd5\x01\x81\xa1", 4, IR_MP_INTERNAL), CN_PARSE); /* truncated map */
    T_ERR(t_mp_dec("\xd5\x01\x81\x01", 4, IR_MP_INTERNAL), CN_PARSE); /* truncated map */
    T_ERR(t_mp_dec("\xd5\x01\x80\x80", 4, IR_MP_INTERNAL), CN_PARSE); /* trailing in payload */
    T_ERR(t_mp_dec("\xd6\x01\x81\x01\x02\x03", 6, IR_MP_INTERNAL), CN_PARSE);
    T_ERR(t_mp_dec("\xd5\x01\x81\x01\x02", 5, IR_MP_INTERNAL), CN_PARSE); /* trailing outside */
    T_ERR(t_mp_dec("\xd6\x01\x81\xa1"
                   "k\xc1",
                   6, IR_MP_INTERNAL),
          CN_PARSE);                                             /* reserved */
    T_ERR(t_mp_dec("\xd4\x02\x80", 3, IR_MP_INTERNAL), CN_TYPE); /* other type */
    /* Non-string key and bad UTF-8 inside the payload. */
    T_ERR(t_mp_dec("\xc7\x03\x01\x81\x01\x02", 6, IR_MP_INTERNAL), CN_TYPE);
    T_ERR(t_mp_dec("\xc7\x04\x01\x81\xa1\xff\x02", 7, IR_MP_INTERNAL), CN_UTF8);
    /* An ext holding an error ext is not a map, although it would decode to one. */
    T_ERR(t_mp_dec("\xc7\x03\x01\xd4\x01\x80", 6, IR_MP_INTERNAL), CN_PARSE);
    /* The empty error map is fine. */
    T_OK(t_mp_dec("\xd4\x01\x80", 3, IR_MP_INTERNAL));
}

Test(ir_value, msgpack_error_ext_depth)
{
    struct ir_val inner, v;
    struct cn_buf b = CN_BUF_INIT;
    unsigned char raw[64];
    int i;

    /* The wrapper adds no level: 30 lists, an error map at level 31, a scalar at 32. */
    T_OK(ir_map_new(1, &inner));
    T_OK(ir_map_set_cstr(&inner, "k", ir_int(1)));
    ir_map_set_error(&inner, true);
    v = t_nest(30, inner);
    T_OK(ir_val_to_msgpack(v, IR_MP_INTERNAL, &b));
    T_OK(t_mp_dec(b.data, b.len, IR_MP_INTERNAL));
    cn_buf_clear(&b);
    ir_val_release(v);

    T_OK(ir_map_new(1, &inner));
    T_OK(ir_map_set_cstr(&inner, "k", ir_int(1)));
    ir_map_set_error(&inner, true);
    v = t_nest(31, inner);
    T_ERR(ir_val_to_msgpack(v, IR_MP_INTERNAL, &b), CN_DEPTH);
    cn_buf_fini(&b);
    ir_val_release(v);

    /* Hand-made: 31 lists, ext at level 32 holding {"k": 1}: the 1 is at level 33. */
    for (i = 0; i < 31; i++) {
        raw[i] = 0x91;
    }
    memcpy(raw + 31, "\xd6\x01\x81\xa1k\x01", 6);
    T_ERR(t_mp_dec(raw, 37, IR_MP_INTERNAL), CN_DEPTH);
    /* ... while an empty error map there is depth 32. */
    memcpy(raw + 31, "\xd4\x01\x80", 3);
    T_OK(t_mp_dec(raw, 34, IR_MP_INTERNAL));
}

/* ---- seeded property tests ---- */

struct t_rng {
    uint64_t s;
};

static uint64_t
t_next(struct t_rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static uint64_t
t_below(struct t_rng *r, uint64_t n)
{
    return t_next(r) % n;
}

static struct ir_val
t_rand_str(struct t_rng *r, bool key)
{
    char buf[16 * 4];
    size_t n = t_below(r, key ? 6 : 16), i, o = 0;
    uint32_t cp;
    struct ir_val v;

    for (i = 0; i < n; i++) {
        switch (t_below(r, 6)) {
        case 0:
            cp = (uint32_t) t_below(r, 0x20); /* controls, NUL included */
            if (key && cp == 0) {
                cp = 'k'; /* jansson cannot hold NUL in object keys */
            }
            break;
        case 1:
            cp = "'\"\\ az/"[t_below(r, 7)];
            break;
        case 2:
            cp = 0x80 + (uint32_t) t_below(r, 0x780);
            break;
        case 3:
            do {
                cp = 0x800 + (uint32_t) t_below(r, 0x10000 - 0x800);
            } while (cp >= 0xd800 && cp <= 0xdfff);
            break;
        case 4:
            cp = 0x10000 + (uint32_t) t_below(r, 0x110000 - 0x10000);
            break;
        default:
            cp = 0x20 + (uint32_t) t_below(r, 0x5f);
            break;
        }
        o += cn_utf8_put(buf + o, cp);
    }
    T_OK(ir_str_new(buf, o, &v));
    return v;
}

static double
t_rand_float(struct t_rng *r, bool finite)
{
    static const double special[] = {0.0,
                                     -0.0,
                                     5e-324,
                                     -5e-324,
                                     2.2250738585072009e-308,
                                     0.1,
                                     3.0,
                                     1e16,
                                     1e-5,
                                     -1.7976931348623157e308,
                                     0.5,
                                     1e22,
                                     123456789012345.0};
    uint64_t bits;
    double f;

    switch (t_below(r, 4)) {
    case 0:
        return special[t_below(r, sizeof(special) / sizeof(special[0]))];
    case 1:
        return (double) (int64_t) (t_next(r) >> 11) / 1024.0;
    case 2:
        bits = t_next(r) & UINT64_C(0x800fffffffffffff); /* subnormal */
        memcpy(&f, &bits, sizeof(f));
        return f;
    default:
        do {
            bits = t_next(r);
            memcpy(&f, &bits, sizeof(f));
        } while (finite && !isfinite(f));
        return f;
    }
}

static int64_t
t_rand_int(struct t_rng *r)
{
    switch (t_below(r, 5)) {
    case 0:
        return INT64_MAX - (int64_t) t_below(r, 300);
    case 1:
        return INT64_MIN + (int64_t) t_below(r, 300);
    case 2:
        return (int64_t) t_below(r, 300) - 150;
    case 3:
        return (int64_t) (t_next(r) >> t_below(r, 64));
    default:
        return (int64_t) t_next(r);
    }
}

/* json: only what JSON can carry back exactly (finite floats, no error flags). */
static struct ir_val
t_rand_val(struct t_rng *r, int depth, bool json)
{
    struct ir_val v;
    size_t n, i;
    uint64_t kind = t_below(r, depth >= 6 ? 6 : 9);

    switch (kind) {
    case 0:
        return ir_null();
    case 1:
        return ir_bool(t_below(r, 2) != 0);
    case 2:
        return ir_int(t_rand_int(r));
    case 3:
        return ir_float(t_rand_float(r, json));
    case 4:
    case 5:
        return t_rand_str(r, false);
    case 6:
        n = t_below(r, 6);
        T_OK(ir_list_new(n, &v));
        for (i = 0; i < n; i++) {
            ir_list_items(v)[i] = t_rand_val(r, depth + 1, json);
        }
        return v;
    default:
        n = t_below(r, 4) == 0 ? 9 + t_below(r, 12) : t_below(r, 5);
        T_OK(ir_map_new(n, &v));
        for (i = 0; i < n; i++) {
            T_OK(ir_map_set(&v, t_rand_str(r, true), t_rand_val(r, depth + 1, json)));
        }
        if (!json && t_below(r, 4) == 0) {
            ir_map_set_error(&v, true);
        }
        return v;
    }
}

/* Same as ir_val_same but ignoring error flags (what the plain encodings keep). */
static bool
t_same_plain(struct ir_val a, struct ir_val b)
{
    size_t i;

    if (a.type != b.type) {
        return false;
    }
    if (a.type == IR_T_LIST) {
        if (ir_list_len(a) != ir_list_len(b)) {
            return false;
        }
        for (i = 0; i < ir_list_len(a); i++) {
            if (!t_same_plain(ir_list_items(a)[i], ir_list_items(b)[i])) {
                return false;
            }
        }
        return true;
    }
    if (a.type == IR_T_MAP) {
        if (ir_map_len(a) != ir_map_len(b)) {
            return false;
        }
        for (i = 0; i < ir_map_len(a); i++) {
            if (!ir_val_same(ir_map_key_at(a, i), ir_map_key_at(b, i)) ||
                !t_same_plain(ir_map_val_at(a, i), ir_map_val_at(b, i))) {
                return false;
            }
        }
        return true;
    }
    return ir_val_same(a, b);
}

static bool
t_has_nan(struct ir_val v)
{
    size_t i;

    if (v.type == IR_T_FLOAT) {
        return isnan(v.u.f);
    }
    if (v.type == IR_T_LIST) {
        for (i = 0; i < ir_list_len(v); i++) {
            if (t_has_nan(ir_list_items(v)[i])) {
                return true;
            }
        }
    }
    if (v.type == IR_T_MAP) {
        for (i = 0; i < ir_map_len(v); i++) {
            if (t_has_nan(ir_map_val_at(v, i))) {
                return true;
            }
        }
    }
    return false;
}

/* Calls check on 500 random values from each of the four seeds (values JSON can carry if json),
 * with a cleared scratch buffer and the seed's and the value's index for its messages; the value
 * is released here. */
static void
t_each_rand_val(const uint64_t seeds[4], bool json,
                void (*check)(struct ir_val v, struct cn_buf *b, size_t s, int i))
{
    struct t_rng r;
    struct ir_val v;
    struct cn_buf b = CN_BUF_INIT;
    size_t s;
    int i;

    for (s = 0; s < 4; s++) {
        r.s = seeds[s];
        for (i = 0; i < 500; i++) {
            v = t_rand_val(&r, 1, json);
            cn_buf_clear(&b);
            check(v, &b, s, i);
            ir_val_release(v);
        }
    }
    cn_buf_fini(&b);
}

static void
t_msgpack_round_trip(struct ir_val v, struct cn_buf *b, size_t s, int i)
{
    struct ir_val back;
    struct cn_errmsg em = {{0}};

    T_OK(ir_val_to_msgpack(v, IR_MP_INTERNAL, b));
    T_OK(ir_val_from_msgpack(b->data, b->len, IR_MP_INTERNAL, &back, &em));
    cr_assert(ir_val_same(v, back), "seed %zu value %d", s, i);
    if (!t_has_nan(v)) {
        cr_assert(ir_val_equal(v, back));
        cr_assert_eq(ir_val_hash(v), ir_val_hash(back));
    }
    ir_val_release(back);

    cn_buf_clear(b);
    T_OK(ir_val_to_msgpack(v, IR_MP_PLAIN, b));
    T_OK(ir_val_from_msgpack(b->data, b->len, IR_MP_PLAIN, &back, &em));
    cr_assert(t_same_plain(v, back), "seed %zu value %d (plain)", s, i);
    ir_val_release(back);
}

Test(ir_value, property_msgpack_round_trip)
{
    static const uint64_t seeds[4] = {1, 0xdeadbeef, 0x1234567890abcdefu, 42};

    t_each_rand_val(seeds, false, t_msgpack_round_trip);
}

static void
t_json_round_trip(struct ir_val v, struct cn_buf *b, size_t s, int i)
{
    struct ir_val back;
    struct cn_errmsg em = {{0}};
    cn_err rv;

    T_OK(ir_val_to_json(v, b, &em));
    rv = ir_val_from_json(b->data, b->len, &back, &em);
    cr_assert_eq(rv, CN_OK, "seed %zu value %d: %s %s in %s", s, i, cn_errname(rv), em.text,
                 b->data);
    /* Strict: 3.0 must come back a float and 3 an int, maps in order. */
    cr_assert(ir_val_same(v, back), "seed %zu value %d: %s", s, i, b->data);
    cr_assert_eq(ir_val_hash(v), ir_val_hash(back));
    ir_val_release(back);
}

Test(ir_value, property_json_round_trip)
{
    static const uint64_t seeds[4] = {7, 0xfeedface, 0x0123456789abcdefu, 99};

    t_each_rand_val(seeds, true, t_json_round_trip);
}

/* Mutated encodings must decode cleanly or fail cleanly; what decodes must re-encode. */
Test(ir_value, property_mutated_inputs_never_crash)
{
    struct t_rng r = {0xabcdef12345u};
    struct ir_val v, back, again;
    struct cn_buf b = CN_BUF_INIT, b2 = CN_BUF_INIT;
    struct cn_errmsg em = {{0}};
    unsigned char *p;
    size_t n, k;
    int i, j;
    unsigned flags;

    for (i = 0; i < 3000; i++) {
        v = t_rand_val(&r, 1, i % 2 == 0);
        cn_buf_clear(&b);
        flags = i % 3 == 0 ? IR_MP_INTERNAL : IR_MP_PLAIN;
        if (i % 2 == 0) {
            T_OK(ir_val_to_json(v, &b, &em));
        } else {
            T_OK(ir_val_to_msgpack(v, flags, &b));
        }
        ir_val_release(v);
        p = (unsigned char *) b.data;
        n = b.len;
        for (j = 0; j < 1 + (int) t_below(&r, 4); j++) {
            k = (size_t) t_below(&r, n);
            switch (t_below(&r, 3)) {
            case 0:
                p[k] = (unsigned char) t_next(&r);
                break;
            case 1:
                p[k] ^= (unsigned char) (1u << t_below(&r, 8));
                break;
            default:
                n = k; /* truncate */
                break;
            }
            if (n == 0) {
                break;
            }
        }
        if (i % 2 == 0) {
            if (ir_val_from_json(b.data, n, &back, &em) != CN_OK) {
                continue;
            }
        } else if (ir_val_from_msgpack(b.data, n, flags, &back, &em) != CN_OK) {
            continue;
        }
        cn_buf_clear(&b2);
        T_OK(ir_val_to_msgpack(back, IR_MP_INTERNAL, &b2));
        T_OK(ir_val_from_msgpack(b2.data, b2.len, IR_MP_INTERNAL, &again, &em));
        cr_assert(ir_val_same(back, again));
        ir_val_release(again);
        ir_val_release(back);
    }
    cn_buf_fini(&b);
    cn_buf_fini(&b2);
}

Test(ir_value, deeper_than_is_bounded_cached_and_reset_by_builders)
{
    struct ir_val v = ir_int(1), w, m;
    int i;

    cr_assert(!ir_val_deeper_than(v, 1));
    cr_assert(ir_val_deeper_than(v, 0));
    /* Wrap 1 in 40 lists: depth 41. */
    for (i = 0; i < 40; i++) {
        T_OK(ir_list_new(1, &w));
        ir_list_items(w)[0] = v;
        v = w;
    }
    cr_assert(ir_val_deeper_than(v, 32));
    cr_assert(!ir_val_deeper_than(v, 41));
    cr_assert(ir_val_deeper_than(v, 40));
    /* Asking again (now cached) gives the same answers. */
    cr_assert(!ir_val_deeper_than(v, 41));
    cr_assert(ir_val_deeper_than(v, 40));
    /* A map's depth counts its values; setting a key resets what was measured. */
    T_OK(ir_map_new(1, &m));
    cr_assert(!ir_val_deeper_than(m, 1));
    T_OK(ir_map_set_cstr(&m, "k", ir_val_retain(v)));
    cr_assert(ir_val_deeper_than(m, 41));
    cr_assert(!ir_val_deeper_than(m, 42));
    ir_val_release(m);
    ir_val_release(v);
}
