/* SPDX-License-Identifier: MIT */
/* Typed inputs: checks and JSON Schema (see types.h). */
#include "ir/types.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ir/eval.h"

static const char *
kind_text(enum ir_tykind k)
{
    static const char *const text[] = {"any",   "None", "str",  "int",
                                       "float", "bool", "list", "dict"};

    return (unsigned) k < sizeof(text) / sizeof(text[0]) ? text[k] : "?";
}

cn_err
ir_ty_text(const struct ir_ty *t, struct cn_buf *out)
{
    uint32_t i;

    if (t == NULL) {
        return cn_buf_puts(out, "any");
    }
    if (t->kind == IR_TY_UNION) {
        for (i = 0; i < t->nalts; i++) {
            CN_TRY(cn_buf_puts(out, i > 0 ? " | " : ""));
            CN_TRY(ir_ty_text(t->alts[i], out));
        }
        return CN_OK;
    }
    CN_TRY(cn_buf_puts(out, kind_text(t->kind)));
    if (t->elem != NULL) {
        CN_TRY(cn_buf_puts(out, t->kind == IR_TY_DICT ? "[str, " : "["));
        CN_TRY(ir_ty_text(t->elem, out));
        CN_TRY(cn_buf_puts(out, "]"));
    }
    return CN_OK;
}

/* The name of v's type as the language spells it (None for null). */
static const char *
val_text(struct ir_val v)
{
    switch (v.type) {
    case IR_T_NULL:
        return "None";
    case IR_T_MAP:
        return "dict";
    default:
        return ir_type_name(v.type);
    }
}

/* Whether v is of t, ignoring the items of a list or dict. */
static bool
shallow(const struct ir_ty *t, struct ir_val v)
{
    switch (t->kind) {
    case IR_TY_ANY:
        return true;
    case IR_TY_NONE:
        return v.type == IR_T_NULL;
    case IR_TY_STR:
        return v.type == IR_T_STR;
    case IR_TY_INT:
        return v.type == IR_T_INT;
    case IR_TY_FLOAT:
        return v.type == IR_T_INT || v.type == IR_T_FLOAT;
    case IR_TY_BOOL:
        return v.type == IR_T_BOOL;
    case IR_TY_LIST:
        return v.type == IR_T_LIST;
    case IR_TY_DICT:
        return v.type == IR_T_MAP;
    default:
        return false;
    }
}

cn_err
ir_ty_check(const struct ir_ty *t, struct ir_val v, const char *path, bool *ok, struct cn_buf *why)
{
    struct cn_buf sub = CN_BUF_INIT;
    cn_err rv = CN_OK;
    size_t i;

    *ok = true;
    if (t == NULL || t->kind == IR_TY_ANY) {
        return CN_OK;
    }
    if (t->kind == IR_TY_UNION) {
        /* One alternative that takes v whole: the first whose own kind matches decides the
         * reason when none does, so that `list[int] | None` says what was wrong inside. */
        const struct ir_ty *near = NULL;
        for (i = 0; i < t->nalts; i++) {
            bool one;
            struct cn_buf ignored = CN_BUF_INIT;
            CN_TRY(ir_ty_check(t->alts[i], v, path, &one, &ignored));
            cn_buf_fini(&ignored);
            if (one) {
                return CN_OK;
            }
            if (near == NULL && shallow(t->alts[i], v)) {
                near = t->alts[i];
            }
        }
        if (near != NULL) {
            return ir_ty_check(near, v, path, ok, why);
        }
        *ok = false;
        CN_TRY(cn_buf_printf(why, "%s: expected ", path));
        CN_TRY(ir_ty_text(t, why));
        return cn_buf_printf(why, ", got %s", val_text(v));
    }
    if (!shallow(t, v)) {
        *ok = false;
        CN_TRY(cn_buf_printf(why, "%s: expected ", path));
        CN_TRY(ir_ty_text(t, why));
        return cn_buf_printf(why, ", got %s", val_text(v));
    }
    if (t->elem == NULL) {
        return CN_OK;
    }
    if (t->kind == IR_TY_LIST) {
        for (i = 0; i < ir_list_len(v) && *ok && rv == CN_OK; i++) {
            cn_buf_clear(&sub);
            if ((rv = cn_buf_printf(&sub, "%s[%zu]", path, i)) == CN_OK) {
                rv = ir_ty_check(t->elem, ir_list_items(v)[i], sub.data, ok, why);
            }
        }
    } else {
        for (i = 0; i < ir_map_len(v) && *ok && rv == CN_OK; i++) {
            struct ir_val k = ir_map_key_at(v, i);
            cn_buf_clear(&sub);
            if ((rv = cn_buf_printf(&sub, "%s.%s", path, ir_str_data(k))) == CN_OK) {
                rv = ir_ty_check(t->elem, ir_map_val_at(v, i), sub.data, ok, why);
            }
        }
    }
    cn_buf_fini(&sub);
    return rv;
}

