"""Limits on what reading one trace file may cost, and the checks that enforce them.

A trace is untrusted input: a 10 MB ``.json.gz`` can hold 10 GB of text. Reading streams
(memory stays about one block of text plus one piece of events), and two limits bound
what is left:

* ``max_input_bytes``: the decompressed size of one file. The default,
  :data:`DEFAULT_MAX_INPUT_GB` GB, is several times the largest per-rank traces of real
  jobs (a few GB); ``--max-input-gb`` raises or lowers it.
* ``max_event_bytes``: one event, or a stretch of text holding no event boundary. No real
  event comes near the default (:data:`DEFAULT_MAX_EVENT_MB` MB; the largest events of real
  traces, with call stacks and input shapes, are KBs); only such text would have to be
  held whole. The environment variable ``GPUPROF_MAX_EVENT_MB`` raises it.

Passing either limit raises :class:`InputLimitError`: one line naming the file, the limit
and how to raise it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gpuprof.errors import BadTraceError

DEFAULT_MAX_INPUT_GB = 32.0
DEFAULT_MAX_EVENT_MB = 256
EVENT_LIMIT_ENV = "GPUPROF_MAX_EVENT_MB"
GB = 1_000_000_000
MB = 1_000_000


class InputLimitError(BadTraceError):
    """A file passed one of the :class:`ReadLimits`."""


def _event_limit_from_env() -> int:
    raw = os.environ.get(EVENT_LIMIT_ENV, "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MAX_EVENT_MB
    except ValueError:
        mb = DEFAULT_MAX_EVENT_MB
    return int(mb * MB) if mb > 0 else DEFAULT_MAX_EVENT_MB * MB


@dataclass(frozen=True)
class ReadLimits:
    """What reading one file may hold or read (bytes of decompressed JSON text)."""

    max_input_bytes: int = int(DEFAULT_MAX_INPUT_GB * GB)
    max_event_bytes: int = field(default_factory=_event_limit_from_env)

    @classmethod
    def from_gb(cls, max_input_gb: float | None) -> ReadLimits:
        """Limits with ``--max-input-gb`` applied (``None``: the default)."""
        if max_input_gb is None:
            return cls()
        return cls(max_input_bytes=int(max_input_gb * GB))

    def input_too_large(self, path: Path) -> InputLimitError:
        gb = self.max_input_bytes / GB
        return InputLimitError(
            f"holds more than {gb:g} GB of JSON text (decompressed), the --max-input-gb limit; "
            f"if the trace is really that large, raise it (e.g. --max-input-gb {max(2 * gb, 1):g})",
            path,
        )

    def event_too_large(self, path: Path, at_byte: int) -> InputLimitError:
        mb = self.max_event_bytes / MB
        return InputLimitError(
            f"holds more than {mb:g} MB of text without an event boundary (from byte {at_byte}): "
            f"no trace event is that large; if this one really is, raise the limit with "
            f"{EVENT_LIMIT_ENV}={int(2 * mb)}",
            path,
        )
