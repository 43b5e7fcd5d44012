/* SPDX-License-Identifier: MIT */
/*
 * TEMPORARY, for the merge with the runner.c split: the log moved to ir/base/log.h (cn_log);
 * these aliases keep runner.c building under its old names until it is renamed there. Delete
 * this file then; nothing else includes it.
 */
#ifndef RUNNER_LOG_H
#define RUNNER_LOG_H

#include "ir/base/log.h"

#define rn_log_level cn_log_level
#define rn_log_setup cn_log_setup
#define rn_log       cn_log
#define RN_LOG_DEBUG CN_LOG_DEBUG
#define RN_LOG_INFO  CN_LOG_INFO
#define RN_LOG_WARN  CN_LOG_WARN
#define RN_LOG_ERROR CN_LOG_ERROR

#endif
