#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarize meson test logs into one closing line.

usage: summarize.py [--label LOG NAME]... [--exit-status LOG RC]... [--check NAME RESULT]...
                    LOG...

Each LOG is a `<builddir>/meson-logs/testlog*.json` file (JSON lines, one object per test, as
written by meson 1.0: name, result, returncode, stdout, stderr, command, ...). A missing or
unreadable LOG counts as one failure (meson test died before writing it, e.g. a build error).

Counting: a test whose protocol is TAP (from <builddir>/meson-info/intro-tests.json, else a
`TAP version`/`1..N` line in its stdout) counts its top-level `ok`/`not ok` lines (`# SKIP` ->
skipped, `not ok ... # TODO` -> passed, `ok ... # TODO` -> failed, as meson does); with no such
line it counts 1 by its result, and if meson's result is a failure while no TAP line failed, 1
failure is added, so a crashed or timed-out binary is never hidden. Other tests count 1 by their
result: OK/EXPECTEDFAIL pass, SKIP skipped, anything else fails.

--exit-status LOG RC   meson test's exit status for LOG: non-zero with no failure in LOG adds one.
--check NAME RESULT    an extra check run outside meson (format check, fuzzing): OK, FAIL or
                       SKIP, counted as one test.
--label LOG NAME       name shown for LOG (default: the build directory name).

Prints per log a short report (failing tests only), then, last, exactly one line
`tests: N passed, M failed[, K skipped]`. Exits 1 if anything failed or no meson test ran.
"""

import argparse
import json
import os
import re
import sys

PASS_RESULTS = {"OK", "EXPECTEDFAIL"}
SKIP_RESULTS = {"SKIP"}
TAP_LINE = re.compile(r"^(not ok|ok)\b(.*)$")
TAP_DIRECTIVE = re.compile(r"#\s*(SKIP|TODO)\b", re.IGNORECASE)
TAP_HINT = re.compile(r"^(TAP version \d+|1\.\.\d+)", re.MULTILINE)


class Counts:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def add(self, other):
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped

    def ran(self):
        return self.passed + self.failed


def tap_protocols(log_path):
    """Maps test name -> protocol from the build dir's introspection data, if present."""
    builddir = os.path.dirname(os.path.dirname(os.path.abspath(log_path)))
    intro = os.path.join(builddir, "meson-info", "intro-tests.json")
    try:
        with open(intro, encoding="utf-8") as f:
            return {t["name"]: t.get("protocol", "exitcode") for t in json.load(f)}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def short_name(full):
    # meson 1.0 logs "project:suite1+suite2 / name".
    return full.rsplit(" / ", 1)[-1]


def count_test(entry, protocol):
    """Returns (Counts, list of failure descriptions) for one testlog entry."""
    c = Counts()
    fails = []
    name = entry.get("name", "?")
    result = str(entry.get("result", "ERROR")).upper()
    stdout = entry.get("stdout") or ""
    is_tap = protocol == "tap" or (protocol is None and TAP_HINT.search(stdout) is not None)
    meson_ok = result in PASS_RESULTS or result in SKIP_RESULTS

    tap_lines = 0
    if is_tap:
        for line in stdout.splitlines():
            m = TAP_LINE.match(line)
            if not m:
                continue
            tap_lines += 1
            ok = m.group(1) == "ok"
            d = TAP_DIRECTIVE.search(m.group(2))
            directive = d.group(1).upper() if d else None
            if directive == "SKIP":
                c.skipped += 1
            elif directive == "TODO":
                if ok:
                    c.failed += 1
                    fails.append(f"{name}: unexpected pass: {line.strip()}")
                else:
                    c.passed += 1
            elif ok:
                c.passed += 1
            else:
                c.failed += 1
                fails.append(f"{name}: {line.strip()}")

    if tap_lines == 0:
        if result in PASS_RESULTS:
            c.passed += 1
        elif result in SKIP_RESULTS:
            c.skipped += 1
        else:
            c.failed += 1
            fails.append(f"{name}: {result} (exit {entry.get('returncode')})")
    elif not meson_ok and c.failed == 0:
        c.failed += 1
        fails.append(f"{name}: {result} (exit {entry.get('returncode')}) although every TAP line passed")
    return c, fails


def summarize_log(path, label, exit_status):
    c = Counts()
    fails = []
    protocols = tap_protocols(path)
    entries = 0
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    c.failed += 1
                    fails.append(f"{path}:{lineno}: unreadable log line")
                    continue
                entries += 1
                tc, tf = count_test(entry, protocols.get(short_name(entry.get("name", ""))))
                c.add(tc)
                fails += tf
    except OSError as e:
        c.failed += 1
        fails.append(f"no test log ({e.strerror}): {path}")
    if exit_status not in (None, 0) and c.failed == 0:
        c.failed += 1
        fails.append(f"meson test exited with status {exit_status}")

    print(f"{label}: {entries} meson test(s); ok {c.passed}, failed {c.failed}, skipped {c.skipped}")
    for f in fails:
        print(f"  FAILED {f}")
    return c


def main(argv):
    p = argparse.ArgumentParser(
        description="Summarize meson testlog.json files into a closing line.")
    p.add_argument("logs", nargs="*", metavar="LOG")
    p.add_argument("--label", nargs=2, action="append", default=[], metavar=("LOG", "NAME"))
    p.add_argument("--exit-status", nargs=2, action="append", default=[], metavar=("LOG", "RC"))
    p.add_argument("--check", nargs=2, action="append", default=[], metavar=("NAME", "RESULT"))
    args = p.parse_args(argv)

    labels = {os.path.abspath(k): v for k, v in args.label}
    statuses = {}
    for log, rc in args.exit_status:
        try:
            statuses[os.path.abspath(log)] = int(rc)
        except ValueError:
            statuses[os.path.abspath(log)] = 1

    total = Counts()
    meson_ran = 0
    for log in args.logs:
        key = os.path.abspath(log)
        label = labels.get(key) or os.path.basename(os.path.dirname(os.path.dirname(key))) or log
        c = summarize_log(log, label, statuses.get(key))
        meson_ran += c.ran()
        total.add(c)

    for name, result in args.check:
        result = result.upper()
        if result in PASS_RESULTS:
            total.passed += 1
        elif result in SKIP_RESULTS:
            total.skipped += 1
            print(f"{name}: skipped")
        else:
            total.failed += 1
            print(f"{name}: FAILED")

    if meson_ran == 0:
        print("no meson test ran")
    line = f"tests: {total.passed} passed, {total.failed} failed"
    if total.skipped:
        line += f", {total.skipped} skipped"
    sys.stdout.flush()
    print(line)
    return 1 if total.failed or meson_ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
