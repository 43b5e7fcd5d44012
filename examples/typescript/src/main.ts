// SPDX-License-Identifier: MIT
//
// Runs every example in workflows/ through the typed client: enqueues it with the input its
// header documents, waits for the result (told by the database when the instance ends), and
// checks it against the output the durable-execution library documents for the same example.
// Prints one line per example; exits 1 if any result differs or any instance failed.
//
//   CAIRN_DATABASE_URL=postgres://... node dist/main.js [WORKFLOW...]
//
// The workflows must be registered and a runner with this directory's worker running
// (examples/typescript/run does both).

import { Client, WorkflowFailed } from "cairn-sdk";

type Greetings = Record<string, string>;

interface Example {
  workflow: string;
  input: Record<string, unknown>;
  /** The documented output. */
  expect: unknown;
}

/** Whether two values are the same JSON value: the client's objects have no prototype (so that
 * a key such as "__proto__" is data), which isDeepStrictEqual would count as a difference. */
function same(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => same(x, b[i]));
  }
  if (typeof a === "object" && a !== null && typeof b === "object" && b !== null) {
    const ka = Object.keys(a), kb = Object.keys(b);
    const rb = b as Record<string, unknown>;
    return ka.length === kb.length && ka.every((k) => Object.hasOwn(rb, k) && same((a as Record<string, unknown>)[k], rb[k]));
  }
  return a === b;
}

const hello = (task: string) => `Hello from ${task}, world!`;

const EXAMPLES: Example[] = [
  {
    workflow: "welcome_ts",
    input: { user_ids: [1, 2, 3, 4, 5] },
    expect: [
      { to: "user1@example.com", sent: true, attempts: 1 },
      { to: "user2@example.com", sent: true, attempts: 2 }, // ECONNRESET once, then retried
      { to: "user4@example.com", sent: true, attempts: 2 },
      { to: "user5@example.com", sent: true, attempts: 1 },
    ],
  },
  {
    workflow: "de_parent",
    input: { name: "world" },
    expect: {
      parentOutput: hello("parent task"),
      taskAOutput: hello("task A"),
      taskBOutput: hello("task B"),
    } satisfies Greetings,
  },
  {
    workflow: "de_sequential",
    input: { name: "world" },
    expect: {
      taskAOutput: hello("task A"),
      taskBOutput: hello("task B"),
      taskCOutput: hello("task C"),
    } satisfies Greetings,
  },
  {
    workflow: "de_tree",
    input: { name: "world" },
    expect: {
      rootOutput: hello("root task"),
      taskAOutput: hello("task A"),
      taskA1Output: hello("task A1"),
      taskA2Output: hello("task A2"),
      taskA3Output: hello("task A3"),
      taskB1Output: hello("task B1"),
      taskB2Output: hello("task B2"),
      taskB3Output: hello("task B3"),
    } satisfies Greetings,
  },
  { workflow: "de_recursive", input: { index: 0 }, expect: { count: 10 } },
  { workflow: "de_polling", input: {}, expect: { isSuccess: true, output: 10 } },
];

async function main(only: string[]): Promise<number> {
  const url = process.env.CAIRN_DATABASE_URL;
  if (url === undefined || url === "") {
    process.stderr.write("main.js: set CAIRN_DATABASE_URL to the Cairn database\n");
    return 2;
  }
  const unknown = only.filter((w) => !EXAMPLES.some((e) => e.workflow === w));
  if (unknown.length > 0) {
    process.stderr.write(`main.js: no such example: ${unknown.join(", ")}\n`);
    return 2;
  }
  const client = new Client(url);
  let failed = 0;
  try {
    for (const ex of EXAMPLES.filter((e) => only.length === 0 || only.includes(e.workflow))) {
      const id = await client.enqueue(ex.workflow, ex.input, { validate: true });
      let line: string;
      try {
        const result = await client.wait(id, { timeoutMs: 60_000 });
        const ok = same(result, ex.expect);
        failed += ok ? 0 : 1;
        line = `${JSON.stringify(result)}${ok ? "" : `\n   expected ${JSON.stringify(ex.expect)}`}`;
      } catch (e) {
        if (!(e instanceof WorkflowFailed)) {
          throw e;
        }
        failed++;
        line = `failed: ${e.message}`;
      }
      process.stdout.write(`-- ${ex.workflow} ${JSON.stringify(ex.input)} (${id})\n   ${line}\n`);
    }
  } finally {
    await client.close();
  }
  process.stdout.write(failed === 0 ? "every example gave its documented output\n"
    : `${failed} example(s) did not give the documented output\n`);
  return failed === 0 ? 0 : 1;
}

process.exitCode = await main(process.argv.slice(2));
