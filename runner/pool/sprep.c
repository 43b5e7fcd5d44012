/* SPDX-License-Identifier: MIT */
/*
 * The worker port's transport (see sprep.h for the contract and the wire).
 *
 * DESIGN
 * - One accept is outstanding at a time: nng's listener takes a connection from the kernel only
 *   while one is, so not re-arming it is how accepting stops.
 * - A connection has two loops, each one aio: receiving (the handshake, then length, body,
 *   length, ...) and sending (the handshake first, then the queued replies, one at a time).
 *   Reads and writes may complete short; both loops carry on from where they stopped.
 * - A connection is counted once per loop still running plus once while it is in the table;
 *   the last to let go frees it. The receive loop alone reports `closed`, after its last
 *   request, so a connection's callbacks never overlap and `closed` is always last.
 * - Closing is nng_stream_close: the outstanding aios finish with an error, which ends both
 *   loops.
 */
#include "runner/pool/sprep.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/exec/idmap.h"

#define PROTO_REQ0 0x30u
#define PROTO_REP0 0x31u

/* A reply on its way: the wire bytes (length, backtrace, body) and how many went out. */
struct out {
    struct out *next;
    size_t len, sent;
    uint8_t data[];
};

enum rx_stage { RX_HANDSHAKE, RX_LENGTH, RX_BODY };

struct conn {
    struct rn_sprep *s;
    uint32_t id;
    uint32_t slot; /* in s->slots */
    nng_stream *st;
    nng_aio *rx, *tx;
    bool ipc;
    bool counted; /* holds a unit of the budget */
    int refs;     /* under s->mtx: the table's, the receive loop's, the send loop's */
    /* The receive loop's own (its aio callback runs one at a time): */
    enum rx_stage stage;
    uint8_t head[9];
    size_t want, got;
    uint8_t *body;
    size_t cap; /* of body: grown as bytes arrive, so a length alone reserves no memory */
    /* Under s->mtx: */
    bool closing;
    bool doomed; /* closing while it holds a unit: counted in s->ndoomed until freed */
    bool sending;
    struct out *q, *qtail;
};

struct rn_sprep {
    struct rn_sprep_ops ops;
    struct rn_sprep_cfg cfg;
    nng_stream_listener *l;
    nng_aio *acc;
    nng_aio *resume;          /* accepting again after a pause, off any caller's locks */
    _Atomic bool resume_busy; /* resume is scheduled */
    int port;
    bool ipc;

    pthread_mutex_t mtx;  /* guards everything below, and each conn's fields marked so */
    pthread_cond_t cond;  /* signalled when a connection is freed */
    struct rn_idmap byid; /* connection id -> slot */
    struct {
        struct conn **items;
        size_t len, cap;
    } slots;
    struct {
        uint32_t *items;
        size_t len, cap;
    } free_slots;
    size_t open;    /* connections not freed yet */
    size_t ndoomed; /* closed but not freed, holding a unit: over the budget by at most
                     * RN_FD_CLOSING_MAX of these (the stream's descriptor goes only when
                     * both loops have ended and it is freed) */
    uint32_t next_id;
    bool stopping;
    bool paused; /* the budget is spent: accepting resumes when a connection closes */
    uint64_t npaused;
};

static void
id_key(uint32_t id, uint8_t key[16])
{
    uint64_t mixed = (uint64_t) id * 0x9E3779B97F4A7C15ull; /* idmap hashes the last 8 bytes */

    memset(key, 0, 16);
    memcpy(key + 8, &mixed, 8);
}

/* The connection with id, or NULL. Call with s->mtx held. */
static struct conn *
find_locked(struct rn_sprep *s, uint32_t id)
{
    uint8_t key[16];
    uint32_t slot;

    id_key(id, key);
    return rn_idmap_get(&s->byid, key, &slot) ? s->slots.items[slot] : NULL;
}

static void accept_next(struct rn_sprep *s);

