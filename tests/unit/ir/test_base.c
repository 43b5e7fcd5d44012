/* SPDX-License-Identifier: MIT */
/* The program helpers of ir/base/: UUID text (both ways, and what is refused) and command-line
 * options from a table (syntax, precedence of flag, variable and default, range checks, the
 * messages of bad usage); log lines (levels, text and JSON); named threads. */
#define _GNU_SOURCE /* pthread_getname_np; must precede every include */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "ir/base/log.h"
#include "ir/base/opts.h"
#include "ir/base/sync.h"
#include "ir/base/uuid.h"
#include "tests/support/leak.h"

TestSuite(ir_base, .fini = t_leak_check, .timeout = 30);

/* ---- uuid --------------------------------------------------------------------------------- */

Test(ir_base, uuid_format_is_canonical_lowercase)
{
    const uint8_t id[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x46, 0x77,
                            0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    char text[CN_UUID_TEXT_LEN + 1];

    memset(text, 'x', sizeof(text));
    cn_uuid_format(id, text);
    cr_assert_str_eq(text, "00112233-4455-4677-8899-aabbccddeeff");
}

Test(ir_base, uuid_parse_round_trips_and_takes_either_case)
{
    uint8_t id[16], back[16];
    char text[CN_UUID_TEXT_LEN + 1];
    int i;

    for (i = 0; i < 16; i++) {
        id[i] = (uint8_t) (i * 17 + 3);
    }
    cn_uuid_format(id, text);
    cr_assert(cn_uuid_parse(text, back));
    cr_assert_arr_eq(id, back, 16);
    cr_assert(cn_uuid_parse("00112233-4455-4677-8899-AABBCCDDEEFF", back));
    cr_assert_eq(back[10], 0xaa);
    cr_assert_eq(back[15], 0xff);
}

Test(ir_base, uuid_parse_refuses_everything_else)
{
    static const char *const bad[] = {
        "",
        "not-a-uuid",
        "00112233-4455-4677-8899-aabbccddeef",   /* one short */
        "00112233-4455-4677-8899-aabbccddeeff0", /* one long */
        "00112233-4455-4677-8899-aabbccddeeg0",  /* not hex */
        "001122334-455-4677-8899-aabbccddeeff",  /* hyphen moved */
        "00112233_4455_4677_8899_aabbccddeeff",
        "{00112233-4455-4677-8899-aabbccddeeff}",
        "0011223344554677889 9aabbccddeeff0000",
    };
    uint8_t id[16];
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert(!cn_uuid_parse(bad[i], id), "accepted '%s'", bad[i]);
    }
}

/* ---- stderr capture ------------------------------------------------------------------------ */

struct capture {
    int saved, fd[2];
    char text[8192];
};

static void
capture_start(struct capture *c)
{
    (void) fflush(stderr);
    cr_assert_eq(pipe(c->fd), 0);
    (void) fcntl(c->fd[0], F_SETFL, O_NONBLOCK);
    c->saved = dup(2);
    cr_assert_eq(dup2(c->fd[1], 2), 2);
}

/* Restores stderr; c->text holds what was written meanwhile (up to 8 KiB: plenty here). */
static void
capture_end(struct capture *c)
{
    ssize_t n;
    size_t len = 0;

    (void) fflush(stderr);
    cr_assert_eq(dup2(c->saved, 2), 2);
    close(c->saved);
    close(c->fd[1]);
    while (len < sizeof(c->text) - 1 &&
           (n = read(c->fd[0], c->text + len, sizeof(c->text) - 1 - len)) > 0) {
        len += (size_t) n;
    }
    c->text[len] = '\0';
    close(c->fd[0]);
}

/* ---- log ---------------------------------------------------------------------------------- */

