/* SPDX-License-Identifier: MIT */
/* Cron expressions and civil minutes (see cron.h). Pure; no threads. */
#include "runner/ops/cron.h"

#include <stddef.h>
#include <string.h>

/* ---- civil dates ---- */

/* Days from civil and back: Howard Hinnant's algorithms ("chrono-Compatible Low-Level Date
 * Algorithms"), which count in 400-year eras starting on March 1st so that the leap day is the
 * last day of a year and no table is needed. */
int64_t
rn_civil_days(int year, int month, int day)
{
    int64_t y = (int64_t) year - (month <= 2);
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;                         /* 0..399 */
    int64_t mp = (month + 9) % 12;                       /* March = 0 */
    int64_t doy = (153 * mp + 2) / 5 + day - 1;          /* 0..365 */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; /* 0..146096 */
    return era * 146097 + doe - 719468;                  /* 719468: 0000-03-01 to 1970-01-01 */
}

void
rn_civil_from_days(int64_t days, int *year, int *month, int *day)
{
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;                                      /* 0..146096 */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* 0..399 */
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               /* 0..365 */
    int64_t mp = (5 * doy + 2) / 153;                                    /* March = 0 */
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;

    *year = (int) (yoe + era * 400 + (m <= 2));
    *month = (int) m;
    *day = (int) d;
}

int
rn_civil_weekday(int year, int month, int day)
{
    int64_t w = (rn_civil_days(year, month, day) + 4) % 7; /* 1970-01-01 was a Thursday */
    return (int) (w < 0 ? w + 7 : w);
}

static bool
is_leap(int year)
{
    return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
}

int
rn_civil_days_in_month(int year, int month)
{
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

    if (month < 1 || month > 12) {
        return 0;
    }
    return month == 2 && is_leap(year) ? 29 : dim[month - 1];
}

bool
rn_civil_valid(const struct rn_civil *t)
{
    return t->year >= 1970 && t->year <= 9999 && t->month >= 1 && t->month <= 12 && t->day >= 1 &&
           t->day <= rn_civil_days_in_month(t->year, t->month) && t->hour >= 0 && t->hour <= 23 &&
           t->minute >= 0 && t->minute <= 59;
}

/* Writes the last `width` decimal digits of v (so never more than width bytes). */
static void
put_digits(char *p, int v, int width)
{
    unsigned u = v < 0 ? 0u - (unsigned) v : (unsigned) v;

    while (width-- > 0) {
        p[width] = (char) ('0' + u % 10);
        u /= 10;
    }
}

void
rn_civil_format(const struct rn_civil *t, char *buf)
{
    put_digits(buf, t->year, 4);
    buf[4] = '-';
    put_digits(buf + 5, t->month, 2);
    buf[7] = '-';
    put_digits(buf + 8, t->day, 2);
    buf[10] = ' ';
    put_digits(buf + 11, t->hour, 2);
    buf[13] = ':';
    put_digits(buf + 14, t->minute, 2);
    buf[16] = '\0';
}

/* Reads exactly n digits at s; false if any is not a digit. */
static bool
get_digits(const char *s, int n, int *v)
{
    int i;

    *v = 0;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
        *v = *v * 10 + (s[i] - '0');
    }
    return true;
}

bool
rn_civil_parse(const char *s, struct rn_civil *out)
{
    struct rn_civil t;
    size_t len = strnlen(s, 20);
    int sec;

    /* Checked character by character, so a short string stops at its NUL before any read past
     * it (each check below fails on '\0'). */
    if (len != 16 && len != 19) {
        return false;
    }
    if (!get_digits(s, 4, &t.year) || s[4] != '-' || !get_digits(s + 5, 2, &t.month) ||
        s[7] != '-' || !get_digits(s + 8, 2, &t.day) || (s[10] != ' ' && s[10] != 'T') ||
        !get_digits(s + 11, 2, &t.hour) || s[13] != ':' || !get_digits(s + 14, 2, &t.minute)) {
        return false;
    }
    if (len == 19 && (s[16] != ':' || !get_digits(s + 17, 2, &sec) || sec > 59)) {
        return false;
    }
    if (!rn_civil_valid(&t)) {
        return false;
    }
    *out = t;
    return true;
}

