/* SPDX-License-Identifier: MIT */
/*
 * The worker wire protocol's messages and their codec (docs/protocol.md is the user-facing
 * specification). Every message is one msgpack map with the protocol version "v" and a "kind";
 * workers send requests on nng REQ contexts (hello, ready, control, goodbye) and the runner
 * answers each with one reply (welcome, refused, dispatch, noop, cancel, ack).
 *
 * Decoding is strict and allocation-safe: the bytes are shape-checked before msgpack-c sees
 * them (STYLE rule 25), every field is checked for presence and type, values (kwargs, results,
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
/* Largest message either side accepts (set as NNG_OPT_RECVMAXSZ on every socket). */
#define WP_MAX_MSG (16u << 20)
/* Longest worker name, action name, SDK version or credential accepted. */
#define WP_MAX_NAME 256
/* Most actions one worker may declare, and most slots. */
#define WP_MAX_ACTIONS 4096
#define WP_MAX_SLOTS   4096

#define WP_KINDS(X)                                                                              \
    X(HELLO, "hello")       /* worker -> runner: who I am, what I serve */                       \
    X(READY, "ready")       /* worker -> runner: a slot is free, maybe with the last outcome */  \
    X(CONTROL, "control")   /* worker -> runner: a parked request the runner may answer later */ \
    X(GOODBYE, "goodbye")   /* worker -> runner: stopping */                                     \
    X(WELCOME, "welcome")   /* runner -> worker: hello accepted */                               \
    X(REFUSED, "refused")   /* runner -> worker: hello refused (bad credential, version...) */   \
    X(DISPATCH, "dispatch") /* runner -> worker: run this action attempt */                      \
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

struct wp_msg {
    enum wp_kind kind;
    /* HELLO */
    const char *worker;     /* name */
    const char *sdk;        /* SDK name and version */
    const char *credential; /* shared token from configuration, or NULL */
    const char **actions;   /* names served */
    uint32_t nactions;
    uint32_t slots;
    /* WELCOME */
    uint64_t session; /* runner-chosen id of this worker connection */
    uint32_t idle_ms; /* how long the runner parks a request before a noop */
    /* REFUSED */
    const char *reason;
    /* READY */
    uint32_t slot;
    bool has_outcome;
    struct wp_outcome outcome;
    /* DISPATCH, CANCEL */
    uint8_t instance_id[16];
    uint8_t exec_id[16];
    uint32_t attempt;
    uint64_t token;
    const char *action;
    struct ir_val kwargs; /* a map */
    int64_t deadline_ms;  /* absolute, wall clock */
    /* storage for the strings above when decoded (freed by wp_msg_fini) */
    struct cn_arena *arena;
};

/* Name of a kind ("dispatch"), for logs. */
const char *wp_kind_name(enum wp_kind k);

/* Zeroes a message for building. */
void wp_msg_init(struct wp_msg *m, enum wp_kind kind);
/* Releases what a decoded (or built) message owns: values and decoded strings. Borrowed
 * strings set by the caller when building are not freed. */
void wp_msg_fini(struct wp_msg *m);

/* Appends the msgpack encoding of m. Returns CN_OK, CN_NOMEM, or CN_INVAL when a required
 * field is missing (e.g. a dispatch without an action) or a value cannot be encoded. */
CN_MUST_CHECK cn_err wp_msg_encode(const struct wp_msg *m, struct cn_buf *out);

/* Decodes one message. On CN_OK *m owns what it points to (wp_msg_fini). Errors: CN_TOOBIG
 * (over WP_MAX_MSG), CN_PROTO (malformed: not a map, missing or mistyped field, unknown kind,
 * bad value document), CN_VERSION (another protocol version), CN_NOMEM; err says which field. */
CN_MUST_CHECK cn_err wp_msg_decode(const void *buf, size_t len, struct wp_msg *m,
                                   struct cn_errmsg *err);

#endif
