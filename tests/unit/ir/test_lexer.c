/* SPDX-License-Identifier: MIT */
/* Lexer tests: token kinds, values and positions; indentation; every lexical error with its
 * exact line:col. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ir/lexer.h"
#include "tests/support/leak.h"
#include "tests/unit/ir/src_util.h"

TestSuite(ir_lexer, .fini = t_leak_check, .timeout = 30);

struct lexed {
    struct cn_arena *arena;
    struct ir_diags diags;
    struct ir_tokens toks;
};

static void
lex(struct lexed *l, const char *src)
{
    l->arena = cn_arena_new(4096);
    cr_assert_not_null(l->arena);
    ir_diags_init(&l->diags, "t.cairn", src, strlen(src));
    cr_assert_eq(ir_lex(src, strlen(src), l->arena, &l->diags, &l->toks), CN_OK);
}

static void
lexed_free(struct lexed *l)
{
    ir_tokens_fini(&l->toks);
    ir_diags_fini(&l->diags);
    cn_arena_free(l->arena);
}

/* Lexes src and asserts the token kinds, ending with EOF. */
static void
lex_kinds(struct lexed *l, const char *src, const enum ir_tok *want, size_t n)
{
    size_t i;

    lex(l, src);
    cr_assert_eq(l->toks.len, n, "got %zu tokens, want %zu", l->toks.len, n);
    for (i = 0; i < n; i++) {
        cr_assert_eq(l->toks.items[i].kind, want[i], "token %zu is %s, want %s", i,
                     ir_tok_text(l->toks.items[i].kind), ir_tok_text(want[i]));
    }
}

/* Asserts exactly one error, at line:col, whose message contains `needle`. */
static void
expect_error(const char *src, uint32_t line, uint32_t col, const char *needle)
{
    struct lexed l;

    lex(&l, src);
    cr_assert_geq(l.diags.len, 1, "no error for %s", src);
    cr_assert_eq(l.diags.items[0].line, line, "line %u, want %u (%s)", l.diags.items[0].line, line,
                 l.diags.items[0].msg);
    cr_assert_eq(l.diags.items[0].col, col, "col %u, want %u (%s)", l.diags.items[0].col, col,
                 l.diags.items[0].msg);
    cr_assert(strstr(l.diags.items[0].msg, needle) != NULL, "message '%s' lacks '%s'",
              l.diags.items[0].msg, needle);
    lexed_free(&l);
}

Test(ir_lexer, simple_statement_tokens_and_positions)
{
    struct lexed l;
    const enum ir_tok want[] = {IR_TK_NAME,   IR_TK_ASSIGN,  IR_TK_AT,   IR_TK_NAME,   IR_TK_DOT,
                                IR_TK_NAME,   IR_TK_LPAREN,  IR_TK_NAME, IR_TK_ASSIGN, IR_TK_INT,
                                IR_TK_RPAREN, IR_TK_NEWLINE, IR_TK_EOF};

    lex_kinds(&l, "x = @mod.act(k=42)\n", want, sizeof(want) / sizeof(want[0]));
    cr_assert_str_eq(l.toks.items[0].str, "x");
    cr_assert_eq(l.toks.items[2].col, 5);
    cr_assert_eq(l.toks.items[9].v.i, 42);
    cr_assert_eq(l.toks.items[9].col, 16);
    cr_assert_eq(l.diags.len, 0);
    lexed_free(&l);
}

Test(ir_lexer, indentation_produces_indent_and_dedent)
{
    struct lexed l;
    const enum ir_tok want[] = {
        IR_TK_IF,      IR_TK_NAME,    IR_TK_COLON,   IR_TK_NEWLINE, IR_TK_INDENT, IR_TK_NAME,
        IR_TK_ASSIGN,  IR_TK_INT,     IR_TK_NEWLINE, IR_TK_IF,      IR_TK_NAME,   IR_TK_COLON,
        IR_TK_NEWLINE, IR_TK_INDENT,  IR_TK_PASS,    IR_TK_NEWLINE, IR_TK_DEDENT, IR_TK_DEDENT,
        IR_TK_NAME,    IR_TK_NEWLINE, IR_TK_EOF};

    lex_kinds(&l, "if a:\n    b = 1\n\n    # comment only\n    if c:\n        pass\nd\n", want,
              sizeof(want) / sizeof(want[0]));
    cr_assert_eq(l.diags.len, 0);
    lexed_free(&l);
}