/* ---- parsing ---- */

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

/* The syntax of one field. */
struct field {
    const char *what;         /* "minute": messages say "minute 61 is out of range" */
    int lo, hi;               /* the values that may be written (day of week: 0..7) */
    int star_hi;              /* the last value `*` and `N/STEP` cover (day of week: 6) */
    const char *const *names; /* 3-letter names, or NULL */
    int nnames, names_base;   /* names[0] is the value names_base */
    const char *name_kind;    /* "month": messages say "unknown month name" */
};

static const struct field fields[5] = {
    {"minute", 0, 59, 59, NULL, 0, 0, NULL},
    {"hour", 0, 23, 23, NULL, 0, 0, NULL},
    {"day of month", 1, 31, 31, NULL, 0, 0, NULL},
    {"month", 1, 12, 12, month_names, 12, 1, "month"},
    {"day of week", 0, 7, 6, day_names, 7, 0, "day"},
};

/* Where a field's text is, and the message buffer. */
struct pstate {
    const char *s; /* the whole expression, for columns */
    size_t end;    /* one past the field's last byte */
    const struct field *f;
    struct cn_errmsg *err;
};

/* A quoted character for a message: 'x', or the byte's value when it is not printable. */
struct chdesc {
    char text[16];
};

static struct chdesc
describe_char(char c)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char u = (unsigned char) c;
    struct chdesc d;

    if (u >= 0x21 && u <= 0x7e) {
        d.text[0] = '\'';
        d.text[1] = c;
        d.text[2] = '\'';
        d.text[3] = '\0';
    } else {
        memcpy(d.text, "byte 0x", 7);
        d.text[7] = hex[u >> 4];
        d.text[8] = hex[u & 15];
        d.text[9] = '\0';
    }
    return d;
}

static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool
is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool
is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static char
lower(char c)
{
    if (c >= 'A' && c <= 'Z') {
        c = (char) (c - 'A' + 'a');
    }
    return c;
}

/* Whether the n bytes at s spell word (lower case) in any case. */
static bool
same_word(const char *s, const char *word, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (lower(s[i]) != word[i]) {
            return false;
        }
    }
    return word[n] == '\0';
}

/* Message shown for a too-long token: its first 16 bytes and an ellipsis. */
#define TOKEN_SHOWN 16

static int
shown_len(size_t n)
{
    return (int) (n < TOKEN_SHOWN ? n : TOKEN_SHOWN);
}

static const char *
ellipsis(size_t n)
{
    return n > TOKEN_SHOWN ? "..." : "";
}

/* Reads a run of digits at *p as a number, saturating (a huge number is still out of range and
 * reported with its own text). */
static int
read_number(const struct pstate *ps, size_t *p)
{
    int v = 0;

    while (*p < ps->end && is_digit(ps->s[*p])) {
        if (v < 1000000) {
            v = v * 10 + (ps->s[*p] - '0');
        }
        (*p)++;
    }
    return v;
}

/* The message for a value missing at p, after the character before it (or at a field's start). */
static cn_err
expected_value(const struct pstate *ps, size_t p, const char *what)
{
    const char *found_end = "the end of the field";
    struct chdesc d = describe_char(' ');

    if (p < ps->end) {
        d = describe_char(ps->s[p]);
    }

    return cn_errmsg_set(ps->err, CN_PARSE, "column %zu: expected %s in the %s field, found %s",
                         p + 1, what, ps->f->what, p < ps->end ? d.text : found_end);
}