/* Drops one count of c; the last frees it. Call with s->mtx held. */
static void
unref_locked(struct rn_sprep *s, struct conn *c)
{
    struct out *o, *next;

    if (--c->refs > 0) {
        return;
    }
    for (o = c->q; o != NULL; o = next) {
        next = o->next;
        free(o);
    }
    free(c->body);
    /* Reaped, not freed: this may run in one of their own callbacks. */
    nng_aio_reap(c->rx);
    nng_aio_reap(c->tx);
    nng_stream_free(c->st);
    if (c->counted) {
        rn_fdbudget_give(s->cfg.budget);
    }
    if (c->doomed) {
        s->ndoomed--;
    }
    free(c);
    s->open--;
    if (s->paused && !s->stopping) {
        s->paused = false;
        accept_next(s); /* a descriptor came back (the budget's waiter flag goes stale) */
    }
    cn_cond_broadcast(&s->cond);
}

/* Takes c out of the table and closes its stream (its loops end). Call with s->mtx held. */
static void
close_locked(struct rn_sprep *s, struct conn *c)
{
    uint8_t key[16];

    if (c->closing) {
        return;
    }
    c->closing = true;
    if (c->counted) {
        c->doomed = true;
        s->ndoomed++;
    }
    nng_stream_close(c->st);
    id_key(c->id, key);
    rn_idmap_del(&s->byid, key);
    s->slots.items[c->slot] = NULL;
    CN_VEC_XPUSH(&s->free_slots, c->slot);
    unref_locked(s, c); /* the table's */
}

/* ---- sending ------------------------------------------------------------------------------ */

/* Sends what is left of the head of c's queue. Call with s->mtx held and c->sending set. */
static void
send_head_locked(struct conn *c)
{
    nng_iov iov;

    iov.iov_buf = c->q->data + c->q->sent;
    iov.iov_len = c->q->len - c->q->sent;
    (void) nng_aio_set_iov(c->tx, 1, &iov);
    nng_stream_send(c->st, c->tx);
}

/* Queues o on c and starts the send loop if it is idle. Call with s->mtx held. */
static void
enqueue_locked(struct conn *c, struct out *o)
{
    o->next = NULL;
    o->sent = 0;
    if (c->qtail != NULL) {
        c->qtail->next = o;
    } else {
        c->q = o;
    }
    c->qtail = o;
    if (!c->sending) {
        c->sending = true;
        c->refs++; /* the send loop's */
        send_head_locked(c);
    }
}

static void
tx_cb(void *arg)
{
    struct conn *c = arg;
    struct rn_sprep *s = c->s;
    int rv = nng_aio_result(c->tx);

    cn_mutex_lock(&s->mtx);
    if (rv != 0) {
        c->sending = false;
        close_locked(s, c);
        unref_locked(s, c);
        cn_mutex_unlock(&s->mtx);
        return;
    }
    c->q->sent += nng_aio_count(c->tx);
    if (c->q->sent < c->q->len && !c->closing) {
        send_head_locked(c); /* never on a closed stream: that send would never complete */
        cn_mutex_unlock(&s->mtx);
        return;
    }
    if (c->closing) {
        c->sending = false;
        unref_locked(s, c);
        cn_mutex_unlock(&s->mtx);
        return;
    }
    {
        struct out *done = c->q;
        c->q = done->next;
        if (c->q == NULL) {
            c->qtail = NULL;
        }
        free(done);
    }
    if (c->q != NULL && !c->closing) {
        send_head_locked(c);
    } else {
        c->sending = false;
        unref_locked(s, c);
    }
    cn_mutex_unlock(&s->mtx);
}

bool
rn_sprep_reply(struct rn_sprep *s, uint32_t conn, const struct rn_sprep_req *rq, const void *data,
               size_t len)
{
    size_t hdr, total;
    struct out *o;
    struct conn *c;
    uint64_t wire;

    cn_mutex_lock(&s->mtx);
    c = find_locked(s, conn);
    if (c == NULL || c->closing) {
        cn_mutex_unlock(&s->mtx);
        return false;
    }
    hdr = c->ipc ? 9 : 8;
    total = hdr + rq->len + len;
    o = cn_xmalloc(sizeof(*o) + total);
    o->len = total;
    wire = (uint64_t) rq->len + len;
    if (c->ipc) {
        o->data[0] = 1; /* a message */
    }
    for (int i = 0; i < 8; i++) {
        o->data[hdr - 8 + i] = (uint8_t) (wire >> (56 - 8 * i));
    }
    memcpy(o->data + hdr, rq->bt, rq->len);
    if (len > 0) {
        memcpy(o->data + hdr + rq->len, data, len);
    }
    enqueue_locked(c, o);
    cn_mutex_unlock(&s->mtx);
    return true;
}

