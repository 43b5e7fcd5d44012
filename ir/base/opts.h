/* SPDX-License-Identifier: MIT */
/*
 * Command-line options from a table, for every Cairn program (cairn-runner, cairn-worker and
 * each cairnctl command). One row per option gives its flag, its kind and range, the variable
 * it is also read from, its default and its help line; the same table drives parsing, the
 * environment, the checks, the messages and the help text, so they cannot drift apart.
 *
 * Syntax: `--flag VALUE` or `--flag=VALUE` (a value may start with '-'), `--flag` alone for a
 * switch, `-x` for a row with a letter, `-h`/`--help` for help, `-` alone is an argument (stdin,
 * by convention), `--` ends the options. Precedence: the flag, else the variable (empty counts
 * as unset), else the default. Every bad usage prints one line on stderr that starts with the
 * program's name; callers exit 2 then.
 *
 * Not thread-safe: a table belongs to the one thread that parses (main, before any other).
 */
#ifndef IR_BASE_OPTS_H
#define IR_BASE_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "ir/base/log.h"

enum cn_opt_kind {
    CN_OPT_STR,  /* --flag VALUE */
    CN_OPT_INT,  /* --flag N: a decimal integer in [min, max] */
    CN_OPT_BOOL, /* --flag: a switch, no value */
};

struct cn_opt {
    const char *flag; /* long name, without "--" */
    char letter;      /* short form (-q), 0: none */
    enum cn_opt_kind kind;
    const char *env;    /* variable read when the flag is absent; NULL: none */
    const char *def;    /* default, as text; NULL: none */
    long long min, max; /* CN_OPT_INT's range */
    const char *arg;    /* the value's name in help ("URL"); NULL: VALUE, or N for integers */
    const char *help;   /* one line; NULL: not listed (options for tests) */
    /* A CN_OPT_STR that may be given more than once: every flag's value is kept in
     * list[0..nlist), at most list_max (more is bad usage); `value` is the last one. */
    const char **list;
    size_t list_max;
    /* Written by cn_opts_parse: */
    const char *value; /* the value's text (flag, variable or default); NULL: none. A switch:
                          its flag when given, else NULL */
    long long num;     /* CN_OPT_INT: the value, parsed; 0 without one */
    size_t nlist;      /* list: the flags given (0: value is the variable's or the default) */
};

struct cn_opts {
    const char *prog;  /* starts every message: "cairn-runner", "cairnctl run" */
    const char *usage; /* synopsis after "Usage: " in help ("cairnctl run NAME [--json]") */
    const char *about; /* a paragraph after the synopsis in help; NULL: none */
    const char *hint;  /* where the help is, named in messages: "--help", "cairnctl help" */
    struct cn_opt *opts;
    size_t nopts;
    size_t max_args; /* positional arguments allowed */
    size_t nargs;    /* written by cn_opts_parse: the arguments, now argv[0..nargs) */
};

enum cn_opts_status {
    CN_OPTS_OK,   /* parsed and checked */
    CN_OPTS_HELP, /* -h or --help: print the help on stdout, exit 0 */
    CN_OPTS_BAD,  /* bad usage, already reported on stderr: exit 2 */
};

/* Parses argv[0..argc) (the arguments only, without the program's name), resolves every
 * option's value and checks integers against their range, naming the variable when the option
 * has one. Moves the positional arguments, in order, to argv[0..s->nargs). */
enum cn_opts_status cn_opts_parse(struct cn_opts *s, int argc, char **argv);

/* Prints "Usage: SYNOPSIS", the about paragraph, and one line per listed option, with its
 * variable and default. GNU's layout, which help2man turns into the man page: "Usage:" with a
 * capital, a one-line synopsis, option and text two spaces apart. */
void cn_opts_help(FILE *f, const struct cn_opts *s);

/* The rows of every long-running program (cairn-runner, cairn-worker): the log's level, format
 * and file (ir/base/log.h), from --log-level or CAIRN_LOG_LEVEL, --log-format or
 * CAIRN_LOG_FORMAT, --log-file or CAIRN_LOG_FILE. A program with a log file reopens it on
 * SIGHUP (cn_log_file_reopen). */
#define CN_OPTS_LOG_ROWS                                                                    \
    {.flag = "log-level",                                                                   \
     .kind = CN_OPT_STR,                                                                    \
     .env = "CAIRN_LOG_LEVEL",                                                              \
     .def = "info",                                                                         \
     .arg = "LEVEL",                                                                        \
     .help = CN_LOG_LEVEL_NAMES},                                                           \
        {.flag = "log-format",                                                              \
         .kind = CN_OPT_STR,                                                                \
         .env = "CAIRN_LOG_FORMAT",                                                         \
         .def = "text",                                                                     \
         .arg = "FORMAT",                                                                   \
         .help = "text or json"},                                                           \
    {                                                                                       \
        .flag = "log-file", .kind = CN_OPT_STR, .env = "CAIRN_LOG_FILE", .arg = "PATH",     \
        .help = "append the log (and all of stderr) to PATH; SIGHUP reopens it (logrotate)" \
    }

/* Checks the values of the CN_OPTS_LOG_ROWS rows and sets the log up with them (opening the log
 * file, if any). Returns false after saying on stderr which variable is wrong or why the file
 * cannot be opened. Call before any thread starts. */
bool cn_opts_log_setup(const struct cn_opts *s);

/* The resolved value of the option with this flag. Asking for a flag the table lacks is a bug:
 * it aborts. */
const char *cn_opts_str(const struct cn_opts *s, const char *flag);
long long cn_opts_int(const struct cn_opts *s, const char *flag);
bool cn_opts_bool(const struct cn_opts *s, const char *flag);

/* The option with this flag (to read where its value came from, or its range); aborts when
 * the table lacks it. */
const struct cn_opt *cn_opts_get(const struct cn_opts *s, const char *flag);

#endif
