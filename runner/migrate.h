/* SPDX-License-Identifier: MIT */
/*
 * Schema migrations: the sql/NNNN_name.sql files, embedded in the binary at build time
 * (runner/embed_sql.py), applied in version order. Each runs in its own transaction that first
 * takes a transaction-level advisory lock, skips the file when its version is already recorded
 * in cairn.schema_migrations, else runs it and records it; so applying is idempotent and safe
 * from several hosts at once (the others wait for the lock, then skip). The same contract as
 * scripts/migrate-sql, which applies the same files with psql.
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

extern const struct rn_migration rn_migrations[];
extern const size_t rn_nmigrations;

/* Called for each migration applied (not for those skipped). */
typedef void (*rn_migrate_fn)(void *arg, const struct rn_migration *m);

/* Applies pending migrations on c. *applied counts those applied now. On failure err names the
 * file and the server's message; that file's transaction is rolled back. Returns CN_OK, CN_DB,
 * CN_IO. */
CN_MUST_CHECK cn_err rn_migrate(PGconn *c, rn_migrate_fn fn, void *arg, size_t *applied,
                                struct cn_errmsg *err);

/* The newest version recorded in the database ("" when none), into buf. */
CN_MUST_CHECK cn_err rn_migrate_current(PGconn *c, char *buf, size_t len, struct cn_errmsg *err);

#endif
