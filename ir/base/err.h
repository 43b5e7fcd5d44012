/* SPDX-License-Identifier: MIT */
/*
 * The one error enum of the whole program, plus a small fixed-size message buffer
 * for the details a caller should show a human ("msgpack: truncated input at byte 12").
 * Every fallible function returns cn_err; CN_OK is zero. Pure data, no threads.
 */
#ifndef IR_BASE_ERR_H
#define IR_BASE_ERR_H

#include <stddef.h>

#define CN_MUST_CHECK   __attribute__((warn_unused_result))
#define CN_PRINTF(f, a) __attribute__((format(printf, f, a)))

#define CN_ERRORS(X)                         \
    X(OK, "success")                         \
    X(NOMEM, "out of memory")                \
    X(INVAL, "invalid argument")             \
    X(PARSE, "malformed input")              \
    X(RANGE, "value out of range")           \
    X(DEPTH, "nesting too deep")             \
    X(UTF8, "invalid UTF-8")                 \
    X(TYPE, "wrong type")                    \
    X(NOTFOUND, "not found")                 \
    X(TOOBIG, "too large")                   \
    X(IO, "input/output error")              \
    X(PROTO, "protocol violation")           \
    X(COMPILE, "compile error")              \
    X(VERSION, "unsupported format version") \
    X(RAISED, "workflow error raised")       \
    X(DB, "database error")                  \
    X(BUSY, "busy, try again")

#define CN_ERR_ENUM(name, text) CN_##name,
typedef enum cn_err { CN_ERRORS(CN_ERR_ENUM) CN_ERR_COUNT_ } cn_err;
#undef CN_ERR_ENUM

/* Returns from the calling function with x's error when x fails: for a run of appends whose
 * first failure ends the work (the text forms of values and graphs). */
#define CN_TRY(x)               \
    do {                        \
        cn_err cn_try_ = (x);   \
        if (cn_try_ != CN_OK) { \
            return cn_try_;     \
        }                       \
    } while (0)

/* Returns a static, human-readable description of e. Thread-safe. */
const char *cn_strerror(cn_err e);

/* Returns the enum's short name ("NOMEM") for logs and test failures. Thread-safe. */
const char *cn_errname(cn_err e);

/* Detail text for an error; callers may pass NULL where they do not care. */
struct cn_errmsg {
    char text[256];
};

/* Formats into m (if m is not NULL) and returns e, so a failure path is one line:
 * `return cn_errmsg_set(m, CN_PARSE, "bad byte at %zu", off);` */
cn_err cn_errmsg_set(struct cn_errmsg *m, cn_err e, const char *fmt, ...) CN_PRINTF(3, 4);

#endif
