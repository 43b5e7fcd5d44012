/* SPDX-License-Identifier: MIT */
/*
 * UUIDs as text: the canonical 36-character form (8-4-4-4-12 lowercase hex digits) of a
 * 16-byte id, and back. Ids are plain bytes here and below the runner (the runner gives each
 * kind its own type and passes its bytes in; the database stores them as uuid); this is the
 * one place that spells them. Thread-safe; all pure but cn_uuid_random.
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

/* A fresh random (version 4) UUID's text into out, from getrandom(2); aborts if the kernel has
 * none to give (it blocks until its pool is seeded, once per boot). For ids a process names
 * itself by (a runner in cairn.runners, a claimer in cairn.claim_waits), not for instances. */
void cn_uuid_random(char out[CN_UUID_TEXT_LEN + 1]);

#endif
