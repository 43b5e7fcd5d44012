// SPDX-License-Identifier: MIT
//
// Cairn's TypeScript SDK: workers that serve actions as ordinary async functions
// (worker.ts, over the worker protocol: docs/protocol.md), and the values they exchange with
// the engine (values.ts).

export { type Action, type ActionContext, Refused, Worker, type WorkerOptions } from "./worker.js";
export { type ErrorMap, errorMap, NonRetryable, ValueError } from "./errors.js";
export { decode, encode, Float, MAX_DEPTH, type Value, ValueDecodeError, ValueTypeError } from "./values.js";
export { parseUrl, type TlsOptions, WireError } from "./wire.js";
export { ProtocolError } from "./proto.js";
