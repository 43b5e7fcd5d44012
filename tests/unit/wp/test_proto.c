/* SPDX-License-Identifier: MIT */
/* Worker protocol codec tests: every kind round-trips; malformed, truncated, oversized,
 * wrong-typed and wrong-version messages are typed errors, never crashes. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "ir/error.h"
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
    m.prefetch = 16;
    round_trip(&m, &r, &b);
    cr_assert_str_eq(r.worker, "w1");
    cr_assert_str_eq(r.sdk, "libcairn-worker 0.1.0");
    cr_assert_str_eq(r.credential, "s3cret");
    cr_assert_eq(r.nactions, 2);
    cr_assert_str_eq(r.actions[1], "exec.report");
    cr_assert_eq(r.slots, 8);
    cr_assert_eq(r.prefetch, 16);
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

    wp_msg_init(&m, WP_READY); /* no outcomes: just asking for work */
    round_trip(&m, &r, &b);
    cr_assert_eq(r.noutcomes, 0);
    wp_msg_fini(&r);

    {
        struct wp_outcome o[2];

        memset(o, 0, sizeof(o));
        memset(o[0].exec_id, 0xab, 16);
        o[0].attempt = 2;
        o[0].token = 99;
        o[0].ok = true;
        o[0].value = json("{\"n\": [1, 2.5, \"x\"]}");
        memset(o[1].exec_id, 0xcd, 16);
        o[1].attempt = 1;
        o[1].token = 100;
        o[1].ok = false;
        o[1].value = json("{\"type\": \"KeyError\", \"message\": \"'k'\", \"bases\": "
                          "[\"LookupError\"], \"details\": null}");
        ir_map_set_error(&o[1].value, true); /* as a handler raises it */
        m.outcomes = o;
        m.noutcomes = 2;
        round_trip(&m, &r, &b);
        cr_assert_eq(r.noutcomes, 2);
        cr_assert(r.outcomes[0].ok);
        cr_assert_eq(r.outcomes[0].attempt, 2);
        cr_assert_eq(r.outcomes[0].token, 99);
        cr_assert(memcmp(r.outcomes[0].exec_id, o[0].exec_id, 16) == 0);
        cr_assert(ir_val_same(r.outcomes[0].value, o[0].value));
        cr_assert(!r.outcomes[1].ok);
        cr_assert_eq(r.outcomes[1].token, 100);
        cr_assert(ir_val_same(r.outcomes[1].value, o[1].value));
        /* The wire form is a plain map; `ok: false` makes it an error again for the executor. */
        cr_assert(ir_is_error(r.outcomes[1].value));
        cr_assert_str_eq(ir_error_type(r.outcomes[1].value), "KeyError");
        wp_msg_fini(&r);
        ir_val_release(o[0].value);
        ir_val_release(o[1].value);
    }

    {
        struct wp_dispatch d[2];

        memset(d, 0, sizeof(d));
        memset(d[0].instance_id, 1, 16);
        memset(d[0].exec_id, 2, 16);
        d[0].attempt = 1;
        d[0].token = 7;
        d[0].action = "std.echo";
        d[0].kwargs = json("{\"value\": {\"deep\": [[1]]}}");
        d[0].deadline_ms = 1700000000123LL;
        d[1] = d[0];
        d[1].token = 8;
        d[1].action = "std.noop";
        d[1].kwargs = json("{}");
        d[1].deadline_ms = 0;
        d[1].timeout_ms = 30000; /* counted by the worker from its start: optional on the wire */
        d[1].attempt = 2;        /* a retry: it carries the previous attempt's error */
        cr_assert_eq(
            ir_error_new("Timeout", "took too long", ir_null(), ir_null(), &d[1].last_error),
            CN_OK);
        wp_msg_init(&m, WP_DISPATCH);
        m.items = d;
        m.nitems = 2;
        round_trip(&m, &r, &b);
        cr_assert_eq(r.nitems, 2);
        cr_assert_str_eq(r.items[0].action, "std.echo");
        cr_assert_eq(r.items[0].token, 7);
        cr_assert_eq(r.items[0].deadline_ms, 1700000000123LL);
        cr_assert(memcmp(r.items[0].instance_id, d[0].instance_id, 16) == 0);
        cr_assert(ir_val_same(r.items[0].kwargs, d[0].kwargs));
        cr_assert_str_eq(r.items[1].action, "std.noop");
        cr_assert_eq(r.items[1].token, 8);
        cr_assert_eq(r.items[1].deadline_ms, 0);
        cr_assert_eq(r.items[0].timeout_ms, 0, "absent: none");
        cr_assert_eq(r.items[1].timeout_ms, 30000);
        cr_assert_eq(r.items[0].last_error.type, IR_T_NULL, "a first attempt carries none");
        cr_assert(ir_is_error(r.items[1].last_error), "decoded as an error value");
        cr_assert_str_eq(ir_error_type(r.items[1].last_error), "Timeout");
        cr_assert(ir_val_same(r.items[1].last_error, d[1].last_error));
        wp_msg_fini(&r);
        ir_val_release(d[0].kwargs);
        ir_val_release(d[1].kwargs);
        ir_val_release(d[1].last_error);
    }

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

    wp_msg_init(&m, WP_DISPATCH); /* no attempts */
    T_ERR(wp_msg_encode(&m, &b), CN_INVAL);
    {
        struct wp_dispatch d;

        memset(&d, 0, sizeof(d)); /* no action, no kwargs */
        m.items = &d;
        m.nitems = 1;
        T_ERR(wp_msg_encode(&m, &b), CN_INVAL);
    }
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
#define S_DISPATCH \
    "\x09\xa8"     \
    "dispatch"
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
    /* Maps packed from alternating keys and msgpack fragments (NULL-ended), what decoding
     * them gives, and a word the error must name (NULL: not checked). */
    static const struct {
        const char *kv[16];
        cn_err want;
        const char *names;
    } raw[] = {
        {{"v", V1, "kind", S_NOOP}, CN_OK, NULL},
        {{"v", V2, "kind", S_NOOP}, CN_VERSION, NULL},
        {{"kind", S_NOOP}, CN_PROTO, NULL},
        {{"v", V1, "kind", S_BOGUS}, CN_PROTO, NULL},
        {{"v", V1}, CN_PROTO, NULL},
        /* ready without outcomes; with a string for them; with a non-map outcome */
        {{"v", V1, "kind", S_READY}, CN_PROTO, "outcomes"},
        {{"v", V1, "kind", S_READY, "outcomes", STR_W}, CN_PROTO, NULL},
        {{"v", V1, "kind", S_READY, "outcomes", "\x02\x91\x03"}, CN_PROTO, "outcome"},
        {{"v", V1, "kind", S_READY, "outcomes", ARR0}, CN_OK, NULL},
        /* a dispatch must carry at least one attempt */
        {{"v", V1, "kind", S_DISPATCH, "items", ARR0}, CN_PROTO, "items"},
        /* hello: prefetch is optional, but bounded */
        {{"v", V1, "kind", S_HELLO, "worker", STR_W, "sdk", STR_W, "actions", ARR0, "slots", U3,
          "prefetch", "\x03\xcd\x10\x01"},
         CN_PROTO,
         "prefetch"},
        /* hello with zero slots / missing actions / nil worker */
        {{"v", V1, "kind", S_HELLO, "worker", STR_W, "sdk", STR_W, "actions", ARR0, "slots",
          "\x01\x00"},
         CN_PROTO,
         NULL},
        {{"v", V1, "kind", S_HELLO, "worker", STR_W, "sdk", STR_W, "slots", U3}, CN_PROTO, NULL},
        {{"v", V1, "kind", S_HELLO, "worker", NIL, "sdk", STR_W, "actions", ARR0, "slots", U3},
         CN_PROTO,
         NULL},
        /* unknown extra fields are ignored (a newer peer may add optional ones) */
        {{"v", V1, "kind", S_HELLO, "worker", STR_W, "sdk", STR_W, "actions", ARR0, "slots", U3,
          "zz", U3},
         CN_OK,
         NULL},
        /* names with NUL bytes would be cut short as C strings */
        {{"v", V1, "kind", S_HELLO, "worker", "\x04\xa3w\x00x", "sdk", STR_W, "actions", ARR0,
          "slots", U3},
         CN_PROTO,
         NULL},
        {{"v", V1, "kind", S_HELLO, "worker", STR_W, "sdk", STR_W, "actions", "\x04\x91\xa2\x00y",
          "slots", U3},
         CN_PROTO,
         NULL},
    };
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;

    for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
        size_t n = 0;
        cn_err rv;

        while (n < sizeof(raw[i].kv) / sizeof(raw[i].kv[0]) && raw[i].kv[n] != NULL) {
            n++;
        }
        pack_raw(&b, raw[i].kv, n);
        rv = decode(&b, &em);
        cr_assert_eq(rv, raw[i].want, "case %zu: %s, want %s", i, cn_errname(rv),
                     cn_errname(raw[i].want));
        if (raw[i].names != NULL) {
            cr_assert(strstr(em.text, raw[i].names) != NULL, "case %zu: %s", i, em.text);
        }
    }
    /* a previous error that is not an error map (no string "type") */
    {
        struct wp_msg m;
        struct wp_dispatch d;
        memset(&d, 0, sizeof(d));
        d.attempt = 2;
        d.action = "std.echo";
        d.kwargs = json("{}");
        d.last_error = json("{\"no\": 1}");
        wp_msg_init(&m, WP_DISPATCH);
        m.items = &d;
        m.nitems = 1;
        cn_buf_clear(&b);
        T_OK(wp_msg_encode(&m, &b));
        T_ERR(decode(&b, &em), CN_PROTO);
        cr_assert(strstr(em.text, "last_error") != NULL, "%s", em.text);
        ir_val_release(d.kwargs);
        ir_val_release(d.last_error);
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
    struct wp_dispatch d;
    struct wp_outcome o;
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;
    size_t i, n;

    wp_msg_init(&msgs[0], WP_HELLO);
    msgs[0].worker = "w";
    msgs[0].sdk = "c";
    msgs[0].actions = actions;
    msgs[0].nactions = 1;
    msgs[0].slots = 1;
    memset(&d, 0, sizeof(d));
    d.attempt = 1;
    d.action = "std.echo";
    d.kwargs = json("{\"value\": [1, 2, 3]}");
    wp_msg_init(&msgs[1], WP_DISPATCH);
    msgs[1].items = &d;
    msgs[1].nitems = 1;
    memset(&o, 0, sizeof(o));
    o.attempt = 1;
    o.ok = true;
    o.value = json("\"done\"");
    wp_msg_init(&msgs[2], WP_READY);
    msgs[2].outcomes = &o;
    msgs[2].noutcomes = 1;
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
    ir_val_release(d.kwargs);
    ir_val_release(o.value);
    cn_buf_fini(&b);
}

