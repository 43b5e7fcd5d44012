/* SPDX-License-Identifier: MIT */
/*
 * cairnctl: the operator and developer command line. This file holds the top-level command
 * table and the one dispatcher every table goes through (the groups' tables are in their
 * files), ctl_opts, through which every command parses its options, and the commands that need
 * no database: `check` (compile workflow files, report errors) and `dag` (show the compiled
 * graph as text, Graphviz DOT or a summary). Single-threaded. Exit codes: ctl.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/xalloc.h"
#include "ir/compile.h"
#include "runner/ctl/ctl.h"


static ctl_run_fn cmd_check, cmd_dag;

static const struct ctl_cmd commands[] = {
    {"check", "[--quiet] [--max-source-bytes N] [--max-graph-nodes N] FILE...",
     "compile workflow files and report every error", cmd_check, NULL, NULL},
    {"dag", "FILE [--format text|dot|summary|msgpack]",
     "print the compiled graph of a workflow file", cmd_dag, NULL, NULL},
    {"migrate", "[--json]", "apply pending schema migrations", ctl_cmd_migrate, NULL, NULL},
    {"register",
     "FILE [--name N] [--version V] [--max-running N] [--max-per-key M] "
     "[--allow-missing-children] [--max-source-bytes N] [--max-graph-nodes N] [--json]",
     "compile a workflow and store it as a version", ctl_cmd_register, NULL, NULL},
    {"schema", "WORKFLOW [--version V]",
     "print the JSON Schema of the inputs a workflow takes (as cairn.enqueue checks them)",
     ctl_cmd_schema, NULL, NULL},
    {"run",
     "NAME [--input JSON | --input-file FILE] [--idempotency-key K [--any-input]] "
     "[--concurrency-key K] "
     "[--priority P] [--at TIME] [--version V] [--workflow-timeout D] [--wait [--timeout S]] "
     "[--json]",
     "enqueue an instance (--wait: until it finishes)", ctl_cmd_run, NULL, NULL},
    {"status", "ID [--json]", "show an instance's status", ctl_cmd_status, NULL, NULL},
    {"result", "ID [--json]", "print a finished instance's result", ctl_cmd_result, NULL, NULL},
    {"wait", "ID [--timeout S] [--json]",
     "wait until an instance finishes (told by the database, not polled); print its result",
     ctl_cmd_wait, NULL, NULL},
    {"list", "[--status S] [--workflow W] [--parent ID] [--schedule NAME] [--limit N] [--json]",
     "list instances, newest first", ctl_cmd_list, NULL, NULL},
    {"schedule", "", "run a workflow on a schedule: cron in a time zone, or every D", NULL,
     &ctl_schedule_cmds, NULL},
    {"limit", "", "limit how many instances of a workflow (or per concurrency key) run at once",
     NULL, &ctl_limit_cmds, NULL},
    {"backfill", "", "run a workflow once per partition of a date or integer range, N at a time",
     NULL, &ctl_backfill_cmds, NULL},
    {"prune", "--older-than D [--workflow W] [--dry-run] [--batch N] [--json]",
     "delete finished instances that finished more than D ago, with their action results",
     ctl_cmd_prune, NULL, NULL},
    {"retention", "", "a workflow's own retention, instead of the runners' CAIRN_RETENTION", NULL,
     &ctl_retention_cmds, NULL},
    {"tenant", "",
     "make tenants (each a role, cairn_tenant_NAME), list them, set their running quota", NULL,
     &ctl_tenant_cmds, NULL},
    {"tree", "ID [--limit N] [--json]",
     "show the task tree under an instance (its child workflows, theirs...) with statuses",
     ctl_cmd_tree, NULL, NULL},
    {"inspect", "ID [--json]",
     "show an instance's live graph (what it waits on) and its recorded action results",
     ctl_cmd_inspect, NULL, NULL},
    {"cancel",
     "(ID | --workflow W [--status queued|running] --yes) [--reason TEXT] [--wait [--timeout S]]",
     "cancel an instance, or every unfinished one of a workflow", ctl_cmd_cancel, NULL, NULL},
    {"retry",
     "(ID | --workflow W [--status failed|cancelled|timed_out] --yes) [--reason TEXT] "
     "[--wait [--timeout S]] [--json]",
     "run a failed, cancelled or timed-out instance again from where it stopped", ctl_cmd_retry,
     NULL, NULL},
    {"signal",
     "(ID NAME | --token T) [--payload JSON] [--dedup-key K] [--only-if-waiting] [--json]",
     "send signal NAME to an instance: its next `wait NAME` takes it", ctl_cmd_signal, NULL, NULL},
    {"signal-token", "ID NAME [--ttl D] [--json]",
     "print a token that sends signal NAME to the instance and nothing else (for a webhook)",
     ctl_cmd_signal_token, NULL, NULL},
    {"event", "NAME KEY [--payload JSON] [--dedup-key K] [--json]",
     "publish keyed event NAME: every instance waiting on NAME and KEY takes it", ctl_cmd_event,
     NULL, NULL},
    {"get", "ID NAME [--wait [--timeout S]] [--after V] [--json]",
     "print the value an instance published last as NAME (`publish NAME = v`)", ctl_cmd_get, NULL,
     NULL},
    {"exec", "FILE [--input JSON | --input-file FILE] [--timeout S] [--json]",
     "run one instance in this process, without a database (std.* actions built in)", ctl_cmd_exec,
     NULL, NULL},
};
static const struct ctl_table top = CTL_TABLE(commands);

/* ---- the dispatcher ------------------------------------------------------------------------ */

