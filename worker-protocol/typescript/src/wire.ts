// SPDX-License-Identifier: MIT
//
// The SP (scalability protocols) wire that nng speaks, for one REQ connection to a runner's REP
// socket over tcp://, ipc:// and tls+tcp:// (docs/protocol.md, "Transport"). Written from nng's
// transport documentation, as the Python SDK's; no native binding is needed.
//
// - Handshake: each side sends 8 bytes, 0x00 'S' 'P' 0x00, its protocol id (16-bit big-endian:
//   REQ is 0x30, REP 0x31) and two zero bytes, and checks the peer's.
// - Frames: tcp (and tls) send an 8-byte big-endian length, then the message; ipc sends a 1-byte
//   message type (1) before the length. A message starts with the SP header: for REQ/REP one
//   32-bit request id with its high bit set, which the reply carries back. Several requests may
//   be out at once on one connection (nng contexts); replies are matched by id.

import * as net from "node:net";
import * as tls from "node:tls";

export const REQ = 0x30;
export const REP = 0x31;
/** NNG_OPT_RECVMAXSZ on both sides (docs/protocol.md). */
export const MAX_MESSAGE = 16 * 1024 * 1024;

/** The connection broke, or the peer is not an SP REP socket. */
export class WireError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WireError";
  }
}

export interface RunnerUrl {
  kind: "tcp" | "ipc" | "tls";
  host?: string;
  port?: number;
  path?: string;
}

/** The parts of a runner URL; throws a TypeError naming the forms it takes. */
export function parseUrl(url: string): RunnerUrl {
  for (const scheme of ["tls+tcp://", "tcp://", "ipc://"]) {
    if (!url.startsWith(scheme)) {
      continue;
    }
    const rest = url.slice(scheme.length);
    if (scheme === "ipc://") {
      if (rest === "") {
        throw new TypeError(`${url}: an ipc:// URL needs a path`);
      }
      return { kind: "ipc", path: rest };
    }
    const colon = rest.lastIndexOf(":");
    const port = rest.slice(colon + 1);
    if (colon < 0 || !/^[0-9]+$/.test(port) || Number(port) > 65535) {
      throw new TypeError(`${url}: expected ${scheme}HOST:PORT`);
    }
    return {
      kind: scheme === "tls+tcp://" ? "tls" : "tcp",
      host: rest.slice(0, colon).replace(/^\[|\]$/g, ""),
      port: Number(port),
    };
  }
  throw new TypeError(`${url}: the URL must start with tcp://, ipc:// or tls+tcp://`);
}

/** TLS settings for tls+tcp:// (node:tls connect options: ca, cert, key, servername...). */
export type TlsOptions = tls.ConnectionOptions;

const HELLO = Buffer.from([0x00, 0x53, 0x50, 0x00, 0x00, REQ, 0x00, 0x00]);

interface Waiter {
  resolve: (body: Buffer) => void;
  reject: (e: Error) => void;
}

/** A REQ connection: send(body) sends one request and resolves with its reply's body. */
export class Conn {
  private next = 1;
  private readonly waiting = new Map<number, Waiter>();
  private buf: Buffer = Buffer.alloc(0);
  private handshook = false;
  error: Error | null = null;

  private constructor(
    private readonly sock: net.Socket,
    private readonly ipc: boolean,
  ) {}

  /** Connects and handshakes (within timeoutMs). */
  static open(url: string, tlsOptions: TlsOptions = {}, timeoutMs = 10000): Promise<Conn> {
    const u = parseUrl(url);
    return new Promise((resolve, reject) => {
      let sock: net.Socket;
      const ready = u.kind === "tls" ? "secureConnect" : "connect";
      if (u.kind === "ipc") {
        sock = net.connect({ path: u.path as string });
      } else if (u.kind === "tls") {
        sock = tls.connect({ servername: u.host, ...tlsOptions, host: u.host, port: u.port });
      } else {
        sock = net.connect({ host: u.host, port: u.port as number });
      }
      const conn = new Conn(sock, u.kind === "ipc");
      const timer = setTimeout(() => fail(new WireError(`${url}: handshake timed out`)), timeoutMs);
      const fail = (e: Error): void => {
        clearTimeout(timer);
        sock.destroy();
        reject(e instanceof WireError ? e : new WireError(`${url}: ${e.message}`));
      };
      sock.once("error", fail);
      sock.once(ready, () => {
        sock.setNoDelay(true);
        sock.write(HELLO);
      });
      conn.onHandshake = (e) => {
        clearTimeout(timer);
        if (e !== null) {
          fail(new WireError(`${url}: ${e.message}`));
          return;
        }
        sock.off("error", fail);
        sock.on("error", (err) => conn.fail(new WireError(`connection lost: ${err.message}`)));
        resolve(conn);
      };
      sock.on("data", (d: Buffer) => conn.onData(d));
      sock.on("close", () => {
        if (!conn.handshook) {
          fail(new WireError(`${url}: closed during the handshake`));
        }
        conn.fail(new WireError("connection closed"));
      });
    });
  }

  private onHandshake: (e: Error | null) => void = () => {};

  private onData(d: Buffer): void {
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    if (!this.handshook) {
      if (this.buf.length < 8) {
        return;
      }
      const peer = this.buf.subarray(0, 8);
      this.buf = this.buf.subarray(8);
      if (peer[0] !== 0 || peer[1] !== 0x53 || peer[2] !== 0x50 || peer[3] !== 0 ||
          peer.readUInt16BE(4) !== REP) {
        this.onHandshake(new Error(`the peer is not an SP REP socket (${peer.toString("hex")})`));
        return;
      }
      this.handshook = true;
      this.onHandshake(null);
    }
    for (;;) {
      const head = this.ipc ? 9 : 8;
      if (this.buf.length < head) {
        return;
      }
      if (this.ipc && this.buf[0] !== 1) {
        this.fail(new WireError(`unknown ipc message type ${this.buf[0]}`));
        return;
      }
      const n = Number(this.buf.readBigUInt64BE(this.ipc ? 1 : 0));
      if (n > MAX_MESSAGE || n < 4) {
        this.fail(new WireError(`a message of ${n} bytes`));
        return;
      }
      if (this.buf.length < head + n) {
        return;
      }
      const msg = this.buf.subarray(head, head + n);
      this.buf = this.buf.subarray(head + n);
      const id = msg.readUInt32BE(0) & 0x7fffffff;
      const w = this.waiting.get(id);
      if (w !== undefined) {
        this.waiting.delete(id);
        w.resolve(Buffer.from(msg.subarray(4)));
      }
    }
  }

  /** Closes the connection: every request out fails with why (or "connection closed"). */
  fail(why: Error): void {
    if (this.error === null) {
      this.error = why;
    }
    for (const w of this.waiting.values()) {
      w.reject(this.error);
    }
    this.waiting.clear();
    this.sock.destroy();
  }

  close(why?: Error): void {
    this.fail(why ?? new WireError("connection closed"));
  }

  /** Sends a request; resolves with its reply's body, rejects when the connection breaks. */
  send(body: Uint8Array): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      if (this.error !== null) {
        reject(this.error);
        return;
      }
      const id = this.next;
      this.next = (this.next % 0x7fffffff) + 1;
      this.waiting.set(id, { resolve, reject });
      const head = Buffer.alloc(this.ipc ? 13 : 12);
      let o = 0;
      if (this.ipc) {
        head[o++] = 1;
      }
      head.writeBigUInt64BE(BigInt(body.length + 4), o);
      head.writeUInt32BE((id | 0x80000000) >>> 0, o + 8);
      this.sock.write(Buffer.concat([head, body]));
    });
  }
}