Test(ir_base, log_levels_and_names)
{
    enum cn_log_level l;
    bool json = true;

    cr_assert(cn_log_level_parse("debug", &l) && l == CN_LOG_DEBUG);
    cr_assert(cn_log_level_parse("error", &l) && l == CN_LOG_ERROR);
    cr_assert(cn_log_level_parse("warn", &l) && l == CN_LOG_WARN);
    cr_assert(cn_log_level_parse("warning", &l) && l == CN_LOG_WARN); /* as the Python worker */
    cr_assert(!cn_log_level_parse("verbose", &l));
    cr_assert(cn_log_level_parse("INFO", &l) && l == CN_LOG_INFO); /* any case, as Python's */
    cr_assert(cn_log_format_parse("text", &json) && !json);
    cr_assert(cn_log_format_parse("json", &json) && json);
    cr_assert(!cn_log_format_parse("JSON", &json));
}

Test(ir_base, log_text_lines_drop_what_is_below_the_level)
{
    struct capture c;

    capture_start(&c);
    cn_log_setup(CN_LOG_WARN, false);
    cn_log(CN_LOG_INFO, "not shown");
    cn_log(CN_LOG_WARN, "shown %d", 42);
    cn_log_setup(CN_LOG_INFO, false);
    capture_end(&c);
    cr_assert_null(strstr(c.text, "not shown"), "%s", c.text);
    cr_assert_not_null(strstr(c.text, "Z warn  shown 42\n"), "%s", c.text);
    cr_assert_eq(strchr(c.text, '\n'), c.text + strlen(c.text) - 1, "one line: %s", c.text);
}

Test(ir_base, log_json_lines_are_objects_with_ts_level_msg)
{
    struct capture c;
    json_error_t je;
    json_t *o;

    capture_start(&c);
    cn_log_setup(CN_LOG_DEBUG, true);
    cn_log(CN_LOG_ERROR, "a \"quoted\" %s", "word");
    cn_log_setup(CN_LOG_INFO, false);
    capture_end(&c);
    o = json_loads(c.text, 0, &je);
    cr_assert_not_null(o, "not JSON: %s", c.text);
    cr_assert_str_eq(json_string_value(json_object_get(o, "level")), "error");
    cr_assert_str_eq(json_string_value(json_object_get(o, "msg")), "a \"quoted\" word");
    cr_assert_not_null(json_string_value(json_object_get(o, "ts")));
    json_decref(o);
}

Test(ir_base, log_fields_are_key_values_in_text_and_keys_in_json)
{
    const struct cn_log_field f[] = {
        {"instance", "0b7e"}, {"workflow", "orders"}, {"exec_id", NULL}, {"attempt", "2"}};
    struct capture c;
    json_error_t je;
    json_t *o;

    capture_start(&c);
    cn_log_setup(CN_LOG_INFO, false);
    cn_log_fields(CN_LOG_INFO, f, 4, "attempt %d failed", 2);
    capture_end(&c);
    cr_assert_not_null(strstr(c.text, "Z info  attempt 2 failed instance=0b7e workflow=orders "
                                      "attempt=2\n"),
                       "%s", c.text);
    cr_assert_null(strstr(c.text, "exec_id"), "a NULL field is left out: %s", c.text);

    capture_start(&c);
    cn_log_setup(CN_LOG_INFO, true);
    cn_log_fields(CN_LOG_WARN, f, 4, "lease lost");
    cn_log_setup(CN_LOG_INFO, false);
    capture_end(&c);
    o = json_loads(c.text, 0, &je);
    cr_assert_not_null(o, "not JSON: %s", c.text);
    cr_assert_str_eq(json_string_value(json_object_get(o, "msg")), "lease lost");
    cr_assert_str_eq(json_string_value(json_object_get(o, "instance")), "0b7e");
    cr_assert_str_eq(json_string_value(json_object_get(o, "workflow")), "orders");
    cr_assert_str_eq(json_string_value(json_object_get(o, "attempt")), "2");
    cr_assert_null(json_object_get(o, "exec_id"));
    json_decref(o);
}

/* ---- opts --------------------------------------------------------------------------------- */

