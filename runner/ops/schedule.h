/* SPDX-License-Identifier: MIT */
/*
 * Schedules (sql/0011_schedules.sql, docs/operations.md "Schedules"): the slots of a schedule
 * and firing the due ones. A slot is an instant; a cron schedule's slots are the minutes its
 * expression matches on the wall clock of its time zone (runner/ops/cron.c finds them as civil
 * times, PostgreSQL converts them: its zone data is the one the operator configured), an
 * `every` schedule's are evenly spaced. Over a daylight saving change a civil slot that does not
 * exist is moved an hour later by the conversion, one that exists twice is taken once (standard
 * time, PostgreSQL's reading), and a slot whose instant is not after the previous slot's is
 * dropped: no instant is fired twice.
 *
 * Threads: none of its own; each call uses the connection it is given, from one thread.
 */
#ifndef RUNNER_SCHEDULE_H
#define RUNNER_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "ir/base/err.h"

/* Missed slots a schedule with `--catch-up all` enqueues at most, and how far back. */
#define RN_SCHEDULE_CATCHUP_MAX    1000
#define RN_SCHEDULE_CATCHUP_WINDOW (24LL * 3600 * 1000)
/* A slot at most this late is on time, not missed: runners look every second, and a runner's
 * control thread may be a few seconds behind in a sweep. */
#define RN_SCHEDULE_ON_TIME_MS 10000

/* Up to n slots strictly after after_ms (wall clock, ms since the epoch) in out, *nout of
 * them: of cron (5 fields) in zone tz, or every every_ms (then from after_ms on: after_ms +
 * every_ms, ...). CN_PARSE with err for an expression that does not parse, CN_DB for a zone
 * PostgreSQL does not know or a lost connection. Fewer than n when the expression has no more
 * (February 30th). */
CN_MUST_CHECK cn_err rn_schedule_slots(PGconn *c, const char *cron, int64_t every_ms,
                                       const char *tz, int64_t after_ms, size_t n, int64_t *out,
                                       size_t *nout, struct cn_errmsg *err);

/* Fires the schedules that are due, in one transaction (FOR UPDATE SKIP LOCKED: any number of
 * runners may call it at once): computes the first slot of new ones, enqueues the due slots
 * (cairn.schedule_fire, once per slot) as catch_up says (skip: only slots on time; one: the
 * latest missed; all: every missed one of the last RN_SCHEDULE_CATCHUP_WINDOW, at most
 * RN_SCHEDULE_CATCHUP_MAX), and moves next_at on. A schedule that cannot run (its expression
 * does not parse, its workflow is gone) is paused with the reason in `error`. *fired counts
 * the instances enqueued. */
CN_MUST_CHECK cn_err rn_schedules_fire(PGconn *c, size_t *fired, struct cn_errmsg *err);

#endif
