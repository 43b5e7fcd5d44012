/* SPDX-License-Identifier: MIT */
/*
 * Backend conformance: the same checks against the in-memory backend and, when
 * CAIRN_TEST_DATABASE_URL is set (scripts/test sets it), the PostgreSQL backend in a fresh
 * database of its own. Claims lease an instance once; writes are fenced by the claim token;
 * finished instances leave the queue; released ones come back with their state and the latest
 * result per execution id; heartbeats find lost leases; a failed instance is never claimed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <libpq-fe.h>

#include "ir/base/clock.h"
#include "ir/base/uuid.h"
#include "ir/value.h"
#include "runner/store/backend.h"
#include "runner/store/db.h"
#include "runner/store/migrate.h"
#include "tests/support/leak.h"

TestSuite(backend, .fini = t_leak_check, .timeout = 60);

struct fx {
    struct rn_backend *b;
    bool pg;
    PGconn *admin; /* pg: the test database */
    char dbname[64];
    char *base_url;
};

static const char *src = "fn main(input: [n], output: [r]):\n    r = @std.echo(value=n)\n"
                         "    return r\n";

/* A database URL naming another database on the same server. */
static char *
url_for(const char *base, const char *db)
{
    const char *slash = strstr(base, "://"), *path, *query;
    size_t head;
    char *out;

    path = slash != NULL ? strchr(slash + 3, '/') : NULL;
    cr_assert_not_null(path, "unexpected URL %s", base);
    query = strchr(path, '?');
    head = (size_t) (path - base) + 1;
    out = malloc(head + strlen(db) + (query ? strlen(query) : 0) + 1);
    cr_assert_not_null(out);
    memcpy(out, base, head);
    strcpy(out + head, db);
    if (query != NULL) {
        strcat(out, query);
    }
    return out;
}

static void
pg_exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);

    cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

static void
fx_open(struct fx *f, bool pg)
{
    struct cn_errmsg em = {{0}};

    memset(f, 0, sizeof(*f));
    f->pg = pg;
    if (!pg) {
        struct rn_vid vid;
        cr_assert_eq(rn_backend_mem_new(&f->b), CN_OK);
        cr_assert_eq(rn_backend_mem_register(f->b, "t", src, &vid), CN_OK);
        return;
    }
    {
        const char *base = getenv("CAIRN_TEST_DATABASE_URL");
        PGconn *root;
        char sql[128], *url;
        struct rn_migrate_report applied;

        if (base == NULL || *base == '\0') {
            cr_skip_test("CAIRN_TEST_DATABASE_URL is not set (scripts/test sets it)");
        }
        f->base_url = strdup(base);
        (void) snprintf(f->dbname, sizeof(f->dbname), "backend_%ld_%d", (long) getpid(),
                        rand() % 100000);
        cr_assert_eq(rn_db_connect(base, &root, &em), CN_OK, "%s", em.text);
        (void) snprintf(sql, sizeof(sql), "CREATE DATABASE %s", f->dbname);
        pg_exec_ok(root, sql);
        PQfinish(root);
        url = url_for(base, f->dbname);
        cr_assert_eq(rn_db_connect(url, &f->admin, &em), CN_OK, "%s", em.text);
        cr_assert_eq(rn_migrate(f->admin, NULL, NULL, &applied, &em), CN_OK, "%s", em.text);
        {
            const char *p[1] = {src};
            PGresult *r = PQexecParams(f->admin,
                                       "INSERT INTO cairn.workflow_versions (workflow_name,"
                                       " workflow_version, ir_hash, source) VALUES ('t', 'v1',"
                                       " 'h', $1)",
                                       1, NULL, p, NULL, NULL, 0);
            cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(f->admin));
            PQclear(r);
        }
        cr_assert_eq(rn_backend_pg_open(url, &f->b, &em), CN_OK, "%s", em.text);
        free(url);
    }
}

static void
fx_close(struct fx *f)
{
    if (!f->pg) {
        rn_backend_mem_free(f->b);
        return;
    }
    f->b->ops->close(f->b);
    PQfinish(f->admin);
    {
        struct cn_errmsg em;
        PGconn *root;
        char sql[128];
        cr_assert_eq(rn_db_connect(f->base_url, &root, &em), CN_OK);
        (void) snprintf(sql, sizeof(sql), "DROP DATABASE %s WITH (FORCE)", f->dbname);
        pg_exec_ok(root, sql);
        PQfinish(root);
    }
    free(f->base_url);
}

