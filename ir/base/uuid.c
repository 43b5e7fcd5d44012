/* SPDX-License-Identifier: MIT */
/* UUID text (see uuid.h). Written out rather than taken from libuuid: ir/ links nothing but
 * libc, msgpack-c and jansson, and the SDK built on it is installed for others to link. */
#include "ir/base/uuid.h"

#include "ir/base/buf.h"

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
