/* SPDX-License-Identifier: MIT */
/*
 * `cairnctl run`: an instance enqueued through cairn.enqueue, its input and options checked first
 * against the limits the database enforces (ctl.h), and `--wait` for its outcome.
 */
#include <ctype.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ir/base/clock.h"
#include "ir/base/xalloc.h"
#include "ir/numtext.h"
#include "runner/ctl/ctl.h"
#include "runner/exec/exec.h"
#include "runner/store/db.h"


int
ctl_listen(const struct cn_opts *o, PGconn *c, const char *channel_fn, const char *id)
{
    const char *params[1] = {id};
    PGresult *r = NULL;
    char *chan, sql[160];
    int status;

    (void) snprintf(sql, sizeof(sql), "SELECT cairn.%s($1) AS chan", channel_fn);
    if ((status = ctl_query(o, c, sql, 1, params, &r)) != EXIT_OK) {
        return status;
    }
    chan = PQescapeIdentifier(c, ctl_col(r, 0, "chan"), strlen(ctl_col(r, 0, "chan")));
    PQclear(r);
    if (chan == NULL) {
        cn_oom("LISTEN");
    }
    (void) snprintf(sql, sizeof(sql), "LISTEN %s", chan); /* a channel is at most 63 bytes */
    PQfreemem(chan);
    status = ctl_query(o, c, sql, 0, NULL, &r);
    PQclear(r);
    return status;
}

/* Waits up to ms for a notification on c; true if one came (or the socket has news). */
static bool
await_notice(PGconn *c, long long ms)
{
    struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
    bool got = false;
    PGnotify *n;

    if (PQconsumeInput(c) == 1) {
        while ((n = PQnotifies(c)) != NULL) { /* read along with the last status */
            got = true;
            PQfreemem(n);
        }
    }
    if (got) {
        return true;
    }
    if (poll(&pfd, 1, (int) ms) <= 0) {
        return false;
    }
    (void) PQconsumeInput(c); /* a broken session shows in the next status query */
    while ((n = PQnotifies(c)) != NULL) {
        got = true;
        PQfreemem(n);
    }
    return got;
}

bool
ctl_await_until(PGconn *c, bool timed, int64_t deadline)
{
    long long left = CTL_WAIT_FALLBACK_MS;

    if (timed) {
        int64_t now = cn_mono_ms();

        if (now >= deadline) {
            return false;
        }
        if (deadline - now < left) {
            left = deadline - now;
        }
    }
    (void) await_notice(c, left);
    return true;
}

int
ctl_wait_status(const struct cn_opts *o, PGconn *c, const char *id, long long timeout_ms, char *st,
                size_t stlen)
{
    int64_t deadline = cn_mono_ms() + timeout_ms;
    const char *params[1] = {id};
    PGresult *r = NULL;
    int status;

    if ((status = ctl_listen(o, c, "done_channel", id)) != EXIT_OK) {
        return status;
    }
    for (;;) {
        bool done;

        if ((status = ctl_query_found(o, c,
                                      "SELECT status, status IN ('completed', 'failed',"
                                      " 'cancelled', 'timed_out') AS done FROM"
                                      " cairn.runner_instances WHERE instance_id = $1",
                                      1, params, "instance", &r)) != EXIT_OK) {
            return status;
        }
        done = ctl_col_true(r, 0, "done");
        (void) snprintf(st, stlen, "%s", ctl_col(r, 0, "status"));
        PQclear(r);
        if (done) {
            return EXIT_OK;
        }
        if (!ctl_await_until(c, timeout_ms > 0, deadline)) {
            fprintf(stderr, "%s: %s did not finish within %lld s\n", o->prog, id,
                    timeout_ms / 1000);
            return EXIT_PENDING;
        }
    }
}

int
ctl_wait_result(const struct cn_opts *o, PGconn *c, const char *id, long long timeout_ms)
{
    char st[16];
    int status = ctl_wait_status(o, c, id, timeout_ms, st, sizeof(st));

    return status == EXIT_OK ? ctl_print_result(o, c, id) : status;
}

/* `cairnctl wait ID`: the instance's end, heard rather than polled for, then its result as
 * `result` prints it. */
