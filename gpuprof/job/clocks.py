"""Clock alignment: one offset per trace file, so that the ranks' times can be compared.

Ranks recorded on different hosts have skewed clocks, so raw timestamps cannot be
compared. A collective cannot finish on any member before the last member has arrived,
and it finishes on all of them within microseconds, so END times of a matched
collective are (nearly) simultaneous. Each trace file's clock offset is the median,
over its matched collectives, of its end time minus the median end time of that
collective across ranks; two rounds make it robust to a few badly matched calls.
Ranks from the same file share one clock and are not shifted against each other.

:func:`clock_offsets` works on the integer codes of :mod:`gpuprof.job.collectives`' matched
calls; an offset is subtracted from a rank's own times to put them on the common clock.
"""

from __future__ import annotations

import numpy as np

from gpuprof.model import grouping


def clock_offsets(key: np.ndarray, n_keys: int, src: np.ndarray, n_src: int, end: np.ndarray) -> np.ndarray:
    """Offset per source code (us) so that matched collectives end together (see the module
    docstring): ``key`` and ``end`` per call, ``src`` its trace file's code."""
    offsets = np.zeros(n_src)
    if n_src < 2:
        return offsets
    lo = np.full(n_keys, n_src)
    hi = np.full(n_keys, -1)
    np.minimum.at(lo, key, src)
    np.maximum.at(hi, key, src)
    multi = lo[key] != hi[key]
    k, sc, e = key[multi], src[multi], end[multi]
    if k.size:
        kid, nk = grouping.groups(k)
        seen = np.unique(sc)
        for _ in range(2):
            aligned = e - offsets[sc]
            ref = grouping.median(kid, aligned, nk)[kid]
            delta = grouping.median(sc, aligned - ref, n_src)
            offsets[seen] += delta[seen]
        # Fix the gauge: only differences between clocks are meaningful.
        offsets -= float(np.median(offsets))
    return offsets


__all__ = ["clock_offsets"]
