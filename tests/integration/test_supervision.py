#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite integration; the runner's half needs the database): what a supervisor sees
of cairn-worker and cairn-runner, with real processes and a fake systemd.

- NOTIFY_SOCKET: the test binds an AF_UNIX datagram socket (a path, and an abstract name) as
  systemd does for Type=notify. cairn-worker says READY=1 once it dials (no runner there), then
  STATUS=serving once a runner (silent-runner) welcomes it; SIGTERM brings STOPPING=1 and
  exit 0; without NOTIFY_SOCKET nothing changes. With the database, cairn-runner says READY=1
  once it claims and STOPPING=1 on SIGTERM, exit 0; an unopenable log file exits 2.
- --log-file and SIGHUP: the log is renamed as logrotate does, SIGHUP makes the process open a
  new file at the original path; later lines land there and the renamed file stops growing.
  SIGHUP without a log file is logged and ignored. For the worker always, for the runner with
  the database.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT SILENT_RUNNER. TAP.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

wait_until = e2e.wait_until


def check(what, ok, detail=""):
    e2e.check(what, ok, detail.replace("\n", " | "))  # one TAP line, whatever the detail
RUNNER, WORKER, CTL = e2e.RUNNER, e2e.WORKER, e2e.CTL
SILENT = sys.argv[5]


class FakeSystemd:
    """A NOTIFY_SOCKET: name is a path, or '@name' for the abstract namespace."""

    def __init__(self, name):
        self.name = name
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind("\0" + name[1:] if name.startswith("@") else name)
        self.got = []

    def wait_for(self, key, timeout=10):
        """Waits for a datagram holding the assignment key (READY=1), or a STATUS= line starting
        with key when key ends with '*'; True when one came. Every datagram received is kept
        in self.got."""
        def came():
            if key.endswith("*"):
                return any(s.startswith(key[:-1]) for s in self.status())
            return any(key in d.split("\n") for d in self.got)

        deadline = time.monotonic() + timeout
        while not came():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.s.settimeout(left)
            try:
                self.got.append(self.s.recv(4096).decode())
            except socket.timeout:
                return False
        return True

    def status(self):
        return [line for d in self.got for line in d.split("\n") if line.startswith("STATUS=")]

    def close(self):
        self.s.close()
        if not self.name.startswith("@"):
            os.unlink(self.name)


def size(path):
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return -1


