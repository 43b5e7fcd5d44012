/* SPDX-License-Identifier: MIT */
/*
 * cairnctl's internal interface between its files: cairnctl.c (command table, check, dag) and
 * ctl_db.c (the commands that talk to the database). Single-threaded.
 */
#ifndef RUNNER_CTL_H
#define RUNNER_CTL_H

#include <stddef.h>

#include "ir/dag.h"

/* Exit codes (README "cairnctl"). */
enum {
    EXIT_OK = 0,
    EXIT_REJECTED = 1, /* the input was rejected: compile errors, bad JSON, unknown names */
    EXIT_USAGE = 2,    /* usage error, or a file that cannot be read */
    EXIT_DB = 3,       /* the database is unreachable or failed */
    EXIT_FAILED = 4,   /* the instance failed or was cancelled (result, run --wait) */
    EXIT_PENDING = 5,  /* the instance has not finished (result), or --wait timed out */
};

/* Reads a whole file ("-": stdin); on failure prints why and returns NULL. */
char *ctl_read_file(const char *path, size_t *len);

/* Compiles one file. Returns EXIT_OK with *out set (and, when src is not NULL, the source in
 * *src, malloc'd), EXIT_REJECTED after printing diagnostics, or EXIT_USAGE when the file cannot
 * be read. */
int ctl_compile_file(const char *path, struct ir_dag **out, char **src, size_t *src_len);

/* Checks an --input value (NULL: "{}"): valid JSON (else the error with line and column) and
 * an object. Returns EXIT_OK with its compact text in *compact (free it), else prints why and
 * returns EXIT_REJECTED (or EXIT_USAGE when out of memory). */
int ctl_parse_input(const char *cmd, const char *text, char **compact);

int ctl_cmd_migrate(int argc, char **argv);
int ctl_cmd_register(int argc, char **argv);
int ctl_cmd_run(int argc, char **argv);
int ctl_cmd_status(int argc, char **argv);
int ctl_cmd_result(int argc, char **argv);
int ctl_cmd_list(int argc, char **argv);
int ctl_cmd_inspect(int argc, char **argv);
int ctl_cmd_exec(int argc, char **argv);

#endif
