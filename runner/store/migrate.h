/* SPDX-License-Identifier: MIT */
/*
 * Schema migrations: the sql/NNNN_name.sql files and the SQL API of sql/api/, embedded in the
 * binary at build time (runner/store/embed_sql.py). One transaction, which first takes a
 * transaction-level advisory lock, applies the migrations not yet recorded in
 * cairn.schema_migrations, in version order, then the API's files, in name order, when a
 * migration was applied or a file's SHA-256 differs from what cairn.schema_api recorded (the API
 * files always hold the current definitions of the functions, triggers, views and policies;
 * sql/README.md). So applying is idempotent, safe from several hosts at once (the others wait
 * for the lock, then find nothing to do), and a database moves from one schema to the next whole.
 * The same contract as scripts/migrate-sql, which applies the same files with psql.
 *
 * Threads: none of its own; the caller's connection, one caller at a time.
 */
#ifndef RUNNER_MIGRATE_H
#define RUNNER_MIGRATE_H

#include <stddef.h>

#include <libpq-fe.h>

#include "ir/base/err.h"

/* pg_advisory_xact_lock key: 0x636169726e, the bytes of "cairn". */
#define RN_MIGRATE_LOCK_KEY "426836062830"

struct rn_migration {
    const char *version; /* "0002" */
    const char *file;    /* "0002_workflows.sql" */
    const char *sql;
};

struct rn_api_file {
    const char *file;   /* "20_instances.sql" */
    const char *sha256; /* hex, of the file's bytes */
    const char *sql;
};

extern const struct rn_migration rn_migrations[];
extern const size_t rn_nmigrations;
extern const struct rn_api_file rn_api_files[];
extern const size_t rn_napi_files;

/* What one rn_migrate did. */
struct rn_migrate_report {
    size_t applied;   /* migrations applied now */
    size_t api_files; /* the API's files applied now: all of them, or 0 when it was current */
};

/* Called for each migration applied (not for those skipped), before the commit. */
typedef void (*rn_migrate_fn)(void *arg, const struct rn_migration *m);

/* Applies what is pending on c, into *rep. On failure err names the file and the server's
 * message, and nothing of it is kept (one transaction). Returns CN_OK, CN_DB, CN_IO. */
CN_MUST_CHECK cn_err rn_migrate(PGconn *c, rn_migrate_fn fn, void *arg,
                                struct rn_migrate_report *rep, struct cn_errmsg *err);

/* The newest version recorded in the database ("" when none), into buf. */
CN_MUST_CHECK cn_err rn_migrate_current(PGconn *c, char *buf, size_t len, struct cn_errmsg *err);

#endif
