/* SPDX-License-Identifier: MIT */
/*
 * libcairn-worker: the C SDK for writing Cairn workers (docs/protocol.md, "Running workers").
 * A worker dials a runner, says which actions it serves and how many it runs at once (slots),
 * then runs the attempts the runner dispatches and reports each outcome.
 *
 *     struct cairn_worker *w;
 *     if (cairn_worker_new("tcp://127.0.0.1:24118", NULL, &w) != CN_OK) { ... }
 *     cairn_worker_register(w, "app.greet", greet, NULL);
 *     if (cairn_worker_start(w) != CN_OK) { fprintf(stderr, "%s\n", cairn_worker_error(w)); }
 *     ... wait for a signal ...
 *     cairn_worker_stop(w, 10000);
 *     cairn_worker_free(w);
 *
 * THREADS. start() runs one thread per slot plus one control thread; each handler call runs on
 * a slot thread, so a handler registered for several slots must be thread-safe. The SDK
 * reconnects by itself (nng's dialer) and opens a new session with a new `hello`; attempts
 * that were running when the connection dropped are not reported (the runner has already
 * failed them with WorkerLost). Functions are not thread-safe unless marked "Thread-safe".
 *
 * ERRORS. Functions return cn_err (ir/base/err.h; CN_OK is 0). Details go to the log (stderr,
 * through ir/base/log.h: cn_log_setup chooses the level and text or JSON lines) and, for start(),
 * to cairn_worker_error(). Running out of memory inside the SDK aborts the process with a log
 * line (ir/base/xalloc.h) rather than dropping an attempt: run workers under a supervisor.
 */
#ifndef CAIRN_WORKER_H
#define CAIRN_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/base/err.h"
#include "ir/value.h"

struct cairn_worker;

/* Runners one worker may serve (cairn_worker_new's url and cairn_worker_add_url's). */
#define CAIRN_WORKER_MAX_URLS 64

/* Options for cairn_worker_new; zero means the default. Strings are copied. */
struct cairn_worker_options {
    const char *name;          /* worker name shown by the runner; default "<host>-<pid>" */
    uint32_t slots;            /* actions run at once, 1..4096; default 1 */
    uint32_t prefetch;         /* attempts the runner may send ahead, queued here until a slot
                                  is free, 0..4096; default 0 (see docs/protocol.md) */
    const char *credential;    /* shared token the runner may require; default none */
    uint32_t reconnect_min_ms; /* first reconnect delay; default 100 */
    uint32_t reconnect_max_ms; /* reconnect delay cap (doubling); default 5000 */
    uint32_t start_timeout_ms; /* how long start() waits for `welcome`; default forever */
    /* For tls+tcp:// URLs (all PEM files; NULL = not used): */
    const char *tls_ca_file;       /* CA that signed the runner's certificate (verified) */
    const char *tls_cert_key_file; /* this worker's certificate and key, one file, when the
                                      runner requires client certificates */
    const char *tls_server_name;   /* name to check in the runner's certificate */
};

/* What a handler knows about the attempt it runs. Borrowed: valid during the call only. */
struct cairn_worker_ctx {
    const char *action;       /* the action name */
    uint8_t instance_id[16];  /* workflow instance (UUID bytes) */
    uint8_t exec_id[16];      /* execution id: with attempt, the idempotency key */
    uint32_t attempt;         /* 1 for the first attempt */
    int64_t deadline_ms;      /* absolute wall-clock ms by which the attempt must be done: its
                                 timeout from when a slot started it, or the runner's deadline
                                 if sooner; 0: none */
    struct ir_val last_error; /* the previous attempt's error (a map: type, message, bases,
                                 details) when this is a retry; None on the first attempt */
    void *internal;           /* SDK use only */
};

/* An action. kwargs is a map, borrowed (ir_val_retain it to keep it). On CN_OK *out holds a
 * new value the SDK takes ownership of: the result, or an error value (cairn_worker_error or
 * ir_error_new) to report a failure; only the error flag decides which, never the shape.
 * Any other return is reported as an error of type "WorkerError" and *out is not read.
 * Runs on a slot thread; must be thread-safe when slots > 1. Long handlers should poll
 * cairn_worker_cancelled(). */
typedef cn_err (*cairn_worker_handler)(const struct cairn_worker_ctx *ctx, struct ir_val kwargs,
                                       void *arg, struct ir_val *out);

