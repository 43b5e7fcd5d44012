/* SPDX-License-Identifier: MIT */
/*
 * JSON <-> value. Decoding parses with jansson and converts the json_t tree; encoding is
 * written by hand so floats keep Python's repr (jansson prints %.17g, which turns 0.1 into
 * 0.10000000000000001) and the separators match Python's json.dumps defaults.
 *
 * DESIGN
 * - jansson (2.8+) keeps object keys in insertion order and replaces a duplicate key's value
 *   in place, which is exactly Python's "last value, first position".
 * - jansson has its own nesting limit (JSON_PARSER_MAX_DEPTH, 2048) that bounds the parse and
 *   our recursion over its tree; ours (IR_VALUE_MAX_DEPTH) is enforced during conversion.
 * - jansson reports errors with a code since 2.11; we map it to our enum so callers can tell
 *   a bad number (CN_RANGE) from bad syntax (CN_PARSE) without parsing the text.
 */
#include <math.h>

#include <jansson.h>

#include "ir/numtext.h"
#include "ir/value.h"
#include "ir/value_int.h"

static cn_err
json_to_val(json_t *j, int depth, struct ir_val *out, struct cn_errmsg *err)
{
    struct ir_val v, k = ir_null(), item = ir_null();
    const char *key;
    size_t i, key_len;
    json_t *jv;
    cn_err rv;

    if (depth > IR_VALUE_MAX_DEPTH) {
        return cn_errmsg_set(err, CN_DEPTH, "JSON: nesting deeper than %d levels",
                             IR_VALUE_MAX_DEPTH);
    }
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = ir_null();
        return CN_OK;
    case JSON_TRUE:
        *out = ir_bool(true);
        return CN_OK;
    case JSON_FALSE:
        *out = ir_bool(false);
        return CN_OK;
    case JSON_INTEGER:
        *out = ir_int((int64_t) json_integer_value(j));
        return CN_OK;
    case JSON_REAL:
        *out = ir_float(json_real_value(j));
        return CN_OK;
    case JSON_STRING:
        if ((rv = ir_str_new(json_string_value(j), json_string_length(j), out)) != CN_OK) {
            return cn_errmsg_set(err, rv, "JSON: string: %s", cn_strerror(rv));
        }
        return CN_OK;
    case JSON_ARRAY:
        if ((rv = ir_list_new(json_array_size(j), &v)) != CN_OK) {
            return cn_errmsg_set(err, rv, "JSON: %s", cn_strerror(rv));
        }
        for (i = 0; i < json_array_size(j); i++) {
            if ((rv = json_to_val(json_array_get(j, i), depth + 1, &ir_list_items(v)[i], err)) !=
                CN_OK) {
                ir_val_release(v);
                return rv;
            }
        }
        *out = v;
        return CN_OK;
    case JSON_OBJECT:
        if ((rv = ir_map_new(json_object_size(j), &v)) != CN_OK) {
            return cn_errmsg_set(err, rv, "JSON: %s", cn_strerror(rv));
        }
        json_object_keylen_foreach(j, key, key_len, jv)
        {
            if ((rv = ir_str_new(key, key_len, &k)) != CN_OK) {
                ir_val_release(v);
                return cn_errmsg_set(err, rv, "JSON: object key: %s", cn_strerror(rv));
            }
            if ((rv = json_to_val(jv, depth + 1, &item, err)) != CN_OK) {
                ir_val_release(k);
                ir_val_release(v);
                return rv;
            }
            if ((rv = ir_map_set(&v, k, item)) != CN_OK) {
                ir_val_release(v);
                return cn_errmsg_set(err, rv, "JSON: %s", cn_strerror(rv));
            }
        }
        *out = v;
        return CN_OK;
    default:
        return cn_errmsg_set(err, CN_PARSE, "JSON: unexpected node type");
    }
}

static cn_err
json_err_code(const json_error_t *e)
{
    switch (json_error_code(e)) {
    case json_error_out_of_memory:
        return CN_NOMEM;
    case json_error_stack_overflow:
        return CN_DEPTH;
    case json_error_invalid_utf8:
        return CN_UTF8;
    case json_error_numeric_overflow:
        return CN_RANGE;
    default:
        return CN_PARSE;
    }
}

cn_err
ir_val_from_json(const char *text, size_t len, struct ir_val *out, struct cn_errmsg *err)
{
    json_error_t jerr;
    json_t *root;
    struct ir_val v;
    cn_err rv;

    root = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (root == NULL) {
        return cn_errmsg_set(err, json_err_code(&jerr), "JSON: line %d, column %d: %s", jerr.line,
                             jerr.column, jerr.text);
    }
    rv = json_to_val(root, 1, &v, err);
    json_decref(root);
    if (rv == CN_OK) {
        *out = v;
    }
    return rv;
}

/* The escapes json.dumps writes by name; the other C0 controls are \u00xx. */
static const char *const json_named_escapes[] = {
    ['"'] = "\\\"", ['\\'] = "\\\\", ['\b'] = "\\b", ['\f'] = "\\f",
    ['\n'] = "\\n", ['\r'] = "\\r",  ['\t'] = "\\t",
};

/* Python's json.dumps escapes '"', '\\' and C0 controls (\b \f \n \r \t by name, the rest
 * as \u00xx); everything else, including DEL and non-ASCII, is copied (ensure_ascii=False). */
static cn_err
json_put_str(struct ir_val s, struct cn_buf *out)
{
    const char *p = ir_str_data(s);
    size_t len = ir_str_len(s), i, run = 0;
    unsigned char c;
    cn_err rv;

    if ((rv = cn_buf_putc(out, '"')) != CN_OK) {
        return rv;
    }
    for (i = 0; i < len; i++) {
        c = (unsigned char) p[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            continue;
        }
        if ((rv = cn_buf_append(out, p + run, i - run)) != CN_OK) {
            return rv;
        }
        run = i + 1;
        if (c < sizeof(json_named_escapes) / sizeof(json_named_escapes[0]) &&
            json_named_escapes[c] != NULL) {
            rv = cn_buf_puts(out, json_named_escapes[c]);
        } else {
            rv = cn_buf_printf(out, "\\u%04x", (unsigned) c);
        }
        if (rv != CN_OK) {
            return rv;
        }
    }
    if ((rv = cn_buf_append(out, p + run, len - run)) != CN_OK) {
        return rv;
    }
    return cn_buf_putc(out, '"');
}

static const struct ir_text_style json_style = {
    "null", "true", "false", IR_VALUE_MAX_DEPTH, true, "JSON", json_put_str,
};

cn_err
ir_val_to_json(struct ir_val v, struct cn_buf *out, struct cn_errmsg *err)
{
    cn_err rv = ir_val_write_text(v, &json_style, 1, out, err);

    if (rv == CN_NOMEM) {
        return cn_errmsg_set(err, rv, "JSON: %s", cn_strerror(rv));
    }
    return rv;
}
