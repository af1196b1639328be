"""What gpuprof's torch hooks write into the session folder, from inside the user's process.

:class:`HookLog` is the process's hook log: lines buffered in memory and written on
flush. A full disk loses no step record silently: unwritten lines are kept (up to
:data:`MAX_BACKLOG_BYTES`) and retried, and what is finally lost is counted, for the one
stderr line the hooks print when the process exits. :func:`claim_name` gives a finished
trace its name atomically, so that a reader never sees half a trace and two processes
never take the same name.

Part of the torch hooks (see :mod:`gpuprof_torch_hooks`): standard library only, loaded
from this folder without gpuprof.
"""

from __future__ import annotations

import os
from collections.abc import Callable

# Lines kept in memory while the disk refuses them; beyond, they are counted as lost.
MAX_BACKLOG_BYTES = 4 << 20


def claim_name(tmp: str, folder: str, names: list[str]) -> str:
    """Give ``tmp`` the first of ``names`` not yet taken in ``folder``, atomically.

    ``os.link`` fails when the name exists, so two processes never take the same name
    (``os.replace`` would silently overwrite). Where hard links are not supported, the
    first name that does not exist is taken by ``os.replace``.
    """
    for name in names:
        dest = os.path.join(folder, name)
        try:
            os.link(tmp, dest)
        except FileExistsError:
            continue
        except OSError:
            if os.path.exists(dest):
                continue
            os.replace(tmp, dest)
            return name
        os.unlink(tmp)
        return name
    name = names[-1]
    os.replace(tmp, os.path.join(folder, name))  # every name taken: the last one is per-process
    return name


def os_write(fd: int, data: bytes) -> int:
    """Where hook records reach the disk (a seam: tests inject a full disk here)."""
    return os.write(fd, data)


class HookLog:
    """The process's hook log: lines buffered in memory, written with ``os.write`` on flush.

    Opened on the first flush (a forked helper that never logs leaves no file). A write the
    disk refuses keeps the unwritten bytes -- a torn line's tail included, so a retry
    completes it -- and is retried at the next flush; beyond :data:`MAX_BACKLOG_BYTES`
    new lines are counted as lost. Never raises.
    """

    def __init__(self, path: Callable[[], str]) -> None:
        self._path = path
        self.path: str | None = None
        self._fd: int | None = None
        self._pending: list[str] = []
        self._backlog = b""
        self.error: str | None = None
        self.lines_lost = 0

    def write(self, text: str) -> None:
        self._pending.append(text)  # the hot path: one list append

    def flush(self) -> bool:
        if not self._pending and not self._backlog:
            return True
        data = self._backlog + "".join(self._pending).encode("utf-8")
        self._pending = []
        done = 0
        try:
            if self._fd is None:
                self.path = self._path()
                # 0600: the start record holds the process's command line (see session.writer).
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            while done < len(data):
                done += os_write(self._fd, data[done:])
        except OSError as exc:
            if self.error is None:
                self.error = exc.strerror or str(exc)
            rest = data[done:]
            if len(rest) > MAX_BACKLOG_BYTES:
                cut = rest.find(b"\n", len(rest) - MAX_BACKLOG_BYTES)  # keep whole lines at the end
                self.lines_lost += rest[: cut + 1].count(b"\n") if cut >= 0 else 0
                rest = rest[cut + 1 :] if cut >= 0 else rest
            self._backlog = rest
            return False
        self._backlog = b""
        return True

    def close(self) -> None:
        self.flush()
        if self._backlog:
            self.lines_lost += self._backlog.count(b"\n")
            self._backlog = b""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
