"""``--scheduler ADDRESS``: checked before Dask is handed it, every problem one line.

Dask's own client does not bound every way an address can be wrong: a server that accepts
and says nothing kept it waiting for over twelve minutes, one that answers garbage, HTTP
or a huge length field ended in a traceback after a minute, ``tls://`` and ``ucx://`` in a
``TypeError``, and a malformed address was reported after 60 s followed by a traceback
from ``Client.__del__``. So gpuprof looks first, with the standard library only:

1. the address is ``tcp://HOST:PORT`` or ``HOST:PORT`` (the schemes that need more than an
   address -- ``tls://`` certificates, ``ucx://``, ``ws://``, ``inproc://`` -- are refused
   with the reason);
2. a TCP connection is made within :data:`CONNECT_TIMEOUT_S`;
3. the server speaks first, as a Dask scheduler does: its handshake, a length-prefixed
   message of a few dozen bytes, must arrive whole within the same time. Silence, HTTP,
   a length no handshake has, or a trickle are refused, naming what came back.

Only then is the Dask client made. Every failure is a :class:`GpuprofError`: one line,
exit 2, within :data:`CONNECT_TIMEOUT_S` seconds of the start.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from gpuprof.errors import GpuprofError

CONNECT_TIMEOUT_S = 30.0
# A Dask handshake says which compression, Python and pickle protocol a side has: 50-100
# bytes. A length field beyond this is not one (garbage read as a length, or an attack).
MAX_HANDSHAKE_BYTES = 1 << 16
DEFAULT_PORT_HINT = 8786
_OTHER_SCHEMES = {
    "tls": "needs TLS certificates, which --scheduler cannot be given",
    "ucx": "needs UCX networking",
    "ws": "is a websocket address",
    "wss": "is a websocket address",
    "inproc": "names a cluster inside another process",
}


@dataclass(frozen=True)
class SchedulerAddress:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"tcp://{self.host}:{self.port}"


def _refuse(address: str, why: str) -> GpuprofError:
    shown = address if len(address) <= 80 else address[:77] + "..."
    return GpuprofError(f"--scheduler {shown!r}: {why}")


def parse_scheduler_address(address: str) -> SchedulerAddress:
    """``tcp://HOST:PORT`` (or ``HOST:PORT``) as host and port, or one clear error."""
    text = address.strip()
    if not text:
        raise _refuse(address, f"give the address of a Dask scheduler, e.g. tcp://HOST:{DEFAULT_PORT_HINT}")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    scheme = scheme.lower()
    if scheme != "tcp":
        why = _OTHER_SCHEMES.get(scheme)
        if why is not None:
            raise _refuse(address, f"a {scheme}:// address {why}; gpuprof connects to tcp://HOST:PORT addresses")
        raise _refuse(address, f"unknown scheme {scheme[:20]!r}; give tcp://HOST:PORT")
    host, colon, port_text = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # [::1]:8786
        host = host[1:-1]
    if not colon or not host or "/" in rest:
        raise _refuse(address, f"expected tcp://HOST:PORT (e.g. tcp://10.0.0.5:{DEFAULT_PORT_HINT})")
    if not port_text.isdigit() or len(port_text) > 5 or not 0 < int(port_text) < 65536:
        raise _refuse(address, "the port is not a number from 1 to 65535")
    return SchedulerAddress(host, int(port_text))


def check_scheduler(address: str, timeout_s: float | None = None) -> SchedulerAddress:
    """Parse ``address`` and make sure a Dask scheduler answers there (see the module
    docstring); returns it, or raises :class:`GpuprofError` within ``timeout_s``."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    where = parse_scheduler_address(address)
    deadline = time.monotonic() + timeout_s
    name = where.url
    try:
        sock = socket.create_connection((where.host, where.port), timeout=timeout_s)
    except socket.timeout:
        raise GpuprofError(f"cannot reach the Dask scheduler at {name}: no answer within {timeout_s:g} s") from None
    except OSError as exc:  # refused, unknown host, unreachable network
        raise GpuprofError(f"cannot reach the Dask scheduler at {name}: {exc.strerror or exc}") from None
    with sock:
        head = _read(sock, 8, deadline)
        if len(head) < 8:
            said = "closed the connection" if head == b"" and time.monotonic() < deadline else \
                f"sent no Dask handshake within {timeout_s:g} s"
            raise GpuprofError(f"the server at {name} {said}: is it a Dask scheduler? "
                               f"(its port is usually {DEFAULT_PORT_HINT})")
        if head.startswith((b"HTTP/", b"<")):
            raise GpuprofError(f"the server at {name} answered as a web server, not a Dask scheduler "
                               f"(the dashboard's port? the scheduler's is usually {DEFAULT_PORT_HINT})")
        length = int.from_bytes(head, "little")
        if not 8 <= length <= MAX_HANDSHAKE_BYTES:
            raise GpuprofError(f"the server at {name} does not speak Dask's protocol (its first message "
                               "is not a Dask handshake)")
        body = _read(sock, length, deadline)
        if len(body) < length:
            raise GpuprofError(f"the server at {name} did not finish its Dask handshake within {timeout_s:g} s")
    return where


def _read(sock: socket.socket, n: int, deadline: float) -> bytes:
    """Up to ``n`` bytes, whatever arrived by ``deadline`` (less at end of stream)."""
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(data))
        except (socket.timeout, BlockingIOError):
            break
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


__all__ = ["CONNECT_TIMEOUT_S", "SchedulerAddress", "check_scheduler", "parse_scheduler_address"]
