/* SPDX-License-Identifier: MIT */
/* Cron expressions: every field form, names, macros, each error with its column; the next
 * matching minute across calendar boundaries, leap years, impossible dates and Vixie's
 * day-of-month/day-of-week rule, cross-checked against a minute-by-minute search; the civil
 * date helpers. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "runner/ops/cron.h"
#include "tests/support/civil_cmp.h"
#include "tests/support/leak.h"

TestSuite(cron, .fini = t_leak_check, .timeout = 120);

/* ---- helpers ---- */

static struct rn_cron
parse_ok(const char *expr)
{
    struct rn_cron c;
    struct cn_errmsg em = {{0}};

    cr_assert_eq(rn_cron_parse(expr, &c, &em), CN_OK, "%s: %s", expr, em.text);
    return c;
}

/* The bit set of a list of values, ended by -1. */
static uint64_t
set_of(const int *v)
{
    uint64_t s = 0;

    for (; *v >= 0; v++) {
        s |= UINT64_C(1) << *v;
    }
    return s;
}

#define SET(...) set_of((const int[]){__VA_ARGS__, -1})

static uint64_t
range_set(int lo, int hi, int step)
{
    uint64_t s = 0;

    for (int v = lo; v <= hi; v += step) {
        s |= UINT64_C(1) << v;
    }
    return s;
}

/* rn_cron_next of expr after the civil minute `after`, formatted, or "none". */
static const char *
next_after(const char *expr, const char *after, char buf[17])
{
    struct rn_cron c = parse_ok(expr);
    struct rn_civil a, r;

    cr_assert(rn_civil_parse(after, &a), "%s", after);
    if (!rn_cron_next(&c, &a, &r)) {
        return "none";
    }
    rn_civil_format(&r, buf);
    return buf;
}

/* The n matches after `after`, each formatted, joined by ", ". */
static const char *
next_n(const char *expr, const char *after, int n, char *buf, size_t size)
{
    struct rn_cron c = parse_ok(expr);
    struct rn_civil t;
    size_t len = 0;

    cr_assert(rn_civil_parse(after, &t), "%s", after);
    buf[0] = '\0';
    for (int i = 0; i < n && rn_cron_next(&c, &t, &t); i++) {
        char one[17];
        rn_civil_format(&t, one);
        cr_assert_lt(len + 19, size);
        len += (size_t) snprintf(buf + len, size - len, "%s%s", i > 0 ? ", " : "", one);
    }
    return buf;
}

/* A next_after case: the match of expr after the minute `after` is want ("none": no match). */
struct next_case {
    const char *expr, *after, *want;
};

static void
expect_next(const struct next_case *cases, size_t n)
{
    char b[17];

    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(next_after(cases[i].expr, cases[i].after, b), cases[i].want,
                         "\"%s\" after %s", cases[i].expr, cases[i].after);
    }
}

/* A next_n case: the first n matches of expr after `after`, joined by ", ", are want. */
struct next_n_case {
    const char *expr, *after;
    int n;
    const char *want;
};

static void
expect_next_n(const struct next_n_case *cases, size_t n)
{
    char b[200];

    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(next_n(cases[i].expr, cases[i].after, cases[i].n, b, sizeof(b)),
                         cases[i].want, "\"%s\" after %s", cases[i].expr, cases[i].after);
    }
}

/* ---- parsing ---- */

Test(cron, a_star_matches_every_value_of_its_field)
{
    struct rn_cron c = parse_ok("* * * * *");

    cr_assert_eq(c.minutes, range_set(0, 59, 1));
    cr_assert_eq(c.hours, range_set(0, 23, 1));
    cr_assert_eq(c.days, range_set(1, 31, 1));
    cr_assert_eq(c.months, range_set(1, 12, 1));
    cr_assert_eq(c.weekdays, range_set(0, 6, 1));
    cr_assert(c.dom_star);
    cr_assert(c.dow_star);
}

Test(cron, single_values_ranges_and_lists_set_their_bits)
{
    struct rn_cron c = parse_ok("5 0-3 1,15,31 2-4,12 1-5");

    cr_assert_eq(c.minutes, SET(5));
    cr_assert_eq(c.hours, SET(0, 1, 2, 3));
    cr_assert_eq(c.days, SET(1, 15, 31));
    cr_assert_eq(c.months, SET(2, 3, 4, 12));
    cr_assert_eq(c.weekdays, SET(1, 2, 3, 4, 5));
    cr_assert_not(c.dom_star);
    cr_assert_not(c.dow_star);
}

