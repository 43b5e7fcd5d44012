/* SPDX-License-Identifier: MIT */
/*
 * cairnctl's internal interface between its files (runner/ctl/README.md says which file owns
 * what): the command tables and their dispatcher, the option rows every command shares, and
 * the helpers of the database commands. Single-threaded.
 */
#ifndef RUNNER_CTL_CTL_H
#define RUNNER_CTL_CTL_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"
#include "ir/base/opts.h"
#include "ir/compile.h"
#include "ir/dag.h"

/* Exit codes (README "cairnctl"). */
enum {
    EXIT_OK = 0,
    EXIT_REJECTED = 1, /* the input was rejected: compile errors, bad JSON, unknown names */
    EXIT_USAGE = 2,    /* usage error, or a file that cannot be read */
    EXIT_DB = 3,       /* the database is unreachable or failed */
    EXIT_FAILED = 4,   /* the instance failed, was cancelled or timed out (result, --wait) */
    EXIT_PENDING = 5,  /* the instance has not finished (result), or --wait timed out */
    EXIT_NOOP = 6,     /* nothing to do: cancel of a finished instance, retry of one unfinished */
};

/* What cairn.enqueue accepts: the figures of cairn.limits() (sql/0006_enqueue_checks.sql,
 * docs/operations.md "Limits"), which the database enforces for every client. `cairnctl run`
 * checks them too, to refuse a bad request with a clear message before sending it; the depth
 * limit is IR_VALUE_MAX_DEPTH. A test holds these to the database's figures. */
#define CTL_INPUT_MAX_BYTES           262144 /* of JSON text as PostgreSQL prints it */
#define CTL_IDEMPOTENCY_KEY_MAX_BYTES 255

/* ---- command tables (cairnctl.c) ---- */

struct ctl_call;
struct ctl_table;
struct ctl_listing;

/* A command's run function: its call, and its arguments (after its name). Returns the exit
 * status. */
typedef int ctl_run_fn(const struct ctl_call *call, int argc, char **argv);

/* One row of a command table: the top level's (cairnctl.c) or a group's (schedule, limit,
 * backfill, retention, tenant). The synopsis is written here only, so that `cairnctl help`,
 * `cairnctl --help` (and the man page help2man makes of it), the command's own --help and its
 * usage errors cannot disagree. */
struct ctl_cmd {
    const char *name;     /* the word that picks it */
    const char *synopsis; /* its arguments, after the name; "" for none */
    const char *help;     /* one line for the listing */
    /* A command: runs it on its arguments (after its name) and returns the exit status. */
    ctl_run_fn *run;
    /* A group instead (run is NULL): its sub-commands; its help line heads their listing. */
    const struct ctl_table *group;
    /* A list command's statement and columns (run is ctl_list); NULL for the others. */
    const struct ctl_listing *listing;
};

struct ctl_table {
    const struct ctl_cmd *cmds;
    size_t n;
};
#define CTL_TABLE(rows)                          \
    {                                            \
        (rows), sizeof(rows) / sizeof((rows)[0]) \
    }

/* A command as the dispatcher calls it: its row and its full name. */
struct ctl_call {
    const struct ctl_cmd *cmd;
    char prog[64];    /* "cairnctl schedule add": the start of its messages */
    char usage[1024]; /* prog and the synopsis */
};

/* Runs the command argv[0] of t, named prog ("cairnctl", "cairnctl schedule"; about: the
 * paragraph of its help, footer: text after its listing, or NULL). `help`, `--help` and `-h`
 * print the listing (exit 0); `help COMMAND...` is `COMMAND... --help`; no command, or one the
 * table lacks, is a usage error (exit 2) with the listing on stderr. */
int ctl_dispatch(const char *prog, const char *about, const char *footer, const struct ctl_table *t,
                 int argc, char **argv);

/* The groups' tables, in their files. */
extern const struct ctl_table ctl_schedule_cmds, ctl_limit_cmds, ctl_backfill_cmds,
    ctl_retention_cmds, ctl_tenant_cmds;