Test(ir_lexer, dedents_at_end_of_file_without_newline)
{
    struct lexed l;
    const enum ir_tok want[] = {IR_TK_FN,      IR_TK_NAME,    IR_TK_LPAREN, IR_TK_RPAREN,
                                IR_TK_COLON,   IR_TK_NEWLINE, IR_TK_INDENT, IR_TK_RETURN,
                                IR_TK_NEWLINE, IR_TK_DEDENT,  IR_TK_EOF};

    lex_kinds(&l, "fn f():\n    return", want, sizeof(want) / sizeof(want[0]));
    lexed_free(&l);
}

Test(ir_lexer, newlines_inside_brackets_are_joined)
{
    struct lexed l;
    const enum ir_tok want[] = {IR_TK_NAME, IR_TK_ASSIGN, IR_TK_LBRACK,  IR_TK_INT, IR_TK_COMMA,
                                IR_TK_INT,  IR_TK_RBRACK, IR_TK_NEWLINE, IR_TK_EOF};

    lex_kinds(&l, "x = [1,\n        2\n]\n", want, sizeof(want) / sizeof(want[0]));
    cr_assert_eq(l.toks.items[5].line, 2);
    cr_assert_eq(l.toks.items[5].col, 9);
    lexed_free(&l);
}

Test(ir_lexer, keywords_and_names)
{
    struct lexed l;
    const char *src = "fn input output return if elif else for in while break continue try "
                      "except as spread parallel sleep and or not True False None pass fnx _a1";
    const enum ir_tok want[] = {
        IR_TK_FN,   IR_TK_INPUT,  IR_TK_OUTPUT, IR_TK_RETURN,  IR_TK_IF,       IR_TK_ELIF,
        IR_TK_ELSE, IR_TK_FOR,    IR_TK_IN,     IR_TK_WHILE,   IR_TK_BREAK,    IR_TK_CONTINUE,
        IR_TK_TRY,  IR_TK_EXCEPT, IR_TK_AS,     IR_TK_SPREAD,  IR_TK_PARALLEL, IR_TK_SLEEP,
        IR_TK_AND,  IR_TK_OR,     IR_TK_NOT,    IR_TK_TRUE,    IR_TK_FALSE,    IR_TK_NONE,
        IR_TK_PASS, IR_TK_NAME,   IR_TK_NAME,   IR_TK_NEWLINE, IR_TK_EOF};

    lex_kinds(&l, src, want, sizeof(want) / sizeof(want[0]));
    cr_assert_str_eq(l.toks.items[25].str, "fnx");
    lexed_free(&l);
}

Test(ir_lexer, operators_longest_match)
{
    struct lexed l;
    const enum ir_tok want[] = {
        IR_TK_DSLASHEQ, IR_TK_DSLASH,  IR_TK_SLASH,     IR_TK_ARROW,   IR_TK_MINUS,  IR_TK_LE,
        IR_TK_LT,       IR_TK_GE,      IR_TK_GT,        IR_TK_EQ,      IR_TK_ASSIGN, IR_TK_NE,
        IR_TK_PIPEEQ,   IR_TK_PIPE,    IR_TK_PERCENT,   IR_TK_STAR,    IR_TK_PLUSEQ, IR_TK_MINUSEQ,
        IR_TK_STAREQ,   IR_TK_SLASHEQ, IR_TK_PERCENTEQ, IR_TK_NEWLINE, IR_TK_EOF};

    lex_kinds(&l, "//= // / -> - <= < >= > == = != |= | % * += -= *= /= %=", want,
              sizeof(want) / sizeof(want[0]));
    lexed_free(&l);
}

