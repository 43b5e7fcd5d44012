// SPDX-License-Identifier: MIT
//
// The worker: actions as ordinary (async) functions, served to one or more runners
// (docs/protocol.md). One Session per runner URL, each kept connected (reconnect with backoff,
// reset once a runner welcomes it); on each connection: hello, a ready kept parked asking for
// work (with the outcomes that wait), a control request kept parked as the heartbeat and the
// carrier of cancels (a runner silent for three idle periods plus a second is gone), and on
// stop a goodbye, then the running attempts finish and are reported within the grace period.
// Everything runs on Node's one event loop: an action that computes for long without awaiting
// holds every other attempt of the worker up (run such work in a worker thread).

import * as os from "node:os";

import { errorMap, plainError } from "./errors.js";
import * as proto from "./proto.js";
import { encode, type Value, ValueTypeError } from "./values.js";
import { Conn, parseUrl, type TlsOptions, WireError } from "./wire.js";

/** What an action knows about the attempt it runs. */
export interface ActionContext {
  /** The action's name. */
  readonly action: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
  readonly instanceId: string;
  readonly execId: string;
  /** exec id and attempt: the same when the runner sends the attempt again. */
  readonly idempotencyKey: string;
  /** When the attempt must be done (its [timeout] counted from its start here, or its
   * [deadline], whichever is sooner), or null. */
  readonly deadline: Date | null;
  /** The previous attempt's error ({type, message, bases, details}), null on the first. */
  readonly lastError: Value;
  /** Aborted when the runner cancels the attempt (instance cancelled or timed out, [timeout]
   * passed, [fail_fast]) or the worker stops past its grace period. */
  readonly signal: AbortSignal;
  /** True once the worker is stopping (it said goodbye): finish soon. */
  readonly stopping: boolean;
}

/** An action: its keyword arguments as one object, and the attempt's context. */
export type Action = (args: { [key: string]: Value }, ctx: ActionContext) => unknown;

/** The runner refused the worker's hello (bad credential, bad version). */
export class Refused extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Refused";
  }
}

export interface WorkerOptions {
  /** One runner's URL or several (tcp://HOST:PORT, ipc://PATH, tls+tcp://HOST:PORT). */
  url: string | string[];
  /** Attempts run at once, per runner (1..4096; default 8). */
  slots?: number;
  /** Attempts a runner may send ahead of a free slot (0..4096; default 0). */
  prefetch?: number;
  /** The worker's name in the runner's logs and status page (default typescript-HOST-PID). */
  name?: string;
  /** The credential the runners' CAIRN_WORKER_CREDENTIALS expect, if any. */
  credential?: string;
  /** For tls+tcp://: node:tls options (ca, cert, key, servername...). */
  tls?: TlsOptions;
  /** On stop: how long running attempts get to finish and be reported, in ms (default 10000). */
  graceMs?: number;
  /** Where the worker says what it does (default: console.error lines). */
  log?: (level: "info" | "warn" | "error", message: string) => void;
}

// A message stays below 16 MiB minus what nng and the envelope add (docs/protocol.md): a ready
// carries outcomes up to this many bytes of values; one larger outcome alone is replaced by a
// ValueError, as the other SDKs do.
const READY_VALUE_BYTES = 16 * 1024 * 1024 - 64 * 1024;
const CANCELS_REMEMBERED = 64;
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5000;

