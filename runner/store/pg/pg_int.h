/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL backend's insides, shared by the files of runner/store/pg/ (README.md there
 * says which owns what): the backend's state, the binary array parameters, and each file's
 * functions. Not for use outside this folder: the engine goes through runner/store/backend.h.
 *
 * Threads: a backend (its one connection) is used by one thread at a time.
 */
#ifndef RUNNER_STORE_PG_PG_INT_H
#define RUNNER_STORE_PG_PG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"
#include "ir/value.h"
#include "runner/store/backend.h"

struct pg_backend {
    struct rn_backend base;
    char *url;
    PGconn *c;
    bool listening;            /* LISTEN cairn_enqueue issued on c */
    bool listening_notices;    /* LISTEN cairn_cancel and cairn_child issued on c */
    bool prepared;             /* the persist statements are prepared on c */
    bool claim_prepared;       /* the one-tenant claim without limits is prepared on c */
    bool generic;              /* plan_cache_mode is force_generic_plan on c */
    bool limits;               /* some workflow has a concurrency limit (checked every second) */
    bool tenants;              /* there is more than the default tenant (checked with limits) */
    int64_t limits_checked_ms; /* monotonic; 0: never */
    char claimer[37];          /* this claimer's id in cairn.claim_waits ("": not drawn yet) */
};

/* How often the claim asks whether any workflow has a concurrency limit: a limit set or a
 * first concurrency key takes at most this long to be claimed for. */
#define PG_LIMITS_CHECK_MS 1000

/* A persist that sent more than this reconnects afterwards (see pg_persist). */
#define PG_BIG_WRITE (4u << 20)

/* ---- conn.c: the connection ---------------------------------------------------------------- */

cn_err pg_conn(struct pg_backend *b, struct cn_errmsg *err);
cn_err pg_exec_bin(struct pg_backend *b, const char *sql, int n, const char *const *params,
                   PGresult **out, struct cn_errmsg *err);
cn_err pg_simple(struct pg_backend *b, const char *sql, struct cn_errmsg *err);
void pg_rollback(struct pg_backend *b);

/* ---- params.c: parameters in binary --------------------------------------------------------- */

/* A one-dimensional array in PostgreSQL's binary format (array_recv), built one element at a
 * time: every array parameter the runner sends. Their text form cost the server array_in,
 * uuid_in and hex decoding of every element, about a tenth of its time in the sequence
 * benchmark, and the runner the hex encoding of every snapshot and result (twice the bytes on
 * the wire). */
struct barr {
    struct cn_buf b;
    uint32_t oid; /* the element type: one of the PG_OID_ below */
    uint32_t n;
    bool nulls, bad;
};

/* Element types' OIDs (pg_type.dat): fixed since PostgreSQL 8.3. */
#define PG_OID_BOOL  16u
#define PG_OID_BYTEA 17u
#define PG_OID_INT8  20u
#define PG_OID_INT4  23u
#define PG_OID_TEXT  25u
#define PG_OID_UUID  2950u
/* ndim, flags, element type, then one dimension: its length and lower bound */
#define BARR_HEADER 20u

/* A statement's parameters for pg_exec_args: scalars in text form, arrays in binary. One past
 * PA_MAX marks them bad (the statement is then not run). */
#define PA_MAX 6
struct pargs {
    const char *v[PA_MAX];
    int len[PA_MAX], fmt[PA_MAX];
    int n;
    bool bad;
};

void pg_barr_begin(struct barr *a, uint32_t oid);
void pg_barr_put(struct barr *a, const void *p, size_t len);
void pg_barr_null(struct barr *a);
void pg_barr_uuid(struct barr *a, const uint8_t id[16]);
void pg_barr_int(struct barr *a, int64_t v);
void pg_barr_bool(struct barr *a, bool v);
/* Begins a uuid[] in a from the n ids (of any id kind: struct rn_iid, rn_xid, rn_token). */
#define PG_BARR_IDS(a, ids, n)              \
    do {                                    \
        size_t k_;                          \
        pg_barr_begin((a), PG_OID_UUID);    \
        for (k_ = 0; k_ < (n); k_++) {      \
            pg_barr_uuid((a), (ids)[k_].b); \
        }                                   \
    } while (0)
const char *pg_barr_end(struct barr *a, int *len);
void pg_barr_fini(struct barr *a);
void pg_pa_text(struct pargs *g, const char *s);
void pg_pa_array(struct pargs *g, struct barr *a);
cn_err pg_exec_args(struct pg_backend *b, const char *sql, const struct pargs *g, PGresult **out,
                    struct cn_errmsg *err);
