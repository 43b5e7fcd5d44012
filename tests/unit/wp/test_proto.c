/* SPDX-License-Identifier: MIT */
/* Worker protocol codec tests: every kind round-trips; malformed, truncated, oversized,
 * wrong-typed and wrong-version messages are typed errors, never crashes. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "ir/eval.h"
#include "tests/support/compile_util.h"
#include "tests/support/leak.h"
#include "worker-protocol/proto.h"

TestSuite(wp_proto, .fini = t_leak_check, .timeout = 30);

static struct ir_val
json(const char *text)
{
    struct ir_val v;
    struct cn_errmsg em;

    cr_assert_eq(ir_val_from_json(text, strlen(text), &v, &em), CN_OK, "%s", em.text);
    return v;
}

static void
round_trip(const struct wp_msg *in, struct wp_msg *out, struct cn_buf *b)
{
    struct cn_errmsg em = {{0}};

    cn_buf_clear(b);
    T_OK(wp_msg_encode(in, b));
    cr_assert_eq(wp_msg_decode(b->data, b->len, out, &em), CN_OK, "%s", em.text);
    cr_assert_eq(out->kind, in->kind);
}

Test(wp_proto, every_kind_round_trips)
{
    static const char *actions[] = {"std.echo", "exec.report"};
    struct wp_msg m, r;
    struct cn_buf b = CN_BUF_INIT;
    enum wp_kind bare[] = {WP_CONTROL, WP_GOODBYE, WP_NOOP, WP_ACK};
    size_t i;

    wp_msg_init(&m, WP_HELLO);
    m.worker = "w1";
    m.sdk = "libcairn-worker 0.1.0";
    m.credential = "s3cret";
    m.actions = actions;
    m.nactions = 2;
    m.slots = 8;
    round_trip(&m, &r, &b);
    cr_assert_str_eq(r.worker, "w1");
    cr_assert_str_eq(r.sdk, "libcairn-worker 0.1.0");
    cr_assert_str_eq(r.credential, "s3cret");
    cr_assert_eq(r.nactions, 2);
    cr_assert_str_eq(r.actions[1], "exec.report");
    cr_assert_eq(r.slots, 8);
    wp_msg_fini(&r);

    m.credential = NULL;
    round_trip(&m, &r, &b);
    cr_assert_null(r.credential);
    wp_msg_fini(&r);

    wp_msg_init(&m, WP_WELCOME);
    m.session = 1234567890123ULL;
    m.idle_ms = 20000;
    round_trip(&m, &r, &b);
    cr_assert_eq(r.session, 1234567890123ULL);
    cr_assert_eq(r.idle_ms, 20000);
    wp_msg_fini(&r);

    wp_msg_init(&m, WP_REFUSED);
    m.reason = "bad credential";
    round_trip(&m, &r, &b);
    cr_assert_str_eq(r.reason, "bad credential");
    wp_msg_fini(&r);

    wp_msg_init(&m, WP_READY);
    m.slot = 3;
    round_trip(&m, &r, &b);
    cr_assert_eq(r.slot, 3);
    cr_assert(!r.has_outcome);
    wp_msg_fini(&r);

    m.has_outcome = true;
    memset(m.outcome.exec_id, 0xab, 16);
    m.outcome.attempt = 2;
    m.outcome.token = 99;
    m.outcome.ok = true;
    m.outcome.value = json("{\"n\": [1, 2.5, \"x\"]}");
    round_trip(&m, &r, &b);
    cr_assert(r.has_outcome && r.outcome.ok);
    cr_assert_eq(r.outcome.attempt, 2);
    cr_assert_eq(r.outcome.token, 99);
    cr_assert(memcmp(r.outcome.exec_id, m.outcome.exec_id, 16) == 0);
    cr_assert(ir_val_same(r.outcome.value, m.outcome.value));
    wp_msg_fini(&r);
    ir_val_release(m.outcome.value);

    m.outcome.ok = false;
    m.outcome.value = json("{\"type\": \"KeyError\", \"message\": \"'k'\", \"bases\": "
                           "[\"LookupError\"], \"details\": null}");
    ir_map_set_error(&m.outcome.value, true); /* as a handler raises it */
    round_trip(&m, &r, &b);
    cr_assert(!r.outcome.ok);
    cr_assert(ir_val_same(r.outcome.value, m.outcome.value));
    /* The wire form is a plain map; `ok: false` makes it an error again for the executor. */
    cr_assert(ir_is_error(r.outcome.value));
    cr_assert_str_eq(ir_error_type(r.outcome.value), "KeyError");
    wp_msg_fini(&r);
    ir_val_release(m.outcome.value);

    wp_msg_init(&m, WP_DISPATCH);
    memset(m.instance_id, 1, 16);
    memset(m.exec_id, 2, 16);
    m.attempt = 1;
    m.token = 7;
    m.action = "std.echo";
    m.kwargs = json("{\"value\": {\"deep\": [[1]]}}");
    m.deadline_ms = 1700000000123LL;
    round_trip(&m, &r, &b);
    cr_assert_str_eq(r.action, "std.echo");
    cr_assert_eq(r.token, 7);
    cr_assert_eq(r.deadline_ms, 1700000000123LL);
    cr_assert(memcmp(r.instance_id, m.instance_id, 16) == 0);
    cr_assert(ir_val_same(r.kwargs, m.kwargs));
    wp_msg_fini(&r);
    ir_val_release(m.kwargs);

    wp_msg_init(&m, WP_CANCEL);
    memset(m.exec_id, 5, 16);
    m.attempt = 4;
    m.token = 11;
    round_trip(&m, &r, &b);
    cr_assert_eq(r.attempt, 4);
    cr_assert_eq(r.token, 11);
    wp_msg_fini(&r);

    for (i = 0; i < sizeof(bare) / sizeof(bare[0]); i++) {
        wp_msg_init(&m, bare[i]);
        round_trip(&m, &r, &b);
        wp_msg_fini(&r);
    }
    cn_buf_fini(&b);
}

