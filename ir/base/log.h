/* SPDX-License-Identifier: MIT */
/*
 * Log lines on stderr for Cairn's processes (cairn-runner, cairn-worker, cairnctl exec) and the
 * libraries they host (the worker pool, the worker SDK): `text` (time, level, message, then the
 * line's fields as key=value) or `json` (one object per line: ts, level, msg, and each field as
 * a key of its own). Fields are what a line is about (instance, workflow, exec_id, attempt), so
 * that logs can be searched by them. Lines below the minimum level are dropped.
 *
 * Threads: cn_log may be called from any thread; each line is written with one call, so lines
 * never interleave. cn_log_setup writes process-wide settings: call it once, before any thread
 * that logs starts (the default, before it, is info and text).
 */
#ifndef IR_BASE_LOG_H
#define IR_BASE_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/base/err.h"

enum cn_log_level { CN_LOG_DEBUG = 0, CN_LOG_INFO, CN_LOG_WARN, CN_LOG_ERROR };

/* The level names, as CAIRN_LOG_LEVEL spells them, in level order. */
#define CN_LOG_LEVEL_NAMES "debug, info, warn or error"

void cn_log_setup(enum cn_log_level min, bool json);

/* Parses a level name ("debug", "info", "warn", "error"). Returns false for anything else. */
bool cn_log_level_parse(const char *name, enum cn_log_level *out);

/* Parses a format name: "text" (json false) or "json". Returns false for anything else. */
bool cn_log_format_parse(const char *name, bool *json);

void cn_log(enum cn_log_level level, const char *fmt, ...) CN_PRINTF(2, 3);

/* Whether a line at level would be written (to skip building one that would not). */
bool cn_log_enabled(enum cn_log_level level);

/* A structured field of a log line; a NULL value is left out. */
struct cn_log_field {
    const char *key;
    const char *value;
};

/* cn_log with fields[0..n) (keys from the names above; values without spaces read best). */
void cn_log_fields(enum cn_log_level level, const struct cn_log_field *fields, size_t n,
                   const char *fmt, ...) CN_PRINTF(4, 5);

#endif