Test(wp_proto, errors_must_carry_a_type_and_kwargs_must_be_a_map)
{
    struct wp_msg m, r;
    struct wp_outcome o;
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;

    memset(&o, 0, sizeof(o));
    wp_msg_init(&m, WP_READY);
    m.outcomes = &o;
    m.noutcomes = 1;
    o.attempt = 1;
    o.ok = false;
    o.value = json("{\"message\": \"no type\"}");
    T_OK(wp_msg_encode(&m, &b));
    T_ERR(wp_msg_decode(b.data, b.len, &r, &em), CN_PROTO);
    cr_assert(strstr(em.text, "type") != NULL, "%s", em.text);
    ir_val_release(o.value);
    /* A successful result shaped like an error stays a plain result. */
    o.ok = true;
    o.value = json("{\"type\": \"KeyError\", \"message\": \"m\"}");
    cn_buf_clear(&b);
    T_OK(wp_msg_encode(&m, &b));
    T_OK(wp_msg_decode(b.data, b.len, &r, &em));
    cr_assert(r.outcomes[0].ok);
    cr_assert(!ir_map_is_error(r.outcomes[0].value));
    wp_msg_fini(&r);
    ir_val_release(o.value);
    cn_buf_fini(&b);
}

/* A batch takes entries until the next one would pass the size limit, leaves itself intact
 * when refusing one, and says CN_TOOBIG for an entry that could never fit. */
