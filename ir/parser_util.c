/* SPDX-License-Identifier: MIT */
/*
 * The parser's shared plumbing (ir/parser_int.h): reporting a syntax error and the panic-mode
 * recovery after it, per-list duplicate checks, copies into the program's arena, and the name
 * lists that become ir_names. Pure; no global state, no threads or locks.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/vec.h"
#include "ir/parser_int.h"

static void verror(struct parser *ps, uint32_t line, uint32_t col, const char *fmt, va_list ap)
    CN_PRINTF(4, 0);

static void
verror(struct parser *ps, uint32_t line, uint32_t col, const char *fmt, va_list ap)
{
    char msg[400];

    if (ps->panic) {
        return;
    }
    ps->panic = true;
    if (ir_diags_has_at(ps->d, line, col)) {
        return; /* e.g. the lexer already explained this token */
    }
    (void) vsnprintf(msg, sizeof(msg), fmt, ap);
    ir_diags_add(ps->d, line, col, "%s", msg);
}

void
ir_ps_error_at(struct parser *ps, const struct ir_token *t, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    verror(ps, t->line, t->col, fmt, ap);
    va_end(ap);
}

void
ir_ps_error_pos(struct parser *ps, struct ir_pos pos, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    verror(ps, pos.line, pos.col, fmt, ap);
    va_end(ap);
}

const struct ir_token *
ir_ps_expect_name(struct parser *ps, const char *fmt, ...)
{
    const struct ir_token *t = peek(ps);
    va_list ap;

    if (t->kind == IR_TK_NAME) {
        return advance(ps);
    }
    va_start(ap, fmt);
    verror(ps, t->line, t->col, fmt, ap);
    va_end(ap);
    return NULL;
}

bool
ir_ps_expect(struct parser *ps, enum ir_tok k, const char *context)
{
    if (accept(ps, k)) {
        return true;
    }
    ir_ps_error_at(ps, peek(ps), "expected %s%s%s", ir_tok_text(k), context[0] ? " " : "", context);
    return false;
}

bool
ir_ps_seen(struct parser *ps, struct cn_strmap *m, const char *name)
{
    uint32_t dummy;

    if (cn_strmap_get(m, name, &dummy)) {
        return true;
    }
    if (cn_strmap_put(m, name, 0) != CN_OK) {
        nomem(ps);
    }
    return false;
}

bool
ir_ps_append(struct parser *ps, void **items, size_t *cap, size_t *n, const void *item, size_t size)
{
    if (cn_vec_grow(items, cap, size, *n + 1) != CN_OK) {
        nomem(ps);
        return false;
    }
    memcpy((char *) *items + *n * size, item, size);
    (*n)++;
    return true;
}

void *
ir_ps_arena_copy(struct parser *ps, const void *items, size_t n, size_t size)
{
    void *p;

    if (n == 0) {
        return NULL;
    }
    p = cn_arena_calloc(ps->prog->arena, n, size);
    if (p == NULL) {
        nomem(ps);
        return NULL;
    }
    memcpy(p, items, n * size);
    return p;
}

void
ir_ps_sync_stmt(struct parser *ps)
{
    int nest = 0;

    if (ps->synced) {
        ps->synced = false;
        ps->panic = false;
        return;
    }
    while (!at(ps, IR_TK_EOF)) {
        enum ir_tok k = peek(ps)->kind;
        if (k == IR_TK_NEWLINE) {
            advance(ps);
            break;
        }
        if (k == IR_TK_DEDENT || k == IR_TK_INDENT) {
            break;
        }
        advance(ps);
    }
    if (at(ps, IR_TK_INDENT)) {
        do {
            enum ir_tok k = advance(ps)->kind;
            if (k == IR_TK_INDENT) {
                nest++;
            } else if (k == IR_TK_DEDENT) {
                nest--;
            }
        } while (nest > 0 && !at(ps, IR_TK_EOF));
    }
    ps->panic = false;
}

bool
ir_ps_names_push(struct parser *ps, struct name_list *nl, const char *name, struct ir_pos pos)
{
    if (CN_VEC_PUSH(&nl->names, name) != CN_OK || CN_VEC_PUSH(&nl->pos, pos) != CN_OK) {
        nomem(ps);
        return false;
    }
    return true;
}

bool
ir_ps_names_add(struct parser *ps, struct name_list *nl, const char *name, struct ir_pos pos,
                const char *fmt, ...)
{
    va_list ap;

    if (!ir_ps_seen(ps, &nl->dup, name)) {
        return ir_ps_names_push(ps, nl, name, pos);
    }
    va_start(ap, fmt);
    verror(ps, pos.line, pos.col, fmt, ap);
    va_end(ap);
    return false;
}

struct ir_names
ir_ps_names_finish(struct parser *ps, struct name_list *nl)
{
    struct ir_names n;

    n.unpack = false;
    n.len = (uint32_t) nl->names.len;
    n.items = ir_ps_arena_copy(ps, nl->names.items, nl->names.len, sizeof(nl->names.items[0]));
    n.pos = ir_ps_arena_copy(ps, nl->pos.items, nl->pos.len, sizeof(nl->pos.items[0]));
    ir_ps_names_drop(nl);
    return n;
}

void
ir_ps_names_drop(struct name_list *nl)
{
    free(nl->names.items);
    free(nl->pos.items);
    cn_strmap_fini(&nl->dup);
    memset(&nl->names, 0, sizeof(nl->names));
    memset(&nl->pos, 0, sizeof(nl->pos));
}
