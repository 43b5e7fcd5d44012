// SPDX-License-Identifier: MIT
// A node:test reporter that prints flat TAP (one line per test that is not a suite), which meson
// reads to count each test in scripts/test's closing line; failures carry their error as
// comments.
export default async function* tap(source) {
  let n = 0;
  for await (const ev of source) {
    if (ev.type !== "test:pass" && ev.type !== "test:fail") {
      continue;
    }
    if (ev.data.details?.type === "suite") {
      continue;
    }
    n++;
    const name = ev.data.name.replace(/#/g, "");
    const skip = ev.data.skip ? ` # SKIP ${ev.data.skip === true ? "" : ev.data.skip}` : "";
    yield `${ev.type === "test:pass" ? "ok" : "not ok"} ${n} - ${name}${skip}\n`;
    if (ev.type === "test:fail") {
      const err = ev.data.details?.error;
      const text = String(err?.cause?.stack ?? err?.cause ?? err?.stack ?? err ?? "failed");
      for (const line of text.split("\n").slice(0, 40)) {
        yield `# ${line}\n`;
      }
    }
  }
  yield `1..${n}\n`;
}
