/* SPDX-License-Identifier: MIT */
/*
 * Cron schedules: parsing the classic 5-field expression (and its @macros) into bit sets, and
 * finding the next matching minute by calendar arithmetic on civil (zone-less) minutes. Owns
 * the cron syntax and its error messages, and the civil-date helpers it needs (days since the
 * epoch, weekday, "YYYY-MM-DD HH:MM"). Time zones are the caller's business: a schedule is
 * evaluated on the wall clock of its own zone, and the caller converts to and from that zone.
 * Pure: no I/O, no clock, no allocation, no threads, nothing locks.
 *
 * Day matching follows Vixie cron, whose rule every crontab written for it assumes: when
 * neither day field starts with `*`, a day matches if either does ("0 0 13 * 5" runs on
 * Fridays and on the 13th); when one of them starts with `*`, a day must match both ("0 0 * *
 * 1" runs on Mondays only, and "0 16 *\/2 * 0-6" on odd days only, since the stepped star
 * counts as a star for this rule while its step still restricts).
 */
#ifndef RUNNER_CRON_H
#define RUNNER_CRON_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/base/err.h"

/* The longest expression rn_cron_parse accepts, in bytes (a real one is under 100). */
#define RN_CRON_MAX_LEN 256

/* The longest rn_cron_next looks ahead: the longest gap between two matches of a satisfiable
 * expression is 8 years (February 29th across a century year that is not leap: 2096 -> 2104),
 * so an expression with no match within it has none at all. */
#define RN_CRON_HORIZON_YEARS 8

/* A civil minute: a wall-clock date and time with no time zone (the schedule's own zone). */
struct rn_civil {
    int year;   /* 1970..9999 */
    int month;  /* 1..12 */
    int day;    /* 1..31 */
    int hour;   /* 0..23 */
    int minute; /* 0..59 */
};

/* A parsed 5-field cron expression (minute hour day-of-month month day-of-week). */
struct rn_cron {
    uint64_t minutes;        /* bit m: minute m matches (0..59) */
    uint32_t hours;          /* bit h (0..23) */
    uint32_t days;           /* bit d (1..31) */
    uint16_t months;         /* bit m (1..12) */
    uint8_t weekdays;        /* bit w: 0 = Sunday .. 6 = Saturday */
    bool dom_star, dow_star; /* the field starts with `*`: see the day matching above */
};

/*
 * Parses expr. Standard 5-field syntax: each field a comma-separated list of `*`, `N`, `N-M`,
 * each optionally followed by `/STEP` (`*\/15`, `10-40/10`; `N/STEP` means N-max/STEP);
 * months also JAN..DEC and days of week SUN..SAT (case-insensitive, usable in ranges); day of
 * week 7 is Sunday too (so SAT-SUN is written 6-7); fields separated by spaces or tabs; the
 * macros @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly. A step is at most
 * the number of values in its field (60 for minutes). Errors: CN_PARSE with err saying what
 * and where, columns counting bytes from 1: "column 5: minute 61 is out of range (0-59)",
 * "expected 5 fields, got 4", "column 3: step 0", "column 1: range 30-10 goes backwards",
 * unknown names and macros, unexpected characters, an empty expression, one longer than
 * RN_CRON_MAX_LEN. *out is written only on success; err may be NULL.
 */
CN_MUST_CHECK cn_err rn_cron_parse(const char *expr, struct rn_cron *out, struct cn_errmsg *err);

/* Whether the civil minute t matches c (day matching as above). t must be valid. */
bool rn_cron_matches(const struct rn_cron *c, const struct rn_civil *t);

/*
 * The first civil minute strictly after `after` that matches c, in *out. Returns false when no
 * minute matches within RN_CRON_HORIZON_YEARS after `after` (then none ever does: "0 0 30 2 *",
 * February 30th), when the result would pass year 9999, when `after` is not a valid civil
 * minute (rn_civil_valid), or when a field of c is empty. Pure calendar arithmetic (proleptic
 * Gregorian), no time zone: the caller converts to and from its zone. Skips whole months, days
 * and hours that cannot match, so a search visits at most a few hundred candidates. out may
 * be after (stepping through a schedule in place).
 */
bool rn_cron_next(const struct rn_cron *c, const struct rn_civil *after, struct rn_civil *out);

/* Days since 1970-01-01 of a civil date (negative before it), and the inverse; the weekday
 * (0 = Sunday) of a civil date. Proleptic Gregorian, valid far beyond years 1970..9999; the
 * date is not checked (day 0 is the last day of the month before). */
int64_t rn_civil_days(int year, int month, int day);
void rn_civil_from_days(int64_t days, int *year, int *month, int *day);
int rn_civil_weekday(int year, int month, int day);

/* The number of days in a month (28..31); 0 when month is not 1..12. */
int rn_civil_days_in_month(int year, int month);

/* Whether every field of t is in range: year 1970..9999, a day that exists in its month. */
bool rn_civil_valid(const struct rn_civil *t);

/* Formats "YYYY-MM-DD HH:MM" (16 chars + NUL) into buf (17 bytes at least). t must be valid
 * (an out-of-range field is written modulo its width, never past buf). */
void rn_civil_format(const struct rn_civil *t, char *buf);

/* Parses that format (also accepts a trailing ":SS", ignored, and a 'T' instead of the space);
 * false on anything else or out-of-range fields (Feb 30th, year 1969...). */
bool rn_civil_parse(const char *s, struct rn_civil *out);

#endif