/* ---- JSON Schema -------------------------------------------------------------------------- */

static json_t *
schema_of(const struct ir_ty *t)
{
    static const char *const json_type[] = {NULL,     "null",    "string", "integer",
                                            "number", "boolean", "array",  "object"};
    json_t *o = json_object();
    uint32_t i;

    if (o == NULL || t == NULL || t->kind == IR_TY_ANY) {
        return o;
    }
    if (t->kind == IR_TY_UNION) {
        json_t *alts = json_array();
        for (i = 0; alts != NULL && i < t->nalts; i++) {
            if (json_array_append_new(alts, schema_of(t->alts[i])) != 0) {
                json_decref(alts);
                alts = NULL;
            }
        }
        if (alts == NULL || json_object_set_new(o, "anyOf", alts) != 0) {
            json_decref(o);
            return NULL;
        }
        return o;
    }
    if (json_object_set_new(o, "type", json_string(json_type[t->kind])) != 0) {
        json_decref(o);
        return NULL;
    }
    if (t->elem != NULL) {
        json_t *e = schema_of(t->elem);
        if (e == NULL || json_object_set_new(
                             o, t->kind == IR_TY_LIST ? "items" : "additionalProperties", e) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

cn_err
ir_inputs_schema(const struct ir_func *f, const struct ir_xpool *exprs, const char *title,
                 struct cn_buf *out)
{
    json_t *root =
        json_pack("{s:s,s:s,s:s,s:b}", "$schema", "https://json-schema.org/draft/2020-12/schema",
                  "title", title, "type", "object", "additionalProperties", 0);
    json_t *props = json_object(), *req = json_array();
    cn_err rv = CN_OK;
    char *text;
    uint32_t i;

    if (root == NULL || props == NULL || req == NULL) {
        json_decref(root);
        json_decref(props);
        json_decref(req);
        return CN_NOMEM;
    }
    for (i = 0; i < f->inputs.len && rv == CN_OK; i++) {
        const struct ir_param *p = f->params != NULL ? &f->params[i] : NULL;
        json_t *s = schema_of(p != NULL ? p->type : NULL);
        if (s == NULL) {
            rv = CN_NOMEM;
            break;
        }
        if (p != NULL && p->dflt != IR_NO_EXPR) {
            struct cn_buf js = CN_BUF_INIT;
            struct ir_val dv = ir_null();
            struct cn_errmsg em;
            json_error_t jerr;
            json_t *d = NULL;
            cn_err ev = ir_eval_const(exprs, p->dflt, &dv); /* a literal (the checker's word) */
            if (ev != CN_OK) {
                rv = ev == CN_NOMEM ? CN_NOMEM : CN_INVAL;
            } else if ((rv = ir_val_to_json(dv, &js, &em)) == CN_OK &&
                       (d = json_loadb(js.data, js.len, JSON_DECODE_ANY, &jerr)) == NULL) {
                rv = CN_NOMEM;
            }
            ir_val_release(dv);
            cn_buf_fini(&js);
            if (rv == CN_OK && json_object_set_new(s, "default", d) != 0) {
                rv = CN_NOMEM;
            }
        } else if (json_array_append_new(req, json_string(f->inputs.items[i])) != 0) {
            rv = CN_NOMEM;
        }
        if (json_object_set_new(props, f->inputs.items[i], s) != 0) {
            rv = CN_NOMEM;
        }
    }
    if (rv == CN_OK) {
        /* the _new setters take the reference whatever happens */
        int bad = json_object_set_new(root, "properties", props);
        bad |= json_object_set_new(root, "required", req);
        rv = bad != 0 ? CN_NOMEM : CN_OK;
    } else {
        json_decref(props);
        json_decref(req);
    }
    text = rv == CN_OK ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (rv == CN_OK && text == NULL) {
        rv = CN_NOMEM;
    }
    if (rv == CN_OK) {
        rv = cn_buf_puts(out, text);
    }
    free(text);
    return rv;
}