/* A command's options (ir/base/opts.h), named and described by its call: messages start with
 * "cairnctl CMD" and point at `cairnctl help`; MAX is the arguments allowed. */
#define CTL_OPTS(call, rows, max)                                                              \
    {                                                                                          \
        .prog = (call)->prog, .usage = (call)->usage, .hint = "cairnctl help", .opts = (rows), \
        .nopts = sizeof(rows) / sizeof((rows)[0]), .max_args = (max)                           \
    }

/* A row of each kind, written as its flag, its value's name in help (NULL: VALUE, or N), its
 * default and range where it has them, and its help line: what is a command's own, one row to a
 * line, the fields' names and the kind written here once. */
#define CTL_OPT_BOOL(f, h)                            \
    {                                                 \
        .flag = (f), .kind = CN_OPT_BOOL, .help = (h) \
    }
#define CTL_OPT_STR(f, a, h) CTL_OPT_STR_DEF(f, a, NULL, h)
/* A string row also read from the variable e when the flag is absent. */
#define CTL_OPT_STR_ENV(f, e, a, h)                                          \
    {                                                                        \
        .flag = (f), .kind = CN_OPT_STR, .env = (e), .arg = (a), .help = (h) \
    }
#define CTL_OPT_STR_DEF(f, a, d, h)                                          \
    {                                                                        \
        .flag = (f), .kind = CN_OPT_STR, .def = (d), .arg = (a), .help = (h) \
    }
#define CTL_OPT_INT(f, d, lo, hi, a, h)                                                    \
    {                                                                                      \
        .flag = (f), .kind = CN_OPT_INT, .def = (d), .min = (lo), .max = (hi), .arg = (a), \
        .help = (h)                                                                        \
    }

/* Rows most commands share. */
#define CTL_OPT_JSON CTL_OPT_BOOL("json", "print JSON")
/* --input and --input-file (read with ctl_read_input): an instance's input, for `run` and
 * `exec`. */
#define CTL_OPT_INPUT                                                                 \
    CTL_OPT_STR("input", "JSON", "the instance's input, a JSON object (default {})"), \
        CTL_OPT_STR("input-file", "FILE",                                             \
                    "read the input from FILE (-: stdin), for one too long for a command line")
/* CTL_OPT_DB is two rows, the database and the tenant to act as, so that every database command
 * takes both and ctl_db_open applies both: a command cannot forget the tenant. */
#define CTL_OPT_DB                                                                             \
    CTL_OPT_STR_ENV("database-url", "CAIRN_DATABASE_URL", "URL", "libpq URL of the database"), \
        CTL_OPT_STR_ENV("tenant", "CAIRN_TENANT", "T", "act as tenant T: SET ROLE cairn_tenant_T")

/* Parses a command's arguments (the positional ones end up in argv[0..s->nargs)). Returns
 * true to go on; else false with the exit status in *status: EXIT_OK after printing the
 * command's help for --help, EXIT_USAGE after reporting bad usage. */
bool ctl_opts(struct cn_opts *s, int argc, char **argv, int *status);
/* ctl_opts, and then at least min arguments: fewer is a usage error ("usage: SYNOPSIS"). */
bool ctl_args(struct cn_opts *s, int argc, char **argv, size_t min, int *status);
/* Prints "usage: SYNOPSIS" on stderr; returns EXIT_USAGE. */
int ctl_usage(const struct cn_opts *s);

/* Reads a whole file ("-": stdin) of at most IR_COMPILE_MAX_SOURCE_BYTES; on failure prints
 * why and returns NULL. */
char *ctl_read_file(const char *path, size_t *len);

/* The two rows of the compiler's limits (ir_compile_limits), for the commands that compile a
 * source to store or check it; ctl_compile_limits reads them back. */
