/* SPDX-License-Identifier: MIT */
/* The template cache (see dagcache.h). */
#include "runner/engine/dagcache.h"

#include <stdlib.h>
#include <string.h>

#include "ir/base/xalloc.h"
#include "ir/compile.h"

const struct ir_dag *
rn_dagcache_get(struct rn_dagcache *c, struct rn_backend *b, struct rn_vid version_id,
                const char *name, struct cn_errmsg *err)
{
    struct rn_dagcache_entry e;
    struct ir_diags diags;
    char *src = NULL;
    size_t i;
    cn_err rv;

    /* A linear scan: a runner sees a handful of versions, and each lookup is once per claim. */
    for (i = 0; i < c->len; i++) {
        if (rn_vid_eq(c->items[i].version_id, version_id)) {
            return c->items[i].dag;
        }
    }
    if (b->ops->version_source(b, version_id, &src, err) != CN_OK) {
        return NULL;
    }
    ir_diags_init(&diags, name, src, strlen(src));
    e.dag = NULL;
    rv = ir_compile_source(src, strlen(src), &diags, &e.dag);
    if (rv == CN_NOMEM) {
        cn_oom("compiling a workflow version");
    }
    if (rv != CN_OK) {
        struct cn_buf msg = CN_BUF_INIT;
        if (diags.len > 0 && ir_diags_format(&diags, &msg) == CN_OK) {
            (void) cn_errmsg_set(err, CN_COMPILE, "%.200s", msg.data);
        } else {
            (void) cn_errmsg_set(err, CN_COMPILE, "%s", cn_strerror(rv));
        }
        cn_buf_fini(&msg);
        ir_diags_fini(&diags);
        free(src);
        return NULL;
    }
    ir_diags_fini(&diags);
    free(src);
    /* workflow_name() answers with the registered name, which the source does not hold. */
    if (name != NULL &&
        (e.dag->workflow = cn_arena_strndup(e.dag->arena, name, strlen(name))) == NULL) {
        cn_oom("compiling a workflow version");
    }
    e.version_id = version_id;
    CN_VEC_XPUSH(c, e);
    return e.dag;
}

void
rn_dagcache_fini(struct rn_dagcache *c)
{
    size_t i;

    for (i = 0; i < c->len; i++) {
        ir_dag_free(c->items[i].dag);
    }
    free(c->items);
    memset(c, 0, sizeof(*c));
}
