/* SPDX-License-Identifier: MIT */
/*
 * Python's number text and rounding (see numtext.h for the contract): the float repr the value
 * model, the JSON codec and str() print with, int() and float() of strings, int() of a float,
 * and round().
 *
 * DESIGN
 * - Ports of CPython rather than "close enough" C: int()/float() of strings follow
 *   PyLong_FromString and PyFloat_FromString, including Unicode decimal digits and whitespace
 *   (_PyUnicode_TransformDecimalAndSpaceToASCII first, then an ASCII parser); round(x, n)
 *   rounds the exact decimal expansion half to even (double_round).
 * - glibc's printf is exact and its strtod correctly rounded, so the float repr searches for
 *   the shortest printf output that strtod maps back, and round() reads the exact expansion
 *   from printf: no dtoa of our own.
 */
#include "ir/numtext.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/buf.h"
#include "ir/eval_int.h"

/* CPython's sys.int_info.default_max_str_digits: int() refuses longer decimal strings. */
#define NT_INT_MAX_STR_DIGITS 4300

/* CPython's double_round bounds: beyond them round(x, n) is x itself or a signed zero. */
#define NT_NDIGITS_MAX 323
#define NT_NDIGITS_MIN (-308)

/* ---- float repr ---- */

/* Formats |f| (finite, non-zero) with p + 1 significant digits; returns the digits (no dot)
 * in dig and the decimal exponent of the first digit. */
static size_t
float_digits(double f, int p, char *dig, int *exp10)
{
    char tmp[40];
    size_t n = 0, i;
    int e = 0, sign = 1;

    (void) snprintf(tmp, sizeof(tmp), "%.*e", p, f);
    /* tmp is "d.ddde[+-]xx" (or "de[+-]xx" for p == 0); keep the digits before 'e'. */
    for (i = 0; tmp[i] != 'e' && tmp[i] != '\0'; i++) {
        if (tmp[i] >= '0' && tmp[i] <= '9') {
            dig[n++] = tmp[i];
        }
    }
    if (tmp[i] == 'e') {
        i++;
    }
    if (tmp[i] == '-' || tmp[i] == '+') {
        sign = tmp[i] == '-' ? -1 : 1;
        i++;
    }
    for (; tmp[i] >= '0' && tmp[i] <= '9'; i++) {
        e = e * 10 + (tmp[i] - '0');
    }
    *exp10 = sign * e;
    dig[n] = '\0';
    return n;
}

static bool
digits_round_trip(const char *dig, size_t n, int exp10, double f)
{
    char tmp[64];

    (void) snprintf(tmp, sizeof(tmp), "%c.%se%d", dig[0], n > 1 ? dig + 1 : "0", exp10);
    return strtod(tmp, NULL) == f;
}

/* Adds one unit in the last place of the digit string (with carry). */
static size_t
digits_bump(char *dig, size_t n, int *exp10)
{
    size_t i = n;

    while (i > 0) {
        i--;
        if (dig[i] != '9') {
            dig[i]++;
            return n;
        }
        dig[i] = '0';
    }
    /* All nines: 999 -> 1000, i.e. "1" at the next exponent (trailing zeros dropped). */
    dig[0] = '1';
    dig[1] = '\0';
    (*exp10)++;
    return 1;
}

/* Shortest digit string that strtod maps back to f (f > 0, finite), as Python's repr. The
 * correctly rounded string of each length is tried first; at a power of two the rounding
 * interval is lopsided, so the next string above may round-trip where the nearest does not,
 * and Python's dtoa would pick it. */
static size_t
float_shortest(double f, char *dig, int *exp10)
{
    char alt[40];
    size_t n = 0, an;
    int p, aexp;

    for (p = 0; p < 17; p++) {
        n = float_digits(f, p, dig, exp10);
        if (digits_round_trip(dig, n, *exp10, f)) {
            break;
        }
        memcpy(alt, dig, n + 1);
        aexp = *exp10;
        an = digits_bump(alt, n, &aexp);
        if (digits_round_trip(alt, an, aexp, f)) {
            memcpy(dig, alt, an + 1);
            *exp10 = aexp;
            n = an;
            break;
        }
    }
    while (n > 1 && dig[n - 1] == '0') {
        dig[--n] = '\0';
    }
    return n;
}

