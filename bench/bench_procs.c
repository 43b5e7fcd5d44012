/* SPDX-License-Identifier: MIT */
/*
 * The processes cairn-bench starts and always stops: the runners and workers (spawn,
 * stop_fleet), the throwaway PostgreSQL cluster's initdb and pg_ctl (through runuser as root:
 * PostgreSQL refuses to run as root), and the cleanup that stops and removes them, also after
 * Ctrl-C or SIGTERM (which only set g_stop) and from die().
 *
 * Threads: main's only. State: g (the children, the temporary directory, the cluster).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/cairn_bench.h"

struct bench_global g;
volatile sig_atomic_t g_stop;

static void
on_signal(int sig)
{
    (void) sig;
    g_stop = 1;
}

/* Ctrl-C and SIGTERM end the drain (g_stop), so that the run stops its fleet and cleans up
 * before it exits; SIGPIPE is ignored: a write to a runner that went away fails instead of
 * killing the harness, which would leave its fleet and cluster behind. */
void
catch_signals(void)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
}

double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

void
die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "cairn-bench: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    cleanup(true);
    exit(1);
}

static void
exec_child(const char *const argv[], const char *log, bool as_postgres)
{
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    signal(SIGINT, SIG_IGN); /* Ctrl-C reaches the group: cairn-bench stops its children */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcast-qual"
    if (as_postgres) {
        const char *ra[16] = {"/usr/sbin/runuser", "-u", "postgres", "--"};
        int i;
        for (i = 0; argv[i] != NULL && i < 11; i++) {
            ra[4 + i] = argv[i];
        }
        ra[4 + i] = NULL;
        execv(ra[0], (char *const *) ra);
    } else {
        execv(argv[0], (char *const *) argv); /* execv never writes to its argv */
    }
#pragma GCC diagnostic pop
    _exit(127);
}

pid_t
spawn(const char *const argv[], const char *log)
{
    pid_t pid = fork();

    if (pid < 0) {
        die("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        exec_child(argv, log, false);
    }
    if (g.npids < MAX_PROCS) {
        g.pids[g.npids++] = pid;
    }
    return pid;
}

/* Runs a command to completion (as the postgres user when we are root); returns its status. */
static int
run_wait(const char *const argv[], const char *log)
{
    pid_t pid = fork();
    int st = 0;

    if (pid < 0) {
        return -1;
    }
    if (pid == 0) {
        exec_child(argv, log, geteuid() == 0);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick; the child binds it
 * a moment later, which is as good as a port can be promised). */
int
free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *) &a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *) &a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    if (port == 0) {
        die("no free TCP port: %s", strerror(errno));
    }
    return port;
}

static void
pg_stop(void)
{
    char data[128], log[128], cmd[160];

    if (g.pg_dir[0] == '\0') {
        return;
    }
    (void) snprintf(data, sizeof(data), "%s/data", g.pg_dir);
    (void) snprintf(log, sizeof(log), "%s/stop.log", g.pg_dir);
    {
        char ctl[PATH_MAX];
        (void) snprintf(ctl, sizeof(ctl), "%s/pg_ctl", g.pg_bin);
        const char *argv[] = {ctl, "-D", data, "-m", "immediate", "-w", "-t", "30", "stop", NULL};
        (void) run_wait(argv, log);
    }
    (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g.pg_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cairn-bench: could not remove %s\n", g.pg_dir);
    }
    g.pg_dir[0] = '\0';
}

/* Starts a durable cluster (fsync and synchronous_commit on: as a user runs it) on a unix
 * socket in a fresh directory; returns its URL (static). */
const char *
pg_start(const char *bin)
{
    static char url[256];
    char data[128], log[128], opts[256], exe[PATH_MAX], slog[128];
    int port = free_port();

    g.pg_bin = bin;
    (void) snprintf(exe, sizeof(exe), "%s/initdb", bin);
    if (access(exe, X_OK) != 0) {
        die("%s not found: give --database-url, or install PostgreSQL (scripts/setup-deps) or "
            "set --pg-bin",
            exe);
    }
    (void) snprintf(g.pg_dir, sizeof(g.pg_dir), "/tmp/cairn-bench-pg.XXXXXX");
    if (mkdtemp(g.pg_dir) == NULL) {
        g.pg_dir[0] = '\0';
        die("mkdtemp: %s", strerror(errno));
    }
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (pw == NULL || chown(g.pg_dir, pw->pw_uid, pw->pw_gid) != 0) {
            die("running as root needs the postgres user to own %s", g.pg_dir);
        }
    }
    (void) snprintf(data, sizeof(data), "%s/data", g.pg_dir);
    (void) snprintf(log, sizeof(log), "%s/initdb.log", g.pg_dir);
    {
        const char *argv[] = {exe,     "-D", data,   "-U",         "postgres",  "-A",
                              "trust", "-E", "UTF8", "--locale=C", "--no-sync", NULL};
        if (run_wait(argv, log) != 0) {
            die("initdb failed (log: %s)", log);
        }
    }
    (void) snprintf(exe, sizeof(exe), "%s/pg_ctl", bin);
    (void) snprintf(log, sizeof(log), "%s/server.log", g.pg_dir);
    (void) snprintf(slog, sizeof(slog), "%s/start.log", g.pg_dir);
    (void) snprintf(opts, sizeof(opts),
                    "-k '%s' -p %d -c listen_addresses='' -c fsync=on "
                    "-c synchronous_commit=on",
                    g.pg_dir, port);
    {
        const char *argv[] = {exe,  "-D", data, "-l", log,     "-w",
                              "-t", "60", "-o", opts, "start", NULL};
        if (run_wait(argv, slog) != 0) {
            die("pg_ctl start failed (log: %s)", log);
        }
    }
    (void) snprintf(url, sizeof(url), "postgresql://postgres@/postgres?host=%s&port=%d", g.pg_dir,
                    port);
    return url;
}

/* Stops the runners and workers (SIGTERM: runners hand their leases back) and reaps them. */
void
stop_fleet(void)
{
    int i;

    for (i = 0; i < g.npids; i++) {
        kill(g.pids[i], SIGTERM);
    }
    for (i = 0; i < g.npids; i++) {
        while (waitpid(g.pids[i], NULL, 0) < 0 && errno == EINTR) {
        }
    }
    g.npids = 0;
}

void
cleanup(bool keep_tmp)
{
    stop_fleet();
    pg_stop();
    if (g.tmp[0] != '\0') {
        if (keep_tmp) {
            fprintf(stderr, "cairn-bench: logs kept in %s\n", g.tmp);
        } else {
            char cmd[96];
            (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g.tmp);
            if (system(cmd) != 0) {
                fprintf(stderr, "cairn-bench: could not remove %s\n", g.tmp);
            }
        }
        g.tmp[0] = '\0';
    }
}
