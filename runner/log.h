/* SPDX-License-Identifier: MIT */
/*
 * Structured log lines on stderr for cairn-runner: `text` (time, level, message) or `json`
 * (one object per line: ts, level, msg), chosen by CAIRN_LOG_FORMAT; lines below
 * CAIRN_LOG_LEVEL are dropped. Thread-safe: each line is written with one call.
 */
#ifndef RUNNER_LOG_H
#define RUNNER_LOG_H

#include <stdbool.h>

#include "ir/base/err.h"

enum rn_log_level { RN_LOG_DEBUG = 0, RN_LOG_INFO, RN_LOG_WARN, RN_LOG_ERROR };

void rn_log_setup(enum rn_log_level min, bool json);
void rn_log(enum rn_log_level level, const char *fmt, ...) CN_PRINTF(2, 3);

#endif