/* Enqueues an instance of "t" with input {"n": n}. */
static void
fx_enqueue(struct fx *f, int n, struct rn_iid *id)
{
    if (!f->pg) {
        struct ir_val in;
        cr_assert_eq(ir_map_new(1, &in), CN_OK);
        cr_assert_eq(ir_map_set_cstr(&in, "n", ir_int(n)), CN_OK);
        cr_assert_eq(rn_backend_mem_enqueue(f->b, "t", in, 0, id), CN_OK);
        ir_val_release(in);
        return;
    }
    {
        char input[64];
        const char *p[1] = {input};
        PGresult *r;

        (void) snprintf(input, sizeof(input), "{\"n\": %d}", n);
        r = PQexecParams(f->admin, "SELECT cairn.enqueue('t', $1::jsonb)", 1, NULL, p, NULL, NULL,
                         1);
        cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(f->admin));
        cr_assert_eq(PQgetlength(r, 0, 0), 16);
        memcpy(id->b, PQgetvalue(r, 0, 0), 16);
        PQclear(r);
    }
}

static size_t
claim(struct fx *f, int64_t lease_ms, struct rn_claimed **out)
{
    struct cn_errmsg em = {{0}};
    size_t n = 0;

    cr_assert_eq(f->b->ops->claim(f->b, 10, SIZE_MAX, SIZE_MAX, SIZE_MAX, lease_ms, out, &n, &em),
                 CN_OK, "%s", em.text);
    return n;
}

static void
persist(struct fx *f, struct rn_write *w, size_t n)
{
    struct cn_errmsg em = {{0}};

    cr_assert_eq(f->b->ops->persist(f->b, w, n, &em), CN_OK, "%s", em.text);
}

static struct rn_write
write_for(const struct rn_claimed *c)
{
    struct rn_write w;

    memset(&w, 0, sizeof(w));
    w.instance_id = c->instance_id;
    w.lock = c->lock;
    w.result = ir_null();
    return w;
}

