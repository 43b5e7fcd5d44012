// SPDX-License-Identifier: MIT
// The actions worker.test.mjs serves (cairn-worker --module test/actions.mjs).
import { appendFileSync } from "node:fs";
import * as net from "node:net";

import { NonRetryable, ValueError } from "../dist/index.js";

class PaymentDeclined extends ValueError {
  constructor(message) {
    super(message);
    this.name = "PaymentDeclined";
  }
}

export default {
  "ts.echo": async ({ value }) => value,
  "ts.big": ({ bytes }) => "x".repeat(bytes - 1) + "!",
  "ts.sync_add": ({ a, b }) => a + b,
  "ts.ctx": async (_args, ctx) => ({
    action: ctx.action,
    attempt: ctx.attempt,
    instance: ctx.instanceId,
    exec: ctx.execId,
    key: ctx.idempotencyKey,
    has_deadline: ctx.deadline !== null,
    stopping: ctx.stopping,
  }),
  "ts.flaky": async ({ failures }, ctx) => {
    if (ctx.attempt <= failures) {
      throw new TypeError(`attempt ${ctx.attempt} failed`);
    }
    return { attempt: ctx.attempt, last: ctx.lastError === null ? null : ctx.lastError.type };
  },
  "ts.declined": async () => {
    throw new PaymentDeclined("card declined");
  },
  "ts.final": async () => {
    throw new NonRetryable(new ValueError("no such account"));
  },
  "ts.connect": ({ port }) =>
    new Promise((resolve, reject) => {
      const s = net.connect({ host: "127.0.0.1", port });
      s.on("connect", () => {
        s.destroy();
        resolve("connected");
      });
      s.on("error", reject);
    }),
  "ts.unencodable": async ({ what }) =>
    what === "function" ? { items: [1, { f: () => 1 }] } : what === "undefined" ? [1, undefined] : { n: 2n ** 70n },
  "ts.mark": async ({ ms, path }) => {
    appendFileSync(path, `${process.pid}\n`);
    await new Promise((resolve) => setTimeout(resolve, ms));
    return ms;
  },
  "ts.huge": async ({ mib }) => "x".repeat(mib * 1024 * 1024),
  "ts.hold": async ({ ms, path }, ctx) => {
    appendFileSync(path, `start ${ctx.execId}\n`);
    await new Promise((resolve, reject) => {
      const t = setTimeout(resolve, ms);
      ctx.signal.addEventListener("abort", () => {
        clearTimeout(t);
        appendFileSync(path, `aborted ${ctx.execId}\n`);
        reject(ctx.signal.reason);
      });
    });
    appendFileSync(path, `done ${ctx.execId}\n`);
    return ms;
  },
};
