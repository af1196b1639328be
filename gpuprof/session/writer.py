"""Writing a session folder: atomic metadata and append-only JSON-lines files.

Crash safety is the point of this module. Metadata is replaced atomically (temp file +
``os.replace``), so a reader sees the old or the new version, never half of one. Records are
appended one JSON object per line and pushed to the OS at least every ``flush_interval_s``
(and ``fsync``-ed when asked, so that even a machine crash loses at most that much).

A full disk (or any other write error) never raises out of the writer: the user's job
matters more than its profile. Each file remembers its first error; records that could not
be written stay in memory (up to a bound) and are retried at the next flush, so a disk that
frees up loses nothing, and what is finally lost is counted. :meth:`SessionWriter.problems`
says what could not be written, for one line at the end of the run. ``gpuprof run`` also
holds back :data:`RESERVE_BYTES` of disk in a hidden file while the job runs and releases it
at the end, so that it can finish ``session.json`` on a disk the job filled.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gpuprof.errors import GpuprofError
from gpuprof.session.layout import (
    EVENTS_FILE,
    HOOKS_DIR,
    META_FILE,
    PROCESSES_FILE,
    RESERVE_FILE,
    SAMPLES_FILE,
    TRACES_DIR,
)
from gpuprof.session.trust import refuse_foreign_folder
from gpuprof.util.atomic import make_temp, remove_quietly
from gpuprof.util.jsontypes import JsonMapping

# Permissions, before the umask. The files that hold the job's command line (session.json;
# the hook logs' start records) may hold a token passed as an argument: only their owner
# reads them, whatever the umask. Every other file of the session gets what the umask gives.
PRIVATE_MODE = 0o600
SHARED_MODE = 0o666

RESERVE_BYTES = 256 * 1024
"""Disk held back during a run so that the final metadata and the records still in memory
can be written after the job filled the disk (a few KB of metadata, the rest for records)."""

MAX_BACKLOG_BYTES = 8 << 20
"""Records kept in memory per file while the disk refuses them; beyond this they are
counted as lost (at the default poll rate, minutes of samples for 8 GPUs)."""

# Errors that mean "no space", where running the job without a session beats not running it.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# Errors that say the --out path itself is wrong (a usage error: exit 2 before the job runs).
# Any other error creating the session is the disk's or the machine's (full, read-only, not
# permitted, I/O): the job runs unrecorded, as gpuprof's recording is never a reason not to run it.
BAD_PATH_ERRNOS = frozenset({errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EEXIST, errno.EISDIR})


def _write(fd: int, data: bytes) -> int:
    """The one place records reach the disk (a seam: tests inject a full disk here)."""
    return os.write(fd, data)


def _clean(value: Any) -> Any:
    """NaN/inf are not JSON: write them as null (unknown), never as a number."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps_record(record: JsonMapping) -> str:
    return json.dumps({k: _clean(v) for k, v in record.items()}, separators=(",", ":"))


