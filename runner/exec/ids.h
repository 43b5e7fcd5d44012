/* SPDX-License-Identifier: MIT */
/*
 * The runner's 16-byte ids, one distinct type per kind: an instance id, an execution id, a
 * claim token and a workflow version id. They are all UUID-shaped bytes, and as bare
 * `uint8_t[16]` any one converted silently into any other, so a call that swapped an instance
 * id and a claim token compiled and fenced the wrong lease. As distinct structs a swapped
 * argument or field does not compile (tests/support/ids_distinct.sh proves it on a real call).
 *
 * They are passed by value (16 bytes) or, for arrays, by const pointer. The bytes inside (.b)
 * meet the outside world only at a few boundaries, each an explicit copy of .b: libpq's binary
 * parameters and results (store/pg/), the snapshot codec (snapshot.c), the worker
 * protocol's wire structs (pool.c; worker-protocol/ stays on raw bytes) and uuid text
 * (cn_uuid_format(x.b, buf) from ir/base/uuid.h). Header only; pure, thread-safe.
 */
#ifndef RUNNER_IDS_H
#define RUNNER_IDS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct rn_iid {
    uint8_t b[16]; /* an instance id (cairn.runner_instances.instance_id) */
};
struct rn_xid {
    uint8_t b[16]; /* an execution id (one live execution node of an instance) */
};
struct rn_token {
    uint8_t b[16]; /* a claim token: one claim's lease on an instance */
};
struct rn_vid {
    uint8_t b[16]; /* a workflow version id (cairn.workflow_versions.id) */
};

/* rn_iid_eq, rn_xid_eq, rn_token_eq, rn_vid_eq: the same bytes, of ids of one kind only. */
#define RN_ID_EQ(kind)                                                        \
    static inline bool rn_##kind##_eq(struct rn_##kind a, struct rn_##kind b) \
    {                                                                         \
        return memcmp(a.b, b.b, sizeof(a.b)) == 0;                            \
    }
RN_ID_EQ(iid)
RN_ID_EQ(xid)
RN_ID_EQ(token)
RN_ID_EQ(vid)
#undef RN_ID_EQ

/* The all-zero id: no execution node has it (ids are random v4 UUIDs), so a shard timer uses
 * it for the instance's own deadline. */
static inline bool
rn_xid_is_nil(struct rn_xid a)
{
    static const struct rn_xid nil;
    return memcmp(a.b, nil.b, sizeof(a.b)) == 0;
}

#endif
