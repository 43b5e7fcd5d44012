#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): cairn-bench runs every case end to end at a tiny size, in a fresh
database of its own, and reports in each format. Checks that every instance completed and that
the reports carry their fields; the figures themselves are not judged here (speed targets live
in bench/RESULTS.md, never in tests). Arguments: CAIRN_BENCH BUILD_DIR. TAP output."""
import csv
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys

BENCH, BUILD = sys.argv[1:3]
BASE = os.environ.get("CAIRN_TEST_DATABASE_URL", "")
PSQL = os.environ.get("PSQL") or shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"
n = 0
failures = 0


def check(what, ok, detail=""):
    global n, failures
    n += 1
    print(("ok" if ok else "not ok") + f" {n} - {what}" + ("" if ok else f": {detail}"), flush=True)
    failures += 0 if ok else 1


def q(url, sql):
    subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)


def main():
    if not BASE:
        print("1..0 # SKIP CAIRN_TEST_DATABASE_URL is not set (scripts/test sets it)")
        return 0
    name = f"bench_{os.getpid()}_{random.randint(0, 99999)}"
    url = re.sub(r"^(postgresql://[^/]*/)[^?]*", lambda m: m.group(1) + name, BASE)
    q(BASE, f"CREATE DATABASE {name}")
    try:
        sizes = {"queue-noop": ("20", "1"), "sequence": ("8", "3"), "fan-out": ("2", "30"),
                 "for-loop": ("4", "5"), "cpu": ("2", "4")}
        for case, (inst, acts) in sizes.items():
            r = subprocess.run([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case", case,
                                "--instances", inst, "--actions", acts, "--format", "json",
                                "--timeout", "60"], capture_output=True, text=True, timeout=120)
            try:
                d = json.loads(r.stdout)
            except ValueError:
                d = {}
            check(f"{case}: every instance completed", r.returncode == 0 and
                  d.get("completed") == int(inst) and d.get("failed") == 0,
                  f"exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
            check(f"{case}: the report has its figures", all(
                k in d for k in ("actions_per_second", "instances_per_second", "latency_ms",
                                 "rows_per_action", "wal_bytes_per_action",
                                 "runner_cpu_seconds_per_1000_actions", "runner_peak_rss_kb")))
        r = subprocess.run([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case", "sequence",
                            "--instances", "4", "--actions", "2", "--format", "csv",
                            "--transport", "tcp", "--runners", "2", "--workers", "1"],
                           capture_output=True, text=True, timeout=120)
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        check("csv, tcp, two runners", r.returncode == 0 and len(rows) == 1 and
              rows[0]["completed"] == "4" and rows[0]["runners"] == "2", r.stdout + r.stderr[-300:])
        r = subprocess.run([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case", "queue-noop",
                            "--instances", "5", "--format", "markdown"],
                           capture_output=True, text=True, timeout=120)
        check("markdown", r.returncode == 0 and r.stdout.startswith("| case |") and
              "| queue-noop | 5 x 1 |" in r.stdout, r.stdout)
        r = subprocess.run([BENCH, "--case", "nope"], capture_output=True, text=True)
        check("an unknown case is a usage error", r.returncode == 2)
    finally:
        q(BASE, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    print(f"1..{n}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
