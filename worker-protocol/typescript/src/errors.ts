// SPDX-License-Identifier: MIT
//
// What an action's failure is reported as: the protocol's error map {type, message, bases,
// details, retryable?} (docs/protocol.md), named the way the workflow language names errors
// (Python's): so that `[ConnectionError -> retry: 3]` and `except TimeoutError` cover what Node
// raises, and a user's `class PaymentDeclined extends ValueError` is caught as a ValueError.

/** An error map, as the workflow sees it (`except E as e`: e["type"], e["message"]...). */
export interface ErrorMap {
  type: string;
  message: string;
  bases: string[];
  details: string | null;
  retryable?: boolean;
}

/** Python's ValueError, for actions that refuse a value (RangeError counts as one too). */
export class ValueError extends Error {
  constructor(message?: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ValueError";
  }
}

/** A failure that trying again cannot fix (a declined card): the runner never retries it,
 * whatever the workflow's policy. `new NonRetryable(err)` keeps err's type and bases. */
export class NonRetryable extends Error {
  readonly error: unknown;
  constructor(error: unknown) {
    super(error instanceof Error ? error.message : String(error));
    this.name = "NonRetryable";
    this.error = error;
  }
}

/** Node's system error codes, as the Python-compatible types the language's policies name. */
const SYSTEM: Record<string, [string, string[]]> = {
  ECONNREFUSED: ["ConnectionRefusedError", ["ConnectionError", "OSError"]],
  ECONNRESET: ["ConnectionResetError", ["ConnectionError", "OSError"]],
  ECONNABORTED: ["ConnectionAbortedError", ["ConnectionError", "OSError"]],
  EPIPE: ["BrokenPipeError", ["ConnectionError", "OSError"]],
  ETIMEDOUT: ["TimeoutError", ["OSError"]],
  EHOSTUNREACH: ["ConnectionError", ["OSError"]],
  ENETUNREACH: ["ConnectionError", ["OSError"]],
  EAI_AGAIN: ["ConnectionError", ["OSError"]],
  ENOTFOUND: ["ConnectionError", ["OSError"]],
  ENOENT: ["FileNotFoundError", ["OSError"]],
  EACCES: ["PermissionError", ["OSError"]],
  EEXIST: ["FileExistsError", ["OSError"]],
};

/** JavaScript's own error classes, with the Python bases that mean the same. */
const BUILTIN_BASES: Record<string, string[]> = {
  RangeError: ["ValueError"],
  TypeError: [],
  SyntaxError: [],
  ReferenceError: ["NameError"],
  AggregateError: [],
  ValueError: [],
};

function bases(e: Error): string[] {
  const out: string[] = [];
  for (let p = Object.getPrototypeOf(Object.getPrototypeOf(e)) as object | null; p !== null;
    p = Object.getPrototypeOf(p) as object | null) {
    const name = (p.constructor as { name?: string } | undefined)?.name;
    if (name === undefined || name === "Object" || name === "Error" || name === "") {
      continue;
    }
    out.push(name, ...(BUILTIN_BASES[name] ?? []));
  }
  return out;
}

function typeName(e: Error): string {
  const proto = Object.getPrototypeOf(e) as object | null;
  const ctor = (proto?.constructor as { name?: string } | undefined)?.name;
  // The class's own name, unless it set a name of its own (class X extends Error {name = "Y"})
  if (typeof e.name === "string" && e.name !== "" && e.name !== "Error") {
    return e.name;
  }
  return ctor && ctor !== "Object" ? (ctor === "Error" ? "Error" : ctor) : "Error";
}

function unique(xs: string[]): string[] {
  return [...new Set(xs)];
}

/** The error map for something an action threw. */
export function errorMap(thrown: unknown, retryable = true): ErrorMap {
  let inner = thrown;
  if (thrown instanceof NonRetryable) {
    inner = thrown.error;
    retryable = false;
  }
  let m: ErrorMap;
  if (inner instanceof Error) {
    const code = (inner as { code?: unknown }).code;
    const sys = typeof code === "string" ? SYSTEM[code] : undefined;
    if (sys !== undefined) {
      m = {
        type: sys[0],
        message: inner.message,
        bases: unique([...sys[1], "Exception"]),
        details: inner.stack ?? null,
      };
    } else {
      const t = typeName(inner);
      m = {
        type: t,
        message: inner.message,
        bases: unique([...(BUILTIN_BASES[t] ?? []), ...bases(inner), "Exception"].filter((b) => b !== t)),
        details: inner.stack ?? null,
      };
    }
  } else {
    // a thrown string, number or object: no class, no stack
    m = { type: "Error", message: typeof inner === "string" ? inner : String(inner), bases: ["Exception"], details: null };
  }
  if (!retryable) {
    m.retryable = false;
  }
  return m;
}

/** An error map for a failure the worker itself reports (no exception, no stack). */
export function plainError(type: string, message: string): ErrorMap {
  return { type, message, bases: ["Exception"], details: null };
}
