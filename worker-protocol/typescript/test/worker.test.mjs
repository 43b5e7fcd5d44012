// SPDX-License-Identifier: MIT
// The TypeScript worker against a real cairn-runner and the PostgreSQL that scripts/test starts
// (a fresh database of its own, dropped at the end: cluster.mjs): values, context, errors as
// the workflow sees them, cancel, SIGTERM's drain, a runner restarted under the worker. Skipped
// without CAIRN_TEST_DATABASE_URL, CAIRN_RUNNER and CAIRNCTL (scripts/test sets them).
import { spawnSync } from "node:child_process";
import * as net from "node:net";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BASE, Cluster, freePort, HERE, PKG, read, RUNNER, skip, waitFor } from "./cluster.mjs";

describe("the worker against a runner", { skip }, () => {
  let c;
  before(() => {
    c = new Cluster();
    c.psql(BASE, `CREATE DATABASE ${c.db}`);
    assert.equal(c.ctl("migrate").status, 0);
    for (const f of ["tsecho", "tsmix", "tshold", "tswait", "tsmark", "tsboth", "tsbig"]) {
      const r = c.ctl("register", join(HERE, "workflows", `${f}.cairn`));
      assert.equal(r.status, 0, r.stderr);
    }
  });
  after(() => c?.close());
  // Each test's runners and workers stop when it ends, so that the next test's instances run
  // only where that test says (the database is shared).
  let mark = 0;
  beforeEach(() => {
    mark = c.procs.length;
  });
  afterEach(async () => {
    for (const p of c.procs.slice(mark)) {
      if (p.exitCode === null && p.signalCode === null) {
        p.kill("SIGKILL");
        await p.exited;
      }
    }
  });

  test("values round-trip exactly through a runner: 64-bit ints, 2.0, __proto__ keys, unicode", async () => {
    const r = c.runner("runner-v");
    await c.worker("ts-v", r.sock);
    // Through the worker and back, the value is the one the engine stored: the same text
    // (jsonb orders the keys and has no -0; the codec's own tests cover -0.0 and the rest).
    const value = '{"big": 9223372036854775807, "small": -9223372036854775808, "two": 2.0, ' +
      '"half": 0.5, "__proto__": {"x": [1, "é", null, true]}, "deep": [[[[]]]], "safe": 9007199254740993}';
    const id = c.ctl("run", "tsecho", "--input", `{"value": ${value}}`).stdout.trim();
    const out = c.ctl("wait", id, "--timeout", "30");
    assert.equal(out.status, 0, out.stderr + c.logs());
    assert.equal(out.stdout.trim(), c.q(`SELECT input->'value' FROM cairn.runner_instances WHERE instance_id = '${id}'`));
    assert.match(out.stdout, /"two": 2\.0/);
    assert.match(out.stdout, /"safe": 9007199254740993/);
  });

  test("a result at the message limit arrives whole; one byte more is a ValueError", async () => {
    const r = c.runner("runner-big");
    await c.worker("ts-big", r.sock);
    // The SDK's bound for one outcome's values (worker.ts: 16 MiB less 64 KiB for the envelope),
    // less the string's msgpack header and the error map's margin.
    const bytes = 16 * 1024 * 1024 - 64 * 1024 - 64 - 5;
    const { code, doc, r: p } = c.run("tsbig", { bytes });
    assert.equal(code, 0, p.stdout + p.stderr + c.logs());
    assert.deepEqual(doc.result, { n: bytes, last: "!" });
    const over = c.run("tsbig", { bytes: bytes + 1 });
    assert.notEqual(over.code, 0);
    assert.match(over.r.stdout + over.r.stderr, /ValueError.*over the protocol's 16 MiB message limit/s);
  });

  test("actions see their context; errors reach the workflow with their types and bases", async () => {
    const r = c.runner("runner-m");
    const w = await c.workerFromEnv("ts-m", { CAIRN_WORKER_URL: r.sock, CAIRN_WORKER_MODULES: "./test/actions.mjs",
      CAIRN_WORKER_NAME: "ts-m-env", CAIRN_WORKER_SLOTS: "3", CAIRN_LOG_LEVEL: "debug" });
    assert.match(w.text(), /serving \d+ action\(s\) with 3 slot\(s\)/, "configured by its environment");
    const port = await freePort();
    const { code, doc, r: p } = c.run("tsmix", { port });
    assert.equal(code, 0, p.stdout + p.stderr + c.logs());
    const res = doc.result;
    assert.equal(res.sum, 42);
    assert.equal(res.ctx.action, "ts.ctx");
    assert.equal(res.ctx.attempt, 1);
    assert.equal(res.ctx.instance, doc.id);
    assert.match(res.ctx.exec, /^[0-9a-f-]{36}$/);
    assert.equal(res.ctx.key, `${res.ctx.exec}:1`);
    assert.equal(res.ctx.has_deadline, true);
    assert.equal(res.ctx.stopping, false);
    assert.deepEqual(res.flaky, { attempt: 3, last: "TypeError" });
    assert.deepEqual(res.declined, ["PaymentDeclined", "card declined", ["ValueError", "Exception"]]);
    assert.equal(res.final, "ValueError");
    assert.deepEqual(res.connect, ["ConnectionRefusedError", ["ConnectionError", "OSError", "Exception"]]);
    assert.equal(res.bad.length, 4);
    assert.match(res.bad[0], /the result\.items\[1\]\.f is a function/);
    assert.match(res.bad[1], /the result\[1\] is undefined/);
    assert.match(res.bad[2], /the result\.n is the bigint \d+, outside the 64-bit range/);
    assert.match(res.bad[3], /the result is \d+ bytes of msgpack, over the protocol's 16 MiB message limit/);
    // the non-retryable error ran once, despite [retry: 5]; the refused connection twice
    const attempts = c.q(`SELECT count(*) FROM cairn.runner_actions_done WHERE instance_id = '${doc.id}'`);
    assert.equal(Number(attempts), 1 + 1 + 3 + 1 + 1 + 2 + 3 + 1);
  });

  test("a cancel aborts the attempt's signal; SIGTERM lets the running attempt finish first", async () => {
    const r = c.runner("runner-c");
    const w = await c.worker("ts-c", r.sock, "--slots", "2");
    const path = join(c.tmp, "holds");
    const held = c.ctl("run", "tshold", "--input", JSON.stringify({ ms: 60000, path })).stdout.trim();
    assert.ok(await waitFor(() => read(path).includes("start")), c.logs());
    const cancel = c.ctl("cancel", held, "--wait", "--timeout", "20");
    assert.equal(cancel.status, 0, cancel.stdout + cancel.stderr);
    assert.ok(await waitFor(() => read(path).includes("aborted")), read(path));
    // drain: an attempt of 1.5 s running when SIGTERM comes finishes and is reported
    const drained = c.ctl("run", "tshold", "--input", JSON.stringify({ ms: 1500, path })).stdout.trim();
    assert.ok(await waitFor(() => (read(path).match(/start/g) ?? []).length === 2), c.logs());
    w.kill("SIGTERM");
    assert.equal(await w.exited, 0, w.text());
    assert.match(read(path), /done /);
    assert.equal(c.q(`SELECT status FROM cairn.runner_instances WHERE instance_id = '${drained}'`), "completed");
  });

  test("the client's enqueueMany: ids in order, keys per input, a refused item names itself and stores none", async () => {
    const { Client, InputRejected } = await import("../dist/index.js");
    const reg = c.ctl("register", join(HERE, "..", "..", "..", "tests", "fixtures", "typed.cairn"), "--name", "typed_many");
    assert.equal(reg.status, 0, reg.stderr);
    const client = new Client(c.url);
    try {
      const first = await client.enqueue("typed_many", { order: { id: 0 } }, { idempotencyKey: "m-0" });
      const ids = await client.enqueueMany("typed_many", [0, 1, 2].map((id) => ({ order: { id } })),
        { idempotencyKeys: ["m-0", null, "m-2"], priority: 2 });
      assert.equal(ids.length, 3);
      assert.equal(ids[0], first);
      assert.equal(new Set(ids).size, 3);
      for (const [i, id] of ids.entries()) {
        assert.equal(JSON.stringify((await client.status(id)).input), JSON.stringify({ order: { id: i } }));
      }
      const bad = [{ order: { id: 9 } }, { order: { id: 9 }, qty: "2" }];
      await assert.rejects(client.enqueueMany("typed_many", bad), (e) => e instanceof InputRejected &&
        e.message === "item 2 of 2: input.qty: expected int, got str");
      await assert.rejects(client.enqueueMany("typed_many", bad, { validate: true }), (e) => e instanceof InputRejected &&
        /^item 2 of 2: input\.qty: /.test(e.message));
      assert.equal((await client.list({ workflow: "typed_many" })).length, 3, "nothing of the refused calls");
      assert.throws(() => client.enqueueMany("typed_many", [{}, {}], { idempotencyKeys: ["k"] }), /1 idempotencyKeys for 2 inputs/);
      assert.deepEqual(await client.enqueueMany("typed_many", []), []);
    } finally {
      await client.close();
    }
  });

  test("the client: enqueue, wait, status, list, result, errors, cancel, retry, signals, events, schema", async () => {
    const { Client, Float, InputRejected, NotFinished, WorkflowFailed } = await import("../dist/index.js");
    const r = c.runner("runner-k");
    await c.worker("ts-k", r.sock);
    const client = new Client(c.url);
    try {
      const big = 2n ** 62n + 1n;
      const id = await client.enqueue("tsecho", { value: { big, two: new Float(2), n: 3, __proto__: "k" } },
        { idempotencyKey: "k-1" });
      const got = await client.wait(id, { timeoutMs: 30000 });
      assert.equal(got.big, big, "a 64-bit int comes back exact");
      assert.ok(got.two instanceof Float && Number(got.two) === 2, "2.0 comes back a float");
      assert.equal(got.n, 3);
      assert.equal(Object.getPrototypeOf(got), null);
      assert.equal(await client.enqueue("tsecho", { value: { big, two: new Float(2), n: 3, __proto__: "k" } },
        { idempotencyKey: "k-1" }), id, "the same key and input give the first instance");
      const st = await client.status(id);
      assert.equal(st.status, "completed");
      assert.equal(st.workflow, "tsecho");
      assert.ok(st.completedAt instanceof Date);
      assert.ok((await client.list({ workflow: "tsecho" })).some((s) => s.id === id));
      assert.deepEqual(await client.result(id), got);
      await assert.rejects(client.enqueue("tsmix", { port: "x" }), (e) => e instanceof InputRejected &&
        /input\.port: expected int, got str/.test(e.message));
      // checked here first when asked, against the schema: no round trip to enqueue
      await assert.rejects(client.enqueue("tsmix", { port: "x" }, { validate: true }), (e) => e instanceof InputRejected &&
        /^input\.port: must be integer \(checked before sending/.test(e.message));
      await assert.rejects(client.enqueue("tsmix", {}, { validate: true }), (e) => e instanceof InputRejected &&
        /^input\.port: must have required property 'port'/.test(e.message));
      await assert.rejects(client.enqueue("tsmix", { port: 1, extra: 2 }, { validate: true }), (e) =>
        e instanceof InputRejected && /^input\.extra: must NOT have additional properties/.test(e.message));
      // a failure, as the workflow saw it
      const held = await client.enqueue("tshold", { ms: 60000, path: join(c.tmp, "k-holds") });
      await assert.rejects(client.wait(held, { timeoutMs: 300 }), NotFinished);
      assert.equal(await client.cancel(held, "stop it"), "requested");
      await assert.rejects(client.wait(held, { timeoutMs: 30000 }), (e) => e instanceof WorkflowFailed &&
        e.status === "cancelled" && e.type === "Cancelled" && e.error.message === "stop it");
      assert.equal(await client.retry(held), "queued");
      assert.equal(await client.cancel(held, "again", { force: true }) !== undefined, true);
      // signals and events
      const w = await client.enqueue("tswait", { order: "o-7" });
      const answers = [];
      assert.ok(await waitFor(async () => {
        answers.push(await client.signal(w, "approve", { by: "ann" }, { onlyIfWaiting: true }));
        return answers.at(-1) === "delivered";
      }), `${answers.slice(-3)} ${JSON.stringify(await client.status(w))}`);
      // published once, whether the wait is there yet or not: an event is kept for the wait
      const ev = await client.publishEvent("order_paid", "o-7", { amount: new Float(10) }, { dedupKey: "pay-7" });
      assert.ok(ev.woken === 0 || ev.woken === 1, JSON.stringify(ev));
      assert.equal(ev.duplicate, false);
      assert.equal((await client.publishEvent("order_paid", "o-7", { amount: 10 }, { dedupKey: "pay-7" })).duplicate, true);
      const both = await client.wait(w, { timeoutMs: 30000 });
      assert.equal(both.approved.by, "ann");
      assert.ok(both.paid.amount instanceof Float);
      const schema = await client.schema("tsmix");
      assert.equal(schema.properties.port.type, "integer");
      assert.equal(schema.title, "tsmix");
    } finally {
      await client.close();
    }
  });

  test("tls+tcp:// with a client certificate; without one the worker never gets in", async () => {
    const d = join(c.tmp, "certs");
    const k = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const script = `set -e; mkdir -p ${d}; cd ${d};` +
      `openssl req -x509 ${k} -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca;` +
      "for n in runner worker; do" +
      `  openssl req ${k} -keyout $n.key -out $n.csr -subj /CN=$n;` +
      "  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > $n.ext;" +
      "  openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1" +
      "    -extfile $n.ext -out $n.crt; cat $n.crt $n.key > $n.pem;" +
      "done";
    const made = spawnSync("sh", ["-c", script], { encoding: "utf8" });
    assert.equal(made.status, 0, made.stderr);
    const url = `tls+tcp://127.0.0.1:${await freePort()}`;
    const r = c.spawn("runner-tls", [RUNNER, "--worker-listen", url, "--poll-interval-ms", "100",
      "--worker-tls-cert-key", join(d, "runner.pem"), "--worker-tls-ca", join(d, "ca.pem")]);
    assert.ok(await waitFor(() => r.text().includes("started")), r.text());
    await c.worker("ts-tls", url, "--tls-ca", join(d, "ca.pem"), "--tls-cert-key", join(d, "worker.pem"),
      "--tls-server-name", "localhost");
    const bare = c.spawn("ts-nocert", [process.execPath, join(PKG, "dist/cli.js"), "--url", url,
      "--module", "./test/actions.mjs", "--tls-ca", join(d, "ca.pem"), "--tls-server-name", "localhost"]);
    assert.ok(await waitFor(() => (bare.text().match(/reconnecting/g) ?? []).length >= 2), bare.text());
    assert.ok(!bare.text().includes("serving") && bare.exitCode === null, bare.text());
    const { code, doc } = c.run("tsecho", { value: "over tls" });
    assert.equal(code, 0, c.logs());
    assert.equal(doc.result, "over tls");
  });

  test("one worker serves several runners; with one gone the other still gets its work done", async () => {
    const a = c.runner("runner-a");
    const b = c.runner("runner-b");
    const w = c.spawn("ts-ab", [process.execPath, join(PKG, "dist/cli.js"), "--url", a.sock, "--url", b.sock,
      "--module", "./test/actions.mjs", "--slots", "2"]);
    assert.ok(await waitFor(() => (w.text().match(/serving/g) ?? []).length >= 2), w.text());
    a.kill("SIGKILL");
    await a.exited;
    const { code, doc } = c.run("tsecho", { value: [4] });
    assert.equal(code, 0, c.logs());
    assert.deepEqual(doc.result, [4]);
    assert.equal(w.exitCode, null);
  });

  test("an async and a sync action at once; an attempt past its [timeout] is stopped", async () => {
    const r = c.runner("runner-b2");
    await c.worker("ts-b2", r.sock);
    const { code, doc, r: p } = c.run("tsboth", { ms: 1 });
    assert.equal(code, 0, p.stdout + p.stderr + c.logs());
    assert.deepEqual(doc.result, ["async", 3, "ActionTimeout"]);
  });

  test("a wrong credential is refused: the worker exits 1", async () => {
    const sock = `ipc://${c.tmp}/runner-cred.sock`;
    c.spawn("runner-cred", [RUNNER, "--worker-listen", sock, "--worker-credential", "sesame"]);
    const w = c.spawn("ts-cred", [process.execPath, join(PKG, "dist/cli.js"), "--url", sock,
      "--module", "./test/actions.mjs", "--credential", "nope"]);
    assert.equal(await w.exited, 1, w.text());
    assert.match(w.text(), /refused/);
    const ok = await c.worker("ts-cred-ok", sock, "--credential", "sesame");
    assert.equal(ok.exitCode, null);
  });

  test("kill -9 of a worker mid-action: the attempt goes to another worker", async () => {
    const r = c.runner("runner-k9");
    const a = await c.worker("ts-k9a", r.sock, "--slots", "1");
    const b = await c.worker("ts-k9b", r.sock, "--slots", "1");
    const path = join(c.tmp, "marks-k9");
    const id = c.ctl("run", "tsmark", "--input", JSON.stringify({ ms: 1500, path })).stdout.trim();
    assert.ok(await waitFor(() => read(path).trim().split("\n").filter(Boolean).length === 1), c.logs());
    const first = Number(read(path).trim());
    const victim = first === a.pid ? a : b;
    victim.kill("SIGKILL");
    const out = c.ctl("wait", id, "--timeout", "30");
    assert.equal(out.status, 0, out.stderr + c.logs());
    const pids = read(path).trim().split("\n").map(Number);
    assert.equal(pids.length, 2);
    assert.notEqual(pids[1], victim.pid);
  });

  test("a runner that sends garbage: the worker drops the connection, reconnects, never crashes", async () => {
    const path = join(c.tmp, "garbage.sock");
    let connections = 0;
    const srv = net.createServer((s) => {
      connections++;
      s.write(Buffer.from([0x00, 0x53, 0x50, 0x00, 0x00, 0x31, 0x00, 0x00]));
      let got = Buffer.alloc(0);
      s.on("data", (d) => {
        got = Buffer.concat([got, d]);
        if (got.length >= 8 + 9 + 4) {
          const id = got.subarray(8 + 9, 8 + 9 + 4);
          const body = Buffer.concat([id, Buffer.from([0xc1, 0xc1]), Buffer.from("garbage")]);
          const head = Buffer.alloc(9);
          head[0] = 1;
          head.writeBigUInt64BE(BigInt(body.length), 1);
          s.write(Buffer.concat([head, body]));
          got = Buffer.alloc(0);
        }
      });
      s.on("error", () => {});
    });
    await new Promise((resolve) => srv.listen(path, resolve));
    try {
      const w = c.spawn("ts-garbage", [process.execPath, join(PKG, "dist/cli.js"), "--url", `ipc://${path}`,
        "--module", "./test/actions.mjs"]);
      assert.ok(await waitFor(() => connections >= 3), w.text());
      assert.equal(w.exitCode, null, w.text());
      assert.match(w.text(), /reply does not decode/);
    } finally {
      srv.close();
    }
  });

  test("a runner restarted under the worker gets it back", async () => {
    const r = c.runner("runner-r");
    const w = await c.worker("ts-r", r.sock);
    r.kill("SIGTERM");
    await r.exited;
    c.runner("runner-r", r.sock);
    assert.ok(await waitFor(() => (w.text().match(/serving/g) ?? []).length >= 2), w.text());
    const { code, doc } = c.run("tsecho", { value: [1, 2] });
    assert.equal(code, 0, c.logs());
    assert.deepEqual(doc.result, [1, 2]);
    assert.equal(w.exitCode, null);
  });
});
