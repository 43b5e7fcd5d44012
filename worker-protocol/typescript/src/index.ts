// SPDX-License-Identifier: MIT
//
// Cairn's TypeScript SDK: workers that serve actions as ordinary async functions
// (worker.ts, over the worker protocol: docs/protocol.md), the values they exchange with the
// engine (values.ts), and a client that starts and watches workflows over the SQL API
// (client.ts, with their JSON in json.ts).

export { type Action, type ActionContext, Refused, Worker, type WorkerOptions } from "./worker.js";
export { type ErrorMap, errorMap, NonRetryable, ValueError } from "./errors.js";
export { decode, encode, Float, MAX_DEPTH, type Value, ValueDecodeError, ValueTypeError } from "./values.js";
export { parseUrl, type TlsOptions, WireError } from "./wire.js";
export { ProtocolError } from "./proto.js";
export {
  Client,
  type ClientOptions,
  type EnqueueManyOptions,
  type EnqueueOptions,
  FINISHED,
  InputRefused,
  InputRejected,
  type InstanceStatus,
  NotFinished,
  NotFound,
  WorkflowFailed,
} from "./client.js";
export { JsonError, parseJson, toJson } from "./json.js";
