/* SPDX-License-Identifier: MIT */
/* Log lines (see log.h). The settings are written once, before any thread starts. */
#include "ir/base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

static enum cn_log_level log_min = CN_LOG_INFO;
static bool log_json;
static char *log_path; /* cn_log_file_open's path; NULL: the original stderr */

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void
cn_log_setup(enum cn_log_level min, bool json)
{
    log_min = min;
    log_json = json;
}

/* Opens path and puts it on descriptor 2. Only dup2 touches descriptor 2, so a thread writing
 * a line meanwhile writes it to one file or the other, never to a closed descriptor. */
static cn_err
log_file_swap(const char *path, struct cn_errmsg *err)
{
    int fd;

    do {
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        return cn_errmsg_set(err, CN_IO, "cannot open log file %s: %s", path, strerror(errno));
    }
    if (fd != STDERR_FILENO) {
        if (dup2(fd, STDERR_FILENO) < 0) {
            int saved = errno;

            (void) close(fd);
            return cn_errmsg_set(err, CN_IO, "cannot use log file %s: %s", path, strerror(saved));
        }
        (void) close(fd);
    } else {
        (void) fcntl(fd, F_SETFD, 0); /* stderr had been closed: keep it across exec */
    }
    return CN_OK;
}

cn_err
cn_log_file_open(const char *path, struct cn_errmsg *err)
{
    cn_err rv;

    (void) fflush(stderr);
    if ((rv = log_file_swap(path, err)) != CN_OK) {
        return rv;
    }
    free(log_path);
    if ((log_path = strdup(path)) == NULL) {
        return cn_errmsg_set(err, CN_NOMEM, "out of memory");
    }
    return CN_OK;
}

cn_err
cn_log_file_reopen(struct cn_errmsg *err)
{
    if (log_path == NULL) {
        return cn_errmsg_set(err, CN_NOTFOUND, "no log file (logging to stderr)");
    }
    return log_file_swap(log_path, err);
}

const char *
cn_log_file_path(void)
{
    return log_path;
}

void
cn_log_sighup(void)
{
    struct cn_errmsg em;

    switch (cn_log_file_reopen(&em)) {
    case CN_OK:
        cn_log(CN_LOG_INFO, "SIGHUP: log file %s reopened", log_path);
        break;
    case CN_NOTFOUND:
        cn_log(CN_LOG_INFO, "SIGHUP: no log file to reopen (the log goes to stderr)");
        break;
    default:
        cn_log(CN_LOG_ERROR, "SIGHUP: %s; the log stays in the file it was in", em.text);
        break;
    }
}

bool
cn_log_level_parse(const char *name, enum cn_log_level *out)
{
    size_t i;

    for (i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcasecmp(name, level_names[i]) == 0) {
            *out = (enum cn_log_level) i;
            return true;
        }
    }
    /* Python's name for it, and any case, as Python's logging takes: the Python worker reads
     * the same words, so one CAIRN_LOG_LEVEL serves both. */
    if (strcasecmp(name, "warning") == 0) {
        *out = CN_LOG_WARN;
        return true;
    }
    return false;
}

bool
cn_log_format_parse(const char *name, bool *json)
{
    if (strcmp(name, "text") != 0 && strcmp(name, "json") != 0) {
        return false;
    }
    *json = strcmp(name, "json") == 0;
    return true;
}

static void log_line(enum cn_log_level level, const struct cn_log_field *fields, size_t n,
                     const char *fmt, va_list ap) CN_PRINTF(4, 0);

static void
log_line(enum cn_log_level level, const struct cn_log_field *fields, size_t n, const char *fmt,
         va_list ap)
{
    char msg[1024], ts[64], line[1800];
    struct timespec now;
    struct tm tm;
    size_t i, len;

    (void) vsnprintf(msg, sizeof(msg), fmt, ap);
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    (void) snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
                    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                    (long) (now.tv_nsec / 1000000) % 1000);
    if (log_json) {
        json_t *o = json_pack("{s:s, s:s, s:s}", "ts", ts, "level", level_names[level], "msg", msg);
        char *text;

        for (i = 0; o != NULL && i < n; i++) {
            if (fields[i].value != NULL) {
                (void) json_object_set_new(o, fields[i].key, json_string(fields[i].value));
            }
        }
        text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

        if (text != NULL) {
            (void) fprintf(stderr, "%s\n", text);
            free(text);
        }
        json_decref(o);
        return;
    }
    (void) snprintf(line, sizeof(line), "%s %-5s %s", ts, level_names[level], msg);
    for (i = 0; i < n; i++) {
        len = strlen(line);
        if (fields[i].value != NULL && len < sizeof(line)) {
            (void) snprintf(line + len, sizeof(line) - len, " %s=%s", fields[i].key,
                            fields[i].value);
        }
    }
    len = strlen(line);
    if (len + 1 < sizeof(line)) {
        line[len] = '\n';
        line[len + 1] = '\0';
    } else {
        line[sizeof(line) - 2] = '\n';
    }
    (void) fputs(line, stderr);
}

bool
cn_log_enabled(enum cn_log_level level)
{
    return level >= log_min;
}

void
cn_log(enum cn_log_level level, const char *fmt, ...)
{
    va_list ap;

    if (level < log_min) {
        return;
    }
    va_start(ap, fmt);
    log_line(level, NULL, 0, fmt, ap);
    va_end(ap);
}

void
cn_log_fields(enum cn_log_level level, const struct cn_log_field *fields, size_t n, const char *fmt,
              ...)
{
    va_list ap;

    if (level < log_min) {
        return;
    }
    va_start(ap, fmt);
    log_line(level, fields, n, fmt, ap);
    va_end(ap);
}
