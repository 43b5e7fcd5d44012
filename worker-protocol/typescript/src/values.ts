// SPDX-License-Identifier: MIT
//
// Values between JavaScript and the engine (docs/values.md), and the MessagePack they travel as.
// Written here rather than taken from a msgpack library because the engine's values need three
// things the libraries do not do by default, and each is easy to get wrong: an int and a float
// are different types (JavaScript has one number), ints are exact to 64 bits (past 2^53 a number
// loses digits), and a map's keys are data (`__proto__` must stay a key, never a prototype).
//
//   engine       JavaScript (decoded)                    JavaScript (encoded)
//   None         null                                    null (and undefined as a map value:
//                                                        the key is left out)
//   bool         boolean                                 boolean
//   int          number when it is a safe integer,       a number with no fraction (not -0),
//                else bigint                             a bigint within int64
//   float        number (an integral one as a Float)     a number with a fraction, -0, NaN,
//                                                        ±Infinity, or a Float
//   str          string                                  string (well-formed UTF-16)
//   list         array                                   array
//   dict         plain object with a null prototype      plain object (own enumerable keys)
//
// A float with no fraction (3.0) decodes as a Float, so that it goes back as a float: `Number(f)`
// or `f.value` gives the number. At most 32 levels deep, as the engine.

/** The deepest a value may nest (the engine's limit: the top value is level 1). */
export const MAX_DEPTH = 32;

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** A float whose value has no fraction (3.0): kept apart from the int 3 so it travels back as a
 * float. Wrap a number with `new Float(x)` to send it as a float whatever its value. */
export class Float {
  readonly value: number;
  constructor(value: number) {
    if (typeof value !== "number") {
      throw new TypeError("Float takes a number");
    }
    this.value = value;
  }
  valueOf(): number {
    return this.value;
  }
  toString(): string {
    return Number.isInteger(this.value) ? this.value.toFixed(1) : String(this.value);
  }
  toJSON(): number {
    return this.value;
  }
}

/** What an engine value is in JavaScript. */
export type Value =
  | null
  | boolean
  | number
  | bigint
  | string
  | Float
  | Value[]
  | { [key: string]: Value };

/** A value that has no engine value (with where it is, e.g. `the result.items[3]`). */
export class ValueTypeError extends TypeError {
  constructor(message: string) {
    super(message);
    this.name = "ValueTypeError";
  }
}

/** A value document that does not decode (truncated, a type the engine does not use...). */
export class ValueDecodeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ValueDecodeError";
  }
}

function keyPath(where: string, key: string): string {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `${where}.${key}` : `${where}[${JSON.stringify(key)}]`;
}

function isPlainObject(v: object): boolean {
  const p = Object.getPrototypeOf(v) as object | null;
  return p === Object.prototype || p === null;
}

// ---- encoding -------------------------------------------------------------------------------

class Writer {
  private buf: Uint8Array;
  private view: DataView;
  len = 0;

