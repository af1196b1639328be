"""Which host call launched each device event, matched by correlation id.

Kineto (CUPTI / roctracer) gives every device activity the correlation id of the runtime or
driver API call that enqueued it (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...). Knowing
*when* the host issued a kernel is what tells "the device waited for the host" (the launch
came after the device went idle) from "the device waited for something else" (the kernel
was already queued). Both the step boundaries (:mod:`gpuprof.accounting.window`) and the
local rules (:mod:`gpuprof.accounting.rules`) use these arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gpuprof.model.table import Table, one_of
from gpuprof.model.timeline import Columns, Kind, RankTrace

if TYPE_CHECKING:
    import pandas as pd

# Device rows that are work on the device (or, for op-level timelines, a worker's op);
# GPU-side annotations (``gpu_user_annotation``) only mark ranges and are left out.
ACTIVITY_KINDS: tuple[int, ...] = (int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET), int(Kind.TIMER))
_API_KINDS: tuple[int, ...] = (int(Kind.RUNTIME), int(Kind.DRIVER))


def activity_mask(device: pd.DataFrame | Columns) -> npt.NDArray[np.bool_]:
    """Rows of a device table (or its :class:`Columns`) that are device work (not
    annotations)."""
    if isinstance(device, Table):  # the same mask is asked for several times per rank
        return device.derived("activity", _activity)  # type: ignore[no-any-return]
    return _activity(device)


def _activity(device: Any) -> npt.NDArray[np.bool_]:
    return one_of(device["kind"], ACTIVITY_KINDS)


@dataclass(frozen=True)
class Launches:
    """Per device row (same order as ``trace.device``): the launching API call.

    ``start_us``/``end_us`` are the host start/end of that call (NaN when unknown: no
    correlation id, or the call is not in the trace, e.g. it was issued before recording
    began); ``tid`` its host thread (-1 unknown). ``matched_share`` is the share of device
    activity rows with a known launch (``None`` when there are none).
    """

    start_us: npt.NDArray[np.float64]
    end_us: npt.NDArray[np.float64]
    tid: npt.NDArray[np.int64]
    matched_share: float | None


def match_launches(trace: RankTrace) -> Launches:
    """Match device rows to the runtime/driver calls that launched them (vectorized)."""
    dev = trace.device_cols
    host = trace.host_cols
    n = len(dev)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    tid = np.full(n, -1, dtype=np.int64)
    act = activity_mask(dev) if n else np.zeros(0, dtype=bool)
    if n == 0 or len(host) == 0:
        return Launches(start, end, tid, None if not act.any() else 0.0)
    hk = host["kind"]
    hc = host["correlation"]
    api = one_of(hk, _API_KINDS) & (hc >= 0)
    if not api.any():
        return Launches(start, end, tid, 0.0 if act.any() else None)
    # The first call of each correlation id; each device row looks its id up among them.
    ids, first = np.unique(hc[api], return_index=True)
    h_start = host["start_us"][api][first]
    h_end = host["end_us"][api][first]
    h_tid = host["tid"][api][first]
    dc = dev["correlation"]
    pos = np.minimum(np.searchsorted(ids, dc), ids.size - 1)
    ok = (ids[pos] == dc) & (dc >= 0)
    start[ok] = h_start[pos[ok]]
    end[ok] = h_end[pos[ok]]
    tid[ok] = h_tid[pos[ok]]
    n_act = int(act.sum())
    share = float((ok & act).sum()) / n_act if n_act else None
    return Launches(start, end, tid, share)
