"""``--scheduler ADDRESS``: every address problem one line, exit 2, within the timeout
(issue 33, item 7).

Tiny TCP servers on 127.0.0.1 that the test starts and stops play what a wrong address
finds: one that accepts and says nothing, one that sends garbage, an HTTP server (the
dashboard's port), a huge length field, a trickle, one that hangs up. The checks run before
Dask is imported (gpuprof/pipeline/dask_address.py), so most of this runs without the
``dask`` extra; the tests that need a real scheduler skip without it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clirun import run_cli

from gpuprof.errors import GpuprofError
from gpuprof.pipeline.dask_address import check_scheduler, parse_scheduler_address

HEALTHY = Path(__file__).resolve().parents[2] / "sample_traces" / "healthy"
TIMEOUT_S = 1.5


def _has_dask() -> bool:
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        return False
    return True


needs_dask = pytest.mark.skipif(not _has_dask(), reason="dask[distributed] not installed (pip install -e '.[dask]')")


def _silent(c: socket.socket) -> None:
    time.sleep(30)


def _garbage(c: socket.socket) -> None:
    c.sendall(b"\xffgarbage\x00" * 50)
    time.sleep(30)


def _http(c: socket.socket) -> None:
    c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    time.sleep(30)


def _huge_length(c: socket.socket) -> None:
    c.sendall((2**62).to_bytes(8, "little") + b"\x01" * 8)
    time.sleep(30)


def _trickle(c: socket.socket) -> None:
    c.sendall((58).to_bytes(8, "little"))
    for _ in range(60):
        c.sendall(b"\x00")
        time.sleep(0.5)


def _hang_up(c: socket.socket) -> None:
    c.close()


class Server:
    """A TCP server on 127.0.0.1 that answers each connection with ``behave``."""

    def __init__(self, behave: Callable[[socket.socket], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.behave = behave
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        try:
            self.behave(c)
        except OSError:
            pass

    def close(self) -> None:
        self.stop = True
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    servers: list[Server] = []

    def start(behave: Callable[[socket.socket], None]) -> str:
        servers.append(Server(behave))
        return f"tcp://127.0.0.1:{servers[-1].port}"

    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize("address, says", [
    ("", "give the address of a Dask scheduler"),
    ("   ", "give the address of a Dask scheduler"),
    ("tcp://", "expected tcp://HOST:PORT"),
    ("foo://bar", "unknown scheme 'foo'"),
    ("inproc://x", "names a cluster inside another process"),
    ("tls://127.0.0.1:8786", "needs TLS certificates"),
    ("ucx://127.0.0.1:8786", "needs UCX"),
    ("127.0.0.1:99999", "the port is not a number from 1 to 65535"),
    ("127.0.0.1:http", "the port is not a number"),
    ("tcp://127.0.0.1", "expected tcp://HOST:PORT"),
])
def test_an_address_that_is_not_one_is_one_line_at_once(address: str, says: str) -> None:
    with pytest.raises(GpuprofError, match=says) as info:
        parse_scheduler_address(address)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("behave, says", [
    (_silent, "sent no Dask handshake within 1.5 s"),
    (_garbage, "does not speak Dask's protocol"),
    (_http, "answered as a web server"),
    (_huge_length, "does not speak Dask's protocol"),
    (_trickle, "did not finish its Dask handshake within 1.5 s"),
    (_hang_up, "closed the connection"),
], ids=["silent", "garbage", "http", "huge-length", "trickle", "hang-up"])
def test_a_server_that_is_no_scheduler_is_one_line_within_the_timeout(
        serve: Callable[[Callable[[socket.socket], None]], str], behave: Callable[[socket.socket], None],
        says: str) -> None:
    address = serve(behave)
    t0 = time.monotonic()
    with pytest.raises(GpuprofError, match=says):
        check_scheduler(address, TIMEOUT_S)
    # The promise, not a speed: within the timeout (the silent server hung over 12 minutes).
    assert time.monotonic() - t0 < TIMEOUT_S + 10


def test_nobody_listening_is_one_line() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(GpuprofError, match=f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}"):
        check_scheduler(f"127.0.0.1:{port}", TIMEOUT_S)


@needs_dask
@pytest.mark.parametrize("behave", [_silent, _http, _garbage], ids=["silent", "http", "garbage"])
def test_analyze_with_a_scheduler_address_that_is_no_scheduler_exits_2(
        serve: Callable[[Callable[[socket.socket], None]], str], behave: Callable[[socket.socket], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuprof.pipeline.dask as dist

    monkeypatch.setattr(dist, "CONNECT_TIMEOUT_S", TIMEOUT_S)
    r = run_cli("analyze", str(HEALTHY), "--scheduler", serve(behave))
    assert r.code == 2 and r.traceback is None, r.traceback  # was: a hang, or a traceback after 60 s
    assert len(r.stderr_lines) == 1 and "127.0.0.1" in r.stderr, r.stderr


@needs_dask
@pytest.mark.parametrize("address", ["", "tcp://", "foo://bar", "inproc://x", "tls://127.0.0.1:1", "ucx://127.0.0.1:1"])
def test_analyze_with_a_malformed_scheduler_address_exits_2_at_once(address: str,
                                                                     capfd: pytest.CaptureFixture[str]) -> None:
    r = run_cli("analyze", str(HEALTHY), "--scheduler", address)
    assert r.code == 2 and r.traceback is None, r.traceback  # was: TypeError, or the line after 60 s
    assert len(r.stderr_lines) == 1, r.stderr
    import gc

    gc.collect()
    assert "Traceback" not in capfd.readouterr().err  # was: a Client.__del__ traceback


@needs_dask
def test_a_real_scheduler_passes_the_check() -> None:
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=True, dashboard_address=None, host="127.0.0.1") as cluster:
        where = check_scheduler(str(cluster.scheduler_address), 20.0)
        assert where.url == cluster.scheduler_address
