/* SPDX-License-Identifier: MIT */
/* Command-line options from a table (see opts.h). */
#include "ir/base/opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/err.h"
#include "ir/base/log.h"

/* Help lines put the option's text in this column (after two spaces of indent). */
#define HELP_COLUMN 19

static void bad(const struct cn_opts *s, const char *fmt, ...) CN_PRINTF(2, 3);

static void
bad(const struct cn_opts *s, const char *fmt, ...)
{
    va_list ap;

    (void) fprintf(stderr, "%s: ", s->prog);
    va_start(ap, fmt);
    (void) vfprintf(stderr, fmt, ap);
    va_end(ap);
    (void) fputc('\n', stderr);
}

static struct cn_opt *
by_name(const struct cn_opts *s, const char *name, size_t len)
{
    size_t i;

    for (i = 0; i < s->nopts; i++) {
        if (strlen(s->opts[i].flag) == len && strncmp(s->opts[i].flag, name, len) == 0) {
            return &s->opts[i];
        }
    }
    return NULL;
}

static struct cn_opt *
by_letter(const struct cn_opts *s, char letter)
{
    size_t i;

    for (i = 0; i < s->nopts; i++) {
        if (s->opts[i].letter != 0 && s->opts[i].letter == letter) {
            return &s->opts[i];
        }
    }
    return NULL;
}

/* Reads the flags into each option's value; moves the arguments to the front of argv. */
static enum cn_opts_status
read_flags(struct cn_opts *s, int argc, char **argv)
{
    bool options_done = false;
    int i;

    s->nargs = 0;
    for (i = 0; i < argc; i++) {
        char *a = argv[i];
        const char *val = NULL;
        struct cn_opt *o = NULL;

        if (options_done || a[0] != '-' || a[1] == '\0') {
            if (s->nargs >= s->max_args) {
                bad(s, "unexpected argument '%s' (see %s)", a, s->hint);
                return CN_OPTS_BAD;
            }
            argv[s->nargs++] = a; /* never past i: nothing unread is overwritten */
            continue;
        }
        if (strcmp(a, "--") == 0) {
            options_done = true;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return CN_OPTS_HELP;
        }
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');

            o = by_name(s, a + 2, eq != NULL ? (size_t) (eq - (a + 2)) : strlen(a + 2));
            val = eq != NULL ? eq + 1 : NULL;
        } else if (a[2] == '\0') {
            o = by_letter(s, a[1]);
        }
        if (o == NULL) {
            bad(s, "unknown option '%s' (see %s)", a, s->hint);
            return CN_OPTS_BAD;
        }
        if (o->kind == CN_OPT_BOOL) {
            if (val != NULL) {
                bad(s, "--%s takes no value", o->flag);
                return CN_OPTS_BAD;
            }
            o->value = o->flag;
            continue;
        }
        if (val == NULL) {
            if (i + 1 >= argc) {
                bad(s, "%s needs a value", a);
                return CN_OPTS_BAD;
            }
            val = argv[++i];
        }
        if (o->list != NULL) {
            if (o->nlist >= o->list_max) {
                bad(s, "--%s may be given at most %zu times", o->flag, o->list_max);
                return CN_OPTS_BAD;
            }
            o->list[o->nlist++] = val;
        }
        o->value = val;
    }
    return CN_OPTS_OK;
}

enum cn_opts_status
cn_opts_parse(struct cn_opts *s, int argc, char **argv)
{
    enum cn_opts_status st;
    size_t i;

    for (i = 0; i < s->nopts; i++) {
        s->opts[i].value = NULL;
        s->opts[i].num = 0;
        s->opts[i].nlist = 0;
    }
    if ((st = read_flags(s, argc, argv)) != CN_OPTS_OK) {
        return st;
    }
    for (i = 0; i < s->nopts; i++) {
        struct cn_opt *o = &s->opts[i];
        const char *env = o->env != NULL ? getenv(o->env) : NULL;

        if (o->value == NULL && o->kind != CN_OPT_BOOL) {
            o->value = env != NULL && *env != '\0' ? env : o->def;
        }
    }
    /* Checked after every value is known, in table order, so that the first bad setting is
     * reported the same way whether it came from a flag, a variable or a default. */
    for (i = 0; i < s->nopts; i++) {
        struct cn_opt *o = &s->opts[i];
        char *end;
        long long v;

        if (o->kind != CN_OPT_INT || o->value == NULL) {
            continue;
        }
        errno = 0;
        v = strtoll(o->value, &end, 10);
        if (errno != 0 || end == o->value || *end != '\0' || v < o->min || v > o->max) {
            if (o->env != NULL) {
                bad(s, "%s (--%s) must be an integer in %lld..%lld, got '%s'", o->env, o->flag,
                    o->min, o->max, o->value);
            } else {
                bad(s, "--%s must be an integer in %lld..%lld, got '%s'", o->flag, o->min, o->max,
                    o->value);
            }
            return CN_OPTS_BAD;
        }
        o->num = v;
    }
    return CN_OPTS_OK;
}

