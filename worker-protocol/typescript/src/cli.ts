#!/usr/bin/env node
// SPDX-License-Identifier: MIT
//
// cairn-worker (npx cairn-worker): a worker process for the actions the given modules export
// (docs/typescript.md). Each flag has an environment variable; the flag wins.

import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

import { type Action, Worker } from "./worker.js";

// [flag, environment variable, default, help]; --url and --module may repeat (the variables take
// comma-separated lists).
const SETTINGS: [string, string, string | null, string][] = [
  ["url", "CAIRN_WORKER_URL", null, "runner to connect to (tcp://, ipc://, tls+tcp://); repeat it to serve several runners at once"],
  ["module", "CAIRN_WORKER_MODULES", null, "module whose actions to serve (a path, or a package name); repeatable"],
  ["slots", "CAIRN_WORKER_SLOTS", "8", "actions run at once, per runner"],
  ["prefetch", "CAIRN_WORKER_PREFETCH", "0", "attempts the runner may queue here beyond the slots"],
  ["credential", "CAIRN_WORKER_CREDENTIAL", null, "the runner's shared worker credential"],
  ["name", "CAIRN_WORKER_NAME", null, "this worker's name in the runner's logs"],
  ["tls-ca", "CAIRN_WORKER_TLS_CA", null, "PEM CA that signed the runner's certificate"],
  ["tls-cert-key", "CAIRN_WORKER_TLS_CERT_KEY", null, "PEM file with this worker's certificate and key (when the runner requires client certificates)"],
  ["tls-server-name", "CAIRN_WORKER_TLS_SERVER_NAME", null, "name to check in the runner's certificate (default: the URL's host)"],
  ["grace", "CAIRN_WORKER_GRACE_S", "10", "seconds running actions get to finish after SIGTERM"],
  ["log-level", "CAIRN_LOG_LEVEL", "info", "debug, info, warn (or warning) or error, as for cairn-runner"],
];

const PROG = "cairn-worker";
const LEVELS: Record<string, number> = { debug: 0, info: 1, warn: 2, warning: 2, error: 3 };

function help(): string {
  const lines = [
    `usage: ${PROG} --url URL --module MODULE [options]`,
    "",
    "Serves the actions the given modules export: a default export that is an object of",
    "action names to functions ({\"mail.send\": async (args, ctx) => ...}), or a function",
    "that is given the worker to register actions on (worker.action(name, fn)).",
    "",
  ];
  for (const [flag, env, def, text] of SETTINGS) {
    lines.push(`  --${flag.padEnd(16)} ${text} [$${env}${def !== null ? `, default ${def}` : ""}]`);
  }
  lines.push("  --help             this text");
  lines.push("");
  lines.push("Exit status: 0 stopped by SIGTERM or SIGINT (after finishing what ran), 1 refused by a");
  lines.push("runner, 2 usage error, 3 a second signal (stopped at once).");
  return lines.join("\n");
}

function usage(message: string): number {
  process.stderr.write(`${PROG}: ${message}\n`);
  return 2;
}

async function load(worker: Worker, spec: string): Promise<void> {
  const target = spec.startsWith(".") || spec.startsWith("/") ? pathToFileURL(resolve(spec)).href : spec;
  const mod = (await import(target)) as { default?: unknown; actions?: unknown };
  const exported = mod.default ?? mod.actions;
  if (typeof exported === "function") {
    await (exported as (w: Worker) => unknown)(worker);
  } else if (exported !== null && typeof exported === "object") {
    for (const [name, fn] of Object.entries(exported)) {
      worker.action(name, fn as Action);
    }
  } else {
    throw new TypeError("it exports no actions (a default export: an object of actions, or a function)");
  }
}

async function main(argv: string[]): Promise<number> {
  const options: Record<string, { type: "string"; multiple?: boolean }> = {};
  for (const [flag] of SETTINGS) {
    options[flag] = flag === "url" || flag === "module" ? { type: "string", multiple: true } : { type: "string" };
  }
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: { ...options, help: { type: "boolean" } }, strict: true });
  } catch (e) {
    return usage(`${(e as Error).message} (see --help)`);
  }
  if (parsed.values.help) {
    process.stdout.write(help() + "\n");
    return 0;
  }
  const vals: Record<string, string | string[] | null> = {};
  for (const [flag, env, def] of SETTINGS) {
    let v = (parsed.values as Record<string, string | string[] | undefined>)[flag] ?? null;
    if (v === null && process.env[env]) {
      v = flag === "url" || flag === "module" ? (process.env[env]).split(",") : (process.env[env]);
    }
    vals[flag] = v ?? def;
  }
  const level = String(vals["log-level"]).toLowerCase();
  if (!(level in LEVELS)) {
    return usage(`--log-level must be debug, info, warn (or warning) or error, not '${String(vals["log-level"])}'`);
  }
  const urls = (vals.url as string[] | null) ?? [];
  const modules = (vals.module as string[] | null) ?? [];
  if (urls.length === 0 || modules.length === 0) {
    return usage("--url and --module are required (see --help)");
  }
  const num = (flag: string): number => {
    const v = Number(vals[flag]);
    if (!Number.isFinite(v)) {
      throw new RangeError(`--${flag} must be a number, not '${String(vals[flag])}'`);
    }
    return v;
  };
  let worker: Worker;
  try {
    const tls: Record<string, Buffer | string> = {};
    if (vals["tls-ca"]) {
      tls.ca = readFileSync(vals["tls-ca"] as string);
    }
    if (vals["tls-cert-key"]) {
      const pem = readFileSync(vals["tls-cert-key"] as string);
      tls.cert = pem;
      tls.key = pem;
    }
    if (vals["tls-server-name"]) {
      tls.servername = vals["tls-server-name"] as string;
    }
    const min = LEVELS[level];
    worker = new Worker({
      url: urls,
      slots: num("slots"),
      prefetch: num("prefetch"),
      ...(vals.name !== null ? { name: vals.name as string } : {}),
      ...(vals.credential !== null ? { credential: vals.credential as string } : {}),
      tls,
      graceMs: num("grace") * 1000,
      log: (lvl, message) => {
        if (LEVELS[lvl] >= min) {
          process.stderr.write(`${new Date().toISOString()} ${lvl.padEnd(5)} ${message}\n`);
        }
      },
    });
  } catch (e) {
    return usage((e as Error).message);
  }
  for (const m of modules) {
    try {
      await load(worker, m);
    } catch (e) {
      return usage(`cannot load ${m}: ${(e as Error).message}`);
    }
  }
  if (worker.actions.size === 0) {
    return usage("the modules export no action");
  }
  return worker.runUntilSignalled();
}

main(process.argv.slice(2)).then(
  (rc) => process.exit(rc),
  (e: unknown) => {
    process.stderr.write(`${PROG}: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  },
);