def text(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def rotate_and_hup(name, proc, log):
    """logrotate's move-and-signal: rename, SIGHUP, the new file appears at log."""
    os.rename(log, log + ".1")
    proc.p.send_signal(signal.SIGHUP)
    check(f"{name}: SIGHUP reopens the log file at its path",
          wait_until("reopened", lambda: "reopened" in text(log), 10), text(log + ".1")[-500:])
    check(f"{name}: the renamed file got nothing after the SIGHUP",
          "reopened" not in text(log + ".1"))
    return size(log + ".1")


def term_into_new_log(name, proc, fake, log, old, last_word):
    """SIGTERM after rotate_and_hup: STOPPING=1, exit 0, and the last lines (last_word among
    them) in the new file while the renamed one kept its size old."""
    proc.p.send_signal(signal.SIGTERM)
    check(f"{name}: STOPPING=1 on SIGTERM", fake.wait_for("STOPPING=1"), repr(fake.got))
    try:
        rc = proc.p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    check(f"{name}: exits 0 after SIGTERM", rc == 0, f"status {rc}; {text(log)[-800:]}")
    check(f"{name}: its last lines went to the new file",
          last_word in text(log) and size(log + ".1") == old, text(log)[-800:])


def test_worker(tmp):
    fake = FakeSystemd(os.path.join(tmp, "notify.sock"))
    log = os.path.join(tmp, "worker-file.log")  # not worker.log: Proc keeps stdout there
    sock = f"ipc://{tmp}/runner.sock"
    env = dict(os.environ, NOTIFY_SOCKET=fake.name)
    w = e2e.Proc("worker", [WORKER, "--url", sock, "--log-file", log], env, tmp)
    check("worker: READY=1 while dialing a runner that is not there", fake.wait_for("READY=1"),
          repr(fake.got))
    check("worker: STATUS= says it waits for a runner",
          fake.wait_for("STATUS=waiting for a runner*", 1), repr(fake.got))
    old = rotate_and_hup("worker", w, log)
    silent = e2e.Proc("silent-runner", [SILENT, sock, "5000"], os.environ, tmp)
    check("worker: STATUS=serving once a runner welcomes it",
          fake.wait_for("STATUS=serving*", 15), repr(fake.got))
    term_into_new_log("worker", w, fake, log, old, "stopping")
    check("worker: stderr is empty with a log file (everything went to the file)",
          w.text() == "", w.text()[-500:])
    silent.p.kill()
    silent.p.wait()
    fake.close()

    # An abstract NOTIFY_SOCKET, and SIGHUP without a log file.
    fake = FakeSystemd(f"@cairn-supervision-{os.getpid()}")
    env = dict(os.environ, NOTIFY_SOCKET=fake.name)
    w = e2e.Proc("worker-abstract", [WORKER, "--url", sock], env, tmp)
    check("worker: READY=1 on an abstract NOTIFY_SOCKET", fake.wait_for("READY=1"),
          repr(fake.got))
    w.p.send_signal(signal.SIGHUP)
    check("worker: SIGHUP without a log file is logged and ignored",
          wait_until("hup logged", lambda: "no log file to reopen" in w.text(), 10) and
          w.p.poll() is None, w.text()[-500:])
    check("worker: exits 0 on SIGTERM before any runner answered", w.term() == 0,
          w.text()[-500:])
    check("worker: STOPPING=1 then too", fake.wait_for("STOPPING=1"), repr(fake.got))
    fake.close()

    # No NOTIFY_SOCKET at all: nothing changes.
    w = e2e.Proc("worker-plain", [WORKER, "--url", sock], dict(os.environ), tmp)
    check("worker: runs without NOTIFY_SOCKET",
          wait_until("waiting", lambda: "waiting for a runner" in w.text(), 10), w.text())
    check("worker: no complaint about NOTIFY_SOCKET when it is unset",
          "NOTIFY_SOCKET" not in w.text(), w.text())
    check("worker: plain exit 0 on SIGTERM", w.term() == 0, w.text()[-500:])


def test_runner(url, env, tmp):
    r = e2e.ctl(env, "migrate")
    check("migrate", r.returncode == 0, r.stderr)
    fake = FakeSystemd(os.path.join(tmp, "notify-runner.sock"))
    log = os.path.join(tmp, "runner-file.log")
    renv = dict(env, NOTIFY_SOCKET=fake.name, CAIRN_LOG_FILE=log)
    run = e2e.Proc("runner", [RUNNER, "--worker-listen", f"ipc://{tmp}/r.sock",
                              "--poll-interval-ms", "100", "--shutdown-grace-ms", "1000"],
                   renv, tmp)
    check("runner: READY=1 once it claims", fake.wait_for("READY=1", 30), repr(fake.got))
    check("runner: STATUS= says it claims", fake.wait_for("STATUS=claiming*", 1), repr(fake.got))
    check("runner: the start line is in CAIRN_LOG_FILE", "started:" in text(log), text(log))
    old = rotate_and_hup("runner", run, log)
    term_into_new_log("runner", run, fake, log, old, "stopped")
    fake.close()
    # A log file it cannot open: exit 2 with the variable named, on the original stderr.
    bad = e2e.Proc("runner-bad-log", [RUNNER], dict(env, CAIRN_LOG_FILE=f"{tmp}/no/such/dir/x"),
                   tmp)
    try:
        rc = bad.p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    check("runner: an unopenable CAIRN_LOG_FILE exits 2 naming it",
          rc == 2 and "CAIRN_LOG_FILE" in bad.text(), f"status {rc}; {bad.text()}")


def main():
    tmp = tempfile.mkdtemp(prefix="cairn-supervision-")
    try:
        test_worker(tmp)
    except Exception as ex:
        check("the worker half ran to its end", False, repr(ex))
    finally:
        for p in e2e.procs:
            if p.p.poll() is None:
                p.p.kill()
                p.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if e2e.BASE:
        return e2e.main_in_fresh_db("supervision", test_runner)
    check("runner half # SKIP CAIRN_TEST_DATABASE_URL is not set", True)
    print(f"1..{e2e.n_checks}")
    return 1 if e2e.failures else 0


if __name__ == "__main__":
    sys.exit(main())
