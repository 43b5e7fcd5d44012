/* SPDX-License-Identifier: MIT */
/*
 * The worker wire protocol's messages and their codec (docs/protocol.md is the user-facing
 * specification). Every message is one msgpack map with the protocol version "v" and a "kind";
 * workers send requests on nng REQ contexts (hello, ready, control, goodbye) and the runner
 * answers each with one reply (welcome, refused, dispatch, noop, cancel, ack).
 *
 * Decoding is strict and allocation-safe: the bytes are shape-checked before msgpack-c sees
 * them (ir_msgpack_shape_ok: msgpack-c trusts the sizes a message claims), every field is
 * checked for presence and type, values (kwargs, results,
 * errors) are decoded as separate value documents, and anything malformed is a typed error
 * (CN_PROTO, CN_VERSION), never a crash. Unknown fields are ignored so that a newer peer can
 * add optional fields; an unknown kind is an error. Pure: no I/O, no threads.
 */
#ifndef WORKER_PROTOCOL_PROTO_H
#define WORKER_PROTOCOL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/arena.h"
#include "ir/base/buf.h"
#include "ir/base/err.h"
#include "ir/value.h"

#define WP_PROTOCOL_VERSION 1
/* Where a worker dials, and the runner listens, when not told otherwise. */
#define WP_DEFAULT_URL "tcp://127.0.0.1:24118"
/* Largest message either side accepts (set as NNG_OPT_RECVMAXSZ on every socket). nng counts
 * its own header (the REQ/REP request id, a few bytes) against that limit, so senders keep
 * message bodies to WP_MAX_BODY. */
#define WP_MAX_MSG  (16u << 20)
#define WP_MAX_BODY (WP_MAX_MSG - 64u)
/* Longest worker name, action name, SDK version or credential accepted. */
#define WP_MAX_NAME 256
/* Most actions one worker may declare, most slots, most prefetched attempts. */
#define WP_MAX_ACTIONS  4096
#define WP_MAX_SLOTS    4096
#define WP_MAX_PREFETCH 4096
/* Most outcomes in one `ready` and attempts in one `dispatch`: a worker never holds more
 * than slots + prefetch attempts. */
#define WP_MAX_BATCH (WP_MAX_SLOTS + WP_MAX_PREFETCH)
/* A `ready` without "room": the worker leaves its room to the runner's count (slots + prefetch
 * minus what is in flight to it). */
#define WP_ROOM_ANY UINT32_MAX

#define WP_KINDS(X)                                                                              \
    X(HELLO, "hello")       /* worker -> runner: who I am, what I serve */                       \
    X(READY, "ready")       /* worker -> runner: outcomes, and room for more work */             \
    X(CONTROL, "control")   /* worker -> runner: a parked request the runner may answer later */ \
    X(GOODBYE, "goodbye")   /* worker -> runner: stopping */                                     \
    X(WELCOME, "welcome")   /* runner -> worker: hello accepted */                               \
    X(REFUSED, "refused")   /* runner -> worker: hello refused (bad credential, version...) */   \
    X(DISPATCH, "dispatch") /* runner -> worker: run these action attempts */                    \
    X(NOOP, "noop")         /* runner -> worker: nothing to do yet; ask again */                 \
    X(CANCEL, "cancel")     /* runner -> worker: stop this attempt if it is still running */     \
    X(ACK, "ack")           /* runner -> worker: goodbye noted */

#define WP_KIND_ENUM(id, text) WP_##id,
enum wp_kind { WP_KINDS(WP_KIND_ENUM) WP_KIND_COUNT_ };
#undef WP_KIND_ENUM

/* The outcome of an action attempt, carried by a `ready`. */
struct wp_outcome {
    uint8_t exec_id[16];
    uint32_t attempt;
    uint64_t token; /* the dispatch token it answers */
    bool ok;
    struct ir_val value; /* ok: the result; else the error map {type, message, bases, details} */
};

/* One attempt to run, carried by a `dispatch`. */
struct wp_dispatch {
    uint8_t instance_id[16];
    uint8_t exec_id[16];
    uint32_t attempt;
    uint64_t token; /* runner-chosen; the outcome must echo it */
    const char *action;
    struct ir_val kwargs;     /* a map */
    int64_t deadline_ms;      /* absolute, wall clock; 0: none */
    uint64_t timeout_ms;      /* counted from when the worker starts it; 0: none (optional on
                                 the wire, "timeout_ms") */
    struct ir_val last_error; /* the previous attempt's error map (attempt > 1), else None:
                                 optional on the wire ("last_error") */
};

