/* SPDX-License-Identifier: MIT */
/*
 * Lexer: one pass over the source, producing the whole token array. Indentation is handled at
 * the start of each logical line (bracket depth 0) against a stack of widths, the way Python's
 * tokenizer does, but stricter: exactly 4 more spaces per level and no tabs.
 */
#include "ir/lexer.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/buf.h"
#include "ir/base/names.h"
#include "ir/base/vec.h"

#define LEX_MAX_INDENT   100 /* nesting levels; deeper is an error, not a stack overflow */
#define LEX_MAX_BRACKETS 200

struct lexer {
    const char *src, *p, *end;
    uint32_t line, col;
    struct cn_arena *arena;
    struct ir_diags *diags;
    struct ir_tokens *out;
    uint32_t indents[LEX_MAX_INDENT + 1];
    int nindent;
    int depth; /* open brackets */
    uint32_t open_line[LEX_MAX_BRACKETS + 1], open_col[LEX_MAX_BRACKETS + 1];
    char open_ch[LEX_MAX_BRACKETS + 1];
    bool deep_reported;
    cn_err rv; /* sticky CN_NOMEM */
};

CN_ENUM_NAMES(ir_tok_text, enum ir_tok, IR_TOKENS, IR_TK_COUNT_)

static const struct {
    const char *word;
    enum ir_tok tok;
} keywords[] = {
    {"fn", IR_TK_FN},
    {"input", IR_TK_INPUT},
    {"output", IR_TK_OUTPUT},
    {"return", IR_TK_RETURN},
    {"if", IR_TK_IF},
    {"elif", IR_TK_ELIF},
    {"else", IR_TK_ELSE},
    {"for", IR_TK_FOR},
    {"in", IR_TK_IN},
    {"while", IR_TK_WHILE},
    {"break", IR_TK_BREAK},
    {"continue", IR_TK_CONTINUE},
    {"try", IR_TK_TRY},
    {"except", IR_TK_EXCEPT},
    {"as", IR_TK_AS},
    {"spread", IR_TK_SPREAD},
    {"parallel", IR_TK_PARALLEL},
    {"sleep", IR_TK_SLEEP},
    {"raise", IR_TK_RAISE},
    {"class", IR_TK_CLASS},
    {"finally", IR_TK_FINALLY},
    {"and", IR_TK_AND},
    {"or", IR_TK_OR},
    {"not", IR_TK_NOT},
    {"True", IR_TK_TRUE},
    {"False", IR_TK_FALSE},
    {"None", IR_TK_NONE},
    {"pass", IR_TK_PASS},
};

static void
lex_emit(struct lexer *lx, const struct ir_token *t)
{
    if (lx->rv == CN_OK && CN_VEC_PUSH(lx->out, *t) != CN_OK) {
        lx->rv = CN_NOMEM;
    }
}

/* A token of the source text [start, start + len) at line:col, with no value yet. */
static void
tok_init(struct ir_token *t, enum ir_tok kind, uint32_t line, uint32_t col, const char *start,
         size_t len)
{
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    t->line = line;
    t->col = col;
    t->start = start;
    t->len = (uint32_t) len;
}

static void
lex_simple(struct lexer *lx, enum ir_tok kind, uint32_t line, uint32_t col, const char *start,
           size_t len)
{
    struct ir_token t;

    tok_init(&t, kind, line, col, start, len);
    lex_emit(lx, &t);
}

/* Advances over one byte, keeping the column in code points. */
static void
lex_adv(struct lexer *lx)
{
    unsigned char c = (unsigned char) *lx->p++;

    if (c == '\n') {
        lx->line++;
        lx->col = 1;
    } else if ((c & 0xC0) != 0x80) {
        lx->col++;
    }
}

/* Length of the UTF-8 sequence at p, or 0 if invalid (overlong, surrogate, > U+10FFFF). */
static size_t
utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n, i;
    uint32_t cp;

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t) (end - p) < n) {
        return 0;
    }
    for (i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
        return 0;
    }
    return n;
}