function uuid(b: Uint8Array): string {
  const h = Buffer.from(b).toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function nameOk(s: unknown): boolean {
  return typeof s === "string" && s.length > 0 && Buffer.byteLength(s) <= 256 && !s.includes("\0");
}

/** Resolves after ms, or when the signal aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });
}

interface Running {
  a: proto.Attempt;
  abort: AbortController;
  gen: number;
}

/** A counting semaphore: the worker's slots. */
class Slots {
  private free: number;
  private readonly queue: (() => void)[] = [];
  constructor(n: number) {
    this.free = n;
  }
  async take(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((resolve) => this.queue.push(resolve));
  }
  give(): void {
    const next = this.queue.shift();
    if (next !== undefined) {
      next();
    } else {
      this.free++;
    }
  }
}

/** One connection to one runner at a time, and the attempts it dispatched. Each connection is a
 * generation: attempts and outcomes of an earlier one are never reported on a later one (the
 * runner already failed them with WorkerLost, or sent them again). */
class Session {
  conn: Conn | null = null;
  private gen = 0;
  private readonly slots: Slots;
  private outcomes: proto.Outcome[] = [];
  private outstanding = 0;
  readonly running = new Map<string, Running>(); // token -> attempt
  private readonly cancelled: string[] = [];
  private draining = false;
  private wake: (() => void) | null = null;

  constructor(
    private readonly w: Worker,
    readonly url: string,
  ) {
    this.slots = new Slots(w.slots);
  }

  private changed(): void {
    const f = this.wake;
    this.wake = null;
    f?.();
  }

  private waitChange(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  /** Keeps one ready parked asking for work, and sends another when outcomes wait (only one
   * can stay parked, so one of the two comes back within a round trip). */
  private pump(): void {
    const conn = this.conn;
    while (conn !== null && conn.error === null) {
      const want = this.outcomes.length > 0 ? 2 : this.draining ? 0 : 1;
      if (this.outstanding >= want) {
        return;
      }
      let size = 0;
      let k = 0;
      while (k < this.outcomes.length && k < 8192) {
        size += this.outcomes[k].value.length + 64;
        if (size > READY_VALUE_BYTES && k > 0) {
          break;
        }
        k++;
      }
      const batch = this.outcomes.slice(0, k);
      this.outcomes = this.outcomes.slice(k);
      this.outstanding++;
      const gen = this.gen;
      conn.send(proto.ready(batch)).then(
        (body) => this.readyReply(body, gen),
        (e: Error) => this.readyFailed(e, gen),
      );
    }
  }

  private readyFailed(e: Error, gen: number): void {
    if (gen === this.gen) {
      this.outstanding--;
      this.broken(e);
    }
  }

  private readyReply(body: Buffer, gen: number): void {
    if (gen !== this.gen) {
      return;
    }
    let r: proto.Reply;
    try {
      r = proto.decodeReply(body);
    } catch (e) {
      this.readyFailed(e as Error, gen);
      return;
    }
    this.outstanding--;
    if (r.kind === "dispatch") {
      for (const a of r.items) {
        this.start(a);
      }
    } else if (r.kind !== "noop") {
      this.broken(new proto.ProtocolError(`a ${r.kind} in reply to ready`));
      return;
    }
    this.pump();
    this.changed();
  }

  private start(a: proto.Attempt): void {
    const run: Running = { a, abort: new AbortController(), gen: this.gen };
    const key = `${uuid(a.exec_id)}/${a.attempt}/${a.token}`;
    if (this.cancelled.includes(key)) {
      run.abort.abort();
    }
    this.running.set(String(a.token), run);
    void this.run(run);
  }

  private async run(run: Running): Promise<void> {
    await this.slots.take();
    let ok: boolean;
    let value: unknown;
    try {
      [ok, value] = await this.call(run);
    } finally {
      this.slots.give();
    }
    const what = ok ? "the result" : "the error";
    let doc: Uint8Array;
    try {
      doc = encode(value, what);
    } catch (e) {
      ok = false;
      doc = encode(
        e instanceof ValueTypeError
          ? plainError("TypeError", e.message)
          : plainError("ValueError", `${what} cannot be encoded: ${(e as Error).message}`),
      );
    }
    if (doc.length + 64 > READY_VALUE_BYTES) {
      ok = false;
      doc = encode(
        plainError(
          "ValueError",
          `${what} is ${doc.length} bytes of msgpack, over the protocol's 16 MiB message limit ` +
            "(pass large data by reference)",
        ),
      );
    }
    if (run.gen !== this.gen) {
      return; // its session is gone: the runner failed it (WorkerLost) or sent it again
    }
    this.running.delete(String(run.a.token));
    this.outcomes.push({ exec_id: run.a.exec_id, attempt: run.a.attempt, token: run.a.token, ok, value: doc });
    this.pump();
    this.changed();
  }

  /** [ok, value] of running an attempt: its result, or an error map. */
  private async call(run: Running): Promise<[boolean, unknown]> {
    const a = run.a;
    if (run.abort.signal.aborted) {
      return [false, plainError("Cancelled", "cancelled before it started")];
    }
    const fn = this.w.actions.get(a.action);
    if (fn === undefined) {
      return [false, plainError("WorkerError", "action not served by this worker")];
    }
    let deadlineMs = a.deadline_ms;
    if (a.timeout_ms > 0) {
      // counted from now, when a slot starts it: time queued here does not count
      const by = Date.now() + a.timeout_ms;
      if (deadlineMs <= 0 || by < deadlineMs) {
        deadlineMs = by;
      }
    }
    const w = this.w;
    const ctx: ActionContext = {
      action: a.action,
      attempt: a.attempt,
      instanceId: uuid(a.instance),
      execId: uuid(a.exec_id),
      idempotencyKey: `${uuid(a.exec_id)}:${a.attempt}`,
      deadline: deadlineMs > 0 ? new Date(deadlineMs) : null,
      lastError: a.last_error,
      signal: run.abort.signal,
      get stopping(): boolean {
        return w.isStopping;
      },
    };
    try {
      return [true, await fn(a.kwargs, ctx)];
    } catch (e) {
      if (run.abort.signal.aborted) {
        return [false, plainError("Cancelled", "the runner cancelled it")];
      }
      return [false, errorMap(e)];
    }
  }

  private cancel(execId: Uint8Array, attempt: number, token: number | bigint): void {
    const key = `${uuid(execId)}/${attempt}/${token}`;
    this.cancelled.push(key);
    if (this.cancelled.length > CANCELS_REMEMBERED) {
      this.cancelled.shift();
    }
    const run = this.running.get(String(token));
    if (run !== undefined && Buffer.from(run.a.exec_id).equals(Buffer.from(execId)) && run.a.attempt === attempt) {
      run.abort.abort();
    }
  }

  private broken(e: Error): void {
    if (this.conn !== null && this.conn.error === null) {
      this.conn.close(e);
    }
    this.changed();
  }

  /** Says hello, then serves until the connection breaks or the worker stops. */
  async serve(conn: Conn): Promise<void> {
    const w = this.w;
    let reply: proto.Reply;
    try {
      reply = proto.decodeReply(
        await withTimeout(
          conn.send(proto.hello(w.name, [...w.actions.keys()].sort(), w.slots, w.prefetch, w.credential)),
          30000,
          "no answer to hello",
        ),
      );
    } catch (e) {
      conn.close();
      throw e;
    }
    if (reply.kind === "refused") {
      conn.close();
      throw new Refused(reply.reason);
    }
    if (reply.kind !== "welcome") {
      conn.close();
      throw new proto.ProtocolError(`a ${reply.kind} in reply to hello`);
    }
    const watchdogMs = reply.idle_ms > 0 ? 3 * reply.idle_ms + 1000 : 0; // 0: no idle cycle
    this.gen++;
    this.conn = conn;
    this.outstanding = 0;
    this.outcomes = [];
    this.cancelled.length = 0;
    this.draining = false;
    w.log("info", `${this.url}: serving ${w.actions.size} action(s) with ${w.slots} slot(s)`);
    this.pump();
    const control = this.control(conn, watchdogMs);
    try {
      while (conn.error === null && !w.isStopping) {
        await Promise.race([this.waitChange(60000), w.stopped, control]);
      }
      if (conn.error === null && w.isStopping) {
        await this.drain(conn);
      }
    } finally {
      conn.close();
      this.conn = null;
      this.gen++; // what runs now finishes unreported, as in the other SDKs
      this.running.clear();
      this.outcomes = [];
      this.outstanding = 0;
    }
    if (conn.error !== null && !w.isStopping) {
      throw conn.error; // the loop ended on it: reconnect
    }
  }

  /** Keeps a control request parked (the heartbeat); applies cancels. */
  private async control(conn: Conn, watchdogMs: number): Promise<void> {
    while (conn.error === null && !this.draining) {
      let r: proto.Reply;
      try {
        const body = conn.send(proto.control());
        r = proto.decodeReply(
          watchdogMs > 0 ? await withTimeout(body, watchdogMs, "runner silent for three idle periods") : await body,
        );
      } catch (e) {
        this.broken(e as Error);
        return;
      }
      if (r.kind === "cancel") {
        this.cancel(r.exec_id, r.attempt, r.token);
      } else if (r.kind !== "noop" && r.kind !== "ack") {
        this.broken(new proto.ProtocolError(`a ${r.kind} in reply to control`));
        return;
      }
    }
  }

  /** Goodbye: the runner stops dispatching; what runs finishes and is reported, all within the
   * worker's grace period. */
  private async drain(conn: Conn): Promise<void> {
    this.draining = true;
    const deadline = Date.now() + this.w.graceMs;
    try {
      const r = proto.decodeReply(
        await withTimeout(conn.send(proto.goodbye()), Math.max(deadline - Date.now(), 500), "no answer to goodbye"),
      );
      if (r.kind !== "ack") {
        this.w.log("warn", `${this.url}: a ${r.kind} in reply to goodbye`);
      }
    } catch {
      return;
    }
    while ((this.running.size > 0 || this.outcomes.length > 0 || this.outstanding > 0) && conn.error === null) {
      const left = deadline - Date.now();
      if (left <= 0) {
        break;
      }
      await this.waitChange(left);
    }
  }

  /** The grace is over: abort what still runs. */
  stopActions(): void {
    for (const run of this.running.values()) {
      run.abort.abort();
    }
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new WireError(what)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}

/** A worker process's connections to runners, and the actions it serves. */
export class Worker {
  readonly urls: string[];
  readonly slots: number;
  readonly prefetch: number;
  readonly name: string;
  readonly credential: string | null;
  readonly graceMs: number;
  readonly actions = new Map<string, Action>();
  readonly log: (level: "info" | "warn" | "error", message: string) => void;
  private readonly tls: TlsOptions;
  private readonly stop = new AbortController();
  private sessions: Session[] = [];
  /** Resolves when stop() is called. */
  readonly stopped: Promise<void>;

  constructor(options: WorkerOptions) {
    this.urls = typeof options.url === "string" ? [options.url] : [...options.url];
    if (this.urls.length === 0) {
      throw new TypeError("a worker needs at least one runner URL");
    }
    for (const u of this.urls) {
      parseUrl(u);
    }
    this.slots = options.slots ?? 8;
    this.prefetch = options.prefetch ?? 0;
    if (!Number.isInteger(this.slots) || this.slots < 1 || this.slots > 4096 ||
        !Number.isInteger(this.prefetch) || this.prefetch < 0 || this.prefetch > 4096) {
      throw new RangeError("slots must be 1..4096 and prefetch 0..4096");
    }
    this.name = options.name ?? `typescript-${os.hostname()}-${process.pid}`;
    this.credential = options.credential ?? null;
    for (const [what, v] of [["name", this.name], ["credential", this.credential]] as const) {
      if (v !== null && !nameOk(v)) {
        throw new TypeError(`the worker's ${what} must be 1 to 256 bytes without NUL`);
      }
    }
    this.graceMs = options.graceMs ?? 10000;
    this.tls = options.tls ?? {};
    this.log = options.log ?? ((level, message) => console.error(`${new Date().toISOString()} ${level} ${message}`));
    this.stopped = new Promise((resolve) => this.stop.signal.addEventListener("abort", () => resolve()));
  }

  /** Registers fn as action `name` (module-qualified: "mail.send"). Returns the worker. */
  action(name: string, fn: Action): this {
    if (!nameOk(name) || !name.includes(".")) {
      throw new TypeError(`action names are module-qualified (billing.charge), got ${JSON.stringify(name)}`);
    }
    if (this.actions.has(name)) {
      throw new TypeError(`action ${name} is registered twice`);
    }
    if (typeof fn !== "function") {
      throw new TypeError(`action ${name}: expected a function`);
    }
    this.actions.set(name, fn);
    return this;
  }

  get isStopping(): boolean {
    return this.stop.signal.aborted;
  }

  /** Serves until stop(); rejects with Refused if a runner refuses the hello (the other
   * runners' sessions say goodbye and drain first). */
  async run(): Promise<void> {
    if (this.actions.size === 0) {
      throw new TypeError("no actions registered");
    }
    if (this.actions.size > 4096) {
      throw new RangeError("at most 4096 actions");
    }
    this.sessions = this.urls.map((u) => new Session(this, u));
    const results = await Promise.allSettled(this.sessions.map((s) => this.keep(s)));
    for (const s of this.sessions) {
      s.stopActions();
    }
    for (const r of results) {
      if (r.status === "rejected") {
        throw r.reason;
      }
    }
  }

  private async keep(s: Session): Promise<void> {
    let backoff = RECONNECT_MIN_MS;
    while (!this.isStopping) {
      try {
        const conn = await Conn.open(s.url, this.tls);
        backoff = RECONNECT_MIN_MS; // connected: the runner is there
        await s.serve(conn);
      } catch (e) {
        if (e instanceof Refused) {
          this.log("error", `${s.url}: refused: ${e.message}`);
          this.stopNow();
          throw e;
        }
        if (this.isStopping) {
          return;
        }
        this.log("warn", `${s.url}: ${(e as Error).message} (reconnecting in ${(backoff / 1000).toFixed(1)} s)`);
        await pause(backoff, this.stop.signal);
        backoff = Math.min(backoff * 2, RECONNECT_MAX_MS);
      }
    }
  }

  private stopNow(): void {
    this.stop.abort();
  }

  /** Asks the worker to say goodbye, finish what runs (within graceMs) and let run() return. */
  shutdown(): void {
    this.stopNow();
  }

  /** Runs until SIGTERM or SIGINT (then goodbye and drain within the grace period; a second
   * signal stops at once). Resolves with the exit status: 0, 1 if a runner refused the worker,
   * 3 after a second signal. */
  async runUntilSignalled(): Promise<number> {
    let hits = 0;
    let forced: () => void = () => {};
    const second = new Promise<number>((resolve) => {
      forced = () => resolve(3);
    });
    const onSignal = (): void => {
      hits++;
      if (hits === 1) {
        this.shutdown();
      } else {
        for (const s of this.sessions) {
          s.stopActions();
        }
        forced();
      }
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    try {
      return await Promise.race([
        this.run().then(
          () => 0,
          (e: unknown) => {
            if (e instanceof Refused) {
              return 1;
            }
            throw e;
          },
        ),
        second,
      ]);
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    }
  }
}