/* Reads one value (a number or a name) at *p into *v, checked against the field's range. */
static cn_err
read_value(const struct pstate *ps, size_t *p, int *v)
{
    const struct field *f = ps->f;
    size_t start = *p, n;
    int i;

    if (*p < ps->end && is_digit(ps->s[*p])) {
        *v = read_number(ps, p);
        n = *p - start;
        if (*v < f->lo || *v > f->hi) {
            return cn_errmsg_set(ps->err, CN_PARSE, "column %zu: %s %.*s%s is out of range (%d-%d)",
                                 start + 1, f->what, shown_len(n), ps->s + start, ellipsis(n),
                                 f->lo, f->hi);
        }
        return CN_OK;
    }
    if (*p < ps->end && is_alpha(ps->s[*p])) {
        while (*p < ps->end && is_alpha(ps->s[*p])) {
            (*p)++;
        }
        n = *p - start;
        if (f->names == NULL) {
            return cn_errmsg_set(ps->err, CN_PARSE,
                                 "column %zu: '%.*s%s' in the %s field: only months and days of "
                                 "the week have names",
                                 start + 1, shown_len(n), ps->s + start, ellipsis(n), f->what);
        }
        for (i = 0; n == 3 && i < f->nnames; i++) {
            if (same_word(ps->s + start, f->names[i], n)) {
                *v = f->names_base + i;
                return CN_OK;
            }
        }
        return cn_errmsg_set(ps->err, CN_PARSE, "column %zu: unknown %s name '%.*s%s' (%s)",
                             start + 1, f->name_kind, shown_len(n), ps->s + start, ellipsis(n),
                             f->nnames == 12 ? "JAN..DEC" : "SUN..SAT");
    }
    return expected_value(ps, *p, f->names != NULL ? "a number or a name" : "a number");
}

/* Parses the field at [start, ps->end) into the bit set *bits (bit v: value v) and *starred. */
static cn_err
parse_field(const struct pstate *ps, size_t start, uint64_t *bits, bool *starred)
{
    const struct field *f = ps->f;
    const char *s = ps->s;
    size_t p = start;
    cn_err e;

    *bits = 0;
    *starred = s[start] == '*'; /* Vixie's DOM_STAR and DOW_STAR: the first character alone */
    for (;;) {
        size_t item = p, step_at;
        int lo, hi, step = 1, v;
        bool star = false, range = false;

        if (p < ps->end && s[p] == '*') {
            star = true;
            lo = f->lo;
            hi = f->star_hi;
            p++;
        } else {
            if ((e = read_value(ps, &p, &lo)) != CN_OK) {
                return e;
            }
            hi = lo;
            if (p < ps->end && s[p] == '-') {
                p++;
                if ((e = read_value(ps, &p, &hi)) != CN_OK) {
                    return e;
                }
                range = true;
                if (hi < lo) {
                    size_t n = p - item;
                    return cn_errmsg_set(
                        ps->err, CN_PARSE, "column %zu: range %.*s%s goes backwards%s", item + 1,
                        shown_len(n), s + item, ellipsis(n),
                        f->lo == 0 && f->hi == 7 && hi == 0 ? " (Sunday is also 7)" : "");
                }
            }
        }
        if (p < ps->end && s[p] == '/') {
            p++;
            step_at = p;
            if (p >= ps->end || !is_digit(s[p])) {
                return expected_value(ps, p, "a step (a number)");
            }
            step = read_number(ps, &p);
            if (step == 0) {
                return cn_errmsg_set(ps->err, CN_PARSE, "column %zu: step 0", step_at + 1);
            }
            if (step > f->star_hi - f->lo + 1) {
                size_t n = p - step_at;
                return cn_errmsg_set(
                    ps->err, CN_PARSE, "column %zu: step %.*s%s is out of range (1-%d)",
                    step_at + 1, shown_len(n), s + step_at, ellipsis(n), f->star_hi - f->lo + 1);
            }
            if (!star && !range && hi < f->star_hi) {
                hi = f->star_hi; /* N/STEP: from N to the end of the field */
            }
        }
        for (v = lo; v <= hi; v += step) {
            *bits |= (uint64_t) 1 << v;
        }
        if (p == ps->end) {
            return CN_OK;
        }
        if (s[p] != ',') {
            struct chdesc d = describe_char(s[p]);
            return cn_errmsg_set(ps->err, CN_PARSE, "column %zu: unexpected %s in the %s field",
                                 p + 1, d.text, f->what);
        }
        p++;
    }
}