/* GNU's layout (Usage:, sections ending in a colon), which help2man turns into the man page:
 * each command's synopsis on a line of its own, its help line under it. A group is listed as
 * its sub-commands, each under the group's name. */
static void
usage(FILE *to, const char *prog, const char *about, const char *footer, const struct ctl_table *t)
{
    size_t i, k;

    fprintf(to,
            "Usage: %s COMMAND [ARGS]\n%s\n`%s COMMAND --help` shows a command's options.\n\n"
            "Commands:\n",
            prog, about, prog);
    for (i = 0; i < t->n; i++) {
        const struct ctl_cmd *c = &t->cmds[i];
        const struct ctl_table one = {c, 1}, *subs = c->group != NULL ? c->group : &one;

        for (k = 0; k < subs->n; k++) {
            const struct ctl_cmd *sub = &subs->cmds[k];
            fprintf(to, "  %s%s%s%s%s\n      %s\n", c->group != NULL ? c->name : "",
                    c->group != NULL ? " " : "", sub->name, sub->synopsis[0] ? " " : "",
                    sub->synopsis, sub->help);
        }
    }
    fprintf(to, "  help [COMMAND]\n      show this help, or COMMAND's own (COMMAND --help)\n");
    if (footer != NULL) {
        fprintf(to, "\n%s", footer);
    }
}

