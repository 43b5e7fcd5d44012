/* SPDX-License-Identifier: MIT */
/*
 * Values: the one data type of the whole engine (workflow inputs, variables, action kwargs and
 * results, errors). null, bool, int64, float64, UTF-8 string, list, map (string keys, insertion
 * order kept). Scalars live inside struct ir_val; strings, lists and maps are immutable,
 * reference-counted heap objects shared between values, so copying a value is O(1).
 *
 * DESIGN
 * - Immutable after construction: builders (ir_list_items, ir_map_set) may be used only while
 *   the caller holds the only reference (asserted), i.e. while building a fresh value.
 * - Reference counts are atomic, so a finished value may be shared read-only across threads
 *   (shard -> persister -> worker pool). Nothing else in here is thread-aware.
 * - Equality and hashing follow Python: 1 == 1.0 == True, and equal values hash equally.
 * - An error value (error.h; docs/language.md "Errors") is a map carrying the error flag; it
 *   compares and encodes like the plain map {"type", "message", "bases", "details"} except in
 *   the internal msgpack encoding, which keeps the flag (ext type IR_MP_EXT_ERROR).
 * - Nesting depth is limited to IR_VALUE_MAX_DEPTH in every decoder: msgpack-c's C unpacker has
 *   a fixed 32-level stack, and JSON follows the same limit so any value accepted at the edge
 *   can be stored. Containers that embed values in larger msgpack documents (protocol messages,
 *   snapshots) carry them as `bin` holding a separate value document.
 */
#ifndef IR_VALUE_H
#define IR_VALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"

/* Deepest accepted nesting of lists/maps; a scalar at top level has depth 1. Every value sits
 * at a level: the top-level value at 1, the elements of a container at level L at L + 1, and
 * a value's depth is its deepest level, so [] and 7 have depth 1, [7] and [[]] depth 2. An
 * error map wrapped in the internal ext (IR_MP_EXT_ERROR) sits at the level of the ext: the
 * wrapper adds no level, so a value has the same depth in the plain and internal encodings. */
#define IR_VALUE_MAX_DEPTH 32

/* msgpack ext type used by the internal encoding to mark error maps. */
#define IR_MP_EXT_ERROR 1

enum ir_type {
    IR_T_NULL = 0,
    IR_T_BOOL,
    IR_T_INT,
    IR_T_FLOAT,
    IR_T_STR,
    IR_T_LIST,
    IR_T_MAP,
};

struct ir_str;
struct ir_list;
struct ir_map;

/* A value. Passed by value; holds one reference to its heap object, if any. */
struct ir_val {
    enum ir_type type;
    union {
        bool b;
        int64_t i;
        double f;
        struct ir_str *s;
        struct ir_list *l;
        struct ir_map *m;
    } u;
};

/* ---- scalars (no allocation, nothing to release) ---- */
struct ir_val ir_null(void);
struct ir_val ir_bool(bool b);
struct ir_val ir_int(int64_t i);
struct ir_val ir_float(double f);

/* Returns the lowercase type name used in error messages ("int", "str", "dict"...). */
const char *ir_type_name(enum ir_type t);

/* ---- reference counting ---- */
/* Returns v with one more reference. Thread-safe. */
struct ir_val ir_val_retain(struct ir_val v);
/* Drops one reference; frees the object (recursively) at zero. Thread-safe. Scalars: no-op. */
void ir_val_release(struct ir_val v);

/* ---- strings ---- */
/* True if s[0..len) is well-formed UTF-8 (no overlongs, surrogates or code points above
 * U+10FFFF); then stores the number of code points in *cplen if cplen is not NULL. */
bool ir_utf8_valid(const char *s, size_t len, size_t *cplen);
/* Copies len bytes of UTF-8 into a new string value. Returns CN_OK, CN_UTF8 (invalid UTF-8,
 * including overlongs and surrogates) or CN_NOMEM. Embedded NULs are allowed. */