void
rn_sprep_close(struct rn_sprep *s, uint32_t conn)
{
    struct conn *c;

    cn_mutex_lock(&s->mtx);
    if ((c = find_locked(s, conn)) != NULL) {
        close_locked(s, c);
    }
    cn_mutex_unlock(&s->mtx);
}

/* ---- receiving ---------------------------------------------------------------------------- */

static void
recv_into(struct conn *c, void *buf, size_t len)
{
    nng_iov iov;

    iov.iov_buf = buf;
    iov.iov_len = len;
    (void) nng_aio_set_iov(c->rx, 1, &iov);
    nng_stream_recv(c->st, c->rx);
}

/* The first read of a body: a peer that announces 16 MiB and sends nothing holds this much. */
#define BODY_FIRST (64u << 10)

/* Reads the rest of the current stage's bytes (a body into what its buffer has room for,
 * doubling it when full). Call with s->mtx held and c not closing: a read started on a closed
 * stream never completes (nng 1.5.2's ipc), so closing and arming a read are serialised. */
static void
recv_more_locked(struct conn *c)
{
    if (c->stage != RX_BODY) {
        recv_into(c, c->head + c->got, c->want - c->got);
        return;
    }
    if (c->got == c->cap) {
        c->cap = c->cap == 0 ? BODY_FIRST : 2 * c->cap;
        if (c->cap > c->want) {
            c->cap = c->want;
        }
        c->body = cn_xrealloc(c->body, c->cap);
    }
    recv_into(c, c->body + c->got, c->cap - c->got);
}

/* recv_more_locked unless c is closing; false then (the receive loop ends). */
static bool
recv_more(struct conn *c)
{
    struct rn_sprep *s = c->s;
    bool open;

    cn_mutex_lock(&s->mtx);
    open = !c->closing;
    if (open) {
        recv_more_locked(c);
    }
    cn_mutex_unlock(&s->mtx);
    return open;
}

static bool
expect_length(struct conn *c)
{
    c->stage = RX_LENGTH;
    c->want = c->ipc ? 9 : 8;
    c->got = 0;
    return recv_more(c);
}

/* The receive loop ends: c is closed and reported. */
static void
rx_end(struct conn *c)
{
    struct rn_sprep *s = c->s;
    uint32_t id = c->id;

    cn_mutex_lock(&s->mtx);
    close_locked(s, c);
    cn_mutex_unlock(&s->mtx);
    s->ops.closed(s->ops.arg, id);
    cn_mutex_lock(&s->mtx);
    unref_locked(s, c); /* the receive loop's */
    cn_mutex_unlock(&s->mtx);
}

/* A whole message: its backtrace, then the request. False when it is garbage. */
static bool
deliver(struct conn *c)
{
    struct rn_sprep *s = c->s;
    struct rn_sprep_req rq;
    size_t at = 0;

    rq.len = 0;
    for (;;) {
        if (at + 4 > c->want || rq.len >= sizeof(rq.bt)) {
            return false; /* no request id, or more hops than a REP takes */
        }
        memcpy(rq.bt + rq.len, c->body + at, 4);
        rq.len += 4;
        at += 4;
        if (c->body[at - 4] & 0x80u) {
            break;
        }
    }
    s->ops.request(s->ops.arg, c->id, &rq, c->body + at, c->want - at);
    return true;
}

