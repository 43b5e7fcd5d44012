/* SPDX-License-Identifier: MIT */
/*
 * The runner's HTTP endpoints: /metrics (Prometheus text), /healthz (200 while the process
 * runs), /readyz (200 while the runner claims work, 503 once it is stopping) and the status
 * page at / and /status, on libmicrohttpd. The endpoints render through callbacks, so this
 * module knows nothing of the runner's insides; metrics.c renders the metrics text, status.c
 * and status_html.c the page. GET and HEAD only (405 otherwise); any other path is 404.
 *
 * The listener is meant to be reachable by operators, so no client can hold it or the runner's
 * descriptors (issue 34's slowloris: 1 100 connections that each sent half a request held the
 * descriptor table for good under nng's server):
 * - a connection's first request line and headers must arrive within header_timeout_ms of its
 *   accept, and a kept-alive connection's next one within idle_timeout_ms of the previous
 *   response, else it is closed, however slowly bytes trickle in;
 * - at most max_connections are open; a new one past that closes the oldest connection that is
 *   waiting for a request head (a request being answered is never cut), so a fresh request
 *   from an operator gets in while idle or slow clients hold the rest;
 * - a request head over RN_HTTP_MAX_HEAD bytes is refused by libmicrohttpd (414 or 431), a
 *   body declared over RN_HTTP_MAX_BODY with 413 (a chunked one that grows past it closes the
 *   connection);
 * - each connection takes a unit of the descriptor budget (fdbudget.h) from its accept to its
 *   close: one accepted when the budget is spent closes the oldest waiting one, or is closed
 *   at once. The runner caps max_connections at half the budget, so that the worker port
 *   always keeps the other half.
 *
 * Threads: one thread of this module's runs libmicrohttpd (external polling on its epoll
 * descriptor) and calls every callback, so the connection table needs no lock; the callbacks
 * must be thread-safe towards the rest of the runner and must not block on anything slower
 * than a short mutex. A page that needs slower work is answered later: the status callback gets
 * the request as a struct rn_http_pending and answers it with rn_http_answer, from any thread,
 * which queues the answer for this thread under `mtx` (a leaf lock, held for a list push).
 */
#ifndef RUNNER_HTTP_H
#define RUNNER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"
#include "runner/pool/fdbudget.h"

/* A request's line and headers (libmicrohttpd's memory per connection: it holds the head and
 * the response's headers, so a head of about 31 KiB passes and one of 32 KiB does not), and
 * its body: the routes take no body today; the console's forms will be far below 64 KiB. */
#define RN_HTTP_MAX_HEAD (32u << 10)
#define RN_HTTP_MAX_BODY (64u << 10)

/* Connections past the cap (or the descriptor budget) that may be open while the ones shut
 * down to make room for them close, within a loop pass: libmicrohttpd's own limit is the cap
 * plus this, and past the budget a connection is refused instead once this many are closing. */
#define RN_HTTP_CONN_SLACK RN_FD_CLOSING_MAX

struct rn_http_cfg {
    const char *listen;         /* HOST:PORT or http://HOST:PORT; port 0: any (rn_http_port) */
    uint32_t max_connections;   /* open at once (RN_DEFAULT_HTTP_MAX_CONNECTIONS) */
    uint32_t header_timeout_ms; /* for the first request head (RN_DEFAULT_HTTP_HEADER_TIMEOUT_MS) */
    uint32_t idle_timeout_ms;   /* for the next one on a kept-alive connection */
    struct rn_fdbudget *budget; /* shared with the worker listener; NULL: none */
};

struct rn_http_stats {
    uint64_t connections;     /* open now */
    uint64_t accepted;        /* connections accepted */
    uint64_t header_timeouts; /* closed for a request head later than its timeout */
    uint64_t evicted;  /* closed, waiting for a request, for a newer connection past the cap */
    uint64_t refused;  /* closed at accept: the descriptor budget was spent */
    uint64_t requests; /* requests answered */
};

/* A request answered later (an nng aio underneath: the connection waits for it). */
struct rn_http_pending;

struct rn_http_routes {
    /* Appends the /metrics body; false on failure (answered 500). */
    bool (*metrics)(void *arg, struct cn_buf *out);
    /* True while ready (/readyz). */
    bool (*ready)(void *arg);
    /* The status page (/ and /status): must answer req exactly once, soon (within a few
     * seconds: until then the connection is held); NULL: 404. */
    void (*status)(void *arg, struct rn_http_pending *req);
    void *arg;
};

struct rn_http;

/* Listens on cfg->listen. CN_INVAL for an address that does not parse or a bad setting, CN_IO
 * when it cannot listen; err names the address. */
CN_MUST_CHECK cn_err rn_http_start(const struct rn_http_cfg *cfg,
                                   const struct rn_http_routes *routes, struct rn_http **out,
                                   struct cn_errmsg *err);
/* The TCP port bound. */
int rn_http_port(const struct rn_http *h);
void rn_http_stats(struct rn_http *h, struct rn_http_stats *st);
/* Answers a pending request with status code and body (copied); from any thread, never blocks.
 * Out of memory the connection is closed instead. */
void rn_http_answer(struct rn_http_pending *req, uint16_t code, const char *type, const void *body,
                    size_t len);
/* From now on every request is answered 503 "stopping", and no callback runs when this
 * returns. NULL: no-op. */
void rn_http_quiesce(struct rn_http *h);
/* Stops serving and frees: requests still pending are answered 503 first. NULL: no-op. A
 * pending request stays valid until answered, also after this (the answer then goes nowhere). */
void rn_http_stop(struct rn_http *h);

#endif
