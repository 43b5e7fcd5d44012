/* SPDX-License-Identifier: MIT */
/* The pruner (see pruner.h). */
#include "runner/engine/pruner.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/sync.h"
#include "ir/base/xalloc.h"
#include "runner/engine/stop.h"

struct rn_pruner {
    struct rn_pruner_cfg cfg;
    struct rn_stop stop;
    _Atomic uint64_t instances, actions, events, errors, runs;
};

static void *
pruner_main(void *arg)
{
    struct rn_pruner *p = arg;
    struct rn_backend *b = p->cfg.backend;
    uint64_t round_i = 0, round_a = 0, round_e = 0;
    char cursor[RN_PRUNE_CURSOR_LEN] = "";
    bool failing = false;

    while (!rn_stop_is_set(&p->stop)) {
        struct cn_errmsg em;
        struct rn_prune_counts n;
        cn_err rv = b->ops->prune_due(b, p->cfg.retention_s, RN_PRUNE_BATCH, cursor, &n, &em);

        atomic_fetch_add(&p->runs, 1);
        if (rv != CN_OK) {
            cursor[0] = '\0'; /* the next round starts over */
            atomic_fetch_add(&p->errors, 1);
            if (!failing) { /* once per outage, not once per round */
                cn_log(CN_LOG_WARN, "retention: pruning failed: %s", em.text);
            }
            failing = true;
            (void) rn_stop_pause(&p->stop, p->cfg.interval_ms);
            continue;
        }
        failing = false;
        atomic_fetch_add(&p->instances, n.instances);
        atomic_fetch_add(&p->actions, n.actions);
        atomic_fetch_add(&p->events, n.events);
        round_i += n.instances;
        round_a += n.actions;
        round_e += n.events;
        /* More to look at; a full batch of events: a round's first batch takes the next. */
        if (n.instances >= RN_PRUNE_BATCH || n.events >= RN_PRUNE_BATCH || cursor[0] != '\0') {
            (void) rn_stop_pause(&p->stop, RN_PRUNE_PAUSE_MS);
            continue;
        }
        if (round_i > 0 || round_e > 0) {
            cn_log(CN_LOG_INFO,
                   "retention: deleted %llu finished instance(s), %llu action result(s), %llu "
                   "keyed event(s)",
                   (unsigned long long) round_i, (unsigned long long) round_a,
                   (unsigned long long) round_e);
        }
        round_i = round_a = round_e = 0;
        (void) rn_stop_pause(&p->stop, p->cfg.interval_ms);
    }
    return NULL;
}

cn_err
rn_pruner_start(const struct rn_pruner_cfg *cfg, struct rn_pruner **out, struct cn_errmsg *err)
{
    struct rn_pruner *p;
    cn_err rv;

    *out = NULL;
    if (cfg->backend->ops->prune_due == NULL) {
        return CN_OK;
    }
    p = cn_xcalloc(1, sizeof(*p));
    p->cfg = *cfg;
    if ((rv = rn_stop_start(&p->stop, "cairn-pruner", pruner_main, p, err)) != CN_OK) {
        free(p);
        return rv;
    }
    *out = p;
    return CN_OK;
}

void
rn_pruner_stats(struct rn_pruner *p, struct rn_pruner_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (p != NULL) {
        st->instances = atomic_load(&p->instances);
        st->actions = atomic_load(&p->actions);
        st->events = atomic_load(&p->events);
        st->errors = atomic_load(&p->errors);
        st->runs = atomic_load(&p->runs);
    }
}

void
rn_pruner_stop(struct rn_pruner *p)
{
    if (p == NULL) {
        return;
    }
    rn_stop_join(&p->stop);
    free(p);
}

bool
rn_retention_parse(const char *s, int64_t *seconds)
{
    static const struct {
        char unit;
        int64_t s;
    } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
    char *end = NULL;
    long long n;
    size_t i;

    if (s == NULL || strcmp(s, "off") == 0 || strcmp(s, "0") == 0) {
        *seconds = 0;
        return s != NULL;
    }
    if (*s < '0' || *s > '9') {
        return false;
    }
    errno = 0;
    n = strtoll(s, &end, 10);
    if (errno != 0 || n <= 0 || end == s || end[0] == '\0' || end[1] != '\0') {
        return false;
    }
    for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        /* at most 100 years: an interval PostgreSQL takes and a product that cannot overflow */
        if (end[0] == units[i].unit && n <= 3650 * 10 * 86400LL / units[i].s) {
            *seconds = n * units[i].s;
            return true;
        }
    }
    return false;
}
