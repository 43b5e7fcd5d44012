/* SPDX-License-Identifier: MIT */
/*
 * Log lines on stderr for Cairn's processes (cairn-runner, cairn-worker, cairnctl exec) and the
 * libraries they host (the worker pool, the worker SDK): `text` (time, level, message, then the
 * line's fields as key=value) or `json` (one object per line: ts, level, msg, and each field as
 * a key of its own). Fields are what a line is about (instance, workflow, exec_id, attempt), so
 * that logs can be searched by them. Lines below the minimum level are dropped.
 *
 * A log file (cn_log_file_open) takes stderr's place: the file is opened in append mode and
 * put on descriptor 2 itself, so that whatever else the process prints there (a library's
 * message, an abort, a sanitizer's report) lands next to the log lines. cn_log_file_reopen
 * opens the same path again (for logrotate, on SIGHUP) and swaps it in with one dup2, which
 * is atomic for every other thread: a line written meanwhile goes whole to the old file or
 * whole to the new one, so no lock is needed.
 *
 * Threads: cn_log may be called from any thread; each line is written with one call, so lines
 * never interleave. cn_log_setup and cn_log_file_open write process-wide settings: call them
 * once, before any thread that logs starts (the default, before them, is info and text on
 * stderr). cn_log_file_reopen: one thread at a time (the programs' signal-handling main).
 */
#ifndef IR_BASE_LOG_H
#define IR_BASE_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/base/err.h"

enum cn_log_level { CN_LOG_DEBUG = 0, CN_LOG_INFO, CN_LOG_WARN, CN_LOG_ERROR };

/* The level names, as CAIRN_LOG_LEVEL spells them, in level order. */
#define CN_LOG_LEVEL_NAMES "debug, info, warn (or warning) or error"

void cn_log_setup(enum cn_log_level min, bool json);

/* Opens path for appending (created 0640 if missing) and makes it the process's stderr, and so
 * the log's destination. Returns CN_IO with the reason in err when it cannot be opened;
 * stderr is unchanged then. */
CN_MUST_CHECK cn_err cn_log_file_open(const char *path, struct cn_errmsg *err);

/* Opens the log file's path again and puts it in place of the current one (the current
 * descriptor may point at a renamed file). Returns CN_OK, CN_NOTFOUND when no log file was
 * opened (logging to the original stderr), or CN_IO (err says why; the log stays where it
 * was). */
CN_MUST_CHECK cn_err cn_log_file_reopen(struct cn_errmsg *err);

/* The log file's path, NULL without one. */
const char *cn_log_file_path(void);

/* What the programs do on SIGHUP, from the thread that takes signals: cn_log_file_reopen, and
 * a line saying what came of it (info without a log file: SIGHUP is then not an error). */
void cn_log_sighup(void);

/* Parses a level name ("debug", "info", "warn" or "warning", "error", in any case). Returns
 * false for anything else. */
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