static struct cn_opt t_rows[] = {
    {.flag = "url",
     .kind = CN_OPT_STR,
     .env = "T_CAIRN_URL",
     .def = "tcp://d",
     .arg = "URL",
     .help = "where"},
    {.flag = "slots",
     .kind = CN_OPT_INT,
     .env = "T_CAIRN_SLOTS",
     .def = "1",
     .min = 1,
     .max = 8,
     .help = "how many"},
    {.flag = "limit", .kind = CN_OPT_INT, .min = -5, .max = 5, .help = "a bound"},
    {.flag = "quiet", .letter = 'q', .kind = CN_OPT_BOOL, .help = "say less"},
    {.flag = "secret", .kind = CN_OPT_STR},
    CN_OPTS_LOG_ROWS,
};

static struct cn_opts t_set = {
    .prog = "t-prog",
    .usage = "t-prog [--url URL] ARG...",
    .hint = "--help",
    .opts = t_rows,
    .nopts = sizeof(t_rows) / sizeof(t_rows[0]),
    .max_args = 2,
};

/* Parses a NULL-terminated list of arguments (copied: the parser reorders argv). */
static enum cn_opts_status
t_parse(char **argv_out, const char *const *args)
{
    int n = 0;

    while (args[n] != NULL) {
        argv_out[n] = (char *) args[n];
        n++;
    }
    return cn_opts_parse(&t_set, n, argv_out);
}

/* Parses, expecting CN_OPTS_BAD, and returns what was said on stderr. */
static void
t_bad(const char *const *args, const char *want)
{
    struct capture c;
    char *argv[16];

    capture_start(&c);
    cr_assert_eq(t_parse(argv, args), CN_OPTS_BAD);
    capture_end(&c);
    cr_assert_str_eq(c.text, want);
}

Test(ir_base, opts_defaults_when_nothing_is_given)
{
    char *argv[4];

    unsetenv("T_CAIRN_URL");
    unsetenv("T_CAIRN_SLOTS");
    cr_assert_eq(t_parse(argv, (const char *const[]){NULL}), CN_OPTS_OK);
    cr_assert_str_eq(cn_opts_str(&t_set, "url"), "tcp://d");
    cr_assert_eq(cn_opts_int(&t_set, "slots"), 1);
    cr_assert_null(cn_opts_str(&t_set, "limit"));
    cr_assert_eq(cn_opts_int(&t_set, "limit"), 0);
    cr_assert(!cn_opts_bool(&t_set, "quiet"));
    cr_assert_str_eq(cn_opts_str(&t_set, "log-level"), "info");
    cr_assert_eq(t_set.nargs, 0);
}

Test(ir_base, opts_flag_beats_variable_beats_default)
{
    char *argv[8];

    setenv("T_CAIRN_URL", "ipc://env", 1);
    setenv("T_CAIRN_SLOTS", "", 1); /* empty: as if unset */
    cr_assert_eq(t_parse(argv, (const char *const[]){NULL}), CN_OPTS_OK);
    cr_assert_str_eq(cn_opts_str(&t_set, "url"), "ipc://env");
    cr_assert_eq(cn_opts_int(&t_set, "slots"), 1);
    cr_assert_eq(t_parse(argv, (const char *const[]){"--url", "tcp://flag", NULL}), CN_OPTS_OK);
    cr_assert_str_eq(cn_opts_str(&t_set, "url"), "tcp://flag");
    /* The last of a repeated flag wins. */
    cr_assert_eq(t_parse(argv, (const char *const[]){"--url=a", "--url=b", NULL}), CN_OPTS_OK);
    cr_assert_str_eq(cn_opts_str(&t_set, "url"), "b");
}

