/* SPDX-License-Identifier: MIT */
/* UUID text (see uuid.h). Written out rather than taken from libuuid: ir/ links nothing but
 * libc, msgpack-c and jansson, and the SDK built on it is installed for others to link. */
#include "ir/base/uuid.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "ir/base/buf.h"
#include "ir/base/log.h"

static bool
is_hyphen_at(int i)
{
    return i == 8 || i == 13 || i == 18 || i == 23;
}

void
cn_uuid_format(const uint8_t id[16], char buf[CN_UUID_TEXT_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    int i, o = 0;

    for (i = 0; i < 16; i++) {
        if (is_hyphen_at(o)) {
            buf[o++] = '-';
        }
        buf[o++] = hex[id[i] >> 4];
        buf[o++] = hex[id[i] & 15];
    }
    buf[o] = '\0';
}

bool
cn_uuid_parse(const char *text, uint8_t id[16])
{
    int i, k = 0;

    for (i = 0; i < CN_UUID_TEXT_LEN; i++) {
        int hi, lo;

        if (is_hyphen_at(i)) {
            if (text[i] != '-') {
                return false;
            }
            continue;
        }
        /* A NUL ends the loop here too: it is no hex digit. */
        if ((hi = cn_hex_digit(text[i])) < 0 || (lo = cn_hex_digit(text[i + 1])) < 0) {
            return false;
        }
        id[k++] = (uint8_t) (hi << 4 | lo);
        i++;
    }
    return text[CN_UUID_TEXT_LEN] == '\0';
}

void
cn_uuid_random(char out[CN_UUID_TEXT_LEN + 1])
{
    uint8_t b[16];
    size_t got = 0;

    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
        if (n < 0 && errno != EINTR) {
            cn_log(CN_LOG_ERROR, "getrandom: %s", strerror(errno));
            abort();
        }
        got += n > 0 ? (size_t) n : 0;
    }
    b[6] = (uint8_t) ((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t) ((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    cn_uuid_format(b, out);
}
