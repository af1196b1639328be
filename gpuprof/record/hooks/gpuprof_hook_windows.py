"""The windows after the first, as the torch hooks see them: requests read from the session.

``gpuprof run`` decides when a window opens (every N steps or a duration, a change of the
step time, a demand) and writes ``<session>/windows/<NNNN>/request.json``: the optimizer
step ``start_step`` from which every rank records ``active`` steps, after ``warmup``. Every
process of the job reads the same request, so every rank records the same steps -- the ranks
agree on a step number through the session folder, which all ranks of a node share.

Reading costs one ``os.stat`` of ``windows/`` every :data:`POLL_S` (a folder appears whole,
renamed into place, which changes the folder's modification time); only then is it listed
and the new requests read. Part of the torch hooks: standard library only, loaded from this
folder without gpuprof; the names below match :mod:`gpuprof.session.layout` and
:mod:`gpuprof.session.windows` (a test checks it).
"""

from __future__ import annotations

import json
import os
import time

WINDOWS_DIR = "windows"
REQUEST_FILE = "request.json"
POLL_S = 0.5
_RECENT_S = 2.0  # a folder changed this recently is listed again (coarse mtime clocks)


class WindowRequests:
    """New window requests of one session, read at most every :data:`POLL_S`."""

    def __init__(self, session_dir: str) -> None:
        self.folder = os.path.join(session_dir, WINDOWS_DIR)
        self.seen: set[int] = set()
        self.pending: list[tuple[int, int, int, int]] = []  # (start_step, window, warmup, active)
        self._mtime_ns: int | None = None
        self.next_poll_s = 0.0

    def poll(self, now_s: float) -> bool:
        """Read requests that appeared since the last poll; True when one did."""
        self.next_poll_s = now_s + POLL_S
        try:
            mtime = os.stat(self.folder).st_mtime_ns
        except OSError:
            return False
        if mtime == self._mtime_ns and time.time() - mtime / 1e9 > _RECENT_S:
            return False
        self._mtime_ns = mtime
        try:
            names = [n for n in os.listdir(self.folder) if n.isdigit() and int(n) not in self.seen]
        except OSError:
            return False
        found = False
        for name in names:
            req = self._read(os.path.join(self.folder, name, REQUEST_FILE))
            self.seen.add(int(name))
            if req is None or req[1] != int(name):
                continue
            self.pending.append(req)
            found = True
        self.pending.sort()
        return found

    @staticmethod
    def _read(path: str) -> tuple[int, int, int, int] | None:
        try:
            with open(path, "rb") as fh:
                doc = json.loads(fh.read(1 << 16))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict):
            return None
        vals = [doc.get(k) for k in ("start_step", "window", "warmup", "active")]
        ints = [v for v in vals if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        if len(ints) != 4:
            return None
        start, window, warmup, active = ints
        if start < 1 or active < 1:
            return None
        return start, window, warmup, active

    def next_start(self) -> int | None:
        """The step after which the next window's profiler must start (its warm-up before it)."""
        if not self.pending:
            return None
        start, _, warmup, _ = self.pending[0]
        return start - warmup - 1

    def take(self) -> tuple[int, int, int, int] | None:
        return self.pending.pop(0) if self.pending else None
