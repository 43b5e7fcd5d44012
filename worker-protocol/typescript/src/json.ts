// SPDX-License-Identifier: MIT
//
// JSON text to and from values (values.ts), for the client: the SQL API takes and gives inputs,
// results and errors as JSON (docs/values.md, "At the edges: JSON"), and JavaScript's JSON loses
// what the engine keeps: an integer past 2^53 (JSON.parse rounds it), 3.0 against 3 (both are
// the number 3), and `__proto__` as a key. Here an integer is a number, or a bigint past 2^53; a
// number written with a fraction or an exponent is a float (a Float when it has no fraction), as
// the engine reads it.

import { Float, MAX_DEPTH, type Value, ValueTypeError } from "./values.js";

/** JSON text that does not parse, with where. */
export class JsonError extends SyntaxError {
  constructor(message: string) {
    super(message);
    this.name = "JsonError";
  }
}

/** Parses JSON text into a value. */
export function parseJson(text: string): Value {
  let i = 0;
  const fail = (what: string): never => {
    throw new JsonError(`${what} at offset ${i}`);
  };
  const ws = (): void => {
    while (i < text.length && (text[i] === " " || text[i] === "\n" || text[i] === "\r" || text[i] === "\t")) {
      i++;
    }
  };
  const value = (depth: number): Value => {
    if (depth > MAX_DEPTH) {
      fail(`nests deeper than ${MAX_DEPTH} levels`);
    }
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const o = Object.create(null) as { [key: string]: Value };
      ws();
      if (text[i] === "}") {
        i++;
        return o;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') {
          fail("expected a string key");
        }
        const k = str();
        ws();
        if (text[i++] !== ":") {
          fail("expected ':'");
        }
        Object.defineProperty(o, k, { value: value(depth + 1), enumerable: true, writable: true, configurable: true });
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i++] === "}") {
          return o;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const a: Value[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return a;
      }
      for (;;) {
        a.push(value(depth + 1));
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i++] === "]") {
          return a;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c === '"') {
      return str();
    }
    for (const [word, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    const m = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (m === null) {
      return fail("expected a value");
    }
    i += m[0].length;
    if (m[1] === undefined && m[2] === undefined) {
      const n = Number(m[0]);
      return Number.isSafeInteger(n) ? n : BigInt(m[0]);
    }
    const f = Number(m[0]);
    return Number.isInteger(f) && !Object.is(f, -0) ? new Float(f) : f;
  };
  const str = (): string => {
    const start = i;
    i++;
    while (i < text.length && text[i] !== '"') {
      i += text[i] === "\\" ? 2 : 1;
    }
    if (i >= text.length) {
      fail("unterminated string");
    }
    i++;
    try {
      return JSON.parse(text.slice(start, i)) as string;
    } catch {
      return fail("bad string");
    }
  };
  const v = value(1);
  ws();
  if (i !== text.length) {
    fail("trailing text");
  }
  return v;
}

/** A value as JSON text the engine reads back as the same value: ints as digits (bigints
 * too), floats with a fraction or an exponent (3.0 for a Float 3). Throws ValueTypeError for
 * what has no JSON (NaN, infinities) or no engine value, naming where. */
export function toJson(v: unknown, where = "the value", depth = 1): string {
  if (depth > MAX_DEPTH) {
    throw new ValueTypeError(`${where} nests deeper than ${MAX_DEPTH} levels`);
  }
  if (v === null) {
    return "null";
  }
  switch (typeof v) {
    case "boolean":
      return v ? "true" : "false";
    case "string":
      if (!v.isWellFormed()) {
        throw new ValueTypeError(`${where} is a string with a lone surrogate, which UTF-8 cannot hold`);
      }
      return JSON.stringify(v);
    case "bigint":
      if (v < -(2n ** 63n) || v > 2n ** 63n - 1n) {
        throw new ValueTypeError(`${where} is the bigint ${v}, outside the 64-bit range`);
      }
      return v.toString();
    case "number":
      return num(v, Number.isInteger(v) && !Object.is(v, -0), where);
    case "object":
      break;
    default:
      throw new ValueTypeError(`${where} is ${typeof v === "undefined" ? "undefined" : `a ${typeof v}`}, which has no engine value`);
  }
  if (v instanceof Float) {
    return num(v.value, false, where);
  }
  if (Array.isArray(v)) {
    return `[${v.map((x, k) => {
      if (x === undefined) {
        throw new ValueTypeError(`${where}[${k}] is undefined (use null)`);
      }
      return toJson(x, `${where}[${k}]`, depth + 1);
    }).join(", ")}]`;
  }
  const p = Object.getPrototypeOf(v) as object | null;
  if (p !== Object.prototype && p !== null) {
    throw new ValueTypeError(`${where} is a ${(v).constructor?.name ?? "object"}, which has no engine value`);
  }
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .map((k) => `${toJson(k, where, depth)}: ${toJson(o[k], `${where}[${JSON.stringify(k)}]`, depth + 1)}`)
    .join(", ")}}`;
}

function num(n: number, int: boolean, where: string): string {
  if (!Number.isFinite(n)) {
    throw new ValueTypeError(`${where} is ${n}, which JSON cannot hold`);
  }
  if (int) {
    if (!Number.isSafeInteger(n)) {
      throw new ValueTypeError(`${where} is the number ${n}, past 2^53 where numbers skip integers: pass a bigint`);
    }
    return String(n);
  }
  const s = String(n);
  return /[.eE]/.test(s) ? s : `${s}.0`;
}