Test(ir_lexer, numbers)
{
    struct lexed l;

    lex(&l, "0 7 9223372036854775807 1.5 2e3 .5 1. 1e-2 3E+2");
    cr_assert_eq(l.diags.len, 0);
    cr_assert_eq(l.toks.items[0].v.i, 0);
    cr_assert_eq(l.toks.items[2].v.i, 9223372036854775807ULL);
    cr_assert_eq(l.toks.items[3].kind, IR_TK_FLOAT);
    cr_assert_float_eq(l.toks.items[3].v.f, 1.5, 1e-12);
    cr_assert_float_eq(l.toks.items[4].v.f, 2000.0, 1e-9);
    cr_assert_float_eq(l.toks.items[5].v.f, 0.5, 1e-12);
    cr_assert_eq(l.toks.items[6].kind, IR_TK_FLOAT);
    cr_assert_float_eq(l.toks.items[7].v.f, 0.01, 1e-12);
    cr_assert_float_eq(l.toks.items[8].v.f, 300.0, 1e-9);
    lexed_free(&l);
}

/* A UTF-8 byte-order mark at the start is ignored, as Python does; positions count from the
 * first character after it. Anywhere else it is a character like any other. */
Test(ir_lexer, a_byte_order_mark_at_the_start_is_ignored)
{
    struct lexed l;

    lex(&l, "\xEF\xBB\xBFx = 1");
    cr_assert_eq(l.diags.len, 0, "%s", l.diags.len ? l.diags.items[0].msg : "");
    cr_assert_eq(l.toks.items[0].kind, IR_TK_NAME);
    cr_assert_eq(l.toks.items[0].line, 1);
    cr_assert_eq(l.toks.items[0].col, 1);
    lexed_free(&l);
    expect_error("x = 1 \xEF\xBB\xBF", 1, 7, "");
}

/* As in Python, a dot after digits belongs to the number, exponent included. */
Test(ir_lexer, a_dot_then_an_exponent_is_one_float)
{
    static const struct {
        double v, eps;
    } want[] = {{1000.0, 1e-9}, {0.2, 1e-12}, {0.0, 1e-12}};
    struct lexed l;
    size_t i;

    lex(&l, "1.e3 2.E-1 0.e0");
    cr_assert_eq(l.diags.len, 0);
    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        cr_assert_eq(l.toks.items[i].kind, IR_TK_FLOAT, "token %zu", i);
        cr_assert_float_eq(l.toks.items[i].v.f, want[i].v, want[i].eps, "token %zu", i);
    }
    lexed_free(&l);
}

Test(ir_lexer, int_min_magnitude_is_kept_for_unary_minus)
{
    struct lexed l;

    lex(&l, "9223372036854775808");
    cr_assert_eq(l.diags.len, 0);
    cr_assert_eq(l.toks.items[0].v.i, (uint64_t) 1 << 63);
    lexed_free(&l);
}

Test(ir_lexer, durations)
{
    static const int64_t want_ms[] = {100, 30000, 120000, 3600000, 0};
    struct lexed l;
    size_t i;

    lex(&l, "100ms 30s 2m 1h 0s");
    cr_assert_eq(l.diags.len, 0);
    cr_assert_eq(l.toks.items[0].kind, IR_TK_DURATION);
    for (i = 0; i < sizeof(want_ms) / sizeof(want_ms[0]); i++) {
        cr_assert_eq(l.toks.items[i].v.dur_ms, want_ms[i], "token %zu", i);
    }
    lexed_free(&l);
}

Test(ir_lexer, strings_and_escapes)
{
    struct lexed l;

    lex(&l, "'a\\n\\t\\r\\\\\\'\\\"\\0b' \"\\u00e9\\u4e2d\" 'h\xc3\xa9'");
    cr_assert_eq(l.diags.len, 0, "%s", l.diags.len ? l.diags.items[0].msg : "");
    cr_assert_eq(l.toks.items[0].kind, IR_TK_STRING);
    cr_assert_eq(l.toks.items[0].str_len, 9);
    cr_assert(memcmp(l.toks.items[0].str, "a\n\t\r\\'\"\0b", 9) == 0);
    cr_assert_str_eq(l.toks.items[1].str, "\xc3\xa9\xe4\xb8\xad");
    cr_assert_str_eq(l.toks.items[2].str, "h\xc3\xa9");
    lexed_free(&l);
}