/* Runs sql with the array a (begun with PG_BARR_IDS) as its one parameter, $1, and frees a. */
cn_err pg_exec_array(struct pg_backend *b, const char *sql, struct barr *a, PGresult **out,
                     struct cn_errmsg *err);
uint32_t pg_be32(const char *p);
int64_t pg_get_i64(PGresult *r, int row, int col);
bool pg_get_uuid(PGresult *r, int row, int col, uint8_t out[16]);

/* ---- claim.c: the claim, hydration, prepared statements ------------------------------------ */

cn_err pg_plan_mode(struct pg_backend *b, bool generic, struct cn_errmsg *err);
cn_err pg_prepare_stmt(struct pg_backend *b, const char *name, const char *sql, int nparams,
                       struct cn_errmsg *err);
cn_err pg_claim(struct rn_backend *base, size_t max, size_t max_bytes, size_t max_orphans,
                size_t max_fresh, int64_t lease_ms, struct rn_claimed **out, size_t *nout,
                struct cn_errmsg *err);
cn_err pg_version_source(struct rn_backend *base, struct rn_vid version_id, char **src,
                         struct cn_errmsg *err);

/* ---- persist.c: the persisters' fenced writes ----------------------------------------------- */

bool pg_json_text(struct ir_val v, struct cn_buf *out);
cn_err pg_persist(struct rn_backend *base, struct rn_write *w, size_t n, struct cn_errmsg *err);

/* ---- lease.c: leases and the wait for work ------------------------------------------------- */

cn_err pg_heartbeat(struct rn_backend *base, const struct rn_lease *leases, size_t n,
                    int64_t lease_ms, enum rn_lease_state *st, struct cn_errmsg *err);
cn_err pg_release(struct rn_backend *base, const struct rn_token *locks, size_t n,
                  struct cn_errmsg *err);
cn_err pg_fail(struct rn_backend *base, struct rn_iid instance_id, struct rn_token lock,
               struct ir_val error, struct cn_errmsg *err);
cn_err pg_reclaim(struct rn_backend *base, size_t max, int64_t grace_ms, size_t *n,
                  struct cn_errmsg *err);
cn_err pg_wait_notify(struct pg_backend *b, const char *listen_sql, bool *listening, int timeout_ms,
                      void (*each)(const PGnotify *nt, void *arg), void *arg,
                      struct cn_errmsg *err);
cn_err pg_wait_enqueue(struct rn_backend *base, int timeout_ms, struct cn_errmsg *err);
cn_err pg_announce_wait(struct rn_backend *base, int64_t for_ms, struct cn_errmsg *err);

/* ---- control.c: cancels, children, late results -------------------------------------------- */

cn_err pg_wait_notices(struct rn_backend *base, int timeout_ms, rn_cancel_fn fn,
                       rn_child_done_fn child_fn, void *arg, struct cn_errmsg *err);
cn_err pg_child_results(struct rn_backend *base, const struct rn_child_link *calls, size_t n,
                        struct rn_done *out, struct cn_errmsg *err);
cn_err pg_sweep_children(struct rn_backend *base, size_t *nout, struct cn_errmsg *err);
cn_err pg_cancel_children(struct rn_backend *base, struct rn_iid parent,
                          const struct rn_xid *exec_ids, size_t n, const char *reason,
                          struct cn_errmsg *err);
/* What a finished child hands its parent's call (control.c), from its stored outcome. */
cn_err pg_child_value(const char *status, const char *result, const char *error,
                      struct rn_iid child, const char *workflow, bool *ok, struct ir_val *out);
cn_err pg_sweep_cancels(struct rn_backend *base, rn_cancel_fn fn, void *arg, struct cn_errmsg *err);
cn_err pg_record_late(struct rn_backend *base, const struct rn_late_result *l, size_t n,
                      struct cn_errmsg *err);

/* ---- ops.c: retention, backfills, schedules ------------------------------------------------- */

cn_err pg_prune_due(struct rn_backend *base, int64_t retention_s, size_t batch,
                    char cursor[RN_PRUNE_CURSOR_LEN], struct rn_prune_counts *n,
                    struct cn_errmsg *err);
cn_err pg_signal_stats(struct rn_backend *base, struct rn_signal_stat *out, struct cn_errmsg *err);
cn_err pg_tick_backfills(struct rn_backend *base, struct rn_backfill_stat **out, size_t *n,
                         struct cn_errmsg *err);
cn_err pg_fire_schedules(struct rn_backend *base, size_t *n, struct cn_errmsg *err);

#endif
