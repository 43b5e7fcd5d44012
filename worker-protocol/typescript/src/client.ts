// SPDX-License-Identifier: MIT
//
// Start and watch workflows from Node over Cairn's SQL API (docs/typescript.md, "Client"), with
// node-postgres (`pg`). Each method is one statement of the SQL API (cairn.enqueue, cairn.cancel,
// cairn.retry, cairn.signal, cairn.signal_with_start, cairn.publish_event) or a read of
// cairn.runner_instances, so the client, cairnctl and psql see the same thing. Values cross as
// JSON text, read and written by json.ts (64-bit ints, 3.0 apart from 3, `__proto__` as a key),
// never by pg's own JSON parsing. One Client holds one connection and runs one call at a time
// (calls made at once wait their turn).

import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import pg from "pg";

import { parseJson, toJson } from "./json.js";
import { type Value } from "./values.js";

export const FINISHED = ["completed", "failed", "cancelled", "timed_out"] as const;

/** An instance as status() and list() give it. */
export interface InstanceStatus {
  id: string;
  workflow: string;
  version: string;
  status: "queued" | "running" | (typeof FINISHED)[number];
  input: Value;
  result: Value;
  error: Value;
  createdAt: Date;
  startedAt: Date | null;
  completedAt: Date | null;
  deadlineAt: Date | null;
}

/** An instance ended failed, cancelled or timed_out: its status and error (type, message,
 * bases and details, as the workflow saw it). */
export class WorkflowFailed extends Error {
  constructor(
    readonly instanceId: string,
    readonly status: string,
    readonly error: { [key: string]: Value },
  ) {
    const text = (v: Value | undefined): string => (typeof v === "string" ? v : JSON.stringify(v ?? null));
    super(`${instanceId} ${status}: ${text(error?.type)}: ${text(error?.message)}`);
    this.name = "WorkflowFailed";
  }
  get type(): string | undefined {
    return typeof this.error?.type === "string" ? this.error.type : undefined;
  }
}

/** result() of an instance still queued or running, or wait() past its timeout. */
export class NotFinished extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotFinished";
  }
}

/** An input the workflow's typed inputs reject (SQLSTATE 22Z01): the message is the database's
 * reason, naming the path and what was expected ("input.items[2]: expected int, got str").
 * Nothing was stored. */
export class InputRejected extends TypeError {
  constructor(message: string) {
    super(message);
    this.name = "InputRejected";
  }
}

/** The Python client's name for InputRejected. */
export const InputRefused = InputRejected;

/** No such instance. */
export class NotFound extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotFound";
  }
}

export interface ClientOptions {
  /** Act as this tenant (SET ROLE cairn_tenant_<tenant>): see, enqueue and control its
   * instances only; the login must have been granted the role. */
  tenant?: string;
}

export interface EnqueueOptions {
  /** The same key with the same input gives the first instance back; with another input it is
   * refused, unless anyInput. */
  idempotencyKey?: string;
  anyInput?: boolean;
  /** Higher first (default 0). */
  priority?: number;
  /** Not before this time. */
  at?: Date;
  /** A version of the workflow (default: the newest). */
  version?: string;
  /** Ends the instance timed_out this long after it is due: seconds, or an interval text
   * ("5 minutes"). */
  timeout?: number | string;
  /** Instances with the same key run one at a time (or the workflow's per-key limit). */
  concurrencyKey?: string;
  /** Check the input against the workflow's JSON Schema (schema(), read once per workflow and
   * version, then kept) before sending it: a wrong input throws InputRejected without a round
   * trip to enqueue. The database checks it again either way. */
  validate?: boolean;
}

/** enqueueMany's options: EnqueueOptions' call-wide ones, and keys per input. */
export interface EnqueueManyOptions extends Omit<EnqueueOptions, "idempotencyKey" | "concurrencyKey"> {
  /** One per input (null: none for that input). */
  idempotencyKeys?: (string | null)[];
  /** One per input (null: none for that input). */
  concurrencyKeys?: (string | null)[];
}