static void
rx_cb(void *arg)
{
    struct conn *c = arg;
    struct rn_sprep *s = c->s;

    if (nng_aio_result(c->rx) != 0) {
        rx_end(c);
        return;
    }
    c->got += nng_aio_count(c->rx);
    if (c->got < c->want) {
        if (!recv_more(c)) {
            rx_end(c);
        }
        return;
    }
    switch (c->stage) {
    case RX_HANDSHAKE:
        if (c->head[0] != 0 || c->head[1] != 'S' || c->head[2] != 'P' || c->head[3] != 0 ||
            ((unsigned) c->head[4] << 8 | c->head[5]) != PROTO_REQ0 || c->head[6] != 0 ||
            c->head[7] != 0) {
            rx_end(c); /* not a REQ0 peer */
            return;
        }
        if (!expect_length(c)) {
            rx_end(c);
        }
        return;
    case RX_LENGTH: {
        const uint8_t *p = c->ipc ? c->head + 1 : c->head;
        uint64_t len = 0;

        for (int i = 0; i < 8; i++) {
            len = len << 8 | p[i];
        }
        if ((c->ipc && c->head[0] != 1) || len < 4 || len > s->cfg.max_msg) {
            rx_end(c);
            return;
        }
        c->stage = RX_BODY;
        c->want = (size_t) len;
        c->got = 0;
        c->cap = 0;
        if (!recv_more(c)) {
            rx_end(c);
        }
        return;
    }
    case RX_BODY: {
        bool ok = deliver(c);

        free(c->body);
        c->body = NULL;
        c->cap = 0;
        if (!ok || !expect_length(c)) {
            rx_end(c);
        }
        return;
    }
    }
}

/* ---- accepting ---------------------------------------------------------------------------- */

/* A stream's peer as text (sprep.h). */
static void
peer_text(nng_stream *st, bool ipc, char out[RN_SPREP_PEER_LEN])
{
    nng_sockaddr sa;
    uint64_t pid = 0;

    out[0] = '\0';
    if (ipc) {
        if (nng_stream_get_uint64(st, NNG_OPT_IPC_PEER_PID, &pid) == 0) {
            (void) snprintf(out, RN_SPREP_PEER_LEN, "ipc, pid %llu", (unsigned long long) pid);
        } else {
            (void) snprintf(out, RN_SPREP_PEER_LEN, "ipc");
        }
        return;
    }
    if (nng_stream_get_addr(st, NNG_OPT_REMADDR, &sa) != 0) {
        return;
    }
    if (sa.s_family == NNG_AF_INET) {
        const uint8_t *a = (const uint8_t *) &sa.s_in.sa_addr; /* network order */
        const uint8_t *port = (const uint8_t *) &sa.s_in.sa_port;
        (void) snprintf(out, RN_SPREP_PEER_LEN, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3],
                        (unsigned) port[0] << 8 | port[1]);
    } else if (sa.s_family == NNG_AF_INET6) {
        const uint8_t *port = (const uint8_t *) &sa.s_in6.sa_port;
        char host[INET6_ADDRSTRLEN];
        if (inet_ntop(AF_INET6, sa.s_in6.sa_addr, host, sizeof(host)) != NULL) {
            (void) snprintf(out, RN_SPREP_PEER_LEN, "[%s]:%u", host,
                            (unsigned) port[0] << 8 | port[1]);
        }
    }
}

/* Re-arms the accept. Call with s->mtx held. */
static void
accept_next(struct rn_sprep *s)
{
    nng_stream_listener_accept(s->l, s->acc);
}

/* Accepting resumes in ms (if it is still paused then), on an nng thread: the one way a paused
 * accept starts again but for a connection of ours being freed (unref_locked). */
static void
resume_after(struct rn_sprep *s, nng_duration ms)
{
    if (!atomic_exchange(&s->resume_busy, true)) {
        nng_sleep_aio(ms, s->resume);
    }
}

/* The budget has a unit again (fdbudget.h's room callback: any thread, maybe under s->mtx,
 * since this module gives units back under it): accepting resumes on an nng thread. */
static void
budget_room(void *arg)
{
    resume_after(arg, 0);
}

static void
resume_cb(void *arg)
{
    struct rn_sprep *s = arg;
    int rv = nng_aio_result(s->resume);

    atomic_store(&s->resume_busy, false);
    if (rv != 0) {
        return;
    }
    cn_mutex_lock(&s->mtx);
    if (s->paused && !s->stopping) {
        s->paused = false;
        accept_next(s);
    }
    cn_mutex_unlock(&s->mtx);
}