def describe_os_error(exc: BaseException) -> str:
    """``No space left on device`` for an OSError with a strerror, else the exception's text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def write_json_atomic(path: Path, data: JsonMapping, mode: int = PRIVATE_MODE) -> None:
    """Replace ``path`` with ``data`` as JSON so that no reader ever sees a partial file.

    ``mode`` minus the umask are its permissions (:data:`PRIVATE_MODE` by default:
    ``session.json`` holds the command line). Raises ``OSError`` (the temporary file is
    removed again); the old file stays.
    """
    payload = (json.dumps(data, indent=2, sort_keys=False) + "\n").encode("utf-8")
    fd, tmp = make_temp(path.parent, f".{path.name}.", mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


class JsonlAppender:
    """Append-only JSON-lines file, flushed at most ``flush_interval_s`` after a write.

    ``clock`` is injected (monotonic seconds) so tests can check the cadence without
    sleeping. Not thread-safe: one writer thread per file. Never raises for a write error:
    see the module docstring (``error``, ``lines_lost``).
    """

    def __init__(
        self,
        path: Path,
        flush_interval_s: float = 1.0,
        fsync: bool = True,
        clock: Callable[[], float] = time.monotonic,
        max_backlog_bytes: int = MAX_BACKLOG_BYTES,
    ) -> None:
        self.path = path
        self.flush_interval_s = flush_interval_s
        self.fsync = fsync
        self.clock = clock
        self.max_backlog_bytes = max_backlog_bytes
        self.error: str | None = None  # the first write error, e.g. "No space left on device"
        self.failing = False  # the last flush left records unwritten
        self.lines_written = 0  # lines accepted (written or still waiting in memory)
        self.lines_lost = 0  # lines that will never reach the file
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._closed = False
        self._fd: int | None = None
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, SHARED_MODE)
        except OSError as exc:
            self._fail(exc)
        self._last_flush = clock()

    def _fail(self, exc: OSError) -> None:
        if self.error is None:
            self.error = describe_os_error(exc)

    def append(self, record: JsonMapping) -> None:
        if self._closed:
            return
        if self._fd is None:
            self.lines_lost += 1
            return
        line = (dumps_record(record) + "\n").encode("utf-8")
        if self._pending_bytes + len(line) > self.max_backlog_bytes:
            self.lines_lost += 1  # the disk has refused records for a long while
            return
        self._pending.append(line)
        self._pending_bytes += len(line)
        self.lines_written += 1
        self.maybe_flush()

    @property
    def dirty(self) -> bool:
        return bool(self._pending)

    def maybe_flush(self) -> bool:
        """Flush when the oldest unflushed line is about to be ``flush_interval_s`` old."""
        if self._pending and self.clock() - self._last_flush >= self.flush_interval_s:
            self.flush()
            return True
        return False

    def flush(self) -> bool:
        """Write what is pending; False when the file refused some of it (kept for a retry)."""
        self._last_flush = self.clock()
        if self._fd is None or not self._pending:
            return not self._pending
        data = b"".join(self._pending)
        done = 0
        try:
            while done < len(data):
                done += _write(self._fd, data[done:])
        except OSError as exc:
            self._fail(exc)
            # Keep the rest, a torn line's tail included: the retry completes that line.
            rest = data[done:]
            self._pending = [rest] if rest else []
            self._pending_bytes = len(rest)
            self.failing = True
            return False
        self._pending = []
        self._pending_bytes = 0
        self.failing = False
        if self.fsync:
            try:
                os.fsync(self._fd)
            except OSError:  # e.g. a pipe or a filesystem without fsync: written is enough
                pass
        return True

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        if self._pending:
            self.lines_lost += b"".join(self._pending).count(b"\n")
            self._pending = []
            self._pending_bytes = 0
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError as exc:
                self._fail(exc)
            self._fd = None
        self._closed = True


@dataclass(frozen=True)
class WriteProblem:
    """A session file that could not be (fully) written."""

    path: Path
    error: str  # e.g. "No space left on device"
    lines_lost: int = 0  # records of a JSON-lines file that never reached it

    def describe(self) -> str:
        lost = f" ({self.lines_lost} record{'s' if self.lines_lost != 1 else ''} lost)" if self.lines_lost else ""
        return f"{self.path}: {self.error}{lost}"


class SessionDirTaken(GpuprofError):
    """The folder asked for is another run's session, or holds other files."""


def _raise_if_bad_path(exc: OSError, cannot: str, root: Path) -> None:
    """A :class:`GpuprofError` (exit 2 before the job runs) for an ``OSError`` that says
    the session path itself is wrong (:data:`BAD_PATH_ERRNOS`); any other one is left to
    the caller to raise as it is."""
    if exc.errno in BAD_PATH_ERRNOS:
        raise GpuprofError(f"{cannot}: {describe_os_error(exc)}", root) from None


