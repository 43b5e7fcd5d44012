/* SPDX-License-Identifier: MIT */
/*
 * The runner's own error types (see errors.h): their names, and building them with their
 * bases through ir_error_new.
 */
#include "runner/exec/errors.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ir/base/uuid.h"
#include "ir/error.h"

struct rn_error_type {
    const char *type;
    const char *base, *base2; /* besides "Exception"; NULL: none */
};

#define RN_ERROR_ROW(e, type, base, base2) [e] = {type, base, base2},
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
    return rn_error_detailed(e, message, ir_null(), out);
}

cn_err
rn_error_detailed(enum rn_error e, const char *message, struct ir_val details, struct ir_val *out)
{
    const char *names[3];
    struct ir_val bases;
    size_t n = 0, i;
    cn_err rv;

    if ((size_t) e >= RN_ERROR_COUNT_) {
        ir_val_release(details);
        return CN_INVAL;
    }
    if (rn_error_types[e].base != NULL) {
        names[n++] = rn_error_types[e].base;
    }
    if (rn_error_types[e].base2 != NULL) {
        names[n++] = rn_error_types[e].base2;
    }
    names[n++] = "Exception";
    if ((rv = ir_list_new(n, &bases)) != CN_OK) {
        ir_val_release(details);
        return rv;
    }
    for (i = 0; i < n; i++) {
        if ((rv = ir_str_from_cstr(names[i], &ir_list_items(bases)[i])) != CN_OK) {
            ir_val_release(bases);
            ir_val_release(details);
            return rv;
        }
    }
    /* ir_error_new takes the bases and details whatever it returns. */
    return ir_error_new(rn_error_types[e].type, message, bases, details, out);
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

/* Adds s to names[0..*n) unless it is there, up to max. */
static void
name_add(const char **names, size_t *n, size_t max, const char *s)
{
    size_t i;

    for (i = 0; i < *n; i++) {
        if (strcmp(names[i], s) == 0) {
            return;
        }
    }
    if (*n < max) {
        names[(*n)++] = s;
    }
}

/* Bases a ChildWorkflowError takes from its child's error, at most (a deeper chain is cut). */
#define RN_CHILD_BASES_MAX 32

/* The child's error as the parent's details carry it: its type, message and bases, and its
 * details unless it is itself a child's error (a chain of failed children would otherwise nest
 * two levels per generation, past what a value may hold; the bases and the message still name
 * the first cause). None when it is not an error. */
static struct ir_val
cause_of(struct ir_val err)
{
    static const char *const keys[] = {"type", "message", "bases", "details"};
    bool chained = strncmp(ir_error_type(err), "Child", 5) == 0;
    struct ir_val m;
    size_t i;

    if (!ir_is_error(err) || ir_map_new(4, &m) != CN_OK) {
        return ir_null();
    }
    for (i = 0; i < 4; i++) {
        const struct ir_val *v = ir_map_get(err, keys[i], strlen(keys[i]));
        if (ir_map_set_cstr(&m, keys[i],
                            v != NULL && !(chained && i == 3) ? ir_val_retain(*v) : ir_null()) !=
            CN_OK) {
            ir_val_release(m);
            return ir_null();
        }
    }
    return m;
}

cn_err
rn_child_outcome(enum rn_outcome o, struct ir_val result, struct rn_iid child_id,
                 const char *workflow, bool *ok, struct ir_val *out)
{
    enum rn_error kind = o == RN_CANCELLED   ? RN_ERR_CHILD_CANCELLED
                         : o == RN_TIMED_OUT ? RN_ERR_CHILD_TIMEOUT
                                             : RN_ERR_CHILD;
    const char *ctype = ir_is_error(result) ? ir_error_type(result) : "Error";
    const struct ir_val *cmsg = ir_is_error(result) ? ir_map_get(result, "message", 7) : NULL;
    const struct ir_val *cbases = ir_is_error(result) ? ir_map_get(result, "bases", 5) : NULL;
    struct ir_val bases = ir_null(), details = ir_null(), v;
    const char *names[RN_CHILD_BASES_MAX + 3];
    char id[37], msg[512];
    size_t i, nn = 0;
    cn_err rv;

    *ok = o == RN_COMPLETED;
    if (*ok) {
        *out = ir_val_retain(result);
        return CN_OK;
    }
    cn_uuid_format(child_id.b, id);
    (void) snprintf(msg, sizeof(msg), "child workflow %s (%s) %s: %s: %.300s", workflow, id,
                    o == RN_CANCELLED   ? "was cancelled"
                    : o == RN_TIMED_OUT ? "timed out"
                                        : "failed",
                    ctype, cmsg != NULL && cmsg->type == IR_T_STR ? ir_str_data(*cmsg) : "");
    /* A failure is caught by the child's own type and its bases; a cancel or timeout is not
     * the child's error type (the child raised nothing), so its bases are only the table's. */
    if (kind == RN_ERR_CHILD) {
        name_add(names, &nn, RN_CHILD_BASES_MAX, ctype);
        for (i = 0; cbases != NULL && cbases->type == IR_T_LIST && i < ir_list_len(*cbases); i++) {
            struct ir_val b = ir_list_items(*cbases)[i];
            if (b.type == IR_T_STR && strcmp(ir_str_data(b), "Exception") != 0) {
                name_add(names, &nn, RN_CHILD_BASES_MAX, ir_str_data(b));
            }
        }
    }
    name_add(names, &nn, RN_CHILD_BASES_MAX + 3, rn_error_types[RN_ERR_CHILD].type);
    if (kind == RN_ERR_CHILD_TIMEOUT) {
        name_add(names, &nn, RN_CHILD_BASES_MAX + 3, "TimeoutError");
    }
    name_add(names, &nn, RN_CHILD_BASES_MAX + 3, "Exception");
    rv = ir_list_of_cstrs(names, nn, &bases);
    if (rv == CN_OK) {
        rv = ir_map_new(3, &details);
    }
    if (rv == CN_OK && (rv = ir_str_from_cstr(id, &v)) == CN_OK &&
        (rv = ir_map_set_cstr(&details, "child_id", v)) == CN_OK &&
        (rv = ir_str_from_cstr(workflow, &v)) == CN_OK &&
        (rv = ir_map_set_cstr(&details, "workflow", v)) == CN_OK) {
        rv = ir_map_set_cstr(&details, "error", cause_of(result));
    }
    if (rv != CN_OK) {
        ir_val_release(bases);
        ir_val_release(details);
        return rv;
    }
    rv = ir_error_new(rn_error_types[kind].type, msg, bases, details, out);
    if (rv == CN_UTF8) { /* a cut in the middle of a character */
        rv = rn_error_new(kind, "child workflow failed", out);
    }
    return rv;
}