int
ctl_cmd_wait(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_INT("timeout", NULL, 1, 86400 * 365, "S", "give up after S seconds (exit 5)"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    PGconn *c = NULL;
    int status;

    if (!ctl_id_args(&o, argc, argv, &status)) {
        return status;
    }
    if ((status = ctl_db_open(&o, &c)) == EXIT_OK) {
        status = ctl_wait_result(&o, c, argv[0], cn_opts_int(&o, "timeout") * 1000);
    }
    PQfinish(c);
    return status;
}

int
ctl_read_input(const char *prog, const char *input, const char *input_file, char **compact)
{
    char *file_text = NULL;
    size_t file_len = 0;
    int status;

    if (input_file != NULL) {
        if (input != NULL) {
            fprintf(stderr, "%s: give --input or --input-file, not both\n", prog);
            return EXIT_USAGE;
        }
        if ((file_text = ctl_read_file(input_file, &file_len)) == NULL) {
            return EXIT_USAGE;
        }
        if (strlen(file_text) != file_len) {
            fprintf(stderr, "%s: %s contains a NUL byte\n", prog, input_file);
            free(file_text);
            return EXIT_REJECTED;
        }
        input = file_text;
    }
    status = ctl_parse_input(prog, input, compact);
    free(file_text);
    return status;
}

int
ctl_parse_input(const char *prog, const char *text, char **compact)
{
    return ctl_parse_input_as(prog, "--input", text, compact);
}

int
ctl_parse_input_as(const char *prog, const char *what, const char *text, char **compact)
{
    const char *src = text != NULL ? text : "{}";
    json_error_t je;
    json_t *input = json_loads(src, JSON_REJECT_DUPLICATES, &je);
    struct cn_buf out = CN_BUF_INIT;
    struct cn_errmsg em;
    struct ir_val v;
    size_t len;
    cn_err rv;

    *compact = NULL;
    if (input == NULL && json_error_code(&je) == json_error_numeric_overflow) {
        fprintf(stderr,
                "%s: %s holds a number out of range (integers are 64-bit, floats "
                "at most about 1.8e308): %s (line %d, column %d)\n",
                prog, what, je.text, je.line, je.column);
        return EXIT_REJECTED;
    }
    if (input == NULL) {
        fprintf(stderr, "%s: %s is not valid JSON: %s (line %d, column %d)\n", prog, what, je.text,
                je.line, je.column);
        return EXIT_REJECTED;
    }
    if (!json_is_object(input)) {
        fprintf(stderr, "%s: %s must be a JSON object ({\"name\": value, ...})\n", prog, what);
        json_decref(input);
        return EXIT_REJECTED;
    }
    json_decref(input);
    /* jansson has vouched for the syntax, the keys and the numbers, with positions; the
     * engine's own decoder adds its depth limit, and its encoder the text that is sent. */
    rv = ir_val_from_json(src, strlen(src), &v, &em);
    if (rv == CN_DEPTH) {
        fprintf(stderr,
                "%s: %s is nested deeper than %d levels (the top object is level "
                "1; each array or object adds one)\n",
                prog, what, IR_VALUE_MAX_DEPTH);
        return EXIT_REJECTED;
    }
    if (rv == CN_OK) {
        rv = ir_val_to_json(v, &out, &em);
        ir_val_release(v);
    }
    if (rv == CN_OK) {
        rv = cn_buf_take(&out, compact, &len);
    }
    cn_buf_fini(&out);
    if (rv == CN_NOMEM) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return EXIT_USAGE;
    }
    if (rv != CN_OK) {
        fprintf(stderr, "%s: %s: %s\n", prog, what, em.text);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* A float at or beyond 2^63 reaches jsonb in exponent form (1e+20), which PostgreSQL keeps as
 * the integer 100000000000000000000: outside int64, so cairn.enqueue refuses it. Says so first,
 * for the first one found (v is within IR_VALUE_MAX_DEPTH: the recursion is bounded). */
static bool
jsonb_numbers_ok(const char *what, struct ir_val v)
{
    size_t i;

    switch (v.type) {
    case IR_T_FLOAT:
        if (fabs(v.u.f) >= 9223372036854775808.0) {
            char fb[IR_FLOAT_REPR_MAX];
            (void) ir_float_repr(v.u.f, fb);
            fprintf(stderr,
                    "cairnctl run: %s holds %s, which PostgreSQL stores as an integer, "
                    "outside the 64-bit range (write it with a fraction to keep a float: "
                    "100000000000000000000.0)\n",
                    what, fb);
            return false;
        }
        return true;
    case IR_T_LIST:
        for (i = 0; i < ir_list_len(v); i++) {
            if (!jsonb_numbers_ok(what, ir_list_items(v)[i])) {
                return false;
            }
        }
        return true;
    case IR_T_MAP:
        for (i = 0; i < ir_map_len(v); i++) {
            if (!jsonb_numbers_ok(what, ir_map_val_at(v, i))) {
                return false;
            }
        }
        return true;
    default:
        return true;
    }
}

/* PostgreSQL's spellings of the infinite times, 'infinity' and '-infinity', which it takes in
 * any case, with blanks around. */
static bool
infinite_time(const char *s)
{
    size_t n;

    while (isspace((unsigned char) *s)) {
        s++;
    }
    if (*s == '-') {
        s++;
    }
    n = strlen(s);
    while (n > 0 && isspace((unsigned char) s[n - 1])) {
        n--;
    }
    return n == 8 && strncasecmp(s, "infinity", 8) == 0;
}

int
ctl_check_enqueue(const char *what, const char *input, const char *key, const char *at)
{
    struct ir_val v;
    struct cn_errmsg em;
    size_t n = strlen(input);
    bool ok;

    if (n > CTL_INPUT_MAX_BYTES) {
        fprintf(stderr,
                "cairnctl run: %s is %zu bytes of JSON, over the limit of %d bytes (pass "
                "large data by reference: a URL, a row id)\n",
                what, n, CTL_INPUT_MAX_BYTES);
        return EXIT_REJECTED;
    }
    if (ir_val_from_json(input, n, &v, &em) != CN_OK) { /* ctl_parse_input made this text */
        fprintf(stderr, "cairnctl run: %s: %s\n", what, em.text);
        return EXIT_USAGE;
    }
    ok = jsonb_numbers_ok(what, v);
    ir_val_release(v);
    if (!ok) {
        return EXIT_REJECTED;
    }
    if (key != NULL && key[0] == '\0') {
        fprintf(stderr, "cairnctl run: --idempotency-key is empty (leave it out for no key)\n");
        return EXIT_REJECTED;
    }
    if (key != NULL && strlen(key) > CTL_IDEMPOTENCY_KEY_MAX_BYTES) {
        fprintf(stderr,
                "cairnctl run: --idempotency-key is %zu bytes, over the limit of %d bytes (use a "
                "digest of a longer key: a hex SHA-256 is 64 bytes)\n",
                strlen(key), CTL_IDEMPOTENCY_KEY_MAX_BYTES);
        return EXIT_REJECTED;
    }
    if (at != NULL && infinite_time(at)) {
        fprintf(stderr,
                "cairnctl run: --at must be a finite time (2026-12-01T09:00:00Z), not '%s'\n", at);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* --at and --workflow-timeout are read by the database, which takes more forms than any parser
 * here would (time zone names, 'tomorrow', '1 day 2 hours'); they are read apart from the
 * enqueue, so that a bad one is named with the forms it takes instead of PostgreSQL's
 * "invalid input syntax for type timestamp with time zone". */
int
ctl_check_time_options(PGconn *c, const char *at, const char *timeout)
{
    const struct {
        const char *flag, *value, *sql, *what;
    } opts[] = {
        {"--at", at, "SELECT $1::timestamptz",
         "is not a time: give an ISO 8601 time with its offset (2026-12-01T09:00:00Z, "
         "2026-12-01 10:00:00+01:00), a time in a named zone (2026-12-01 09:00 Europe/Paris), "
         "or now, today or tomorrow"},
        {"--workflow-timeout", timeout, "SELECT $1::interval",
         "is not a duration: give a number with a unit (90s, 5 minutes, 2 hours, 1 day) or "
         "hh:mm:ss (01:30:00)"},
    };
    size_t i;

    for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        const char *params[1] = {opts[i].value};
        struct cn_errmsg em;
        cn_err rv;

        if (opts[i].value == NULL ||
            (rv = rn_db_exec(c, opts[i].sql, 1, params, NULL, &em)) == CN_OK) {
            continue;
        }
        if (rv != CN_INVAL) { /* not the value's fault */
            fprintf(stderr, "cairnctl run: %s\n", em.text);
            return EXIT_DB;
        }
        fprintf(stderr, "cairnctl run: %s '%s' %s\n", opts[i].flag, opts[i].value, opts[i].what);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

/* cairn.enqueue of workflow name with the options of o; the new instance's id in id. */
static int
enqueue(const struct cn_opts *o, PGconn *c, const char *name, const char *input, char *id,
        size_t idlen)
{
    const char *params[9];
    char prio[24];

    (void) snprintf(prio, sizeof(prio), "%lld", cn_opts_int(o, "priority"));
    params[0] = name;
    params[1] = input;
    params[2] = cn_opts_str(o, "idempotency-key");
    params[3] = prio;
    params[4] = cn_opts_str(o, "at");
    params[5] = cn_opts_str(o, "version");
    params[6] = cn_opts_str(o, "workflow-timeout"); /* PostgreSQL reads the interval */
    params[7] = cn_opts_str(o, "concurrency-key");
    params[8] = cn_opts_bool(o, "any-input") ? "true" : "false";
    return ctl_query_text(o, c,
                          "SELECT cairn.enqueue($1, $2::jsonb, $3, $4::integer,"
                          " $5::timestamptz, $6, $7::interval, $8, $9::boolean) AS id",
                          9, params, "id", id, idlen);
}

int
ctl_cmd_run(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_INPUT,
        CTL_OPT_STR("inputs", "FILE",
                    "many instances at once: FILE (-: stdin) holds one input object per line "
                    "(JSON Lines), all enqueued or, if one is refused, none; prints their ids "
                    "in the lines' order"),
        CTL_OPT_STR("idempotency-key-field", "F",
                    "with --inputs: each line's idempotency key is its input's field F (a "
                    "string or an integer)"),
        CTL_OPT_STR("idempotency-key", "K",
                    "the same key (and input) returns the workflow's first instance instead of "
                    "making another; another input with it is refused"),
        CTL_OPT_BOOL("any-input",
                     "with --idempotency-key: return the first instance even if it was enqueued "
                     "with another input"),
        CTL_OPT_STR("concurrency-key", "K",
                    "instances with the same key run at most the workflow's per-key limit at once "
                    "(1 unless set: cairnctl limit set)"),
        CTL_OPT_INT("priority", "0", -1000000, 1000000, "P", "higher runs first"),
        CTL_OPT_STR("at", "TIME", "not before this ISO 8601 time (2026-12-01T09:00:00Z)"),
        CTL_OPT_STR("version", "V", "this version of the workflow (default: the newest)"),
        CTL_OPT_STR("workflow-timeout", "D",
                    "the instance times out D after it is due (30s, 5 min, 2 hours; default: the "
                    "workflow's own [timeout: D], if any)"),
        CTL_OPT_BOOL("wait", "wait until it finishes; print its result"),
        CTL_OPT_INT("timeout", NULL, 1, 86400 * 365, "S",
                    "with --wait: give up after S seconds (exit 5)"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    PGconn *c = NULL;
    char *input_text = NULL;
    char id[64];
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    if (cn_opts_str(&o, "inputs") != NULL) {
        if (cn_opts_str(&o, "input") != NULL || cn_opts_str(&o, "input-file") != NULL ||
            cn_opts_str(&o, "idempotency-key") != NULL) {
            fprintf(stderr,
                    "%s: --inputs gives every input (and --idempotency-key-field their "
                    "keys): not with --input, --input-file or --idempotency-key\n",
                    o.prog);
            return EXIT_USAGE;
        }
        return ctl_run_many(&o, argv[0]);
    }
    if (cn_opts_str(&o, "idempotency-key-field") != NULL) {
        fprintf(stderr, "%s: --idempotency-key-field goes with --inputs\n", o.prog);
        return EXIT_USAGE;
    }
    /* The input is checked here, with a position, before the database sees it. */
    if ((status = ctl_read_input(o.prog, cn_opts_str(&o, "input"), cn_opts_str(&o, "input-file"),
                                 &input_text)) != EXIT_OK) {
        return status;
    }
    if ((status = ctl_check_enqueue("--input", input_text, cn_opts_str(&o, "idempotency-key"),
                                    cn_opts_str(&o, "at"))) == EXIT_OK &&
        (status = ctl_db_open(&o, &c)) == EXIT_OK &&
        (status = ctl_check_time_options(c, cn_opts_str(&o, "at"),
                                         cn_opts_str(&o, "workflow-timeout"))) == EXIT_OK) {
        status = enqueue(&o, c, argv[0], input_text, id, sizeof(id));
    }
    free(input_text);
    if (status != EXIT_OK) {
        PQfinish(c);
        return status;
    }
    if (cn_opts_bool(&o, "wait")) {
        if (!ctl_json_out(&o)) {
            fprintf(stderr, "%s\n", id);
        }
        status = ctl_wait_result(&o, c, id, cn_opts_int(&o, "timeout") * 1000);
    } else if (ctl_json_out(&o)) {
        printf("{\"id\": \"%s\"}\n", id);
    } else {
        printf("%s\n", id);
    }
    PQfinish(c);
    return status;
}
