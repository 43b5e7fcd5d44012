/* SPDX-License-Identifier: MIT */
/*
 * The runner's HTTP endpoints (see http.h for the contract and its bounds).
 *
 * DESIGN
 * - libmicrohttpd runs in external-polling mode on this module's one thread (`loop`): it polls
 *   the daemon's epoll descriptor and an eventfd, then calls MHD_run. Every libmicrohttpd
 *   callback, and so every route callback, runs on that thread; the connection table (`conns`,
 *   in accept order) is that thread's alone.
 * - libmicrohttpd's own timeout counts inactivity, so a client trickling a byte a second keeps a
 *   connection forever under it. The head deadline here is absolute: a connection waiting for
 *   a request head past its deadline is shut down (shutdown(2), never close: libmicrohttpd
 *   owns the descriptor and closes it when it sees the end of the stream, on this thread, so
 *   the number cannot be reused under us).
 * - Answers from other threads (rn_http_answer) are queued under `mtx` and the eventfd wakes
 *   the loop, which resumes the suspended connection with its response. A pending request is
 *   counted twice (the request, the answerer) and freed by the last of the two; `struct
 *   rn_http` itself is counted once more per pending request, so an answer after stop finds
 *   its queue still there.
 * - libmicrohttpd refuses to stop with suspended connections: the loop's last pass answers
 *   every one still suspended with 503 and runs the daemon until they are resumed.
 */
#include "runner/ops/http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/engine/defaults.h"

#define CONN_SLACK RN_HTTP_CONN_SLACK

/* One open connection (the loop thread's). */
struct conn {
    struct conn *prev, *next; /* in h->conns, oldest first */
    int fd;
    bool busy;        /* a request's head arrived and it is not answered yet */
    bool doomed;      /* shut down here: closing */
    bool counted;     /* holds a unit of the descriptor budget */
    int64_t deadline; /* monotonic ms by which the next request head must have arrived */
};

/* A request, from its head to its end (libmicrohttpd's req_cls); the status page's is also
 * the struct rn_http_pending it answers later. */
struct rn_http_pending {
    struct rn_http *h;
    struct MHD_Connection *mc;
    struct conn *c;
    atomic_int refs;           /* the request's, and the answerer's while it may answer */
    size_t body;               /* body bytes seen */
    bool suspended;            /* waiting for rn_http_answer (loop thread) */
    bool gone;                 /* the request ended (loop thread, or under h->mtx) */
    struct MHD_Response *resp; /* the answer to queue (loop thread) */
    unsigned code;
    struct MHD_Response *given; /* rn_http_answer's, until the loop takes it (under h->mtx) */
    unsigned given_code;
    struct rn_http_pending *next_answer;     /* in h->answers (under h->mtx) */
    struct rn_http_pending *prev_s, *next_s; /* in h->suspended (loop thread) */
};

struct rn_http {
    struct rn_http_cfg cfg;
    struct rn_http_routes routes;
    struct MHD_Daemon *d;
    int port;
    int evfd;
    int epfd;
    struct cn_thread thread;

    /* The loop thread's: */
    struct conn *oldest, *newest;
    uint32_t nconns;  /* not doomed */
    uint32_t ndoomed; /* doomed and not closed yet: over the budget by at most CONN_SLACK */
    struct rn_http_pending *suspended;

    pthread_mutex_t mtx; /* guards the fields below */
    pthread_cond_t cond;
    struct rn_http_pending *answers; /* answered, for the loop to resume */
    bool closing;                    /* rn_http_quiesce: answer 503 from now on */
    bool closing_seen;               /* the loop passed a point with no callback running */
    bool stop;                       /* the loop's last pass */
    bool stopped;                    /* the loop has ended: answers go nowhere */
    int refs;                        /* 1 + pending requests */

    _Atomic uint64_t open_now, accepted, header_timeouts, evicted, refused, requests;
};

static void
http_unref(struct rn_http *h)
{
    bool last;

    cn_mutex_lock(&h->mtx);
    last = --h->refs == 0;
    cn_mutex_unlock(&h->mtx);
    if (last) {
        cn_cond_destroy(&h->cond);
        cn_mutex_destroy(&h->mtx);
        free(h);
    }
}

static void
pending_unref(struct rn_http_pending *p)
{
    if (atomic_fetch_sub(&p->refs, 1) == 1) {
        struct rn_http *h = p->h;
        if (p->resp != NULL) {
            MHD_destroy_response(p->resp);
        }
        if (p->given != NULL) {
            MHD_destroy_response(p->given);
        }
        free(p);
        http_unref(h);
    }
}