  constructor(size = 256) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
  }

  private room(n: number): void {
    if (this.len + n <= this.buf.length) {
      return;
    }
    let size = this.buf.length * 2;
    while (size < this.len + n) {
      size *= 2;
    }
    const b = new Uint8Array(size);
    b.set(this.buf.subarray(0, this.len));
    this.buf = b;
    this.view = new DataView(b.buffer);
  }

  u8(v: number): void {
    this.room(1);
    this.buf[this.len++] = v;
  }

  u16(v: number): void {
    this.room(2);
    this.view.setUint16(this.len, v);
    this.len += 2;
  }

  u32(v: number): void {
    this.room(4);
    this.view.setUint32(this.len, v);
    this.len += 4;
  }

  i64(v: bigint): void {
    this.room(8);
    this.view.setBigInt64(this.len, v);
    this.len += 8;
  }

  u64(v: bigint): void {
    this.room(8);
    this.view.setBigUint64(this.len, v);
    this.len += 8;
  }

  f64(v: number): void {
    this.room(8);
    this.view.setFloat64(this.len, v);
    this.len += 8;
  }

  bytes(b: Uint8Array): void {
    this.room(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  done(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

const utf8 = new TextEncoder();

function writeInt(w: Writer, v: bigint): void {
  if (v >= 0n) {
    if (v < 128n) {
      w.u8(Number(v));
    } else if (v < 256n) {
      w.u8(0xcc);
      w.u8(Number(v));
    } else if (v < 65536n) {
      w.u8(0xcd);
      w.u16(Number(v));
    } else if (v < 4294967296n) {
      w.u8(0xce);
      w.u32(Number(v));
    } else {
      w.u8(0xcf);
      w.u64(v);
    }
  } else if (v >= -32n) {
    w.u8(Number(v) & 0xff);
  } else {
    w.u8(0xd3);
    w.i64(v);
  }
}

function writeStr(w: Writer, s: string, where: string): void {
  if (!s.isWellFormed()) {
    throw new ValueTypeError(`${where} is a string with a lone surrogate, which UTF-8 cannot hold`);
  }
  const b = utf8.encode(s);
  if (b.length < 32) {
    w.u8(0xa0 | b.length);
  } else if (b.length < 256) {
    w.u8(0xd9);
    w.u8(b.length);
  } else if (b.length < 65536) {
    w.u8(0xda);
    w.u16(b.length);
  } else {
    w.u8(0xdb);
    w.u32(b.length);
  }
  w.bytes(b);
}

function writeHeader(w: Writer, n: number, fix: number, fixMax: number, c16: number): void {
  if (n < fixMax) {
    w.u8(fix | n);
  } else if (n < 65536) {
    w.u8(c16);
    w.u16(n);
  } else {
    w.u8(c16 + 1);
    w.u32(n);
  }
}

interface WriteCtx {
  seen: Set<object>;
  bin: boolean; // Uint8Array as a bin (a protocol envelope), else an error
}

function writeValue(w: Writer, v: unknown, where: string, depth: number, cx: WriteCtx): void {
  if (depth > MAX_DEPTH) {
    throw new ValueTypeError(`${where} nests deeper than ${MAX_DEPTH} levels`);
  }
  switch (typeof v) {
    case "boolean":
      w.u8(v ? 0xc3 : 0xc2);
      return;
    case "number":
      if (Number.isInteger(v) && !Object.is(v, -0)) {
        if (!Number.isSafeInteger(v)) {
          // 2^53 and past: exact as a number, but which int the writer meant is unknowable
          throw new ValueTypeError(
            `${where} is the number ${v}, past 2^53 where numbers skip integers: pass a bigint`,
          );
        }
        writeInt(w, BigInt(v));
      } else {
        w.u8(0xcb);
        w.f64(v);
      }
      return;
    case "bigint":
      if (v < INT64_MIN || v > INT64_MAX) {
        throw new ValueTypeError(`${where} is the bigint ${v}, outside the 64-bit range`);
      }
      writeInt(w, v);
      return;
    case "string":
      writeStr(w, v, where);
      return;
    case "undefined":
      throw new ValueTypeError(`${where} is undefined, which has no engine value (use null)`);
    case "object":
      break;
    default:
      throw new ValueTypeError(
        `${where} is a ${typeof v}, which has no engine value (use null, boolean, number, ` +
          "bigint, string, array or plain object)",
      );
  }
  if (v === null) {
    w.u8(0xc0);
    return;
  }
  if (v instanceof Float) {
    w.u8(0xcb);
    w.f64(v.value);
    return;
  }
  if (v instanceof Uint8Array && cx.bin) {
    if (v.length < 256) {
      w.u8(0xc4);
      w.u8(v.length);
    } else if (v.length < 65536) {
      w.u8(0xc5);
      w.u16(v.length);
    } else {
      w.u8(0xc6);
      w.u32(v.length);
    }
    w.bytes(v);
    return;
  }
  const seen = cx.seen;
  if (seen.has(v)) {
    throw new ValueTypeError(`${where} refers back to itself (a cycle)`);
  }
  seen.add(v);
  if (Array.isArray(v)) {
    writeHeader(w, v.length, 0x90, 16, 0xdc);
    for (let i = 0; i < v.length; i++) {
      if (v[i] === undefined) {
        throw new ValueTypeError(`${where}[${i}] is undefined (a hole or undefined in a list: use null)`);
      }
      writeValue(w, v[i], `${where}[${i}]`, depth + 1, cx);
    }
  } else if (isPlainObject(v)) {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o).filter((k) => o[k] !== undefined);
    writeHeader(w, keys.length, 0x80, 16, 0xde);
    for (const k of keys) {
      writeStr(w, k, where);
      writeValue(w, o[k], keyPath(where, k), depth + 1, cx);
    }
  } else {
    const name = (v).constructor?.name ?? "object";
    throw new ValueTypeError(
      `${where} is a ${name}, which has no engine value (use null, boolean, number, bigint, ` +
        "string, array or plain object)",
    );
  }
  seen.delete(v);
}

/** A value document: the MessagePack of one value. `where` names the value in errors. */
export function encode(v: unknown, where = "the value"): Uint8Array {
  const w = new Writer();
  writeValue(w, v, where, 1, { seen: new Set(), bin: false });
  return w.done();
}

/** A protocol message's MessagePack: as encode, with Uint8Array fields written as bin. */
export function encodeEnvelope(v: unknown): Uint8Array {
  const w = new Writer();
  writeValue(w, v, "the message", 1, { seen: new Set(), bin: true });
  return w.done();
}

/** Throws ValueTypeError when v has no engine value. */
export function check(v: unknown, where = "the value"): void {
  encode(v, where);
}

// ---- decoding -------------------------------------------------------------------------------

const utf8d = new TextDecoder("utf-8", { fatal: true });

class Reader {
  pos = 0;
  private view: DataView;
  constructor(private buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  need(n: number): void {
    if (this.pos + n > this.buf.length) {
      throw new ValueDecodeError("truncated value document");
    }
  }
  u8(): number {
    this.need(1);
    return this.buf[this.pos++];
  }
  u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.pos);
    this.pos += 2;
    return v;
  }
  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.pos);
    this.pos += 4;
    return v;
  }
  u64(): bigint {
    this.need(8);
    const v = this.view.getBigUint64(this.pos);
    this.pos += 8;
    return v;
  }
  i64(): bigint {
    this.need(8);
    const v = this.view.getBigInt64(this.pos);
    this.pos += 8;
    return v;
  }
  i8(): number {
    this.need(1);
    return this.view.getInt8(this.pos++);
  }
  i16(): number {
    this.need(2);
    const v = this.view.getInt16(this.pos);
    this.pos += 2;
    return v;
  }
  i32(): number {
    this.need(4);
    const v = this.view.getInt32(this.pos);
    this.pos += 4;
    return v;
  }
  f32(): number {
    this.need(4);
    const v = this.view.getFloat32(this.pos);
    this.pos += 4;
    return v;
  }
  f64(): number {
    this.need(8);
    const v = this.view.getFloat64(this.pos);
    this.pos += 8;
    return v;
  }
  bytes(n: number): Uint8Array {
    this.need(n);
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }
  get left(): number {
    return this.buf.length - this.pos;
  }
}

