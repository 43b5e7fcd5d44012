/* SPDX-License-Identifier: MIT */
/* Schema migrations (see migrate.h). */
#include "runner/store/migrate.h"

#include <stdio.h>
#include <string.h>

#include "runner/store/db.h"

/* Runs a file of several statements (the simple query protocol runs them all). A migration whose
 * statements all moved to sql/api/ is comments alone: an empty query, applied all the same. */
static cn_err
run_file(PGconn *c, const char *file, const char *sql, struct cn_errmsg *err)
{
    PGresult *r = PQexec(c, sql);
    cn_err rv = CN_OK;

    if (r == NULL ||
        (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_EMPTY_QUERY)) {
        const char *msg = r != NULL ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        rv = cn_errmsg_set(err, PQstatus(c) == CONNECTION_OK ? CN_DB : CN_IO, "%s: %s", file,
                           msg != NULL ? msg : PQerrorMessage(c));
    }
    PQclear(r);
    return rv;
}

/* Whether the query's one value is "t". */
static cn_err
query_bool(PGconn *c, const char *sql, int n, const char *const *params, int *out,
           struct cn_errmsg *err)
{
    PGresult *r = NULL;
    cn_err rv = rn_db_exec(c, sql, n, params, &r, err);

    if (rv == CN_OK) {
        *out = PQntuples(r) > 0 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    }
    PQclear(r);
    return rv;
}

/* The migrations not recorded yet, applied and recorded in version order. */
static cn_err
apply_migrations(PGconn *c, rn_migrate_fn fn, void *arg, size_t *applied, struct cn_errmsg *err)
{
    int has_table, done;
    size_t i;
    cn_err rv;

    for (i = 0; i < rn_nmigrations; i++) {
        const struct rn_migration *m = &rn_migrations[i];
        const char *params[1] = {m->version};

        /* Before 0001 has run the bookkeeping table does not exist yet (and a statement naming
         * it would not even parse), so ask for it first. */
        if ((rv = query_bool(c, "SELECT to_regclass('cairn.schema_migrations') IS NOT NULL", 0,
                             NULL, &has_table, err)) != CN_OK) {
            return rv;
        }
        done = 0;
        if (has_table && (rv = query_bool(c,
                                          "SELECT EXISTS (SELECT 1 FROM cairn.schema_migrations"
                                          " WHERE version = $1)",
                                          1, params, &done, err)) != CN_OK) {
            return rv;
        }
        if (done) {
            continue;
        }
        if ((rv = run_file(c, m->file, m->sql, err)) != CN_OK ||
            (rv = rn_db_exec(c, "INSERT INTO cairn.schema_migrations (version) VALUES ($1)", 1,
                             params, NULL, err)) != CN_OK) {
            return rv;
        }
        (*applied)++;
        if (fn != NULL) {
            fn(arg, m);
        }
    }
    return CN_OK;
}

/* Whether cairn.schema_api records exactly the embedded files with their checksums. */
static cn_err
api_current(PGconn *c, int *current, struct cn_errmsg *err)
{
    char count[24];
    const char *cparams[1] = {count};
    size_t i;
    cn_err rv;

    (void) snprintf(count, sizeof(count), "%zu", rn_napi_files);
    if ((rv = query_bool(c, "SELECT count(*) = $1::bigint FROM cairn.schema_api", 1, cparams,
                         current, err)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < rn_napi_files && *current; i++) {
        const char *params[2] = {rn_api_files[i].file, rn_api_files[i].sha256};

        if ((rv = query_bool(c,
                             "SELECT EXISTS (SELECT 1 FROM cairn.schema_api"
                             " WHERE file = $1 AND sha256 = $2)",
                             2, params, current, err)) != CN_OK) {
            return rv;
        }
    }
    return CN_OK;
}

/* Every API file, in name order, and the record of what was applied. */
static cn_err
apply_api(PGconn *c, struct cn_errmsg *err)
{
    size_t i;
    cn_err rv;

    for (i = 0; i < rn_napi_files; i++) {
        if ((rv = run_file(c, rn_api_files[i].file, rn_api_files[i].sql, err)) != CN_OK) {
            return rv;
        }
    }
    if ((rv = rn_db_exec(c, "DELETE FROM cairn.schema_api", 0, NULL, NULL, err)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < rn_napi_files; i++) {
        const char *params[2] = {rn_api_files[i].file, rn_api_files[i].sha256};

        if ((rv = rn_db_exec(c, "INSERT INTO cairn.schema_api (file, sha256) VALUES ($1, $2)", 2,
                             params, NULL, err)) != CN_OK) {
            return rv;
        }
    }
    return CN_OK;
}

cn_err
rn_migrate(PGconn *c, rn_migrate_fn fn, void *arg, struct rn_migrate_report *rep,
           struct cn_errmsg *err)
{
    struct cn_errmsg e2;
    int current = 1;
    cn_err rv;

    rep->applied = 0;
    rep->api_files = 0;
    if ((rv = rn_db_exec(c, "SET client_min_messages = warning", 0, NULL, NULL, err)) != CN_OK ||
        (rv = rn_db_exec(c, "BEGIN", 0, NULL, NULL, err)) != CN_OK) {
        return rv;
    }
    if ((rv = rn_db_exec(c, "SELECT pg_advisory_xact_lock(" RN_MIGRATE_LOCK_KEY ")", 0, NULL, NULL,
                         err)) != CN_OK ||
        (rv = apply_migrations(c, fn, arg, &rep->applied, err)) != CN_OK) {
        goto fail;
    }
    if (rep->applied == 0 && (rv = api_current(c, &current, err)) != CN_OK) {
        goto fail;
    }
    if (rep->applied > 0 || !current) {
        if ((rv = apply_api(c, err)) != CN_OK) {
            goto fail;
        }
        rep->api_files = rn_napi_files;
    }
    if ((rv = rn_db_exec(c, "COMMIT", 0, NULL, NULL, err)) != CN_OK) {
        goto fail;
    }
    return CN_OK;
fail:
    rep->applied = 0;
    rep->api_files = 0;
    if (rn_db_exec(c, "ROLLBACK", 0, NULL, NULL, &e2) != CN_OK) {
        /* the connection is gone: the server rolls back by itself; rv already says why */
    }
    return rv;
}

cn_err
rn_migrate_current(PGconn *c, char *buf, size_t len, struct cn_errmsg *err)
{
    PGresult *r = NULL;
    cn_err rv;

    buf[0] = '\0';
    if ((rv = rn_db_exec(c, "SELECT to_regclass('cairn.schema_migrations') IS NOT NULL", 0, NULL,
                         &r, err)) != CN_OK) {
        return rv;
    }
    if (strcmp(PQgetvalue(r, 0, 0), "t") != 0) {
        PQclear(r);
        return CN_OK;
    }
    PQclear(r);
    if ((rv = rn_db_exec(c, "SELECT coalesce(max(version), '') FROM cairn.schema_migrations", 0,
                         NULL, &r, err)) != CN_OK) {
        return rv;
    }
    (void) snprintf(buf, len, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return CN_OK;
}