#define CTL_OPT_COMPILE_LIMITS                                                                \
    {.flag = "max-source-bytes",                                                              \
     .kind = CN_OPT_INT,                                                                      \
     .env = "CAIRN_MAX_SOURCE_BYTES",                                                         \
     .def = CTL_TEXT(IR_COMPILE_DEFAULT_SOURCE_BYTES),                                        \
     .min = 1,                                                                                \
     .max = IR_COMPILE_MAX_SOURCE_BYTES,                                                      \
     .help = "refuse a source larger than N bytes"},                                          \
    {                                                                                         \
        .flag = "max-graph-nodes", .kind = CN_OPT_INT, .env = "CAIRN_MAX_GRAPH_NODES",        \
        .def = CTL_TEXT(IR_COMPILE_DEFAULT_NODES), .min = 1, .max = IR_COMPILE_MAX_NODES,     \
        .help = "refuse a workflow whose graph has more than N nodes after inlining helpers " \
                "(each costs about 400 bytes to compile)"                                     \
    }
#define CTL_TEXT(x)  CTL_TEXT_(x)
#define CTL_TEXT_(x) #x
struct ir_compile_limits ctl_compile_limits(const struct cn_opts *o);

/* Compiles one file under lim (NULL: the compiler's ceilings). Returns EXIT_OK with *out set
 * (and, when src is not NULL, the source in *src, malloc'd), EXIT_REJECTED after printing
 * diagnostics (a source over the limit included), or EXIT_USAGE when the file cannot be
 * read. */
int ctl_compile_file(const char *path, const struct ir_compile_limits *lim, struct ir_dag **out,
                     char **src, size_t *src_len);

/* Checks an --input value (NULL: "{}"): valid JSON (else the error with line and column), an
 * object, numbers within int64 and float64, nesting within IR_VALUE_MAX_DEPTH. Returns EXIT_OK
 * with its text in *compact (free it): the engine's own JSON (floats in their shortest form,
 * ", " and ": " separators as PostgreSQL prints jsonb), else prints why (after prog: "cairnctl
 * run") and returns EXIT_REJECTED (or EXIT_USAGE when out of memory). */
int ctl_parse_input(const char *prog, const char *text, char **compact);
/* ctl_parse_input with what the messages call the text ("orders.jsonl:3" for a line). */
int ctl_parse_input_as(const char *prog, const char *what, const char *text, char **compact);
/* The checks cairn.enqueue makes that cairnctl run can make before sending (the database makes
 * them all again), of input (ctl_parse_input's text, called `what` in the messages), the
 * idempotency key and --at (NULL: none). Prints why and returns EXIT_REJECTED, else EXIT_OK. */
int ctl_check_enqueue(const char *what, const char *input, const char *key, const char *at);
/* --at and --workflow-timeout read by the database apart from the enqueue, so that a bad one is
 * named with the forms it takes (NULL: not given). EXIT_OK, or why on stderr and the status. */
int ctl_check_time_options(PGconn *c, const char *at, const char *timeout);
/* cairnctl run WORKFLOW --inputs FILE (ctl_run_many.c), with run's options in o. */
int ctl_run_many(const struct cn_opts *o, const char *workflow);
/* ctl_parse_input of --input, or of the file --input-file names ("-": stdin); both given is a
 * usage error (EXIT_USAGE). */
int ctl_read_input(const char *prog, const char *input, const char *input_file, char **compact);

/* ---- shared by the database commands (ctl_db.c) ---- */

/* --json was given (every database command's table has CTL_OPT_JSON and CTL_OPT_DB). */
bool ctl_json_out(const struct cn_opts *o);
/* An instance id argument: a UUID; else says why and returns false. */
bool ctl_check_uuid(const struct cn_opts *o, const char *id);
/* ctl_opts, and then an instance ID as the first argument (ctl_check_uuid; EXIT_USAGE). */
bool ctl_id_args(struct cn_opts *o, int argc, char **argv, int *status);
/* Connects to --database-url and, with --tenant T (or CAIRN_TENANT), acts as T: SET ROLE
 * cairn_tenant_T, so row-level security keeps every statement to T's rows. Returns EXIT_OK, or
 * the exit status after saying why: EXIT_USAGE for a bad tenant name, EXIT_REJECTED for a tenant
 * that does not exist or that this login may not act as, EXIT_DB when the database fails. */
