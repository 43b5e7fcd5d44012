/* SPDX-License-Identifier: MIT */
/*
 * cairnctl's control over instances: cancel (cairn.cancel) and retry (cairn.retry, a redrive).
 * Each call is one statement of the SQL API, so a script, a psql session and cairnctl act
 * alike; the words and exit statuses (ctl.h) say what happened: done, requested of the runner
 * that holds the instance, or nothing to do. Single-threaded.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "runner/ctl/ctl.h"
#include "runner/store/db.h"

/* ---- --workflow W: many at once -------------------------------------------------------------- */

/* What `cancel --workflow` and `retry --workflow` share: the instances of --workflow in
 * --status (else in any of `statuses`, an SQL array), counted without --yes ("would VERB N
 * WHICH instance(s)", exit 1, or 6 for none), else `fn` (an SQL call of the id $1 and --reason
 * $2) run on each, one statement each so that each instance's rows are locked only for its own
 * change. counts[k] counts the answers equal to answers[k]; counts[nanswers] the others. */
static int
per_instance(const struct cn_opts *o, const char *verb, const char *which, const char *statuses,
             const char *fn, const char *const *answers, size_t nanswers, int *counts)
{
    const char *params[2] = {cn_opts_str(o, "workflow"), cn_opts_str(o, "status")};
    char sql[512];
    PGconn *c = NULL;
    PGresult *r = NULL;
    int status, row, n;
    size_t k;

    if ((status = ctl_db_open(o, &c)) != EXIT_OK) {
        return status;
    }
    /* The schema owner sees every tenant's instances: --workflow W names its own tenant's W
     * (default's, without --tenant), never a same-named workflow of another tenant. */
    (void) snprintf(sql, sizeof(sql),
                    "SELECT instance_id FROM cairn.runner_instances WHERE workflow_name = $1"
                    " AND tenant_id = cairn.current_tenant() AND status = ANY(CASE WHEN $2::text "
                    "IS NULL THEN %s ELSE ARRAY[$2::text]"
                    " END) ORDER BY created_at",
                    statuses);
    if ((status = ctl_query(o, c, sql, 2, params, &r)) != EXIT_OK) {
        PQfinish(c);
        return status;
    }
    n = PQntuples(r);
    if (!cn_opts_bool(o, "yes")) {
        printf("would %s %d %sinstance(s) of %s; add --yes to %s them\n", verb, n, which, params[0],
               verb);
        PQclear(r);
        PQfinish(c);
        return n > 0 ? EXIT_REJECTED : EXIT_NOOP;
    }
    (void) snprintf(sql, sizeof(sql), "SELECT %s AS answer", fn);
    for (row = 0; row < n && status == EXIT_OK; row++) {
        const char *p[2] = {ctl_col(r, row, "instance_id"), cn_opts_str(o, "reason")};
        PGresult *one = NULL;
        if ((status = ctl_query(o, c, sql, 2, p, &one)) != EXIT_OK) {
            break;
        }
        for (k = 0; k < nanswers && strcmp(ctl_col(one, 0, "answer"), answers[k]) != 0; k++) {
        }
        counts[k]++;
        PQclear(one);
    }
    PQclear(r);
    PQfinish(c);
    return status;
}

/* ---- cancel -------------------------------------------------------------------------------- */

/* Waits until a cancel asked of a runner took effect (or timeout_ms passes); says how it ended. */
static int
wait_cancelled(const struct cn_opts *o, PGconn *c, const char *id, long long timeout_ms)
{
    char st[16];
    int status = ctl_wait_status(o, c, id, timeout_ms, st, sizeof(st));

    if (status != EXIT_OK) {
        return status;
    }
    if (strcmp(st, "cancelled") == 0) {
        printf("%s cancelled\n", id);
        return EXIT_OK;
    }
    printf("%s %s before the cancel took effect: nothing to cancel\n", id, st);
    return EXIT_NOOP;
}

/* ---- one instance ------------------------------------------------------------------------- */

/* What `cancel ID` and `retry ID` share: `SELECT fn` (a call of cairn.cancel or cairn.retry with
 * the id $1 and --reason $2) and its answer in said. Returns EXIT_OK, else the exit status after
 * saying why: an unknown ID is rejected, and so is a failure whose message holds `refused` (NULL:
 * none), said as "PROG: ID why". */