size_t
ir_float_repr(double f, char *buf)
{
    char dig[40];
    size_t n, o = 0, i;
    int exp10, decpt, k;

    if (isnan(f)) {
        memcpy(buf, "nan", 4);
        return 3;
    }
    if (signbit(f)) {
        buf[o++] = '-';
        f = -f;
    }
    if (isinf(f)) {
        memcpy(buf + o, "inf", 4);
        return o + 3;
    }
    if (f == 0.0) {
        memcpy(buf + o, "0.0", 4);
        return o + 3;
    }
    n = float_shortest(f, dig, &exp10);
    /* Python's rule (format_float_short, 'r'): value = 0.DIGITS x 10^decpt; plain notation
     * when -4 < decpt <= 16, scientific otherwise. */
    decpt = exp10 + 1;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            buf[o++] = '0';
            buf[o++] = '.';
            for (k = decpt; k < 0; k++) {
                buf[o++] = '0';
            }
            memcpy(buf + o, dig, n);
            o += n;
        } else if ((size_t) decpt < n) {
            memcpy(buf + o, dig, (size_t) decpt);
            o += (size_t) decpt;
            buf[o++] = '.';
            memcpy(buf + o, dig + decpt, n - (size_t) decpt);
            o += n - (size_t) decpt;
        } else {
            memcpy(buf + o, dig, n);
            o += n;
            for (i = n; i < (size_t) decpt; i++) {
                buf[o++] = '0';
            }
            buf[o++] = '.';
            buf[o++] = '0';
        }
    } else {
        buf[o++] = dig[0];
        if (n > 1) {
            buf[o++] = '.';
            memcpy(buf + o, dig + 1, n - 1);
            o += n - 1;
        }
        o += (size_t) snprintf(buf + o, IR_FLOAT_REPR_MAX - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                               exp10 < 0 ? -exp10 : exp10);
    }
    buf[o] = '\0';
    return o;
}

/* ---- int() and float() of strings ---- */

/* First code point of each run of ten Unicode decimal digits (category Nd, Unicode 14.0 as in
 * Python 3.11), generated with unicodedata.decimal(). Every run is exactly 0..9. */
static const uint32_t nt_decimal_zeros[] = {
    0x30,    0x660,   0x6f0,   0x7c0,   0x966,   0x9e6,   0xa66,   0xae6,   0xb66,   0xbe6,
    0xc66,   0xce6,   0xd66,   0xde6,   0xe50,   0xed0,   0xf20,   0x1040,  0x1090,  0x17e0,
    0x1810,  0x1946,  0x19d0,  0x1a80,  0x1a90,  0x1b50,  0x1bb0,  0x1c40,  0x1c50,  0xa620,
    0xa8d0,  0xa900,  0xa9d0,  0xa9f0,  0xaa50,  0xabf0,  0xff10,  0x104a0, 0x10d30, 0x11066,
    0x110f0, 0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650, 0x116c0, 0x11730, 0x118e0,
    0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50, 0x1d7ce, 0x1d7d8, 0x1d7e2,
    0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
};