static void
wake(struct rn_http *h)
{
    uint64_t one = 1;

    /* A full counter (never, at 2^64 - 2) only means a wake is already due. */
    (void) !write(h->evfd, &one, sizeof(one));
}

static struct MHD_Response *
response(unsigned code, const char *type, const void *body, size_t len, unsigned *code_out)
{
    /* MUST_COPY never writes through the pointer; 0.9.75 has no const variant of the call. */
    union {
        const void *c;
        void *m;
    } data = {body};
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data.m, MHD_RESPMEM_MUST_COPY);

    if (r == NULL) {
        cn_oom("HTTP response");
    }
    if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type) != MHD_YES) {
        cn_oom("HTTP response");
    }
    *code_out = code;
    return r;
}

static enum MHD_Result
queue(struct rn_http *h, struct MHD_Connection *mc, unsigned code, struct MHD_Response *r)
{
    enum MHD_Result rv = MHD_queue_response(mc, code, r);

    MHD_destroy_response(r);
    atomic_fetch_add(&h->requests, 1);
    return rv;
}

static enum MHD_Result
text(struct rn_http *h, struct MHD_Connection *mc, unsigned code, const char *body)
{
    unsigned c;
    struct MHD_Response *r = response(code, "text/plain", body, strlen(body), &c);

    return queue(h, mc, c, r);
}

void
rn_http_answer(struct rn_http_pending *req, uint16_t code, const char *type, const void *body,
               size_t len)
{
    struct rn_http *h = req->h;
    unsigned c;
    struct MHD_Response *r = response(code, type, body, len, &c);
    bool queued = false;

    cn_mutex_lock(&h->mtx);
    if (!h->stopped && !req->gone) {
        req->given = r;
        req->given_code = c;
        req->next_answer = h->answers;
        h->answers = req;
        queued = true;
    }
    cn_mutex_unlock(&h->mtx);
    if (queued) {
        wake(h); /* the loop resumes it and drops the answerer's count */
        return;
    }
    MHD_destroy_response(r);
    pending_unref(req);
}

static bool
closing(struct rn_http *h)
{
    bool c;

    cn_mutex_lock(&h->mtx);
    c = h->closing;
    cn_mutex_unlock(&h->mtx);
    return c;
}

/* The route of a request whose head and body have arrived. */
static enum MHD_Result
route(struct rn_http *h, struct MHD_Connection *mc, const char *url, struct rn_http_pending *p)
{
    if (closing(h)) {
        return text(h, mc, 503, "stopping\n");
    }
    if (strcmp(url, "/healthz") == 0) {
        return text(h, mc, 200, "ok\n");
    }
    if (strcmp(url, "/readyz") == 0) {
        return h->routes.ready(h->routes.arg) ? text(h, mc, 200, "ready\n")
                                              : text(h, mc, 503, "stopping\n");
    }
    if (strcmp(url, "/metrics") == 0) {
        struct cn_buf b = CN_BUF_INIT;
        enum MHD_Result rv;
        unsigned c;

        if (!h->routes.metrics(h->routes.arg, &b)) {
            cn_buf_fini(&b);
            return text(h, mc, 500, "metrics unavailable\n");
        }
        rv = queue(h, mc, 200, response(200, "text/plain; version=0.0.4", b.data, b.len, &c));
        cn_buf_fini(&b);
        return rv;
    }
    if (strcmp(url, "/") == 0 || strcmp(url, "/status") == 0) {
        if (h->routes.status == NULL) {
            return text(h, mc, 404, "not found\n");
        }
        /* Suspended before the callback, which may answer at once from this thread. */
        atomic_fetch_add(&p->refs, 1); /* the answerer's */
        p->suspended = true;
        p->prev_s = NULL;
        p->next_s = h->suspended;
        if (h->suspended != NULL) {
            h->suspended->prev_s = p;
        }
        h->suspended = p;
        MHD_suspend_connection(mc);
        h->routes.status(h->routes.arg, p);
        return MHD_YES;
    }
    return text(h, mc, 404, "not found\n");
}