struct macro {
    const char *name;
    const char *expansion;
};

static const struct macro macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

/* Parses the macro starting at s[at] (its '@'), the expression's only token. */
static cn_err
parse_macro(const char *s, size_t at, size_t len, struct rn_cron *out, struct cn_errmsg *err)
{
    size_t p = at + 1, n, i;

    while (p < len && is_alpha(s[p])) {
        p++;
    }
    n = p - at;
    for (i = 0; i < sizeof(macros) / sizeof(macros[0]); i++) {
        if (strlen(macros[i].name) != n || !same_word(s + at, macros[i].name, n)) {
            continue;
        }
        while (p < len && is_blank(s[p])) {
            p++;
        }
        if (p < len) {
            struct chdesc d = describe_char(s[p]);
            return cn_errmsg_set(err, CN_PARSE, "column %zu: unexpected %s after %s", p + 1, d.text,
                                 macros[i].name);
        }
        return rn_cron_parse(macros[i].expansion, out, err);
    }
    return cn_errmsg_set(err, CN_PARSE,
                         "column %zu: unknown macro '%.*s%s' (@yearly, @annually, @monthly, "
                         "@weekly, @daily, @midnight, @hourly)",
                         at + 1, shown_len(n), s + at, ellipsis(n));
}

cn_err
rn_cron_parse(const char *expr, struct rn_cron *out, struct cn_errmsg *err)
{
    size_t len = strnlen(expr, RN_CRON_MAX_LEN + 1);
    size_t starts[5], ends[5], nfields = 0, p = 0;
    uint64_t bits[5];
    bool star[5];
    struct rn_cron c;
    cn_err e;
    int i;

    if (len > RN_CRON_MAX_LEN) {
        return cn_errmsg_set(err, CN_PARSE, "expression is longer than %d bytes", RN_CRON_MAX_LEN);
    }
    while (p < len) {
        while (p < len && is_blank(expr[p])) {
            p++;
        }
        if (p == len) {
            break;
        }
        if (nfields == 0 && expr[p] == '@') {
            return parse_macro(expr, p, len, out, err);
        }
        if (nfields < 5) {
            starts[nfields] = p;
        }
        while (p < len && !is_blank(expr[p])) {
            p++;
        }
        if (nfields < 5) {
            ends[nfields] = p;
        }
        nfields++;
    }
    if (nfields == 0) {
        return cn_errmsg_set(err, CN_PARSE, "empty expression");
    }
    if (nfields != 5) {
        return cn_errmsg_set(err, CN_PARSE, "expected 5 fields, got %zu", nfields);
    }
    for (i = 0; i < 5; i++) {
        struct pstate ps = {expr, ends[i], &fields[i], err};
        if ((e = parse_field(&ps, starts[i], &bits[i], &star[i])) != CN_OK) {
            return e;
        }
    }
    if (bits[4] & (1u << 7)) { /* day of week 7 is Sunday */
        bits[4] = (bits[4] | 1u) & 0x7f;
    }
    memset(&c, 0, sizeof(c));
    c.minutes = bits[0];
    c.hours = (uint32_t) bits[1];
    c.days = (uint32_t) bits[2];
    c.months = (uint16_t) bits[3];
    c.weekdays = (uint8_t) bits[4];
    c.dom_star = star[2];
    c.dow_star = star[4];
    *out = c;
    return CN_OK;
}

/* ---- matching ---- */

#define MINUTES_MASK  ((UINT64_C(1) << 60) - 1)
#define HOURS_MASK    UINT32_C(0xffffff)
#define DAYS_MASK     UINT32_C(0xfffffffe)
#define MONTHS_MASK   0x1ffeu
#define WEEKDAYS_MASK 0x7fu

