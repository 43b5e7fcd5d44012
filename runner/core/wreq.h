/* SPDX-License-Identifier: MIT */
/*
 * A write request: one instance's progress on its way from its shard to storage. It owns copies
 * of everything its struct rn_write points at (the step's output is reused at once), and names
 * the shard that waits for its acknowledgement. Made by the shard core, queued and written by
 * the persister, freed by whoever holds it last; never shared between threads at once.
 */
#ifndef RUNNER_WREQ_H
#define RUNNER_WREQ_H

#include <stddef.h>
#include <stdint.h>

#include "ir/base/buf.h"
#include "runner/store/backend.h"

struct rn_wreq {
    struct rn_write w;    /* what the backend writes; points into the fields below */
    uint32_t shard;       /* the shard whose instance this is: the ACK goes back there */
    struct rn_done *done; /* owned copies (values retained) */
    size_t ndone;
    struct cn_buf state;             /* the snapshot, when one is written */
    struct rn_child_start *children; /* owned (inputs owned) */
    size_t nchildren;
    struct rn_wait *waits; /* owned (keys, timeout values and answers owned) */
    size_t nwaits;
    struct rn_publish *published; /* owned (values owned; names the template's) */
    size_t npublished;
    struct rn_send *sends; /* owned (payloads owned; names the template's) */
    size_t nsends;
    struct rn_join *joins; /* owned (values owned) */
    size_t njoins;
    struct rn_wreq *next; /* the persister's queue link */
};

/* An empty write for instance iid under claim token lock (result None, nothing to write yet). */
struct rn_wreq *rn_wreq_new(uint32_t shard, struct rn_iid iid, struct rn_token lock);
void rn_wreq_free(struct rn_wreq *q);

#endif