CN_MUST_CHECK cn_err ir_str_new(const char *s, size_t len, struct ir_val *out);
/* Same, from a NUL-terminated C string. */
CN_MUST_CHECK cn_err ir_str_from_cstr(const char *s, struct ir_val *out);
/* Borrowed pointer to the bytes (NUL-terminated, valid while v is). v must be a string. */
const char *ir_str_data(struct ir_val v);
/* Length in bytes. */
size_t ir_str_len(struct ir_val v);
/* Length in code points (Python's len()). */
size_t ir_str_cplen(struct ir_val v);

/* ---- lists ---- */
/* New list of len nulls, to be filled through ir_list_items. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_list_new(size_t len, struct ir_val *out);
/* New list of the strings names[0..n) (valid UTF-8). CN_NOMEM leaves *out null. */
CN_MUST_CHECK cn_err ir_list_of_cstrs(const char *const *names, size_t n, struct ir_val *out);
size_t ir_list_len(struct ir_val v);
/* Borrowed element array. Writing through it is allowed only while the list is unshared;
 * an element stored there is owned by the list. */
struct ir_val *ir_list_items(struct ir_val v);

/* ---- maps ---- */
/* New empty map with room for cap_hint entries. Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_map_new(size_t cap_hint, struct ir_val *out);
/* Inserts or replaces key (a string value) -> val; a replaced key keeps its position, as in
 * Python. The map must be unshared. Takes ownership of key and val always (they are released
 * on error). Returns CN_OK, CN_TYPE (key not a string) or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_map_set(struct ir_val *map, struct ir_val key, struct ir_val val);
/* Convenience: copies a C string key. Takes ownership of val always. */
CN_MUST_CHECK cn_err ir_map_set_cstr(struct ir_val *map, const char *key, struct ir_val val);
/* Borrowed pointer to the value under key, or NULL. */
const struct ir_val *ir_map_get(struct ir_val map, const char *key, size_t key_len);
size_t ir_map_len(struct ir_val v);
/* Borrowed key (a string value) and value of the i-th entry in insertion order. */
struct ir_val ir_map_key_at(struct ir_val v, size_t i);
struct ir_val ir_map_val_at(struct ir_val v, size_t i);
/* Error flag (see DESIGN above). Setting requires an unshared map. */
bool ir_map_is_error(struct ir_val v);
void ir_map_set_error(struct ir_val *map, bool is_error);

/* True when v nests deeper than `limit` levels (a scalar or an empty container has depth 1).
 * O(1) for containers already measured, otherwise one pass over unmeasured parts, never
 * deeper than `limit` frames. Thread-safe for shared values. The executor keeps every value it
 * stores within IR_VALUE_MAX_DEPTH, so everything it holds can be snapshotted. */
bool ir_val_deeper_than(struct ir_val v, unsigned limit);

/* ---- comparison and hashing (Python semantics) ---- */
/* Deep equality: 1 == 1.0 == True, nan != nan, lists element-wise, maps as unordered sets of
 * pairs (Python dict equality ignores order). */
bool ir_val_equal(struct ir_val a, struct ir_val b);
/* Hash consistent with ir_val_equal (hash(1) == hash(1.0) == hash(True)). Deterministic
 * (unseeded), so it is the same in every process on the same architecture. */
uint64_t ir_val_hash(struct ir_val v);
/* Strict structural identity, for codec tests and fuzzers: same types everywhere (1 is not
 * 1.0 nor True), maps in the same order, floats compared bit for bit (so nan matches nan and
 * -0.0 does not match 0.0), error flags equal. */
bool ir_val_same(struct ir_val a, struct ir_val b);
/* Both ir_val_equal and ir_val_hash recurse once per nesting level; ir_val_release does not
 * (it frees iteratively), so only values built deeper than the stack allows are a problem. */

