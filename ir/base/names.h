/* SPDX-License-Identifier: MIT */
/*
 * The text of an enum's values, from the X-macro list that defines the enum: the node and edge
 * kinds of a DAG, the lexer's tokens, the worker protocol's message kinds. Each list has rows
 * X(id, text); CN_ENUM_NAMES defines the function that gives a value's text, with "?" for a
 * value outside the list (a corrupt template or message), so that no table is read out of
 * bounds. Header only; pure, thread-safe.
 */
#ifndef IR_BASE_NAMES_H
#define IR_BASE_NAMES_H

#define CN_ENUM_TEXT_(id, text) text,

/* Defines `const char *fn(type k)` over the rows of LIST, `count` of them. */
#define CN_ENUM_NAMES(fn, type, LIST, count)                        \
    const char *fn(type k)                                          \
    {                                                               \
        static const char *const names_[] = {LIST(CN_ENUM_TEXT_)};  \
        return (unsigned) k < (unsigned) (count) ? names_[k] : "?"; \
    }

#endif
