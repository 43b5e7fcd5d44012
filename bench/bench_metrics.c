/* SPDX-License-Identifier: MIT */
/*
 * The runners' figures for cairn-bench: each runner's /metrics page (its summaries and
 * counters, read over a plain HTTP/1.1 GET) and, from /proc, its CPU time and peak RSS.
 *
 * Threads: main's only; callers pass the buffer a page is read into.
 */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench/cairn_bench.h"

/* utime + stime in seconds, and the peak RSS in kB, of a live process. */
void
proc_usage(pid_t pid, double *cpu, long *rss_kb)
{
    char path[64], buf[4096], *p;
    unsigned long ut = 0, st = 0;
    FILE *f;
    int i;

    *cpu = 0;
    *rss_kb = 0;
    (void) snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
    if ((f = fopen(path, "r")) != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL && (p = strrchr(buf, ')')) != NULL) {
            /* fields after ") ": state is field 3; utime 14, stime 15 */
            for (i = 3, p += 2; i < 14 && p != NULL; i++) {
                p = strchr(p, ' ');
                p = p != NULL ? p + 1 : NULL;
            }
            if (p != NULL && sscanf(p, "%lu %lu", &ut, &st) == 2) {
                *cpu = (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
            }
        }
        fclose(f);
    }
    (void) snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
    if ((f = fopen(path, "r")) != NULL) {
        while (fgets(buf, sizeof(buf), f) != NULL) {
            if (strncmp(buf, "VmHWM:", 6) == 0) {
                *rss_kb = strtol(buf + 6, NULL, 10);
            }
        }
        fclose(f);
    }
}

/* GET /metrics from 127.0.0.1:port into buf (NUL-terminated body); false when unreachable. */
bool
scrape(int port, char *buf, size_t cap)
{
    struct sockaddr_in a;
    struct timeval tv = {1, 0};
    const char *req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    size_t len = 0;
    ssize_t n;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char *body, *cl;
    bool ok = false;

    if (fd < 0) {
        return false;
    }
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t) port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *) &a, sizeof(a)) != 0 ||
        write(fd, req, strlen(req)) != (ssize_t) strlen(req)) {
        close(fd);
        return false;
    }
    /* Read until the body has its Content-Length (the server may keep the connection). */
    while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0) {
        len += (size_t) n;
        buf[len] = '\0';
        if ((body = strstr(buf, "\r\n\r\n")) != NULL &&
            ((cl = strstr(buf, "Content-Length:")) != NULL ||
             (cl = strstr(buf, "content-length:")) != NULL) &&
            cl < body && len - (size_t) (body + 4 - buf) >= (size_t) strtol(cl + 15, NULL, 10)) {
            break;
        }
    }
    close(fd);
    buf[len] = '\0';
    if ((body = strstr(buf, "\r\n\r\n")) != NULL && strncmp(buf, "HTTP/1.1 200", 12) == 0) {
        memmove(buf, body + 4, strlen(body + 4) + 1);
        ok = true;
    }
    return ok;
}

/* The value of sample `name` (with its labels, if any) in Prometheus text, or -1. */
double
sample_value(const char *text, const char *name)
{
    size_t n = strlen(name);
    const char *p = text;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, name, n) == 0 && p[n] == ' ') {
            return strtod(p + n + 1, NULL);
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    return -1;
}

/* Adds the summary `name` of one runner's /metrics text to acc (see struct summ). */
void
summ_merge(struct summ *acc, const char *text, const char *name)
{
    static const char *const qs[] = {"0.5", "0.95", "0.99", "1"};
    double v[4], n;
    char key[128];
    size_t k;

    (void) snprintf(key, sizeof(key), "%s_count", name);
    if ((n = sample_value(text, key)) <= 0) {
        return;
    }
    for (k = 0; k < 4; k++) {
        (void) snprintf(key, sizeof(key), "%s{quantile=\"%s\"}", name, qs[k]);
        v[k] = 1000 * sample_value(text, key);
    }
    acc->p50 = (acc->p50 * acc->count + v[0] * n) / (acc->count + n);
    acc->p95 = fmax(acc->p95, v[1]);
    acc->p99 = fmax(acc->p99, v[2]);
    acc->max = fmax(acc->max, v[3]);
    acc->count += n;
}

/* Throughput so far: worker outcomes (results and timeouts) over every runner, instances
 * finished. */
void
take_sample(struct sample *sp, double t, const int *ports, int nports, char *buf, long done)
{
    int i;

    sp->t = t;
    sp->outcomes = 0;
    sp->instances = (double) done;
    for (i = 0; i < nports; i++) {
        if (scrape(ports[i], buf, METRICS_MAX)) {
            sp->outcomes += sample_value(buf, "cairn_pool_results_total") +
                            sample_value(buf, "cairn_pool_timeouts_total");
        }
    }
}