/* ---- text forms ---- */
/* A float's repr alone is ir_float_repr (numtext.h). */
/* Appends Python's repr() of v ("None", "True", "'it\\'s'", "[1, 2.5]", "{'a': 1}").
 * Non-printable characters are escaped for the assigned code points Python 3.11 treats as
 * non-printable (controls, separators, format characters, private use); unassigned code
 * points are copied as they are. Returns CN_OK, CN_NOMEM or CN_DEPTH (nesting deeper than
 * IR_REPR_MAX_DEPTH, as Python's RecursionError). */
#define IR_REPR_MAX_DEPTH 1000
CN_MUST_CHECK cn_err ir_val_repr(struct ir_val v, struct cn_buf *out);

/* ---- JSON (decode with jansson, encode by hand to keep Python float text) ---- */
/* Parses one JSON document (any value at top level). Objects keep key order; duplicate keys
 * keep the last value at the first position, as Python's json does. Integers outside int64
 * are CN_RANGE; nesting beyond IR_VALUE_MAX_DEPTH is CN_DEPTH; syntax errors are CN_PARSE with
 * line:col in err. */
CN_MUST_CHECK cn_err ir_val_from_json(const char *text, size_t len, struct ir_val *out,
                                      struct cn_errmsg *err);
/* Appends compact JSON (", " and ": " separators as Python's json.dumps). Floats keep a
 * fraction or exponent (3.0 stays 3.0). NaN and infinities are CN_RANGE (JSON cannot carry
 * them). Error maps encode as plain objects. */
CN_MUST_CHECK cn_err ir_val_to_json(struct ir_val v, struct cn_buf *out, struct cn_errmsg *err);

/* ---- msgpack ---- */
enum {
    IR_MP_PLAIN = 0,          /* error maps encode as plain maps; ext types are rejected */
    IR_MP_INTERNAL = 1u << 0, /* error maps round-trip through ext IR_MP_EXT_ERROR */
};

/* Largest max_depth ir_msgpack_shape_ok accepts: msgpack-c's C unpacker cannot go deeper
 * (MSGPACK_EMBED_STACK_SIZE), so no caller may ask for more. */
#define IR_MSGPACK_SHAPE_MAX_DEPTH 32

/* Checks, without allocating, that buf holds exactly one well-formed msgpack object whose
 * containers each declare no more children than bytes remain, nested no deeper than
 * max_depth. This must pass before any msgpack-c unpack call (msgpack-c recurses without a limit).
 * Returns CN_OK, CN_PARSE (truncated/trailing/reserved byte) or CN_DEPTH. */
CN_MUST_CHECK cn_err ir_msgpack_shape_ok(const void *buf, size_t len, int max_depth,
                                         struct cn_errmsg *err);

/* Appends the msgpack encoding of v (ints in the smallest form, floats as float64).
 * Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_val_to_msgpack(struct ir_val v, unsigned flags, struct cn_buf *out);
/* Decodes exactly one value document. Rejects bin, non-error ext, uint64 above INT64_MAX
 * (CN_RANGE), non-string map keys (CN_TYPE), invalid UTF-8 (CN_UTF8), truncation or trailing
 * bytes (CN_PARSE), depth (CN_DEPTH). Never crashes or over-allocates on hostile input. */
CN_MUST_CHECK cn_err ir_val_from_msgpack(const void *buf, size_t len, unsigned flags,
                                         struct ir_val *out, struct cn_errmsg *err);

/* Decodes one unpacked msgpack-c scalar (nil, bool, int, float, str) into *out, for the decoders
 * of larger documents that embed values (the DAG codec's constants). Returns CN_OK, CN_RANGE
 * (an unsigned integer above INT64_MAX), ir_str_new's error for a string (CN_UTF8, CN_NOMEM),
 * or CN_TYPE for anything else (*out untouched); each caller words its own error. */
struct msgpack_object;
CN_MUST_CHECK cn_err ir_val_from_msgpack_scalar(const struct msgpack_object *o, struct ir_val *out);

#endif