/* Decimal value of code point c, or -1. */
static int
unicode_decimal(uint32_t c)
{
    size_t lo = 0, hi = sizeof(nt_decimal_zeros) / sizeof(nt_decimal_zeros[0]), mid;

    while (hi - lo > 1) {
        mid = lo + (hi - lo) / 2;
        if (nt_decimal_zeros[mid] <= c) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return c >= nt_decimal_zeros[lo] && c - nt_decimal_zeros[lo] < 10
               ? (int) (c - nt_decimal_zeros[lo])
               : -1;
}

/* Python's str.isspace() for code points at or above 127 (the ASCII ones are kept as they
 * are by the transformation below). */
static bool
unicode_space(uint32_t c)
{
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
           c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Python's ASCII whitespace (Py_ISSPACE). */
static bool
ascii_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* CPython's _PyUnicode_TransformDecimalAndSpaceToASCII: a malloc'd copy where ASCII stays,
 * other whitespace becomes ' ', decimal digits become '0'..'9', and the first other character
 * becomes '?' and ends the text. */
static cn_err
to_ascii(struct ir_val s, char **buf, size_t *len)
{
    const unsigned char *p = (const unsigned char *) ir_str_data(s);
    size_t n = ir_str_len(s), i = 0, o = 0, k;
    uint32_t c;
    int d;
    char *b;

    if ((b = malloc(n + 1)) == NULL) {
        return CN_NOMEM;
    }
    while (i < n) {
        c = utf8_decode(p + i, &k);
        i += k;
        if (c < 127) {
            b[o++] = (char) c;
        } else if (unicode_space(c)) {
            b[o++] = ' ';
        } else if ((d = unicode_decimal(c)) >= 0) {
            b[o++] = (char) ('0' + d);
        } else {
            b[o++] = '?';
            break;
        }
    }
    b[o] = '\0';
    *buf = b;
    *len = o;
    return CN_OK;
}

/* The repr of s cut to at most max code points (Python's %.200R), for messages. */
static cn_err
repr_cut(struct ir_val s, size_t max, struct cn_buf *b)
{
    size_t i = 0, cp = 0;
    cn_err rv;

    if ((rv = ir_val_repr(s, b)) != CN_OK) {
        return rv;
    }
    while (i < b->len && cp < max) {
        i += utf8_seqlen((unsigned char) b->data[i]);
        cp++;
    }
    if (i < b->len) {
        b->len = i;
        b->data[i] = '\0';
    }
    return CN_OK;
}

static cn_err
raise_int_literal(struct ir_val s, int64_t base, struct ir_val *out)
{
    struct cn_buf b = CN_BUF_INIT;
    cn_err rv;

    if ((rv = repr_cut(s, 200, &b)) == CN_OK) {
        rv = ir_raise(out, "ValueError", "invalid literal for int() with base %" PRId64 ": %s",
                      base, b.data);
    }
    cn_buf_fini(&b);
    return rv;
}

/* CPython's _PyLong_DigitValue: 0-35 for digits and letters, 37 otherwise. */
static unsigned
digit_value(char c)
{
    if (c >= '0' && c <= '9') {
        return (unsigned) (c - '0');
    }
    if (c >= 'a' && c <= 'z') {
        return (unsigned) (c - 'a') + 10;
    }
    if (c >= 'A' && c <= 'Z') {
        return (unsigned) (c - 'A') + 10;
    }
    return 37;
}

/* Outcome of parse_int_text. */
enum nt_intparse { NT_INT_OK, NT_INT_INVALID, NT_INT_LIMIT, NT_INT_OVERFLOW };

/* CPython's PyLong_FromString on ASCII text t[0..n) (base 0 or 2..36). On NT_INT_LIMIT,
 * *ndigits_out holds the digit count for the message. */
static enum nt_intparse
parse_int_text(const char *t, size_t n, unsigned base, int64_t *out, size_t *ndigits_out)
{
    const char *p = t, *end = t + n, *start;
    bool neg = false, nonzero_is_error = false, ovf = false;
    uint64_t mag = 0, limit;
    size_t ndigits = 0;
    char prev = '\0';
    unsigned d;

    while (p < end && ascii_space(*p)) {
        p++;
    }
    if (p < end && *p == '+') {
        p++;
    } else if (p < end && *p == '-') {
        neg = true;
        p++;
    }
    if (base == 0) {
        if (p >= end || p[0] != '0') {
            base = 10;
        } else if (p + 1 < end && (p[1] == 'x' || p[1] == 'X')) {
            base = 16;
        } else if (p + 1 < end && (p[1] == 'o' || p[1] == 'O')) {
            base = 8;
        } else if (p + 1 < end && (p[1] == 'b' || p[1] == 'B')) {
            base = 2;
        } else {
            nonzero_is_error = true; /* "010": the old octal spelling */
            base = 10;
        }
    }
    if (p + 1 < end && p[0] == '0' &&
        ((base == 16 && (p[1] == 'x' || p[1] == 'X')) ||
         (base == 8 && (p[1] == 'o' || p[1] == 'O')) ||
         (base == 2 && (p[1] == 'b' || p[1] == 'B')))) {
        p += 2;
        if (p < end && *p == '_') {
            p++; /* one underscore may follow the prefix */
        }
    }
    if (p < end && *p == '_') {
        return NT_INT_INVALID;
    }
    start = p;
    while (p < end && (digit_value(*p) < base || *p == '_')) {
        if (*p == '_') {
            if (prev == '_') {
                return NT_INT_INVALID;
            }
        } else {
            ndigits++;
        }
        prev = *p++;
    }
    if (prev == '_') {
        return NT_INT_INVALID;
    }
    if ((base & (base - 1)) != 0 && ndigits > NT_INT_MAX_STR_DIGITS) {
        *ndigits_out = ndigits;
        return NT_INT_LIMIT;
    }
    if (ndigits == 0) {
        return NT_INT_INVALID;
    }
    limit = neg ? UINT64_C(1) << 63 : (uint64_t) INT64_MAX;
    for (; start < p; start++) {
        if (*start == '_') {
            continue;
        }
        d = digit_value(*start);
        if (mag > (limit - d) / base) {
            ovf = true;
        } else {
            mag = mag * base + d;
        }
    }
    if (nonzero_is_error && (mag != 0 || ovf)) {
        return NT_INT_INVALID;
    }
    while (p < end && ascii_space(*p)) {
        p++;
    }
    if (p != end) {
        return NT_INT_INVALID;
    }
    if (ovf) {
        return NT_INT_OVERFLOW;
    }
    *out = neg ? (int64_t) ((uint64_t) 0 - mag) : (int64_t) mag;
    return NT_INT_OK;
}

cn_err
ir_int_from_str(struct ir_val s, int64_t base, struct ir_val *out)
{
    char *t;
    size_t n, ndigits = 0;
    int64_t v = 0;
    cn_err rv;

    if ((rv = to_ascii(s, &t, &n)) != CN_OK) {
        return rv;
    }
    switch (parse_int_text(t, n, (unsigned) base, &v, &ndigits)) {
    case NT_INT_OK:
        *out = ir_int(v);
        rv = CN_OK;
        break;
    case NT_INT_LIMIT:
        rv = ir_raise(out, "ValueError",
                      "Exceeds the limit (%d digits) for integer string conversion: value has "
                      "%zu digits; use sys.set_int_max_str_digits() to increase the limit",
                      NT_INT_MAX_STR_DIGITS, ndigits);
        break;
    case NT_INT_OVERFLOW:
        rv = raise_overflow(out);
        break;
    default:
        rv = raise_int_literal(s, base, out);
        break;
    }
    free(t);
    return rv;
}

static bool
match_nocase(const char *p, const char *end, const char *word)
{
    size_t n = strlen(word), i;

    if ((size_t) (end - p) != n) {
        return false;
    }
    for (i = 0; i < n; i++) {
        char c = p[i];
        if (c >= 'A' && c <= 'Z') {
            c = (char) (c - 'A' + 'a');
        }
        if (c != word[i]) {
            return false;
        }
    }
    return true;
}

static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

enum nt_floatkind { NT_FLOAT_BAD, NT_FLOAT_NUMBER, NT_FLOAT_INF, NT_FLOAT_NAN };

/* Python's float syntax on ASCII text without whitespace or underscores (_Py_dg_strtod, then
 * _Py_parse_inf_or_nan): [sign] (digits [. [digits]] | . digits) [(e|E) [sign] digits], or
 * [sign] inf, infinity or nan in any case. */
static enum nt_floatkind
float_syntax(const char *p, const char *end, bool *neg)
{
    bool mant = false;

    *neg = false;
    if (p < end && (*p == '+' || *p == '-')) {
        *neg = *p == '-';
        p++;
    }
    if (match_nocase(p, end, "inf") || match_nocase(p, end, "infinity")) {
        return NT_FLOAT_INF;
    }
    if (match_nocase(p, end, "nan")) {
        return NT_FLOAT_NAN;
    }
    while (p < end && is_digit(*p)) {
        p++;
        mant = true;
    }
    if (p < end && *p == '.') {
        p++;
        while (p < end && is_digit(*p)) {
            p++;
            mant = true;
        }
    }
    if (!mant) {
        return NT_FLOAT_BAD;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }
        if (p >= end || !is_digit(*p)) {
            return NT_FLOAT_BAD;
        }
        while (p < end && is_digit(*p)) {
            p++;
        }
    }
    return p == end ? NT_FLOAT_NUMBER : NT_FLOAT_BAD;
}

/* CPython's PyFloat_FromString: strip, check underscores (only between digits), parse. */
cn_err
ir_float_from_str(struct ir_val s, struct ir_val *out)
{
    struct cn_buf b = CN_BUF_INIT;
    char *t, *begin, *p, *end, *w, prev = '\0';
    enum nt_floatkind kind = NT_FLOAT_BAD;
    bool ok = true, neg;
    size_t n;
    cn_err rv;

    if ((rv = to_ascii(s, &t, &n)) != CN_OK) {
        return rv;
    }
    begin = t;
    end = t + n;
    while (begin < end && ascii_space(*begin)) {
        begin++;
    }
    while (end > begin && ascii_space(end[-1])) {
        end--;
    }
    /* Drop underscores in place; each must sit between two digits. NUL is never valid. */
    for (p = w = begin; p < end && ok; p++) {
        if (*p == '\0') {
            ok = false;
        } else if (*p == '_') {
            ok = is_digit(prev);
        } else {
            ok = prev != '_' || is_digit(*p);
            *w++ = *p;
        }
        prev = *p;
    }
    if (ok && prev != '_') {
        kind = float_syntax(begin, w, &neg);
    }
    if (kind == NT_FLOAT_NUMBER) {
        *w = '\0';
        *out = ir_float(strtod(begin, NULL)); /* correctly rounded; +-inf on overflow */
    } else if (kind != NT_FLOAT_BAD) {
        /* NAN and INFINITY are float constants; the casts only widen them exactly. */
        double special = kind == NT_FLOAT_NAN ? (double) NAN : (double) INFINITY;
        *out = ir_float(neg ? -special : special);
    }
    free(t);
    if (kind != NT_FLOAT_BAD) {
        return CN_OK;
    }
    if ((rv = ir_val_repr(s, &b)) == CN_OK) {
        rv = ir_raise(out, "ValueError", "could not convert string to float: %s", b.data);
    }
    cn_buf_fini(&b);
    return rv;
}

/* ---- round() ---- */

/* Converts an integral double to an int value as Python's int(float) / PyLong_FromDouble. */
cn_err
ir_int_from_double(double f, struct ir_val *out)
{
    if (isnan(f)) {
        return ir_raise(out, "ValueError", "cannot convert float NaN to integer");
    }
    if (isinf(f)) {
        return ir_raise(out, "OverflowError", "cannot convert float infinity to integer");
    }
    f = trunc(f);
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) {
        return raise_overflow(out);
    }
    *out = ir_int((int64_t) f);
    return CN_OK;
}

