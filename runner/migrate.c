/* SPDX-License-Identifier: MIT */
/* Schema migrations (see migrate.h). */
#include "runner/migrate.h"

#include <stdio.h>
#include <string.h>

#include "runner/db.h"

/* One migration in its own transaction. *done tells whether it was applied (not skipped). */
static cn_err
migrate_one(PGconn *c, const struct rn_migration *m, int *done, struct cn_errmsg *err)
{
    const char *params[1] = {m->version};
    struct cn_errmsg e2;
    PGresult *r = NULL;
    cn_err rv;

    *done = 0;
    if ((rv = rn_db_exec(c, "BEGIN", 0, NULL, NULL, err)) != CN_OK) {
        return rv;
    }
    if ((rv = rn_db_exec(c, "SELECT pg_advisory_xact_lock(" RN_MIGRATE_LOCK_KEY ")", 0, NULL, NULL,
                         err)) != CN_OK) {
        goto fail;
    }
    /* Before 0001 has run the bookkeeping table does not exist yet (and a statement naming it
     * would not even parse), so ask for it first. */
    if ((rv = rn_db_exec(c, "SELECT to_regclass('cairn.schema_migrations') IS NOT NULL", 0, NULL,
                         &r, err)) != CN_OK) {
        goto fail;
    }
    if (strcmp(PQgetvalue(r, 0, 0), "t") == 0) {
        PQclear(r);
        if ((rv = rn_db_exec(c, "SELECT 1 FROM cairn.schema_migrations WHERE version = $1", 1,
                             params, &r, err)) != CN_OK) {
            goto fail;
        }
        if (PQntuples(r) > 0) {
            PQclear(r);
            return rn_db_exec(c, "COMMIT", 0, NULL, NULL, err);
        }
    }
    PQclear(r);
    /* A migration file is several statements: the simple query protocol runs them all. */
    r = PQexec(c, m->sql);
    if (r == NULL || PQresultStatus(r) != PGRES_COMMAND_OK) {
        const char *msg = r != NULL ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        rv = cn_errmsg_set(err, PQstatus(c) == CONNECTION_OK ? CN_DB : CN_IO, "%s: %s", m->file,
                           msg != NULL ? msg : PQerrorMessage(c));
        PQclear(r);
        goto fail;
    }
    PQclear(r);
    if ((rv = rn_db_exec(c, "INSERT INTO cairn.schema_migrations (version) VALUES ($1)", 1, params,
                         NULL, err)) != CN_OK ||
        (rv = rn_db_exec(c, "COMMIT", 0, NULL, NULL, err)) != CN_OK) {
        goto fail;
    }
    *done = 1;
    return CN_OK;
fail:
    if (rn_db_exec(c, "ROLLBACK", 0, NULL, NULL, &e2) != CN_OK) {
        /* the connection is gone: the server rolls back by itself; rv already says why */
    }
    return rv;
}

cn_err
rn_migrate(PGconn *c, rn_migrate_fn fn, void *arg, size_t *applied, struct cn_errmsg *err)
{
    size_t i;
    int done;
    cn_err rv;

    *applied = 0;
    if ((rv = rn_db_exec(c, "SET client_min_messages = warning", 0, NULL, NULL, err)) != CN_OK) {
        return rv;
    }
    for (i = 0; i < rn_nmigrations; i++) {
        if ((rv = migrate_one(c, &rn_migrations[i], &done, err)) != CN_OK) {
            return rv;
        }
        if (done) {
            (*applied)++;
            if (fn != NULL) {
                fn(arg, &rn_migrations[i]);
            }
        }
    }
    return CN_OK;
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