/* Records d[0..n) under c's lease, with no snapshot, and asserts that the write was not lost. */
static void
record_results(struct fx *f, const struct rn_claimed *c, struct rn_done *d, size_t n)
{
    struct rn_write w = write_for(c);

    w.done = d;
    w.ndone = n;
    persist(f, &w, 1);
    cr_assert(!w.lost);
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void
claims_are_leased_and_writes_fenced(bool pg)
{
    struct fx f;
    struct rn_claimed *c = NULL, *c2 = NULL;
    struct rn_done d[2];
    struct rn_write w[2];
    struct rn_iid id;
    struct rn_token wrong;
    const struct ir_val *n;

    fx_open(&f, pg);
    fx_enqueue(&f, 7, &id);
    cr_assert_eq(claim(&f, 30000, &c), 1);
    cr_assert(rn_iid_eq(c[0].instance_id, id));
    cr_assert_null(c[0].state, "a fresh instance has no state");
    n = ir_map_get(c[0].input, "n", 1);
    cr_assert(n != NULL && n->u.i == 7);
    cr_assert_eq(claim(&f, 30000, &c2), 0, "a leased instance was claimed twice");
    rn_claimed_free(c2, 0);

    /* A result and a snapshot under the claim token; the same under a wrong token. */
    memset(d, 0, sizeof(d));
    memset(d[0].exec_id.b, 0xE1, 16);
    d[0].attempt = 1;
    d[0].ok = true;
    d[0].value = ir_int(70);
    w[0] = write_for(&c[0]);
    w[0].done = &d[0];
    w[0].ndone = 1;
    w[0].state = "\x91\x01";
    w[0].state_len = 2;
    w[1] = w[0];
    memset(wrong.b, 0x77, 16);
    w[1].lock = wrong;
    d[1] = d[0];
    d[1].attempt = 2;
    w[1].done = &d[1];
    persist(&f, w, 2);
    cr_assert(!w[0].lost, "the holder's write was refused");
    cr_assert(w[1].lost, "a write under another token was accepted");

    /* Hand it back; claimed again it has the state and exactly the holder's result. */
    w[0] = write_for(&c[0]);
    w[0].release = true;
    w[0].wake_at_ms = 1;
    persist(&f, w, 1);
    cr_assert(!w[0].lost);
    rn_claimed_free(c, 1);
    cr_assert_eq(claim(&f, 30000, &c), 1);
    cr_assert_eq(c[0].state_len, 2);
    cr_assert_eq(memcmp(c[0].state, "\x91\x01", 2), 0);
    cr_assert_eq(c[0].ndone, 1);
    cr_assert_eq(c[0].done[0].attempt, 1, "the fenced-off write left a result behind");
    cr_assert_eq(c[0].done[0].value.u.i, 70);

    /* Finished: it leaves the queue for good. */
    w[0] = write_for(&c[0]);
    w[0].outcome = RN_COMPLETED;
    w[0].result = ir_int(70);
    persist(&f, w, 1);
    cr_assert(!w[0].lost);
    rn_claimed_free(c, 1);
    cr_assert_eq(claim(&f, 1, &c), 0, "a finished instance was claimed");
    rn_claimed_free(c, 0);
    fx_close(&f);
}

Test(backend, memory_claims_are_leased_and_writes_fenced)
{
    claims_are_leased_and_writes_fenced(false);
}

Test(backend, postgres_claims_are_leased_and_writes_fenced)
{
    claims_are_leased_and_writes_fenced(true);
}

/* Results recorded for an instance (one row per execution id and attempt, or not). */
static size_t
recorded_results(struct fx *f, struct rn_iid id)
{
    size_t n = 0;

    if (!f->pg) {
        enum rn_outcome oc;
        struct ir_val res;

        cr_assert_eq(rn_backend_mem_outcome(f->b, id, &oc, &res, &n), CN_OK);
        ir_val_release(res);
        return n;
    }
    {
        const char *p[1] = {(const char *) id.b};
        int len[1] = {16}, fmt[1] = {1};
        PGresult *r = PQexecParams(f->admin,
                                   "SELECT count(*) FROM cairn.runner_actions_done"
                                   " WHERE instance_id = $1",
                                   1, NULL, p, len, fmt, 0);
        cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(f->admin));
        n = (size_t) strtoull(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
    }
    return n;
}

/* A result written again (a batch resent, or reported again after a re-claim's hydration) is
 * recorded once; another attempt of the same execution is a result of its own. The rest of a
 * batch that carries such a result is written: on PostgreSQL the results' key refuses the
 * batch's plain insert, and the batch goes again with the probe. */
static void
a_result_is_recorded_once(bool pg)
{
    struct fx f;
    struct rn_claimed *c = NULL;
    struct rn_done d[3], other;
    struct rn_write w, both[2];
    struct rn_iid id, id2;
    static const char snap[] = "the snapshot of the resent batch";
    size_t k, mine;

    fx_open(&f, pg);
    fx_enqueue(&f, 3, &id);
    fx_enqueue(&f, 4, &id2);
    cr_assert_eq(claim(&f, 30000, &c), 2);
    mine = rn_iid_eq(c[0].instance_id, id) ? 0 : 1;
    memset(d, 0, sizeof(d));
    memset(d[0].exec_id.b, 0xE2, 16);
    d[0].attempt = 1;
    d[0].ok = true;
    d[0].value = ir_int(30);
    d[1] = d[0];
    d[1].attempt = 2;
    d[2] = d[0];
    memset(d[2].exec_id.b, 0xE3, 16);
    other = d[0];
    w = write_for(&c[mine]);
    w.done = &d[0];
    w.ndone = 1;
    persist(&f, &w, 1);
    cr_assert(!w.lost);
    persist(&f, &w, 1);
    cr_assert(!w.lost);
    cr_expect_eq(recorded_results(&f, id), 1, "the same result was recorded twice");
    w.done = d;
    w.ndone = 2;
    persist(&f, &w, 1);
    cr_assert(!w.lost);
    cr_expect_eq(recorded_results(&f, id), 2, "the second attempt's result was not recorded");

    /* Resent with a new result and a snapshot, beside another instance's first result. */
    both[0] = write_for(&c[mine]);
    both[0].done = d;
    both[0].ndone = 3;
    both[0].state = snap;
    both[0].state_len = sizeof(snap) - 1;
    both[1] = write_for(&c[1 - mine]);
    both[1].done = &other;
    both[1].ndone = 1;
    persist(&f, both, 2);
    for (k = 0; k < 2; k++) {
        cr_assert(!both[k].lost, "write %zu of the resent batch was lost", k);
    }
    cr_expect_eq(recorded_results(&f, id), 3, "the resent batch's new result was not recorded");
    cr_expect_eq(recorded_results(&f, id2), 1, "the other instance's result was not recorded");
    if (pg) {
        const char *p[1] = {(const char *) id.b};
        int len[1] = {16}, fmt[1] = {1};
        PGresult *r = PQexecParams(f.admin,
                                   "SELECT state FROM cairn.runner_instances"
                                   " WHERE instance_id = $1",
                                   1, NULL, p, len, fmt, 1);
        cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(f.admin));
        cr_expect(PQgetlength(r, 0, 0) == (int) sizeof(snap) - 1 &&
                      memcmp(PQgetvalue(r, 0, 0), snap, sizeof(snap) - 1) == 0,
                  "the resent batch's snapshot was not stored");
        PQclear(r);
    }
    rn_claimed_free(c, 2);
    fx_close(&f);
}

