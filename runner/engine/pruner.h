/* SPDX-License-Identifier: MIT */
/*
 * The pruner: retention. It deletes finished instances, with their action results and history,
 * once they finished longer ago than their workflow's retention (the runner's CAIRN_RETENTION,
 * or the workflow's own: `cairnctl retention set`), and keyed events older than CAIRN_RETENTION
 * that no unfinished instance can take any more, through the backend's prune_due: one small
 * batch per transaction (sql/0013_retention.sql), again at once while batches come back full
 * (with a short pause between, so that the database's other work goes first), then after the
 * interval. Several runners may prune at once: a batch is taken under an advisory lock, so
 * one of them deletes at a time and the others find nothing to do.
 *
 * Threads: its own thread, on its own backend (connection); rn_pruner_start/stop/stats from the
 * runner's. The counters are atomics.
 */
#ifndef RUNNER_PRUNER_H
#define RUNNER_PRUNER_H

#include <stdint.h>

#include "ir/base/err.h"
#include "runner/store/backend.h"

/* Instances deleted per transaction: at ~10 action results each, a batch deletes ~5 000 rows
 * in tens of milliseconds, short enough to never hold the database's attention for long. */
#define RN_PRUNE_BATCH 500
/* The pause between two full batches. */
#define RN_PRUNE_PAUSE_MS 20

struct rn_pruner_cfg {
    struct rn_backend *backend; /* used by the pruner thread only; needs prune_due */
    int64_t retention_s;        /* the default retention; 0: keep (only workflows' own apply) */
    uint32_t interval_ms;       /* between rounds that found nothing more to delete */
};

struct rn_pruner_stats {
    uint64_t instances; /* deleted so far */
    uint64_t actions;   /* action results deleted so far */
    uint64_t events;    /* keyed events deleted so far */
    uint64_t errors;    /* rounds that failed */
    uint64_t runs;      /* rounds (one batch each) */
};

struct rn_pruner;

/* NULL in *out (and CN_OK) with a backend that cannot prune. */
CN_MUST_CHECK cn_err rn_pruner_start(const struct rn_pruner_cfg *cfg, struct rn_pruner **out,
                                     struct cn_errmsg *err);
void rn_pruner_stats(struct rn_pruner *p, struct rn_pruner_stats *st);
/* Stops (a batch in progress finishes) and frees; NULL is fine. */
void rn_pruner_stop(struct rn_pruner *p);

/* Reads a retention as CAIRN_RETENTION spells it: `off` (or 0), or a positive whole number
 * followed by s, m, h or d (`30d`, `36h`). False for anything else. */
bool rn_retention_parse(const char *s, int64_t *seconds);

#endif