static void
unsuspend(struct rn_http *h, struct rn_http_pending *p)
{
    if (!p->suspended) {
        return;
    }
    p->suspended = false;
    if (p->prev_s != NULL) {
        p->prev_s->next_s = p->next_s;
    } else {
        h->suspended = p->next_s;
    }
    if (p->next_s != NULL) {
        p->next_s->prev_s = p->prev_s;
    }
    MHD_resume_connection(p->mc);
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
           const char *version, const char *upload, size_t *upload_size, void **req_cls)
{
    struct rn_http *h = cls;
    struct rn_http_pending *p = *req_cls;

    (void) version;
    (void) upload;
    if (p == NULL) { /* the head has arrived */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        p = cn_xcalloc(1, sizeof(*p));
        p->h = h;
        p->mc = mc;
        p->c = ci != NULL ? ci->socket_context : NULL;
        atomic_init(&p->refs, 1);
        cn_mutex_lock(&h->mtx);
        h->refs++;
        cn_mutex_unlock(&h->mtx);
        *req_cls = p;
        if (p->c != NULL) {
            p->c->busy = true;
        }
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
            unsigned c;
            struct MHD_Response *r = response(405, "text/plain", "method not allowed\n", 19, &c);
            if (MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD") != MHD_YES) {
                cn_oom("HTTP response");
            }
            return queue(h, mc, c, r);
        }
        {
            /* A response can be queued only before the body is read or after all of it: a
             * declared length over the limit is answered now, a chunked body that grows past it
             * closes the connection below. */
            const char *cl =
                MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl != NULL && strtoull(cl, NULL, 10) > RN_HTTP_MAX_BODY) {
                return text(h, mc, 413, "request body too large\n");
            }
        }
        return MHD_YES;
    }
    if (p->resp != NULL) { /* resumed with its answer */
        struct MHD_Response *r = p->resp;
        p->resp = NULL;
        return queue(h, mc, p->code, r);
    }
    if (*upload_size > 0) {
        p->body += *upload_size;
        *upload_size = 0;
        return p->body > RN_HTTP_MAX_BODY ? MHD_NO : MHD_YES;
    }
    return route(h, mc, url, p);
}

static void
on_completed(void *cls, struct MHD_Connection *mc, void **req_cls,
             enum MHD_RequestTerminationCode toe)
{
    struct rn_http *h = cls;
    struct rn_http_pending *p = *req_cls;

    (void) mc;
    (void) toe;
    if (p == NULL) {
        return;
    }
    *req_cls = NULL;
    if (p->c != NULL) {
        p->c->busy = false;
        p->c->deadline = cn_mono_ms() + h->cfg.idle_timeout_ms;
    }
    cn_mutex_lock(&h->mtx);
    p->gone = true; /* an answer from now on goes nowhere */
    cn_mutex_unlock(&h->mtx);
    pending_unref(p);
}

static void
doom(struct rn_http *h, struct conn *c)
{
    c->doomed = true;
    h->nconns--;
    h->ndoomed++;
    (void) shutdown(c->fd, SHUT_RDWR);
}

/* The oldest connection waiting for a request head other than but (NULL: none). */
static struct conn *
oldest_waiting(struct rn_http *h, const struct conn *but)
{
    struct conn *v = h->oldest;

    while (v != NULL && (v->busy || v->doomed || v == but)) {
        v = v->next;
    }
    return v;
}

static void
on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
              enum MHD_ConnectionNotificationCode toe)
{
    struct rn_http *h = cls;
    struct conn *c;

    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        c = *socket_context;
        if (c == NULL) {
            return;
        }
        if (c->prev != NULL) {
            c->prev->next = c->next;
        } else {
            h->oldest = c->next;
        }
        if (c->next != NULL) {
            c->next->prev = c->prev;
        } else {
            h->newest = c->prev;
        }
        if (!c->doomed) {
            h->nconns--;
        } else {
            h->ndoomed--;
        }
        if (c->counted) {
            rn_fdbudget_give(h->cfg.budget);
        }
        atomic_fetch_sub(&h->open_now, 1);
        free(c);
        *socket_context = NULL;
        return;
    }
    {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        c = cn_xcalloc(1, sizeof(*c));
        c->fd = ci != NULL ? ci->connect_fd : -1;
        c->deadline = cn_mono_ms() + h->cfg.header_timeout_ms;
    }
    c->prev = h->newest;
    if (h->newest != NULL) {
        h->newest->next = c;
    } else {
        h->oldest = c;
    }
    h->newest = c;
    h->nconns++;
    *socket_context = c;
    atomic_fetch_add(&h->accepted, 1);
    atomic_fetch_add(&h->open_now, 1);
    if (h->cfg.budget != NULL && !rn_fdbudget_take(h->cfg.budget, "HTTP")) {
        /* Out of descriptors for the listeners: an HTTP connection waiting for a request
         * makes room if there is one, as past the cap; else this one goes. */
        struct conn *v = h->ndoomed < CONN_SLACK ? oldest_waiting(h, c) : NULL;
        if (v == NULL) {
            atomic_fetch_add(&h->refused, 1);
            doom(h, c);
            return;
        }
        atomic_fetch_add(&h->evicted, 1);
        doom(h, v);
        rn_fdbudget_force(h->cfg.budget);
    }
    c->counted = h->cfg.budget != NULL;
    if (h->nconns > h->cfg.max_connections) {
        /* The oldest waiting for a request head makes room: a client that holds a connection
         * without asking gives way to one that asks. */
        struct conn *v = oldest_waiting(h, c);
        if (v != NULL) {
            atomic_fetch_add(&h->evicted, 1);
            doom(h, v);
        }
    }
}