Test(wp_proto, batches_stop_at_the_size_limit_and_stay_valid)
{
    struct wp_batch b;
    struct wp_outcome o;
    struct wp_msg r;
    struct cn_errmsg em;
    char *text = malloc(3u << 20);
    uint32_t added = 0;
    size_t len;
    cn_err rv;

    cr_assert_not_null(text);
    memset(text, 'x', (3u << 20) - 1);
    text[(3u << 20) - 1] = '\0';
    memset(&o, 0, sizeof(o));
    o.attempt = 1;
    o.ok = true;
    T_OK(ir_str_new(text, strlen(text), &o.value)); /* 3 MiB each: five fit in 16 MiB */
    T_OK(wp_batch_begin(&b, WP_READY));
    while ((rv = wp_batch_add_outcome(&b, &o)) == CN_OK) {
        o.token++;
        added++;
    }
    T_ERR(rv, CN_TOOBIG);
    cr_assert_eq(added, 5);
    len = b.buf.len;
    cr_assert_leq(len, WP_MAX_BODY);
    wp_batch_finish(&b);
    cr_assert_eq(b.buf.len, len, "a refused entry left bytes behind");
    cr_assert_eq(wp_msg_decode(b.buf.data, b.buf.len, &r, &em), CN_OK, "%s", em.text);
    cr_assert_eq(r.noutcomes, 5);
    cr_assert_eq(r.outcomes[4].token, 4);
    wp_msg_fini(&r);
    wp_batch_fini(&b);
    ir_val_release(o.value);
    free(text);

    /* alone and too large */
    text = malloc(WP_MAX_MSG + 1);
    cr_assert_not_null(text);
    memset(text, 'y', WP_MAX_MSG);
    T_OK(ir_str_new(text, WP_MAX_MSG, &o.value));
    T_OK(wp_batch_begin(&b, WP_READY));
    T_ERR(wp_batch_add_outcome(&b, &o), CN_TOOBIG);
    cr_assert_eq(b.n, 0);
    wp_batch_fini(&b);
    ir_val_release(o.value);
    free(text);
}