Test(wp_proto, encode_refuses_incomplete_messages)
{
    struct wp_msg m;
    struct cn_buf b = CN_BUF_INIT;

    wp_msg_init(&m, WP_DISPATCH); /* no action, no kwargs */
    T_ERR(wp_msg_encode(&m, &b), CN_INVAL);
    wp_msg_init(&m, WP_HELLO); /* no name */
    T_ERR(wp_msg_encode(&m, &b), CN_INVAL);
    cn_buf_fini(&b);
}

/* Packs a map from alternating keys and pre-encoded msgpack fragments. */
static void
pack_raw(struct cn_buf *b, const char *const *kv, size_t n)
{
    size_t i;
    unsigned char hdr = (unsigned char) (0x80 | (n / 2));

    cn_buf_clear(b);
    T_OK(cn_buf_append(b, &hdr, 1));
    for (i = 0; i + 1 < n; i += 2) {
        unsigned char sh = (unsigned char) (0xa0 | strlen(kv[i]));
        T_OK(cn_buf_append(b, &sh, 1));
        T_OK(cn_buf_puts(b, kv[i]));
        T_OK(cn_buf_append(b, kv[i + 1] + 1, (unsigned char) kv[i + 1][0]));
    }
}

static cn_err
decode(const struct cn_buf *b, struct cn_errmsg *em)
{
    struct wp_msg m;
    cn_err rv = wp_msg_decode(b->data, b->len, &m, em);

    if (rv == CN_OK) {
        wp_msg_fini(&m);
    }
    return rv;
}

/* Fragments: first byte is the length of the msgpack that follows. */
#define V1      "\x01\x01"
#define V2      "\x01\x02"
#define S_NOOP  "\x05\xa4noop"
#define S_READY "\x06\xa5ready"
#define S_HELLO "\x06\xa5hello"
#define S_BOGUS \
    "\x06\xa5"  \
    "bogus"
