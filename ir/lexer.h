/* SPDX-License-Identifier: MIT */
/*
 * Lexer for the workflow language (docs/language.md, "Lexical rules"): turns a whole UTF-8 source
 * into a token array with Python-style NEWLINE/INDENT/DEDENT tokens (4 spaces per level, implicit
 * line joining inside brackets). Errors go to the diagnostics and lexing continues, so one run can
 * report several problems. Pure function of its input; no global state.
 */
#ifndef IR_LEXER_H
#define IR_LEXER_H

#include <stddef.h>
#include <stdint.h>

#include "ir/base/arena.h"
#include "ir/base/err.h"
#include "ir/diag.h"

#define IR_TOKENS(X)          \
    X(EOF, "end of file")     \
    X(NEWLINE, "end of line") \
    X(INDENT, "indent")       \
    X(DEDENT, "dedent")       \
    X(NAME, "name")           \
    X(INT, "integer")         \
    X(FLOAT, "float")         \
    X(STRING, "string")       \
    X(DURATION, "duration")   \
    X(FN, "'fn'")             \
    X(INPUT, "'input'")       \
    X(OUTPUT, "'output'")     \
    X(RETURN, "'return'")     \
    X(IF, "'if'")             \
    X(ELIF, "'elif'")         \
    X(ELSE, "'else'")         \
    X(FOR, "'for'")           \
    X(IN, "'in'")             \
    X(WHILE, "'while'")       \
    X(BREAK, "'break'")       \
    X(CONTINUE, "'continue'") \
    X(TRY, "'try'")           \
    X(EXCEPT, "'except'")     \
    X(AS, "'as'")             \
    X(SPREAD, "'spread'")     \
    X(PARALLEL, "'parallel'") \
    X(SLEEP, "'sleep'")       \
    X(RAISE, "'raise'")       \
    X(CLASS, "'class'")       \
    X(FINALLY, "'finally'")   \
    X(AND, "'and'")           \
    X(OR, "'or'")             \
    X(NOT, "'not'")           \
    X(TRUE, "'True'")         \
    X(FALSE, "'False'")       \
    X(NONE, "'None'")         \
    X(PASS, "'pass'")         \
    X(LPAREN, "'('")          \
    X(RPAREN, "')'")          \
    X(LBRACK, "'['")          \
    X(RBRACK, "']'")          \
    X(LBRACE, "'{'")          \
    X(RBRACE, "'}'")          \
    X(COMMA, "','")           \
    X(COLON, "':'")           \
    X(DOT, "'.'")             \
    X(ASSIGN, "'='")          \
    X(PLUS, "'+'")            \
    X(MINUS, "'-'")           \
    X(STAR, "'*'")            \
    X(SLASH, "'/'")           \
    X(DSLASH, "'//'")         \
    X(PERCENT, "'%'")         \
    X(PIPE, "'|'")            \
    X(LT, "'<'")              \
    X(LE, "'<='")             \
    X(GT, "'>'")              \
    X(GE, "'>='")             \
    X(EQ, "'=='")             \
    X(NE, "'!='")             \
    X(ARROW, "'->'")          \
    X(AT, "'@'")              \
    X(PLUSEQ, "'+='")         \
    X(MINUSEQ, "'-='")        \
    X(STAREQ, "'*='")         \
    X(SLASHEQ, "'/='")        \
    X(DSLASHEQ, "'//='")      \
    X(PERCENTEQ, "'%='")      \
    X(PIPEEQ, "'|='")

#define IR_TOK_ENUM(id, text) IR_TK_##id,
enum ir_tok { IR_TOKENS(IR_TOK_ENUM) IR_TK_COUNT_ };
#undef IR_TOK_ENUM

struct ir_token {
    enum ir_tok kind;
    uint32_t line;     /* 1-based */
    uint32_t col;      /* 1-based, in code points */
    const char *start; /* into the source */
    uint32_t len;      /* bytes of source text */
    union {
        uint64_t i;     /* INT: value; may be 2^63, valid only after unary minus */
        double f;       /* FLOAT */
        int64_t dur_ms; /* DURATION */
    } v;
    const char *str; /* STRING: decoded UTF-8 (arena), NAME: the name (arena) */
    size_t str_len;
};

struct ir_tokens {
    struct ir_token *items;
    size_t len, cap;
};

/* Lexes src (len bytes) into *out; strings live in arena. Errors are added to diags (lexing
 * continues past them). Returns CN_OK (check diags->len for errors) or CN_NOMEM. The token
 * array always ends with IR_TK_EOF. Free with ir_tokens_fini. */
CN_MUST_CHECK cn_err ir_lex(const char *src, size_t len, struct cn_arena *arena,
                            struct ir_diags *diags, struct ir_tokens *out);
void ir_tokens_fini(struct ir_tokens *t);

/* Human description of a token kind for "expected X" messages. */
const char *ir_tok_text(enum ir_tok k);

#endif