static void
help_line(FILE *f, const char *left, const char *text)
{
    if (strlen(left) < HELP_COLUMN) { /* one space would not part them for help2man */
        (void) fprintf(f, "  %-*s %s", HELP_COLUMN, left, text);
    } else {
        (void) fprintf(f, "  %s  %s", left, text);
    }
}

void
cn_opts_help(FILE *f, const struct cn_opts *s)
{
    size_t i;

    (void) fprintf(f, "Usage: %s\n", s->usage);
    if (s->about != NULL) {
        (void) fprintf(f, "\n%s\n\n", s->about);
    }
    for (i = 0; i < s->nopts; i++) {
        const struct cn_opt *o = &s->opts[i];
        char left[128], letter[8] = "";

        if (o->help == NULL) {
            continue;
        }
        if (o->letter != 0) {
            (void) snprintf(letter, sizeof(letter), "-%c, ", o->letter);
        }
        (void) snprintf(left, sizeof(left), "%s--%s%s%s", letter, o->flag,
                        o->kind == CN_OPT_BOOL ? "" : " ",
                        o->kind == CN_OPT_BOOL  ? ""
                        : o->arg != NULL        ? o->arg
                        : o->kind == CN_OPT_INT ? "N"
                                                : "VALUE");
        help_line(f, left, o->help);
        if (o->env != NULL && o->def != NULL) {
            (void) fprintf(f, " (env %s; default %s)", o->env, o->def);
        } else if (o->env != NULL) {
            (void) fprintf(f, " (env %s)", o->env);
        } else if (o->def != NULL) {
            (void) fprintf(f, " (default %s)", o->def);
        }
        (void) fputc('\n', f);
    }
    help_line(f, "-h, --help", "this text\n");
}

const struct cn_opt *
cn_opts_get(const struct cn_opts *s, const char *flag)
{
    const struct cn_opt *o = by_name(s, flag, strlen(flag));

    if (o == NULL) {
        (void) fprintf(stderr, "%s: no option --%s in the table (a bug)\n", s->prog, flag);
        abort();
    }
    return o;
}

const char *
cn_opts_str(const struct cn_opts *s, const char *flag)
{
    return cn_opts_get(s, flag)->value;
}

long long
cn_opts_int(const struct cn_opts *s, const char *flag)
{
    return cn_opts_get(s, flag)->num;
}

bool
cn_opts_bool(const struct cn_opts *s, const char *flag)
{
    return cn_opts_get(s, flag)->value != NULL;
}

bool
cn_opts_log_setup(const struct cn_opts *s)
{
    const struct cn_opt *level = cn_opts_get(s, "log-level"),
                        *format = cn_opts_get(s, "log-format"), *file = cn_opts_get(s, "log-file");
    struct cn_errmsg em;
    enum cn_log_level min;
    bool json;

    if (!cn_log_format_parse(format->value, &json)) {
        bad(s, "%s must be text or json, got '%s'", format->env, format->value);
        return false;
    }
    if (!cn_log_level_parse(level->value, &min)) {
        bad(s, "%s must be %s, got '%s'", level->env, CN_LOG_LEVEL_NAMES, level->value);
        return false;
    }
    /* Last: once the file is stderr, a later complaint would go to it instead of the
     * operator's terminal. */
    if (file->value != NULL && cn_log_file_open(file->value, &em) != CN_OK) {
        bad(s, "%s (--%s): %s", file->env, file->flag, em.text);
        return false;
    }
    cn_log_setup(min, json);
    return true;
}