/* Many results per write (a fan-out's batch; on PostgreSQL each write's lease is probed once
 * for all its results): a write under a stale token records none of its results, the current
 * one all of them, and the batch resent with more records only the new ones. */
static void
many_results_per_write(bool pg)
{
    struct fx f;
    struct rn_claimed *c = NULL;
    struct rn_done d[2][8];
    struct rn_write w[2];
    struct rn_iid id[2];
    size_t i, k;

    fx_open(&f, pg);
    fx_enqueue(&f, 1, &id[0]);
    fx_enqueue(&f, 2, &id[1]);
    cr_assert_eq(claim(&f, 30000, &c), 2);
    memset(d, 0, sizeof(d));
    for (i = 0; i < 2; i++) {
        for (k = 0; k < 8; k++) {
            memset(d[i][k].exec_id.b, (int) (0x10 * (i + 1) + k), 16);
            d[i][k].attempt = 1;
            d[i][k].ok = k % 3 != 0;
            d[i][k].value = ir_int((int64_t) (100 * i + k));
        }
        w[i] = write_for(&c[i]);
        w[i].done = d[i];
        w[i].ndone = 6;
    }
    w[1].lock.b[0] ^= 0xFF; /* a token no longer current */
    persist(&f, w, 2);
    cr_assert(!w[0].lost);
    cr_assert(w[1].lost, "a write under a stale token was not reported lost");
    cr_expect_eq(recorded_results(&f, c[0].instance_id), 6);
    cr_expect_eq(recorded_results(&f, c[1].instance_id), 0,
                 "results of a write under a stale token were recorded");

    w[0].ndone = 8; /* resent, with two more */
    w[1].lock = c[1].lock;
    w[1].ndone = 8;
    persist(&f, w, 2);
    cr_assert(!w[0].lost && !w[1].lost);
    cr_expect_eq(recorded_results(&f, c[0].instance_id), 8, "a resent result was recorded twice");
    cr_expect_eq(recorded_results(&f, c[1].instance_id), 8);
    rn_claimed_free(c, 2);
    fx_close(&f);
}

Test(backend, memory_many_results_per_write)
{
    many_results_per_write(false);
}

Test(backend, postgres_many_results_per_write)
{
    many_results_per_write(true);
}

Test(backend, memory_a_result_is_recorded_once)
{
    a_result_is_recorded_once(false);
}

Test(backend, postgres_a_result_is_recorded_once)
{
    a_result_is_recorded_once(true);
}

/* A claim says whether an earlier claim started the instance, and reads back the results
 * recorded for a started instance that has no snapshot (its first step went out recorded by
 * the claim): the runner resumes it from them. Under every claim path: plain, and with a
 * concurrency limit (cairn.claim_limited, PostgreSQL only). */
static void
a_started_instance_without_a_snapshot_comes_back_with_its_results(bool pg, bool limited)
{
    struct fx f;
    struct rn_claimed *c = NULL;
    struct cn_errmsg em = {{0}};
    struct rn_done d;
    struct rn_iid id;

    fx_open(&f, pg);
    if (limited) {
        pg_exec_ok(f.admin, "SELECT cairn.limit_set('t', 5)");
    }
    fx_enqueue(&f, 4, &id);
    cr_assert_eq(claim(&f, 30000, &c), 1);
    cr_expect_not(c[0].started_before, "a new instance was started before");
    cr_expect_eq(c[0].ndone, 0);
    /* The first step went out with no write; its result is recorded, still no snapshot. */
    memset(&d, 0, sizeof(d));
    memset(d.exec_id.b, 0xE3, 16);
    d.attempt = 1;
    d.ok = true;
    d.value = ir_int(40);
    record_results(&f, &c[0], &d, 1);
    cr_assert_eq(f.b->ops->release(f.b, &c[0].lock, 1, &em), CN_OK, "%s", em.text);
    rn_claimed_free(c, 1);

    cr_assert_eq(claim(&f, 30000, &c), 1);
    cr_expect(c[0].started_before, "the second claim does not know it was started");
    cr_expect_null(c[0].state);
    cr_assert_eq(c[0].ndone, 1, "the result recorded without a snapshot was not read back");
    cr_expect_eq(c[0].done[0].value.u.i, 40);
    rn_claimed_free(c, 1);
    fx_close(&f);
}