/** An enqueue's timeout for PostgreSQL: seconds (a number) or interval text ("5 minutes"). */
function intervalOf(timeout: number | string | undefined): string | null {
  return timeout === undefined ? null : typeof timeout === "number" ? `${timeout} seconds` : timeout;
}

/** Where an input's value is, as the engine names it: input.order.items[2]. */
function inputPath(e: ErrorObject): string {
  let p = "input";
  for (const part of e.instancePath.split("/").slice(1)) {
    const k = part.replace(/~1/g, "/").replace(/~0/g, "~");
    p += /^[0-9]+$/.test(k) ? `[${k}]` : /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`;
  }
  if (e.keyword === "required") {
    p += `.${String((e.params as { missingProperty?: string }).missingProperty)}`;
  } else if (e.keyword === "additionalProperties") {
    p += `.${String((e.params as { additionalProperty?: string }).additionalProperty)}`;
  }
  return p;
}

const STATUS_SQL =
  "SELECT ri.instance_id::text AS id, ri.workflow_name AS workflow, wv.workflow_version AS version," +
  " ri.status, ri.input::text AS input, ri.result::text AS result, ri.error::text AS error," +
  " ri.created_at, ri.started_at, ri.completed_at, ri.deadline_at" +
  " FROM cairn.runner_instances ri JOIN cairn.workflow_versions wv ON wv.id = ri.workflow_version_id";

const TENANT_NAME = /^[a-z][a-z0-9_]{0,47}$/;

function row(r: Record<string, unknown>): InstanceStatus {
  const j = (t: unknown): Value => (typeof t === "string" ? parseJson(t) : null);
  return {
    id: r.id as string,
    workflow: r.workflow as string,
    version: r.version as string,
    status: r.status as InstanceStatus["status"],
    input: j(r.input),
    result: j(r.result),
    error: j(r.error),
    createdAt: r.created_at as Date,
    startedAt: (r.started_at as Date | null) ?? null,
    completedAt: (r.completed_at as Date | null) ?? null,
    deadlineAt: (r.deadline_at as Date | null) ?? null,
  };
}

function outcome(s: InstanceStatus): Value {
  if (s.status === "completed") {
    return s.result;
  }
  if ((FINISHED as readonly string[]).includes(s.status)) {
    throw new WorkflowFailed(s.id, s.status, (s.error ?? {}) as { [key: string]: Value });
  }
  throw new NotFinished(`${s.id} has not finished (status ${s.status})`);
}

function uuidOf(id: string): string {
  if (!/^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$/.test(id)) {
    throw new TypeError(`not an instance id: ${JSON.stringify(id)}`);
  }
  return id;
}

/** A connection to Cairn's database, for starting and watching workflows. */
export class Client {
  private readonly db: pg.Client;
  private readonly ready: Promise<void>;
  private queue: Promise<unknown> = Promise.resolve();
  private readonly heard = new Set<string>();
  private readonly checks = new Map<string, ValidateFunction>();
  private ajv: Ajv2020 | null = null;
  private wakeup: (() => void) | null = null;

  /** connection: a libpq connection string or URL (pg's). Connects on the first call. */
  constructor(connection: string, options: ClientOptions = {}) {
    const tenant = options.tenant;
    if (tenant !== undefined && !TENANT_NAME.test(tenant)) {
      throw new TypeError(`${JSON.stringify(tenant)} is not a tenant name (a lowercase letter, then at most 47 of a-z, 0-9 and _)`);
    }
    const db = new pg.Client({ connectionString: connection });
    this.db = db;
    db.on("notification", (n) => {
      this.heard.add(n.channel);
      const f = this.wakeup;
      this.wakeup = null;
      f?.();
    });
    db.on("error", () => {
      // the connection broke: the next call fails with pg's error
    });
    this.ready = (async () => {
      await db.connect();
      if (tenant !== undefined) {
        await db.query(`SET ROLE ${pg.escapeIdentifier(`cairn_tenant_${tenant}`)}`);
      }
    })();
    this.ready.catch(() => {}); // reported by the calls that await it
  }

  /** Runs f on the connection once the calls before it are done. */
  private run<T>(f: () => Promise<T>): Promise<T> {
    const next = this.queue.then(async () => {
      await this.ready;
      return f();
    });
    this.queue = next.catch(() => {});
    return next;
  }

  private async query(sql: string, params: unknown[]): Promise<pg.QueryResult<Record<string, unknown>>> {
    try {
      return await this.db.query<Record<string, unknown>>(sql, params);
    } catch (e) {
      const code = (e as { code?: string }).code;
      const msg = (e as Error).message;
      if (code === "22Z01") {
        throw new InputRejected(msg.startsWith("cairn.") ? msg.slice(msg.indexOf(": ") + 2) : msg);
      }
      if (code === "P0002") {
        throw new NotFound(msg);
      }
      throw e;
    }
  }

  /** Enqueues an instance of workflow with input (its inputs by name); resolves with its id. */
  enqueue<In extends { [key: string]: unknown } = { [key: string]: unknown }>(
    workflow: string, input: In = {} as In, o: EnqueueOptions = {}): Promise<string> {
    if (input === null || typeof input !== "object" || Array.isArray(input)) {
      throw new TypeError("input must be an object (the workflow's inputs by name)");
    }
    const json = toJson(input, "the input");
    const timeout = intervalOf(o.timeout);
    return this.run(async () => {
      if (o.validate) {
        await this.check(workflow, o.version, json);
      }
      const r = await this.query(
        "SELECT cairn.enqueue($1, $2::jsonb, $3, $4, $5, $6, $7::interval, $8, $9)::text AS id",
        [workflow, json, o.idempotencyKey ?? null, o.priority ?? 0, o.at ?? null, o.version ?? null,
          timeout, o.concurrencyKey ?? null, o.anyInput ?? false],
      );
      return r.rows[0].id as string;
    });
  }

  /** Enqueues one instance per input in one call (cairn.enqueue_many) and resolves with their
   * ids in the inputs' order: all of them or, if one is refused, none. A refusal names the item,
   * counted from 1 ("item 3 of 500: input.qty: ..."); with validate, each input is checked
   * before sending. */
  enqueueMany<In extends { [key: string]: unknown } = { [key: string]: unknown }>(
    workflow: string, inputs: In[], o: EnqueueManyOptions = {}): Promise<string[]> {
    const texts = inputs.map((input, i) => {
      if (input === null || typeof input !== "object" || Array.isArray(input)) {
        throw new TypeError(`inputs[${i}] must be an object (the workflow's inputs by name)`);
      }
      return toJson(input, `inputs[${i}]`);
    });
    for (const [what, keys] of [["idempotencyKeys", o.idempotencyKeys], ["concurrencyKeys", o.concurrencyKeys]] as const) {
      if (keys !== undefined && keys.length !== inputs.length) {
        throw new TypeError(`${keys.length} ${what} for ${inputs.length} inputs (one per input, null for none)`);
      }
    }
    const timeout = intervalOf(o.timeout);
    return this.run(async () => {
      if (o.validate) {
        for (const [i, json] of texts.entries()) {
          try {
            await this.check(workflow, o.version, json);
          } catch (e) {
            throw e instanceof InputRejected ? new InputRejected(`item ${i + 1} of ${texts.length}: ${e.message}`) : e;
          }
        }
      }
      const r = await this.query(
        "SELECT coalesce(array_agg(u.id::text ORDER BY u.o), '{}') AS ids FROM unnest(cairn.enqueue_many($1," +
        " $2::jsonb, $3::text[], $4, $5, $6, $7::interval, $8::text[], $9)) WITH ORDINALITY AS u(id, o)",
        [workflow, `[${texts.join(",")}]`, o.idempotencyKeys ?? null, o.priority ?? 0, o.at ?? null,
          o.version ?? null, timeout, o.concurrencyKeys ?? null, o.anyInput ?? false],
      );
      return r.rows[0].ids as string[];
    });
  }

  /** Throws InputRejected when the input (JSON text) does not fit the workflow's schema. */
  private async check(workflow: string, version: string | undefined, json: string): Promise<void> {
    const key = `${workflow}\u0000${version ?? ""}`;
    let fn = this.checks.get(key);
    if (fn === undefined) {
      this.ajv ??= new Ajv2020({ allErrors: false, strict: false });
      fn = this.ajv.compile(await this.schemaOf(workflow, version));
      this.checks.set(key, fn);
    }
    // ajv reads plain JSON values: 64-bit ints as numbers are still integers to it
    if (!fn(JSON.parse(json))) {
      const e = fn.errors?.[0];
      throw new InputRejected(
        e === undefined ? "the input does not fit the workflow's inputs"
          : `${inputPath(e)}: ${e.message ?? "does not fit"} (checked before sending, against ${workflow}'s schema)`);
    }
  }

  /** The instance; NotFound if there is none. */
  status(id: string): Promise<InstanceStatus> {
    uuidOf(id);
    return this.run(() => this.look(id));
  }

  private async look(id: string): Promise<InstanceStatus> {
    const r = await this.query(`${STATUS_SQL} WHERE ri.instance_id = $1`, [id]);
    if (r.rows.length === 0) {
      throw new NotFound(`no instance ${id}`);
    }
    return row(r.rows[0]);
  }

  /** Instances, newest first. */
  list(o: { status?: string; workflow?: string; limit?: number } = {}): Promise<InstanceStatus[]> {
    return this.run(async () => {
      const r = await this.query(
        `${STATUS_SQL} WHERE ($1::text IS NULL OR ri.status = $1) AND ($2::text IS NULL OR ri.workflow_name = $2)` +
          " ORDER BY ri.created_at DESC LIMIT $3",
        [o.status ?? null, o.workflow ?? null, o.limit ?? 20],
      );
      return r.rows.map(row);
    });
  }

  /** The result of a completed instance; WorkflowFailed if it failed, was cancelled or timed
   * out; NotFinished if it has not finished. */
  async result<Out = Value>(id: string): Promise<Out> {
    return outcome(await this.status(id)) as Out;
  }

  /** Waits until the instance finishes and resolves with result(). Told by the database when
   * the instance ends (LISTEN on cairn.done_channel), it reads the status again only then, or
   * every pollMs (1000). NotFinished after timeoutMs (none by default). */
  wait<Out = Value>(id: string, o: { timeoutMs?: number; pollMs?: number } = {}): Promise<Out> {
    uuidOf(id);
    const channel = `cairn_done_${id.replace(/-/g, "").toLowerCase()}`;
    const end = o.timeoutMs === undefined ? Infinity : Date.now() + o.timeoutMs;
    const poll = o.pollMs ?? 1000;
    return this.run(async () => {
      await this.db.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
      try {
        for (;;) {
          this.heard.delete(channel);
          const s = await this.look(id);
          if ((FINISHED as readonly string[]).includes(s.status)) {
            return outcome(s) as Out;
          }
          const left = end - Date.now();
          if (left <= 0) {
            throw new NotFinished(`${id} did not finish within ${o.timeoutMs} ms (status ${s.status})`);
          }
          if (!this.heard.has(channel)) {
            await new Promise<void>((resolve) => {
              const t = setTimeout(() => {
                this.wakeup = null;
                resolve();
              }, Math.min(poll, left));
              this.wakeup = () => {
                clearTimeout(t);
                resolve();
              };
            });
          }
        }
      } finally {
        await this.db.query(`UNLISTEN ${pg.escapeIdentifier(channel)}`).catch(() => {});
      }
    });
  }

  /** cairn.cancel: "cancelled", "requested" (its runner stops it, after the finally blocks
   * around what it interrupts, unless force), or "already <status>". */
  cancel(id: string, reason?: string, o: { force?: boolean } = {}): Promise<string> {
    uuidOf(id);
    return this.run(async () =>
      (await this.query("SELECT cairn.cancel($1, $2, $3) AS a", [id, reason ?? null, o.force ?? false])).rows[0].a as string);
  }

  /** cairn.retry: "queued", or "already queued" / "already running". */
  retry(id: string, reason?: string): Promise<string> {
    uuidOf(id);
    return this.run(async () => (await this.query("SELECT cairn.retry($1, $2) AS a", [id, reason ?? null])).rows[0].a as string);
  }

  /** cairn.signal: "delivered", "buffered", "duplicate" or "not waiting". */
  signal(id: string, name: string, payload: unknown = null, o: { dedupKey?: string; onlyIfWaiting?: boolean } = {}): Promise<string> {
    uuidOf(id);
    const json = toJson(payload, "the payload");
    return this.run(async () =>
      (await this.query("SELECT cairn.signal($1, $2, $3::jsonb, $4, $5) AS a",
        [id, name, json, o.dedupKey ?? null, o.onlyIfWaiting ?? false])).rows[0].a as string);
  }

  /** cairn.signal_with_start: signals the instance of workflow under idempotencyKey, starting
   * it with input first when there is none. */
  signalWithStart(workflow: string, idempotencyKey: string, name: string, payload: unknown = null,
    input: { [key: string]: unknown } = {}, o: { dedupKey?: string } = {}): Promise<{ id: string; signal: string }> {
    const p = toJson(payload, "the payload");
    const i = toJson(input, "the input");
    return this.run(async () => {
      const r = await this.query(
        "SELECT instance_id::text AS id, signal FROM cairn.signal_with_start($1, $2, $3, $4::jsonb, $5::jsonb, $6)",
        [workflow, idempotencyKey, name, p, i, o.dedupKey ?? null]);
      return { id: r.rows[0].id as string, signal: r.rows[0].signal as string };
    });
  }

  /** cairn.publish_event: the event under name and key, for the waits on it. */
  publishEvent(name: string, key: string | number, payload: unknown = null, o: { dedupKey?: string } = {}):
    Promise<{ eventId: string; woken: number; duplicate: boolean }> {
    const json = toJson(payload, "the payload");
    return this.run(async () => {
      const r = await this.query(
        "SELECT event_id::text AS e, woken, duplicate FROM cairn.publish_event($1, $2, $3::jsonb, $4)",
        [name, String(key), json, o.dedupKey ?? null]);
      return { eventId: r.rows[0].e as string, woken: Number(r.rows[0].woken), duplicate: r.rows[0].duplicate as boolean };
    });
  }

  /** The JSON Schema (2020-12) of the inputs the newest (or the given) version takes. */
  schema(workflow: string, version?: string): Promise<{ [key: string]: Value }> {
    return this.run(() => this.schemaOf(workflow, version));
  }

  private async schemaOf(workflow: string, version?: string): Promise<{ [key: string]: Value }> {
    {
      const r = await this.query(
        "SELECT v.input_schema::text AS s, v.inputs FROM cairn.find_version('schema', $1, $2) v", [workflow, version ?? null]);
      const { s, inputs } = r.rows[0] as { s: string | null; inputs: string[] | null };
      let out: { [key: string]: Value };
      if (s !== null) {
        out = { ...(parseJson(s) as { [key: string]: Value }), title: workflow };
      } else {
        // no input typed: any value for each, other keys allowed
        out = {
          $schema: "https://json-schema.org/draft/2020-12/schema",
          type: "object",
          properties: Object.fromEntries((inputs ?? []).map((n) => [n, {}])),
          required: inputs ?? [],
          additionalProperties: true,
          title: workflow,
        };
      }
      return out;
    }
  }

  /** Closes the connection. */
  async close(): Promise<void> {
    await this.queue;
    await this.db.end();
  }
}
