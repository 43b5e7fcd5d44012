/* SPDX-License-Identifier: MIT */
/*
 * The compiler front door: source text -> checked program -> DAG template. Pure functions,
 * safe to call from several threads at once on different inputs.
 */
#ifndef IR_COMPILE_H
#define IR_COMPILE_H

#include <stddef.h>
#include <stdint.h>

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
/* The same with a graph of at most max_nodes (<= IR_COMPILE_MAX_NODES). */
CN_MUST_CHECK cn_err ir_compile_program_limited(struct ir_program *p, uint32_t max_nodes,
                                                struct ir_diags *diags, struct ir_dag **out);

/* What one compilation may take, so that a hostile or runaway source cannot exhaust the memory
 * of the host that registers it. Memory grows with both: measured at about 43 bytes of peak
 * memory per source byte (a 9 MB source of straight-line assignments: 391 MB) and about 400 per
 * graph node (a 1.2 KB source whose helpers inline to 589 824 nodes: 238 MB).
 *
 * The ceilings are what ir_compile_source enforces, and what a runner compiles stored sources
 * with: a version registered under any setting still runs. The defaults are what `cairnctl
 * check` and `register` allow unless told otherwise (CAIRN_MAX_SOURCE_BYTES,
 * CAIRN_MAX_GRAPH_NODES): about 45 MB for a source at the limit and 105 MB for a graph at the
 * limit, where the largest example in examples/ is 4 KB and 200 nodes. */
#define IR_COMPILE_MAX_SOURCE_BYTES     16777216 /* 16 MiB */
#define IR_COMPILE_MAX_NODES            1048576
#define IR_COMPILE_DEFAULT_SOURCE_BYTES 1048576 /* 1 MiB; plain literals, printed in --help */
#define IR_COMPILE_DEFAULT_NODES        262144

struct ir_compile_limits {
    size_t max_source_bytes; /* 1..IR_COMPILE_MAX_SOURCE_BYTES */
    uint32_t max_nodes;      /* 1..IR_COMPILE_MAX_NODES: graph nodes after inlining helpers */
};

/* Parse + check + compile. On CN_COMPILE/CN_TOOBIG the diagnostics explain; format them with
 * ir_diags_format. diags must have been initialised with the same file/src. Under the ceilings
 * above. */
CN_MUST_CHECK cn_err ir_compile_source(const char *src, size_t len, struct ir_diags *diags,
                                       struct ir_dag **out);
/* The same under lim: a source over lim->max_source_bytes is refused before it is parsed
 * (CN_TOOBIG, with a diagnostic at 1:1 giving its size and the limit), a graph over
 * lim->max_nodes before it is built. */
CN_MUST_CHECK cn_err ir_compile_source_limited(const char *src, size_t len,
                                               const struct ir_compile_limits *lim,
                                               struct ir_diags *diags, struct ir_dag **out);

#endif
