/* SPDX-License-Identifier: MIT */
/*
 * cairnctl's sends to waiting workflows: `signal` (cairn.signal, to one instance; with --token,
 * cairn.signal_by_token) and `event` (cairn.publish_event, by name and key), the tokens that
 * send one signal to one instance (`signal-token`, cairn.signal_token), and the read of what a
 * workflow published: `get`
 * (cairn.get_value, with --wait told by cairn.value_channel). Each is a statement of the SQL
 * API, so a script, a webhook handler with a database login and cairnctl alike, with the same
 * checks; the words and exit statuses (ctl.h) say what became of the send. Single-threaded.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/clock.h"
#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

/* The payload rows both commands take. */
#define SEND_OPTS                                                                             \
    CTL_OPT_DB, CTL_OPT_STR_DEF("payload", "JSON", "null", "the payload, any JSON value"),    \
        CTL_OPT_STR("dedup-key", "K", "a key that makes a retried send a no-op (duplicate)"), \
        CTL_OPT_JSON

/* What a send does on one connection with its two arguments. */
typedef int send_fn(const struct cn_opts *o, PGconn *c, const char *a, const char *b);

/* The shape of every command here: options, exactly two arguments (the first an instance ID
 * when by_id), the connection, fn, and the connection closed again. */
static int
run_send(struct cn_opts *o, int argc, char **argv, bool by_id, send_fn *fn)
{
    PGconn *c = NULL;
    int status;

    if (!ctl_opts(o, argc, argv, &status)) {
        return status;
    }
    if (o->nargs != 2) {
        return ctl_usage(o);
    }
    if (by_id && !ctl_check_uuid(o, argv[0])) {
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(o, &c)) == EXIT_OK) {
        status = fn(o, c, argv[0], argv[1]);
    }
    PQfinish(c);
    return status;
}

/* What each answer of cairn.signal is said as, and its exit status. */
static const struct {
    const char *answer;
    const char *said;
    int status;
} signal_answers[] = {
    {"delivered", "delivered: a wait took it", EXIT_OK},
    {"buffered", "buffered: kept for the instance's next wait on it", EXIT_OK},
    {"duplicate", "a duplicate (sent before with this dedup key): nothing changed", EXIT_NOOP},
    {"not waiting", "not sent: nothing waits for it (--only-if-waiting), nothing stored",
     EXIT_REJECTED},
};

static const char *const signal_sql =
    "SELECT cairn.signal($1::uuid, $2, $3::jsonb, $4, $5::boolean) AS answer";
/* The token names the instance and the signal. */
static const char *const token_sql = "SELECT cairn.signal_by_token($3, $1::jsonb, $2) AS answer";

/* Sends signal `name` to instance `id`, or with --token (id and name both "") the one its token
 * stands for. */
static int
signal_one(const struct cn_opts *o, PGconn *c, const char *id, const char *name)
{
    const char *token = cn_opts_str(o, "token");
    const char *params[5] = {id, name, cn_opts_str(o, "payload"), cn_opts_str(o, "dedup-key"),
                             cn_opts_bool(o, "only-if-waiting") ? "true" : "false"};
    const char *by_token[3] = {params[2], params[3], token};
    char answer[32];
    size_t k;
    int status =
        token != NULL
            ? ctl_query_text(o, c, token_sql, 3, by_token, "answer", answer, sizeof(answer))
            : ctl_query_text(o, c, signal_sql, 5, params, "answer", answer, sizeof(answer));

    if (status != EXIT_OK) {
        return status;
    }
    if (token != NULL) {
        id = "(token)";
        params[1] = "(its signal)";
    }
    for (k = 0; k + 1 < sizeof(signal_answers) / sizeof(signal_answers[0]) &&
                strcmp(signal_answers[k].answer, answer) != 0;
         k++) {
    }
    if (ctl_json_out(o)) {
        printf("{\"id\": \"%s\", \"signal\": \"%s\", \"answer\": \"%s\"}\n", id, params[1], answer);
    } else {
        printf("%s: signal %s %s\n", id, params[1], signal_answers[k].said);
    }
    return signal_answers[k].status;
}

int
ctl_cmd_signal(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        SEND_OPTS,
        CTL_OPT_BOOL("only-if-waiting",
                     "send only if a wait takes it now; else store nothing (exit 1)"),
        CTL_OPT_STR("token", "T",
                    "send the signal token T stands for (cairnctl signal-token), without ID "
                    "and NAME"),
    };
    struct cn_opts o = CTL_OPTS(call, rows, 2);
    bool by_token;
    PGconn *c = NULL;
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    by_token = cn_opts_str(&o, "token") != NULL;
    if (by_token && (o.nargs != 0 || cn_opts_bool(&o, "only-if-waiting"))) {
        fprintf(stderr, "%s: --token T names the instance and the signal: give no ID NAME%s\n",
                o.prog, cn_opts_bool(&o, "only-if-waiting") ? ", and no --only-if-waiting" : "");
        return EXIT_USAGE;
    }
    if (!by_token && o.nargs != 2) {
        return ctl_usage(&o);
    }
    if (!by_token && !ctl_check_uuid(&o, argv[0])) {
        return EXIT_USAGE;
    }
    if ((status = ctl_db_open(&o, &c)) == EXIT_OK) {
        status = by_token ? signal_one(&o, c, "", "") : signal_one(&o, c, argv[0], argv[1]);
    }
    PQfinish(c);
    return status;
}

static const char *const token_mint_sql =
    "SELECT cairn.signal_token($1::uuid, $2, $3::interval) AS token";