Test(cron, steps_apply_to_stars_ranges_and_single_values)
{
    struct rn_cron c = parse_ok("*/15 10-20/5 5/7 */5 */2");

    cr_assert_eq(c.minutes, SET(0, 15, 30, 45));
    cr_assert_eq(c.hours, SET(10, 15, 20));
    cr_assert_eq(c.days, SET(5, 12, 19, 26));
    cr_assert_eq(c.months, SET(1, 6, 11));
    cr_assert_eq(c.weekdays, SET(0, 2, 4, 6));
}

Test(cron, a_range_with_a_step_starts_at_its_low_end)
{
    cr_assert_eq(parse_ok("5-59/20 * * * *").minutes, SET(5, 25, 45));
    cr_assert_eq(parse_ok("10-40/10 * * * *").minutes, SET(10, 20, 30, 40));
    cr_assert_eq(parse_ok("50/5 * * * *").minutes, SET(50, 55)); /* N/STEP: N to 59 */
    cr_assert_eq(parse_ok("*/60 * * * *").minutes, SET(0));      /* the largest step */
}

Test(cron, lists_mix_every_item_form)
{
    struct rn_cron c = parse_ok("1,10-12,*/20,50/4 * * * *");

    cr_assert_eq(c.minutes, SET(0, 1, 10, 11, 12, 20, 40, 50, 54, 58));
}

Test(cron, month_and_weekday_names_are_case_insensitive_and_work_in_ranges)
{
    struct rn_cron c = parse_ok("0 0 * jan-Mar,DEC,jUl mon-fri");

    cr_assert_eq(c.months, SET(1, 2, 3, 7, 12));
    cr_assert_eq(c.weekdays, SET(1, 2, 3, 4, 5));
    c = parse_ok("0 0 * FEB-nov/3 SUN,sat,Wed");
    cr_assert_eq(c.months, SET(2, 5, 8, 11));
    cr_assert_eq(c.weekdays, SET(0, 3, 6));
    c = parse_ok("0 0 * 1-MAR TUE-5");
    cr_assert_eq(c.months, SET(1, 2, 3));
    cr_assert_eq(c.weekdays, SET(2, 3, 4, 5));
}

Test(cron, weekday_7_is_sunday)
{
    cr_assert_eq(parse_ok("0 0 * * 7").weekdays, SET(0));
    cr_assert_eq(parse_ok("0 0 * * 5-7").weekdays, SET(0, 5, 6));
    cr_assert_eq(parse_ok("0 0 * * 0,7").weekdays, SET(0));
    cr_assert_eq(parse_ok("0 0 * * 0-7").weekdays, range_set(0, 6, 1));
    cr_assert_eq(parse_ok("0 0 * * sat-7").weekdays, SET(0, 6));
    cr_assert_eq(parse_ok("0 0 * * 7/2").weekdays, SET(0));
}

Test(cron, fields_may_be_separated_by_runs_of_spaces_and_tabs)
{
    struct rn_cron c = parse_ok(" \t0\t\t12  *\t* \t 1 ");

    cr_assert_eq(c.minutes, SET(0));
    cr_assert_eq(c.hours, SET(12));
    cr_assert_eq(c.weekdays, SET(1));
}

Test(cron, leading_zeros_are_allowed)
{
    cr_assert_eq(parse_ok("05 007 01 02 00").minutes, SET(5));
}

/* Vixie's rule: a day field that starts with `*` counts as a star, whatever follows. */
Test(cron, a_day_field_starting_with_a_star_counts_as_a_star)
{
    struct rn_cron c = parse_ok("0 0 */1 * */1");

    cr_assert(c.dom_star);
    cr_assert(c.dow_star);
    c = parse_ok("0 0 */2 * 1-7");
    cr_assert(c.dom_star);     /* a stepped star: a star for the day rule, its step restricts */
    cr_assert_not(c.dow_star); /* every day, but written as a range */
    cr_assert_eq(c.days, range_set(1, 31, 2));
    c = parse_ok("0 0 *,1 * *");
    cr_assert(c.dom_star);
    c = parse_ok("0 0 1-31 * 1");
    cr_assert_not(c.dom_star);
}

