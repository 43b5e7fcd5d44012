/* SPDX-License-Identifier: MIT */
/*
 * Parser: tokens -> struct ir_program (ir/ast.h). Recursive descent with a depth limit, so a
 * hostile file cannot overflow the stack. On a syntax error it records a diagnostic, skips to
 * the next statement and goes on, so one run reports several independent errors. Pure; no
 * global state.
 */
#ifndef IR_PARSER_H
#define IR_PARSER_H

#include <stddef.h>

#include "ir/ast.h"
#include "ir/diag.h"

/* Deepest expression/statement nesting accepted before a "nested too deeply" error. */
#define IR_PARSE_MAX_DEPTH 100

/* Parses src. On CN_OK *out is a new program (free with ir_program_free) and diags holds no
 * errors. On CN_COMPILE diags holds the syntax errors and *out is untouched. CN_NOMEM on OOM. */
CN_MUST_CHECK cn_err ir_parse(const char *src, size_t len, struct ir_diags *diags,
                              struct ir_program **out);

#endif
