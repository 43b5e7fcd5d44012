// SPDX-License-Identifier: MIT
//
// The actions of examples/typescript/workflows, as ordinary TypeScript functions (cairn-sdk).
// Serve them with:  npx cairn-worker --url ipc:///tmp/cairn.sock --module ./dist/actions.js
//
// The workflows hold the control flow (children, parallel branches, loops, sleeps) and are
// durable; these functions do the work and may run more than once, so they keep no state that
// matters across attempts (the polling example's clock is the thing it polls).

import { setTimeout as sleep } from "node:timers/promises";

import { type ActionContext, NonRetryable, ValueError } from "cairn-sdk";

interface User {
  id: number;
  email: string;
  active: boolean;
}

/** The outputs the sequential and tree examples pass along: name, then taskXOutput per task. */
type Carried = Record<string, string>;

/** When each polled key was first asked for: its value appears a second later (the library's
 * example sets a variable with setTimeout; a worker serving several runners shares this map). */
const firstPolled = new Map<string, number>();
const POLL_READY_MS = 1000;

export default {
  /** Looks the users up (made up here; a real action would query a database). */
  "users.fetch": async ({ ids }: { ids: number[] }): Promise<User[]> => {
    await sleep(10);
    return ids.map((id) => ({ id, email: `user${id}@example.com`, active: id % 3 !== 0 }));
  },

  /** Pretends to send the welcome. The simulated mail server resets the first connection for
   * even user numbers, with Node's own error code: the SDK reports it as ConnectionResetError,
   * a ConnectionError, which the workflow's [ConnectionError -> retry: 3] sends again. */
  "mail.send_welcome": ({ to }: { to: string }, ctx: ActionContext) => {
    const number = Number(/^user(\d+)@/.exec(to)?.[1]);
    if (Number.isNaN(number)) {
      throw new NonRetryable(new ValueError(`not a user address: ${to}`));
    }
    if (number % 2 === 0 && ctx.attempt === 1) {
      throw Object.assign(new Error(`smtp: connection reset while sending to ${to}`), {
        code: "ECONNRESET",
      });
    }
    return { to, sent: true, attempts: ctx.attempt };
  },

  /** One task's greeting, as the library's examples word it. */
  "de.hello": ({ task, name }: { task: string; name: string }) => `Hello from ${task}, ${name}!`,

  /** One task of a sequence: what came before, plus this task's greeting. */
  "de.step": ({ task, carried }: { task: string; carried: Carried }): Carried => ({
    ...carried,
    [`task${task}Output`]: `Hello from task ${task}, ${carried.name}!`,
  }),

  /** The recursive example's unit of work (the library's `await sleep(1)`). */
  "de.tick": async ({ index }: { index: number }) => {
    await sleep(1);
    return index;
  },

  /** Whether the value is there yet: {isDone: false} until a second after the key's first poll,
   * then {isDone: true, output: 10}. */
  "de.poll": ({ key }: { key: string }) => {
    const first = firstPolled.get(key) ?? Date.now();
    firstPolled.set(key, first);
    return Date.now() - first < POLL_READY_MS ? { isDone: false } : { isDone: true, output: 10 };
  },
};
