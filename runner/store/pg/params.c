/* SPDX-License-Identifier: MIT */
/*
 * Parameters in binary: one-dimensional arrays in PostgreSQL's binary format (what every
 * batch travels as), a statement's parameter list, and reading binary results.
 *
 * Threads: used by one thread at a time (pg_int.h).
 */
#include <arpa/inet.h>
#include <limits.h>

#include "runner/store/db.h"
#include "runner/store/pg/pg_int.h"

static void
barr_be32(struct barr *a, uint32_t v)
{
    const char be[4] = {(char) (v >> 24), (char) (v >> 16), (char) (v >> 8), (char) v};

    a->bad |= cn_buf_append(&a->b, be, 4) != CN_OK;
}

void
pg_barr_begin(struct barr *a, uint32_t oid)
{
    memset(a, 0, sizeof(*a));
    a->oid = oid;
    a->bad = cn_buf_reserve(&a->b, BARR_HEADER) != CN_OK;
    a->b.len = a->bad ? 0 : BARR_HEADER; /* written by pg_barr_end, once the count is known */
}

/* An element of any type, as its binary form's bytes (text: its bytes, no NUL). */
void
pg_barr_put(struct barr *a, const void *p, size_t len)
{
    if (len > INT32_MAX) {
        a->bad = true;
        return;
    }
    a->n++;
    barr_be32(a, (uint32_t) len);
    a->bad |= cn_buf_append(&a->b, p, len) != CN_OK;
}

void
pg_barr_null(struct barr *a)
{
    a->n++;
    a->nulls = true;
    barr_be32(a, UINT32_MAX); /* length -1 */
}

void
pg_barr_uuid(struct barr *a, const uint8_t id[16])
{
    pg_barr_put(a, id, 16);
}

/* int4 or int8, as the array's element type says. */
void
pg_barr_int(struct barr *a, int64_t v)
{
    const uint64_t u = (uint64_t) v;
    const char be[8] = {(char) (u >> 56), (char) (u >> 48), (char) (u >> 40), (char) (u >> 32),
                        (char) (u >> 24), (char) (u >> 16), (char) (u >> 8),  (char) u};

    if (a->oid == PG_OID_INT4) {
        a->bad |= v < INT32_MIN || v > INT32_MAX;
        pg_barr_put(a, be + 4, 4);
    } else {
        pg_barr_put(a, be, 8);
    }
}

void
pg_barr_bool(struct barr *a, bool v)
{
    const char c = v ? 1 : 0;

    pg_barr_put(a, &c, 1);
}

/* The array's bytes and their count in *len; NULL when it could not be built. */
const char *
pg_barr_end(struct barr *a, int *len)
{
    size_t used = a->b.len;

    if (a->bad || used > INT_MAX) {
        return NULL;
    }
    /* the header, in the room pg_barr_begin left (not appended: cn_buf_append would end it with
     * a NUL over the first element's length) */
    {
        const uint32_t h[5] = {htonl(a->n > 0 ? 1 : 0), htonl(a->nulls ? 1 : 0), htonl(a->oid),
                               htonl(a->n), htonl(1)};
        memcpy(a->b.data, h, sizeof(h));
    }
    /* an empty array is its first 12 bytes, with no dimension */
    *len = a->n > 0 ? (int) used : 12;
    return a->b.data;
}

void
pg_barr_fini(struct barr *a)
{
    cn_buf_fini(&a->b);
}

void
pg_pa_text(struct pargs *g, const char *s)
{
    if (g->n == PA_MAX) {
        g->bad = true;
        return;
    }
    g->v[g->n] = s;
    g->len[g->n] = 0;
    g->fmt[g->n++] = 0;
}

/* a's bytes as the next parameter: a is ended here, and must outlive the statement. */
void
pg_pa_array(struct pargs *g, struct barr *a)
{
    if (g->n == PA_MAX) {
        g->bad = true;
        return;
    }
    g->len[g->n] = 0;
    g->v[g->n] = pg_barr_end(a, &g->len[g->n]);
    g->bad |= g->v[g->n] == NULL;
    g->fmt[g->n++] = 1;
}

/* Runs sql with g's parameters and binary results (db.c's errors), or CN_NOMEM when one of
 * g's arrays could not be built. */
cn_err
pg_exec_args(struct pg_backend *b, const char *sql, const struct pargs *g, PGresult **out,
             struct cn_errmsg *err)
{
    if (g->bad) {
        return cn_errmsg_set(err, CN_NOMEM, "statement parameters: out of memory, or more than %d",
                             PA_MAX);
    }
    return rn_db_exec_formats(b->c, sql, g->n, g->v, g->len, g->fmt, out, err);
}

cn_err
pg_exec_array(struct pg_backend *b, const char *sql, struct barr *a, PGresult **out,
              struct cn_errmsg *err)
{
    struct pargs g = {0};
    cn_err rv;

    pg_pa_array(&g, a);
    rv = pg_exec_args(b, sql, &g, out, err);
    pg_barr_fini(a);
    return rv;
}

uint32_t
pg_be32(const char *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return ntohl(v);
}

/* Binary int8 column (big-endian); 0 for NULL or a column of another size. */
int64_t
pg_get_i64(PGresult *r, int row, int col)
{
    const char *p = PQgetvalue(r, row, col);

    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8) {
        return 0;
    }
    return (int64_t) (((uint64_t) pg_be32(p) << 32) | pg_be32(p + 4));
}

/* Binary uuid column -> 16 bytes. */
bool
pg_get_uuid(PGresult *r, int row, int col, uint8_t out[16])
{
    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 16) {
        return false;
    }
    memcpy(out, PQgetvalue(r, row, col), 16);
    return true;
}
