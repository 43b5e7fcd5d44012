/* SPDX-License-Identifier: MIT */
/*
 * The runner's HTTP endpoints: /metrics (Prometheus text), /healthz (200 while the process
 * runs) and /readyz (200 while the runner claims work, 503 once it is stopping), on nng's HTTP
 * server. The endpoints render through callbacks, so this module knows nothing of the runner's
 * insides; metrics.c renders the metrics text.
 *
 * Threads: nng's HTTP threads call the callbacks, which must be thread-safe and must not block
 * on anything slower than a short mutex.
 */
#ifndef RUNNER_HTTP_H
#define RUNNER_HTTP_H

#include <stdbool.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"

struct rn_http_routes {
    /* Appends the /metrics body; false on failure (answered 500). */
    bool (*metrics)(void *arg, struct cn_buf *out);
    /* True while ready (/readyz). */
    bool (*ready)(void *arg);
    void *arg;
};

struct rn_http;

/* Listens on HOST:PORT (or http://HOST:PORT). CN_INVAL for an address that does not parse,
 * CN_IO when it cannot listen; err names the address. */
CN_MUST_CHECK cn_err rn_http_start(const char *listen, const struct rn_http_routes *routes,
                                   struct rn_http **out, struct cn_errmsg *err);
/* Stops serving and frees. NULL: no-op. */
void rn_http_stop(struct rn_http *h);

#endif
