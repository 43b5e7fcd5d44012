// SPDX-License-Identifier: MIT
//
// The worker protocol's messages (docs/protocol.md, "Messages"): one MessagePack map per
// message, `v` 1 and a `kind`; ids are 16-byte bin; values are bin fields holding a value
// document (values.ts).

import { decode, encodeEnvelope, type Value, ValueDecodeError } from "./values.js";

export const VERSION = 1;
export const SDK = "cairn-typescript/0.1";

/** A reply that does not decode, or that the protocol does not allow here. */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

function msg(kind: string, fields: Record<string, unknown>): Uint8Array {
  return encodeEnvelope({ ...fields, v: VERSION, kind });
}

export function hello(
  worker: string,
  actions: string[],
  slots: number,
  prefetch: number,
  credential: string | null,
): Uint8Array {
  return msg("hello", { worker, sdk: SDK, credential, actions, slots, prefetch });
}

/** One attempt's outcome, reported in a ready. */
export interface Outcome {
  exec_id: Uint8Array;
  attempt: number;
  token: number | bigint;
  ok: boolean;
  value: Uint8Array; // a value document
}

export function ready(outcomes: Outcome[]): Uint8Array {
  return msg("ready", { outcomes });
}

export function control(): Uint8Array {
  return msg("control", {});
}

export function goodbye(): Uint8Array {
  return msg("goodbye", {});
}

/** One entry of a dispatch. */
export interface Attempt {
  instance: Uint8Array;
  exec_id: Uint8Array;
  attempt: number;
  token: number | bigint;
  action: string;
  kwargs: { [key: string]: Value };
  deadline_ms: number; // absolute wall clock ms; 0: none
  timeout_ms: number; // counted from the start on a slot; 0: none
  last_error: Value; // the previous attempt's error map, null on attempt 1
}

export type Reply =
  | { kind: "welcome"; idle_ms: number }
  | { kind: "refused"; reason: string }
  | { kind: "noop" }
  | { kind: "ack" }
  | { kind: "dispatch"; items: Attempt[] }
  | { kind: "cancel"; exec_id: Uint8Array; attempt: number; token: number | bigint };

function id(b: unknown): Uint8Array {
  if (!(b instanceof Uint8Array) || b.length !== 16) {
    throw new ProtocolError("an id must be 16 bytes");
  }
  return b;
}

function num(v: unknown, what: string): number {
  if (typeof v === "number") {
    return v;
  }
  if (typeof v === "bigint") {
    return Number(v);
  }
  if (v === undefined || v === null) {
    return 0;
  }
  throw new ProtocolError(`${what} must be an int`);
}

function attempt(m: unknown): Attempt {
  if (m === null || typeof m !== "object" || Array.isArray(m)) {
    throw new ProtocolError("a dispatch item must be a map");
  }
  const a = m as Record<string, unknown>;
  const kw = a.kwargs instanceof Uint8Array ? decode(a.kwargs) : null;
  if (typeof a.action !== "string" || kw === null || typeof kw !== "object" || Array.isArray(kw) ||
      kw instanceof Uint8Array) {
    throw new ProtocolError("bad dispatch item: action must be a str and kwargs a map");
  }
  const tok = a.token;
  if (typeof tok !== "number" && typeof tok !== "bigint") {
    throw new ProtocolError("bad dispatch item: token must be an int");
  }
  return {
    instance: id(a.instance),
    exec_id: id(a.exec_id),
    attempt: num(a.attempt, "attempt"),
    token: tok,
    action: a.action,
    kwargs: kw as { [key: string]: Value },
    deadline_ms: num(a.deadline_ms, "deadline_ms"),
    timeout_ms: num(a.timeout_ms, "timeout_ms"),
    last_error: a.last_error instanceof Uint8Array ? decode(a.last_error) : null,
  };
}

/** A reply, checked. */
export function decodeReply(body: Uint8Array): Reply {
  let m: unknown;
  try {
    m = decode(body, { bin: true });
  } catch (e) {
    throw new ProtocolError(`reply does not decode: ${(e as ValueDecodeError).message}`);
  }
  if (m === null || typeof m !== "object" || Array.isArray(m)) {
    throw new ProtocolError("reply is not a version 1 message");
  }
  const r = m as Record<string, unknown>;
  if (r.v !== VERSION || typeof r.kind !== "string") {
    throw new ProtocolError("reply is not a version 1 message");
  }
  try {
    switch (r.kind) {
      case "welcome":
        return { kind: "welcome", idle_ms: r.idle_ms === undefined ? 20000 : num(r.idle_ms, "idle_ms") };
      case "refused":
        return { kind: "refused", reason: typeof r.reason === "string" ? r.reason : "refused" };
      case "noop":
      case "ack":
        return { kind: r.kind };
      case "dispatch": {
        if (!Array.isArray(r.items) || r.items.length === 0) {
          throw new ProtocolError("a dispatch needs items");
        }
        return { kind: "dispatch", items: r.items.map(attempt) };
      }
      case "cancel":
        return {
          kind: "cancel",
          exec_id: id(r.exec_id),
          attempt: num(r.attempt, "attempt"),
          token: typeof r.token === "bigint" ? r.token : num(r.token, "token"),
        };
      default:
        throw new ProtocolError(`unknown reply kind ${JSON.stringify(r.kind)}`);
    }
  } catch (e) {
    if (e instanceof ProtocolError) {
      throw e;
    }
    throw new ProtocolError(`bad ${r.kind}: ${(e as Error).message}`);
  }
}
