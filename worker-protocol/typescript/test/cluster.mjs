// SPDX-License-Identifier: MIT
// What the tests against a real runner share (worker.test.mjs, examples.test.mjs): a fresh
// database of its own on the PostgreSQL that scripts/test starts (dropped at close()), runners
// and workers as child processes with their logs in a temp dir, cairnctl. The tests skip
// without CAIRN_TEST_DATABASE_URL, CAIRN_RUNNER and CAIRNCTL (scripts/test sets them).
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

export const HERE = dirname(fileURLToPath(import.meta.url));
export const PKG = dirname(HERE);
export const { CAIRN_TEST_DATABASE_URL: BASE, CAIRN_RUNNER: RUNNER, CAIRNCTL: CTL } = process.env;
export const skip = !(BASE && RUNNER && CTL) && "CAIRN_TEST_DATABASE_URL, CAIRN_RUNNER and CAIRNCTL are not set";

/** The file's text, "" while it does not exist. */
export function read(path) {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    if (e.code === "ENOENT") {
      return "";
    }
    throw e;
  }
}

/** Waits for cond() to hold, polling; false after ms. */
export async function waitFor(cond, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) {
      return true;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return cond();
}

export class Cluster {
  constructor() {
    this.tmp = mkdtempSync(join(tmpdir(), "cairn-ts-"));
    this.db = `tssdk_${process.pid}_${Math.floor(Math.random() * 1e6)}`;
    this.url = BASE.replace(/^(postgres(?:ql)?:\/\/[^/]*\/)[^?]*/, `$1${this.db}`);
    this.env = { ...process.env, CAIRN_DATABASE_URL: this.url };
    this.procs = [];
  }
  psql(url, sql) {
    const r = spawnSync("psql", [url, "-XAtqc", sql], { encoding: "utf8" });
    if (r.status !== 0) {
      throw new Error(`psql: ${r.stderr}`);
    }
    return r.stdout.trim();
  }
  q(sql) {
    return this.psql(this.url, sql);
  }
  ctl(...args) {
    return spawnSync(CTL, args, { env: this.env, encoding: "utf8", timeout: 120000 });
  }
  spawn(name, argv, env = {}, cwd = PKG) {
    const log = join(this.tmp, `${name}.log`);
    const fd = openSync(log, "a");
    const p = spawn(argv[0], argv.slice(1), { env: { ...this.env, ...env }, stdio: ["ignore", fd, fd], cwd });
    p.logPath = log;
    p.text = () => readFileSync(log, "utf8");
    p.exited = new Promise((resolve) => p.on("exit", (code, signal) => resolve(code ?? signal)));
    this.procs.push(p);
    return p;
  }
  runner(name, sock = `ipc://${this.tmp}/${name}.sock`) {
    const p = this.spawn(name, [RUNNER, "--worker-listen", sock, "--poll-interval-ms", "100",
      "--lock-ttl-ms", "2000", "--lock-heartbeat-ms", "400", "--worker-idle-ms", "1000",
      "--shutdown-grace-ms", "5000"]);
    p.sock = sock;
    return p;
  }
  async worker(name, sock, ...extra) {
    const p = this.spawn(name, [process.execPath, join(PKG, "dist/cli.js"), "--url", sock,
      "--module", "./test/actions.mjs", "--name", name, ...extra]);
    return this.connected(p, name);
  }
  /** A worker configured by its environment alone (each flag's variable). */
  async workerFromEnv(name, env) {
    const p = this.spawn(name, [process.execPath, join(PKG, "dist/cli.js")], env);
    return this.connected(p, name);
  }
  async connected(p, name) {
    assert.ok(await waitFor(() => p.text().includes("serving") || p.exitCode !== null), `${name}: ${p.text()}`);
    return p;
  }
  run(workflow, input, timeout = 60) {
    const r = this.ctl("run", workflow, "--input", JSON.stringify(input), "--wait", "--timeout", String(timeout), "--json");
    return { code: r.status, doc: r.stdout.trim().startsWith("{") ? JSON.parse(r.stdout) : null, r };
  }
  logs() {
    return this.procs.map((p) => `--- ${p.spawnargs[0]} ---\n${p.text().slice(-2000)}`).join("\n");
  }
  close() {
    for (const p of this.procs) {
      if (p.exitCode === null) {
        p.kill("SIGKILL");
      }
    }
    try {
      this.psql(BASE, `DROP DATABASE IF EXISTS ${this.db} WITH (FORCE)`);
    } catch {
      // the server is gone: nothing to drop
    }
    rmSync(this.tmp, { recursive: true, force: true });
  }
}

export function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}
