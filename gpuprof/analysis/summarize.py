"""RankTrace -> RankSummary: the window, its compute/lost partition and the local claims.

The local rules that claim lost time for a cause live in :mod:`gpuprof.analysis.rules`.
"""

from __future__ import annotations

import pandas as pd

from gpuprof.analysis import intervals as iv
from gpuprof.analysis.summary import COMMS_COLUMNS, RankSummary
from gpuprof.analysis.window import StepSelection, select_window
from gpuprof.model.report import Cause
from gpuprof.model.timeline import Category, RankTrace


def _empty_comms() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype="float64") for c in COMMS_COLUMNS})


def summarize(trace: RankTrace, selection: StepSelection = StepSelection()) -> RankSummary:
    window = select_window(trace, selection)
    if window is None:
        return RankSummary(
            rank=trace.rank,
            source=trace.source,
            fmt=trace.fmt,
            device_name=trace.device_name,
            device_memory_bytes=trace.device_memory_bytes,
            window=(0.0, 0.0),
            steps=(),
            compute=iv.empty(),
            lost=iv.empty(),
            claims={},
            comms=_empty_comms(),
            parallel=dict(trace.parallel),
            world_size=trace.world_size,
            warnings=trace.warnings,
            empty_reason="no GPU activity in this trace (CPU-only?)",
        )
    lo, hi = window.start_us, window.end_us
    dev = trace.device
    is_compute = dev["category"].to_numpy() == int(Category.COMPUTE)
    compute = iv.clip(
        iv.union(dev["start_us"].to_numpy()[is_compute], dev["end_us"].to_numpy()[is_compute]), lo, hi
    )
    compute = iv.normalize(compute)
    lost = iv.complement(compute, lo, hi)
    claims: dict[Cause, iv.Intervals] = {}
    warnings = trace.warnings + ((window.note,) if window.note else ())
    return RankSummary(
        rank=trace.rank,
        source=trace.source,
        fmt=trace.fmt,
        device_name=trace.device_name,
        device_memory_bytes=trace.device_memory_bytes,
        window=(lo, hi),
        steps=window.steps,
        compute=compute,
        lost=lost,
        claims=claims,
        comms=_empty_comms(),
        parallel=dict(trace.parallel),
        world_size=trace.world_size,
        warnings=warnings,
    )