static int
answer_of(const struct cn_opts *o, PGconn *c, const char *fn, const char *id, const char *refused,
          const char *why, char *said, size_t len)
{
    const char *params[2] = {id, cn_opts_str(o, "reason")};
    struct cn_errmsg em;
    PGresult *r = NULL;
    char sql[64];
    cn_err rv;

    (void) snprintf(sql, sizeof(sql), "SELECT %s AS answer", fn);
    if ((rv = rn_db_exec(c, sql, 2, params, &r, &em)) != CN_OK) {
        if (rv == CN_NOTFOUND) {
            fprintf(stderr, "%s: no instance %s\n", o->prog, id);
            return EXIT_REJECTED;
        }
        if (refused != NULL && strstr(em.text, refused) != NULL) {
            fprintf(stderr, "%s: %s %s\n", o->prog, id, why);
            return EXIT_REJECTED;
        }
        return ctl_db_error(o, rv, &em);
    }
    (void) snprintf(said, len, "%s", ctl_col(r, 0, "answer"));
    PQclear(r);
    return EXIT_OK;
}

/* The cancel, forced or not (its finally blocks skipped). */
static const char *
cancel_call(const struct cn_opts *o)
{
    return cn_opts_bool(o, "force") ? "cairn.cancel($1, $2, true)" : "cairn.cancel($1, $2)";
}

/* One instance: cairn.cancel's answer, said in words and an exit status. */
static int
cancel_one(const struct cn_opts *o, PGconn *c, const char *id)
{
    char said[32];
    int status;

    if ((status = answer_of(o, c, cancel_call(o), id, NULL, NULL, said, sizeof(said))) != EXIT_OK) {
        return status;
    }
    if (strcmp(said, "cancelled") == 0) {
        printf("%s cancelled\n", id);
        return EXIT_OK;
    }
    if (strcmp(said, "requested") == 0) {
        if (cn_opts_bool(o, "wait")) {
            return wait_cancelled(o, c, id, cn_opts_int(o, "timeout") * 1000);
        }
        printf("%s: cancel requested; the runner that holds it stops it%s\n", id,
               cn_opts_bool(o, "force") ? "" : " (after the finally blocks, if any)");
        return EXIT_OK;
    }
    /* "already completed" and the like: the result stays as it was. */
    printf("%s %s: nothing to cancel\n", id, said);
    return EXIT_NOOP;
}

int
ctl_cmd_cancel(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("reason", "TEXT",
                    "recorded as the instance's error message (default: cancelled)"),
        CTL_OPT_BOOL("wait", "wait until the instance's runner has cancelled it"),
        CTL_OPT_INT("timeout", "60", 0, 86400, "S",
                    "with --wait, give up after S seconds (exit 5; 0: wait for ever)"),
        CTL_OPT_STR("workflow", "W",
                    "cancel every unfinished instance of workflow W instead of one"),
        CTL_OPT_STR("status", "S", "with --workflow, only those queued or only those running"),
        CTL_OPT_BOOL("yes", "with --workflow, do it (without it: say how many it would cancel)"),
        CTL_OPT_BOOL("force", "end it without running its finally blocks, or abandon a cleanup "
                              "under way"),
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    static const char *const answers[] = {"cancelled", "requested"};
    const char *wf, *st;
    int status, counts[3] = {0, 0, 0};

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    wf = cn_opts_str(&o, "workflow");
    st = cn_opts_str(&o, "status");
    if (wf == NULL) {
        if (st != NULL || cn_opts_bool(&o, "yes")) {
            fprintf(stderr, "cairnctl cancel: --status and --yes go with --workflow\n");
            return EXIT_USAGE;
        }
        if (!ctl_check_uuid(&o, o.nargs > 0 ? argv[0] : NULL)) {
            return EXIT_USAGE;
        }
        return ctl_with_db(&o, cancel_one, argv[0]);
    }
    if (o.nargs > 0 || cn_opts_bool(&o, "wait")) {
        fprintf(stderr, "cairnctl cancel: --workflow cancels many: no ID, no --wait\n");
        return EXIT_USAGE;
    }
    if (st != NULL && strcmp(st, "queued") != 0 && strcmp(st, "running") != 0) {
        fprintf(stderr, "cairnctl cancel: --status is queued or running, not '%s'\n", st);
        return EXIT_USAGE;
    }
    status = per_instance(&o, "cancel", "unfinished ", "ARRAY['queued', 'running']",
                          cancel_call(&o), answers, 2, counts);
    if (cn_opts_bool(&o, "yes")) {
        printf("%d cancelled, %d requested (their runners stop them), %d had already finished\n",
               counts[0], counts[1], counts[2]);
    }
    return status;
}

