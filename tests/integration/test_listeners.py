#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): what the runner's listeners bound, against a real cairn-runner, a real
cairn-worker and the real PostgreSQL that scripts/test starts (a database of its own).

HTTP (runner/ops/http.h), with a cap of 32 connections and 1 s timeouts:
- 200 connections that each send half a request: a /healthz asked meanwhile is answered at
  once (the oldest waiting connections make room for new ones), and every one of the 200 is
  closed within the header timeout (plus a second of slack);
- a client trickling its request head a byte every 100 ms is cut at the header timeout, not
  kept alive by its bytes; a kept-alive connection left idle is closed after the idle timeout;
- a head over 32 KiB is refused (431, or 414 for the line), a declared body over 64 KiB with
  413, POST with 405 and an Allow header, an unknown path with 404; HEAD answers with no body;
- the series on /metrics count what was done (evicted, header timeouts, connections).

The descriptor budget (runner/pool/fdbudget.h), on a runner whose open-file limit is 256:
- 300 half HTTP requests and 300 worker connections that never send the transport handshake,
  held open, never take the runner past its budget (the listeners' use on /metrics stays within
  cairn_fd_budget and the 16 that may be closing to make room, at most 128 wait for hello, its
  descriptors stay under the limit); its database sessions are terminated meanwhile, and an
  instance enqueued then completes on a worker that connected during the flood: the runner
  reconnected with the descriptors it kept for itself; /healthz is answered; every silent
  worker connection is dropped within the hello timeout of its accept.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import os
import re
import resource
import socket
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until


