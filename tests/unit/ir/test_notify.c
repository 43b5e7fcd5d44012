/* SPDX-License-Identifier: MIT */
/* ir/base/notify.h against real AF_UNIX datagram sockets bound here, as systemd binds its
 * NOTIFY_SOCKET: a path, an abstract name, and every address it must refuse. Criterion runs
 * each test in a process of its own, so setenv here touches no other test. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ir/base/notify.h"

TestSuite(ir_notify, .timeout = 30);

/* Binds a datagram socket at name: a path, or an abstract name when it starts with '@'. */
static int
bind_dgram(const char *name)
{
    struct sockaddr_un sa;
    socklen_t len;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    cr_assert_geq(fd, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    cr_assert_lt(strlen(name), sizeof(sa.sun_path));
    memcpy(sa.sun_path, name, strlen(name));
    len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + strlen(name));
    if (name[0] == '@') {
        sa.sun_path[0] = '\0';
    } else {
        len++;
        (void) unlink(name);
    }
    cr_assert_eq(bind(fd, (struct sockaddr *) &sa, len), 0, "bind %s", name);
    return fd;
}

/* The next datagram, as a string (nothing pending fails the test instead of blocking). */
static void
recv_text(int fd, char *buf, size_t cap)
{
    ssize_t n = recv(fd, buf, cap - 1, MSG_DONTWAIT);

    cr_assert_gt(n, 0, "no datagram arrived");
    buf[n] = '\0';
}

Test(ir_notify, unset_or_empty_sends_nothing)
{
    (void) unsetenv("NOTIFY_SOCKET");
    cr_assert_eq(cn_notify("READY=1"), CN_NOTFOUND);
    (void) setenv("NOTIFY_SOCKET", "", 1);
    cr_assert_eq(cn_notifyf("STATUS=%d", 1), CN_NOTFOUND);
}

Test(ir_notify, path_socket_gets_the_state)
{
    char path[64], buf[256];
    int fd;

    (void) snprintf(path, sizeof(path), "/tmp/cairn-notify-%ld.sock", (long) getpid());
    fd = bind_dgram(path);
    (void) setenv("NOTIFY_SOCKET", path, 1);
    cr_assert_eq(cn_notify("READY=1"), CN_OK);
    recv_text(fd, buf, sizeof(buf));
    cr_assert_str_eq(buf, "READY=1");
    cr_assert_eq(cn_notifyf("STOPPING=1\nSTATUS=%s %d", "stopping", 3), CN_OK);
    recv_text(fd, buf, sizeof(buf));
    cr_assert_str_eq(buf, "STOPPING=1\nSTATUS=stopping 3");
    (void) close(fd);
    (void) unlink(path);
}

Test(ir_notify, abstract_name_gets_the_state)
{
    char name[64], buf[256];
    int fd;

    (void) snprintf(name, sizeof(name), "@cairn-notify-test-%ld", (long) getpid());
    fd = bind_dgram(name);
    (void) setenv("NOTIFY_SOCKET", name, 1);
    cr_assert_eq(cn_notifyf("READY=1\nMAINPID=%ld", (long) getpid()), CN_OK);
    recv_text(fd, buf, sizeof(buf));
    cr_assert_eq(strncmp(buf, "READY=1\nMAINPID=", 16), 0, "%s", buf);
    (void) close(fd);
}

Test(ir_notify, bad_addresses_are_refused_not_fatal)
{
    char long_path[200];
    struct sockaddr_un sa;

    /* Just too long for sun_path (its NUL would not fit), and far too long. */
    memset(long_path, 'x', sizeof(long_path));
    long_path[0] = '/';
    long_path[sizeof(sa.sun_path)] = '\0';
    (void) setenv("NOTIFY_SOCKET", long_path, 1);
    cr_assert_eq(cn_notify("READY=1"), CN_INVAL);
    long_path[sizeof(long_path) - 1] = '\0';
    (void) setenv("NOTIFY_SOCKET", long_path, 1);
    cr_assert_eq(cn_notify("READY=1"), CN_INVAL);
    long_path[0] = '@';
    (void) setenv("NOTIFY_SOCKET", long_path, 1);
    cr_assert_eq(cn_notify("READY=1"), CN_INVAL);
    (void) setenv("NOTIFY_SOCKET", "relative/path", 1);
    cr_assert_eq(cn_notify("READY=1"), CN_INVAL);
    /* Well-formed, but nobody listens there. */
    (void) setenv("NOTIFY_SOCKET", "/tmp/cairn-notify-nobody-listens.sock", 1);
    cr_assert_eq(cn_notify("READY=1"), CN_IO);
}
