/* SPDX-License-Identifier: MIT */
/* Error names and messages, generated from the CN_ERRORS table. */
#include "ir/base/err.h"

#include <stdarg.h>
#include <stdio.h>

#define CN_ERR_TEXT(name, text) text,
#define CN_ERR_NAME(name, text) #name,
static const char *const err_text[] = {CN_ERRORS(CN_ERR_TEXT)};
static const char *const err_name[] = {CN_ERRORS(CN_ERR_NAME)};

const char *
cn_strerror(cn_err e)
{
    if ((unsigned) e >= (unsigned) CN_ERR_COUNT_) {
        return "unknown error";
    }
    return err_text[e];
}

const char *
cn_errname(cn_err e)
{
    if ((unsigned) e >= (unsigned) CN_ERR_COUNT_) {
        return "UNKNOWN";
    }
    return err_name[e];
}

cn_err
cn_errmsg_set(struct cn_errmsg *m, cn_err e, const char *fmt, ...)
{
    va_list ap;

    if (m == NULL) {
        return e;
    }
    va_start(ap, fmt);
    (void) vsnprintf(m->text, sizeof(m->text), fmt, ap);
    va_end(ap);
    return e;
}