/* Rejects a source that is not UTF-8 before anything else: every later column would lie. */
static bool
lex_check_utf8(struct lexer *lx)
{
    const unsigned char *p = (const unsigned char *) lx->src;
    const unsigned char *end = (const unsigned char *) lx->end;
    uint32_t line = 1, col = 1;
    size_t n;

    while (p < end) {
        n = utf8_seq(p, end);
        if (n == 0) {
            ir_diags_add(lx->diags, line, col, "source is not valid UTF-8 (byte 0x%02x)", *p);
            return false;
        }
        if (*p == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
        p += n;
    }
    return true;
}

static bool
is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool
is_name_char(char c)
{
    return is_name_start(c) || is_digit(c);
}

/* Handles the indentation of a new logical line. Returns false when the line is blank or a
 * comment (nothing to emit; the caller skips it). */
static bool
lex_indent(struct lexer *lx)
{
    const char *q = lx->p;
    uint32_t width = 0, line = lx->line;
    bool tab = false;

    while (q < lx->end && (*q == ' ' || *q == '\t')) {
        if (*q == '\t') {
            tab = true;
        }
        width++;
        q++;
    }
    if (q >= lx->end || *q == '\n' || *q == '#' ||
        (*q == '\r' && q + 1 < lx->end && q[1] == '\n')) {
        return false;
    }
    if (tab) {
        ir_diags_add(lx->diags, line, 1, "tab in indentation; indent with 4 spaces per level");
    }
    while (lx->p < q) {
        lex_adv(lx);
    }
    if (width > lx->indents[lx->nindent]) {
        if (width != lx->indents[lx->nindent] + 4 && !tab) {
            ir_diags_add(lx->diags, line, 1,
                         "expected an indent of %u spaces (4 more than the enclosing block), "
                         "found %u",
                         lx->indents[lx->nindent] + 4, width);
        }
        if (lx->nindent >= LEX_MAX_INDENT) {
            ir_diags_add(lx->diags, line, 1, "blocks nested too deeply (limit %d)", LEX_MAX_INDENT);
            return true;
        }
        lx->indents[++lx->nindent] = width;
        lex_simple(lx, IR_TK_INDENT, line, lx->col, lx->p, 0);
        return true;
    }
    while (width < lx->indents[lx->nindent]) {
        lx->nindent--;
        lex_simple(lx, IR_TK_DEDENT, line, lx->col, lx->p, 0);
    }
    if (width != lx->indents[lx->nindent] && !tab) {
        ir_diags_add(lx->diags, line, 1,
                     "unindent to %u spaces does not match any enclosing block (expected %u)",
                     width, lx->indents[lx->nindent]);
    }
    return true;
}

/* The end of the number that starts at q: digits, a fraction, an exponent; *is_float when it
 * has either of the last two. */
static const char *
scan_number(const struct lexer *lx, const char *q, bool *is_float)
{
    while (q < lx->end && is_digit(*q)) {
        q++;
    }
    /* As in Python, a dot after digits always belongs to the number: `1.e3` is 1000.0, and
     * `1.x` is a bad number, not an attribute of 1. */
    if (q < lx->end && *q == '.') {
        *is_float = true;
        q++;
        while (q < lx->end && is_digit(*q)) {
            q++;
        }
    }
    if (q < lx->end && (*q == 'e' || *q == 'E')) {
        const char *e = q + 1;
        if (e < lx->end && (*e == '+' || *e == '-')) {
            e++;
        }
        if (e < lx->end && is_digit(*e)) {
            *is_float = true;
            q = e;
            while (q < lx->end && is_digit(*q)) {
                q++;
            }
        }
    }
    return q;
}

/* Milliseconds per unit for the duration unit [u, u + n) (ms, s, m, h, d); 0 for anything else. */
static int64_t
duration_unit_ms(const char *u, size_t n)
{
    if (n == 2 && u[0] == 'm' && u[1] == 's') {
        return 1;
    }
    if (n == 1 && *u == 's') {
        return 1000;
    }
    if (n == 1 && *u == 'm') {
        return 60000;
    }
    if (n == 1 && *u == 'h') {
        return 3600000;
    }
    if (n == 1 && *u == 'd') {
        return 86400000;
    }
    return 0;
}

/* The end of the word of letters, digits and '_' at q. */
static const char *
scan_word(const struct lexer *lx, const char *q)
{
    while (q < lx->end && is_name_char(*q)) {
        q++;
    }
    return q;
}

/* Letters after a float (`1.5s`, `2.0x`), from *qp: always a bad number, explained when they
 * are a duration unit. t becomes the whole word; *qp its end. */
static void
lex_float_suffix(struct lexer *lx, struct ir_token *t, const char **qp)
{
    const char *s = t->start, *u = *qp, *q = scan_word(lx, *qp);

    t->len = (uint32_t) (q - s);
    if (duration_unit_ms(u, (size_t) (q - u)) != 0) {
        ir_diags_add(lx->diags, t->line, t->col,
                     "invalid number '%.*s' (a duration must be a whole number with a unit "
                     "(ms, s, m, h or d), e.g. 1500ms)",
                     (int) (q - s), s);
    } else {
        ir_diags_add(lx->diags, t->line, t->col, "invalid number '%.*s'", (int) (q - s), s);
    }
    *qp = q;
}

/* A duration: 100ms, 30s, 2m, 1h, 3d (the unit must end the word); the digits end at *qp, the
 * unit is read from there. t becomes the whole word; *qp its end. Returns true when bad. */
static bool
lex_duration(struct lexer *lx, struct ir_token *t, const char **qp)
{
    const char *s = t->start, *u = *qp, *q = scan_word(lx, *qp), *d;
    int64_t mult = duration_unit_ms(u, (size_t) (q - u));
    uint64_t v = 0;
    bool bad = false;

    *qp = q;
    t->len = (uint32_t) (q - s);
    if (mult == 0 && *u == '_') {
        ir_diags_add(lx->diags, t->line, t->col,
                     "invalid number '%.*s' (underscores in numbers are not supported)",
                     (int) (q - s), s);
        return true;
    }
    if (mult == 0) {
        ir_diags_add(lx->diags, t->line, t->col,
                     "invalid number '%.*s' (a duration unit must be ms, s, m, h or d)",
                     (int) (q - s), s);
        return true;
    }
    for (d = s; d < u && !bad; d++) {
        if (v > (uint64_t) INT64_MAX / 10) {
            bad = true;
        }
        v = v * 10 + (uint64_t) (*d - '0');
    }
    if (bad || v > (uint64_t) (INT64_MAX / mult)) {
        ir_diags_add(lx->diags, t->line, t->col, "duration '%.*s' is too large", (int) (q - s), s);
        bad = true;
    }
    t->kind = IR_TK_DURATION;
    t->v.dur_ms = bad ? 0 : (int64_t) v * mult; /* v * mult fits: checked above */
    return bad;
}

/* The value of the float literal t, n bytes long. Returns true when bad. */
static bool
lex_float(struct lexer *lx, struct ir_token *t, size_t n)
{
    char tmp[400];

    if (n >= sizeof(tmp)) {
        ir_diags_add(lx->diags, t->line, t->col, "float literal is too long");
        return true;
    }
    memcpy(tmp, t->start, n);
    tmp[n] = '\0';
    t->kind = IR_TK_FLOAT;
    t->v.f = strtod(tmp, NULL);
    if (isinf(t->v.f)) {
        ir_diags_add(lx->diags, t->line, t->col, "float literal '%s' is out of range", tmp);
        return true;
    }
    return false;
}

/* The value of the integer literal t, n digits long, up to 2^63 (the parser folds a minus
 * sign into it, for INT64_MIN). Returns true when bad. */
static bool
lex_int(struct lexer *lx, struct ir_token *t, size_t n)
{
    const char *s = t->start, *q = s + n, *d;
    uint64_t v = 0;
    bool zeros = n > 1 && s[0] == '0', bad = false;

    t->kind = IR_TK_INT;
    for (d = s; d < q; d++) {
        if (*d != '0') {
            break;
        }
    }
    if (zeros && d != q) {
        ir_diags_add(lx->diags, t->line, t->col,
                     "leading zeros in integer literals are not permitted");
        bad = true;
    }
    for (d = s; d < q && !bad; d++) {
        unsigned dig = (unsigned) (*d - '0');
        if (v > ((uint64_t) 1 << 63) / 10 || v * 10 + dig > ((uint64_t) 1 << 63)) {
            ir_diags_add(lx->diags, t->line, t->col,
                         "integer literal '%.*s' does not fit in 64 bits", (int) n, s);
            bad = true;
        }
        v = v * 10 + dig;
    }
    t->v.i = v;
    return bad;
}

static void
lex_number(struct lexer *lx)
{
    const char *s = lx->p, *q;
    bool is_float = false, bad;
    struct ir_token t;
    size_t n;

    q = scan_number(lx, s, &is_float);
    n = (size_t) (q - s);
    tok_init(&t, IR_TK_INT, lx->line, lx->col, s, n);
    if (is_float && q < lx->end && is_name_char(*q)) {
        lex_float_suffix(lx, &t, &q);
        bad = true;
    } else if (!is_float && q < lx->end && is_name_start(*q)) {
        bad = lex_duration(lx, &t, &q);
    } else if (is_float) {
        bad = lex_float(lx, &t, n);
    } else {
        bad = lex_int(lx, &t, n);
    }
    while (lx->p < q) {
        lex_adv(lx);
    }
    if (bad) {
        /* Keep the parser in step: an INT 0 stands in for the bad literal. */
        t.kind = IR_TK_INT;
        t.v.i = 0;
    }
    lex_emit(lx, &t);
}

/* The four hex digits of a unicode escape (its 'u' consumed), appended to buf + *n as UTF-8;
 * ecol is the backslash's column, for the errors. */
static void
lex_u_escape(struct lexer *lx, char *buf, size_t *n, uint32_t line, uint32_t ecol)
{
    uint32_t cp = 0;
    int i, h;

    for (i = 0; i < 4; i++) {
        if (lx->p >= lx->end || (h = cn_hex_digit(*lx->p)) < 0) {
            break;
        }
        cp = cp * 16 + (uint32_t) h;
        lex_adv(lx);
    }
    if (i < 4) {
        ir_diags_add(lx->diags, line, ecol, "\\u must be followed by 4 hex digits");
    } else if (cp >= 0xD800 && cp <= 0xDFFF) {
        ir_diags_add(lx->diags, line, ecol,
                     "\\u%04X is a surrogate and cannot appear in a UTF-8 string", cp);
    } else {
        *n += cn_utf8_put(buf + *n, cp);
    }
}

/* The escape of character c (the backslash and c consumed), appended to buf + *n; ecol is the
 * backslash's column, for the errors. */
static void
lex_escape(struct lexer *lx, char c, char *buf, size_t *n, uint32_t line, uint32_t ecol)
{
    switch (c) {
    case 'n':
        buf[(*n)++] = '\n';
        break;
    case 't':
        buf[(*n)++] = '\t';
        break;
    case 'r':
        buf[(*n)++] = '\r';
        break;
    case '\\':
    case '\'':
    case '"':
        buf[(*n)++] = c;
        break;
    case '0':
        buf[(*n)++] = '\0';
        break;
    case 'u':
        lex_u_escape(lx, buf, n, line, ecol);
        break;
    default:
        ir_diags_add(lx->diags, line, ecol,
                     "unknown escape '\\%c' (expected one of \\n \\t \\r \\\\ \\' \\\" \\0 "
                     "\\uXXXX)",
                     c);
        break;
    }
}

static void
lex_string(struct lexer *lx)
{
    char quote = *lx->p;
    const char *s = lx->p;
    uint32_t line = lx->line, col = lx->col;
    struct ir_token t;
    char *buf;
    size_t n = 0;
    bool closed = false;
    const char *stop = lx->p + 1;

    /* Decoded text is never longer than its source text, which ends at the closing quote (or
     * the end of the line): size the buffer to that, not to the rest of the file. */
    while (stop < lx->end && *stop != '\n' && *stop != quote) {
        stop += (*stop == '\\' && stop + 1 < lx->end && stop[1] != '\n') ? 2 : 1;
    }
    buf = cn_arena_alloc(lx->arena, (size_t) (stop - lx->p) + 1);
    if (buf == NULL) {
        lx->rv = CN_NOMEM;
        lx->p = lx->end;
        return;
    }
    lex_adv(lx);
    while (lx->p < lx->end && *lx->p != '\n') {
        char c = *lx->p;
        uint32_t ecol = lx->col;
        if (c == quote) {
            lex_adv(lx);
            closed = true;
            break;
        }
        if (c != '\\') {
            buf[n++] = c;
            lex_adv(lx);
            continue;
        }
        lex_adv(lx);
        if (lx->p >= lx->end || *lx->p == '\n') {
            break;
        }
        c = *lx->p;
        lex_adv(lx);
        lex_escape(lx, c, buf, &n, line, ecol);
    }
    if (!closed) {
        ir_diags_add(lx->diags, line, col, "unterminated string (missing closing %c)", quote);
    }
    buf[n] = '\0';
    tok_init(&t, IR_TK_STRING, line, col, s, (size_t) (lx->p - s));
    t.str = buf;
    t.str_len = n;
    lex_emit(lx, &t);
}

static void
lex_name(struct lexer *lx)
{
    const char *s = lx->p;
    uint32_t line = lx->line, col = lx->col;
    struct ir_token t;
    size_t n, i;

    while (lx->p < lx->end && is_name_char(*lx->p)) {
        lex_adv(lx);
    }
    n = (size_t) (lx->p - s);
    tok_init(&t, IR_TK_NAME, line, col, s, n);
    for (i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++) {
        if (strlen(keywords[i].word) == n && memcmp(keywords[i].word, s, n) == 0) {
            t.kind = keywords[i].tok;
            break;
        }
    }
    t.str = cn_arena_strndup(lx->arena, s, n);
    t.str_len = n;
    if (t.str == NULL) {
        lx->rv = CN_NOMEM;
    }
    lex_emit(lx, &t);
}

/* Operators, longest first so "//=" wins over "//" and "/". */
static const struct {
    const char *text;
    enum ir_tok tok;
} ops[] = {
    {"//=", IR_TK_DSLASHEQ}, {"//", IR_TK_DSLASH}, {"->", IR_TK_ARROW},   {"<=", IR_TK_LE},
    {">=", IR_TK_GE},        {"==", IR_TK_EQ},     {"!=", IR_TK_NE},      {"+=", IR_TK_PLUSEQ},
    {"-=", IR_TK_MINUSEQ},   {"*=", IR_TK_STAREQ}, {"/=", IR_TK_SLASHEQ}, {"%=", IR_TK_PERCENTEQ},
    {"|=", IR_TK_PIPEEQ},    {"(", IR_TK_LPAREN},  {")", IR_TK_RPAREN},   {"[", IR_TK_LBRACK},
    {"]", IR_TK_RBRACK},     {"{", IR_TK_LBRACE},  {"}", IR_TK_RBRACE},   {",", IR_TK_COMMA},
    {":", IR_TK_COLON},      {".", IR_TK_DOT},     {"=", IR_TK_ASSIGN},   {"+", IR_TK_PLUS},
    {"-", IR_TK_MINUS},      {"*", IR_TK_STAR},    {"/", IR_TK_SLASH},    {"%", IR_TK_PERCENT},
    {"|", IR_TK_PIPE},       {"<", IR_TK_LT},      {">", IR_TK_GT},       {"@", IR_TK_AT},
};

static void
lex_op(struct lexer *lx)
{
    size_t i, n, left = (size_t) (lx->end - lx->p);
    uint32_t line = lx->line, col = lx->col;
    const char *s = lx->p;

    for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        n = strlen(ops[i].text);
        if (n <= left && memcmp(ops[i].text, s, n) == 0) {
            enum ir_tok k = ops[i].tok;
            if (k == IR_TK_LPAREN || k == IR_TK_LBRACK || k == IR_TK_LBRACE) {
                if (lx->depth >= LEX_MAX_BRACKETS) {
                    if (!lx->deep_reported) {
                        ir_diags_add(lx->diags, line, col, "brackets nested too deeply (limit %d)",
                                     LEX_MAX_BRACKETS);
                        lx->deep_reported = true;
                    }
                } else {
                    lx->open_line[lx->depth] = line;
                    lx->open_col[lx->depth] = col;
                    lx->open_ch[lx->depth] = *s;
                    lx->depth++;
                }
            } else if ((k == IR_TK_RPAREN || k == IR_TK_RBRACK || k == IR_TK_RBRACE) &&
                       lx->depth > 0) {
                lx->depth--;
            }
            while (n-- > 0) {
                lex_adv(lx);
            }
            lex_simple(lx, k, line, col, s, (size_t) (lx->p - s));
            return;
        }
    }
    if ((unsigned char) *s >= 0x80) {
        ir_diags_add(lx->diags, line, col,
                     "unexpected character (names are ASCII: letters, digits and '_')");
    } else {
        ir_diags_add(lx->diags, line, col, "unexpected character '%c'", *s);
    }
    lex_adv(lx);
    while (lx->p < lx->end && ((unsigned char) *lx->p & 0xC0) == 0x80) {
        lex_adv(lx);
    }
}

