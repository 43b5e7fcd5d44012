/* SPDX-License-Identifier: MIT */
/*
 * The runner's own error types (see errors.h): their names, and building them with their
 * bases through ir_error_new.
 */
#include "runner/errors.h"

#include <stddef.h>
#include <string.h>

#include "ir/error.h"

struct rn_error_type {
    const char *type;
    const char *base; /* besides "Exception"; NULL: none */
};

#define RN_ERROR_ROW(e, type, base) [e] = {type, base},
static const struct rn_error_type rn_error_types[] = {RN_ERRORS(RN_ERROR_ROW)};
#undef RN_ERROR_ROW

const char *
rn_error_name(enum rn_error e)
{
    return (size_t) e < RN_ERROR_COUNT_ ? rn_error_types[e].type : "";
}

cn_err
rn_error_new(enum rn_error e, const char *message, struct ir_val *out)
{
    const char *names[2];
    struct ir_val bases;
    size_t n = 0, i;
    cn_err rv;

    if ((size_t) e >= RN_ERROR_COUNT_) {
        return CN_INVAL;
    }
    if (rn_error_types[e].base != NULL) {
        names[n++] = rn_error_types[e].base;
    }
    names[n++] = "Exception";
    if ((rv = ir_list_new(n, &bases)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < n; i++) {
        if ((rv = ir_str_from_cstr(names[i], &ir_list_items(bases)[i])) != CN_OK) {
            ir_val_release(bases);
            return rv;
        }
    }
    /* ir_error_new takes the bases whatever it returns. */
    return ir_error_new(rn_error_types[e].type, message, bases, ir_null(), out);
}

cn_err
rn_error_raise(struct ir_val *out, const char *type, const char *message)
{
    size_t i;
    cn_err rv;

    for (i = 0; i < RN_ERROR_COUNT_; i++) {
        if (strcmp(rn_error_types[i].type, type) == 0) {
            rv = rn_error_new((enum rn_error) i, message, out);
            return rv == CN_OK ? CN_RAISED : rv;
        }
    }
    return ir_raise(out, type, "%s", message);
}
