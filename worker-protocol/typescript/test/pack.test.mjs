// SPDX-License-Identifier: MIT
// The package as users get it: `npm pack`, then installed from the tarball into a fresh project
// (its two runtime dependencies, pg and ajv, from npm's cache or the registry: the only network
// CI has), where `npx cairn-worker --help` runs and the package's exports and types resolve.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const PKG = dirname(dirname(fileURLToPath(import.meta.url)));

test("npm pack, then npm install of the tarball into a fresh project", () => {
  const dir = mkdtempSync(join(tmpdir(), "cairn-ts-pack-"));
  try {
    const out = execFileSync("npm", ["pack", "--silent", "--pack-destination", dir, "--ignore-scripts"], {
      cwd: PKG,
      encoding: "utf8",
    });
    const tgz = join(dir, out.trim().split("\n").pop());
    assert.ok(existsSync(tgz), out);
    const app = join(dir, "app");
    execFileSync("mkdir", [app]);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module" }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", tgz], { cwd: app, encoding: "utf8" });
    const files = readdirSync(join(app, "node_modules", "cairn-sdk", "dist"));
    assert.ok(files.includes("index.js") && files.includes("index.d.ts"), files.join(" "));
    assert.ok(!existsSync(join(app, "node_modules", "cairn-sdk", "src")), "only dist/ is packed");
    const help = spawnSync("npx", ["--no-install", "cairn-worker", "--help"], { cwd: app, encoding: "utf8" });
    assert.equal(help.status, 0, help.stderr);
    for (const flag of ["--url", "--module", "--slots", "--prefetch", "--credential", "--name", "--tls-ca",
      "--tls-cert-key", "--tls-server-name", "--grace", "--log-level"]) {
      assert.match(help.stdout, new RegExp(`${flag} `), flag);
    }
    writeFileSync(join(app, "use.mjs"), 'import { Worker, encode, Float } from "cairn-sdk";\n' +
      'const w = new Worker({ url: "ipc:///nowhere" }).action("a.b", async () => new Float(1));\n' +
      'console.log(w.actions.size, encode(new Float(1)).length);\n');
    assert.equal(execFileSync(process.execPath, ["use.mjs"], { cwd: app, encoding: "utf8" }).trim(), "1 9");
    const bad = spawnSync("npx", ["--no-install", "cairn-worker", "--url", "http://x"], { cwd: app, encoding: "utf8" });
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /--url and --module are required/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
