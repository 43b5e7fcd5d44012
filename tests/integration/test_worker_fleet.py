#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): one worker process serving two runners, with real runners, a real
cairn-worker and the real PostgreSQL that scripts/test starts (a fresh database of its own,
dropped at the end). The worker has 4 slots and dials both runners (CAIRN_WORKER_URL with two
addresses); its exec.span action logs when each run starts and ends, so the test sees how many
ran at once.

- runner B is not up yet: runner A gets all 4 slots, and the worker waits for B quietly;
- B comes up: the worker greets it, both runners' work runs on the one set of slots (never more
  than 4 at once, and 4 reached), and each runner gets a share of them (at least a fifth of
  the attempts each) while both have work (each runner holds at most 6 instances,
  --max-instances, so that both have some: a runner's backlog is at least 256 attempts, and the
  first to claim would otherwise hold all 60);
- kill -9 of runner A with work in flight: the worker keeps serving B, which takes over A's
  instances; every instance completes, and B gets all 4 slots;
- SIGTERM: the worker says goodbye and exits 0; `--url` given twice the same is refused.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until
free_port, metrics = e2e.free_port, e2e.metrics

SLOTS = 4


def spans(path):
    """{key: (start, end)} from the worker's span log (end None while running)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3:
                continue
            what, at, key = parts[0], float(parts[1]), parts[2]
            s, e = out.get(key, (None, None))
            out[key] = (at, e) if what == "start" else (s, at)
    return out


def peak(sp, keys, since=0.0):
    """Most runs of keys at once on the worker, counting only moments after `since`."""
    events = []
    for k in keys:
        s, e = sp.get(k, (None, None))
        if s is None:
            continue
        e = e if e is not None else float("inf")
        if e <= since:
            continue
        events.append((max(s, since), 1))
        events.append((e, -1))
    best = cur = 0
    for _, d in sorted(events, key=lambda x: (x[0], x[1])):
        cur += d
        best = max(best, cur)
    return best


def enqueue(url, prefix, n, ms):
    q(url, f"SELECT count(cairn.enqueue('span', jsonb_build_object('key', '{prefix}' || g, "
           f"'ms', {ms}))) FROM generate_series(1, {n}) g")
    return [f"{prefix}{i}" for i in range(1, n + 1)]


def completed(url, prefix):
    return int(q(url, "SELECT count(*) FROM cairn.runner_instances WHERE status = 'completed'"
                      f" AND input->>'key' LIKE '{prefix}%'"))


def sample(port, name):
    """A runner's metric, or -1 while its HTTP listener is not up yet."""
    try:
        return metrics(port).get(name, 0.0)
    except OSError:
        return -1.0


def results(port):
    return sample(port, "cairn_pool_results_total")


def run_all(url, env, tmp):
    for args in (["migrate"], ["register", os.path.join(e2e.ROOT, "tests/integration/workflows/span.cairn")]):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)
    sock_a, sock_b = f"ipc://{tmp}/a.sock", f"ipc://{tmp}/b.sock"
    port_a, port_b = free_port(), free_port()
    log = os.path.join(tmp, "spans.log")
    wenv = dict(env, CAIRN_TEST_SPANS=log, CAIRN_WORKER_URL=f"{sock_a} {sock_b}")

    r = subprocess.run([e2e.WORKER, "--url", sock_a, "--url", sock_a], env=wenv,
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    check("the same runner given twice is refused (exit 2)", r.returncode == 2
          and "given twice" in r.stderr, f"exit {r.returncode}: {r.stderr.strip()}")

    a = e2e.runner(env, tmp, "runner-a", sock_a, "--http-listen", f"127.0.0.1:{port_a}",
                   "--max-instances", "6")
    w = e2e.Proc("worker", [e2e.WORKER, "--slots", str(SLOTS), "--name", "fleet", "--exec-dir",
                            os.path.join(e2e.ROOT, "tests/integration/fleet")], wenv, tmp)

    # ---- one runner up of two ----------------------------------------------------------------
    keys1 = enqueue(url, "one-", 12, 400)
    check("with runner B not up, A's 12 instances complete",
          wait_until("fleet", lambda: completed(url, "one-") == 12, 60))
    sp = spans(log)
    check(f"A alone gets all {SLOTS} slots (peak {peak(sp, keys1)})", peak(sp, keys1) == SLOTS)
    check("the worker says it serves both addresses",
          "serving" in w.text() and sock_b in w.text(), w.text()[-300:])

    # ---- a second runner comes up --------------------------------------------------------------
    b = e2e.runner(env, tmp, "runner-b", sock_b, "--http-listen", f"127.0.0.1:{port_b}",
                   "--max-instances", "6")
    check("runner B sees the worker", wait_until(
        "fleet", lambda: sample(port_b, "cairn_workers") == 1, 30))
    res_a, res_b = results(port_a), results(port_b)
    keys2 = enqueue(url, "two-", 60, 300)
    check("both runners' 60 instances complete",
          wait_until("fleet", lambda: completed(url, "two-") == 60, 120))
    da, db = results(port_a) - res_a, results(port_b) - res_b
    sp = spans(log)
    p2 = peak(sp, keys2)
    check(f"one set of slots for both runners: at most {SLOTS} at once, and reached (peak {p2})",
          p2 == SLOTS)
    check(f"each runner got a share of the slots (A {da:.0f}, B {db:.0f} of 60 attempts)",
          da >= 12 and db >= 12 and da + db == 60)

    # ---- one runner dies -------------------------------------------------------------------------
    keys3 = enqueue(url, "three-", 24, 300)
    check("work is running when A is killed", wait_until(
        "fleet", lambda: len([k for k in keys3 if k in spans(log)]) >= SLOTS, 30))
    a.kill9()
    killed = time.time()
    check("every instance completes after A's kill -9 (B takes A's over)",
          wait_until("fleet", lambda: completed(url, "three-") == 24, 120))
    check("no attempt ran twice in the same instance", q(
        url, "SELECT count(*) FROM (SELECT 1 FROM cairn.runner_actions_done GROUP BY "
             "execution_id, attempt HAVING count(*) > 1) d") == "0")
    sp = spans(log)
    p3 = peak(sp, keys3, since=killed + 0.5)
    check(f"after A's death B gets all {SLOTS} slots (peak {p3})", p3 == SLOTS)
    check("the worker is still serving", w.p.poll() is None)

    rc = w.term(30)
    check("SIGTERM: the worker exits 0", rc == 0, f"exit {rc}")
    b.term(30)


def main():
    return e2e.main_in_fresh_db("fleet", run_all)


if __name__ == "__main__":
    sys.exit(main())
