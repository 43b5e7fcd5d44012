/* SPDX-License-Identifier: MIT */
/*
 * Thin libpq helpers shared by cairnctl and the PostgreSQL backend: connecting (URL or
 * CAIRN_DATABASE_URL), running one parameterised statement, and turning a failure into a cn_err
 * plus the server's own message. Every statement takes its values as parameters; no SQL is ever
 * built from user data. A PGconn is used by one thread at a time.
 */
#ifndef RUNNER_DB_H
#define RUNNER_DB_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "ir/base/err.h"

/* The URL to use: url when not NULL, else $CAIRN_DATABASE_URL, else NULL. */
const char *rn_db_url(const char *url);

/* Connects. Returns CN_OK, CN_INVAL (no URL given or configured), CN_IO (cannot connect; err
 * says why, e.g. "connection to server ... failed"). */
CN_MUST_CHECK cn_err rn_db_connect(const char *url, PGconn **out, struct cn_errmsg *err);

/* True when *c is a live session. Otherwise closes what is left of it (a broken session is
 * not repaired, only replaced) and sets *c to NULL, for the caller to connect afresh. */
bool rn_db_alive(PGconn **c);

/* The text of column `name` in row `row` of r, or NULL when the value is NULL: results are read
 * by their columns' names, so that a statement's select list can change without silently
 * shifting what its reader takes. A name the statement does not return is a bug in its caller:
 * it aborts, naming the column. */
const char *rn_db_get(const PGresult *r, int row, const char *name);

/* Runs sql with n text parameters (NULL entries are SQL NULL). On CN_OK *out (when out is not
 * NULL) holds the result (PQclear it). Errors, with the server's message in err: CN_NOTFOUND
 * (SQLSTATE 42704 undefined_object, P0002 no_data_found), CN_INVAL (class 22, data
 * exceptions, 23514 check_violation, 55000 object_not_in_prerequisite_state), CN_TOOBIG (54000
 * program_limit_exceeded: a value over a limit, e.g. cairn.enqueue's), CN_BUSY (55P03
 * lock_not_available, 40P01 deadlock_detected, 40001 serialization_failure: worth another
 * try), CN_IO (the connection is gone), CN_DB (any other). */
CN_MUST_CHECK cn_err rn_db_exec(PGconn *c, const char *sql, int n, const char *const *params,
                                PGresult **out, struct cn_errmsg *err);

/* The same with results in binary format (uuid: 16 bytes, bytea: raw, int4: big-endian). */
CN_MUST_CHECK cn_err rn_db_exec_binary(PGconn *c, const char *sql, int n, const char *const *params,
                                       PGresult **out, struct cn_errmsg *err);

/* The same with each parameter's length and format (formats[i] 1: binary, such as an array
 * in array_recv's form, lengths[i] bytes; 0: text, NUL-terminated). */
CN_MUST_CHECK cn_err rn_db_exec_formats(PGconn *c, const char *sql, int n,
                                        const char *const *params, const int *lengths,
                                        const int *formats, PGresult **out, struct cn_errmsg *err);

/* The same, for the statement prepared on c under name. */
CN_MUST_CHECK cn_err rn_db_exec_prepared_binary(PGconn *c, const char *name, int n,
                                                const char *const *params, PGresult **out,
                                                struct cn_errmsg *err);

#endif