static void
accept_cb(void *arg)
{
    struct rn_sprep *s = arg;
    int rv = nng_aio_result(s->acc);
    char peer[RN_SPREP_PEER_LEN];
    struct conn *c;
    bool room, displace, ok;
    uint8_t key[16];
    struct out *hello;

    if (rv != 0) {
        cn_mutex_lock(&s->mtx);
        if (!s->stopping && rv != NNG_ECLOSED) {
            if (rv == NNG_ENOFILES || rv == NNG_ENOMEM) {
                s->paused = true; /* out of descriptors anyway: try again soon */
                resume_after(s, 10);
            } else {
                accept_next(s);
            }
        }
        cn_mutex_unlock(&s->mtx);
        return;
    }
    c = cn_xcalloc(1, sizeof(*c));
    c->s = s;
    c->st = nng_aio_get_output(s->acc, 0);
    c->ipc = s->ipc;
    if (nng_aio_alloc(&c->rx, rx_cb, c) != 0 || nng_aio_alloc(&c->tx, tx_cb, c) != 0) {
        cn_oom("worker connection");
    }
    (void) nng_stream_set_bool(c->st, NNG_OPT_TCP_NODELAY, true); /* not on ipc: ignored */
    peer_text(c->st, c->ipc, peer);
    room = s->cfg.budget == NULL || rn_fdbudget_take(s->cfg.budget, "worker");
    cn_mutex_lock(&s->mtx);
    c->id = ++s->next_id;
    if (c->id == 0) {
        c->id = ++s->next_id; /* 0 is nobody's */
    }
    if (s->free_slots.len > 0) {
        c->slot = s->free_slots.items[--s->free_slots.len];
        s->slots.items[c->slot] = c;
    } else {
        c->slot = (uint32_t) s->slots.len;
        CN_VEC_XPUSH(&s->slots, c);
    }
    id_key(c->id, key);
    if (rn_idmap_put(&s->byid, key, c->slot) != CN_OK) {
        cn_oom("worker connections");
    }
    c->refs = 2; /* the table's, and this call's: the owner may close it in `accepted` */
    s->open++;
    /* Past the budget, a connection may displace one only while few displaced are still
     * closing; else it is refused and accepting waits for a descriptor to come back. */
    displace = !room && s->ndoomed < RN_FD_CLOSING_MAX;
    cn_mutex_unlock(&s->mtx);

    ok = (room || displace) && s->ops.accepted(s->ops.arg, c->id, peer, !room);
    cn_mutex_lock(&s->mtx);
    if (ok && !room && s->cfg.budget != NULL) {
        rn_fdbudget_force(s->cfg.budget); /* the one closed for it gives its unit back */
    }
    c->counted = ok && s->cfg.budget != NULL;
    if (!ok && room && s->cfg.budget != NULL) {
        rn_fdbudget_give(s->cfg.budget);
    }
    if (!ok || s->stopping || c->closing) {
        close_locked(s, c);
        unref_locked(s, c); /* this call's: frees it, no loop runs */
        if (!room && !s->stopping && rn_fdbudget_wait(s->cfg.budget)) {
            /* Resumes when a unit comes back: from a connection of ours (unref_locked), or of
             * another listener (budget_room). */
            s->paused = true;
            s->npaused++;
        } else if (!s->stopping) {
            accept_next(s);
        }
        cn_mutex_unlock(&s->mtx);
        return;
    }
    /* Both loops start: our handshake goes out first, the peer's is read. */
    c->refs++; /* the receive loop's */
    hello = cn_xmalloc(sizeof(*hello) + 8);
    hello->len = 8;
    memcpy(hello->data, "\0SP\0\0\0\0\0", 8);
    hello->data[5] = PROTO_REP0;
    enqueue_locked(c, hello);
    c->stage = RX_HANDSHAKE;
    c->want = 8;
    c->got = 0;
    recv_more_locked(c);
    unref_locked(s, c); /* this call's */
    accept_next(s);
    cn_mutex_unlock(&s->mtx);
}

/* ---- start and stop ----------------------------------------------------------------------- */

static int
tls_setup(nng_stream_listener *l, const struct rn_sprep_cfg *cfg)
{
    int rv;

    if (strncmp(cfg->url, "tls+", 4) != 0) {
        return 0;
    }
    if (cfg->tls_ca_file != NULL &&
        (rv = nng_stream_listener_set_string(l, NNG_OPT_TLS_CA_FILE, cfg->tls_ca_file)) != 0) {
        return rv;
    }
    if (cfg->tls_cert_key_file != NULL &&
        (rv = nng_stream_listener_set_string(l, NNG_OPT_TLS_CERT_KEY_FILE,
                                             cfg->tls_cert_key_file)) != 0) {
        return rv;
    }
    return nng_stream_listener_set_int(l, NNG_OPT_TLS_AUTH_MODE,
                                       cfg->tls_require_client_cert ? NNG_TLS_AUTH_MODE_REQUIRED
                                                                    : NNG_TLS_AUTH_MODE_NONE);
}

