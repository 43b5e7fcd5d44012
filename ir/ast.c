/* SPDX-License-Identifier: MIT */
/* Small queries over a parsed program. */
#include "ir/ast.h"

#include <string.h>

const struct ir_func *
ir_program_func(const struct ir_program *p, const char *name)
{
    uint32_t i;

    for (i = 0; i < p->nfuncs; i++) {
        if (strcmp(p->funcs[i].name, name) == 0) {
            return &p->funcs[i];
        }
    }
    return NULL;
}

const struct ir_func *
ir_program_entry(const struct ir_program *p)
{
    const struct ir_func *f = ir_program_func(p, "main");

    if (f == NULL && p->nfuncs == 1) {
        f = &p->funcs[0];
    }
    return f;
}

const char *
ir_stmt_kind_name(enum ir_stmt_kind k)
{
    static const char *const names[] = {
        "assign", "action",   "call", "spread", "parallel", "if",    "for",     "while",
        "break",  "continue", "pass", "try",    "return",   "sleep", "publish", "raise",
    };
    return (unsigned) k < (unsigned) IR_S_KIND_COUNT_ ? names[k] : "?";
}