function int(v: bigint): number | bigint {
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}

function float(v: number): number | Float {
  return Number.isInteger(v) && !Object.is(v, -0) ? new Float(v) : v; // -0 goes back as a float anyway
}

function readStr(r: Reader, n: number): string {
  try {
    return utf8d.decode(r.bytes(n));
  } catch {
    throw new ValueDecodeError("a string that is not UTF-8");
  }
}

/** Options of decode(). */
export interface DecodeOptions {
  /** Keep bin fields as Uint8Array (protocol envelopes carry ids and value documents in them);
   * values themselves never hold bin. Default false: a bin is an error. */
  bin?: boolean;
}

function readValue(r: Reader, depth: number, o: DecodeOptions): Value | Uint8Array {
  if (depth > MAX_DEPTH) {
    throw new ValueDecodeError(`nests deeper than ${MAX_DEPTH} levels`);
  }
  const t = r.u8();
  if (t < 0x80) {
    return t;
  }
  if (t >= 0xe0) {
    return t - 256;
  }
  if (t >= 0xa0 && t < 0xc0) {
    return readStr(r, t & 0x1f);
  }
  if (t >= 0x90 && t < 0xa0) {
    return readList(r, t & 0x0f, depth, o);
  }
  if (t >= 0x80 && t < 0x90) {
    return readMap(r, t & 0x0f, depth, o);
  }
  switch (t) {
    case 0xc0:
      return null;
    case 0xc2:
      return false;
    case 0xc3:
      return true;
    case 0xcc:
      return r.u8();
    case 0xcd:
      return r.u16();
    case 0xce:
      return r.u32();
    case 0xcf: {
      const v = r.u64();
      if (v > INT64_MAX) {
        throw new ValueDecodeError("an unsigned int above the 64-bit signed range");
      }
      return int(v);
    }
    case 0xd0:
      return r.i8();
    case 0xd1:
      return r.i16();
    case 0xd2:
      return r.i32();
    case 0xd3:
      return int(r.i64());
    case 0xca:
      return float(r.f32());
    case 0xcb:
      return float(r.f64());
    case 0xd9:
      return readStr(r, r.u8());
    case 0xda:
      return readStr(r, r.u16());
    case 0xdb:
      return readStr(r, r.u32());
    case 0xdc:
      return readList(r, r.u16(), depth, o);
    case 0xdd:
      return readList(r, r.u32(), depth, o);
    case 0xde:
      return readMap(r, r.u16(), depth, o);
    case 0xdf:
      return readMap(r, r.u32(), depth, o);
    case 0xc4:
    case 0xc5:
    case 0xc6: {
      const n = t === 0xc4 ? r.u8() : t === 0xc5 ? r.u16() : r.u32();
      if (!o.bin) {
        throw new ValueDecodeError("a bin, which no engine value holds");
      }
      return r.bytes(n).slice();
    }
    default:
      throw new ValueDecodeError(`type byte 0x${t.toString(16)}, which no engine value uses`);
  }
}

