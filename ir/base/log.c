/* SPDX-License-Identifier: MIT */
/* Log lines (see log.h). The settings are written once, before any thread starts. */
#include "ir/base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

static enum cn_log_level log_min = CN_LOG_INFO;
static bool log_json;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void
cn_log_setup(enum cn_log_level min, bool json)
{
    log_min = min;
    log_json = json;
}

bool
cn_log_level_parse(const char *name, enum cn_log_level *out)
{
    size_t i;

    for (i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (enum cn_log_level) i;
            return true;
        }
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
