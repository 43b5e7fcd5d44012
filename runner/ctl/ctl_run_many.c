/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl run WORKFLOW --inputs FILE`: many instances from a JSON Lines file (one input
 * object per line), checked line by line with cairnctl run's own checks (each refusal names its
 * FILE:LINE), then enqueued through cairn.enqueue_many in chunks of one transaction: all of them
 * or, on any refusal, none. Prints the ids in the lines' order.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ir/base/buf.h"
#include "ir/base/xalloc.h"
#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

/* Items per cairn.enqueue_many call, and bytes of input text: one call's statement stays a few
 * MiB however long the file, and the transaction around the calls keeps all or nothing. */
#define CHUNK_ITEMS 5000
#define CHUNK_BYTES (8u << 20)

struct chunk {
    struct cn_buf inputs; /* the inputs as sent, comma-separated JSON */
    struct cn_buf keys;   /* their idempotency keys, comma-separated JSON (null: none) */
    size_t n;
    size_t *lines; /* each item's line in the file */
};

struct id {
    char text[37];
};

struct run_many {
    const struct cn_opts *o;
    PGconn *c;
    const char *workflow, *path, *key_field;
    struct chunk ch;
    struct {
        struct id *items;
        size_t len, cap;
    } ids;
};

static void
oom(void)
{
    cn_oom("cairnctl run --inputs");
}

/* The idempotency key of one line's input, in *key (NULL without --idempotency-key-field; free
 * it): its field rm->key_field, a string or an integer (as its decimal text). EXIT_REJECTED with
 * why, else EXIT_OK. */
static int
line_key(const struct run_many *rm, const char *what, const char *input, char **key)
{
    json_error_t je;
    json_t *doc, *v;

    *key = NULL;
    if (rm->key_field == NULL) {
        return EXIT_OK;
    }
    doc = json_loads(input, 0, &je); /* input is ctl_parse_input's own text: it loads */
    v = doc != NULL ? json_object_get(doc, rm->key_field) : NULL;
    if (json_is_string(v)) {
        *key = cn_xstrdup(json_string_value(v));
    } else if (json_is_integer(v)) {
        *key = cn_xmalloc(24);
        (void) snprintf(*key, 24, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    }
    json_decref(doc);
    if (*key == NULL) {
        fprintf(stderr,
                "cairnctl run: %s: no field \"%s\" that is a string or an integer, for its "
                "idempotency key (--idempotency-key-field)\n",
                what, rm->key_field);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* Appends key (NULL: none) to the chunk's keys as JSON. */
static void
add_key(struct run_many *rm, const char *key)
{
    json_t *s = key != NULL ? json_string(key) : json_null();
    char *enc = s != NULL ? json_dumps(s, JSON_ENCODE_ANY) : NULL;

    if (enc == NULL || (rm->ch.n > 0 && cn_buf_putc(&rm->ch.keys, ',') != CN_OK) ||
        cn_buf_puts(&rm->ch.keys, enc) != CN_OK) {
        oom();
    }
    free(enc);
    json_decref(s);
}

/* Sends the chunk: one cairn.enqueue_many, its ids appended in order. A refusal names the line
 * of the item the database names ("item N of M"). */
static int
flush(struct run_many *rm)
{
    const struct cn_opts *o = rm->o;
    const char *params[9];
    char prio[24];
    struct cn_buf inputs = CN_BUF_INIT, keys = CN_BUF_INIT;
    PGresult *r = NULL;
    struct cn_errmsg em;
    cn_err rv;
    int i, rows;

    if (rm->ch.n == 0) {
        return EXIT_OK;
    }
    if (cn_buf_printf(&inputs, "[%s]", rm->ch.inputs.data) != CN_OK ||
        cn_buf_printf(&keys, "[%s]", rm->ch.keys.data) != CN_OK) {
        oom();
    }
    (void) snprintf(prio, sizeof(prio), "%lld", cn_opts_int(o, "priority"));
    params[0] = rm->workflow;
    params[1] = inputs.data;
    params[2] = rm->key_field != NULL ? keys.data : NULL;
    params[3] = prio;
    params[4] = cn_opts_str(o, "at");
    params[5] = cn_opts_str(o, "version");
    params[6] = cn_opts_str(o, "workflow-timeout");
    params[7] = cn_opts_str(o, "concurrency-key");
    params[8] = cn_opts_bool(o, "any-input") ? "true" : "false";
    rv = rn_db_exec(rm->c,
                    "SELECT u.id::text AS id FROM unnest(cairn.enqueue_many($1, $2::jsonb,"
                    " (SELECT array_agg(k ORDER BY o) FROM jsonb_array_elements_text($3::jsonb)"
                    "  WITH ORDINALITY AS e(k, o)), $4::integer, $5::timestamptz, $6,"
                    " $7::interval, CASE WHEN $8::text IS NOT NULL THEN"
                    " array_fill($8::text, ARRAY[jsonb_array_length($2::jsonb)]) END,"
                    " $9::boolean)) WITH ORDINALITY AS u(id, o) ORDER BY u.o",
                    9, params, &r, &em);
    cn_buf_fini(&inputs);
    cn_buf_fini(&keys);
    if (rv != CN_OK) {
        const char *item = strstr(em.text, ": item ");
        unsigned long k = 0;
        if (item != NULL && sscanf(item, ": item %lu of", &k) == 1 && k >= 1 && k <= rm->ch.n) {
            fprintf(stderr, "cairnctl run: %s:%zu: nothing was enqueued:\n", rm->path,
                    rm->ch.lines[k - 1]);
        } else {
            fprintf(stderr, "cairnctl run: %s, lines %zu to %zu: nothing was enqueued:\n", rm->path,
                    rm->ch.lines[0], rm->ch.lines[rm->ch.n - 1]);
        }
        return ctl_db_error(o, rv, &em);
    }
    rows = PQntuples(r);
    for (i = 0; i < rows; i++) {
        struct id one;
        (void) snprintf(one.text, sizeof(one.text), "%s", ctl_col(r, i, "id"));
        CN_VEC_XPUSH(&rm->ids, one);
    }
    PQclear(r);
    cn_buf_clear(&rm->ch.inputs);
    cn_buf_clear(&rm->ch.keys);
    rm->ch.n = 0;
    return EXIT_OK;
}

/* Adds one line's input (checked) to the chunk, sending the chunk first when it is full. */
static int
add_line(struct run_many *rm, size_t lineno, const char *line)
{
    char what[512];
    char *compact = NULL, *key = NULL;
    int status;

    (void) snprintf(what, sizeof(what), "%s:%zu", rm->path, lineno);
    if ((status = ctl_parse_input_as("cairnctl run", what, line, &compact)) != EXIT_OK) {
        return status;
    }
    if ((status = line_key(rm, what, compact, &key)) != EXIT_OK ||
        (status = ctl_check_enqueue(what, compact, key, NULL)) != EXIT_OK) {
        free(compact);
        free(key);
        return status;
    }
    add_key(rm, key);
    free(key);
    if ((rm->ch.n > 0 && cn_buf_putc(&rm->ch.inputs, ',') != CN_OK) ||
        cn_buf_puts(&rm->ch.inputs, compact) != CN_OK) {
        oom();
    }
    free(compact);
    rm->ch.lines[rm->ch.n++] = lineno;
    if (rm->ch.n == CHUNK_ITEMS || rm->ch.inputs.len >= CHUNK_BYTES) {
        return flush(rm);
    }
    return EXIT_OK;
}

/* Reads FILE line by line: every line that is not blank is one input. Checks each, then
 * enqueues (in one transaction) when all are good. */
static int
enqueue_all(struct run_many *rm, FILE *f)
{
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int status = EXIT_OK;
    PGresult *r = NULL;

    if ((status = ctl_query(rm->o, rm->c, "BEGIN", 0, NULL, &r)) != EXIT_OK) {
        return status;
    }
    PQclear(r);
    while (status == EXIT_OK && (len = getline(&line, &cap, f)) >= 0) {
        size_t n = (size_t) len;
        lineno++;
        if (strlen(line) != n) {
            fprintf(stderr, "cairnctl run: %s:%zu: contains a NUL byte\n", rm->path, lineno);
            status = EXIT_REJECTED;
            break;
        }
        if (strspn(line, " \t\r\n") == n) {
            continue; /* a blank line */
        }
        status = add_line(rm, lineno, line);
    }
    if (status == EXIT_OK && ferror(f)) {
        fprintf(stderr, "cairnctl run: cannot read %s: %s\n", rm->path, strerror(errno));
        status = EXIT_USAGE;
    }
    free(line);
    if (status == EXIT_OK) {
        status = flush(rm);
    }
    if (status == EXIT_OK && rm->ids.len == 0) {
        fprintf(stderr, "cairnctl run: %s holds no input (one JSON object per line)\n", rm->path);
        status = EXIT_REJECTED;
    }
    if (status == EXIT_OK) {
        status = ctl_query(rm->o, rm->c, "COMMIT", 0, NULL, &r);
    } else {
        (void) ctl_query(rm->o, rm->c, "ROLLBACK", 0, NULL, &r);
    }
    PQclear(r);
    return status;
}

int
ctl_run_many(const struct cn_opts *o, const char *workflow)
{
    struct run_many rm = {.o = o, .workflow = workflow};
    const char *path = cn_opts_str(o, "inputs");
    FILE *f;
    int status, one;
    size_t i;

    rm.path = strcmp(path, "-") == 0 ? "stdin" : path;
    rm.key_field = cn_opts_str(o, "idempotency-key-field");
    if ((f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r")) == NULL) {
        fprintf(stderr, "cairnctl run: cannot open %s: %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    rm.ch.lines = cn_xmalloc(CHUNK_ITEMS * sizeof(*rm.ch.lines));
    if ((status = ctl_db_open(o, &rm.c)) == EXIT_OK &&
        (status = ctl_check_time_options(rm.c, cn_opts_str(o, "at"),
                                         cn_opts_str(o, "workflow-timeout"))) == EXIT_OK) {
        status = enqueue_all(&rm, f);
    }
    if (f != stdin) {
        (void) fclose(f);
    }
    if (status == EXIT_OK && cn_opts_bool(o, "wait")) {
        for (i = 0; i < rm.ids.len; i++) {
            if (!ctl_json_out(o)) {
                fprintf(stderr, "%s\n", rm.ids.items[i].text);
            }
            one = ctl_wait_result(o, rm.c, rm.ids.items[i].text, cn_opts_int(o, "timeout") * 1000);
            if (one != EXIT_OK && status == EXIT_OK) {
                status = one; /* the first instance that did not complete decides */
            }
        }
    } else if (status == EXIT_OK && ctl_json_out(o)) {
        printf("{\"ids\": [");
        for (i = 0; i < rm.ids.len; i++) {
            printf("%s\"%s\"", i > 0 ? ", " : "", rm.ids.items[i].text);
        }
        printf("]}\n");
    } else if (status == EXIT_OK) {
        for (i = 0; i < rm.ids.len; i++) {
            printf("%s\n", rm.ids.items[i].text);
        }
    }
    PQfinish(rm.c);
    cn_buf_fini(&rm.ch.inputs);
    cn_buf_fini(&rm.ch.keys);
    free(rm.ch.lines);
    free(rm.ids.items);
    return status;
}
