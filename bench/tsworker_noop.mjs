// SPDX-License-Identifier: MIT
// The no-op actions the Node worker benchmark serves (bench/node-worker): bench.noop as an async
// function and bench.noop_sync as a plain one (both run on the event loop).
export default {
  "bench.noop": async () => null,
  "bench.noop_sync": () => null,
};
