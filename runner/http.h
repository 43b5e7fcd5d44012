/* SPDX-License-Identifier: MIT */
/*
 * The runner's HTTP endpoints: /metrics (Prometheus text), /healthz (200 while the process
 * runs), /readyz (200 while the runner claims work, 503 once it is stopping) and the status
 * page at / and /status, on nng's HTTP server. The endpoints render through callbacks, so this
 * module knows nothing of the runner's insides; metrics.c renders the metrics text, status.c
 * and status_html.c the page.
 *
 * Threads: nng's HTTP threads call the callbacks, which must be thread-safe and must not block
 * on anything slower than a short mutex (nng's threads also run the worker pool). A page that
 * needs slower work is answered later: the status callback gets the request as a
 * struct rn_http_pending and answers it with rn_http_answer, from any thread.
 */
#ifndef RUNNER_HTTP_H
#define RUNNER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"

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

/* Listens on HOST:PORT (or http://HOST:PORT). CN_INVAL for an address that does not parse,
 * CN_IO when it cannot listen; err names the address. */
CN_MUST_CHECK cn_err rn_http_start(const char *listen, const struct rn_http_routes *routes,
                                   struct rn_http **out, struct cn_errmsg *err);
/* Answers a pending request with status code and body (copied); from any thread, never blocks.
 * Out of memory the connection is closed instead. */
void rn_http_answer(struct rn_http_pending *req, uint16_t code, const char *type, const void *body,
                    size_t len);
/* From now on every request is answered 503 "stopping", and the handlers running now have
 * returned when this does (at most 5 s). NULL: no-op. */
void rn_http_quiesce(struct rn_http *h);
/* Stops serving and frees. NULL: no-op. Requests still pending stay valid until answered. */
void rn_http_stop(struct rn_http *h);

#endif