static int
token_one(const struct cn_opts *o, PGconn *c, const char *id, const char *name)
{
    const char *params[3] = {id, name, cn_opts_str(o, "ttl")};
    char token[80];
    int status = ctl_query_text(o, c, token_mint_sql, 3, params, "token", token, sizeof(token));

    if (status != EXIT_OK) {
        return status;
    }
    if (ctl_json_out(o)) {
        printf("{\"id\": \"%s\", \"signal\": \"%s\", \"token\": \"%s\"}\n", id, name, token);
    } else {
        printf("%s\n", token);
    }
    return EXIT_OK;
}

int
ctl_cmd_signal_token(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("ttl", "D", "the token expires D from now (30m, 7d); default: never"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 2);

    return run_send(&o, argc, argv, true, token_one);
}

static const char *const event_sql =
    "SELECT event_id, woken, duplicate FROM cairn.publish_event($1, $2, $3::jsonb, $4)";

static int
publish_one(const struct cn_opts *o, PGconn *c, const char *name, const char *key)
{
    const char *params[4] = {name, key, cn_opts_str(o, "payload"), cn_opts_str(o, "dedup-key")};
    PGresult *r = NULL;
    bool dup;
    int status = ctl_query(o, c, event_sql, 4, params, &r);

    if (status != EXIT_OK) {
        return status;
    }
    dup = ctl_col_true(r, 0, "duplicate");
    if (ctl_json_out(o)) {
        printf("{\"event\": \"%s\", \"id\": %s, \"woken\": %s, \"duplicate\": %s}\n", name,
               ctl_col(r, 0, "event_id"), ctl_col(r, 0, "woken"), dup ? "true" : "false");
    } else if (dup) {
        printf("event %s key %s: a duplicate of event %s (same dedup key): nothing changed\n", name,
               params[1], ctl_col(r, 0, "event_id"));
    } else {
        printf("event %s key %s published (id %s): %s wait(s) took it\n", name, params[1],
               ctl_col(r, 0, "event_id"), ctl_col(r, 0, "woken"));
    }
    PQclear(r);
    return dup ? EXIT_NOOP : EXIT_OK;
}

int
ctl_cmd_event(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {SEND_OPTS};
    struct cn_opts o = CTL_OPTS(call, rows, 2);

    return run_send(&o, argc, argv, false, publish_one);
}

/* ---- cairnctl get: a value an instance published ------------------------------------------- */

static const char *const get_sql =
    "SELECT value, version, published_at, status, status IN ('completed', 'failed', 'cancelled',"
    " 'timed_out') AS done FROM cairn.get_value($1::uuid, $2)";

/* Prints the value of row 0 of r, as the value alone or (--json) with what it is. */
static void
print_value(const struct cn_opts *o, PGresult *r, const char *id, const char *name)
{
    if (ctl_json_out(o)) {
        printf("{\"id\": \"%s\", \"name\": \"%s\", \"value\": %s, \"version\": %s, "
               "\"published_at\": \"%s\", \"status\": \"%s\"}\n",
               id, name, ctl_col(r, 0, "value"), ctl_col(r, 0, "version"),
               ctl_col(r, 0, "published_at"), ctl_col(r, 0, "status"));
    } else {
        printf("%s\n", ctl_col(r, 0, "value"));
    }
}

/* The value NAME of instance ID newer than version `after`; with --wait, heard when the write
 * that publishes it commits (cairn.value_channel), or the end (cairn.done_channel), with a look
 * every CTL_WAIT_FALLBACK_MS meanwhile. */
static int
get_one(const struct cn_opts *o, PGconn *c, const char *id, const char *name)
{
    const char *params[2] = {id, name};
    long long after = cn_opts_int(o, "after"), timeout_ms = cn_opts_int(o, "timeout") * 1000LL;
    int64_t deadline = cn_mono_ms() + timeout_ms;
    bool wait = cn_opts_bool(o, "wait");
    PGresult *r = NULL;
    int status;

    if (wait && ((status = ctl_listen(o, c, "value_channel", id)) != EXIT_OK ||
                 (status = ctl_listen(o, c, "done_channel", id)) != EXIT_OK)) {
        return status;
    }
    for (;;) {
        if ((status = ctl_query(o, c, get_sql, 2, params, &r)) != EXIT_OK) {
            return status;
        }
        if (atoll(ctl_col(r, 0, "version")) > after) {
            print_value(o, r, id, name);
            PQclear(r);
            return EXIT_OK;
        }
        if (!wait || ctl_col_true(r, 0, "done")) {
            char newer[48] = "";
            if (after > 0) {
                (void) snprintf(newer, sizeof(newer), " newer than version %lld", after);
            }
            fprintf(stderr, "%s: %s has published no %s%s (status %s)%s\n", o->prog, id, name,
                    newer, ctl_col(r, 0, "status"),
                    ctl_col_true(r, 0, "done") ? ": it has ended, none will come" : "");
            status = ctl_col_true(r, 0, "done") && wait ? EXIT_NOOP : EXIT_PENDING;
            PQclear(r);
            return status;
        }
        PQclear(r);
        if (!ctl_await_until(c, timeout_ms > 0, deadline)) {
            fprintf(stderr, "%s: %s published no %s within %lld s\n", o->prog, id, name,
                    timeout_ms / 1000);
            return EXIT_PENDING;
        }
    }
}

int
ctl_cmd_get(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_BOOL("wait", "wait until it publishes one (exit 6 if it ends without)"),
        CTL_OPT_INT("timeout", "0", 0, 86400 * 365, "S",
                    "with --wait, give up after S seconds (exit 5; 0: wait for ever)"),
        CTL_OPT_INT("after", "0", 0, 2147483647, "V",
                    "only a value newer than version V (the next one: --wait --after V)"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 2);

    return run_send(&o, argc, argv, true, get_one);
}
