# SPDX-License-Identifier: MIT
"""The Python worker under faults, as real processes: kill -9 mid-action, a runner restarted
under it, several runners at once, TLS with client certificates, and a fake runner sending
garbage."""
import os
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import wait_until


def pids(path):
    try:
        with open(path) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def test_kill9_mid_action_goes_to_another_worker(cluster, client):
    sock, _ = cluster.runner("runner-k9")
    a = cluster.pyworker(sock, name="pyworker-a", slots=1)
    b = cluster.pyworker(sock, name="pyworker-b", slots=1)
    path = os.path.join(cluster.tmp, "marks-k9")
    iid = client.enqueue("pymark", {"ms": 1500, "path": path})
    assert wait_until(lambda: len(pids(path)) == 1, 20)
    victim = a if pids(path)[0] == a.p.pid else b
    victim.p.send_signal(signal.SIGKILL)
    assert client.wait(iid, timeout=30) == 1500, cluster.logs()
    assert len(pids(path)) == 2 and pids(path)[1] != victim.p.pid, pids(path)


def test_a_restarted_runner_gets_its_worker_back(cluster, client):
    sock, runner = cluster.runner("runner-rs")
    w = cluster.pyworker(sock, name="pyworker-rs", slots=2)
    assert runner.stop(signal.SIGTERM) == 0
    sock, _ = cluster.runner("runner-rs")  # the same socket
    assert wait_until(lambda: w.text().count("serving") >= 2, 20), w.text()
    assert client.wait(client.enqueue("pyechos", {"n": 3, "ms": 10}), timeout=30) == 3
    assert w.p.poll() is None


def test_one_worker_serves_several_runners(cluster, client):
    s1, r1 = cluster.runner("runner-m1")
    s2, r2 = cluster.runner("runner-m2")
    w = cluster.pyworker([s1, s2], name="pyworker-multi", slots=2)
    assert wait_until(lambda: w.text().count("serving") >= 2, 20), w.text()
    # With the first runner gone, the second still gets its work done by this worker.
    assert r1.stop(signal.SIGKILL) is not None
    assert client.wait(client.enqueue("pyechos", {"n": 4, "ms": 10}), timeout=40) == 4
    assert w.p.poll() is None


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    k = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    script = (
        f"set -e; cd {d};"
        f"openssl req -x509 {k} -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca;"
        "for n in runner worker; do"
        f"  openssl req {k} -keyout $n.key -out $n.csr -subj /CN=$n;"
        "  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > $n.ext;"
        "  openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1"
        "    -extfile $n.ext -out $n.crt; cat $n.crt $n.key > $n.pem;"
        "done")
    subprocess.run(["sh", "-c", script], check=True, capture_output=True)
    return d


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tls_with_a_client_certificate(cluster, client, certs):
    url = f"tls+tcp://127.0.0.1:{free_port()}"
    cluster.runner("runner-tls", url, "--worker-tls-cert-key", str(certs / "runner.pem"),
                   "--worker-tls-ca", str(certs / "ca.pem"))
    time.sleep(0.3)
    w = cluster.pyworker(url, name="pyworker-tls", extra=[
        "--tls-ca", str(certs / "ca.pem"), "--tls-cert-key", str(certs / "worker.pem"),
        "--tls-server-name", "localhost"])
    assert "serving" in w.text(), w.text()
    # Without a certificate the handshake never completes: the worker keeps retrying.
    bare = cluster.pyworker_nowait(url, name="pyworker-nocert",
                                   extra=["--tls-ca", str(certs / "ca.pem"),
                                          "--tls-server-name", "localhost"])
    time.sleep(2)
    assert "serving" not in bare.text() and bare.p.poll() is None, bare.text()
    assert client.wait(client.enqueue("pyechos", {"n": 2, "ms": 10}), timeout=30) == 2


class GarbageRunner:
    """A REP endpoint on a unix socket that answers every request with bytes that are not a
    protocol message, and counts the connections it gets."""

    def __init__(self, path):
        self.path = path
        self.connections = 0
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        try:
            c.sendall(b"\x00SP\x00\x00\x31\x00\x00")
            c.recv(8)
            head = c.recv(9)
            (n,) = struct.unpack(">Q", head[1:])
            msg = c.recv(n)
            body = msg[:4] + b"\xc1\xc1garbage"  # msgpack's never-used byte
            c.sendall(b"\x01" + struct.pack(">Q", len(body)) + body)
            time.sleep(0.5)
        finally:
            c.close()


def test_garbage_from_a_runner_drops_the_connection_and_reconnects(cluster):
    g = GarbageRunner(os.path.join(cluster.tmp, "garbage.sock"))
    w = cluster.pyworker_nowait(f"ipc://{g.path}", name="pyworker-garbage")
    assert wait_until(lambda: g.connections >= 3, 20), w.text()
    assert w.p.poll() is None, "the worker never crashes"
    assert "does not decode" in w.text()
    # Never welcomed, it backs off (0.1, 0.2, 0.4 ... s) instead of redialling at once.
    n0 = g.connections
    time.sleep(3)
    assert g.connections - n0 <= 4, f"{g.connections - n0} connections in 3 s"
