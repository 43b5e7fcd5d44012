/* SPDX-License-Identifier: MIT */
/* sd_notify's datagrams (see notify.h). */
#include "ir/base/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ir/base/log.h"

static atomic_bool notify_failed_once;

static cn_err notify_fail(cn_err e, const char *fmt, ...) CN_PRINTF(2, 3);

static cn_err
notify_fail(cn_err e, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (!atomic_exchange(&notify_failed_once, true)) {
        va_start(ap, fmt);
        (void) vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        cn_log(CN_LOG_WARN,
               "NOTIFY_SOCKET: %s (the service manager will not hear from us; "
               "further failures are not logged)",
               msg);
    }
    return e;
}

cn_err
cn_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    socklen_t salen;
    size_t len;
    ssize_t n;
    int fd, saved;

    if (path == NULL || *path == '\0') {
        return CN_NOTFOUND;
    }
    len = strlen(path);
    if (path[0] != '/' && path[0] != '@') {
        /* systemd also knows vsock: addresses (for VMs); nothing here runs in one. */
        return notify_fail(CN_INVAL, "'%s' is neither a path nor an @abstract name", path);
    }
    /* A path needs its terminating NUL inside sun_path; an abstract name's leading NUL takes
     * the '@''s place, and its length is given explicitly. */
    if (len >= sizeof(sa.sun_path)) {
        return notify_fail(CN_INVAL, "'%s' is longer than %zu bytes", path,
                           sizeof(sa.sun_path) - 1);
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@') {
        sa.sun_path[0] = '\0';
        salen = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len);
    } else {
        salen = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len + 1);
    }
    if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
        return notify_fail(CN_IO, "socket: %s", strerror(errno));
    }
    do {
        n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *) &sa, salen);
    } while (n < 0 && errno == EINTR);
    saved = errno;
    (void) close(fd);
    if (n < 0) {
        return notify_fail(CN_IO, "send to %s: %s", path, strerror(saved));
    }
    return CN_OK;
}

cn_err
cn_notifyf(const char *fmt, ...)
{
    char state[1024];
    va_list ap;

    va_start(ap, fmt);
    (void) vsnprintf(state, sizeof(state), fmt, ap);
    va_end(ap);
    return cn_notify(state);
}
