/* SPDX-License-Identifier: MIT */
/*
 * cairnctl: the operator and developer command line. This file holds the command table and
 * the commands that need no database: `check` (compile workflow files, report errors) and `dag`
 * (show the compiled graph as text, Graphviz DOT or a summary), and ctl_opts, through which
 * every command parses its options; ctl_db.c has the database commands, ctl_exec.c `exec`.
 * Single-threaded. Exit codes: ctl.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/xalloc.h"
#include "ir/compile.h"
#include "runner/ctl/ctl.h"


struct command {
    const char *name;
    const char *args;
    const char *help;
    int (*run)(int argc, char **argv);
};

static int cmd_check(int argc, char **argv);
static int cmd_dag(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const struct command commands[] = {
    {"check", "[--quiet] [--max-source-bytes N] [--max-graph-nodes N] FILE...",
     "compile workflow files and report every error", cmd_check},
    {"dag", "FILE [--format text|dot|summary|msgpack]",
     "print the compiled graph of a workflow file", cmd_dag},
    {"migrate", "[--json]", "apply pending schema migrations", ctl_cmd_migrate},
    {"register",
     "FILE [--name N] [--version V] [--max-running N] [--max-per-key M] "
     "[--allow-missing-children] [--max-source-bytes N] [--max-graph-nodes N] [--json]",
     "compile a workflow and store it as a version", ctl_cmd_register},
    {"run",
     "NAME [--input JSON] [--idempotency-key K] [--concurrency-key K] [--priority P] [--at TIME] "
     "[--wait]",
     "enqueue an instance (--wait: until it finishes)", ctl_cmd_run},
    {"status", "ID [--json]", "show an instance's status", ctl_cmd_status},
    {"result", "ID [--json]", "print a finished instance's result", ctl_cmd_result},
    {"list", "[--status S] [--workflow W] [--parent ID] [--schedule NAME] [--limit N] [--json]",
     "list instances, newest first", ctl_cmd_list},
    {"schedule",
     "add NAME --workflow W (--cron EXPR [--timezone TZ] | --every D) [...] | list | pause | "
     "resume | delete | trigger | next",
     "run a workflow on a schedule: cron in a time zone, or every D", ctl_cmd_schedule},
    {"limit", "set WORKFLOW (N | none) [--per-key M] | delete WORKFLOW | list [--json]",
     "limit how many instances of a workflow (or per concurrency key) run at once", ctl_cmd_limit},
    {"backfill",
     "create WORKFLOW --param P --from A --to B --step S [--input JSON] [--concurrency N] | list "
     "| status ID | pause ID | resume ID | cancel ID | retry-failed ID",
     "run a workflow once per partition of a date or integer range, N at a time", ctl_cmd_backfill},
    {"prune", "--older-than D [--workflow W] [--dry-run] [--batch N] [--json]",
     "delete finished instances that finished more than D ago, with their action results",
     ctl_cmd_prune},
    {"retention", "set WORKFLOW (D | forever) | unset WORKFLOW | list [--json]",
     "a workflow's own retention, instead of the runners' CAIRN_RETENTION", ctl_cmd_retention},
    {"tenant", "create NAME [--max-running N] | list [--json] | quota NAME (N | none)",
     "make tenants (each a role, cairn_tenant_NAME), list them, set their running quota",
     ctl_cmd_tenant},
    {"tree", "ID [--limit N] [--json]",
     "show the task tree under an instance (its child workflows, theirs...) with statuses",
     ctl_cmd_tree},
    {"inspect", "ID [--json]",
     "show an instance's live graph (what it waits on) and its recorded action results",
     ctl_cmd_inspect},
    {"cancel", "(ID | --workflow W [--status queued|running] --yes) [--reason TEXT] [--wait]",
     "cancel an instance, or every unfinished one of a workflow", ctl_cmd_cancel},
    {"retry", "(ID | --workflow W [--status S] --yes) [--reason TEXT] [--wait [--timeout S]]",
     "run a failed, cancelled or timed-out instance again from where it stopped", ctl_cmd_retry},
    {"exec", "FILE [--input JSON | --input-file FILE] [--timeout S] [--json]",
     "run one instance in this process, without a database (std.* actions built in)", ctl_cmd_exec},
    {"help", "[COMMAND]", "show this help", cmd_help},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void
usage(FILE *to)
{
    size_t i;

    /* GNU's layout (Usage:, sections ending in a colon), which help2man turns into the man
     * page. */
    fprintf(to, "Usage: cairnctl COMMAND [ARGS]\n"
                "Checks, registers, runs and inspects Cairn workflows.\n"
                "`cairnctl COMMAND --help` shows a command's options.\n\nCommands:\n");
    for (i = 0; i < NCOMMANDS; i++) {
        fprintf(to, "  %s %s\n      %s\n", commands[i].name, commands[i].args, commands[i].help);
    }
    fprintf(to, "\nDatabase commands use --database-url URL, else $CAIRN_DATABASE_URL, and act\n"
                "as tenant T with --tenant T, else $CAIRN_TENANT (SET ROLE cairn_tenant_T).\n"
                "exit status: 0 ok, 1 input rejected (compile errors, bad input, unknown name),\n"
                "2 usage or file error, 3 database error, 4 instance failed, cancelled or timed\n"
                "out, 5 instance not finished (or --wait timed out), 6 nothing to do\n");
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
cmd_check(int argc, char **argv)
{
    struct cn_opt rows[] = {
        {.flag = "quiet", .letter = 'q', .kind = CN_OPT_BOOL, .help = "print errors only"},
        CTL_OPT_COMPILE_LIMITS,
    };
    struct cn_opts o = CTL_OPTS(
        "check", "[--quiet] [--max-source-bytes N] [--max-graph-nodes N] FILE...", rows, SIZE_MAX);
    struct ir_compile_limits lim;
    int status = EXIT_OK, r;
    bool quiet;
    size_t i;

    if (!ctl_opts(&o, argc, argv, &status)) {
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
    if (o.nargs == 0) {
        fprintf(stderr, "usage: %s\n", o.usage);
        return EXIT_USAGE;
    }
    return status;
}

static int
cmd_dag(int argc, char **argv)
{
    struct cn_opt rows[] = {
        {.flag = "format",
         .kind = CN_OPT_STR,
         .def = "text",
         .arg = "F",
         .help = "text, dot (Graphviz), summary or msgpack"},
    };
    struct cn_opts o = CTL_OPTS("dag", "FILE [--format text|dot|summary|msgpack]", rows, 1);
    const char *file, *format;
    struct ir_dag *dag = NULL;
    struct cn_buf out = CN_BUF_INIT;
    cn_err rv;
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (o.nargs == 0) {
        fprintf(stderr, "usage: %s\n", o.usage);
        return EXIT_USAGE;
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

static int
cmd_help(int argc, char **argv)
{
    (void) argc;
    (void) argv;
    usage(stdout);
    return EXIT_OK;
}

int
main(int argc, char **argv)
{
    size_t i;

    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("cairnctl %s\n", CAIRN_VERSION);
        return EXIT_OK;
    }
    for (i = 0; i < NCOMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            return commands[i].run(argc - 2, argv + 2);
        }
    }
    fprintf(stderr, "cairnctl: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
