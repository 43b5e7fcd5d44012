/* SPDX-License-Identifier: MIT */
/*
 * The built-in std.* actions (std_actions.c), for cairn-worker and `cairnctl exec`.
 */
#ifndef WORKER_PROTOCOL_STD_ACTIONS_H
#define WORKER_PROTOCOL_STD_ACTIONS_H

#include <stddef.h>

#include "cairn/worker.h"

#define CAIRN_STD_MAX_SLEEP_MS (24LL * 3600 * 1000)

struct cairn_std_action {
    const char *name;
    cairn_worker_handler fn;
};

extern const struct cairn_std_action cairn_std_actions[];
extern const size_t cairn_n_std;
#define CAIRN_N_STD cairn_n_std

#endif