def claim_session_dir(root: Path) -> None:
    """Make ``root`` this run's session folder, exclusively, or raise :class:`GpuprofError`.

    The folder may not exist yet (it is created, with its parents) or be empty. Creating
    ``session.json`` with ``O_EXCL`` is the claim: of two runs given the same folder at the
    same moment, exactly one gets it; the other is refused before its command starts.
    ``OSError`` out of here is the disk's or the machine's (full, read-only, not permitted,
    an I/O error), not the user's: the caller runs the job unrecorded.
    """
    foreign = refuse_foreign_folder(root)  # before anything is written there (gpuprof/session/trust.py)
    if foreign is not None:
        raise GpuprofError(foreign, root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise GpuprofError("is a file, not a folder; give a new or empty folder for the session", root) from None
    except OSError as exc:
        _raise_if_bad_path(exc, "cannot create session folder", root)
        raise
    if (root / META_FILE).exists():
        raise SessionDirTaken("session folder already exists: it holds another gpuprof run's session", root)
    try:
        entries = next(os.scandir(root), None)
    except OSError as exc:
        raise GpuprofError(f"cannot read session folder: {describe_os_error(exc)}", root) from None
    if entries is not None:
        raise SessionDirTaken("session folder already exists and is not empty", root)
    try:
        fd = os.open(root / META_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
    except FileExistsError:
        raise SessionDirTaken("session folder was just claimed by another gpuprof run", root) from None
    except OSError as exc:
        _raise_if_bad_path(exc, "cannot write in session folder", root)
        raise
    os.close(fd)


class SessionWriter:
    """Creates the session folder and owns its gpuprof-side files (not the hook files).

    Never raises for a write error (see the module docstring); :meth:`problems` lists them.
    ``reserve_bytes`` holds that much disk back in a hidden file until :meth:`release_reserve`.
    """

    def __init__(
        self,
        root: Path,
        flush_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        reserve_bytes: int = 0,
    ) -> None:
        self.root = root
        self._errors: dict[Path, str] = {}
        for folder in (root, root / HOOKS_DIR, root / TRACES_DIR):
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self._note(folder, exc)
        self.samples = JsonlAppender(root / SAMPLES_FILE, flush_interval_s, clock=clock)
        self.processes = JsonlAppender(root / PROCESSES_FILE, flush_interval_s, clock=clock)
        self.events = JsonlAppender(root / EVENTS_FILE, flush_interval_s, clock=clock)
        self.reserve: Path | None = None
        if reserve_bytes > 0:
            self._make_reserve(reserve_bytes)

    def _note(self, path: Path, exc: OSError) -> None:
        self._errors.setdefault(path, describe_os_error(exc))

    def _appenders(self) -> tuple[JsonlAppender, ...]:
        return (self.samples, self.processes, self.events)

    def _make_reserve(self, size: int) -> None:
        path = self.root / RESERVE_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return  # no reserve: the run goes on; finishing a full disk may then fail
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except (AttributeError, OSError) as exc:
                if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
                    raise
                os.write(fd, b"\0" * size)  # a filesystem without fallocate: write real blocks
            self.reserve = path
        except OSError:
            remove_quietly(path)
        finally:
            os.close(fd)

    def release_reserve(self) -> None:
        """Give the held-back disk space to the session's last writes."""
        if self.reserve is not None:
            remove_quietly(self.reserve)
            self.reserve = None

    def write_meta(self, meta: JsonMapping) -> bool:
        """Replace ``session.json`` atomically; False (and noted) when the disk refused it."""
        path = self.root / META_FILE
        try:
            write_json_atomic(path, meta)
        except OSError as exc:
            self._note(path, exc)
            return False
        self._errors.pop(path, None)  # a later success repairs an earlier failure
        return True

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
        for f in self._appenders():
            f.flush()

    def maybe_flush(self) -> None:
        for f in self._appenders():
            f.maybe_flush()

    def close(self) -> None:
        for f in self._appenders():
            f.close()

    def problems(self) -> list[WriteProblem]:
        """Files that could not be fully written, first the folder and metadata, then records."""
        out = [WriteProblem(p, e) for p, e in self._errors.items()]
        for f in self._appenders():
            if f.failing or f.lines_lost:
                out.append(WriteProblem(f.path, f.error or "not written", f.lines_lost))
        return out
