/* SPDX-License-Identifier: MIT */
/*
 * Expressions, stored flat: one pool (struct ir_xpool) of expression nodes whose children are
 * indices into a shared argument array. The parser appends to the pool, the compiler appends
 * synthesized expressions (loop counters) and the DAG template keeps the pool as it is, so an
 * inlined helper's expressions are shared by every copy of its body (names resolve at run time
 * in the scope of the frame that evaluates them). Flat storage also keeps the msgpack form of a
 * DAG shallow whatever the expression depth. Not thread-safe while being built; read-only after.
 */
#ifndef IR_EXPR_H
#define IR_EXPR_H

#include <stdint.h>

#include "ir/base/arena.h"
#include "ir/base/err.h"
#include "ir/value.h"

#define IR_NO_EXPR UINT32_MAX

/* Tallest expression tree accepted (a chain like a + b + c + ... counts one level per
 * operator). Every walker may recurse this deep; the parser and the DAG decoder enforce it. */
#define IR_EXPR_MAX_HEIGHT 200

enum ir_xkind {
    IR_X_CONST = 0, /* val: null, bool, int, float or str */
    IR_X_NAME,      /* name: a variable */
    IR_X_LIST,      /* children: elements */
    IR_X_DICT,      /* children: key0, val0, key1, val1, ... */
    IR_X_NEG,       /* children: operand */
    IR_X_NOT,       /* children: operand */
    IR_X_BIN,       /* op: enum ir_binop; children: left, right */
    IR_X_AND,       /* children: left, right (short-circuit, returns an operand) */
    IR_X_OR,        /* children: left, right */
    IR_X_CMP,       /* chained comparison; children: operands (n+1); ops: cmpops (n) */
    IR_X_INDEX,     /* children: container, index */
    IR_X_SLICE,     /* children: container, lo or IR_NO_EXPR, hi or IR_NO_EXPR */
    IR_X_ATTR,      /* name: field; children: container */
    IR_X_COND,      /* children: then, condition, else (source order of `a if c else b`) */
    IR_X_CALL,      /* name: callee; op: enum ir_builtin once resolved; children: positional
                       args then keyword values; kwnames: nkw names of the trailing children */
    IR_X_KIND_COUNT_
};

enum ir_binop {
    IR_OP_ADD = 0,
    IR_OP_SUB,
    IR_OP_MUL,
    IR_OP_DIV,
    IR_OP_FLOORDIV,
    IR_OP_MOD,
    IR_OP_MERGE, /* `|` on dicts */
    IR_OP_COUNT_
};

enum ir_cmpop {
    IR_CMP_EQ = 0,
    IR_CMP_NE,
    IR_CMP_LT,
    IR_CMP_LE,
    IR_CMP_GT,
    IR_CMP_GE,
    IR_CMP_IN,
    IR_CMP_NOTIN,
    IR_CMP_COUNT_
};

#define IR_BUILTINS(X)                  \
    X(LEN, "len", 1, 1)                 \
    X(RANGE, "range", 1, 3)             \
    X(ENUMERATE, "enumerate", 1, 2)     \
    X(ZIP, "zip", 0, 255)               \
    X(MIN, "min", 1, 255)               \
    X(MAX, "max", 1, 255)               \
    X(SUM, "sum", 1, 2)                 \
    X(ABS, "abs", 1, 1)                 \
    X(ROUND, "round", 1, 2)             \
    X(STR, "str", 0, 1)                 \
    X(INT, "int", 0, 2)                 \
    X(FLOAT, "float", 0, 1)             \
    X(BOOL, "bool", 0, 1)               \
    X(SORTED, "sorted", 1, 1)           \
    X(LIST, "list", 0, 1)               \
    X(KEYS, "keys", 1, 1)               \
    X(VALUES, "values", 1, 1)           \
    X(ITEMS, "items", 1, 1)             \
    X(ISEXCEPTION, "isexception", 1, 1) \
    X(NOW, "now", 0, 0)                 \
    X(UUID, "uuid", 0, 0)               \
    X(INSTANCE_ID, "instance_id", 0, 0) \
    X(WORKFLOW_NAME, "workflow_name", 0, 0)

#define IR_BUILTIN_ENUM(id, name, lo, hi) IR_B_##id,
enum ir_builtin { IR_BUILTINS(IR_BUILTIN_ENUM) IR_B_COUNT_, IR_B_UNRESOLVED = 255 };
#undef IR_BUILTIN_ENUM

struct ir_expr {
    uint8_t kind;    /* enum ir_xkind */
    uint8_t op;      /* enum ir_binop / ir_builtin, by kind */
    uint16_t nkw;    /* IR_X_CALL: trailing keyword children */
    uint16_t height; /* 1 for a leaf; computed by ir_xpool_add */
    uint32_t line;   /* 1-based source position; 0 for synthesized expressions */
    uint32_t col;
    uint32_t nargs;       /* children */
    uint32_t args;        /* index of the first child in ir_xpool.args */
    uint32_t ops;         /* IR_X_CMP: index of the first op in ir_xpool.args */
    const char *name;     /* IR_X_NAME, IR_X_ATTR, IR_X_CALL; owned by the pool's arena */
    const char **kwnames; /* IR_X_CALL; owned by the pool's arena */
    struct ir_val val;    /* IR_X_CONST; owned by the pool */
};

struct ir_xpool {
    struct ir_expr *items;
    size_t len, cap;
    uint32_t *args; /* children indices (and comparison ops) */
    size_t nargs, args_cap;
    struct cn_arena *arena; /* names */
};

/* Initialises an empty pool with its own arena. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_xpool_init(struct ir_xpool *p);
/* Releases everything, including const values. Accepts a zeroed pool. */
void ir_xpool_fini(struct ir_xpool *p);

/* Appends e (children copied from kids[0..nkids), each an existing index or IR_NO_EXPR);
 * takes ownership of e->val always. Writes the new index to *out. Returns CN_OK, CN_NOMEM,
 * CN_DEPTH (taller than IR_EXPR_MAX_HEIGHT) or CN_TOOBIG (over 2^31 nodes). */
CN_MUST_CHECK cn_err ir_xpool_add(struct ir_xpool *p, const struct ir_expr *e, const uint32_t *kids,
                                  uint32_t nkids, uint32_t *out);
/* Copies a string into the pool's arena; NULL on OOM. */
const char *ir_xpool_intern(struct ir_xpool *p, const char *s, size_t n);

/* Child i of expression e (borrowed). */
static inline uint32_t
ir_xchild(const struct ir_xpool *p, const struct ir_expr *e, uint32_t i)
{
    return p->args[e->args + i];
}

/* Names and operator spellings for printing. */
const char *ir_binop_text(enum ir_binop op);
const char *ir_cmpop_text(enum ir_cmpop op);
const char *ir_builtin_name(enum ir_builtin b);
/* Looks a builtin up by name; returns IR_B_UNRESOLVED if there is none. */
enum ir_builtin ir_builtin_lookup(const char *name);
/* Inclusive bounds on positional arguments of a builtin. */
void ir_builtin_arity(enum ir_builtin b, unsigned *min, unsigned *max);

/* Appends e as source text, parenthesised only where precedence requires, to out.
 * Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_expr_print(const struct ir_xpool *p, uint32_t e, struct cn_buf *out);

#endif