/* Shuts down the connections whose request head is late; returns the next deadline. */
static int64_t
reap(struct rn_http *h, int64_t now)
{
    int64_t next = INT64_MAX;
    struct conn *c;

    for (c = h->oldest; c != NULL; c = c->next) {
        if (c->busy || c->doomed) {
            continue;
        }
        if (c->deadline <= now) {
            atomic_fetch_add(&h->header_timeouts, 1);
            doom(h, c);
        } else if (c->deadline < next) {
            next = c->deadline;
        }
    }
    return next;
}

/* Resumes the connections answered from other threads; true when the loop should end (then
 * no answer is queued any more: the last ones were taken here). */
static bool
take_answers(struct rn_http *h)
{
    struct rn_http_pending *a, *next;
    bool stop;

    cn_mutex_lock(&h->mtx);
    stop = h->stop;
    if (stop) {
        h->stopped = true;
    }
    a = h->answers;
    h->answers = NULL;
    for (next = a; next != NULL; next = next->next_answer) {
        next->resp = next->given;
        next->code = next->given_code;
        next->given = NULL;
    }
    if (h->closing && !h->closing_seen) {
        h->closing_seen = true; /* no callback runs now: this thread is here */
        cn_cond_broadcast(&h->cond);
    }
    cn_mutex_unlock(&h->mtx);
    for (; a != NULL; a = next) {
        next = a->next_answer;
        unsuspend(h, a);
        pending_unref(a); /* the answerer's */
    }
    return stop;
}

/* libmicrohttpd's messages, at debug level: its format strings are its own, hence the
 * attribute (clang checks that a non-literal format reaches only a printf-like function). */
static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

static void
mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];

    (void) cls;
    (void) vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    cn_log(CN_LOG_DEBUG, "http: %s", line);
}

static void *
loop_main(void *arg)
{
    struct rn_http *h = arg;

    for (;;) {
        struct pollfd fds[2] = {{h->epfd, POLLIN, 0}, {h->evfd, POLLIN, 0}};
        MHD_UNSIGNED_LONG_LONG mt = 0;
        int64_t now, next;
        int timeout;
        uint64_t drained;

        if (take_answers(h)) {
            break;
        }
        (void) MHD_run(h->d);
        now = cn_mono_ms();
        next = reap(h, now);
        timeout = next == INT64_MAX ? 1000 : (int) (next - now < 1000 ? next - now : 1000);
        if (MHD_get_timeout(h->d, &mt) == MHD_YES && (int64_t) mt < timeout) {
            timeout = (int) mt;
        }
        if (poll(fds, 2, timeout < 0 ? 0 : timeout) < 0 && errno != EINTR) {
            cn_log(CN_LOG_ERROR, "http: poll: %s", strerror(errno));
        }
        if (fds[1].revents & POLLIN) {
            (void) !read(h->evfd, &drained, sizeof(drained));
        }
    }
    /* The last pass: whatever is still suspended is answered 503, libmicrohttpd resumes them. */
    while (h->suspended != NULL) {
        struct rn_http_pending *p = h->suspended;
        unsigned c;
        if (p->resp == NULL) {
            p->resp = response(503, "text/plain", "stopping\n", 9, &c);
            p->code = c;
        }
        unsuspend(h, p);
    }
    (void) MHD_run(h->d);
    return NULL;
}

/* HOST:PORT, [V6]:PORT or http://... into an address. */
static cn_err
parse_listen(const char *listen, struct sockaddr_storage *sa, socklen_t *len, bool *v6,
             struct cn_errmsg *err)
{
    char host[256], *port;
    const char *s = strncmp(listen, "http://", 7) == 0 ? listen + 7 : listen;
    struct addrinfo hints, *res = NULL;
    int rv;

    size_t n = strlen(s);

    if (n >= sizeof(host)) {
        return cn_errmsg_set(err, CN_INVAL, "CAIRN_HTTP_LISTEN %s: too long", listen);
    }
    memcpy(host, s, n + 1);
    host[strcspn(host, "/")] = '\0';
    port = strrchr(host, ':');
    if (port == NULL || port[1] == '\0') {
        return cn_errmsg_set(err, CN_INVAL, "CAIRN_HTTP_LISTEN %s: expected HOST:PORT", listen);
    }
    *port++ = '\0';
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if ((rv = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res)) != 0) {
        return cn_errmsg_set(err, CN_INVAL, "CAIRN_HTTP_LISTEN %s: %s", listen, gai_strerror(rv));
    }
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return CN_OK;
}