/* A row with a list keeps every value of a repeated flag, up to its bound. */
Test(ir_base, opts_list_keeps_every_value_of_a_repeated_flag)
{
    static const char *peers[2];
    static struct cn_opt rows[] = {
        {.flag = "peer",
         .kind = CN_OPT_STR,
         .env = "T_CAIRN_PEER",
         .def = "p0",
         .list = peers,
         .list_max = 2,
         .help = "a peer, more than once"},
    };
    struct cn_opts set = {
        .prog = "t-list", .usage = "t-list", .hint = "--help", .opts = rows, .nopts = 1};
    char *argv[8] = {"--peer", "a", "--peer=b", NULL};
    char *three[8] = {"--peer", "a", "--peer=b", "--peer", "c", NULL};
    struct capture c;

    unsetenv("T_CAIRN_PEER");
    cr_assert_eq(cn_opts_parse(&set, 3, argv), CN_OPTS_OK);
    cr_assert_eq(rows[0].nlist, 2);
    cr_assert_str_eq(peers[0], "a");
    cr_assert_str_eq(peers[1], "b");
    cr_assert_str_eq(cn_opts_str(&set, "peer"), "b");
    /* none given: no list, the variable's or the default's value */
    setenv("T_CAIRN_PEER", "x y", 1);
    cr_assert_eq(cn_opts_parse(&set, 0, argv), CN_OPTS_OK);
    cr_assert_eq(rows[0].nlist, 0);
    cr_assert_str_eq(cn_opts_str(&set, "peer"), "x y");
    unsetenv("T_CAIRN_PEER");
    capture_start(&c);
    cr_assert_eq(cn_opts_parse(&set, 5, three), CN_OPTS_BAD);
    capture_end(&c);
    cr_assert_str_eq(c.text, "t-list: --peer may be given at most 2 times\n");
}

Test(ir_base, opts_syntax_and_arguments)
{
    char *argv[16];

    unsetenv("T_CAIRN_URL");
    cr_assert_eq(t_parse(argv, (const char *const[]){"first", "--slots=3", "-q", "--limit", "-4",
                                                     "-", NULL}),
                 CN_OPTS_OK);
    cr_assert_eq(cn_opts_int(&t_set, "slots"), 3);
    cr_assert_eq(cn_opts_int(&t_set, "limit"), -4, "a value may start with '-'");
    cr_assert(cn_opts_bool(&t_set, "quiet"));
    cr_assert_eq(t_set.nargs, 2);
    cr_assert_str_eq(argv[0], "first");
    cr_assert_str_eq(argv[1], "-", "'-' alone is an argument (stdin)");
    cr_assert_eq(t_parse(argv, (const char *const[]){"--quiet", "--", "--url", NULL}), CN_OPTS_OK);
    cr_assert_eq(t_set.nargs, 1);
    cr_assert_str_eq(argv[0], "--url", "after --, everything is an argument");
    cr_assert_str_eq(cn_opts_str(&t_set, "url"), "tcp://d");
    cr_assert_eq(t_parse(argv, (const char *const[]){"x", "--help", "--bogus", NULL}),
                 CN_OPTS_HELP);
    cr_assert_eq(t_parse(argv, (const char *const[]){"-h", NULL}), CN_OPTS_HELP);
}

Test(ir_base, opts_bad_usage_is_one_line_naming_the_program)
{
    unsetenv("T_CAIRN_SLOTS");
    t_bad((const char *const[]){"--bogus", NULL},
          "t-prog: unknown option '--bogus' (see --help)\n");
    t_bad((const char *const[]){"-x", NULL}, "t-prog: unknown option '-x' (see --help)\n");
    t_bad((const char *const[]){"--url", NULL}, "t-prog: --url needs a value\n");
    t_bad((const char *const[]){"--quiet=yes", NULL}, "t-prog: --quiet takes no value\n");
    t_bad((const char *const[]){"a", "b", "c", NULL},
          "t-prog: unexpected argument 'c' (see --help)\n");
    t_bad((const char *const[]){"--slots", "9", NULL},
          "t-prog: T_CAIRN_SLOTS (--slots) must be an integer in 1..8, got '9'\n");
    t_bad((const char *const[]){"--limit", "2x", NULL},
          "t-prog: --limit must be an integer in -5..5, got '2x'\n");
    setenv("T_CAIRN_SLOTS", "0", 1);
    t_bad((const char *const[]){NULL},
          "t-prog: T_CAIRN_SLOTS (--slots) must be an integer in 1..8, got '0'\n");
}