Test(backend, memory_a_started_instance_without_a_snapshot_comes_back_with_its_results)
{
    a_started_instance_without_a_snapshot_comes_back_with_its_results(false, false);
}

Test(backend, postgres_a_started_instance_without_a_snapshot_comes_back_with_its_results)
{
    a_started_instance_without_a_snapshot_comes_back_with_its_results(true, false);
}

Test(backend, postgres_a_started_instance_under_a_limit_comes_back_with_its_results)
{
    a_started_instance_without_a_snapshot_comes_back_with_its_results(true, true);
}

/* Results recorded as steps (rn_done.step, no snapshot) come back with the next claim when
 * they are after the stored snapshot's state_step, every one of them (also an earlier attempt
 * of the same execution id); those the snapshot holds do not, and results recorded with a
 * snapshot come back as the latest per execution id, as before. */
static void
steps_after_the_snapshot_come_back_with_the_claim(bool pg)
{
    struct fx f;
    struct rn_claimed *c = NULL;
    struct cn_errmsg em = {{0}};
    struct rn_done d[5];
    struct rn_write w;
    struct rn_iid id;
    bool seen[5] = {false};
    size_t k, j;

    fx_open(&f, pg);
    fx_enqueue(&f, 4, &id);
    cr_assert_eq(claim(&f, 30000, &c), 1);
    memset(d, 0, sizeof(d));
    for (k = 0; k < 5; k++) {
        memset(d[k].exec_id.b, 0xD0 + (int) k, 16);
        d[k].attempt = 1;
        d[k].ok = true;
        d[k].value = ir_int(50 + (int64_t) k);
    }
    d[1].step = 1; /* steps 1 and 2, then a snapshot holding them with d[2] */
    d[0].step = 2;
    record_results(&f, &c[0], d, 2);
    w = write_for(&c[0]);
    w.done = &d[2];
    w.ndone = 1;
    w.state = "\x91\x02";
    w.state_len = 2;
    w.state_step = 2;
    persist(&f, &w, 1);
    d[3].step = 3; /* after the snapshot: an error, then the same id's next attempt */
    d[3].ok = false;
    d[4] = d[3];
    d[4].attempt = 2;
    d[4].ok = true;
    d[4].step = 4;
    d[4].value = ir_int(54);
    record_results(&f, &c[0], &d[3], 2);
    cr_assert_eq(f.b->ops->release(f.b, &c[0].lock, 1, &em), CN_OK, "%s", em.text);
    rn_claimed_free(c, 1);

    cr_assert_eq(claim(&f, 30000, &c), 1);
    cr_expect_eq(c[0].state_step, 2);
    cr_assert_not_null(c[0].state);
    for (k = 0; k < c[0].ndone; k++) {
        for (j = 0; j < 5; j++) {
            if (rn_xid_eq(c[0].done[k].exec_id, d[j].exec_id) &&
                c[0].done[k].attempt == d[j].attempt) {
                cr_expect_not(seen[j], "result %zu came back twice", j);
                seen[j] = true;
                cr_expect_eq(c[0].done[k].step, d[j].step, "result %zu's step", j);
                cr_expect_eq(c[0].done[k].ok, d[j].ok);
            }
        }
    }
    cr_expect_not(seen[0] || seen[1], "steps the snapshot holds came back");
    cr_expect(seen[2], "the result recorded with the snapshot did not come back");
    cr_expect(seen[3] && seen[4], "a step after the snapshot did not come back");
    cr_expect_eq(c[0].ndone, 3);
    rn_claimed_free(c, 1);
    fx_close(&f);
}

