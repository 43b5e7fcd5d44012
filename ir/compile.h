/* SPDX-License-Identifier: MIT */
/*
 * The compiler front door: source text -> checked program -> DAG template. Pure functions,
 * safe to call from several threads at once on different inputs.
 */
#ifndef IR_COMPILE_H
#define IR_COMPILE_H

#include <stddef.h>

#include "ir/ast.h"
#include "ir/dag.h"
#include "ir/diag.h"

/* Semantic checks of docs/language.md ("What the compiler checks") on a parsed program; resolves
 * builtin calls and marks helper-call statements (IR_S_CALL). Errors go to diags. Returns CN_OK,
 * CN_COMPILE (see diags) or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_check(struct ir_program *p, struct ir_diags *diags);

/* Compiles a checked program into a new template (free with ir_dag_free). Takes ownership of
 * the program's expression pool (p is left without expressions but must still be freed).
 * Returns CN_OK, CN_TOOBIG (a limit on nodes or inlining was exceeded; diags says which) or
 * CN_NOMEM. */
CN_MUST_CHECK cn_err ir_compile_program(struct ir_program *p, struct ir_diags *diags,
                                        struct ir_dag **out);

/* Parse + check + compile. On CN_COMPILE/CN_TOOBIG the diagnostics explain; format them with
 * ir_diags_format. diags must have been initialised with the same file/src. */
CN_MUST_CHECK cn_err ir_compile_source(const char *src, size_t len, struct ir_diags *diags,
                                       struct ir_dag **out);

#endif