static bool
bit(uint64_t set, int v)
{
    return (set >> v) & 1;
}

/* The smallest value >= from in set, or -1. */
static int
next_bit(uint64_t set, int from)
{
    if (from > 63) {
        return -1;
    }
    set >>= from;
    return set == 0 ? -1 : from + __builtin_ctzll(set);
}

static bool
day_matches(const struct rn_cron *c, int year, int month, int day)
{
    bool dom = bit(c->days, day), dow = bit(c->weekdays, rn_civil_weekday(year, month, day));

    return c->dom_star || c->dow_star ? dom && dow : dom || dow;
}

bool
rn_cron_matches(const struct rn_cron *c, const struct rn_civil *t)
{
    return bit(c->minutes & MINUTES_MASK, t->minute) && bit(c->hours & HOURS_MASK, t->hour) &&
           bit(c->months & MONTHS_MASK, t->month) && day_matches(c, t->year, t->month, t->day);
}

/* Moves t to the first minute of its next month, or of a later day of its month. */
static void
to_day(struct rn_civil *t, int day)
{
    t->hour = 0;
    t->minute = 0;
    if (day <= rn_civil_days_in_month(t->year, t->month)) {
        t->day = day;
        return;
    }
    t->day = 1;
    if (++t->month > 12) {
        t->month = 1;
        t->year++;
    }
}

bool
rn_cron_next(const struct rn_cron *c, const struct rn_civil *after, struct rn_civil *out)
{
    uint64_t minutes = c->minutes & MINUTES_MASK;
    uint32_t hours = c->hours & HOURS_MASK, days = c->days & DAYS_MASK;
    unsigned months = c->months & MONTHS_MASK, weekdays = c->weekdays & WEEKDAYS_MASK;
    int last_year, v;
    struct rn_civil t;

    if (!rn_civil_valid(after) || minutes == 0 || hours == 0 || months == 0 ||
        (c->dom_star || c->dow_star ? days == 0 || weekdays == 0 : days == 0 && weekdays == 0)) {
        return false;
    }
    last_year = after->year + RN_CRON_HORIZON_YEARS;
    if (last_year > 9999) {
        last_year = 9999;
    }
    t = *after;
    if (++t.minute == 60) {
        t.minute = 0;
        if (++t.hour == 24) {
            to_day(&t, t.day + 1);
        }
    }
    /* Each step below either returns or moves t to the first minute of the next candidate
     * month, day or hour (or to a matching minute), so the loop runs once per month skipped,
     * day skipped (a few hundred at most, and usually a jump straight to the next day in the
     * set) and hour skipped. */
    for (;;) {
        if (t.year > last_year) {
            return false;
        }
        if (!bit(months, t.month)) {
            v = next_bit(months, t.month + 1);
            if (v < 0) {
                v = next_bit(months, 1);
                t.year++;
            }
            t.month = v;
            t.day = 1;
            t.hour = 0;
            t.minute = 0;
            continue;
        }
        if (!day_matches(c, t.year, t.month, t.day)) {
            /* Both must match: jump to the next day of month in the set (past the end of the
             * month moves to the next month). Otherwise a weekday may match tomorrow. */
            v = c->dom_star || c->dow_star ? next_bit(days, t.day + 1) : t.day + 1;
            to_day(&t, v < 0 ? 32 : v);
            continue;
        }
        if (!bit(hours, t.hour)) {
            v = next_bit(hours, t.hour + 1);
            if (v < 0) {
                to_day(&t, t.day + 1);
            } else {
                t.hour = v;
                t.minute = 0;
            }
            continue;
        }
        v = next_bit(minutes, t.minute);
        if (v < 0) {
            t.minute = 0;
            if (++t.hour == 24) {
                to_day(&t, t.day + 1);
            }
            continue;
        }
        t.minute = v;
        *out = t;
        return true;
    }
}
