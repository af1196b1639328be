"""Writing a session folder: atomic metadata and append-only JSON-lines files.

Crash safety is the point of this module. Metadata is replaced atomically (temp file +
``os.replace``), so a reader sees the old or the new version, never half of one. Records are
appended one JSON object per line and pushed to the OS at least every ``flush_interval_s``
(and ``fsync``-ed when asked, so that even a machine crash loses at most that much).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import IO, Any, Callable, Mapping

from gpuprof.atomic import write_text_atomic
from gpuprof.session.layout import (
    EVENTS_FILE,
    HOOKS_DIR,
    META_FILE,
    PROCESSES_FILE,
    SAMPLES_FILE,
    TRACES_DIR,
)


def _clean(value: Any) -> Any:
    """NaN/inf are not JSON: write them as null (unknown), never as a number."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps_record(record: Mapping[str, Any]) -> str:
    return json.dumps({k: _clean(v) for k, v in record.items()}, separators=(",", ":"))


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``data`` as JSON so that no reader ever sees a partial file."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n", fsync=True)


class JsonlAppender:
    """Append-only JSON-lines file, flushed at most ``flush_interval_s`` after a write.

    ``clock`` is injected (monotonic seconds) so tests can check the cadence without
    sleeping. Not thread-safe: one writer thread per file.
    """

    def __init__(
        self,
        path: Path,
        flush_interval_s: float = 1.0,
        fsync: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.flush_interval_s = flush_interval_s
        self.fsync = fsync
        self.clock = clock
        self._fh: IO[str] | None = open(path, "a", encoding="utf-8", buffering=1 << 16)
        self._dirty = False
        self._last_flush = clock()
        self.lines_written = 0

    def append(self, record: Mapping[str, Any]) -> None:
        if self._fh is None:
            return
        self._fh.write(dumps_record(record) + "\n")
        self._dirty = True
        self.lines_written += 1
        self.maybe_flush()

    def maybe_flush(self) -> bool:
        """Flush when the oldest unflushed line is about to be ``flush_interval_s`` old."""
        if self._dirty and self.clock() - self._last_flush >= self.flush_interval_s:
            self.flush()
            return True
        return False

    def flush(self) -> None:
        if self._fh is None:
            return
        self._fh.flush()
        if self.fsync:
            try:
                os.fsync(self._fh.fileno())
            except OSError:  # e.g. a pipe or a filesystem without fsync: flushing is enough
                pass
        self._dirty = False
        self._last_flush = self.clock()

    def close(self) -> None:
        if self._fh is not None:
            self.flush()
            self._fh.close()
            self._fh = None


class SessionWriter:
    """Creates the session folder and owns its gpuprof-side files (not the hook files)."""

    def __init__(
        self,
        root: Path,
        flush_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / HOOKS_DIR).mkdir(exist_ok=True)
        (root / TRACES_DIR).mkdir(exist_ok=True)
        self.samples = JsonlAppender(root / SAMPLES_FILE, flush_interval_s, clock=clock)
        self.processes = JsonlAppender(root / PROCESSES_FILE, flush_interval_s, clock=clock)
        self.events = JsonlAppender(root / EVENTS_FILE, flush_interval_s, clock=clock)

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        write_json_atomic(self.root / META_FILE, meta)

    def event(self, kind: str, message: str, time_unix_s: float | None = None, **extra: Any) -> None:
        rec: dict[str, Any] = {
            "time_unix_s": time.time() if time_unix_s is None else time_unix_s,
            "kind": kind,
            "message": message,
        }
        rec.update(extra)
        self.events.append(rec)
        # Events are rare and matter (GPU lost): push them out at once.
        self.events.flush()

    def flush(self) -> None:
        for f in (self.samples, self.processes, self.events):
            f.flush()

    def maybe_flush(self) -> None:
        for f in (self.samples, self.processes, self.events):
            f.maybe_flush()

    def close(self) -> None:
        for f in (self.samples, self.processes, self.events):
            f.close()
