/* SPDX-License-Identifier: MIT */
/* The program helpers of ir/base/: UUID text (both ways, and what is refused) and command-line
 * options from a table (syntax, precedence of flag, variable and default, range checks, the
 * messages of bad usage). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include "ir/base/uuid.h"
#include "tests/support/leak.h"

TestSuite(ir_base, .fini = t_leak_check, .timeout = 30);

/* ---- uuid --------------------------------------------------------------------------------- */

Test(ir_base, uuid_format_is_canonical_lowercase)
{
    const uint8_t id[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x46, 0x77,
                            0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    char text[CN_UUID_TEXT_LEN + 1];

    memset(text, 'x', sizeof(text));
    cn_uuid_format(id, text);
    cr_assert_str_eq(text, "00112233-4455-4677-8899-aabbccddeeff");
}

Test(ir_base, uuid_parse_round_trips_and_takes_either_case)
{
    uint8_t id[16], back[16];
    char text[CN_UUID_TEXT_LEN + 1];
    int i;

    for (i = 0; i < 16; i++) {
        id[i] = (uint8_t) (i * 17 + 3);
    }
    cn_uuid_format(id, text);
    cr_assert(cn_uuid_parse(text, back));
    cr_assert_arr_eq(id, back, 16);
    cr_assert(cn_uuid_parse("00112233-4455-4677-8899-AABBCCDDEEFF", back));
    cr_assert_eq(back[10], 0xaa);
    cr_assert_eq(back[15], 0xff);
}

Test(ir_base, uuid_parse_refuses_everything_else)
{
    static const char *const bad[] = {
        "",
        "not-a-uuid",
        "00112233-4455-4677-8899-aabbccddeef",   /* one short */
        "00112233-4455-4677-8899-aabbccddeeff0", /* one long */
        "00112233-4455-4677-8899-aabbccddeeg0",  /* not hex */
        "001122334-455-4677-8899-aabbccddeeff",  /* hyphen moved */
        "00112233_4455_4677_8899_aabbccddeeff",
        "{00112233-4455-4677-8899-aabbccddeeff}",
        "0011223344554677889 9aabbccddeeff0000",
    };
    uint8_t id[16];
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert(!cn_uuid_parse(bad[i], id), "accepted '%s'", bad[i]);
    }
}
