#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): cairn-bench runs every case end to end at a tiny size, in a fresh
database of its own, and reports in each format. Checks that every instance completed and that
the reports carry their fields; the figures themselves are not judged here (speed targets live
in bench/RESULTS.md, never in tests); and the scripts beside it (compare-builds, results-insert,
enqueue) at tiny sizes. Arguments: CAIRN_BENCH BUILD_DIR. TAP output."""
import csv
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BENCH, BUILD = sys.argv[1:3]
BASE = os.environ.get("CAIRN_TEST_DATABASE_URL", "")
PSQL = os.environ.get("PSQL") or shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
n = 0
failures = 0


def check(what, ok, detail=""):
    global n, failures
    n += 1
    print(("ok" if ok else "not ok") + f" {n} - {what}" + ("" if ok else f": {detail}"), flush=True)
    failures += 0 if ok else 1


def report(r):
    """The JSON report of a finished cairn-bench run, or {} when it printed none."""
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {}


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
            d = report(r)
            check(f"{case}: every instance completed", r.returncode == 0 and
                  d.get("completed") == int(inst) and d.get("failed") == 0,
                  f"exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
            check(f"{case}: the report has its figures", all(
                k in d for k in ("actions_per_second", "instances_per_second", "latency_ms",
                                 "rows_per_action", "wal_bytes_per_action",
                                 "runner_cpu_seconds_per_1000_actions", "runner_peak_rss_kb")))
            # Two workers of 16 slots and 16 prefetch: a dispatch carries 1 to 32 attempts.
            per = d.get("attempts_per_dispatch_message", 0)
            check(f"{case}: attempts per dispatch message between 1 and a worker's room (32)",
                  1 <= per <= 32, str(per))
            dd = d.get("dispatch_delay_ms", {})
            check(f"{case}: ready-to-dispatch latency covers every action, quantiles in order",
                  dd.get("count") == int(inst) * (1 if case == "queue-noop" else int(acts)) and
                  0 <= dd.get("p50", -1) <= dd.get("p95", -1) <= dd.get("p99", -1) <=
                  dd.get("max", -1), str(dd))

        # mixed: the plan is (seed * 7919 + i * 729) % 1000 against the per-mille rates; a flaky
        # step takes two attempts (fails once, retried), a timeout step two (times out, retried
        # once, times out, caught), a durable sleep none, a noop one.
        inst, acts, fail, tmo, nap = 12, 20, 100, 50, 100
        want = 0
        for seed in range(1, inst + 1):
            for i in range(acts):
                k = (seed * 7919 + i * 729) % 1000
                want += 2 if k < fail + tmo else 0 if k < fail + tmo + nap else 1
        r = subprocess.run([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case", "mixed",
                            "--instances", str(inst), "--actions", str(acts), "--fail-rate",
                            str(fail / 1000), "--timeout-rate", str(tmo / 1000), "--sleep-rate",
                            str(nap / 1000), "--format", "json", "--timeout", "60"],
                           capture_output=True, text=True, timeout=120)
        d = report(r)
        check("mixed: every instance completed through retries, timeouts and sleeps",
              r.returncode == 0 and d.get("completed") == inst and d.get("failed") == 0,
              f"exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
        check(f"mixed: {want} dispatches, retries included",
              d.get("dispatch_delay_ms", {}).get("count") == want, str(d.get("dispatch_delay_ms")))

        # --rate spreads the enqueue over the run; --plot draws it.
        with tempfile.TemporaryDirectory() as tmp:
            svg = os.path.join(tmp, "run.svg")
            r = subprocess.run([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case",
                                "sequence", "--instances", "10", "--actions", "2", "--rate", "40",
                                "--format", "json", "--plot", svg],
                               capture_output=True, text=True, timeout=120)
            d = report(r)
            check("--rate 40: every instance completed, the drain lasts the schedule (>= 9/40 s)",
                  r.returncode == 0 and d.get("completed") == 10 and d.get("rate") == 40 and
                  d.get("drain_seconds", 0) >= 9 / 40, r.stdout + r.stderr[-300:])
            body = open(svg).read() if os.path.exists(svg) else ""
            check("--plot writes an SVG of throughput over time",
                  body.lstrip().startswith("<?xml") and "<svg" in body and
                  "worker outcomes/s" in body, body[:200])
        r = subprocess.run([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case", "sequence",
                            "--instances", "4", "--actions", "2", "--format", "csv",
                            "--transport", "tcp", "--runners", "2", "--workers", "1"],
                           capture_output=True, text=True, timeout=120)
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        check("csv, tcp, two runners", r.returncode == 0 and len(rows) == 1 and
              rows[0]["completed"] == "4" and rows[0]["runners"] == "2", r.stdout + r.stderr[-300:])
        r = subprocess.run([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case", "sequence",
                            "--instances", "6", "--actions", "2", "--format", "json", "--runners",
                            "2", "--shared-workers", "1"], capture_output=True, text=True,
                           timeout=120)
        d = report(r)
        check("--shared-workers: one worker serving two runners runs every instance",
              r.returncode == 0 and d.get("completed") == 6 and d.get("runners") == 2 and
              d.get("shared_workers") == 1, r.stdout + r.stderr[-300:])
        r = subprocess.run([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case", "queue-noop",
                            "--instances", "5", "--format", "markdown"],
                           capture_output=True, text=True, timeout=120)
        check("markdown", r.returncode == 0 and r.stdout.startswith("| case |") and
              "| queue-noop | 5 x 1 |" in r.stdout, r.stdout)
        # Ctrl-C: the fleet stops, the rest of the run is cancelled, nothing stays queued.
        # (every step of these instances is a durable 20 ms sleep: about 40 are in flight)
        proc = subprocess.Popen([BENCH, "--database-url", url, "--bin-dir", BUILD, "--case",
                                 "mixed", "--instances", "3000", "--rate", "100", "--fail-rate",
                                 "0", "--timeout-rate", "0", "--sleep-rate", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        left = subprocess.run([PSQL, "-X", "-A", "-t", "-d", url, "-c",
                               "SELECT count(*) FROM cairn.queued_instances"],
                              capture_output=True, text=True).stdout.strip()
        check("interrupted: exit 130, the unfinished instances are cancelled, none left queued",
              proc.returncode == 130 and re.search(r"[1-9][0-9]* unfinished instance", err) and
              left == "0", f"exit {proc.returncode}, queued {left}: {err[-300:]}")

        r = subprocess.run([BENCH, "--case", "nope"], capture_output=True, text=True)
        check("an unknown case is a usage error", r.returncode == 2)
        r = subprocess.run([BENCH, "--case", "mixed", "--fail-rate", "0.6", "--sleep-rate", "0.6"],
                           capture_output=True, text=True)
        check("rates over 1 in all are a usage error", r.returncode == 2 and "<= 1" in r.stderr,
              r.stderr)

        # Without a URL it starts a durable throwaway cluster of its own and removes it after.
        env = {k: v for k, v in os.environ.items() if k != "CAIRN_DATABASE_URL"}
        before = {e for e in os.listdir("/tmp") if e.startswith("cairn-bench-pg.")}
        r = subprocess.run([BENCH, "--bin-dir", BUILD, "--case", "queue-noop", "--instances",
                            "5", "--format", "json"], capture_output=True, text=True, timeout=180,
                           env=env)
        d = report(r)
        after = {e for e in os.listdir("/tmp") if e.startswith("cairn-bench-pg.")}
        check("no URL: a throwaway cluster runs the case and is removed",
              r.returncode == 0 and d.get("completed") == 5 and
              "starting a durable throwaway PostgreSQL" in r.stderr and after == before,
              f"exit {r.returncode} {r.stderr[-400:]} left: {after - before}")

        # bench/compare-builds: two builds (here the same one twice) interleaved on a throwaway
        # cluster of its own, a table per case with each build's runs and its ratio.
        script = os.path.join(SCRIPTS, "compare-builds")
        r = subprocess.run([script, "--rounds", "2", "--case",
                            "CAIRN_MAX_INSTANCES=3 --case sequence --instances 6 --actions 2",
                            f"one={BUILD}", f"two={BUILD}"],
                           capture_output=True, text=True, timeout=240, env=env)
        rows = [line for line in r.stdout.splitlines() if line.startswith(("| one |", "| two |"))]
        check("compare-builds: both builds' two runs, the first build's ratio 1.00x",
              r.returncode == 0 and
              "`CAIRN_MAX_INSTANCES=3 cairn-bench --case sequence --instances 6 --actions 2`"
              in r.stdout and len(rows) == 2 and rows[0].count(" / ") >= 2 and
              "| 1.00x |" in rows[0], r.stdout[-600:] + r.stderr[-600:])
        r = subprocess.run([script, f"one={BUILD}/nothing-here"], capture_output=True, text=True,
                           timeout=30, env=env)
        check("compare-builds: a directory without the binaries is refused before anything runs",
              r.returncode == 2 and "missing" in r.stderr, r.stderr)

        # bench/results-insert: every shape inserts every row (it exits 1 otherwise), one row of
        # the table each, on a throwaway cluster of its own.
        script = os.path.join(SCRIPTS, "results-insert")
        r = subprocess.run([script, "--results", "900", "--batch", "200", "--per-write", "30",
                            "--rounds", "1"], capture_output=True, text=True, timeout=180, env=env)
        rows = [line.split(" | ")[0] for line in r.stdout.splitlines() if line.startswith("| ")]
        check("results-insert: each shape inserted every result, one table row each",
              r.returncode == 0 and
              rows[1:] == ["| two-indexes", "| key", "| key-on-conflict", "| grouped"],
              r.stdout[-600:] + r.stderr[-600:])

        # bench/enqueue: every case on a throwaway cluster of its own, twice over with
        # --schema-from (this tree's schema against itself: ratios near 1), and its JSON.
        script = os.path.join(SCRIPTS, "enqueue")
        out_json = os.path.join(tempfile.gettempdir(), f"cairn-enqueue-{os.getpid()}.json")
        r = subprocess.run([script, "--build", BUILD, "--instances", "300", "--rounds", "1",
                            "--seconds", "1", "--schema-from", os.path.join(SCRIPTS, ".."),
                            "--json-out", out_json],
                           capture_output=True, text=True, timeout=240, env=env)
        rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and "x |" in line]
        try:
            with open(out_json) as f:
                doc = json.load(f)
            os.unlink(out_json)
        except (OSError, ValueError):
            doc = {}
        check("enqueue: every case on both schemas, with a ratio, and the medians as JSON",
              r.returncode == 0 and len(rows) == 10 and doc.get("batch_per_s", 0) > 0 and
              doc.get("single_p50_ms", 0) > 0 and doc.get("floor_p50_ms", 0) > 0,
              r.stdout[-800:] + r.stderr[-600:])
    finally:
        q(BASE, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    print(f"1..{n}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
