// SPDX-License-Identifier: MIT
// The codec (src/values.ts) without a runner: what round-trips exactly, what is refused and how
// it is named, and that decoding refuses what no engine value is.
import { test } from "node:test";
import assert from "node:assert/strict";

import { decode, encode, Float, ValueDecodeError, ValueTypeError } from "../dist/index.js";

const hex = (b) => Buffer.from(b).toString("hex");

test("ints and floats stay apart, 64-bit ints are exact, -0.0 and NaN are floats", () => {
  assert.equal(hex(encode(3)), "03");
  assert.equal(hex(encode(-1)), "ff");
  assert.equal(hex(encode(2 ** 40)), "cf0000010000000000");
  assert.equal(hex(encode(1.5)), "cb3ff8000000000000");
  assert.equal(hex(encode(-0)), "cb8000000000000000");
  assert.equal(hex(encode(new Float(2))), "cb4000000000000000");
  assert.equal(hex(encode(9223372036854775807n)), "cf7fffffffffffffff");
  assert.equal(hex(encode(-9223372036854775808n)), "d38000000000000000");
  assert.ok(Object.is(decode(encode(-0)), -0));
  assert.ok(Number.isNaN(decode(encode(NaN))));
  const two = decode(encode(new Float(2)));
  assert.ok(two instanceof Float);
  assert.equal(Number(two), 2);
  assert.equal(hex(encode(two)), "cb4000000000000000", "a whole float goes back as a float");
  assert.equal(decode(encode(9223372036854775807n)), 9223372036854775807n);
  assert.equal(decode(encode(2 ** 53 - 1)), 2 ** 53 - 1);
  assert.equal(typeof decode(encode(2n ** 53n)), "bigint");
});

test("maps keep their keys as data, __proto__ included, in order", () => {
  const doc = Buffer.from("82a95f5f70726f746f5f5f01a178c0", "hex"); // {"__proto__": 1, "x": nil}
  const m = decode(doc);
  assert.equal(Object.getPrototypeOf(m), null);
  assert.deepEqual(Object.keys(m), ["__proto__", "x"]);
  assert.equal(m.__proto__, 1);
  assert.equal(hex(encode(m)), hex(doc));
  assert.equal(({}).polluted, undefined);
});

test("strings are UTF-8; lists and maps nest up to 32 levels", () => {
  assert.equal(decode(encode("héllo 🌍")), "héllo 🌍");
  let v = [];
  for (let i = 1; i < 32; i++) {
    v = [v];
  }
  assert.deepEqual(decode(encode(v)), v);
  assert.throws(() => encode([v]), /nests deeper than 32 levels/);
});

test("what cannot travel is refused with its path", () => {
  const cases = [
    [{ a: [1, () => 1] }, /the value\.a\[1\] is a function/],
    [[1, undefined], /the value\[1\] is undefined/],
    [{ n: 2n ** 64n }, /the value\.n is the bigint 18446744073709551616, outside the 64-bit range/],
    [{ d: new Date(0) }, /the value\.d is a Date/],
    [{ s: Symbol("x") }, /the value\.s is a symbol/],
    [{ big: 2 ** 60 }, /past 2\^53/],
    [{ "a b": "\ud800" }, /the value\["a b"\] is a string with a lone surrogate/],
  ];
  for (const [v, re] of cases) {
    assert.throws(() => encode(v), (e) => e instanceof ValueTypeError && re.test(e.message), String(re));
  }
  const cyclic = { a: 1 };
  cyclic.self = cyclic;
  assert.throws(() => encode(cyclic), /the value\.self refers back to itself/);
  assert.deepEqual(decode(encode({ a: 1, gone: undefined })), Object.assign(Object.create(null), { a: 1 }));
});

test("decoding refuses what no engine value is", () => {
  for (const [h, re] of [
    ["c403616263", /a bin/],
    ["d50100", /type byte 0xd5/],
    ["cfffffffffffffffff", /above the 64-bit signed range/],
    ["92", /longer than its document/],
    ["a2ff", /a string that is not UTF-8/],
    ["8101c0", /a map key that is not a string/],
    ["0102", /trailing bytes/],
  ]) {
    assert.throws(() => decode(Buffer.from(h, "hex")), (e) => e instanceof ValueDecodeError && re.test(e.message), h);
  }
});
