// SPDX-License-Identifier: MIT
// The TypeScript examples (examples/typescript) against a real runner, built and served the way
// a user's project is (its own package.json linking cairn-sdk, tsc, npx cairn-worker): each
// workflow gives the output the durable-execution library documents for the example it ports,
// and its main.js, which checks the same through the typed client, says so.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BASE, Cluster, PKG, skip } from "./cluster.mjs";

const EXAMPLES = join(PKG, "..", "..", "examples", "typescript");
const hello = (task) => `Hello from ${task}, world!`;

// The outputs the durable-execution library's README gives for these examples (and, for the
// welcome workflow, the receipts examples/typescript/src/actions.ts makes).
const DOCUMENTED = {
  welcome_ts: [
    { to: "user1@example.com", sent: true, attempts: 1 },
    { to: "user2@example.com", sent: true, attempts: 2 },
    { to: "user4@example.com", sent: true, attempts: 2 },
    { to: "user5@example.com", sent: true, attempts: 1 },
  ],
  de_parent: { parentOutput: hello("parent task"), taskAOutput: hello("task A"), taskBOutput: hello("task B") },
  de_sequential: { taskAOutput: hello("task A"), taskBOutput: hello("task B"), taskCOutput: hello("task C") },
  de_tree: {
    rootOutput: hello("root task"), taskAOutput: hello("task A"), taskA1Output: hello("task A1"),
    taskA2Output: hello("task A2"), taskA3Output: hello("task A3"), taskB1Output: hello("task B1"),
    taskB2Output: hello("task B2"), taskB3Output: hello("task B3"),
  },
  de_recursive: { count: 10 },
  de_polling: { isSuccess: true, output: 10 },
};

const ORDER = ["welcome_ts", "de_hello", "de_step", "de_parent", "de_sequential", "de_tree_a", "de_tree_b", "de_tree",
  "de_recursive", "de_polling"];

describe("examples/typescript", { skip }, () => {
  let c;
  before(async () => {
    const b = spawnSync(join(EXAMPLES, "build"), { encoding: "utf8", timeout: 300000 });
    assert.equal(b.status, 0, `examples/typescript/build: ${b.stderr}`);
    c = new Cluster();
    c.psql(BASE, `CREATE DATABASE ${c.db}`);
    assert.equal(c.ctl("migrate").status, 0);
    // Children before their parents: register checks each call against the child's inputs.
    assert.deepEqual([...ORDER].sort(), readdirSync(join(EXAMPLES, "workflows")).map((n) => n.replace(/\.cairn$/, "")).sort());
    for (const wf of ORDER) {
      const r = c.ctl("register", join(EXAMPLES, "workflows", `${wf}.cairn`));
      assert.equal(r.status, 0, r.stderr);
    }
    const r = c.runner("runner-ex");
    const w = c.spawn("ts-examples", [process.execPath, join(EXAMPLES, "node_modules", ".bin", "cairn-worker"),
      "--url", r.sock, "--module", "./dist/actions.js", "--name", "ts-examples"], {}, EXAMPLES);
    await c.connected(w, "ts-examples");
  });
  after(() => c?.close());

  test("each example gives the documented output, through the typed client and in the database", () => {
    const main = spawnSync(process.execPath, ["dist/main.js"], { cwd: EXAMPLES, env: c.env, encoding: "utf8", timeout: 180000 });
    assert.equal(main.status, 0, `${main.stdout}\n${main.stderr}\n${c.logs()}`);
    assert.match(main.stdout, /every example gave its documented output/);
    // What the engine stored, read independently of main.js: one top-level instance per
    // example, completed with the documented result.
    const rows = JSON.parse(c.q("SELECT coalesce(jsonb_object_agg(workflow_name, jsonb_build_object('status', status, " +
      "'result', result)), '{}') FROM cairn.runner_instances WHERE parent_id IS NULL"));
    assert.deepEqual(Object.keys(rows).sort(), Object.keys(DOCUMENTED).sort());
    for (const [workflow, expected] of Object.entries(DOCUMENTED)) {
      assert.equal(rows[workflow].status, "completed", workflow);
      assert.deepEqual(rows[workflow].result, expected, workflow);
    }
    // The shapes ran as children: ten nested recursive instances, the tree's seven (root, two
    // branches, A1-A3... as de_hello), the sequence's three steps; the polls slept between.
    const count = (wf) => Number(c.q(`SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = '${wf}'`));
    assert.equal(count("de_recursive"), 10);
    assert.equal(count("de_step"), 3);
    assert.equal(count("de_tree_a") + count("de_tree_b"), 2);
    assert.equal(count("de_hello"), 2 + 3, "two children of de_parent, three of de_tree_a");
    assert.equal(Number(c.q("SELECT max(depth) FROM cairn.runner_instances WHERE workflow_name = 'de_recursive'")), 9);
  });

  test("a refused input fails the way the workflow says: raise ValueError", () => {
    const out = c.run("de_recursive", { index: -1 });
    assert.notEqual(out.code, 0);
    assert.match(out.r.stderr + out.r.stdout, /ValueError.*index must be 0 or more, got -1/s);
  });
});
