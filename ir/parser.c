/* SPDX-License-Identifier: MIT */
/*
 * Parser for the workflow language. Grammar (docs/language.md), loosest expression level first:
 *   program   := funcdef* EOF
 *   funcdef   := 'fn' NAME '(' ['input' ':' params] [',' 'output' ':' names] ')' ':' block
 *   params    := '[' [NAME [':' type] ['=' expr] {',' ...}] ']'
 *   type      := ('None' | NAME ['[' [NAME ','] type ']']) {'|' ...}
 *   block     := NEWLINE INDENT stmt+ DEDENT | simple_stmt
 *   stmt      := if | for | while | try | simple_stmt
 *   simple    := pass | break | continue | return [exprs] | sleep expr | targets '=' rhs
 *              | NAME augop expr | rhs
 *   rhs       := action | 'spread' expr ':' NAME '->' action | 'parallel' ':' calls | exprs
 *   action    := ('@' NAME ('.' NAME)+ | ('run' | 'start') NAME ('.' NAME)*)
 *                '(' [NAME '=' expr, ...] ')' ('[' policy ']')* | wait | signal
 *   signal    := 'signal' NAME '(' 'to' '=' expr [',' 'payload' '=' expr] ')'  (either order)
 *   wait      := 'wait' (NAME (',' NAME)* | 'event' NAME) ('[' option (',' option)* ']')*
 *   option    := 'timeout' ':' duration | 'default' ':' expr | 'key' ':' expr
 *   expr      := or ['if' or 'else' expr];  or := and ('or' and)*;  and := not ('and' not)*
 *   not       := 'not' not | cmp;  cmp := merge (cmpop merge)*;  merge := sum ('|' sum)*
 *   sum       := term (('+'|'-') term)*;  term := unary (('*'|'/'|'//'|'%') unary)*
 *   unary     := '-' unary | postfix;  postfix := atom ('[' sub ']' | '.' NAME | '(' args ')')*
 * `run`, `start`, `wait` and `signal` are contextual: keywords only where an action call can stand
 * and a name follows them (see child_call_at), ordinary names everywhere else. Error handling is
 * panic mode: the first error of a statement is recorded, the rest of the statement (and the block
 * it would have opened) is skipped.
 *
 * This file owns the top level: the `fn` declarations (signature, [timeout: D], body) and
 * ir_parse itself; statements, expressions, calls and policies have files of their own
 * (parser_int.h lists them). Pure; no global state, no threads or locks.
 */
#include "ir/parser.h"

#include <stdlib.h>
#include <string.h>

#include "ir/base/strmap.h"
#include "ir/base/vec.h"
#include "ir/lexer.h"
#include "ir/parser_int.h"

static const struct ir_ty *parse_type(struct parser *ps);

static struct ir_ty *
new_type(struct parser *ps, enum ir_tykind kind, const struct ir_token *t)
{
    struct ir_ty ty;

    memset(&ty, 0, sizeof(ty));
    ty.kind = kind;
    ty.pos = tok_pos(t);
    return ir_ps_arena_copy(ps, &ty, 1, sizeof(ty));
}

/* One alternative of a type: None, a name, or list[T] / dict[str, T]. */
static const struct ir_ty *
parse_type_atom(struct parser *ps)
{
    static const struct {
        const char *name;
        enum ir_tykind kind;
    } names[] = {{"any", IR_TY_ANY},     {"str", IR_TY_STR},   {"int", IR_TY_INT},
                 {"float", IR_TY_FLOAT}, {"bool", IR_TY_BOOL}, {"list", IR_TY_LIST},
                 {"dict", IR_TY_DICT}};
    const struct ir_token *t = peek(ps);
    struct ir_ty *ty = NULL;
    size_t i;

    if (accept(ps, IR_TK_NONE)) {
        return new_type(ps, IR_TY_NONE, t);
    }
    if (t->kind == IR_TK_NAME) {
        for (i = 0; i < sizeof(names) / sizeof(names[0]) && ty == NULL; i++) {
            if (strcmp(t->str, names[i].name) == 0) {
                advance(ps);
                ty = new_type(ps, names[i].kind, t);
            }
        }
    }
    if (ty == NULL) {
        ir_ps_error_at(ps, t,
                       "expected a type: str, int, float, bool, list, dict, list[T], dict[str, "
                       "T], any or None (several joined with |)");
        return NULL;
    }
    if ((ty->kind == IR_TY_LIST || ty->kind == IR_TY_DICT) && accept(ps, IR_TK_LBRACK)) {
        if (ty->kind == IR_TY_DICT) {
            const struct ir_token *k = peek(ps);
            if (k->kind != IR_TK_NAME || strcmp(k->str, "str") != 0) {
                ir_ps_error_at(ps, k, "a dict's keys are str: write dict[str, T]");
                return NULL;
            }
            advance(ps);
            if (!ir_ps_expect(ps, IR_TK_COMMA, "after dict[str")) {
                return NULL;
            }
        }
        if ((ty->elem = parse_type(ps)) == NULL ||
            !ir_ps_expect(ps, IR_TK_RBRACK, "to close the type's brackets")) {
            return NULL;
        }
    }
    return ty;
}

