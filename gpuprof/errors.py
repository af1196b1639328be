"""The project's own error type.

Anything the user can fix (a missing file, a trace that is not JSON, a bad option value)
raises :class:`GpuprofError`. The CLI catches it once, prints ``gpuprof: <message>`` on one
line to stderr, and exits with code 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class GpuprofError(Exception):
    """A problem with the user's input or environment, reported as one line, exit 2."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = None if path is None else str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class BadTraceError(GpuprofError):
    """A trace file that cannot be read: missing, empty, not JSON, not a trace, ..."""
