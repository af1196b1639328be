"""The session folder written by ``gpuprof run`` and read by ``gpuprof analyze``.

The recorder gives it samples, events and trace files as they happen (``writer``: append-only
records that survive a crash, ``records``); the readers take it back as a
:class:`~gpuprof.session.reader.Session` (``reader``): the command, its exit, the NVML samples
and the paths of the rank traces. See :mod:`gpuprof.session.layout` for the documented,
versioned format. The reader (and with it pandas) is imported on first use, so that
``gpuprof run`` starts the job quickly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuprof.session.layout import SESSION_SCHEMA, is_session

if TYPE_CHECKING:
    from gpuprof.session.reader import Session, read_session


def __getattr__(name: str) -> Any:
    if name in ("Session", "read_session"):
        from gpuprof.session import reader

        return getattr(reader, name)
    raise AttributeError(name)


__all__ = ["SESSION_SCHEMA", "Session", "is_session", "read_session"]