/* Creates a worker for runner url ("tcp://HOST:PORT", "ipc://PATH", "tls+tcp://HOST:PORT").
 * opts may be NULL (all defaults); borrowed. Nothing is dialled yet. Returns new in *out
 * (free with cairn_worker_free), or CN_INVAL (bad url, name, credential or slots). */
CN_MUST_CHECK cn_err cairn_worker_new(const char *url, const struct cairn_worker_options *opts,
                                      struct cairn_worker **out);

/* Serves the runner at url too (copied), before start(): a worker process can serve a fleet
 * of runners with one set of slots, which the runners share by their demand (each `ready`
 * says how many attempts the worker takes; docs/protocol.md, Room). Each runner gets its own
 * connection and session; one that goes away or refuses the worker leaves the others served.
 * Returns CN_OK or CN_INVAL (empty url, one already given, more than 64, after start). */
CN_MUST_CHECK cn_err cairn_worker_add_url(struct cairn_worker *w, const char *url);

/* Serves action (copied) with fn, called with arg (borrowed, must outlive the worker). Only
 * before start(). Returns CN_OK, CN_INVAL (empty, too long or duplicate name; after start). */
CN_MUST_CHECK cn_err cairn_worker_register(struct cairn_worker *w, const char *action,
                                           cairn_worker_handler fn, void *arg);

/* Dials the runner (each runner), starts the slot and control threads, says `hello` and waits
 * for `welcome`. Blocks until a runner welcomed the worker, every runner refused it, or
 * opts->start_timeout_ms passed; with several runners, the others are greeted as they come up.
 * Returns CN_OK, CN_INVAL (no actions registered, already started, bad url), CN_PROTO (refused
 * by the runner, or a reply that is not welcome), CN_IO (transport error or timeout),
 * CN_NOMEM; the reason is in cairn_worker_error(). On failure the worker is as before start(),
 * so start() may be retried. */
CN_MUST_CHECK cn_err cairn_worker_start(struct cairn_worker *w);

/* Sends `goodbye` (the runner stops dispatching), runs any dispatch that crossed it, waits up
 * to grace_ms for running handlers (then marks them cancelled and still waits for them to
 * return: a thread cannot be killed), sends their outcomes and closes the connection. Blocks;
 * never call it from a handler. A no-op on a worker that is not started. */
void cairn_worker_stop(struct cairn_worker *w, uint32_t grace_ms);

/* True between a successful start() and stop(), unless the runner refused a new session
 * after a reconnect (the worker then stops serving; call stop() and free()); with several
 * runners, until every one has refused it. Thread-safe. */
bool cairn_worker_running(struct cairn_worker *w);

/* The last failure's description ("refused: bad credential"), or "" when none. Borrowed,
 * valid until the next call on w. */
const char *cairn_worker_error(struct cairn_worker *w);

/* Stops the worker if needed (grace 0) and frees it. NULL is a no-op. */
void cairn_worker_free(struct cairn_worker *w);

/* True when the attempt has been cancelled by the runner or by stop() past its grace period;
 * a handler should then return soon (its result is ignored). Thread-safe. */
bool cairn_worker_cancelled(const struct cairn_worker_ctx *ctx);

/* Sleeps up to ms milliseconds, waking at once when the attempt is cancelled: a condition
 * wait, so thousands of handlers waiting cost nothing (a loop that sleeps a little and polls
 * cairn_worker_cancelled wakes each of them a hundred times a second). Returns true after the
 * full time, false when cancelled. Call only from the handler running ctx. */
bool cairn_worker_sleep(const struct cairn_worker_ctx *ctx, uint32_t ms);

/* Builds an error value {type, message, bases, details: None} for a handler to return.
 * bases: a list of str (the type's ancestors) or None for ["Exception"]; ownership taken
 * always. message NULL means "". Returns CN_OK, CN_NOMEM, CN_TYPE (bases not a list of str),
 * CN_UTF8. */
CN_MUST_CHECK cn_err cairn_worker_error_new(const char *type, const char *message,
                                            struct ir_val bases, struct ir_val *out);

/* Marks an error from cairn_worker_error_new as not retryable: the runner never retries it,
 * whatever the workflow's retry policy says (a declined card, a malformed request). Adds
 * `"retryable": False` to it. Returns CN_OK, CN_NOMEM (*err unchanged) or CN_TYPE (not an
 * error value). */
CN_MUST_CHECK cn_err cairn_worker_error_final(struct ir_val *err);

#endif
