/* SPDX-License-Identifier: MIT */
/* Compiler test helpers; see compile_util.h. */
#include "tests/support/compile_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

struct t_compiled
t_compile(const char *src)
{
    struct t_compiled c;
    struct ir_diags d;
    struct cn_buf b = CN_BUF_INIT;

    memset(&c, 0, sizeof(c));
    ir_diags_init(&d, "test.cairn", src, strlen(src));
    c.rv = ir_compile_source(src, strlen(src), &d, &c.dag);
    c.nerrors = d.len;
    cr_assert(ir_diags_format(&d, &b) == CN_OK);
    c.errors = strdup(b.data != NULL ? b.data : "");
    cr_assert(c.errors != NULL);
    cn_buf_fini(&b);
    ir_diags_fini(&d);
    return c;
}

void
t_compiled_free(struct t_compiled *c)
{
    ir_dag_free(c->dag);
    free(c->errors);
    memset(c, 0, sizeof(*c));
}

char *
t_dag_text(const char *src)
{
    struct t_compiled c = t_compile(src);
    struct cn_buf b = CN_BUF_INIT;
    char *out = NULL;

    cr_assert(c.rv == CN_OK, "compile failed (%s):\n%s", cn_errname(c.rv), c.errors);
    cr_assert(ir_dag_text(c.dag, &b) == CN_OK);
    cr_assert(cn_buf_take(&b, &out, NULL) == CN_OK);
    t_compiled_free(&c);
    return out;
}

static char *
t_path(const char *rel)
{
    const char *root = getenv("CAIRN_SOURCE_ROOT");
    size_t n;
    char *p;

    if (root == NULL) {
        root = ".";
    }
    n = strlen(root) + strlen(rel) + 2;
    p = malloc(n);
    if (p != NULL) {
        (void) snprintf(p, n, "%s/%s", root, rel);
    }
    return p;
}

char *
t_read_source_file(const char *rel, size_t *len)
{
    char *path = t_path(rel), *buf = NULL;
    FILE *f = path ? fopen(path, "rb") : NULL;
    long n;

    free(path);
    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t) n + 1);
        if (buf != NULL && fread(buf, 1, (size_t) n, f) == (size_t) n) {
            buf[n] = '\0';
            if (len != NULL) {
                *len = (size_t) n;
            }
        } else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

int
t_write_source_file(const char *rel, const char *data, size_t len)
{
    char *path = t_path(rel);
    FILE *f = path ? fopen(path, "wb") : NULL;
    int rv = -1;

    free(path);
    if (f == NULL) {
        return -1;
    }
    if (fwrite(data, 1, len, f) == len) {
        rv = 0;
    }
    if (fclose(f) != 0) {
        rv = -1;
    }
    return rv;
}
