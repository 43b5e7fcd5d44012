# SPDX-License-Identifier: MIT
"""Fixtures for the Python SDK's tests: a fresh database (on the PostgreSQL that scripts/test
starts: CAIRN_TEST_DATABASE_URL), a real cairn-runner, and Python workers as real processes.
Without CAIRN_TEST_DATABASE_URL the tests that need them are skipped.

Env: CAIRN_TEST_DATABASE_URL, CAIRN_RUNNER, CAIRNCTL (paths of the built binaries)."""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(PKG)), "examples", "python")
sys.path.insert(0, PKG)

import cairn  # noqa: E402

BASE = os.environ.get("CAIRN_TEST_DATABASE_URL")
RUNNER = os.environ.get("CAIRN_RUNNER")
CTL = os.environ.get("CAIRNCTL")


def wait_until(cond, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Proc:
    """A child process with its output in a log file."""

    def __init__(self, name, argv, env, tmp):
        self.name = name
        self.log = os.path.join(tmp, name + ".log")
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(argv, env=env, stdout=self.f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, cwd=tmp)

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                return self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


class Cluster:
    """One test module's database, runners and workers."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.name = f"pysdk_{os.getpid()}_{random.randint(0, 99999)}"
        self.url = re.sub(r"^(postgres(?:ql)?://[^/]*/)[^?]*", lambda m: m.group(1) + self.name,
                          BASE)
        self.env = dict(os.environ, CAIRN_DATABASE_URL=self.url,
                        PYTHONPATH=os.pathsep.join([PKG, HERE, EXAMPLES]))
        self.procs = []

    def ctl(self, *args, check=True):
        r = subprocess.run([CTL, *args], env=self.env, capture_output=True, text=True,
                           timeout=120)
        if check and r.returncode != 0:
            raise AssertionError(f"cairnctl {' '.join(args)}: exit {r.returncode}: {r.stderr}")
        return r

    def runner(self, name="runner", sock=None, *extra):
        sock = sock or f"ipc://{self.tmp}/{name}.sock"
        p = Proc(name, [RUNNER, "--worker-listen", sock, "--poll-interval-ms", "100",
                        "--lock-ttl-ms", "2000", "--lock-heartbeat-ms", "400",
                        "--worker-idle-ms", "1000", "--shutdown-grace-ms", "5000", *extra],
                 self.env, self.tmp)
        self.procs.append(p)
        return sock, p

    def pyworker(self, urls, name="pyworker", slots=4, extra=(), env=None, module="pyactions"):
        p = self.pyworker_nowait(urls, name, slots, extra, env, module)
        assert wait_until(lambda: "serving" in p.text() or p.p.poll() is not None, 20), \
            f"{name} did not connect: {p.text()}"
        return p

    def pyworker_nowait(self, urls, name="pyworker", slots=4, extra=(), env=None,
                        module="pyactions"):
        urls = [urls] if isinstance(urls, str) else urls
        argv = [sys.executable, "-m", "cairn.worker", "--module", module, "--slots",
                str(slots), "--name", name, "--log-level", "info", *extra]
        for u in urls:
            argv += ["--url", u]
        p = Proc(name, argv, dict(self.env, **(env or {})), self.tmp)
        self.procs.append(p)
        return p

    def logs(self):
        return "\n".join(f"--- {p.name} ---\n{p.text()[-3000:]}" for p in self.procs)


@pytest.fixture(scope="module")
def cluster():
    if not (BASE and RUNNER and CTL):
        pytest.skip("CAIRN_TEST_DATABASE_URL, CAIRN_RUNNER and CAIRNCTL are not set "
                    "(scripts/test sets them)")
    import psycopg
    tmp = tempfile.mkdtemp(prefix="cairn-pysdk-")
    c = Cluster(tmp)
    with psycopg.connect(BASE, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {c.name}")
    try:
        c.ctl("migrate")
        for f in sorted(os.listdir(os.path.join(HERE, "workflows"))):
            c.ctl("register", os.path.join(HERE, "workflows", f))
        yield c
    finally:
        for p in c.procs:
            p.stop(signal.SIGKILL)
        with psycopg.connect(BASE, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {c.name} WITH (FORCE)")
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def client(cluster):
    with cairn.Client(cluster.url) as c:
        yield c


@pytest.fixture(autouse=True)
def own_processes(request):
    """Each test's runners and workers stop when it ends, so that the next test's instances
    run only where that test says (the database is shared by the module)."""
    if "cluster" not in request.fixturenames:
        yield
        return
    c = request.getfixturevalue("cluster")
    before = len(c.procs)
    yield
    for p in c.procs[before:]:
        p.stop(signal.SIGKILL)
