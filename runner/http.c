/* SPDX-License-Identifier: MIT */
/* The runner's HTTP endpoints (see http.h). */
#include "runner/http.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "ir/base/xalloc.h"

struct rn_http {
    struct rn_http_routes routes;
    nng_http_server *server;
    nng_url *url;
    /* Handlers running now, and whether the server is stopping: stopping waits for the former,
     * so that no handler still reads this struct, or the runner's insides through the
     * callbacks, once rn_http_stop returns (nng's server stop does not wait for them). */
    atomic_int busy;
    atomic_bool closing;
};

static void
reply(nng_aio *aio, uint16_t status, const char *type, const void *body, size_t len)
{
    nng_http_res *res = NULL;

    if (nng_http_res_alloc(&res) != 0 || nng_http_res_set_status(res, status) != 0 ||
        nng_http_res_set_header(res, "Content-Type", type) != 0 ||
        nng_http_res_copy_data(res, body, len) != 0) {
        if (res != NULL) {
            nng_http_res_free(res);
        }
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static struct rn_http *
self(nng_aio *aio)
{
    return nng_http_handler_get_data(nng_aio_get_input(aio, 1));
}

static void
on_metrics_(nng_aio *aio)
{
    struct rn_http *h = self(aio);
    struct cn_buf b = CN_BUF_INIT;

    if (!h->routes.metrics(h->routes.arg, &b)) {
        cn_buf_fini(&b);
        reply(aio, 500, "text/plain", "metrics unavailable\n", 20);
        return;
    }
    reply(aio, 200, "text/plain; version=0.0.4", b.data, b.len);
    cn_buf_fini(&b);
}

void
rn_http_answer(struct rn_http_pending *req, uint16_t code, const char *type, const void *body,
               size_t len)
{
    reply((nng_aio *) req, code, type, body, len);
}

/* nng lets a handler finish its aio later, from any thread; status.c does. */
static void
on_status_(nng_aio *aio)
{
    struct rn_http *h = self(aio);

    if (h->routes.status == NULL) {
        reply(aio, 404, "text/plain", "not found\n", 10);
        return;
    }
    h->routes.status(h->routes.arg, (struct rn_http_pending *) aio);
}

static void
on_healthz_(nng_aio *aio)
{
    reply(aio, 200, "text/plain", "ok\n", 3);
}

static void
on_readyz_(nng_aio *aio)
{
    struct rn_http *h = self(aio);

    if (h->routes.ready(h->routes.arg)) {
        reply(aio, 200, "text/plain", "ready\n", 6);
    } else {
        reply(aio, 503, "text/plain", "stopping\n", 9);
    }
}

/* Runs a handler unless the server is stopping, counted in busy. */
static void
guarded(nng_aio *aio, void (*fn)(nng_aio *))
{
    struct rn_http *h = self(aio);

    atomic_fetch_add(&h->busy, 1);
    if (atomic_load(&h->closing)) {
        reply(aio, 503, "text/plain", "stopping\n", 9);
    } else {
        fn(aio);
    }
    atomic_fetch_sub(&h->busy, 1);
}

static void
on_metrics(nng_aio *aio)
{
    guarded(aio, on_metrics_);
}

static void
on_status(nng_aio *aio)
{
    guarded(aio, on_status_);
}

static void
on_healthz(nng_aio *aio)
{
    guarded(aio, on_healthz_);
}

static void
on_readyz(nng_aio *aio)
{
    guarded(aio, on_readyz_);
}

cn_err
rn_http_start(const char *listen, const struct rn_http_routes *routes, struct rn_http **out,
              struct cn_errmsg *err)
{
    static const struct {
        const char *path;
        void (*fn)(nng_aio *);
    } table[] = {{"/metrics", on_metrics},
                 {"/healthz", on_healthz},
                 {"/readyz", on_readyz},
                 {"/", on_status},
                 {"/status", on_status}};
    struct rn_http *h = cn_xcalloc(1, sizeof(*h));
    char url[300];

    atomic_init(&h->busy, 0);
    atomic_init(&h->closing, false);
    size_t i;
    int rv;

    *out = NULL;
    h->routes = *routes;
    (void) snprintf(url, sizeof(url), "%s%s", strncmp(listen, "http://", 7) == 0 ? "" : "http://",
                    listen);
    if ((rv = nng_url_parse(&h->url, url)) != 0 ||
        (rv = nng_http_server_hold(&h->server, h->url)) != 0) {
        rn_http_stop(h);
        return cn_errmsg_set(err, CN_INVAL, "CAIRN_HTTP_LISTEN %s: %s", listen, nng_strerror(rv));
    }
    for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        nng_http_handler *hd;
        if ((rv = nng_http_handler_alloc(&hd, table[i].path, table[i].fn)) != 0) {
            rn_http_stop(h);
            return cn_errmsg_set(err, CN_NOMEM, "http: %s", nng_strerror(rv));
        }
        if ((rv = nng_http_handler_set_data(hd, h, NULL)) != 0 ||
            (rv = nng_http_server_add_handler(h->server, hd)) != 0) {
            nng_http_handler_free(hd);
            rn_http_stop(h);
            return cn_errmsg_set(err, CN_NOMEM, "http: %s", nng_strerror(rv));
        }
    }
    if ((rv = nng_http_server_start(h->server)) != 0) {
        rn_http_stop(h);
        return cn_errmsg_set(err, CN_IO, "cannot listen on %s: %s", url, nng_strerror(rv));
    }
    *out = h;
    return CN_OK;
}

void
rn_http_quiesce(struct rn_http *h)
{
    int waited = 0;

    if (h == NULL) {
        return;
    }
    atomic_store(&h->closing, true);
    /* A handler is a few milliseconds of work at most (it never waits on the database). */
    while (atomic_load(&h->busy) > 0 && waited++ < 5000) {
        struct timespec ts = {0, 1000000L};
        (void) nanosleep(&ts, NULL);
    }
}

void
rn_http_stop(struct rn_http *h)
{
    if (h == NULL) {
        return;
    }
    rn_http_quiesce(h);
    if (h->server != NULL) {
        nng_http_server_stop(h->server);
        rn_http_quiesce(h); /* one that came in between */
        nng_http_server_release(h->server);
    }
    if (h->url != NULL) {
        nng_url_free(h->url);
    }
    free(h);
}
