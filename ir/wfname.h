/* SPDX-License-Identifier: MIT */
/*
 * The names and pinned versions a child workflow call (`run wf(...)`, `start wf(...)`) may
 * carry, shared by the parser (which reports a bad one at its line:col) and ir_dag_validate
 * (which refuses one in a decoded template). Header-only: two character-class loops.
 *
 * A callable name is the schema's rule for workflow names (sql/0002_workflows.sql,
 * `^[A-Za-z_][A-Za-z0-9_.-]{0,127}$`) without the dash: in source a name is identifiers joined
 * by dots, and `-` would read as a minus. A version is the schema's rule for versions:
 * `^[A-Za-z0-9_.-]{1,64}$`.
 */
#ifndef IR_WFNAME_H
#define IR_WFNAME_H

#include <stdbool.h>
#include <stddef.h>

#define IR_WORKFLOW_NAME_MAX    128
#define IR_WORKFLOW_VERSION_MAX 64

static inline bool
ir_wf_alpha_(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static inline bool
ir_wf_digit_(char c)
{
    return c >= '0' && c <= '9';
}

/* True when s (NUL-terminated) can be called as a child workflow. */
static inline bool
ir_workflow_name_ok(const char *s)
{
    size_t i;

    if (s == NULL || !ir_wf_alpha_(s[0])) {
        return false;
    }
    for (i = 1; s[i] != '\0'; i++) {
        if (i >= IR_WORKFLOW_NAME_MAX ||
            !(ir_wf_alpha_(s[i]) || ir_wf_digit_(s[i]) || s[i] == '.')) {
            return false;
        }
    }
    return true;
}

/* True when s (len bytes) is a valid version to pin with [version: "..."]. */
static inline bool
ir_workflow_version_ok(const char *s, size_t len)
{
    size_t i;

    if (s == NULL || len == 0 || len > IR_WORKFLOW_VERSION_MAX) {
        return false;
    }
    for (i = 0; i < len; i++) {
        if (!(ir_wf_alpha_(s[i]) || ir_wf_digit_(s[i]) || s[i] == '.' || s[i] == '-')) {
            return false;
        }
    }
    return true;
}

#endif