int ctl_db_open(const struct cn_opts *o, PGconn **c);
/* Whether t is a tenant name as cairn.tenants allows it: ^[a-z][a-z0-9_]{0,47}$. */
bool ctl_tenant_name_ok(const char *t);
/* Says why a statement failed and returns its exit status. */
int ctl_db_error(const struct cn_opts *o, cn_err rv, const struct cn_errmsg *em);
/* What a command does on one connection: its own work on arg (an instance ID, a name; or NULL),
 * returning the exit status. */
typedef int ctl_db_fn(const struct cn_opts *o, PGconn *c, const char *arg);
/* ctl_db_open, fn(o, c, arg), and the connection closed again: the connect, run and close of
 * every database command that works on one connection. Returns fn's exit status, or the
 * connection's failure. */
int ctl_with_db(const struct cn_opts *o, ctl_db_fn *fn, const char *arg);
/* A command of an instance ID and [--json] (status, result, inspect): ctl_id_args, then
 * ctl_with_db of fn on the ID. */
int ctl_instance_cmd(const struct ctl_call *call, int argc, char **argv, ctl_db_fn *fn);
/* Runs sql with n text parameters (NULL: SQL NULL) on c. Returns EXIT_OK with the rows in *r
 * when r is not NULL (PQclear them), else the exit status after ctl_db_error. */
int ctl_query(const struct cn_opts *o, PGconn *c, const char *sql, int n, const char *const *params,
              PGresult **r);
/* For a command of one statement: ctl_db_open, ctl_query, and the connection closed again (the
 * rows outlive it). */
int ctl_query_once(const struct cn_opts *o, const char *sql, int n, const char *const *params,
                   PGresult **r);
/* ctl_query of a statement of one row, and its column col's text copied to out (len bytes). */
int ctl_query_text(const struct cn_opts *o, PGconn *c, const char *sql, int n,
                   const char *const *params, const char *col, char *out, size_t len);
/* ctl_query (c NULL: ctl_query_once) of a statement that looks one thing up by params[0], and
 * then a row at least: none is said as "PROG: no WHAT PARAMS[0]" and returns EXIT_REJECTED
 * (with *r cleared). */
int ctl_query_found(const struct cn_opts *o, PGconn *c, const char *sql, int n,
                    const char *const *params, const char *what, PGresult **r);

/* Row row's value of the column named name, as text ("" for SQL NULL). Columns are read by
 * name so that a change to a statement's select list cannot shift what is read; a name the
 * statement lacks, or a row past its end, is a bug: it says so and exits (EXIT_DB). */
const char *ctl_col(const PGresult *r, int row, const char *name);
/* The same, NULL for SQL NULL. */
const char *ctl_col_opt(const PGresult *r, int row, const char *name);
/* Whether a boolean column is true. */
bool ctl_col_true(const PGresult *r, int row, const char *name);
/* An integer column (0 for SQL NULL). */
long long ctl_col_int(const PGresult *r, int row, const char *name);

/* A column of a list command's table: its title, the statement's column, its width (negative:
 * aligned left; 0, for the last: as long as it is). */
struct ctl_column {
    const char *title, *name;
    int width;
};
/* Prints every row of r as a table of cols, two spaces apart, under their titles. */
void ctl_print_table(const PGresult *r, const struct ctl_column *cols, size_t ncols);
/* Prints column col of every row of r (each a JSON object as text) as a JSON array. */
void ctl_print_json_rows(const PGresult *r, const char *col);
/* A list: its statement, whose column "json" is each row as a JSON object's text, the columns
 * of its table, and a line under the table (NULL: none). */
struct ctl_listing {
    const char *sql;
    const struct ctl_column *cols;
    size_t ncols;
    const char *footer;
};
#define CTL_LISTING(sql, cols, footer)                            \
    {                                                             \
        (sql), (cols), sizeof(cols) / sizeof((cols)[0]), (footer) \
    }
/* Runs l's statement with n parameters on a connection of its own and prints its rows: a JSON
 * array of them with --json, else the table and the footer. Returns an exit status. */
int ctl_print_list(const struct cn_opts *o, const struct ctl_listing *l, int n,
                   const char *const *params);
