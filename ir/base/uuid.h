/* SPDX-License-Identifier: MIT */
/*
 * UUIDs as text: the canonical 36-character form (8-4-4-4-12 lowercase hex digits) of a
 * 16-byte id, and back. Ids are plain bytes here and below the runner (the runner gives each
 * kind its own type and passes its bytes in; the database stores them as uuid); this is the
 * one place that spells them. Pure, thread-safe.
 */
#ifndef IR_BASE_UUID_H
#define IR_BASE_UUID_H

#include <stdbool.h>
#include <stdint.h>

#define CN_UUID_TEXT_LEN 36

/* Writes the canonical lowercase text of id and a NUL into buf. */
void cn_uuid_format(const uint8_t id[16], char buf[CN_UUID_TEXT_LEN + 1]);

/* Parses exactly 36 characters (hyphens at 8, 13, 18, 23, hex digits of either case elsewhere,
 * nothing after) into id. Returns false, leaving id unspecified, for anything else. */
bool cn_uuid_parse(const char *text, uint8_t id[16]);

#endif
