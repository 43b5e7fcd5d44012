#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The chaos suite's scenario runner and invariant checker (run through tests/chaos/run, which
starts the durable PostgreSQL this uses and stops it after).

Every scenario runs real processes: two cairn-runners, each with a cairn-worker whose only
action (tests/chaos/exec/work) logs every real execution to the worker's own file. It enqueues
N instances of tests/chaos/workflows/chaos.cairn (a spread of K actions whose result is the
sum 0 + ... + K-1), fires its fault once a quarter of them have completed, waits for all of
them, then checks:

- lost: instances not completed; wrong: completed with a result other than the exact sum;
- executions, from the workers' logs: every action ran at least once, none ran for an instance
  that was never enqueued, and every duplicate (a run beyond the first) is of an attempt that
  had started before the fault was over: at-least-once allows running again what was in flight
  (running, or finished with its result not yet committed), never what started afterwards.
  The runs after the fault that repeat an attempt are reported as "after the fault" and must be
  0 (for SIGSTOP: what the resumed runner started again after SIGCONT);
- no runner exited that the scenario did not kill;
- the fault fired while work was in progress (between 5% and 95% completed), else the run is
  invalid, not green.

Prints one Markdown row per scenario (docs/reliability.md) and exits 1 if any check fails.
Usage: chaos.py BUILD_DIR [--instances N] [--spread K] [SCENARIO...]
"""
import argparse
import collections
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Set by tests/chaos/run; other scenario scripts import this module with their own database.
PG_BIN = os.environ.get("CHAOS_PG_BIN", "")
PG_DIR = os.environ.get("CHAOS_PG_DIR", "")
PG_PORT = os.environ.get("CHAOS_PG_PORT", "")
PG_OPTS = os.environ.get("CHAOS_PG_OPTS", "")
SLOTS = 16
TTL_MS = 2000


def url_of(db):
    return f"postgresql://postgres@/{db}?host={PG_DIR}&port={PG_PORT}"


def q(url, sql):
    out = subprocess.run([f"{PG_BIN}/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                          "-d", url, "-c", sql], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"psql: {out.stderr.strip()}")
    return out.stdout.strip()


def as_owner(*argv):
    if os.getuid() == 0:
        argv = ("runuser", "-u", "postgres", "--") + argv
    return subprocess.run(argv, capture_output=True, text=True)


class Proc:
    def __init__(self, run, name, argv, env):
        self.name = name
        self.log = os.path.join(run.tmp, name + ".log")
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(argv, env=env, stdout=self.f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        self.killed = False
        run.procs.append(self)

    def signal(self, sig):
        self.killed = self.killed or sig == signal.SIGKILL
        self.p.send_signal(sig)
        if sig == signal.SIGKILL:
            self.p.wait()


class Run:
    def __init__(self, build, name, n, k):
        self.build, self.name, self.n, self.k = build, name, n, k
        self.db = f"chaos_{name.replace('-', '_')}_{os.getpid()}"
        q(url_of("postgres"), f"CREATE DATABASE {self.db}")
        self.url = url_of(self.db)
        self.env = dict(os.environ, CAIRN_DATABASE_URL=self.url, CAIRN_CHAOS_WORK_S="0.05")
        self.tmp = tempfile.mkdtemp(prefix=f"cairn-chaos-{name}-")
        self.procs = []
        ctl = f"{build}/runner/cairnctl"
        for args in (["migrate"], ["register", f"{ROOT}/tests/chaos/workflows/chaos.cairn"]):
            r = subprocess.run([ctl, *args], env=self.env, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"cairnctl {args[0]}: {r.stderr}")

    def runner(self, name, sock=None):
        sock = sock or f"ipc://{self.tmp}/{name}.sock"
        p = Proc(self, name, [f"{self.build}/runner/cairn-runner", "--worker-listen", sock,
                              "--poll-interval-ms", "100", "--lock-ttl-ms", str(TTL_MS),
                              "--lock-heartbeat-ms", "500", "--reclaim-interval-ms", "500",
                              "--worker-idle-ms", "1000"], self.env)
        p.sock = sock
        return p

    def worker(self, name, runner):
        env = dict(self.env, CAIRN_CHAOS_LOG=os.path.join(self.tmp, name + ".exec"))
        return Proc(self, name, [f"{self.build}/worker-protocol/cairn-worker", "--url",
                                 runner.sock, "--slots", str(SLOTS), "--exec-dir",
                                 f"{ROOT}/tests/chaos/exec"], env)

    def enqueue(self):
        q(self.url, f"SELECT count(cairn.enqueue('chaos', jsonb_build_object('key', 'k' || g,"
                    f" 'n', {self.k}))) FROM generate_series(1, {self.n}) g")

    def completed(self):
        return int(q(self.url, "SELECT count(*) FROM cairn.runner_instances WHERE status = "
                               "'completed'"))

    def wait(self, cond, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(0.1)
        return cond()

    def exec_lines(self):
        """Lines in each worker's execution log now: {worker: count}."""
        out = {}
        for f in os.listdir(self.tmp):
            if f.endswith(".exec"):
                with open(os.path.join(self.tmp, f)) as fh:
                    out[f[:-5]] = sum(1 for _ in fh)
        return out

    def executions(self):
        """(key, i) -> its runs, each (worker, line number in that worker's log)."""
        where = collections.defaultdict(list)
        for f in sorted(os.listdir(self.tmp)):
            if f.endswith(".exec"):
                with open(os.path.join(self.tmp, f)) as fh:
                    for n, line in enumerate(fh):
                        try:
                            kw = json.loads(line)
                            k = (kw["key"], kw["i"])
                        except (ValueError, KeyError):
                            k = ("?", line.strip())
                        where[k].append((f[:-5], n))
        return where

    def close(self):
        for p in self.procs:
            if p.p.poll() is None:
                p.p.send_signal(signal.SIGCONT)
                p.p.kill()
                p.p.wait()
            p.f.close()
        q(url_of("postgres"), f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        shutil.rmtree(self.tmp, ignore_errors=True)


def pg_restart(mode="fast", down_s=0.0):
    r = as_owner(f"{PG_BIN}/pg_ctl", "-D", f"{PG_DIR}/data", "-m", mode, "-w", "stop")
    if r.returncode != 0:
        raise RuntimeError(f"pg_ctl stop: {r.stderr}")
    time.sleep(down_s)
    r = as_owner(f"{PG_BIN}/pg_ctl", "-D", f"{PG_DIR}/data", "-l", f"{PG_DIR}/server.log",
                 "-w", "-o", PG_OPTS, "start")
    if r.returncode != 0:
        raise RuntimeError(f"pg_ctl start: {r.stderr}")


# Each scenario gets the run and its two runner/worker pairs, fires its fault, returns once the
# fault is over (the process resumed or restarted, the database back), and says what it did.
def runner_kill9(run, a, wa, b, wb):
    a.signal(signal.SIGKILL)
    time.sleep(1)
    run.runner("runner-a2", a.sock)  # restarted on the same socket; its worker reconnects
    return "kill -9 of runner A, restarted after 1 s"


def worker_kill9(run, a, wa, b, wb):
    wa.signal(signal.SIGKILL)
    run.worker("worker-a2", a)
    return "kill -9 of runner A's worker, a new one started"


def sigstop(run, a, wa, b, wb):
    a.signal(signal.SIGSTOP)
    time.sleep(TTL_MS / 1000 + 1.5)
    a.signal(signal.SIGCONT)
    return "SIGSTOP of runner A for TTL + 1.5 s, then SIGCONT"


def pg_restart_fast(run, a, wa, b, wb):
    pg_restart()
    return "PostgreSQL restarted (fast shutdown)"


def pg_restart_immediate(run, a, wa, b, wb):
    pg_restart("immediate")  # a crash: no checkpoint, WAL replay at start
    return "PostgreSQL stopped immediately (crash) and started"


def pg_down(run, a, wa, b, wb):
    pg_restart("fast", 8.0)
    return "PostgreSQL down for 8 s"


def pg_terminate(run, a, wa, b, wb):
    n = q(url_of("postgres"), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                              f" WHERE datname = '{run.db}' AND pid <> pg_backend_pid()")
    return f"pg_terminate_backend of the runners' {n} sessions"


SCENARIOS = {
    "runner-kill9": runner_kill9,
    "worker-kill9": worker_kill9,
    "sigstop": sigstop,
    "pg-restart": pg_restart_fast,
    "pg-crash": pg_restart_immediate,
    "pg-down": pg_down,
    "pg-terminate": pg_terminate,
}


def run_scenario(build, name, n, k):
    run = Run(build, name, n, k)
    ok, notes = True, []
    try:
        a = run.runner("runner-a")
        wa = run.worker("worker-a", a)
        b = run.runner("runner-b")
        wb = run.worker("worker-b", b)
        t0 = time.monotonic()
        run.enqueue()
        run.wait(lambda: run.completed() >= n // 4, 120)
        at_fault = run.completed()
        fired = 0.05 * n <= at_fault <= 0.95 * n
        t_fault = time.monotonic()
        what = SCENARIOS[name](run, a, wa, b, wb)
        over = run.exec_lines()  # the fault is over: what starts from here is new work
        done = run.wait(lambda: run.completed() >= n, 180)
        t_end = time.monotonic()
        results = q(run.url, "SELECT count(*) FILTER (WHERE status <> 'completed'), count(*) "
                             f"FILTER (WHERE status = 'completed' AND result <> "
                             f"'{k * (k - 1) // 2}'::jsonb) FROM cairn.runner_instances")
        lost, wrong = (int(x) for x in results.split("|"))
        where = run.executions()
        keys = {f"k{i}" for i in range(1, n + 1)}
        missing = sum(1 for key in keys for i in range(k) if not where.get((key, i)))
        unexpected = sum(len(r) for (key, _), r in where.items() if key not in keys)
        dups = sum(len(r) - 1 for r in where.values() if len(r) > 1)
        # A repeated attempt none of whose runs started before the fault was over.
        after = sum(len(r) - 1 for r in where.values()
                    if len(r) > 1 and all(line >= over.get(w, 0) for w, line in r))
        exits = [p.name for p in run.procs if p.p.poll() is not None and not p.killed]
        checks = [
            (fired, f"fault fired at {at_fault}/{n} completed"),
            (done and lost == 0, f"lost {lost}"),
            (wrong == 0, f"wrong {wrong}"),
            (missing == 0, f"actions never run {missing}"),
            (unexpected == 0, f"unexpected executions {unexpected}"),
            (after == 0, f"{after} duplicate runs of attempts started after the fault, by: " +
             str(collections.Counter(" + ".join(w for w, _ in r) for r in where.values()
                                     if len(r) > 1))),
            (not exits, f"unexpected exits {exits}"),
        ]
        for good, why in checks:
            if not good:
                ok = False
                notes.append(why)
        print(f"| {name} | {n} x {k} | {what} (at {at_fault}/{n} done) | {lost} | {wrong} | "
              f"{dups} ({after} after the fault) | {t_end - t_fault:.1f} s after the fault, "
              f"{t_end - t0:.1f} s in all | {', '.join(exits) or 'none'} |"
              + ("" if ok else f" FAILED: {'; '.join(notes)}"), flush=True)
        if not ok:
            for p in run.procs:
                p.f.flush()
            keep = tempfile.mkdtemp(prefix=f"cairn-chaos-failed-{name}-")
            for f in os.listdir(run.tmp):
                if f.endswith((".log", ".exec")):  # not the sockets
                    shutil.copy(os.path.join(run.tmp, f), keep)
            print(f"chaos: {name}: logs kept in {keep}", file=sys.stderr)
    finally:
        run.close()
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--instances", type=int, default=500)
    ap.add_argument("--spread", type=int, default=4)
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    args = ap.parse_intermixed_args()
    for s in args.scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s} (known: {', '.join(SCENARIOS)})")
    print("| scenario | instances x actions | fault | lost | wrong | duplicate executions "
          "(of them, after the fault) | recovery | unexpected runner exits |")
    print("|---|---|---|---|---|---|---|---|")
    ok = all([run_scenario(args.build, s, args.instances, args.spread) for s in args.scenarios])
    return 0 if ok else 1


if __name__ == "__main__":
    random.seed(1)
    sys.exit(main())