function readList(r: Reader, n: number, depth: number, o: DecodeOptions): Value[] {
  if (n > r.left) {
    throw new ValueDecodeError("a list longer than its document");
  }
  const out = new Array<Value>(n);
  for (let i = 0; i < n; i++) {
    out[i] = readValue(r, depth + 1, o) as Value;
  }
  return out;
}

function readMap(r: Reader, n: number, depth: number, o: DecodeOptions): { [key: string]: Value } {
  if (n * 2 > r.left) {
    throw new ValueDecodeError("a map longer than its document");
  }
  const out = Object.create(null) as { [key: string]: Value };
  for (let i = 0; i < n; i++) {
    const k = readValue(r, depth + 1, o);
    if (typeof k !== "string") {
      throw new ValueDecodeError("a map key that is not a string");
    }
    // defineProperty, so that "__proto__" is a key like any other
    Object.defineProperty(out, k, {
      value: readValue(r, depth + 1, o),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

/** A value document back to a value. Throws ValueDecodeError when it does not decode. */
export function decode(doc: Uint8Array, options: DecodeOptions = {}): Value {
  const r = new Reader(doc);
  const v = readValue(r, 1, options);
  if (r.left !== 0) {
    throw new ValueDecodeError("trailing bytes after the value");
  }
  return v as Value;
}