struct wp_msg {
    enum wp_kind kind;
    /* HELLO */
    const char *worker;     /* name */
    const char *sdk;        /* SDK name and version */
    const char *credential; /* shared token from configuration, or NULL */
    const char **actions;   /* names served */
    uint32_t nactions;
    uint32_t slots;
    uint32_t prefetch; /* attempts the runner may send beyond slots (optional, default 0) */
    /* WELCOME */
    uint64_t session; /* runner-chosen id of this worker connection */
    uint32_t idle_ms; /* how long the runner parks a request before a noop */
    /* REFUSED */
    const char *reason;
    /* READY (0..WP_MAX_BATCH outcomes) */
    struct wp_outcome *outcomes;
    uint32_t noutcomes;
    uint32_t room; /* attempts the worker takes now (optional; WP_ROOM_ANY: as many as the
                      runner counts free). A worker serving several runners shares its slots:
                      each runner dispatches at most this many in reply */
    /* DISPATCH (1..WP_MAX_BATCH attempts) */
    struct wp_dispatch *items;
    uint32_t nitems;
    /* CANCEL */
    uint8_t exec_id[16];
    uint32_t attempt;
    uint64_t token;
    /* storage for the strings and arrays above when decoded (freed by wp_msg_fini) */
    struct cn_arena *arena;
};

/* Builds a `ready` or `dispatch` one entry at a time, refusing an entry that would take the
 * message past WP_MAX_BODY or WP_MAX_BATCH, so a sender fills a message and keeps the rest for
 * the next one. */
struct wp_batch {
    struct cn_buf buf; /* the message so far; complete after wp_batch_finish */
    size_t count_at;   /* offset of the entry count */
    uint32_t n;        /* entries added */
    struct cn_buf tmp; /* scratch for value documents */
};


/* Name of a kind ("dispatch"), for logs. */
const char *wp_kind_name(enum wp_kind k);

/* Zeroes a message for building (room: WP_ROOM_ANY). */
void wp_msg_init(struct wp_msg *m, enum wp_kind kind);
/* Releases what a decoded message owns (values, strings, arrays). A message built by the
 * caller borrows everything and needs no fini. */
void wp_msg_fini(struct wp_msg *m);

/* Appends the msgpack encoding of m. Returns CN_OK, CN_NOMEM, or CN_INVAL when a required
 * field is missing (e.g. a dispatch without an action) or a value cannot be encoded. */
CN_MUST_CHECK cn_err wp_msg_encode(const struct wp_msg *m, struct cn_buf *out);

/* Decodes one message. On CN_OK *m owns what it points to (wp_msg_fini). Errors: CN_TOOBIG
 * (over WP_MAX_MSG), CN_PROTO (malformed: not a map, missing or mistyped field, unknown kind,
 * bad value document), CN_VERSION (another protocol version), CN_NOMEM; err says which field. */
CN_MUST_CHECK cn_err wp_msg_decode(const void *buf, size_t len, struct wp_msg *m,
                                   struct cn_errmsg *err);

/* Starts a batch message of kind WP_READY or WP_DISPATCH (else CN_INVAL). CN_NOMEM. */
CN_MUST_CHECK cn_err wp_batch_begin(struct wp_batch *b, enum wp_kind kind);
/* Starts a `ready` that carries room (WP_ROOM_ANY: none; else at most WP_MAX_BATCH). */
CN_MUST_CHECK cn_err wp_batch_begin_ready(struct wp_batch *b, uint32_t room);
/* Appends one entry to a batch begun with the matching kind. Returns CN_OK; CN_TOOBIG when
 * the entry would take the message past WP_MAX_BODY or WP_MAX_BATCH entries (the batch is
 * unchanged: send it and add the entry to the next one; alone in a batch, the entry can never
 * be sent); CN_INVAL when its value cannot be encoded (too deep, not a plain value) or a
 * dispatch has no action or kwargs that are not a map (unchanged too); CN_NOMEM. */
CN_MUST_CHECK cn_err wp_batch_add_outcome(struct wp_batch *b, const struct wp_outcome *o);
CN_MUST_CHECK cn_err wp_batch_add_dispatch(struct wp_batch *b, const struct wp_dispatch *d);
/* Completes the message in b->buf (the entry count is written). */
void wp_batch_finish(struct wp_batch *b);
void wp_batch_fini(struct wp_batch *b);

#endif