cn_err
ir_lex(const char *src, size_t len, struct cn_arena *arena, struct ir_diags *diags,
       struct ir_tokens *out)
{
    struct lexer lx;
    bool line_start = true;
    const struct ir_token *last;

    memset(&lx, 0, sizeof(lx));
    memset(out, 0, sizeof(*out));
    lx.src = lx.p = src;
    lx.end = src + len;
    lx.line = lx.col = 1;
    lx.arena = arena;
    lx.diags = diags;
    lx.out = out;

    if (!lex_check_utf8(&lx)) {
        lx.p = lx.end; /* nothing else is trustworthy */
    } else if (len >= 3 && memcmp(src, "\xEF\xBB\xBF", 3) == 0) {
        lx.p += 3; /* a UTF-8 byte-order mark, as editors on Windows write: ignored, as Python
                      does; columns still count from the first character after it */
    }
    while (lx.p < lx.end && lx.rv == CN_OK) {
        char c = *lx.p;
        if (line_start && lx.depth == 0) {
            line_start = false;
            if (!lex_indent(&lx)) {
                /* blank or comment-only line: skip to its end */
                while (lx.p < lx.end && *lx.p != '\n') {
                    lex_adv(&lx);
                }
                if (lx.p < lx.end) {
                    lex_adv(&lx);
                }
                line_start = true;
                continue;
            }
            continue;
        }
        if (c == '\n') {
            if (lx.depth > 0 && lx.end - lx.p > 3 && memcmp(lx.p + 1, "fn ", 3) == 0) {
                /* `fn` at column 1 cannot be inside an expression: the bracket was never
                 * closed. Recover here so the following functions are still checked. */
                ir_diags_add(lx.diags, lx.open_line[lx.depth - 1], lx.open_col[lx.depth - 1],
                             "'%c' was never closed", lx.open_ch[lx.depth - 1]);
                lx.depth = 0;
            }
            if (lx.depth == 0) {
                lex_simple(&lx, IR_TK_NEWLINE, lx.line, lx.col, lx.p, 1);
                line_start = true;
            }
            lex_adv(&lx);
        } else if (c == ' ' || c == '\r' || c == '\t') {
            lex_adv(&lx);
        } else if (c == '#') {
            while (lx.p < lx.end && *lx.p != '\n') {
                lex_adv(&lx);
            }
        } else if (is_digit(c) || (c == '.' && lx.p + 1 < lx.end && is_digit(lx.p[1]))) {
            lex_number(&lx);
        } else if (is_name_start(c)) {
            lex_name(&lx);
        } else if (c == '"' || c == '\'') {
            lex_string(&lx);
        } else if (c == '\\') {
            ir_diags_add(lx.diags, lx.line, lx.col,
                         "line continuation with '\\' is not supported; break lines inside "
                         "brackets instead");
            lex_adv(&lx);
        } else {
            lex_op(&lx);
        }
    }
    if (lx.rv != CN_OK) {
        ir_tokens_fini(out);
        return lx.rv;
    }
    last = out->len ? &out->items[out->len - 1] : NULL;
    if (last != NULL && last->kind != IR_TK_NEWLINE && last->kind != IR_TK_DEDENT &&
        last->kind != IR_TK_INDENT) {
        lex_simple(&lx, IR_TK_NEWLINE, lx.line, lx.col, lx.p, 0);
    }
    while (lx.nindent > 0) {
        lx.nindent--;
        lex_simple(&lx, IR_TK_DEDENT, lx.line, lx.col, lx.p, 0);
    }
    lex_simple(&lx, IR_TK_EOF, lx.line, lx.col, lx.p, 0);
    if (lx.rv != CN_OK) {
        ir_tokens_fini(out);
    }
    return lx.rv;
}

void
ir_tokens_fini(struct ir_tokens *t)
{
    free(t->items);
    t->items = NULL;
    t->len = t->cap = 0;
}
