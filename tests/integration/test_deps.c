/* SPDX-License-Identifier: MIT */
/*
 * The third-party libraries the later layers build on, exercised for real through the same
 * Meson dependencies: libpq against the throwaway test database (CAIRN_TEST_DATABASE_URL, set
 * by scripts/test), an nng REQ/REP round trip over ipc, and libuuid. A broken package or a
 * dependency Meson resolves wrongly fails here, before any runner code depends on it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <uuid/uuid.h>

#include "tests/support/leak.h"

TestSuite(deps, .fini = t_leak_check, .timeout = 30);

Test(deps, libpq_reads_the_migrated_schema)
{
    const char *url = getenv("CAIRN_TEST_DATABASE_URL");
    PGconn *c;
    PGresult *r;

    if (url == NULL || url[0] == '\0') {
        cr_skip_test("CAIRN_TEST_DATABASE_URL not set (run through scripts/test)");
    }
    c = PQconnectdb(url);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect: %s", PQerrorMessage(c));
    r = PQexecParams(c, "select count(*) from cairn.schema_migrations where version like $1", 1,
                     NULL, (const char *const[]){"0001%"}, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "1");
    PQclear(r);
    PQfinish(c);
}

Test(deps, nng_req_rep_round_trip_over_ipc)
{
    nng_socket rep, req;
    char url[128], *buf = NULL;
    size_t len = 0;

    (void) snprintf(url, sizeof(url), "ipc:///tmp/cairn-deps-%ld.sock", (long) getpid());
    cr_assert_eq(nng_rep0_open(&rep), 0);
    cr_assert_eq(nng_req0_open(&req), 0);
    cr_assert_eq(nng_listen(rep, url, NULL, 0), 0);
    cr_assert_eq(nng_dial(req, url, NULL, 0), 0);
    cr_assert_eq(nng_send(req, "ping", 5, 0), 0);
    cr_assert_eq(nng_recv(rep, &buf, &len, NNG_FLAG_ALLOC), 0);
    cr_assert_str_eq(buf, "ping");
    nng_free(buf, len);
    cr_assert_eq(nng_send(rep, "pong", 5, 0), 0);
    cr_assert_eq(nng_recv(req, &buf, &len, NNG_FLAG_ALLOC), 0);
    cr_assert_str_eq(buf, "pong");
    nng_free(buf, len);
    cr_assert_eq(nng_close(req), 0);
    cr_assert_eq(nng_close(rep), 0);
    /* No nng_fini(): Criterion talks to its own runner over nng in this process. */
}

Test(deps, libuuid_generates_distinct_ids)
{
    uuid_t a, b;
    char sa[37], sb[37];

    uuid_generate(a);
    uuid_generate(b);
    uuid_unparse_lower(a, sa);
    uuid_unparse_lower(b, sb);
    cr_assert_eq(strlen(sa), 36);
    cr_assert_str_neq(sa, sb);
}