Test(backend, memory_steps_after_the_snapshot_come_back_with_the_claim)
{
    steps_after_the_snapshot_come_back_with_the_claim(false);
}

Test(backend, postgres_steps_after_the_snapshot_come_back_with_the_claim)
{
    steps_after_the_snapshot_come_back_with_the_claim(true);
}

static void
expired_leases_move_and_the_old_holder_is_fenced(bool pg)
{
    struct fx f;
    struct rn_claimed *c = NULL, *c2 = NULL;
    struct rn_write w;
    struct cn_errmsg em = {{0}};
    struct rn_iid id;
    struct rn_lease locks[2];
    enum rn_lease_state lost[2];

    fx_open(&f, pg);
    fx_enqueue(&f, 1, &id);
    cr_assert_eq(claim(&f, 50, &c), 1);
    locks[0].instance_id = c[0].instance_id;
    locks[0].lock = c[0].lock;
    cr_assert_eq(f.b->ops->heartbeat(f.b, locks, 1, 50, lost, &em), CN_OK);
    cr_assert_eq(lost[0], RN_LEASE_RENEWED, "a held lease was not renewed");
    sleep_ms(120); /* the lease expires: another claim takes it with a new token */
    cr_assert_eq(claim(&f, 30000, &c2), 1);
    cr_assert(!rn_token_eq(c2[0].lock, c[0].lock), "a new claim reused the token");
    locks[1].instance_id = c2[0].instance_id;
    locks[1].lock = c2[0].lock;
    cr_assert_eq(f.b->ops->heartbeat(f.b, locks, 2, 30000, lost, &em), CN_OK);
    cr_assert_eq(lost[0], RN_LEASE_LOST, "the old holder still holds it");
    cr_assert_eq(lost[1], RN_LEASE_RENEWED);
    w = write_for(&c[0]);
    w.state = "\x90";
    w.state_len = 1;
    persist(&f, &w, 1);
    cr_assert(w.lost, "the old holder could still write");
    /* A failed instance is never claimed again. */
    cr_assert_eq(f.b->ops->fail(f.b, c2[0].instance_id, c2[0].lock, ir_null(), &em), CN_OK);
    rn_claimed_free(c, 1);
    rn_claimed_free(c2, 1);
    sleep_ms(10);
    cr_assert_eq(claim(&f, 30000, &c), 0);
    rn_claimed_free(c, 0);
    /* release hands a lease back at once */
    fx_enqueue(&f, 2, &id);
    cr_assert_eq(claim(&f, 30000, &c), 1);
    cr_assert_eq(f.b->ops->release(f.b, &c[0].lock, 1, &em), CN_OK);
    rn_claimed_free(c, 1);
    cr_assert_eq(claim(&f, 30000, &c), 1, "a released instance was not claimable");
    rn_claimed_free(c, 1);
    fx_close(&f);
}

Test(backend, memory_expired_leases_move_and_the_old_holder_is_fenced)
{
    expired_leases_move_and_the_old_holder_is_fenced(false);
}

Test(backend, postgres_expired_leases_move_and_the_old_holder_is_fenced)
{
    expired_leases_move_and_the_old_holder_is_fenced(true);
}

static void
the_reclaimer_clears_expired_leases(bool pg)
{
    struct fx f;
    struct rn_claimed *c = NULL;
    struct cn_errmsg em = {{0}};
    struct rn_iid id;
    struct rn_lease held;
    enum rn_lease_state lost;
    size_t n = 99;

    fx_open(&f, pg);
    fx_enqueue(&f, 1, &id);
    fx_enqueue(&f, 2, &id);
    /* A 1 s lease: a shorter one could expire before the first check on a loaded machine. */
    cr_assert_eq(claim(&f, 1000, &c), 2);
    held.instance_id = c[1].instance_id;
    held.lock = c[1].lock;
    rn_claimed_free(c, 2);
    cr_assert_eq(f.b->ops->reclaim(f.b, 10, 0, &n, &em), CN_OK, "%s", em.text);
    cr_assert_eq(n, 0, "a live lease was reclaimed");
    sleep_ms(1100);
    cr_assert_eq(f.b->ops->reclaim(f.b, 1, 0, &n, &em), CN_OK, "%s", em.text);
    cr_assert_eq(n, 1, "the batch limit was not kept");
    cr_assert_eq(f.b->ops->reclaim(f.b, 10, 0, &n, &em), CN_OK, "%s", em.text);
    cr_assert_eq(n, 1);
    cr_assert_eq(f.b->ops->reclaim(f.b, 10, 0, &n, &em), CN_OK, "%s", em.text);
    cr_assert_eq(n, 0);
    cr_assert_eq(f.b->ops->heartbeat(f.b, &held, 1, 30000, &lost, &em), CN_OK);
    cr_assert_eq(lost, RN_LEASE_LOST, "a reclaimed lease can still be renewed");
    cr_assert_eq(claim(&f, 30000, &c), 2, "reclaimed instances are claimable");
    rn_claimed_free(c, 2);
    fx_close(&f);
}