cn_err
rn_sprep_start(const struct rn_sprep_cfg *cfg, const struct rn_sprep_ops *ops,
               struct rn_sprep **out, struct cn_errmsg *err)
{
    struct rn_sprep *s;
    int rv;

    *out = NULL;
    if (cfg->url == NULL) {
        return CN_INVAL;
    }
    s = cn_xcalloc(1, sizeof(*s));
    s->ops = *ops;
    s->cfg = *cfg;
    s->ipc = strncmp(cfg->url, "ipc://", 6) == 0;
    cn_mutex_init(&s->mtx);
    cn_cond_init(&s->cond);
    if ((rv = nng_stream_listener_alloc(&s->l, cfg->url)) != 0 ||
        (rv = tls_setup(s->l, cfg)) != 0 || (rv = nng_stream_listener_listen(s->l)) != 0 ||
        (rv = nng_aio_alloc(&s->acc, accept_cb, s)) != 0 ||
        (rv = nng_aio_alloc(&s->resume, resume_cb, s)) != 0) {
        cn_err e = cn_errmsg_set(err, CN_IO, "cannot listen on %s: %s", cfg->url, nng_strerror(rv));
        if (s->l != NULL) {
            nng_stream_listener_free(s->l);
        }
        nng_aio_free(s->acc);
        nng_aio_free(s->resume);
        cn_cond_destroy(&s->cond);
        cn_mutex_destroy(&s->mtx);
        free(s);
        return e;
    }
    if (nng_stream_listener_get_int(s->l, NNG_OPT_TCP_BOUND_PORT, &s->port) != 0) {
        s->port = 0;
    }
    if (cfg->budget != NULL) {
        rn_fdbudget_on_room(cfg->budget, budget_room, s);
    }
    cn_mutex_lock(&s->mtx);
    accept_next(s);
    cn_mutex_unlock(&s->mtx);
    *out = s;
    return CN_OK;
}

int
rn_sprep_port(const struct rn_sprep *s)
{
    return s->port;
}

void
rn_sprep_counts(struct rn_sprep *s, size_t *open, uint64_t *paused)
{
    cn_mutex_lock(&s->mtx);
    *open = s->open;
    *paused = s->npaused;
    cn_mutex_unlock(&s->mtx);
}

bool
rn_sprep_stop(struct rn_sprep *s, int64_t timeout_ms)
{
    int64_t until = cn_mono_ms() + timeout_ms;
    size_t i;
    bool done;

    if (s == NULL) {
        return true;
    }
    cn_mutex_lock(&s->mtx);
    s->stopping = true;
    cn_mutex_unlock(&s->mtx);
    /* No accept runs after these: a connection accepted meanwhile is closed by accept_cb. */
    nng_stream_listener_close(s->l);
    nng_aio_stop(s->acc);
    if (s->cfg.budget != NULL) {
        rn_fdbudget_on_room(s->cfg.budget, NULL, NULL);
    }
    nng_aio_stop(s->resume);
    cn_mutex_lock(&s->mtx);
    for (i = 0; i < s->slots.len; i++) {
        if (s->slots.items[i] != NULL) {
            close_locked(s, s->slots.items[i]);
        }
    }
    while (s->open > 0 && cn_mono_ms() < until) {
        cn_cond_wait_until(&s->cond, &s->mtx, until);
    }
    done = s->open == 0;
    cn_mutex_unlock(&s->mtx);
    if (!done) {
        return false;
    }
    nng_stream_listener_free(s->l);
    nng_aio_free(s->acc);
    nng_aio_free(s->resume);
    rn_idmap_fini(&s->byid);
    free(s->slots.items);
    free(s->free_slots.items);
    cn_cond_destroy(&s->cond);
    cn_mutex_destroy(&s->mtx);
    free(s);
    return true;
}
