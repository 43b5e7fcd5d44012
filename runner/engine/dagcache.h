/* SPDX-License-Identifier: MIT */
/*
 * Compiled workflow templates by version id. A version's source is compiled once, on the first
 * claim of one of its instances; the template then lives until the cache is freed (after every
 * shard has stopped: instances borrow their template). Versions are immutable, so an entry is
 * never stale. Not thread-safe: only the claimer thread looks up and fills it; shards read the
 * templates it hands out, which never change.
 */
#ifndef RUNNER_DAGCACHE_H
#define RUNNER_DAGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "ir/dag.h"
#include "runner/store/backend.h"

struct rn_dagcache {
    struct rn_dagcache_entry {
        struct rn_vid version_id;
        struct ir_dag *dag;
    } * items;
    size_t len, cap;
};

/* The template of version_id: cached, else its source loaded from b and compiled. NULL with
 * err set when the source cannot be loaded (CN_NOTFOUND, storage errors) or does not compile
 * (CN_COMPILE, with the first diagnostics). */
const struct ir_dag *rn_dagcache_get(struct rn_dagcache *c, struct rn_backend *b,
                                     struct rn_vid version_id, const char *name,
                                     struct cn_errmsg *err);
void rn_dagcache_fini(struct rn_dagcache *c);

#endif