/* A claim stops adding instances once their stored inputs and snapshots pass its byte budget
 * (the first is always claimed, however large); the rest are claimed next time. */
Test(backend, postgres_a_claim_is_bounded_by_bytes, .timeout = 60)
{
    struct fx f;
    struct rn_claimed *c = NULL;
    struct cn_errmsg em = {{0}};
    struct rn_iid id;
    size_t n = 0, i;

    fx_open(&f, true);
    for (i = 0; i < 4; i++) {
        fx_enqueue(&f, (int) i, &id);
    }
    /* 40 kB of incompressible snapshot each, as a long-running instance would have. */
    pg_exec_ok(f.admin, "UPDATE cairn.runner_instances SET state = (SELECT string_agg("
                        "decode(md5(random()::text || g::text), 'hex'), '') FROM"
                        " generate_series(1, 2500) g)");
    cr_assert_eq(f.b->ops->claim(f.b, 10, 100000, SIZE_MAX, SIZE_MAX, 30000, &c, &n, &em), CN_OK,
                 "%s", em.text);
    cr_assert_eq(n, 2, "two 40 kB snapshots fit in 100 kB, a third does not (got %zu)", n);
    cr_assert_eq(c[0].state_len, 40000);
    rn_claimed_free(c, n);
    cr_assert_eq(f.b->ops->claim(f.b, 10, 1000, SIZE_MAX, SIZE_MAX, 30000, &c, &n, &em), CN_OK,
                 "%s", em.text);
    cr_assert_eq(n, 1, "the first instance is claimed whatever its size");
    rn_claimed_free(c, n);
    cr_assert_eq(f.b->ops->claim(f.b, 10, SIZE_MAX, SIZE_MAX, SIZE_MAX, 30000, &c, &n, &em), CN_OK,
                 "%s", em.text);
    cr_assert_eq(n, 1, "the last one is left for the next claim");
    rn_claimed_free(c, n);
    fx_close(&f);
}

/* Renewal never waits for a row lock: a lease whose row is locked (being written) is reported
 * busy at once, the others are renewed, and once the lock is gone it is renewed too. */
Test(backend, postgres_renewal_skips_a_row_being_written, .timeout = 60)
{
    struct fx f;
    struct rn_claimed *c = NULL;
    struct cn_errmsg em = {{0}};
    struct rn_iid id;
    struct rn_lease leases[2];
    enum rn_lease_state st[2];
    char sql[160], hex[37];
    int64_t t0;

    fx_open(&f, true);
    fx_enqueue(&f, 1, &id);
    fx_enqueue(&f, 2, &id);
    cr_assert_eq(claim(&f, 30000, &c), 2);
    leases[0].instance_id = c[0].instance_id;
    leases[0].lock = c[0].lock;
    leases[1].instance_id = c[1].instance_id;
    leases[1].lock = c[1].lock;
    cn_uuid_format(c[0].instance_id.b, hex);
    (void) snprintf(sql, sizeof(sql),
                    "SELECT 1 FROM cairn.queued_instances WHERE instance_id = '%s' FOR UPDATE",
                    hex);
    pg_exec_ok(f.admin, "BEGIN");
    pg_exec_ok(f.admin, sql); /* as a write in progress would */
    t0 = cn_mono_ms();
    cr_assert_eq(f.b->ops->heartbeat(f.b, leases, 2, 30000, st, &em), CN_OK, "%s", em.text);
    cr_assert_lt(cn_mono_ms() - t0, 5000, "the renewal waited for the row lock");
    cr_assert_eq(st[0], RN_LEASE_BUSY, "a locked row's lease must be reported busy");
    cr_assert_eq(st[1], RN_LEASE_RENEWED);
    pg_exec_ok(f.admin, "COMMIT");
    cr_assert_eq(f.b->ops->heartbeat(f.b, leases, 2, 30000, st, &em), CN_OK, "%s", em.text);
    cr_assert_eq(st[0], RN_LEASE_RENEWED);
    cr_assert_eq(st[1], RN_LEASE_RENEWED);
    rn_claimed_free(c, 2);
    fx_close(&f);
}