/* type := atom ('|' atom)* */
static const struct ir_ty *
parse_type(struct parser *ps)
{
    const struct ir_token *t = peek(ps);
    const struct ir_ty *first = parse_type_atom(ps), *alts[16];
    struct ir_ty *u;
    uint32_t n = 1;

    if (first == NULL || !at(ps, IR_TK_PIPE)) {
        return first;
    }
    alts[0] = first;
    while (accept(ps, IR_TK_PIPE)) {
        if (n == sizeof(alts) / sizeof(alts[0])) {
            ir_ps_error_at(ps, peek(ps), "a type joins at most 16 alternatives");
            return NULL;
        }
        if ((alts[n++] = parse_type_atom(ps)) == NULL) {
            return NULL;
        }
    }
    if ((u = new_type(ps, IR_TY_UNION, t)) == NULL) {
        return NULL;
    }
    u->nalts = n;
    u->alts = ir_ps_arena_copy(ps, alts, n, sizeof(alts[0]));
    return u->alts != NULL ? u : NULL;
}

/* '[' NAME, ... ']' after input: / output:; with params (the inputs), each name may have a
 * type (`name: T`) and a default (`= constant`), collected into *params (NULL when none has
 * either). */
static bool
parse_name_list(struct parser *ps, struct ir_names *out, struct ir_param **params, const char *what)
{
    struct name_list nl = {{0}, {0}, CN_STRMAP_INIT};
    struct ir_param *ps_items = NULL;
    size_t n = 0, cap = 0;
    bool any = false;

    if (!ir_ps_expect(ps, IR_TK_LBRACK, what)) {
        return false;
    }
    while (!at(ps, IR_TK_RBRACK)) {
        const struct ir_token *t =
            ir_ps_expect_name(ps, "expected a name in the %s list", what + 6 /* skip "after " */);
        struct ir_param p = {NULL, IR_NO_EXPR, {0, 0}};
        if (t == NULL) {
            goto fail;
        }
        if (!ir_ps_names_add(ps, &nl, t->str, tok_pos(t), "duplicate name '%s'", t->str)) {
            goto fail;
        }
        if (params != NULL && accept(ps, IR_TK_COLON)) {
            if ((p.type = parse_type(ps)) == NULL) {
                goto fail;
            }
            any = true;
        }
        if (params != NULL && at(ps, IR_TK_ASSIGN)) {
            p.dflt_pos = tok_pos(advance(ps));
            if ((p.dflt = ir_parse_expr(ps)) == IR_NO_EXPR || ps->panic) {
                goto fail;
            }
            any = true;
        }
        if (params != NULL && !ir_ps_append(ps, (void **) &ps_items, &cap, &n, &p, sizeof(p))) {
            goto fail;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            break;
        }
    }
    if (!ir_ps_expect(ps, IR_TK_RBRACK, "to close the name list")) {
        goto fail;
    }
    *out = ir_ps_names_finish(ps, &nl);
    if (params != NULL) {
        *params = any ? ir_ps_arena_copy(ps, ps_items, n, sizeof(*ps_items)) : NULL;
    }
    free(ps_items);
    return true;
fail:
    free(ps_items);
    ir_ps_names_drop(&nl);
    return false;
}

