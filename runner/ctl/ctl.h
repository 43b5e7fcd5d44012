/* SPDX-License-Identifier: MIT */
/*
 * cairnctl's internal interface between its files: cairnctl.c (command table, check, dag, the
 * option parsing every command shares), ctl_db.c (the commands that talk to the database, and
 * the helpers below they share), ctl_control.c (cancel and retry: control over instances),
 * ctl_tenant.c (tenant create/list/quota) and ctl_exec.c (exec). Single-threaded.
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

/* A command's options (ir/base/opts.h): messages start with "cairnctl CMD" and point at
 * `cairnctl help`; ARGS is the synopsis after the command's name; MAX, the arguments allowed. */
#define CTL_OPTS(cmd, args, rows, max)                                                       \
    {                                                                                        \
        .prog = "cairnctl " cmd, .usage = "cairnctl " cmd " " args, .hint = "cairnctl help", \
        .opts = (rows), .nopts = sizeof(rows) / sizeof((rows)[0]), .max_args = (max)         \
    }

/* Rows most commands share. */
#define CTL_OPT_JSON                                              \
    {                                                             \
        .flag = "json", .kind = CN_OPT_BOOL, .help = "print JSON" \
    }
/* CTL_OPT_DB is two rows, the database and the tenant to act as, so that every database command
 * takes both and ctl_db_open applies both: a command cannot forget the tenant. */
#define CTL_OPT_DB                                                               \
    {.flag = "database-url",                                                     \
     .kind = CN_OPT_STR,                                                         \
     .env = "CAIRN_DATABASE_URL",                                                \
     .arg = "URL",                                                               \
     .help = "libpq URL of the database"},                                       \
    {                                                                            \
        .flag = "tenant", .kind = CN_OPT_STR, .env = "CAIRN_TENANT", .arg = "T", \
        .help = "act as tenant T: SET ROLE cairn_tenant_T"                       \
    }

/* Parses a command's arguments (the positional ones end up in argv[0..s->nargs)). Returns
 * true to go on; else false with the exit status in *status: EXIT_OK after printing the
 * command's help for --help, EXIT_USAGE after reporting bad usage. */
bool ctl_opts(struct cn_opts *s, int argc, char **argv, int *status);

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
 * ", " and ": " separators as PostgreSQL prints jsonb), else prints why and returns
 * EXIT_REJECTED (or EXIT_USAGE when out of memory). */
int ctl_parse_input(const char *cmd, const char *text, char **compact);
/* ctl_parse_input of --input, or of the file --input-file names ("-": stdin); both given is a
 * usage error (EXIT_USAGE). */
int ctl_read_input(const char *cmd, const char *input, const char *input_file, char **compact);

/* ---- shared by the database commands (ctl_db.c) ---- */

/* --json was given (every database command's table has CTL_OPT_JSON and CTL_OPT_DB). */
bool ctl_json_out(const struct cn_opts *o);
/* An instance id argument: a UUID; else says why (for command `cmd`) and returns false. */
bool ctl_check_uuid(const char *cmd, const char *id);
/* A list command: parses [--json] and --database-url, runs sql (no parameters) and leaves its
 * rows in *r and the choice of JSON in *json. Returns an exit status, after reporting a
 * failure; on EXIT_OK the caller prints the rows and clears r. */
int ctl_list(const char *cmd, int argc, char **argv, const char *sql, PGresult **r, bool *json);
/* Prints column col of the first n rows of r (each a JSON object as text) as a JSON array. */
void ctl_print_json_rows(const PGresult *r, int n, int col);
/* Connects to --database-url and, with --tenant T (or CAIRN_TENANT), acts as T: SET ROLE
 * cairn_tenant_T, so row-level security keeps every statement to T's rows. Returns EXIT_OK, or
 * the exit status after saying why: EXIT_USAGE for a bad tenant name, EXIT_REJECTED for a tenant
 * that does not exist or that this login may not act as, EXIT_DB when the database fails. */
int ctl_db_open(const struct cn_opts *o, PGconn **c);
/* Whether t is a tenant name as cairn.tenants allows it: ^[a-z][a-z0-9_]{0,47}$. */
bool ctl_tenant_name_ok(const char *t);
/* Says why a statement failed and returns its exit status. */
int ctl_db_error(const struct cn_opts *o, cn_err rv, const struct cn_errmsg *em);
/* Polls until instance id is finished (completed, failed, cancelled, timed_out) or timeout_ms
 * passes (0: no limit). Returns EXIT_OK with its final status in st, EXIT_PENDING after saying
 * it did not finish in time, or a database error's exit status. */
int ctl_wait_status(const struct cn_opts *o, PGconn *c, const char *id, long long timeout_ms,
                    char *st, size_t stlen);
/* Prints a finished instance's result as `cairnctl result` does; returns its exit status. */
int ctl_print_result(const struct cn_opts *o, PGconn *c, const char *id);

int ctl_cmd_migrate(int argc, char **argv);
int ctl_cmd_register(int argc, char **argv);
int ctl_cmd_run(int argc, char **argv);
int ctl_cmd_status(int argc, char **argv);
int ctl_cmd_result(int argc, char **argv);
int ctl_cmd_list(int argc, char **argv);
int ctl_cmd_inspect(int argc, char **argv);
int ctl_cmd_cancel(int argc, char **argv);
int ctl_cmd_retry(int argc, char **argv);
int ctl_cmd_exec(int argc, char **argv);
int ctl_cmd_tree(int argc, char **argv);
int ctl_cmd_schedule(int argc, char **argv);
int ctl_cmd_limit(int argc, char **argv);
int ctl_cmd_backfill(int argc, char **argv);
int ctl_cmd_prune(int argc, char **argv);
int ctl_cmd_retention(int argc, char **argv);
int ctl_cmd_tenant(int argc, char **argv);

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