Test(backend, memory_the_reclaimer_clears_expired_leases)
{
    the_reclaimer_clears_expired_leases(false);
}

Test(backend, postgres_the_reclaimer_clears_expired_leases)
{
    the_reclaimer_clears_expired_leases(true);
}

/* The lease keeper renews a batch of leases in one statement while the persisters lock the rows
 * of their batches: both must take row locks in one order, or they deadlock (PostgreSQL breaks
 * the cycle after deadlock_timeout, a second in which the runner writes nothing). Here a
 * thread renews 300 leases as fast as it can while batches of writes in reverse and shuffled
 * order are persisted; every call must succeed. */
struct beater {
    struct rn_backend *b;
    struct rn_lease *locks;
    size_t n;
    volatile int stop;
    int failures;
    char first_error[256];
};

static void *
beat_loop(void *arg)
{
    struct beater *bt = arg;
    enum rn_lease_state *lost = calloc(bt->n, sizeof(*lost));

    while (!bt->stop && lost != NULL) {
        struct cn_errmsg em = {{0}};
        if (bt->b->ops->heartbeat(bt->b, bt->locks, bt->n, 30000, lost, &em) != CN_OK) {
            if (bt->failures++ == 0) {
                (void) snprintf(bt->first_error, sizeof(bt->first_error), "%s", em.text);
            }
        }
    }
    free(lost);
    return NULL;
}

Test(backend, postgres_heartbeats_and_writes_never_deadlock, .timeout = 120)
{
    enum { N = 300 };
    struct fx f;
    struct rn_claimed *c = NULL;
    struct cn_errmsg em = {{0}};
    struct beater bt;
    struct rn_write *w;
    pthread_t th;
    size_t n = 0, i, round;
    char *url;

    fx_open(&f, true);
    pg_exec_ok(f.admin, "SELECT count(cairn.enqueue('t', jsonb_build_object('n', g)))"
                        " FROM generate_series(1, 300) g");
    cr_assert_eq(f.b->ops->claim(f.b, N, SIZE_MAX, SIZE_MAX, SIZE_MAX, 30000, &c, &n, &em), CN_OK,
                 "%s", em.text);
    cr_assert_eq(n, N);
    memset(&bt, 0, sizeof(bt));
    bt.n = N;
    bt.locks = calloc(N, sizeof(*bt.locks));
    w = calloc(N, sizeof(*w));
    cr_assert(bt.locks != NULL && w != NULL);
    for (i = 0; i < N; i++) {
        bt.locks[i].instance_id = c[i].instance_id;
        bt.locks[i].lock = c[i].lock;
    }
    url = url_for(f.base_url, f.dbname);
    cr_assert_eq(rn_backend_pg_open(url, &bt.b, &em), CN_OK, "%s", em.text);
    free(url);
    cr_assert_eq(pthread_create(&th, NULL, beat_loop, &bt), 0);
    srand(7);
    for (round = 0; round < 60; round++) {
        /* every write, in reverse order or shuffled, with a snapshot */
        for (i = 0; i < N; i++) {
            w[i] = write_for(&c[round % 2 == 0 ? N - 1 - i : i]);
            w[i].state = "\x91\x01";
            w[i].state_len = 2;
        }
        if (round % 2 == 1) {
            for (i = N - 1; i > 0; i--) {
                size_t j = (size_t) rand() % (i + 1);
                struct rn_write t = w[i];
                w[i] = w[j];
                w[j] = t;
            }
        }
        cr_assert_eq(f.b->ops->persist(f.b, w, N, &em), CN_OK, "round %zu: %s", round, em.text);
        for (i = 0; i < N; i++) {
            cr_assert(!w[i].lost, "round %zu: a held lease was reported lost", round);
        }
    }
    bt.stop = 1;
    pthread_join(th, NULL);
    cr_assert_eq(bt.failures, 0, "%d heartbeats failed, the first: %s", bt.failures,
                 bt.first_error);
    bt.b->ops->close(bt.b);
    free(bt.locks);
    free(w);
    rn_claimed_free(c, n);
    fx_close(&f);
}