static bool
parse_func(struct parser *ps, struct ir_func *f)
{
    const struct ir_token *t = advance(ps); /* fn */
    const struct ir_token *n;

    memset(f, 0, sizeof(*f));
    f->pos = tok_pos(t);
    if ((n = ir_ps_expect_name(ps, "expected a function name after 'fn'")) == NULL) {
        return false;
    }
    f->name = n->str;
    f->pos = tok_pos(n);
    if (!ir_ps_expect(ps, IR_TK_LPAREN, "after function name")) {
        return false;
    }
    if (accept(ps, IR_TK_INPUT)) {
        if (!ir_ps_expect(ps, IR_TK_COLON, "after 'input'") ||
            !parse_name_list(ps, &f->inputs, &f->params, "after input:")) {
            return false;
        }
        if (!accept(ps, IR_TK_COMMA)) {
            goto close;
        }
    }
    if (accept(ps, IR_TK_OUTPUT)) {
        if (!ir_ps_expect(ps, IR_TK_COLON, "after 'output'") ||
            !parse_name_list(ps, &f->outputs, NULL, "after output:")) {
            return false;
        }
        accept(ps, IR_TK_COMMA);
    } else if (at(ps, IR_TK_NAME)) {
        ir_ps_error_at(ps, peek(ps), "parameters are declared as fn %s(input: [a, b], output: [c])",
                       f->name);
        return false;
    }
close:
    if (!ir_ps_expect(ps, IR_TK_RPAREN, "to close the function signature")) {
        return false;
    }
    /* `fn main(...) [timeout: D]:` bounds a whole instance (the checker allows it on the entry
     * function only). */
    while (at(ps, IR_TK_LBRACK)) {
        const struct ir_token *o = peek(ps);
        struct ir_policy p;
        if (!(is_name_tok(peek_at(ps, 1), "timeout") && peek_at(ps, 2)->kind == IR_TK_COLON)) {
            ir_ps_error_at(ps, o, "a function takes only [timeout: D] (the workflow's deadline)");
            return false;
        }
        if (f->timeout_ms != 0) {
            ir_ps_error_at(ps, o, "timeout given twice for function %s", f->name);
            return false;
        }
        if (!ir_parse_policy(ps, &p)) {
            return false;
        }
        f->timeout_ms = p.timeout_ms;
        f->timeout_pos = p.pos;
    }
    if (!ir_ps_expect(ps, IR_TK_COLON, "after function signature")) {
        return false;
    }
    f->body = ir_parse_block(ps, "the function signature");
    return !ps->panic;
}

/* `class Name(Base, ...):` and a body of `pass` or a docstring: an error type the workflow
 * raises. Nothing else goes in it: error types carry no methods or fields, only bases. */
static bool
parse_class(struct parser *ps, struct ir_errclass *k)
{
    struct name_list nl = {{0}, {0}, CN_STRMAP_INIT};
    const struct ir_token *n;

    advance(ps); /* class */
    memset(k, 0, sizeof(*k));
    if ((n = ir_ps_expect_name(ps, "expected the error type's name after 'class'")) == NULL) {
        return false;
    }
    k->name = n->str;
    k->pos = tok_pos(n);
    if (!at(ps, IR_TK_LPAREN)) {
        ir_ps_error_at(ps, peek(ps),
                       "a class declares an error type and names its bases: class %s(Exception): "
                       "pass",
                       n->str);
        return false;
    }
    advance(ps);
    do {
        const struct ir_token *b = ir_ps_expect_name(ps, "expected the name of a base error type");
        if (b == NULL ||
            !ir_ps_names_add(ps, &nl, b->str, tok_pos(b), "base '%s' named twice", b->str)) {
            ir_ps_names_drop(&nl);
            return false;
        }
    } while (accept(ps, IR_TK_COMMA) && !at(ps, IR_TK_RPAREN));
    if (!ir_ps_expect(ps, IR_TK_RPAREN, "to close the bases") ||
        !ir_ps_expect(ps, IR_TK_COLON, "after the bases")) {
        ir_ps_names_drop(&nl);
        return false;
    }
    k->bases = ir_ps_names_finish(ps, &nl);
    if (accept(ps, IR_TK_PASS)) {
        return ir_ps_expect(ps, IR_TK_NEWLINE, "after 'pass'");
    }
    if (!ir_ps_expect(ps, IR_TK_NEWLINE, "after the class header") ||
        !ir_ps_expect(ps, IR_TK_INDENT, "for the class body (pass, or a docstring)")) {
        return false;
    }
    while (!accept(ps, IR_TK_DEDENT) && !at(ps, IR_TK_EOF)) {
        if (!accept(ps, IR_TK_PASS) && !accept(ps, IR_TK_STRING)) {
            ir_ps_error_at(ps, peek(ps),
                           "an error type's body is `pass` or a docstring: it has no methods or "
                           "fields (give details when you raise it)");
            return false;
        }
        if (!ir_ps_expect(ps, IR_TK_NEWLINE, "after the class body's line")) {
            return false;
        }
    }
    return true;
}

