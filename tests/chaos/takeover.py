#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The takeover scenario (run through tests/chaos/takeover, which starts the durable PostgreSQL
this uses and stops it after): how soon a dead runner's instances run again elsewhere.

Two cairn-runners with default settings (but the lease TTL and heartbeat, when TTL_MS is set),
each with a Python worker (tests/chaos/actions/chaos_hold.py) whose slots can hold every
instance at once. N instances of tests/chaos/workflows/hold.cairn (STEPS actions in a row, each
holding its slot for HOLD_MS) are enqueued; once every one is running an action and runner A
holds at least MIN_HELD of them, runner A is killed with SIGKILL and not restarted. From the
workers' execution logs (one line per action start: time, instance key, step, attempt):

- the orphans: the instances whose latest start before the kill was on runner A's worker;
- each orphan's next action start after the kill, on runner B's worker: its wait is that start
  minus the kill. The target is p99 <= TTL + 1 s;
- every instance completes with the exact result, and nothing ran twice but the steps that
  were in flight on A at the kill (at least once allows those).

Prints one Markdown row for docs/reliability.md and exits 1 if a check fails.
Usage: takeover.py BUILD_DIR. Env: N (default 4000), MIN_HELD (default N / 4), STEPS (3),
HOLD_MS (4000), TTL_MS (default: the runner's default, 30000), HEARTBEAT_MS (TTL / 3).
"""
import collections
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402  (the suite's cluster settings, psql and process helpers)

ROOT = chaos.ROOT
N = int(os.environ.get("N", "4000"))  # two runners: runner A holds about half
MIN_HELD = int(os.environ.get("MIN_HELD", str(N // 4)))
STEPS = int(os.environ.get("STEPS", "3"))
HOLD_MS = int(os.environ.get("HOLD_MS", "4000"))
TTL_MS = int(os.environ.get("TTL_MS", "30000"))  # the runner's default (runner/engine/defaults.h)
HEARTBEAT_MS = int(os.environ.get("HEARTBEAT_MS", str(TTL_MS // 3)))
SLOTS = 4096  # a worker's most: room for every instance at once
PY = shutil.which("python3", path="/usr/bin") or "python3"  # Debian's, with python3-msgpack


class Run:
    def __init__(self, build):
        self.build = build
        self.db = f"chaos_takeover_{os.getpid()}"
        chaos.q(chaos.url_of("postgres"), f"CREATE DATABASE {self.db}")
        self.url = chaos.url_of(self.db)
        self.tmp = tempfile.mkdtemp(prefix="cairn-chaos-takeover-")
        self.env = dict(os.environ, CAIRN_DATABASE_URL=self.url,
                        PYTHONPATH=f"{ROOT}/worker-protocol/python:{ROOT}/tests/chaos/actions")
        self.procs = []
        chaos.migrate_register(build, self.env, f"{ROOT}/tests/chaos/workflows/hold.cairn")

    def runner(self, name):
        sock = f"ipc://{self.tmp}/{name}.sock"
        argv = [f"{self.build}/runner/cairn-runner", "--worker-listen", sock]
        if "TTL_MS" in os.environ:
            argv += ["--lock-ttl-ms", str(TTL_MS), "--lock-heartbeat-ms", str(HEARTBEAT_MS)]
        env = dict(self.env, CAIRN_DATABASE_URL=f"{self.url}&application_name={name}")
        p = chaos.Proc(self, name, argv, env)
        p.sock = sock
        return p

    def worker(self, name, runner):
        env = dict(self.env, CAIRN_CHAOS_LOG=os.path.join(self.tmp, name + ".exec"))
        return chaos.Proc(self, name, [PY, "-m", "cairn.worker", "--url", runner.sock,
                                       "--module", "chaos_hold", "--slots", str(SLOTS),
                                       "--name", name], env)

    def starts(self):
        """Every action start so far: (worker, wall time, key, step, attempt)."""
        out = []
        for f in sorted(os.listdir(self.tmp)):
            if f.endswith(".exec"):
                with open(os.path.join(self.tmp, f)) as fh:
                    for line in fh:
                        parts = line.split()
                        if len(parts) == 4:
                            out.append((f[:-5], float(parts[0]), parts[1], int(parts[2]),
                                        int(parts[3])))
        return out

    def close(self):
        for p in self.procs:
            if p.p.poll() is None:
                p.p.kill()
                p.p.wait()
            p.f.close()
        chaos.q(chaos.url_of("postgres"), f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        shutil.rmtree(self.tmp, ignore_errors=True)


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None


def main():
    build = sys.argv[1]
    target = TTL_MS / 1000 + 1.0
    run = Run(build)
    ok, notes = True, []
    try:
        a = run.runner("runner-a")
        run.worker("worker-a", a)
        b = run.runner("runner-b")
        run.worker("worker-b", b)
        chaos.q(run.url, "SELECT count(cairn.enqueue('hold', jsonb_build_object('key', 'k' || g,"
                         f" 'n', {STEPS}, 'ms', {HOLD_MS}))) FROM generate_series(1, {N}) g")

        def running_everywhere():
            s = run.starts()
            keys = {k for _, _, k, _, _ in s}
            on_a = {k for w, _, k, _, _ in s if w == "worker-a"}
            return len(keys) >= N and len(on_a) >= MIN_HELD
        spread = chaos.wait_for(running_everywhere, 120)
        kill_wall = time.time()
        a.signal(signal.SIGKILL)
        def all_completed():
            return int(chaos.q(run.url, "SELECT count(*) FROM cairn.runner_instances"
                                        " WHERE status = 'completed'")) >= N
        done = chaos.wait_for(all_completed, TTL_MS / 1000 + STEPS * HOLD_MS / 1000 + 120)
        lost, wrong = (int(x) for x in chaos.q(
            run.url, "SELECT count(*) FILTER (WHERE status <> 'completed'), count(*) FILTER"
                     f" (WHERE status = 'completed' AND result <> '{STEPS * (STEPS - 1) // 2}'"
                     "::jsonb) FROM cairn.runner_instances").split("|"))
        starts = run.starts()
        last_before = {}
        for w, at, key, step, _ in starts:
            if at < kill_wall and (key not in last_before or at > last_before[key][1]):
                last_before[key] = (w, at, step)
        orphans = {k for k, (w, _, _) in last_before.items() if w == "worker-a"}
        after = collections.defaultdict(list)
        for w, at, key, step, _ in starts:
            if at >= kill_wall:
                after[key].append((at, w, step))
        waits = [min(after[k])[0] - kill_wall for k in orphans if after[k]]
        never = len([k for k in orphans if not after[k]])
        # At least once: a step runs again only if it was in flight at the kill on A.
        runs = collections.Counter((key, step) for _, _, key, step, _ in starts)
        dups = sum(c - 1 for c in runs.values() if c > 1)
        bad_dups = sum(c - 1 for (key, step), c in runs.items()
                       if c > 1 and not (key in orphans and last_before[key][2] == step))
        p50, p99 = percentile(waits, 0.5), percentile(waits, 0.99)
        worst = max(waits) if waits else None
        exits = [p.name for p in run.procs if p.p.poll() is not None and not p.killed]
        checks = [
            (spread, f"the load never spread: {len(orphans)} instances on A"),
            (len(orphans) >= MIN_HELD, f"A held {len(orphans)} instances, fewer than {MIN_HELD}"),
            (done and lost == 0, f"lost {lost}"),
            (wrong == 0, f"wrong {wrong}"),
            (never == 0, f"{never} orphans never ran again"),
            (bad_dups == 0, f"{bad_dups} runs again of steps that were not in flight on A"),
            (p99 is not None and p99 <= target,
             f"orphans' next actions p99 {p99} s after the kill (target {target:.0f} s)"),
            (not exits, f"unexpected exits {exits}"),
        ]
        for good, why in checks:
            if not good:
                ok = False
                notes.append(why)
        fmt = (lambda x: f"{x:.2f} s" if x is not None else "-")
        # The held-table's columns (docs/reliability.md): scenario, load, completed, leases
        # lost, time, notes.
        print(f"| takeover | {N} x {STEPS} actions of {HOLD_MS} ms on two runners, lease TTL"
              f" {TTL_MS} ms; kill -9 of runner A holding {len(orphans)} running instances,"
              f" not restarted | {N - lost} of {N} completed, {wrong} wrong | all of A's, by"
              f" design | orphans' next actions after the kill: p50 {fmt(p50)}, p99 {fmt(p99)},"
              f" max {fmt(worst)} (target p99 {target:.0f} s) | {dups} duplicate executions,"
              f" {bad_dups} of steps not in flight at the kill |"
              + ("" if ok else f" FAILED: {'; '.join(notes)}"), flush=True)
        if not ok:
            keep = tempfile.mkdtemp(prefix="cairn-chaos-failed-takeover-")
            for p in run.procs:
                p.f.flush()
            for f in os.listdir(run.tmp):
                if f.endswith((".log", ".exec")):
                    shutil.copy(os.path.join(run.tmp, f), keep)
            print(f"takeover: logs kept in {keep}", file=sys.stderr)
    finally:
        run.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
