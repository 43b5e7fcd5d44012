/* SPDX-License-Identifier: MIT */
/*
 * Error values (see error.h for the contract): building them from a printf-style message
 * (ir_raise) or from a worker's report (ir_error_new), the bases of the types inline code
 * raises, and matching an error against an `except` / retry type.
 *
 * DESIGN
 * - Building an error never fails on bad bytes: ir_raise's message and type may come from
 *   arbitrary data (a key, a string value), so invalid UTF-8 becomes U+FFFD instead of the
 *   error itself failing.
 */
#include "ir/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/buf.h"
#include "ir/eval_int.h"

struct error_bases {
    const char *type;
    const char *bases[5];
};

/* Python's built-in error types a workflow may raise (`raise ValueError("...")`), with their
 * bases as Python's MRO lists them (BaseException and object left out); among them the errors
 * expressions raise (error.h). Types raised elsewhere (the runner's, in runner/exec/errors.h;
 * workers') bring their bases with them (ir_error_new). */
static const struct error_bases error_known_bases[] = {
    {"Exception", {NULL}},
    {"ArithmeticError", {"Exception", NULL}},
    {"AssertionError", {"Exception", NULL}},
    {"AttributeError", {"Exception", NULL}},
    {"LookupError", {"Exception", NULL}},
    {"NameError", {"Exception", NULL}},
    {"OSError", {"Exception", NULL}},
    {"RuntimeError", {"Exception", NULL}},
    {"TypeError", {"Exception", NULL}},
    {"ValueError", {"Exception", NULL}},
    {"KeyError", {"LookupError", "Exception", NULL}},
    {"IndexError", {"LookupError", "Exception", NULL}},
    {"ZeroDivisionError", {"ArithmeticError", "Exception", NULL}},
    {"OverflowError", {"ArithmeticError", "Exception", NULL}},
    {"RecursionError", {"RuntimeError", "Exception", NULL}},
    {"NotImplementedError", {"RuntimeError", "Exception", NULL}},
    {"UnicodeError", {"ValueError", "Exception", NULL}},
    {"TimeoutError", {"OSError", "Exception", NULL}},
    {"PermissionError", {"OSError", "Exception", NULL}},
    {"FileNotFoundError", {"OSError", "Exception", NULL}},
    {"ConnectionError", {"OSError", "Exception", NULL}},
    {"ConnectionRefusedError", {"ConnectionError", "OSError", "Exception", NULL}},
    {"ConnectionResetError", {"ConnectionError", "OSError", "Exception", NULL}},
    {"ConnectionAbortedError", {"ConnectionError", "OSError", "Exception", NULL}},
};

const char *const *
ir_error_builtin_bases(const char *type)
{
    size_t i;

    for (i = 0; i < sizeof(error_known_bases) / sizeof(error_known_bases[0]); i++) {
        if (strcmp(error_known_bases[i].type, type) == 0) {
            return error_known_bases[i].bases;
        }
    }
    return NULL;
}

static cn_err
bases_for(const char *type, struct ir_val *out)
{
    static const char *const exception_only[] = {"Exception", NULL};
    const char *const *names = ir_error_builtin_bases(type);
    size_t n = 0;

    if (names == NULL || names[0] == NULL) {
        names = exception_only; /* any other type, and Exception itself, as before */
    }
    while (names[n] != NULL) {
        n++;
    }
    return ir_list_of_cstrs(names, n, out);
}

/* A string value from text that may not be valid UTF-8 (a message formatted from arbitrary
 * bytes): invalid sequences become U+FFFD, so an error can always be built. */
static cn_err
str_lossy(const char *s, size_t n, struct ir_val *out)
{
    struct cn_buf b = CN_BUF_INIT;
    size_t i = 0, k;
    cn_err rv;

    if (ir_str_new(s, n, out) == CN_OK) {
        return CN_OK;
    }
    while (i < n) {
        k = utf8_seqlen((unsigned char) s[i]);
        if ((unsigned char) s[i] >= 0x80 && (i + k > n || !ir_utf8_valid(s + i, k, NULL))) {
            rv = cn_buf_append(&b, "\xef\xbf\xbd", 3);
            k = 1;
        } else {
            rv = cn_buf_append(&b, s + i, k);
        }
        if (rv != CN_OK) {
            cn_buf_fini(&b);
            return rv;
        }
        i += k;
    }
    rv = ir_str_new(b.data != NULL ? b.data : "", b.len, out);
    cn_buf_fini(&b);
    return rv;
}

/* Assembles the four-key error map; takes ownership of every value. */
static cn_err
error_build(struct ir_val type, struct ir_val message, struct ir_val bases, struct ir_val details,
            struct ir_val *out)
{
    struct ir_val m;
    cn_err rv;