void
ir_program_free(struct ir_program *p)
{
    if (p == NULL) {
        return;
    }
    ir_xpool_fini(&p->exprs);
    cn_arena_free(p->arena);
    free(p);
}

cn_err
ir_parse(const char *src, size_t len, struct ir_diags *diags, struct ir_program **out)
{
    struct parser ps;
    struct ir_func *funcs = NULL;
    struct ir_errclass *classes = NULL;
    struct cn_strmap fnames = CN_STRMAP_INIT;
    size_t nf = 0, cap = 0, nc = 0, ccap = 0, errs0 = diags->len;
    cn_err rv;

    memset(&ps, 0, sizeof(ps));
    ps.d = diags;
    ps.prog = calloc(1, sizeof(*ps.prog));
    if (ps.prog == NULL) {
        return CN_NOMEM;
    }
    ps.prog->arena = cn_arena_new(16 * 1024);
    if (ps.prog->arena == NULL || ir_xpool_init(&ps.prog->exprs) != CN_OK) {
        ir_program_free(ps.prog);
        return CN_NOMEM;
    }
    if ((rv = ir_lex(src, len, ps.prog->arena, diags, &ps.toks)) != CN_OK) {
        ir_program_free(ps.prog);
        return rv;
    }
    while (!at(&ps, IR_TK_EOF) && ps.rv == CN_OK) {
        struct ir_func f;
        size_t before = ps.i;
        if (accept(&ps, IR_TK_NEWLINE)) {
            continue;
        }
        if (at(&ps, IR_TK_CLASS)) {
            struct ir_errclass k;
            if (!parse_class(&ps, &k)) {
                ir_ps_sync_stmt(&ps);
                continue;
            }
            if (!ir_ps_append(&ps, (void **) &classes, &ccap, &nc, &k, sizeof(k))) {
                break;
            }
            continue;
        }
        if (!at(&ps, IR_TK_FN)) {
            ir_ps_error_at(&ps, peek(&ps),
                           at(&ps, IR_TK_INDENT) ? "unexpected indent"
                                                 : "expected 'fn' or 'class' at top level "
                                                   "(statements belong inside a function)");
            ir_ps_sync_stmt(&ps);
            if (ps.i == before) {
                advance(&ps);
            }
            continue;
        }
        if (!parse_func(&ps, &f)) {
            ir_ps_sync_stmt(&ps);
            continue;
        }
        {
            uint32_t prev;
            if (cn_strmap_get(&fnames, f.name, &prev)) {
                ir_diags_add(diags, f.pos.line, f.pos.col,
                             "function '%s' is already defined at line %u", f.name,
                             funcs[prev].pos.line);
            } else if (cn_strmap_put(&fnames, f.name, (uint32_t) nf) != CN_OK) {
                nomem(&ps);
            }
        }
        if (!ir_ps_append(&ps, (void **) &funcs, &cap, &nf, &f, sizeof(f))) {
            break;
        }
    }
    if (ps.rv == CN_OK && nf == 0 && diags->len == errs0) {
        ir_diags_add(diags, 1, 1, "no function defined; a workflow needs `fn main(...):`");
    }
    ps.prog->funcs = ir_ps_arena_copy(&ps, funcs, nf, sizeof(*funcs));
    ps.prog->nfuncs = (uint32_t) nf;
    free(funcs);
    ps.prog->classes = ir_ps_arena_copy(&ps, classes, nc, sizeof(*classes));
    ps.prog->nclasses = (uint32_t) nc;
    free(classes);
    cn_strmap_fini(&fnames);
    ir_tokens_fini(&ps.toks);
    if (ps.rv != CN_OK) {
        ir_program_free(ps.prog);
        return ps.rv;
    }
    if (diags->len > errs0 || diags->oom) {
        ir_program_free(ps.prog);
        return CN_COMPILE;
    }
    *out = ps.prog;
    return CN_OK;
}
