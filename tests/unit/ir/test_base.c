/* SPDX-License-Identifier: MIT */
/* The program helpers of ir/base/: UUID text (both ways, and what is refused) and command-line
 * options from a table (syntax, precedence of flag, variable and default, range checks, the
 * messages of bad usage); log lines (levels, text and JSON). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "ir/base/log.h"
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

/* ---- stderr capture ------------------------------------------------------------------------ */

struct capture {
    int saved, fd[2];
    char text[8192];
};

static void
capture_start(struct capture *c)
{
    (void) fflush(stderr);
    cr_assert_eq(pipe(c->fd), 0);
    (void) fcntl(c->fd[0], F_SETFL, O_NONBLOCK);
    c->saved = dup(2);
    cr_assert_eq(dup2(c->fd[1], 2), 2);
}

/* Restores stderr; c->text holds what was written meanwhile (up to 8 KiB: plenty here). */
static void
capture_end(struct capture *c)
{
    ssize_t n;
    size_t len = 0;

    (void) fflush(stderr);
    cr_assert_eq(dup2(c->saved, 2), 2);
    close(c->saved);
    close(c->fd[1]);
    while (len < sizeof(c->text) - 1 &&
           (n = read(c->fd[0], c->text + len, sizeof(c->text) - 1 - len)) > 0) {
        len += (size_t) n;
    }
    c->text[len] = '\0';
    close(c->fd[0]);
}

/* ---- log ---------------------------------------------------------------------------------- */

Test(ir_base, log_levels_and_names)
{
    enum cn_log_level l;
    bool json = true;

    cr_assert(cn_log_level_parse("debug", &l) && l == CN_LOG_DEBUG);
    cr_assert(cn_log_level_parse("error", &l) && l == CN_LOG_ERROR);
    cr_assert(!cn_log_level_parse("warning", &l));
    cr_assert(cn_log_format_parse("text", &json) && !json);
    cr_assert(cn_log_format_parse("json", &json) && json);
    cr_assert(!cn_log_format_parse("JSON", &json));
}

Test(ir_base, log_text_lines_drop_what_is_below_the_level)
{
    struct capture c;

    capture_start(&c);
    cn_log_setup(CN_LOG_WARN, false);
    cn_log(CN_LOG_INFO, "not shown");
    cn_log(CN_LOG_WARN, "shown %d", 42);
    cn_log_setup(CN_LOG_INFO, false);
    capture_end(&c);
    cr_assert_null(strstr(c.text, "not shown"), "%s", c.text);
    cr_assert_not_null(strstr(c.text, "Z warn  shown 42\n"), "%s", c.text);
    cr_assert_eq(strchr(c.text, '\n'), c.text + strlen(c.text) - 1, "one line: %s", c.text);
}

Test(ir_base, log_json_lines_are_objects_with_ts_level_msg)
{
    struct capture c;
    json_error_t je;
    json_t *o;

    capture_start(&c);
    cn_log_setup(CN_LOG_DEBUG, true);
    cn_log(CN_LOG_ERROR, "a \"quoted\" %s", "word");
    cn_log_setup(CN_LOG_INFO, false);
    capture_end(&c);
    o = json_loads(c.text, 0, &je);
    cr_assert_not_null(o, "not JSON: %s", c.text);
    cr_assert_str_eq(json_string_value(json_object_get(o, "level")), "error");
    cr_assert_str_eq(json_string_value(json_object_get(o, "msg")), "a \"quoted\" word");
    cr_assert_not_null(json_string_value(json_object_get(o, "ts")));
    json_decref(o);
}