#define U3    "\x01\x03"
#define STR_W "\x03\xa2w1"
#define ARR0  "\x01\x90"
#define NIL   "\x01\xc0"

Test(wp_proto, malformed_messages_are_typed_errors)
{
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;

    {
        const char *kv[] = {"v", V1, "kind", S_NOOP};
        pack_raw(&b, kv, 4);
        T_OK(decode(&b, &em));
    }
    {
        const char *kv[] = {"v", V2, "kind", S_NOOP};
        pack_raw(&b, kv, 4);
        T_ERR(decode(&b, &em), CN_VERSION);
    }
    {
        const char *kv[] = {"kind", S_NOOP};
        pack_raw(&b, kv, 2);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    {
        const char *kv[] = {"v", V1, "kind", S_BOGUS};
        pack_raw(&b, kv, 4);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    {
        const char *kv[] = {"v", V1};
        pack_raw(&b, kv, 2);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    /* ready without a slot; with a string slot */
    {
        const char *kv[] = {"v", V1, "kind", S_READY};
        pack_raw(&b, kv, 4);
        T_ERR(decode(&b, &em), CN_PROTO);
        cr_assert(strstr(em.text, "slot") != NULL, "%s", em.text);
    }
    {
        const char *kv[] = {"v", V1, "kind", S_READY, "slot", STR_W};
        pack_raw(&b, kv, 6);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    /* ready with a non-map outcome */
    {
        const char *kv[] = {"v", V1, "kind", S_READY, "slot", U3, "outcome", U3};
        pack_raw(&b, kv, 8);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    /* hello with zero slots / missing actions / nil worker */
    {
        const char *kv[] = {"v",   V1,    "kind",    S_HELLO, "worker", STR_W,
                            "sdk", STR_W, "actions", ARR0,    "slots",  "\x01\x00"};
        pack_raw(&b, kv, 12);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    {
        const char *kv[] = {"v", V1, "kind", S_HELLO, "worker", STR_W, "sdk", STR_W, "slots", U3};
        pack_raw(&b, kv, 10);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    {
        const char *kv[] = {"v",   V1,    "kind",    S_HELLO, "worker", NIL,
                            "sdk", STR_W, "actions", ARR0,    "slots",  U3};
        pack_raw(&b, kv, 12);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    /* unknown extra fields are ignored (a newer peer may add optional ones) */
    {
        const char *kv[] = {"v",   V1,        "kind", S_HELLO, "worker", STR_W, "sdk",
                            STR_W, "actions", ARR0,   "slots", U3,       "zz",  U3};
        pack_raw(&b, kv, 14);
        T_OK(decode(&b, &em));
    }
    /* names with NUL bytes would be cut short as C strings */
    {
        const char *kv[] = {"v",   V1,    "kind",    S_HELLO, "worker", "\x04\xa3w\x00x",
                            "sdk", STR_W, "actions", ARR0,    "slots",  U3};
        pack_raw(&b, kv, 12);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    {
        const char *kv[] = {"v",     V1,    "kind", S_HELLO,   "worker",
                            STR_W,   "sdk", STR_W,  "actions", "\x04\x91\xa2\x00y",
                            "slots", U3};
        pack_raw(&b, kv, 12);
        T_ERR(decode(&b, &em), CN_PROTO);
    }
    /* not a map, garbage, trailing bytes */
    T_ERR(wp_msg_decode("\x93\x01\x02\x03", 4, &(struct wp_msg){0}, &em), CN_PROTO);
    T_ERR(wp_msg_decode("\xc1", 1, &(struct wp_msg){0}, &em), CN_PROTO);
    T_ERR(wp_msg_decode("\x80\x00", 2, &(struct wp_msg){0}, &em), CN_PROTO);
    cn_buf_fini(&b);
}

Test(wp_proto, hostile_sizes_are_refused_without_allocating)
{
    struct wp_msg m;
    struct cn_errmsg em;
    /* map32 / array32 / str32 headers claiming billions of entries in a few bytes */
    static const unsigned char map32[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 0x76, 0x01};
    static const unsigned char arr32[] = {0xdd, 0x7f, 0xff, 0xff, 0xff, 0x01};
    static const unsigned char str32[] = {0x81, 0xa1, 0x76, 0xdb, 0xff, 0xff, 0xff, 0xf0, 0x41};
    char *big;

    T_ERR(wp_msg_decode(map32, sizeof(map32), &m, &em), CN_PROTO);
    T_ERR(wp_msg_decode(arr32, sizeof(arr32), &m, &em), CN_PROTO);
    T_ERR(wp_msg_decode(str32, sizeof(str32), &m, &em), CN_PROTO);
    big = calloc(1, WP_MAX_MSG + 1);
    cr_assert_not_null(big);
    T_ERR(wp_msg_decode(big, WP_MAX_MSG + 1, &m, &em), CN_TOOBIG);
    free(big);
}

Test(wp_proto, every_truncation_of_every_kind_is_an_error)
{
    static const char *actions[] = {"std.echo"};
    struct wp_msg msgs[4], r;
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;
    size_t i, n;

    wp_msg_init(&msgs[0], WP_HELLO);
    msgs[0].worker = "w";
    msgs[0].sdk = "c";
    msgs[0].actions = actions;
    msgs[0].nactions = 1;
    msgs[0].slots = 1;
    wp_msg_init(&msgs[1], WP_DISPATCH);
    msgs[1].attempt = 1;
    msgs[1].action = "std.echo";
    msgs[1].kwargs = json("{\"value\": [1, 2, 3]}");
    wp_msg_init(&msgs[2], WP_READY);
    msgs[2].has_outcome = true;
    msgs[2].outcome.attempt = 1;
    msgs[2].outcome.ok = true;
    msgs[2].outcome.value = json("\"done\"");
    wp_msg_init(&msgs[3], WP_CANCEL);
    msgs[3].attempt = 1;
    for (i = 0; i < 4; i++) {
        cn_buf_clear(&b);
        T_OK(wp_msg_encode(&msgs[i], &b));
        for (n = 0; n < b.len; n++) {
            cr_assert_neq(wp_msg_decode(b.data, n, &r, &em), CN_OK, "%s: %zu-byte prefix accepted",
                          wp_kind_name(msgs[i].kind), n);
        }
        T_OK(wp_msg_decode(b.data, b.len, &r, &em));
        wp_msg_fini(&r);
    }
    ir_val_release(msgs[1].kwargs);
    ir_val_release(msgs[2].outcome.value);
    cn_buf_fini(&b);
}

Test(wp_proto, errors_must_carry_a_type_and_kwargs_must_be_a_map)
{
    struct wp_msg m, r;
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;

    wp_msg_init(&m, WP_READY);
    m.has_outcome = true;
    m.outcome.attempt = 1;
    m.outcome.ok = false;
    m.outcome.value = json("{\"message\": \"no type\"}");
    T_OK(wp_msg_encode(&m, &b));
    T_ERR(wp_msg_decode(b.data, b.len, &r, &em), CN_PROTO);
    cr_assert(strstr(em.text, "type") != NULL, "%s", em.text);
    ir_val_release(m.outcome.value);
    /* A successful result shaped like an error stays a plain result. */
    m.outcome.ok = true;
    m.outcome.value = json("{\"type\": \"KeyError\", \"message\": \"m\"}");
    cn_buf_clear(&b);
    T_OK(wp_msg_encode(&m, &b));
    T_OK(wp_msg_decode(b.data, b.len, &r, &em));
    cr_assert(r.outcome.ok);
    cr_assert(!ir_map_is_error(r.outcome.value));
    wp_msg_fini(&r);
    ir_val_release(m.outcome.value);
    cn_buf_fini(&b);
}