    if ((rv = ir_map_new(4, &m)) != CN_OK) {
        ir_val_release(type);
        ir_val_release(message);
        ir_val_release(bases);
        ir_val_release(details);
        return rv;
    }
    /* ir_map_set_cstr takes the value even when it fails, so only later ones need release. */
    if ((rv = ir_map_set_cstr(&m, "type", type)) != CN_OK) {
        ir_val_release(message);
        ir_val_release(bases);
        ir_val_release(details);
    } else if ((rv = ir_map_set_cstr(&m, "message", message)) != CN_OK) {
        ir_val_release(bases);
        ir_val_release(details);
    } else if ((rv = ir_map_set_cstr(&m, "bases", bases)) != CN_OK) {
        ir_val_release(details);
    } else {
        rv = ir_map_set_cstr(&m, "details", details);
    }
    if (rv != CN_OK) {
        ir_val_release(m);
        return rv;
    }
    ir_map_set_error(&m, true);
    *out = m;
    return CN_OK;
}

cn_err
ir_raise(struct ir_val *out, const char *type, const char *fmt, ...)
{
    struct ir_val t, msg, bases;
    char small[256], *text = small;
    va_list ap;
    int n;
    cn_err rv;

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return CN_NOMEM; /* glibc fails only when its own buffers cannot be allocated */
    }
    if ((size_t) n >= sizeof(small)) {
        if ((text = malloc((size_t) n + 1)) == NULL) {
            return CN_NOMEM;
        }
        va_start(ap, fmt);
        n = vsnprintf(text, (size_t) n + 1, fmt, ap);
        va_end(ap);
        if (n < 0) {
            free(text);
            return CN_NOMEM;
        }
    }
    rv = str_lossy(text, (size_t) n, &msg);
    if (text != small) {
        free(text);
    }
    if (rv != CN_OK) {
        return rv;
    }
    if ((rv = str_lossy(type, strlen(type), &t)) != CN_OK) {
        ir_val_release(msg);
        return rv;
    }
    if ((rv = bases_for(type, &bases)) != CN_OK) {
        ir_val_release(msg);
        ir_val_release(t);
        return rv;
    }
    if ((rv = error_build(t, msg, bases, ir_null(), out)) != CN_OK) {
        return rv;
    }
    return CN_RAISED;
}

cn_err
ir_error_new(const char *type, const char *message, struct ir_val bases, struct ir_val details,
             struct ir_val *out)
{
    struct ir_val t = ir_null(), msg = ir_null();
    size_t i;
    cn_err rv;

    if (bases.type == IR_T_LIST) {
        for (i = 0; i < ir_list_len(bases); i++) {
            if (ir_list_items(bases)[i].type != IR_T_STR) {
                rv = CN_TYPE;
                goto fail;
            }
        }
    } else if (bases.type == IR_T_NULL) {
        if ((rv = bases_for("", &bases)) != CN_OK) {
            goto fail;
        }
    } else {
        rv = CN_TYPE;
        goto fail;
    }
    if ((rv = ir_str_from_cstr(type, &t)) != CN_OK ||
        (rv = ir_str_from_cstr(message != NULL ? message : "", &msg)) != CN_OK) {
        goto fail;
    }
    return error_build(t, msg, bases, details, out);
fail:
    ir_val_release(t);
    ir_val_release(msg);
    ir_val_release(bases);
    ir_val_release(details);
    return rv;
}

bool
ir_is_error(struct ir_val v)
{
    return v.type == IR_T_MAP && ir_map_is_error(v);
}

cn_err
ir_error_set_final(struct ir_val *err)
{
    if (!ir_is_error(*err)) {
        return CN_TYPE;
    }
    return ir_map_set_cstr(err, IR_ERROR_RETRYABLE_KEY, ir_bool(false));
}

bool
ir_error_retryable(struct ir_val err)
{
    const struct ir_val *r;

    if (!ir_is_error(err)) {
        return true;
    }
    r = ir_map_get(err, IR_ERROR_RETRYABLE_KEY, sizeof(IR_ERROR_RETRYABLE_KEY) - 1);
    return r == NULL || r->type != IR_T_BOOL || r->u.b;
}

const char *
ir_error_type(struct ir_val err)
{
    const struct ir_val *t;

    if (!ir_is_error(err)) {
        return "";
    }
    t = ir_map_get(err, "type", 4);
    return t != NULL && t->type == IR_T_STR ? ir_str_data(*t) : "";
}

bool
ir_error_matches(struct ir_val err, const char *type)
{
    const struct ir_val *bases;
    size_t i;

    if (!ir_is_error(err)) {
        return false;
    }
    if (type[0] == '\0') {
        return false;
    }
    if (strcmp(type, "Exception") == 0 || strcmp(ir_error_type(err), type) == 0) {
        return true;
    }
    bases = ir_map_get(err, "bases", 5);
    if (bases == NULL || bases->type != IR_T_LIST) {
        return false;
    }
    for (i = 0; i < ir_list_len(*bases); i++) {
        struct ir_val b = ir_list_items(*bases)[i];
        if (b.type == IR_T_STR && strcmp(ir_str_data(b), type) == 0) {
            return true;
        }
    }
    return false;
}