Test(wp_proto, batches_hold_at_most_the_entry_limit)
{
    struct wp_batch b;
    struct wp_dispatch d;
    struct wp_msg r;
    struct cn_errmsg em;
    uint32_t i;

    memset(&d, 0, sizeof(d));
    d.attempt = 1;
    d.action = "std.noop";
    T_OK(ir_map_new(0, &d.kwargs));
    T_ERR(wp_batch_begin(&b, WP_HELLO), CN_INVAL);
    T_OK(wp_batch_begin(&b, WP_DISPATCH));
    for (i = 0; i < WP_MAX_BATCH; i++) {
        d.token = i;
        T_OK(wp_batch_add_dispatch(&b, &d));
    }
    T_ERR(wp_batch_add_dispatch(&b, &d), CN_TOOBIG);
    wp_batch_finish(&b);
    cr_assert_eq(wp_msg_decode(b.buf.data, b.buf.len, &r, &em), CN_OK, "%s", em.text);
    cr_assert_eq(r.nitems, WP_MAX_BATCH);
    cr_assert_eq(r.items[WP_MAX_BATCH - 1].token, WP_MAX_BATCH - 1);
    wp_msg_fini(&r);
    wp_batch_fini(&b);
    ir_val_release(d.kwargs);
}

/* `room` on a ready: optional (absent means the runner's own count), round-trips from both
 * encoders, and is checked against the batch limit. */
Test(wp_proto, ready_carries_optional_room)
{
    struct cn_buf b = CN_BUF_INIT;
    struct cn_errmsg em;
    struct wp_batch bt;
    struct wp_msg m, r;

    wp_msg_init(&m, WP_READY);
    cr_assert_eq(m.room, WP_ROOM_ANY);
    round_trip(&m, &r, &b);
    cr_assert_eq(r.room, WP_ROOM_ANY, "a ready without room decodes as WP_ROOM_ANY");
    wp_msg_fini(&r);
    m.room = 0;
    round_trip(&m, &r, &b);
    cr_assert_eq(r.room, 0);
    wp_msg_fini(&r);
    m.room = 7;
    round_trip(&m, &r, &b);
    cr_assert_eq(r.room, 7);
    wp_msg_fini(&r);

    T_OK(wp_batch_begin_ready(&bt, 3));
    wp_batch_finish(&bt);
    cr_assert_eq(wp_msg_decode(bt.buf.data, bt.buf.len, &r, &em), CN_OK, "%s", em.text);
    cr_assert_eq(r.kind, WP_READY);
    cr_assert_eq(r.room, 3);
    cr_assert_eq(r.noutcomes, 0);
    wp_msg_fini(&r);
    wp_batch_fini(&bt);
    T_ERR(wp_batch_begin_ready(&bt, WP_MAX_BATCH + 1), CN_INVAL);

    {
        const char *kv[] = {"v",        V1,  "kind", S_READY, "room", "\x03\xcd\x20\x01",
                            "outcomes", ARR0}; /* 8193 */
        pack_raw(&b, kv, 8);
        T_ERR(decode(&b, &em), CN_PROTO);
        cr_assert(strstr(em.text, "room") != NULL, "%s", em.text);
    }
    {
        const char *kv[] = {"v", V1, "kind", S_READY, "room", STR_W, "outcomes", ARR0};
        pack_raw(&b, kv, 8);
        T_ERR(decode(&b, &em), CN_PROTO);
        cr_assert(strstr(em.text, "room") != NULL, "%s", em.text);
    }
    cn_buf_fini(&b);
}