/* Python's round() of a float to an int: halves go to the even neighbour. */
cn_err
ir_float_round_to_int(double x, struct ir_val *out)
{
    double r = round(x);

    if (fabs(x - r) == 0.5) {
        r = 2.0 * round(x / 2.0); /* halfway: to even */
    }
    return ir_int_from_double(r, out);
}

/* CPython's double_round: x rounded to nd decimal places, half to even on the exact binary
 * value, converted back with correct rounding. glibc's printf gives the exact decimal
 * expansion (at most 767 significant digits), which is what _Py_dg_dtoa mode 3 rounds. */
cn_err
ir_float_round(double x, int64_t nd, struct ir_val *out)
{
    char buf[840], d[800], res[830];
    int exp10, keep, i, len;
    bool up = false;
    double r;

    if (!isfinite(x) || x == 0.0 || nd > NT_NDIGITS_MAX) {
        *out = ir_float(x);
        return CN_OK;
    }
    if (nd < NT_NDIGITS_MIN) {
        *out = ir_float(0.0 * x);
        return CN_OK;
    }
    len = snprintf(buf, sizeof(buf), "%.780e", fabs(x));
    if (len < 0) {
        return CN_NOMEM; /* printf of many digits may allocate inside libc */
    }
    assert((size_t) len < sizeof(buf));
    /* buf = "D.DDD...e+XX": d[0] is a guard '0' that absorbs a carry, then the 781 digits. */
    d[0] = '0';
    d[1] = buf[0];
    memcpy(d + 2, buf + 2, 780);
    exp10 = atoi(buf + 783);
    keep = exp10 + 1 + (int) nd; /* digits of d[1..] that survive */
    if (keep >= 781) {
        *out = ir_float(x);
        return CN_OK;
    }
    if (keep < 0) {
        *out = ir_float(copysign(0.0, x));
        return CN_OK;
    }
    if (d[keep + 1] > '5') {
        up = true;
    } else if (d[keep + 1] == '5') {
        for (i = keep + 2; i < 782 && !up; i++) {
            up = d[i] != '0';
        }
        up = up || ((d[keep] - '0') & 1) != 0;
    }
    if (up) {
        for (i = keep; i >= 0; i--) {
            if (d[i] == '9') {
                d[i] = '0';
            } else {
                d[i]++;
                break;
            }
        }
    }
    len = snprintf(res, sizeof(res), "%s%.*se%d", x < 0 ? "-" : "", keep + 1, d, (int) -nd);
    if (len < 0) {
        return CN_NOMEM;
    }
    assert((size_t) len < sizeof(res));
    errno = 0;
    r = strtod(res, NULL);
    if (errno == ERANGE && fabs(r) >= 1.0) {
        return ir_raise(out, "OverflowError", "rounded value too large to represent");
    }
    *out = ir_float(r);
    return CN_OK;
}

/* round(i, nd) for an int and nd < 0: nearest multiple of 10^-nd, ties to even. */
cn_err
ir_int_round(int64_t v, int64_t nd, struct ir_val *out)
{
    int64_t p = 1, q, r, res;
    int k;

    if (nd >= 0) {
        *out = ir_int(v);
        return CN_OK;
    }
    if (nd < -19) {
        *out = ir_int(0); /* |v| < 2^63 < 10^20 / 2 */
        return CN_OK;
    }
    if (nd == -19) {
        /* 10^19 does not fit: the result is 0 or +-10^19 (which overflows). */
        if (v > INT64_C(5000000000000000000) || v < -INT64_C(5000000000000000000)) {
            return raise_overflow(out);
        }
        *out = ir_int(0);
        return CN_OK;
    }
    for (k = 0; k < (int) -nd; k++) {
        p *= 10;
    }
    q = v / p;
    r = v % p;
    if (r < 0) {
        r += p;
        q--;
    }
    if (2 * r > p || (2 * r == p && (q & 1) != 0)) {
        q++;
    }
    if (__builtin_mul_overflow(q, p, &res)) {
        return raise_overflow(out);
    }
    *out = ir_int(res);
    return CN_OK;
}