static bool
is_help(const char *arg)
{
    return strcmp(arg, "help") == 0 || strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* `help COMMAND...`: COMMAND... --help, run through the same table. */
static int
help_of(const char *prog, const char *about, const struct ctl_table *t, int argc, char **argv)
{
    static char help_flag[] = "--help";
    char **args = calloc((size_t) argc + 1, sizeof(*args));
    int i, status;

    if (args == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return EXIT_USAGE;
    }
    for (i = 0; i < argc; i++) {
        args[i] = argv[i];
    }
    args[argc] = help_flag;
    status = ctl_dispatch(prog, about, NULL, t, argc + 1, args);
    free(args);
    return status;
}

int
ctl_dispatch(const char *prog, const char *about, const char *footer, const struct ctl_table *t,
             int argc, char **argv)
{
    struct ctl_call call;
    size_t i;
    int n;

    if (argc < 1) {
        usage(stderr, prog, about, footer, t);
        return EXIT_USAGE;
    }
    if (strcmp(argv[0], "help") == 0 && argc > 1) {
        return help_of(prog, about, t, argc - 1, argv + 1);
    }
    if (is_help(argv[0])) {
        usage(stdout, prog, about, footer, t);
        return EXIT_OK;
    }
    for (i = 0; i < t->n && strcmp(argv[0], t->cmds[i].name) != 0; i++) {
    }
    if (i == t->n) {
        fprintf(stderr, "%s: unknown command '%s'\n\n", prog, argv[0]);
        usage(stderr, prog, about, footer, t);
        return EXIT_USAGE;
    }
    call.cmd = &t->cmds[i];
    n = snprintf(call.prog, sizeof(call.prog), "%s %s", prog, call.cmd->name);
    if (n > 0 && (size_t) n < sizeof(call.prog)) {
        n = snprintf(call.usage, sizeof(call.usage), "%s%s%s", call.prog,
                     call.cmd->synopsis[0] ? " " : "", call.cmd->synopsis);
    }
    if (n < 0 || (size_t) n >= sizeof(call.usage)) { /* a name or synopsis too long: a bug */
        fprintf(stderr, "%s: internal error: the synopsis of %s is too long\n", prog, argv[0]);
        return EXIT_USAGE;
    }
    if (call.cmd->group != NULL) {
        return ctl_dispatch(call.prog, call.cmd->help, NULL, call.cmd->group, argc - 1, argv + 1);
    }
    return call.cmd->run(&call, argc - 1, argv + 1);
}

bool
ctl_opts(struct cn_opts *s, int argc, char **argv, int *status)
{
    switch (cn_opts_parse(s, argc, argv)) {
    case CN_OPTS_HELP:
        cn_opts_help(stdout, s);
        *status = EXIT_OK;
        return false;
    case CN_OPTS_BAD:
        *status = EXIT_USAGE;
        return false;
    case CN_OPTS_OK:
        break;
    }
    return true;
}

bool
ctl_args(struct cn_opts *s, int argc, char **argv, size_t min, int *status)
{
    if (!ctl_opts(s, argc, argv, status)) {
        return false;
    }
    if (s->nargs < min) {
        *status = ctl_usage(s);
        return false;
    }
    return true;
}

int
ctl_usage(const struct cn_opts *s)
{
    fprintf(stderr, "usage: %s\n", s->usage);
    return EXIT_USAGE;
}

char *
ctl_read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0, r;

    if (f == NULL) {
        fprintf(stderr, "cairnctl: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (n == cap) {
            if (cap > IR_COMPILE_MAX_SOURCE_BYTES) {
                fprintf(stderr, "cairnctl: %s: file is larger than %u MiB\n", path,
                        IR_COMPILE_MAX_SOURCE_BYTES >> 20);
                goto fail;
            }
            cap = cap ? cap * 2 : 65536;
            buf = cn_xrealloc(buf, cap + 1);
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            break;
        }
    }
    if (ferror(f)) {
        fprintf(stderr, "cairnctl: cannot read %s: %s\n", path, strerror(errno));
        goto fail;
    }
    if (f != stdin) {
        fclose(f);
    }
    buf[n] = '\0';
    *len = n;
    return buf;
fail:
    if (f != stdin) {
        fclose(f);
    }
    free(buf);
    return NULL;
}

struct ir_compile_limits
ctl_compile_limits(const struct cn_opts *o)
{
    struct ir_compile_limits lim;

    lim.max_source_bytes = (size_t) cn_opts_int(o, "max-source-bytes");
    lim.max_nodes = (uint32_t) cn_opts_int(o, "max-graph-nodes");
    return lim;
}

int
ctl_compile_file(const char *path, const struct ir_compile_limits *lim, struct ir_dag **out,
                 char **src_out, size_t *src_len)
{
    const struct ir_compile_limits ceilings = {IR_COMPILE_MAX_SOURCE_BYTES, IR_COMPILE_MAX_NODES};
    struct ir_diags d;
    struct cn_buf msg = CN_BUF_INIT;
    size_t len = 0;
    char *src = ctl_read_file(path, &len);
    cn_err rv;
    int status = EXIT_OK;

    if (src == NULL) {
        return EXIT_USAGE;
    }
    if (lim == NULL) {
        lim = &ceilings;
    }
    if (len > lim->max_source_bytes) {
        /* Before a line of it is parsed, and without quoting it: the line may be megabytes. */
        fprintf(stderr,
                "%s: error: the source is %zu bytes, over the limit of %zu bytes "
                "(--max-source-bytes, CAIRN_MAX_SOURCE_BYTES)\n",
                path, len, lim->max_source_bytes);
        free(src);
        return EXIT_REJECTED;
    }
    ir_diags_init(&d, path, src, len);
    rv = ir_compile_source_limited(src, len, lim, &d, out);
    if (rv != CN_OK) {
        if (d.len > 0 && ir_diags_format(&d, &msg) == CN_OK) {
            fputs(msg.data, stderr);
        } else {
            fprintf(stderr, "%s: error: %s\n", path, cn_strerror(rv));
        }
        status = EXIT_REJECTED;
    }
    cn_buf_fini(&msg);
    ir_diags_fini(&d);
    if (src_out != NULL && status == EXIT_OK) {
        *src_out = src;
        *src_len = len;
    } else {
        free(src);
    }
    return status;
}

