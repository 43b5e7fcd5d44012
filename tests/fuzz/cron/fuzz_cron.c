/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for cron expressions and civil minutes: any byte string (cut at its first NUL,
 * and at a bound a little past RN_CRON_MAX_LEN) is parsed as a cron expression. An accepted one
 * must have a non-empty set in every field and no bit outside it, and from each of a few fixed
 * minutes rn_cron_next must give a valid minute strictly after the start that matches every
 * field (checked here from the bits, not through rn_cron_matches), with no earlier match in the
 * first two days (a minute-by-minute search), and stepping back one minute from the result
 * must find the result again. The same bytes are also parsed as a civil minute, which must
 * format back to its canonical text. Crashes, sanitizer reports and violations are findings.
 *
 * Target Functions: rn_cron_parse, rn_cron_next, rn_cron_matches, rn_civil_parse,
 * rn_civil_format, rn_civil_weekday
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runner/ops/cron.h"
#include "tests/support/civil_cmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define INPUT_MAX (RN_CRON_MAX_LEN + 8) /* past the cap, so the over-long error is reached */

static const struct rn_civil starts[] = {
    {1970, 1, 1, 0, 0},     {2000, 2, 28, 23, 59}, {2026, 6, 15, 12, 34},
    {2099, 12, 31, 23, 59}, {2100, 2, 28, 0, 0},   {9999, 12, 31, 23, 58},
};

/* Matching written out from the bits and the Vixie day rule. */
static bool
matches(const struct rn_cron *c, const struct rn_civil *t)
{
    bool dom = (c->days >> t->day) & 1;
    bool dow = (c->weekdays >> rn_civil_weekday(t->year, t->month, t->day)) & 1;
    bool day = c->dom_star || c->dow_star ? dom && dow : dom || dow;

    return day && ((c->minutes >> t->minute) & 1) && ((c->hours >> t->hour) & 1) &&
           ((c->months >> t->month) & 1);
}

static void
step(struct rn_civil *t, int by)
{
    int64_t m = rn_civil_days(t->year, t->month, t->day) * 1440 + t->hour * 60 + t->minute + by;
    int64_t d = m >= 0 ? m / 1440 : (m - 1439) / 1440;

    rn_civil_from_days(d, &t->year, &t->month, &t->day);
    t->hour = (int) ((m - d * 1440) / 60);
    t->minute = (int) ((m - d * 1440) % 60);
}

static void
check_next(const struct rn_cron *c, const struct rn_civil *start)
{
    struct rn_civil r, t = *start, back, again;
    bool found = rn_cron_next(c, start, &r);
    int k;

    /* The first two days minute by minute: the answer, if any, must be the first match. */
    for (k = 0; k < 2 * 1440; k++) {
        step(&t, 1);
        if (!rn_civil_valid(&t)) {
            break;
        }
        if (matches(c, &t)) {
            if (!found || t_civil_cmp(&r, &t) != 0) {
                abort();
            }
            break;
        }
    }
    if (!found) {
        return;
    }
    if (!rn_civil_valid(&r) || t_civil_cmp(&r, start) <= 0 || !matches(c, &r) ||
        !rn_cron_matches(c, &r) || r.year > start->year + RN_CRON_HORIZON_YEARS) {
        abort();
    }
    back = r;
    step(&back, -1);
    if (t_civil_cmp(&back, start) >= 0 &&
        (!rn_cron_next(c, &back, &again) || t_civil_cmp(&again, &r) != 0)) {
        abort();
    }
}

static void
fuzz_civil(const char *s)
{
    struct rn_civil t, u;
    char buf[17];

    if (!rn_civil_parse(s, &t)) {
        return;
    }
    rn_civil_format(&t, buf);
    if (!rn_civil_valid(&t) || strncmp(buf, s, 10) != 0 || strncmp(buf + 11, s + 11, 5) != 0 ||
        !rn_civil_parse(buf, &u) || t_civil_cmp(&t, &u) != 0) {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[INPUT_MAX + 1];
    struct rn_cron c;
    struct cn_errmsg em;

    if (size > INPUT_MAX) {
        size = INPUT_MAX;
    }
    memcpy(s, data, size);
    s[size] = '\0';
    fuzz_civil(s);
    memset(&em, 0, sizeof(em));
    if (rn_cron_parse(s, &c, &em) != CN_OK) {
        if (em.text[0] == '\0' || strnlen(em.text, sizeof(em.text)) == sizeof(em.text)) {
            abort(); /* every refusal says why */
        }
        return 0;
    }
    if ((c.minutes & ~((UINT64_C(1) << 60) - 1)) != 0 || c.minutes == 0 ||
        (c.hours & ~UINT32_C(0xffffff)) != 0 || c.hours == 0 ||
        (c.days & ~UINT32_C(0xfffffffe)) != 0 || c.days == 0 || (c.months & ~0x1ffeu) != 0 ||
        c.months == 0 || (c.weekdays & ~0x7fu) != 0 || c.weekdays == 0) {
        abort();
    }
    for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
        check_next(&c, &starts[i]);
    }
    return 0;
}