/* The run function of a list command, [--json] and the database rows: ctl_print_list of its
 * row's listing, without parameters. */
int ctl_list(const struct ctl_call *call, int argc, char **argv);

/* Polls until instance id is finished (completed, failed, cancelled, timed_out) or timeout_ms
 * passes (0: no limit). Returns EXIT_OK with its final status in st, EXIT_PENDING after saying
 * it did not finish in time, or a database error's exit status. */
int ctl_wait_status(const struct cn_opts *o, PGconn *c, const char *id, long long timeout_ms,
                    char *st, size_t stlen);
/* Prints a finished instance's result as `cairnctl result` does; returns its exit status. */
int ctl_print_result(const struct cn_opts *o, PGconn *c, const char *id);
/* ctl_wait_status, then ctl_print_result: --wait of `run` and `retry`. */
int ctl_wait_result(const struct cn_opts *o, PGconn *c, const char *id, long long timeout_ms);

/* How long a wait trusts a notification (of an end, of a published value) before it looks
 * anyway. A NOTIFY is lost only with the session, and then the next query fails; the look
 * bounds what any surprise could cost to a second, at one indexed read a second per waiter. */
#define CTL_WAIT_FALLBACK_MS 1000
/* LISTENs on the instance's channel cairn.CHANNEL_FN(id) (done_channel, value_channel): before
 * the first look at what it waits for, so that a change committed between the two is seen by
 * the look. */
int ctl_listen(const struct cn_opts *o, PGconn *c, const char *channel_fn, const char *id);
/* Waits for a notification on c until the next look: at most CTL_WAIT_FALLBACK_MS, and not
 * past deadline (monotonic ms) when timed. False at once when the deadline has passed (the
 * caller says so and gives up); else true, whatever came (the caller looks again). */
bool ctl_await_until(PGconn *c, bool timed, int64_t deadline);

/* The top-level commands, one row each in cairnctl.c. */
ctl_run_fn ctl_cmd_migrate, ctl_cmd_register, ctl_cmd_run, ctl_cmd_wait, ctl_cmd_status,
    ctl_cmd_result, ctl_cmd_list, ctl_cmd_inspect, ctl_cmd_cancel, ctl_cmd_retry, ctl_cmd_exec,
    ctl_cmd_tree, ctl_cmd_prune, ctl_cmd_signal, ctl_cmd_signal_token, ctl_cmd_event, ctl_cmd_get,
    ctl_cmd_schema;

/* Appends to out, NUL-separated, why the instance ID (of STATUS, with the live graph LIVE as
 * rn_snapshot_describe gives it, or null) is not moving: a concurrency slot, its due time, a
 * runner to claim it, an action's result or a worker for it, a backoff, a sleep, a child.
 * Nothing for a finished instance. Returns an exit status, after reporting a failure. */
int ctl_wait_reasons(PGconn *c, const char *id, const char *status, struct ir_val live,
                     struct cn_buf *out);

/* Sets WORKFLOW's concurrency limits through cairn.limit_set (MAX_RUNNING NULL: none, or with
 * keep_running the one it has; MAX_PER_KEY NULL: unchanged), trying again while a runner's write
 * holds a row it must mark. *marked (if not NULL): the unfinished instances it re-marked. Returns
 * an exit status, after reporting a failure. */
int ctl_limit_apply(const struct cn_opts *o, PGconn *c, const char *workflow,
                    const char *max_running, bool keep_running, const char *max_per_key,
                    long long *marked);
/* inspect's parent and children of instance id (ctl_tree.c): JSON members ("parent": ...,
 * "children": [...], "children_truncated": b) or text lines, appended to out. EXIT_OK, or the
 * status after printing why. */
int ctl_inspect_family(PGconn *c, const char *id, bool json, struct cn_buf *out);
/* Whether s is a workflow name ([A-Za-z_][A-Za-z0-9_.-]{0,127}) or a version
 * ([A-Za-z0-9_.-]{1,64}) as the schema allows them (ctl_db.c). */
bool ctl_name_ok(const char *s);
bool ctl_version_ok(const char *s);

#endif