cn_err
rn_http_start(const struct rn_http_cfg *cfg, const struct rn_http_routes *routes,
              struct rn_http **out, struct cn_errmsg *err)
{
    struct rn_http *h;
    struct sockaddr_storage sa;
    socklen_t salen = 0;
    bool v6 = false;
    unsigned timeout_s;
    const union MHD_DaemonInfo *di;
    cn_err rv;

    *out = NULL;
    if ((rv = parse_listen(cfg->listen, &sa, &salen, &v6, err)) != CN_OK) {
        return rv;
    }
    h = cn_xcalloc(1, sizeof(*h));
    h->cfg = *cfg;
    if (h->cfg.max_connections == 0) {
        h->cfg.max_connections = RN_DEFAULT_HTTP_MAX_CONNECTIONS;
    }
    if (h->cfg.header_timeout_ms == 0) {
        h->cfg.header_timeout_ms = RN_DEFAULT_HTTP_HEADER_TIMEOUT_MS;
    }
    if (h->cfg.idle_timeout_ms == 0) {
        h->cfg.idle_timeout_ms = RN_DEFAULT_HTTP_IDLE_TIMEOUT_MS;
    }
    h->routes = *routes;
    h->refs = 1;
    h->evfd = -1;
    cn_mutex_init(&h->mtx);
    cn_cond_init(&h->cond);
    /* libmicrohttpd's inactivity timeout, in whole seconds, backs up the deadlines above for a
     * response the client stops reading. */
    timeout_s = (h->cfg.header_timeout_ms > h->cfg.idle_timeout_ms ? h->cfg.header_timeout_ms
                                                                   : h->cfg.idle_timeout_ms) /
                    1000 +
                1;
    h->d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0), 0,
        NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *) &sa, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int) (h->cfg.max_connections + CONN_SLACK), MHD_OPTION_CONNECTION_TIMEOUT,
        timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) RN_HTTP_MAX_HEAD,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        h, MHD_OPTION_END);
    if (h->d == NULL) {
        rv = cn_errmsg_set(err, CN_IO, "cannot listen on %s: %s", cfg->listen,
                           errno != 0 ? strerror(errno) : "libmicrohttpd refused the address");
        http_unref(h);
        return rv;
    }
    di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di != NULL ? di->port : 0;
    di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
    h->epfd = di != NULL ? di->epoll_fd : -1;
    h->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->epfd < 0 || h->evfd < 0) {
        rv = cn_errmsg_set(err, CN_IO, "http: no epoll or event descriptor: %s", strerror(errno));
    } else {
        rv = cn_thread_start(&h->thread, "cairn-http", loop_main, h, err);
    }
    if (rv != CN_OK) {
        MHD_stop_daemon(h->d);
        if (h->evfd >= 0) {
            (void) close(h->evfd);
        }
        http_unref(h);
        return rv;
    }
    *out = h;
    return CN_OK;
}

int
rn_http_port(const struct rn_http *h)
{
    return h->port;
}

void
rn_http_stats(struct rn_http *h, struct rn_http_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (h == NULL) {
        return;
    }
    st->connections = atomic_load(&h->open_now);
    st->accepted = atomic_load(&h->accepted);
    st->header_timeouts = atomic_load(&h->header_timeouts);
    st->evicted = atomic_load(&h->evicted);
    st->refused = atomic_load(&h->refused);
    st->requests = atomic_load(&h->requests);
}

void
rn_http_quiesce(struct rn_http *h)
{
    if (h == NULL) {
        return;
    }
    cn_cond_raise(&h->mtx, &h->cond, &h->closing); /* the loop reads it under h->mtx */
    wake(h);
    cn_mutex_lock(&h->mtx);
    while (!h->closing_seen && !h->stopped) {
        cn_cond_wait(&h->cond, &h->mtx);
    }
    cn_mutex_unlock(&h->mtx);
}

void
rn_http_stop(struct rn_http *h)
{
    if (h == NULL) {
        return;
    }
    rn_http_quiesce(h);
    cn_cond_raise(&h->mtx, &h->cond, &h->stop);
    wake(h);
    cn_thread_wait(&h->thread);
    /* Closes every connection: their requests end (on_completed) and give up their counts. */
    MHD_stop_daemon(h->d);
    (void) close(h->evfd);
    http_unref(h);
}
