/* SPDX-License-Identifier: MIT */
/*
 * The worker port's transport: the REP end of nng's scalability protocols (REQ/REP version 0)
 * over nng's byte streams (tcp://, ipc://, tls+tcp://), written here so that the runner, not
 * nng, decides when a connection is accepted. Workers see the same protocol as from an nng REP
 * socket (an nng REQ socket, or the Python SDK's own framing, talks to it unchanged).
 *
 * Why not nng's REP socket: Debian 12's nng (1.5.2) accepts every connection at once and
 * reports it only after its SP handshake, which it waits 10 s for, so 1 100 connections that
 * never sent the handshake took every descriptor of a runner with RLIMIT_NOFILE 1 024 and kept
 * it from reconnecting to PostgreSQL, about 6 s a wave. Here every connection is reported from
 * its accept (`accepted`), before any byte of it is read, so that its owner bounds it from
 * there (the pool drops one that has not said hello within its deadline, and the oldest one
 * waiting past its cap), and each takes a unit of the descriptor budget (fdbudget.h): with the
 * budget spent, a connection is accepted only if its owner closes another to make room (and
 * fewer than RN_FD_CLOSING_MAX so closed are still holding their descriptors), else accepting
 * stops (connections wait in the kernel's backlog, holding no descriptor of ours) until one
 * is freed.
 *
 * The wire (as nng 1.5.2 speaks it): each side sends 8 bytes, 00 'S' 'P' 00, its protocol
 * (REQ0 0x0030, REP0 0x0031) big-endian, 00 00; then each message is its length (8 bytes,
 * big-endian; over ipc preceded by a byte 01) and its bytes. A request starts with its
 * backtrace, 4-byte words up to one with the high bit set (the REQ's request id, hops of
 * devices before it); the reply starts with the same words.
 *
 * Threads: nng's aio threads run the callbacks; a connection's requests are delivered one at a
 * time, in order, and its `closed` after its last request's callback returned. The callbacks
 * are called with no lock of this module held. One mutex (`mtx`) guards the connection table
 * and every connection's send queue; rn_sprep_reply and rn_sprep_close take it and never block
 * otherwise, so they may be called under the caller's own lock (the pool's), which must then
 * never be taken under this one (it is not: nothing calls out under it).
 */
#ifndef RUNNER_SPREP_H
#define RUNNER_SPREP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "runner/pool/fdbudget.h"

/* A request's backtrace, echoed in its reply (at most 8 hops, as nng's REP allows). */
#define RN_SPREP_MAX_HOPS 8
struct rn_sprep_req {
    uint8_t bt[4 * RN_SPREP_MAX_HOPS];
    uint8_t len;
};

/* A connection's peer for people: "HOST:PORT", "[V6]:PORT", "ipc, pid N", or "". */
#define RN_SPREP_PEER_LEN 64

struct rn_sprep_ops {
    /* Connection conn was accepted, before anything of it was read. Return false to refuse
     * it (it is closed, and `closed` does not follow). With must_make_room the descriptor
     * budget is spent: return true only after closing another connection (rn_sprep_close),
     * else accepting stops until one closes. */
    bool (*accepted)(void *arg, uint32_t conn, const char *peer, bool must_make_room);
    /* A request on conn: body (len bytes) is borrowed for the call; answer it, now or later,
     * with rn_sprep_reply and rq (copy it to answer later). */
    void (*request)(void *arg, uint32_t conn, const struct rn_sprep_req *rq, const void *body,
                    size_t len);
    /* conn is gone (closed by either side, or garbage on the wire): nothing more comes of it
     * and a reply to it goes nowhere. Once per accepted connection. */
    void (*closed)(void *arg, uint32_t conn);
    void *arg;
};

struct rn_sprep_cfg {
    const char *url;            /* tcp://HOST:PORT (port 0: any), ipc://PATH, tls+tcp://... */
    size_t max_msg;             /* a longer message (its length as sent) closes the connection */
    struct rn_fdbudget *budget; /* NULL: none */
    /* For tls+tcp:// (PEM files): */
    const char *tls_cert_key_file;
    const char *tls_ca_file;
    bool tls_require_client_cert;
};

struct rn_sprep;

/* Listens on cfg->url. CN_IO (cannot listen; err says why) or CN_INVAL. */
CN_MUST_CHECK cn_err rn_sprep_start(const struct rn_sprep_cfg *cfg, const struct rn_sprep_ops *ops,
                                    struct rn_sprep **out, struct cn_errmsg *err);
/* The TCP port bound (tcp://, tls+tcp://), else 0. */
int rn_sprep_port(const struct rn_sprep *s);
/* Queues the reply to rq on conn (the bytes are copied); false when conn is gone. Never
 * blocks; any thread. */
bool rn_sprep_reply(struct rn_sprep *s, uint32_t conn, const struct rn_sprep_req *rq,
                    const void *data, size_t len);
/* Closes conn (its `closed` follows); no-op when it is gone. Any thread. */
void rn_sprep_close(struct rn_sprep *s, uint32_t conn);
/* Connections open now (accepted and not yet closed), and the times accepting stopped because
 * the budget was spent and nothing could make room. */
void rn_sprep_counts(struct rn_sprep *s, size_t *open, uint64_t *paused);
/* Stops listening and closes every connection; waits up to timeout_ms for their callbacks to
 * end. True when they did (s is freed and no callback runs again); false when one is still
 * running past it (s is left allocated: nng may still call into it). */
bool rn_sprep_stop(struct rn_sprep *s, int64_t timeout_ms);

#endif
