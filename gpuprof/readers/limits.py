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

import math
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


# What the settings may be: below these no real trace is read, above them the limit is none
# (and 1e400 or 400 nines would overflow the byte counts).
MIN_EVENT_MB, MAX_EVENT_MB = 1.0, 1_000_000.0
MIN_INPUT_GB, MAX_INPUT_GB = 0.001, 1_000_000.0


def _event_limit_from_env() -> int:
    """``GPUPROF_MAX_EVENT_MB`` in bytes: unset or empty is the default; anything but a
    number from 1 to 1,000,000 MB is one line naming the variable (exit 2)."""
    raw = os.environ.get(EVENT_LIMIT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_EVENT_MB * MB
    try:
        mb = float(raw) if len(raw) <= 40 else math.nan
    except ValueError:
        mb = math.nan
    if not (MIN_EVENT_MB <= mb <= MAX_EVENT_MB):  # NaN, inf, 1e400, 1e-9, 0, negative
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        raise BadTraceError(
            f"{EVENT_LIMIT_ENV}={shown}: expected a number of MB from {MIN_EVENT_MB:g} to {MAX_EVENT_MB:,.0f} "
            f"(unset: {DEFAULT_MAX_EVENT_MB})"
        )
    return int(mb * MB)


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
        if not (0 < max_input_gb <= MAX_INPUT_GB):  # inf, nan, 1e300 (the command line's minimum is MIN_INPUT_GB)
            raise BadTraceError(
                f"--max-input-gb: expected a number of GB from {MIN_INPUT_GB:g} to {MAX_INPUT_GB:,.0f}, "
                f"got {max_input_gb:g}"
            )
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
            f"{EVENT_LIMIT_ENV}={min(max(2 * mb, MIN_EVENT_MB), MAX_EVENT_MB):g}",
            path,
        )