def raw(port, data, timeout=5):
    """Sends data on a new connection; returns the status line of the answer (b'' if closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        return buf.split(b"\r\n")[0]


def half_requests(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\n")  # and nothing more
        s.setblocking(False)
        socks.append(s)
    return socks


def closed(s):
    """Whether the peer closed s (what it sent before, such as the runner's SP header, is
    read and dropped)."""
    try:
        while True:
            if s.recv(4096) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def timed_get(port, path, timeout=5):
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as f:
            return f.status, time.monotonic() - t0
    except Exception as ex:  # the check reports it
        return repr(ex), time.monotonic() - t0


def http_bounds(url, env, tmp):
    port = e2e.free_port()
    sock = f"ipc://{tmp}/w.sock"
    r = e2e.runner(env, tmp, "runner-http", sock, "--http-listen", f"127.0.0.1:{port}",
                   "--http-max-connections", "32", "--http-header-timeout-ms", "1000",
                   "--http-idle-timeout-ms", "1000")
    e2e.worker(env, tmp, "worker-http", sock, slots="4")
    up = wait_until("http up", lambda: timed_get(port, "/healthz")[0] == 200, 20)
    check("http: /healthz answers", up)

    socks = half_requests(port, 200)
    t0 = time.monotonic()
    answers = [timed_get(port, "/healthz", timeout=2) for _ in range(5)]
    check("http: /healthz is answered at once while 200 half requests are open",
          all(st == 200 and took < 1.0 for st, took in answers), f"{answers}")
    m = e2e.metrics(port)
    check("http: at most the cap (32) and a few closing are open",
          m.get("cairn_http_connections", 999) <= 32 + 16, f"{m.get('cairn_http_connections')}")
    check("http: the oldest waiting connections made room (cairn_http_evicted_total)",
          m.get("cairn_http_evicted_total", 0) >= 200 - 32 - 16,
          f"{m.get('cairn_http_evicted_total')}")
    all_closed = wait_until("half requests closed", lambda: all(closed(s) for s in socks), 3)
    took = time.monotonic() - t0
    check("http: every half request is closed within the header timeout (1 s) plus 1 s",
          all_closed and took <= 2.5,
          f"{sum(1 for s in socks if not closed(s))} open after {took:.1f} s")
    for s in socks:
        s.close()
    m = e2e.metrics(port)
    check("http: header timeouts are counted", m.get("cairn_http_header_timeouts_total", 0) >= 1,
          f"{m.get('cairn_http_header_timeouts_total')}")

    # A trickle: one byte every 100 ms of a head that would take 6 s.
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 40 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        t0 = time.monotonic()
        cut = None
        for ch in head:
            try:
                s.sendall(bytes([ch]))
                s.settimeout(0.1)
                if s.recv(4096) == b"":
                    cut = time.monotonic() - t0
                    break
            except socket.timeout:
                continue
            except OSError:
                cut = time.monotonic() - t0
                break
        check("http: a trickled request head is cut at the header timeout",
              cut is not None and 0.8 <= cut <= 2.0, f"cut after {cut}")

    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = s.recv(4096)
        t0 = time.monotonic()
        s.settimeout(5)
        rest = s.recv(4096)
        idle = time.monotonic() - t0
        check("http: a kept-alive connection answered, then closed after the idle timeout",
              first.startswith(b"HTTP/1.1 200") and rest == b"" and 0.8 <= idle <= 2.5,
              f"{first[:20]!r}, closed after {idle:.1f} s")

    check("http: a head over 32 KiB is refused (431)",
          raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 33000
              + b"\r\n\r\n").startswith(b"HTTP/1.1 431"))
    check("http: a request line over 32 KiB is refused (414)",
          raw(port, b"GET /" + b"a" * 33000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
          .startswith(b"HTTP/1.1 414"))
    check("http: a head of 20 KiB is served",
          raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: " + b"a" * 20000 + b"\r\n\r\n")
          .startswith(b"HTTP/1.1 200"))
    check("http: a declared body over 64 KiB is refused (413)",
          raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
          .startswith(b"HTTP/1.1 413"))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        ans = s.recv(4096)
        check("http: POST is refused with 405 and Allow: GET, HEAD",
              ans.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in ans, f"{ans[:200]!r}")
    check("http: an unknown path is 404",
          raw(port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 404"))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        s.settimeout(5)
        ans = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            ans += chunk
        check("http: HEAD answers 200 with no body",
              ans.startswith(b"HTTP/1.1 200") and ans.endswith(b"\r\n\r\n"), f"{ans!r}")
    ok = ctl(env, "run", "hello", "--input", '{"name": "http"}', "--wait", "--timeout", "30")
    check("http: the runner served its workflow meanwhile", ok.returncode == 0, ok.stderr)
    rc = r.term()
    check("http: exits 0 on SIGTERM", rc == 0, e2e.exit_detail(rc, r))


def fd_budget(url, env, tmp):
    port = e2e.free_port()
    wport = e2e.free_port()
    wurl = f"tcp://127.0.0.1:{wport}"
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    low = min(256, hard)
    r = e2e.runner(env, tmp, "runner-fds", wurl, "--http-listen", f"127.0.0.1:{port}",
                   "--http-max-connections", "1000", "--http-header-timeout-ms", "10000",
                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (low, low)))
    up = wait_until("http up", lambda: timed_get(port, "/healthz")[0] == 200, 20)
    check("budget: /healthz answers", up)
    m = e2e.metrics(port)
    budget = m.get("cairn_fd_budget", 0)
    check("budget: the budget leaves a reserve under the open-file limit of 256",
          0 < budget <= low - 64, f"cairn_fd_budget {budget}")
    # Both listeners at once: half HTTP requests, and worker connections that never send the
    # transport handshake (nng's REP socket would not even have counted these).
    socks = []
    for _ in range(300):
        try:
            socks += half_requests(port, 1)
        except OSError:
            break
    silent = []
    t0 = time.monotonic()
    for _ in range(300):
        try:
            silent.append(socket.create_connection(("127.0.0.1", wport), timeout=5))
        except OSError:
            break
    for s in silent:
        s.setblocking(False)
    w = e2e.worker(env, tmp, "worker-fds", wurl, slots="4")
    m = e2e.metrics(port)
    check("budget: the listeners never hold more than the budget and the 16 closing to make "
          "room", m.get("cairn_fd_budget_used", 999) <= budget + 16,
          f"{m.get('cairn_fd_budget_used')} of {budget}")
    check("budget: past it, connections waiting for a request or a hello made room",
          m.get("cairn_http_evicted_total", 0) >= 1 and m.get("cairn_fd_budget_exhausted_total", 0)
          >= 1, f"{m}")
    check("budget: at most 128 worker connections wait for hello",
          m.get("cairn_pool_greeting", 999) <= 128, f"{m.get('cairn_pool_greeting')}")
    fds = e2e.fd_count(r)
    check("budget: the runner's descriptors stay under its limit", 0 < fds < low, f"{fds}")
    db = re.search(r"/([^/?]+)(\?|$)", url).group(1)
    n = q(e2e.BASE, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                    f"datname = '{db}' AND pid <> pg_backend_pid()")
    check("budget: the runner's sessions were terminated", int(n) >= 2, n)
    ok = ctl(env, "run", "hello", "--input", '{"name": "budget"}', "--wait", "--timeout", "30")
    check("budget: a worker that connected during the flood is served, and an instance enqueued "
          "after the sessions were killed completes (the runner reconnected within its reserve)",
          ok.returncode == 0, ok.stderr)
    st, took = timed_get(port, "/healthz")
    check("budget: /healthz answers while they are held", st == 200, f"{st} after {took:.1f} s")
    check("budget: it said the reserve was reached", "descriptor reserve reached" in r.text())
    gone = wait_until("silent worker connections dropped",
                      lambda: all(closed(s) for s in silent), 8)
    check("budget: every worker connection that never sent the handshake is dropped within the "
          "hello timeout (5 s) of its accept", gone and time.monotonic() - t0 < 9,
          f"{sum(1 for s in silent if not closed(s))} open after {time.monotonic() - t0:.1f} s")
    for s in socks + silent:
        s.close()
    w.term()
    rc = r.term()
    check("budget: exits 0 on SIGTERM", rc == 0, e2e.exit_detail(rc, r))


def run_all(url, env, tmp):
    for args in (["migrate"], ["register", os.path.join(e2e.ROOT, "examples/hello.cairn")]):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)
    http_bounds(url, env, tmp)
    fd_budget(url, env, tmp)


if __name__ == "__main__":
    sys.exit(e2e.main_in_fresh_db("listeners", run_all))
