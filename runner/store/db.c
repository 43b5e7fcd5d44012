/* SPDX-License-Identifier: MIT */
/* libpq helpers (see db.h). */
#include "runner/store/db.h"

#include <stdlib.h>
#include <string.h>

#include "ir/base/log.h"

const char *
rn_db_url(const char *url)
{
    const char *env;

    if (url != NULL && *url != '\0') {
        return url;
    }
    env = getenv("CAIRN_DATABASE_URL");
    return env != NULL && *env != '\0' ? env : NULL;
}

/* libpq messages end with a newline; err gets the first line only. */
static cn_err
db_fail(struct cn_errmsg *err, cn_err e, const char *what, const char *msg)
{
    size_t n = strcspn(msg != NULL ? msg : "", "\n");

    return cn_errmsg_set(err, e, "%s%.*s", what, (int) n, msg != NULL ? msg : "");
}

const char *
rn_db_get(const PGresult *r, int row, const char *name)
{
    int c = PQfnumber(r, name);

    if (c < 0) {
        cn_log(CN_LOG_ERROR, "a statement's result has no column %s", name);
        abort();
    }
    return PQgetisnull(r, row, c) ? NULL : PQgetvalue(r, row, c);
}

bool
rn_db_alive(PGconn **c)
{
    if (*c != NULL && PQstatus(*c) == CONNECTION_OK) {
        return true;
    }
    if (*c != NULL) {
        PQfinish(*c);
        *c = NULL;
    }
    return false;
}

cn_err
rn_db_connect(const char *url, PGconn **out, struct cn_errmsg *err)
{
    PGconn *c;

    url = rn_db_url(url);
    *out = NULL;
    if (url == NULL) {
        return cn_errmsg_set(err, CN_INVAL,
                             "no database: set CAIRN_DATABASE_URL or pass --database-url");
    }
    c = PQconnectdb(url);
    if (c == NULL) {
        return cn_errmsg_set(err, CN_NOMEM, "out of memory");
    }
    if (PQstatus(c) != CONNECTION_OK) {
        cn_err rv = db_fail(err, CN_IO, "cannot connect to the database: ", PQerrorMessage(c));
        PQfinish(c);
        return rv;
    }
    *out = c;
    return CN_OK;
}

/* Hands over r (a statement's result) or turns it into the error it says. */
static cn_err
db_result(PGconn *c, PGresult *r, PGresult **out, struct cn_errmsg *err)
{
    ExecStatusType st = r != NULL ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    const char *state, *msg;
    cn_err e;

    if (out != NULL) {
        *out = NULL;
    }
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        if (out != NULL) {
            *out = r;
        } else {
            PQclear(r);
        }
        return CN_OK;
    }
    state = r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    msg = r != NULL ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (msg == NULL) {
        msg = PQerrorMessage(c);
    }
    if (PQstatus(c) != CONNECTION_OK) {
        e = CN_IO;
    } else if (state != NULL && (strcmp(state, "42704") == 0 || strcmp(state, "P0002") == 0)) {
        e = CN_NOTFOUND;
    } else if (state != NULL && (strncmp(state, "22", 2) == 0 || strcmp(state, "23514") == 0 ||
                                 strcmp(state, "55000") == 0)) { /* not in a state for that */
        e = CN_INVAL;
    } else if (state != NULL && strcmp(state, "54000") == 0) {
        e = CN_TOOBIG;
    } else if (state != NULL && (strcmp(state, "55P03") == 0 || strcmp(state, "40P01") == 0 ||
                                 strcmp(state, "40001") == 0)) {
        e = CN_BUSY; /* a lock not had in time, a deadlock, a serialization failure */
    } else {
        e = CN_DB;
    }
    e = db_fail(err, e, "", msg);
    PQclear(r);
    return e;
}

static cn_err
db_exec(PGconn *c, const char *sql, int n, const char *const *params, int format, PGresult **out,
        struct cn_errmsg *err)
{
    return db_result(c, PQexecParams(c, sql, n, NULL, params, NULL, NULL, format), out, err);
}

cn_err
rn_db_exec_prepared_binary(PGconn *c, const char *name, int n, const char *const *params,
                           PGresult **out, struct cn_errmsg *err)
{
    return db_result(c, PQexecPrepared(c, name, n, params, NULL, NULL, 1), out, err);
}

cn_err
rn_db_exec(PGconn *c, const char *sql, int n, const char *const *params, PGresult **out,
           struct cn_errmsg *err)
{
    return db_exec(c, sql, n, params, 0, out, err);
}

cn_err
rn_db_exec_binary(PGconn *c, const char *sql, int n, const char *const *params, PGresult **out,
                  struct cn_errmsg *err)
{
    return db_exec(c, sql, n, params, 1, out, err);
}

cn_err
rn_db_exec_formats(PGconn *c, const char *sql, int n, const char *const *params, const int *lengths,
                   const int *formats, PGresult **out, struct cn_errmsg *err)
{
    return db_result(c, PQexecParams(c, sql, n, NULL, params, lengths, formats, 1), out, err);
}