static int
cmd_check(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        {.flag = "quiet", .letter = 'q', .kind = CN_OPT_BOOL, .help = "print errors only"},
        CTL_OPT_COMPILE_LIMITS,
    };
    struct cn_opts o = CTL_OPTS(call, rows, SIZE_MAX);
    struct ir_compile_limits lim;
    int status = EXIT_OK, r;
    bool quiet;
    size_t i;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    quiet = cn_opts_bool(&o, "quiet");
    lim = ctl_compile_limits(&o);
    for (i = 0; i < o.nargs; i++) {
        struct ir_dag *dag = NULL;

        r = ctl_compile_file(argv[i], &lim, &dag, NULL, NULL);
        if (r == EXIT_OK && !quiet) {
            printf("%s: ok (%u nodes, %u frame%s)\n", argv[i], dag->nnodes, dag->nframes,
                   dag->nframes == 1 ? "" : "s");
        }
        ir_dag_free(dag);
        if (r > status) {
            status = r;
        }
    }
    return status;
}

static int
cmd_dag(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_STR_DEF("format", "F", "text", "text, dot (Graphviz), summary or msgpack"),
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    const char *file, *format;
    struct ir_dag *dag = NULL;
    struct cn_buf out = CN_BUF_INIT;
    cn_err rv;
    int status;

    if (!ctl_args(&o, argc, argv, 1, &status)) {
        return status;
    }
    file = argv[0];
    format = cn_opts_str(&o, "format");
    if (strcmp(format, "text") != 0 && strcmp(format, "dot") != 0 &&
        strcmp(format, "summary") != 0 && strcmp(format, "msgpack") != 0) {
        fprintf(stderr, "cairnctl dag: unknown format '%s' (text, dot, summary or msgpack)\n",
                format);
        return EXIT_USAGE;
    }
    if ((status = ctl_compile_file(file, NULL, &dag, NULL, NULL)) != EXIT_OK) {
        return status;
    }
    if (strcmp(format, "dot") == 0) {
        rv = ir_dag_dot(dag, &out);
    } else if (strcmp(format, "summary") == 0) {
        rv = ir_dag_summary(dag, &out);
    } else if (strcmp(format, "msgpack") == 0) {
        rv = ir_dag_encode(dag, &out);
    } else {
        rv = ir_dag_text(dag, &out);
    }
    if (rv == CN_OK && out.len > 0 && fwrite(out.data, 1, out.len, stdout) != out.len) {
        rv = CN_IO;
    }
    if (rv != CN_OK) {
        fprintf(stderr, "cairnctl dag: %s\n", cn_strerror(rv));
        status = EXIT_USAGE;
    }
    cn_buf_fini(&out);
    ir_dag_free(dag);
    return status;
}

int
main(int argc, char **argv)
{
    static const char footer[] =
        "Database commands use --database-url URL, else $CAIRN_DATABASE_URL, and act\n"
        "as tenant T with --tenant T, else $CAIRN_TENANT (SET ROLE cairn_tenant_T).\n"
        "exit status: 0 ok, 1 input rejected (compile errors, bad input, unknown name),\n"
        "2 usage or file error, 3 database error, 4 instance failed, cancelled or timed\n"
        "out, 5 instance not finished (or --wait timed out), 6 nothing to do\n";

    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("cairnctl %s\n", CAIRN_VERSION);
        return EXIT_OK;
    }
    return ctl_dispatch("cairnctl", "Checks, registers, runs and inspects Cairn workflows.", footer,
                        &top, argc - 1, argv + 1);
}