/* ---- retry --------------------------------------------------------------------------------- */

/* --workflow W: every finished-but-not-completed instance of W (or those of one status), one
 * statement each so that each instance's rows are locked only for its own retry. */
static int
retry_many(const struct cn_opts *o, size_t nargs)
{
    static const char *const answers[] = {"queued"};
    const char *st = cn_opts_str(o, "status");
    int status, counts[2] = {0, 0};

    if (nargs > 0 || cn_opts_bool(o, "wait")) {
        fprintf(stderr, "cairnctl retry: --workflow retries many: no ID, no --wait\n");
        return EXIT_USAGE;
    }
    if (st != NULL && strcmp(st, "failed") != 0 && strcmp(st, "cancelled") != 0 &&
        strcmp(st, "timed_out") != 0) {
        fprintf(stderr, "cairnctl retry: --status is failed, cancelled or timed_out, not '%s'\n",
                st);
        return EXIT_USAGE;
    }
    status = per_instance(o, "retry", "", "ARRAY['failed', 'cancelled', 'timed_out']",
                          "cairn.retry($1, $2)", answers, 1, counts);
    if (cn_opts_bool(o, "yes")) {
        printf("%d queued again, %d changed meanwhile (nothing to retry)\n", counts[0], counts[1]);
    }
    return status;
}

/* One instance: cairn.retry's answer, said in words and an exit status; with --wait, its
 * result once it finishes again. */
static int
retry_one(const struct cn_opts *o, PGconn *c, const char *id)
{
    char said[32];
    int status;

    /* check_violation: a completed instance keeps its result */
    if ((status = answer_of(o, c, "cairn.retry($1, $2)", id, "completed",
                            "completed: only a failed, cancelled or timed_out instance can be "
                            "retried",
                            said, sizeof(said))) != EXIT_OK) {
        return status;
    }
    if (strcmp(said, "queued") != 0) {
        printf("%s %s: nothing to retry\n", id, said); /* "already running" */
        return EXIT_NOOP;
    }
    if (cn_opts_bool(o, "wait")) {
        if (!ctl_json_out(o)) {
            fprintf(stderr, "%s queued again\n", id);
        }
        return ctl_wait_result(o, c, id, cn_opts_int(o, "timeout") * 1000);
    }
    if (ctl_json_out(o)) {
        printf("{\"id\": \"%s\", \"status\": \"queued\"}\n", id);
    } else {
        printf("%s queued again\n", id);
    }
    return EXIT_OK;
}

int
ctl_cmd_retry(const struct ctl_call *call, int argc, char **argv)
{
    struct cn_opt rows[] = {
        CTL_OPT_DB,
        CTL_OPT_STR("reason", "TEXT", "kept with the earlier outcome in the instance's history"),
        CTL_OPT_BOOL("wait", "wait until it finishes; print its result"),
        CTL_OPT_INT("timeout", "0", 0, 86400 * 365, "S",
                    "with --wait, give up after S seconds (exit 5; 0: wait for ever)"),
        CTL_OPT_STR("workflow", "W",
                    "retry every failed, cancelled or timed-out instance of workflow W"),
        CTL_OPT_STR("status", "S",
                    "with --workflow, only those failed, only cancelled or only timed_out"),
        CTL_OPT_BOOL("yes", "with --workflow, do it (without it: say how many it would retry)"),
        CTL_OPT_JSON,
    };
    struct cn_opts o = CTL_OPTS(call, rows, 1);
    int status;

    if (!ctl_opts(&o, argc, argv, &status)) {
        return status;
    }
    if (cn_opts_str(&o, "workflow") != NULL) {
        return retry_many(&o, o.nargs);
    }
    if (cn_opts_str(&o, "status") != NULL || cn_opts_bool(&o, "yes")) {
        fprintf(stderr, "cairnctl retry: --status and --yes go with --workflow\n");
        return EXIT_USAGE;
    }
    if (!ctl_check_uuid(&o, o.nargs > 0 ? argv[0] : NULL)) {
        return EXIT_USAGE;
    }
    return ctl_with_db(&o, retry_one, argv[0]);
}