Test(cron, macros_expand_to_their_five_fields)
{
    static const struct {
        const char *macro, *fields;
    } cases[] = {
        {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"},  {"@monthly", "0 0 1 * *"},
        {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},     {"@midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"}, {"  @Daily\t", "0 0 * * *"}, {"@HOURLY", "0 * * * *"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rn_cron a = parse_ok(cases[i].macro), b = parse_ok(cases[i].fields);
        cr_assert(memcmp(&a, &b, sizeof(a)) == 0, "%s", cases[i].macro);
    }
}

Test(cron, each_error_says_what_and_where)
{
    static const struct {
        const char *expr, *msg;
    } cases[] = {
        {"61 * * * *", "column 1: minute 61 is out of range (0-59)"},
        {"1,2,61 * * * *", "column 5: minute 61 is out of range (0-59)"},
        {"0 24 * * *", "column 3: hour 24 is out of range (0-23)"},
        {"0 0 0 * *", "column 5: day of month 0 is out of range (1-31)"},
        {"0 0 32 * *", "column 5: day of month 32 is out of range (1-31)"},
        {"0 0 * 13 *", "column 7: month 13 is out of range (1-12)"},
        {"0 0 * 0 *", "column 7: month 0 is out of range (1-12)"},
        {"0 0 * * 8", "column 9: day of week 8 is out of range (0-7)"},
        {"99999999999 * * * *", "column 1: minute 99999999999 is out of range (0-59)"},
        {"12345678901234567890 * * * *",
         "column 1: minute 1234567890123456... is out of range (0-59)"},
        {"* * * *", "expected 5 fields, got 4"},
        {"*", "expected 5 fields, got 1"},
        {"* * * * * *", "expected 5 fields, got 6"},
        {"*/0 * * * *", "column 3: step 0"},
        {"0 1-5/0 * * *", "column 7: step 0"},
        {"*/61 * * * *", "column 3: step 61 is out of range (1-60)"},
        {"0 0 * * */8", "column 11: step 8 is out of range (1-7)"},
        {"30-10 * * * *", "column 1: range 30-10 goes backwards"},
        {"0 0 * DEC-JAN *", "column 7: range DEC-JAN goes backwards"},
        {"0 0 * * SAT-SUN", "column 9: range SAT-SUN goes backwards (Sunday is also 7)"},
        {"0 0 * FOO *", "column 7: unknown month name 'FOO' (JAN..DEC)"},
        {"0 0 * january *", "column 7: unknown month name 'january' (JAN..DEC)"},
        {"0 0 * * FRIDAY", "column 9: unknown day name 'FRIDAY' (SUN..SAT)"},
        {"0 0 * * MON-FRIDAY", "column 13: unknown day name 'FRIDAY' (SUN..SAT)"},
        {"abc * * * *",
         "column 1: 'abc' in the minute field: only months and days of the week have names"},
        {"0 0 jan * *", "column 5: 'jan' in the day of month field: only months and days of the "
                        "week have names"},
        {"5x * * * *", "column 2: unexpected 'x' in the minute field"},
        {"0 0 * * 1-5,", "column 13: expected a number or a name in the day of week field, "
                         "found the end of the field"},
        {"1- * * * *", "column 3: expected a number in the minute field, found the end of the "
                       "field"},
        {"1,,2 * * * *", "column 3: expected a number in the minute field, found ','"},
        {"? * * * *", "column 1: expected a number in the minute field, found '?'"},
        {"*-5 * * * *", "column 2: unexpected '-' in the minute field"},
        {"1/2/3 * * * *", "column 4: unexpected '/' in the minute field"},
        {"*/ * * * *", "column 3: expected a step (a number) in the minute field, found the end "
                       "of the field"},
        {"*/a * * * *", "column 3: expected a step (a number) in the minute field, found 'a'"},
        {"0 0 * * 1\n", "column 10: unexpected byte 0x0a in the day of week field"},
        {"0 0 * * 1\r", "column 10: unexpected byte 0x0d in the day of week field"},
        {"0 \x01 * * *", "column 3: expected a number in the hour field, found byte 0x01"},
        {"", "empty expression"},
        {" \t  ", "empty expression"},
        {"@reboot", "column 1: unknown macro '@reboot' (@yearly, @annually, @monthly, @weekly, "
                    "@daily, @midnight, @hourly)"},
        {"  @", "column 3: unknown macro '@' (@yearly, @annually, @monthly, @weekly, @daily, "
                "@midnight, @hourly)"},
        {"@daily x", "column 8: unexpected 'x' after @daily"},
        {"@daily5", "column 7: unexpected '5' after @daily"},
        {"@daily 0 0 * * *", "column 8: unexpected '0' after @daily"},
        {"0 @daily * * *", "column 3: expected a number in the hour field, found '@'"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rn_cron c;
        struct cn_errmsg em = {{0}};
        cr_assert_eq(rn_cron_parse(cases[i].expr, &c, &em), CN_PARSE, "%s", cases[i].expr);
        cr_assert_str_eq(em.text, cases[i].msg, "%s", cases[i].expr);
    }
}

Test(cron, an_over_long_expression_is_refused_whatever_it_holds)
{
    char expr[RN_CRON_MAX_LEN + 2];
    struct rn_cron c;
    struct cn_errmsg em = {{0}};

    /* Exactly the limit is fine: "* * * * *" padded with spaces. */
    memset(expr, ' ', sizeof(expr));
    memcpy(expr, "* * * * *", 9);
    expr[RN_CRON_MAX_LEN] = '\0';
    cr_assert_eq(rn_cron_parse(expr, &c, &em), CN_OK, "%s", em.text);
    expr[RN_CRON_MAX_LEN] = ' ';
    expr[RN_CRON_MAX_LEN + 1] = '\0';
    cr_assert_eq(rn_cron_parse(expr, &c, &em), CN_PARSE);
    cr_assert_str_eq(em.text, "expression is longer than 256 bytes");
}

Test(cron, a_failed_parse_leaves_the_output_alone_and_takes_a_null_message)
{
    struct rn_cron c, before;

    memset(&c, 0xa5, sizeof(c));
    before = c;
    cr_assert_eq(rn_cron_parse("61 * * * *", &c, NULL), CN_PARSE);
    cr_assert(memcmp(&c, &before, sizeof(c)) == 0);
}

/* ---- the next matching minute ---- */

/* Known next minutes, grouped by what they check. */
Test(cron, next_gives_the_known_minute)
{
    static const struct next_case cases[] = {
        /* Next crosses minute and hour boundaries: */
        {"* * * * *", "2026-03-10 12:34", "2026-03-10 12:35"},
        {"* * * * *", "2026-03-10 12:59", "2026-03-10 13:00"},
        {"15 * * * *", "2026-03-10 12:20", "2026-03-10 13:15"},
        {"15,45 * * * *", "2026-03-10 12:20", "2026-03-10 12:45"},
        {"0 9-17 * * *", "2026-03-10 17:00", "2026-03-11 09:00"},
        /* Next crosses day, month and year boundaries: */
        {"* * * * *", "2026-03-10 23:59", "2026-03-11 00:00"},
        {"0 6 * * *", "2026-03-10 07:00", "2026-03-11 06:00"},
        {"0 0 * * *", "2026-04-30 12:00", "2026-05-01 00:00"},
        {"* * * * *", "2026-02-28 23:59", "2026-03-01 00:00"},
        {"* * * * *", "2028-02-28 23:59", "2028-02-29 00:00"},
        {"* * * * *", "2026-12-31 23:59", "2027-01-01 00:00"},
        {"0 0 31 * *", "2026-04-01 00:00", "2026-05-31 00:00"},
        {"30 4 * jun *", "2026-07-01 00:00", "2027-06-01 04:30"},
        {"0 12 1 */3 *", "2026-11-15 00:00", "2027-01-01 12:00"},
        /* Next takes the first day of a run after a day that does not match: */
        {"0 0 5,6 * *", "2026-01-04 12:00", "2026-01-05 00:00"},
        {"0 0 2-5 3 *", "2026-01-10 00:00", "2026-03-02 00:00"},
        {"0 0 1 3 *", "2026-01-10 00:00", "2026-03-01 00:00"},
        {"0 0 * 3 2", "2026-01-10 00:00", "2026-03-03 00:00"},
        {"0 0 * 3 0", "2026-01-10 00:00", "2026-03-01 00:00"},
        /* Feb 29th waits for a leap year: */
        {"0 0 29 2 *", "2026-01-01 00:00", "2028-02-29 00:00"},
        {"0 0 29 2 *", "1999-03-01 00:00", "2000-02-29 00:00"},
        /* 2100 is not a leap year: the longest gap there is, 8 years, is still found. */
        {"0 0 29 2 *", "2096-02-29 00:00", "2104-02-29 00:00"},
        {"0 0 * 2 *", "2100-02-28 00:00", "2101-02-01 00:00"},
        /* Impossible dates have no next minute: */
        {"0 0 30 2 *", "2026-01-01 00:00", "none"},
        {"0 0 31 2,4,6,9,11 *", "2026-01-01 00:00", "none"},
        /* With a weekday too, either may match: Fridays in February. */
        {"0 0 30 2 5", "2026-03-01 00:00", "2027-02-05 00:00"},
        /* Nothing is found past year 9999: */
        {"* * * * *", "9999-12-31 23:58", "9999-12-31 23:59"},
        {"* * * * *", "9999-12-31 23:59", "none"},
        {"0 0 1 1 *", "9999-06-01 00:00", "none"},
        /* Next is strictly after a matching minute: */
        {"30 9 * * *", "2026-03-10 09:30", "2026-03-11 09:30"},
        {"* * * * *", "2026-03-10 09:30", "2026-03-10 09:31"},
        /* The sparse case far away: a yearly expression from its own minute. */
        {"0 0 1 1 *", "2026-01-01 00:00", "2027-01-01 00:00"},
        {"@yearly", "2026-01-01 00:01", "2027-01-01 00:00"},
        {"59 23 31 12 *", "2026-01-01 00:00", "2026-12-31 23:59"},
    };

    expect_next(cases, sizeof(cases) / sizeof(cases[0]));
}

/* Known runs of next minutes, grouped by what they check. */
Test(cron, next_gives_the_known_runs_of_minutes)
{
    static const struct next_n_case cases[] = {
        /* Day of month or day of week when both are restricted: */
        /* Fridays, and the 13th (a Monday in April 2026). */
        {"0 0 13 * 5", "2026-04-01 00:00", 6,
         "2026-04-03 00:00, 2026-04-10 00:00, 2026-04-13 00:00, 2026-04-17 00:00, "
         "2026-04-24 00:00, 2026-05-01 00:00"},
        /* A star day field leaves only the other one: */
        {"0 0 * * 1", "2026-02-01 00:00", 4,
         "2026-02-02 00:00, 2026-02-09 00:00, 2026-02-16 00:00, 2026-02-23 00:00"},
        {"0 0 13 * *", "2026-02-01 00:00", 3,
         "2026-02-13 00:00, 2026-03-13 00:00, 2026-04-13 00:00"},
        {"0 0 * * 7", "2026-04-01 00:00", 3,
         "2026-04-05 00:00, 2026-04-12 00:00, 2026-04-19 00:00"},
        {"0 0 * * fri-7", "2026-04-01 00:00", 5,
         "2026-04-03 00:00, 2026-04-04 00:00, 2026-04-05 00:00, 2026-04-10 00:00, "
         "2026-04-11 00:00"},
        /* A stepped star counts as a star (Vixie): both fields must match, so odd days only,
         * where the OR of two restricted fields would give every day. */
        {"0 16 */2 * 0-6", "2026-04-29 17:00", 4,
         "2026-05-01 16:00, 2026-05-03 16:00, 2026-05-05 16:00, 2026-05-07 16:00"},
        {"0 0 * * */2", "2026-04-01 00:00", 4, /* Sundays, Tuesdays, Thursdays, Saturdays */
         "2026-04-02 00:00, 2026-04-04 00:00, 2026-04-05 00:00, 2026-04-07 00:00"},
        {"0 0 1-31 * 1-5", "2026-04-03 00:00", 2, /* both restricted, one is every day */
         "2026-04-04 00:00, 2026-04-05 00:00"},
        /* Steps give every nth minute across the hour: */
        {"*/15 * * * *", "2026-03-10 12:00", 5,
         "2026-03-10 12:15, 2026-03-10 12:30, 2026-03-10 12:45, 2026-03-10 13:00, "
         "2026-03-10 13:15"},
        {"5-59/20 * * * *", "2026-03-10 12:30", 4,
         "2026-03-10 12:45, 2026-03-10 13:05, 2026-03-10 13:25, 2026-03-10 13:45"},
    };

    expect_next_n(cases, sizeof(cases) / sizeof(cases[0]));
}

Test(cron, matches_applies_the_same_day_rule)
{
    struct rn_cron c = parse_ok("0 0 13 * 5");
    struct rn_civil mon13 = {2026, 4, 13, 0, 0}, fri3 = {2026, 4, 3, 0, 0},
                    tue14 = {2026, 4, 14, 0, 0}, fri3_late = {2026, 4, 3, 0, 1};

    cr_assert(rn_cron_matches(&c, &mon13));
    cr_assert(rn_cron_matches(&c, &fri3));
    cr_assert_not(rn_cron_matches(&c, &tue14));
    cr_assert_not(rn_cron_matches(&c, &fri3_late));
    c = parse_ok("0 0 * * 1");
    cr_assert(rn_cron_matches(&c, &mon13));
    cr_assert_not(rn_cron_matches(&c, &fri3));
}

Test(cron, next_may_step_a_schedule_in_place)
{
    struct rn_cron c = parse_ok("0 */6 * * *");
    struct rn_civil t = {2026, 12, 31, 13, 0};
    char b[17];

    cr_assert(rn_cron_next(&c, &t, &t));
    cr_assert(rn_cron_next(&c, &t, &t));
    rn_civil_format(&t, b);
    cr_assert_str_eq(b, "2027-01-01 00:00");
}

Test(cron, an_invalid_start_or_an_empty_field_finds_nothing)
{
    struct rn_cron c = parse_ok("* * * * *"), empty;
    struct rn_civil bad[] = {
        {2026, 2, 30, 0, 0}, {2026, 13, 1, 0, 0},    {2026, 1, 1, 24, 0},
        {2026, 1, 1, 0, 60}, {1969, 12, 31, 23, 59}, {10000, 1, 1, 0, 0},
    };
    struct rn_civil ok = {2026, 1, 1, 0, 0}, r;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_not(rn_cron_next(&c, &bad[i], &r), "case %zu", i);
    }
    empty = c;
    empty.hours = 0;
    cr_assert_not(rn_cron_next(&empty, &ok, &r));
    empty = c;
    empty.minutes = UINT64_C(1) << 60; /* only bits past 59 */
    cr_assert_not(rn_cron_next(&empty, &ok, &r));
}

/* ---- cross-check against a minute-by-minute search ---- */

static uint64_t rng_state;

static uint64_t
rng(void)
{
    /* xorshift64*: a fixed seed, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * UINT64_C(2685821657736338717);
}

static int
rnd(int lo, int hi)
{
    return lo + (int) (rng() % (uint64_t) (hi - lo + 1));
}

/* Independent of runner/ops/cron.c on purpose: the naive search must not share its bugs. */
static int
naive_dim(int y, int m)
{
    static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : d[m - 1];
}

/* Sakamoto's weekday (0 = Sunday). */
static int
naive_weekday(int y, int m, int d)
{
    static const int t[] = {0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4};
    if (m < 3) {
        y -= 1;
    }
    return (y + y / 4 - y / 100 + y / 400 + t[m - 1] + d) % 7;
}

/* A value of [lo, hi], one time in three at or next to an end (where off-by-ones live). */
static int
rnd_value(int lo, int hi)
{
    if (rng() % 3 == 0) {
        int k = (int) (rng() % 4), v = k < 2 ? lo + k : hi - (k - 2);
        return v < lo ? lo : v > hi ? hi : v; /* a narrow range has fewer ends */
    }
    return rnd(lo, hi);
}

static void
append_field(char *buf, size_t size, int lo, int hi, const char *const *names, int names_base,
             int nnames)
{
    int items = rng() % 3 == 0 ? 1 : rnd(1, 3);

    if (rng() % 3 == 0) {
        strncat(buf, "*", size - strlen(buf) - 1);
        return;
    }
    for (int i = 0; i < items; i++) {
        char item[32];
        /* Steps up to the field's size: 7 for the day of week, whose 7 is an alias. */
        int a = rnd_value(lo, hi), b = rnd_value(a, hi), step = rnd(1, hi == 7 ? 7 : hi - lo + 1);
        switch (rng() % 6) {
        case 0:
            snprintf(item, sizeof(item), "%d", a);
            break;
        case 1:
            snprintf(item, sizeof(item), "%d-%d", a, b);
            break;
        case 2:
            snprintf(item, sizeof(item), "*/%d", step);
            break;
        case 3:
            snprintf(item, sizeof(item), "%d-%d/%d", a, b, step);
            break;
        case 4:
            snprintf(item, sizeof(item), "%d/%d", a, step);
            break;
        default:
            if (names != NULL && a - names_base < nnames && b - names_base < nnames) {
                snprintf(item, sizeof(item), "%s-%s", names[a - names_base], names[b - names_base]);
            } else {
                snprintf(item, sizeof(item), "%d", a);
            }
            break;
        }
        if (i > 0) {
            strncat(buf, ",", size - strlen(buf) - 1);
        }
        strncat(buf, item, size - strlen(buf) - 1);
    }
}

static bool
naive_matches(const struct rn_cron *c, const struct rn_civil *t, int wd)
{
    bool dom = (c->days >> t->day) & 1, dow = (c->weekdays >> wd) & 1;
    bool day = c->dom_star || c->dow_star ? dom && dow : dom || dow;
    return day && ((c->minutes >> t->minute) & 1) && ((c->hours >> t->hour) & 1) &&
           ((c->months >> t->month) & 1);
}

/* Steps t one minute on, keeping *wd its weekday. */
static void
naive_step(struct rn_civil *t, int *wd)
{
    if (++t->minute < 60) {
        return;
    }
    t->minute = 0;
    if (++t->hour < 24) {
        return;
    }
    t->hour = 0;
    *wd = (*wd + 1) % 7;
    if (++t->day <= naive_dim(t->year, t->month)) {
        return;
    }
    t->day = 1;
    if (++t->month <= 12) {
        return;
    }
    t->month = 1;
    t->year++;
}

Test(cron, next_agrees_with_a_minute_by_minute_search)
{
    static const char *const months[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                         "jul", "aug", "sep", "oct", "nov", "dec"};
    static const char *const days[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};
    const long horizon = 2L * 366 * 24 * 60;
    int compared = 0;

    rng_state = UINT64_C(0x9e3779b97f4a7c15);
    for (int n = 0; n < 200; n++) {
        char expr[RN_CRON_MAX_LEN] = "", text[17], want[17];
        struct rn_civil start, t, got;
        struct rn_cron c;
        bool found = false, ok;
        int wd;

        append_field(expr, sizeof(expr), 0, 59, NULL, 0, 0);
        strcat(expr, " ");
        append_field(expr, sizeof(expr), 0, 23, NULL, 0, 0);
        strcat(expr, " ");
        append_field(expr, sizeof(expr), 1, 31, NULL, 0, 0);
        strcat(expr, " ");
        append_field(expr, sizeof(expr), 1, 12, months, 1, 12);
        strcat(expr, " ");
        append_field(expr, sizeof(expr), 0, 7, days, 0, 7);
        c = parse_ok(expr);

        /* Years around 2000 and 2100 (leap and not), and the ordinary ones between. */
        start.year = rng() % 4 == 0 ? rnd(2096, 2101) : rnd(1970, 2400);
        start.month = rnd(1, 12);
        start.day = rnd_value(1, naive_dim(start.year, start.month));
        start.hour = rnd_value(0, 23);
        start.minute = rnd_value(0, 59);
        rn_civil_format(&start, text);

        t = start;
        wd = naive_weekday(t.year, t.month, t.day);
        for (long k = 0; k < horizon; k++) {
            naive_step(&t, &wd);
            if (naive_matches(&c, &t, wd)) {
                found = true;
                break;
            }
        }
        ok = rn_cron_next(&c, &start, &got);
        if (found) {
            rn_civil_format(&t, want);
            cr_assert(ok, "\"%s\" after %s: none, want %s", expr, text, want);
            rn_civil_format(&got, text);
            cr_assert_str_eq(text, want, "\"%s\": got %s, want %s", expr, text, want);
            compared++;
        } else {
            /* Beyond the naive horizon: rn_cron_next must not have found anything closer. */
            cr_assert(!ok || t_civil_cmp(&got, &t) > 0, "\"%s\" after %s", expr, text);
        }
    }
    cr_assert_geq(compared, 150, "only %d of 200 expressions matched within 2 years", compared);
}

/* ---- civil dates ---- */

Test(cron, civil_days_count_from_the_epoch)
{
    cr_assert_eq(rn_civil_days(1970, 1, 1), 0);
    cr_assert_eq(rn_civil_days(1969, 12, 31), -1);
    cr_assert_eq(rn_civil_days(2000, 3, 1), 11017);
    cr_assert_eq(rn_civil_days(1, 1, 1), -719162);
    cr_assert_eq(rn_civil_days(9999, 12, 31), 2932896);
}

Test(cron, civil_days_round_trip_over_a_wide_range)
{
    int y, m, d, py = 0, pm = 0, pd = 0;

    for (int64_t days = -1000000; days <= 3000000; days++) {
        rn_civil_from_days(days, &y, &m, &d);
        cr_assert_eq(rn_civil_days(y, m, d), days, "%lld", (long long) days);
        if (days > -1000000) {
            /* Consecutive days: the next day of the month, or the 1st of the next month. */
            bool next_day = y == py && m == pm && d == pd + 1;
            bool next_month = d == 1 && pd == rn_civil_days_in_month(py, pm) &&
                              ((y == py && m == pm + 1) || (y == py + 1 && m == 1 && pm == 12));
            cr_assert(next_day || next_month, "%d-%d-%d after %d-%d-%d", y, m, d, py, pm, pd);
        }
        py = y;
        pm = m;
        pd = d;
    }
}

Test(cron, weekdays_of_known_dates)
{
    cr_assert_eq(rn_civil_weekday(1970, 1, 1), 4);   /* Thursday */
    cr_assert_eq(rn_civil_weekday(1969, 12, 31), 3); /* Wednesday, before the epoch */
    cr_assert_eq(rn_civil_weekday(2000, 2, 29), 2);  /* Tuesday */
    cr_assert_eq(rn_civil_weekday(2026, 11, 26), 4); /* Thursday */
    cr_assert_eq(rn_civil_weekday(2026, 4, 13), 1);  /* Monday */
    cr_assert_eq(rn_civil_weekday(1600, 1, 1), 6);   /* Saturday */
}

Test(cron, days_in_month_follow_the_gregorian_leap_rule)
{
    cr_assert_eq(rn_civil_days_in_month(2024, 2), 29);
    cr_assert_eq(rn_civil_days_in_month(2026, 2), 28);
    cr_assert_eq(rn_civil_days_in_month(2000, 2), 29);
    cr_assert_eq(rn_civil_days_in_month(2100, 2), 28);
    cr_assert_eq(rn_civil_days_in_month(2026, 4), 30);
    cr_assert_eq(rn_civil_days_in_month(2026, 12), 31);
    cr_assert_eq(rn_civil_days_in_month(2026, 0), 0);
    cr_assert_eq(rn_civil_days_in_month(2026, 13), 0);
}

Test(cron, civil_minutes_format_and_parse_back)
{
    struct rn_civil t = {2026, 11, 26, 8, 5}, r;
    char b[17];

    rn_civil_format(&t, b);
    cr_assert_str_eq(b, "2026-11-26 08:05");
    cr_assert(rn_civil_parse(b, &r));
    cr_assert(memcmp(&t, &r, sizeof(t)) == 0);
    cr_assert(rn_civil_parse("2026-11-26T08:05:59", &r));
    cr_assert(memcmp(&t, &r, sizeof(t)) == 0);
    cr_assert(rn_civil_parse("2026-11-26 08:05:00", &r));
    cr_assert(rn_civil_parse("2028-02-29 00:00", &r));
    cr_assert(rn_civil_parse("1970-01-01 00:00", &r));
    cr_assert(rn_civil_parse("9999-12-31 23:59", &r));
}

Test(cron, civil_parse_refuses_anything_else)
{
    static const char *const bad[] = {
        "",
        "2026-11-26",
        "2026-02-30 00:00",
        "2100-02-29 00:00",
        "2026-13-01 00:00",
        "2026-00-01 00:00",
        "2026-01-00 00:00",
        "1969-12-31 23:59",
        "2026-11-26 24:00",
        "2026-11-26 08:60",
        "2026-11-26 08:30:60",
        "2026-11-26 08:30:5",
        "2026-11-26 08:30:",
        "2026-11-26  08:30",
        "2026-11-26 08:30 ",
        "2026-11-26 08:30Z",
        "2026-1-26 08:30",
        "+026-11-26 08:30",
        "2026/11/26 08:30",
        "2026-11-26t08:30",
        "2026-11-26 08:30:00.000",
    };
    struct rn_civil r;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_not(rn_civil_parse(bad[i], &r), "\"%s\"", bad[i]);
    }
}