Test(ir_lexer, columns_count_code_points)
{
    struct lexed l;

    lex(&l, "x = '\xc3\xa9\xc3\xa9' + y");
    cr_assert_eq(l.toks.items[3].kind, IR_TK_PLUS);
    cr_assert_eq(l.toks.items[3].col, 10);
    cr_assert_eq(l.toks.items[4].col, 12);
    lexed_free(&l);
}

Test(ir_lexer, errors_with_positions)
{
    expect_error("x = 'abc\n", 1, 5, "unterminated string");
    expect_error("x = \"a\\qb\"", 1, 7, "unknown escape '\\q'");
    expect_error("x = '\\u12'", 1, 6, "4 hex digits");
    expect_error("x = '\\ud800'", 1, 6, "surrogate");
    expect_error("x = 012", 1, 5, "leading zeros");
    expect_error("x = 99999999999999999999", 1, 5, "does not fit in 64 bits");
    expect_error("x = 1e999", 1, 5, "out of range");
    expect_error("x = 5days", 1, 5, "duration unit");
    expect_error("x = 1.x", 1, 5, "invalid number '1.x'");
    expect_error("x = 1.e5x", 1, 5, "invalid number '1.e5x'");
    expect_error("x = 1.e", 1, 5, "invalid number '1.e'");
    expect_error("x = 1 $ 2", 1, 7, "unexpected character '$'");
    expect_error("x = a \\\n  + b", 1, 7, "line continuation");
    expect_error("if a:\n\tb = 1\n", 2, 1, "tab in indentation");
    expect_error("if a:\n  b = 1\n", 2, 1, "expected an indent of 4 spaces");
    expect_error("if a:\n        b = 1\n", 2, 1, "expected an indent of 4 spaces");
    expect_error("if a:\n    if b:\n        c\n  d\n", 4, 1, "does not match any enclosing");
    expect_error("x = 1\ny = '\xff'\n", 2, 6, "not valid UTF-8");
    expect_error("x = \xc3\xa9", 1, 5, "names are ASCII");
}

Test(ir_lexer, several_errors_in_one_run)
{
    struct lexed l;

    lex(&l, "a = $\nb = 'x\nc = 012\n");
    cr_assert_eq(l.diags.len, 3);
    cr_assert_eq(l.diags.items[0].line, 1);
    cr_assert_eq(l.diags.items[1].line, 2);
    cr_assert_eq(l.diags.items[2].line, 3);
    lexed_free(&l);
}

Test(ir_lexer, unclosed_bracket_recovers_at_next_function)
{
    struct lexed l;
    size_t i, newlines = 0;

    lex(&l, "fn a():\n    x = [1,\n    y = 2\nfn b():\n    z = 3\n");
    cr_assert_eq(l.diags.len, 1);
    cr_assert_eq(l.diags.items[0].line, 2);
    cr_assert_eq(l.diags.items[0].col, 9);
    cr_assert(strstr(l.diags.items[0].msg, "'[' was never closed") != NULL);
    for (i = 0; i < l.toks.len; i++) {
        newlines += l.toks.items[i].kind == IR_TK_NEWLINE;
    }
    cr_assert_eq(newlines, 4); /* fn a, the joined x/y line, fn b, z */
    lexed_free(&l);
}

Test(ir_lexer, huge_duration_is_an_error_not_an_overflow)
{
    expect_error("x = 111111111111111111111111h", 1, 5, "is too large");
    /* Fits in int64 as a number, overflows once converted to milliseconds. */
    expect_error("x = 2562047788016h", 1, 5, "is too large");
}

Test(ir_lexer, many_strings_on_one_line_use_memory_proportional_to_the_source)
{
    struct cn_buf src = CN_BUF_INIT;
    struct lexed l;
    int i;

    t_puts(&src, "x = [");
    for (i = 0; i < 20000; i++) {
        t_printf(&src, "'s%d', ", i);
    }
    t_puts(&src, "]\n");
    lex(&l, src.data);
    cr_assert_eq(l.diags.len, 0);
    /* Each literal reserves about its own length, not the rest of the line. */
    cr_assert_lt(cn_arena_used(l.arena), 40 * src.len, "arena %zu bytes for %zu bytes of source",
                 cn_arena_used(l.arena), src.len);
    lexed_free(&l);
    cn_buf_fini(&src);
}