Test(ir_base, opts_log_rows_set_the_log_up)
{
    struct capture c;
    char *argv[4];

    cr_assert_eq(t_parse(argv, (const char *const[]){"--log-level", "loud", NULL}), CN_OPTS_OK);
    capture_start(&c);
    cr_assert(!cn_opts_log_setup(&t_set));
    capture_end(&c);
    cr_assert_str_eq(c.text, "t-prog: CAIRN_LOG_LEVEL must be debug, info, warn (or warning) or "
                             "error, got "
                             "'loud'\n");
    cr_assert_eq(t_parse(argv, (const char *const[]){"--log-format=xml", NULL}), CN_OPTS_OK);
    capture_start(&c);
    cr_assert(!cn_opts_log_setup(&t_set));
    capture_end(&c);
    cr_assert_str_eq(c.text, "t-prog: CAIRN_LOG_FORMAT must be text or json, got 'xml'\n");
    cr_assert_eq(t_parse(argv, (const char *const[]){"--log-level=error", NULL}), CN_OPTS_OK);
    cr_assert(cn_opts_log_setup(&t_set));
    capture_start(&c);
    cn_log(CN_LOG_WARN, "below error");
    cn_log_setup(CN_LOG_INFO, false);
    capture_end(&c);
    cr_assert_str_eq(c.text, "");
}

Test(ir_base, opts_help_lists_the_table)
{
    char buf[4096];
    FILE *f = fmemopen(buf, sizeof(buf), "w");

    cr_assert_not_null(f);
    cn_opts_help(f, &t_set);
    fclose(f);
    cr_assert_not_null(strstr(buf, "Usage: t-prog [--url URL] ARG...\n"), "%s", buf);
    cr_assert_not_null(strstr(buf, "  --url URL           where (env T_CAIRN_URL; default "
                                   "tcp://d)\n"),
                       "%s", buf);
    cr_assert_not_null(strstr(buf, "  --slots N           how many (env T_CAIRN_SLOTS; default "
                                   "1)\n"),
                       "%s", buf);
    cr_assert_not_null(strstr(buf, "  -q, --quiet         say less\n"), "%s", buf);
    cr_assert_not_null(strstr(buf, "  -h, --help          this text\n"), "%s", buf);
    cr_assert_null(strstr(buf, "secret"), "a row without help is not listed: %s", buf);
}

/* ---- threads -------------------------------------------------------------------------------- */

struct named {
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    bool stop;
    char name[32];
};

/* Reads its own name, then waits until told to stop. */
static void *
named_main(void *arg)
{
    struct named *n = arg;

    cn_mutex_lock(&n->mtx);
    (void) pthread_getname_np(pthread_self(), n->name, sizeof(n->name));
    cn_cond_broadcast(&n->cond);
    while (!n->stop) {
        cn_cond_wait(&n->cond, &n->mtx);
    }
    cn_mutex_unlock(&n->mtx);
    return NULL;
}

/* A thread runs under the name it was started with (cut to the kernel's 15 characters), a stop
 * raised with cn_cond_raise reaches it, and cn_thread_wait joins it once: a second wait, or a
 * wait on a thread never started, does nothing. */
Test(ir_base, threads_are_named_and_waited_for_once)
{
    static const char *const names[] = {"cairn-keeper", "cairn-a-name-too-long-to-keep"};
    static const char *const shown[] = {"cairn-keeper", "cairn-a-name-to"};
    struct cn_thread never = {0};
    size_t i;

    for (i = 0; i < 2; i++) {
        struct named n = {.stop = false};
        struct cn_thread t;
        struct cn_errmsg em = {{0}};

        cn_mutex_init(&n.mtx);
        cn_cond_init(&n.cond);
        cr_assert_eq(cn_thread_start(&t, names[i], named_main, &n, &em), CN_OK, "%s", em.text);
        cr_assert(t.started);
        cn_mutex_lock(&n.mtx);
        while (n.name[0] == '\0') {
            cn_cond_wait(&n.cond, &n.mtx);
        }
        cn_mutex_unlock(&n.mtx);
        cr_assert_str_eq(n.name, shown[i], "started as %s", names[i]);
        cn_cond_raise(&n.mtx, &n.cond, &n.stop);
        cn_thread_wait(&t);
        cr_assert(!t.started);
        cn_thread_wait(&t);
        cn_cond_destroy(&n.cond);
        cn_mutex_destroy(&n.mtx);
    }
    cn_thread_wait(&never);
}
