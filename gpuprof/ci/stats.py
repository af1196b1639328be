"""The statistics of the CI gate, written with numpy alone (no scipy at run time).

Pure functions of arrays; docs/gate.md says why these were chosen.

- :func:`shift_estimate`: the Mann-Whitney U test of two samples and the Hodges-Lehmann
  estimate of the shift between them, with the distribution-free confidence interval that
  inverts the same test (Moses' interval). Applied to log step times, the shift is a
  ratio. The interval and the test agree by construction: the interval leaves out 0
  exactly when the test rejects "no shift" at its level. Exact (the null distribution of
  U counted, :func:`null_counts`) for up to :data:`EXACT_MAX` values per side (a tie counts
  half, and the p-value takes U's floor and ceiling: on the safe side); beyond, the normal
  approximation with the tie correction and a continuity correction.
- :func:`min_per_side`: the fewest values per side with which the exact test can reach
  its level at all (below it, no difference is ever significant: the gate says
  "inconclusive").
- :func:`bootstrap_mean_diff`: the difference of two means with a percentile bootstrap
  interval, seeded, so the same data always give the same interval (per-cause time per
  step, where the mean is what adds up to the step).
- :func:`between_run_variance`: the run-to-run variance of run medians beyond what each
  run's own step noise explains (a method-of-moments estimate), for pooled baselines, and
  Student's t (:func:`t_quantile`, through the incomplete beta function) for its few
  degrees of freedom.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

EXACT_MAX = 50  # values per side up to which U's null distribution is counted exactly
MAX_PER_SIDE = 2000  # beyond this, evenly spaced order statistics stand in for a side
N_BOOT = 2000  # bootstrap resamples
_BOOT_CELLS = 4_000_000  # resample values held in memory at once


def normal_quantile(p: float) -> float:
    """The standard normal quantile (``p`` in (0, 1))."""
    return NormalDist().inv_cdf(p)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function, evaluated by the
    modified Lentz method (converges fast for x < (a + 1) / (a + b + 2))."""
    tiny = 1e-300

    def nonzero(v: float) -> float:
        return v if abs(v) > tiny else tiny

    c, d = 1.0, 1.0 / nonzero(1.0 - (a + b) * x / (a + 1.0))
    h = d
    for m in range(1, 500):
        even = m * (b - m) * x / ((a + 2 * m - 1.0) * (a + 2 * m))
        d = 1.0 / nonzero(1.0 + even * d)
        c = nonzero(1.0 + even / c)
        h *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1.0))
        d = 1.0 / nonzero(1.0 + odd * d)
        c = nonzero(1.0 + odd / c)
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def _beta_regularized(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` degrees of freedom."""
    tail = 0.5 * _beta_regularized(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (``p`` in (0, 1)), by bisection on :func:`t_cdf`."""
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def normal_two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard normal statistic."""
    return min(1.0, math.erfc(abs(z) / math.sqrt(2.0)))


@functools.lru_cache(maxsize=256)
def _exact_counts(n: int, m: int) -> tuple[int, ...]:
    """:func:`null_counts` in whole numbers (Python integers: exact at any size)."""
    if n > m:
        n, m = m, n
    size = n * m + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, n + 1):
        k = m + i
        for j in range(size - 1, k - 1, -1):  # multiply by (1 - q^k), from the top down
            poly[j] -= poly[j - k]
        for j in range(i, size):  # divide by (1 - q^i): new[j] = p[j] + new[j - i]
            poly[j] += poly[j - i]
    return tuple(poly)


def null_counts(n: int, m: int) -> FloatArray:
    """How many of the C(n+m, n) orderings of two untied samples give each value of U
    (0..n*m): the coefficients of the Gaussian binomial [n+m choose n]_q, built as the
    product over i of (1 - q^(m+i)) / (1 - q^i), in power-series arithmetic truncated at
    degree n*m (each coefficient depends only on lower ones, so the truncation is exact),
    in whole numbers (floating point would lose the tails to cancellation)."""
    return np.array(_exact_counts(n, m), dtype=np.float64)


@functools.lru_cache(maxsize=256)
def _exact_cdf(n: int, m: int) -> FloatArray:
    counts = _exact_counts(n, m)
    total = sum(counts)
    running = 0
    out = np.empty(len(counts))
    for u, c in enumerate(counts):
        running += c
        out[u] = running / total  # each ratio of exact integers rounded once
    out.setflags(write=False)
    return out


def min_per_side(confidence: float) -> int:
    """The fewest values per side (equal sides) for which the two-sided exact test at level
    ``1 - confidence`` can reject at all: the smallest n with 2 / C(2n, n) <= alpha."""
    alpha = 1.0 - confidence
    n = 1
    while 2.0 / math.comb(2 * n, n) > alpha:
        n += 1
    return n


@dataclass(frozen=True)
class Shift:
    """The shift of ``x`` against ``y`` (x - y; on log values, the log of a ratio).

    ``estimate`` is the Hodges-Lehmann estimate (the median of all pairwise differences),
    ``low``/``high`` the interval at ``confidence`` (``None`` when the samples are too small
    for the level to be reachable), ``p_value`` the two-sided Mann-Whitney p-value,
    ``method`` ``"exact"`` or ``"normal"``, ``n_x``/``n_y`` the sizes used."""

    estimate: float
    low: float | None
    high: float | None
    p_value: float
    method: str
    n_x: int
    n_y: int


def _thin(values: FloatArray) -> FloatArray:
    """At most :data:`MAX_PER_SIDE` values: evenly spaced order statistics, which keep the
    sample's distribution (and the result deterministic)."""
    s = np.sort(values)
    if s.size <= MAX_PER_SIDE:
        return s
    return s[np.linspace(0, s.size - 1, MAX_PER_SIDE).round().astype(np.int64)]


def _tie_term(pooled: FloatArray) -> float:
    _, counts = np.unique(pooled, return_counts=True)
    c = counts.astype(np.float64)
    return float(np.sum(c**3 - c))


def shift_estimate(x: npt.ArrayLike, y: npt.ArrayLike, confidence: float) -> Shift:
    """Mann-Whitney U test, Hodges-Lehmann shift and its interval (module docstring).

    ``x`` and ``y`` must be finite and non-empty. The interval is
    ``[D_(c+1), D_(nm-c)]`` over the sorted pairwise differences D, with ``c`` the largest
    count such that P(U <= c) <= alpha / 2 under "no shift"."""
    xs = _thin(np.asarray(x, dtype=np.float64))
    ys = _thin(np.asarray(y, dtype=np.float64))
    n, m = xs.size, ys.size
    if n == 0 or m == 0:
        raise ValueError("shift_estimate needs two non-empty samples")
    alpha = 1.0 - confidence
    diffs = (xs[:, None] - ys[None, :]).ravel()
    nm = diffs.size
    u = float(np.count_nonzero(diffs > 0)) + 0.5 * float(np.count_nonzero(diffs == 0))
    pooled = np.concatenate((xs, ys))
    ties = _tie_term(pooled)
    c: int | None
    if n <= EXACT_MAX and m <= EXACT_MAX:
        # Ties (step times are whole microseconds) count half in U; the untied distribution
        # then gives a p-value on the safe side (floor and ceiling of U), rather than a
        # normal approximation that cannot reach 99 % with five steps a side.
        method = "exact"
        cdf = _exact_cdf(n, m)
        lower_tail = float(cdf[math.ceil(u)])  # P(U <= u), a tie's half rounded up
        upper_tail = float(cdf[nm - math.floor(u)])  # P(U >= u) = P(U <= nm - u): U is symmetric
        p = min(1.0, 2.0 * min(lower_tail, upper_tail))
        ok = np.nonzero(cdf <= alpha / 2.0)[0]
        c = int(ok[-1]) if ok.size else None
    else:
        method = "normal"
        total = n + m
        var = n * m / 12.0 * ((total + 1) - ties / (total * (total - 1)))
        sd = math.sqrt(max(var, 0.0))
        mean = nm / 2.0
        if sd == 0.0:
            p, c = 1.0, None
        else:
            z = (abs(u - mean) - 0.5) / sd
            p = normal_two_sided_p(max(z, 0.0))
            crit = math.floor(mean - 0.5 - normal_quantile(1.0 - alpha / 2.0) * sd)
            c = crit if crit >= 0 else None
        if sd == 0.0 and np.all(diffs == 0):
            c = 0  # every value equal: the shift is exactly 0, whatever the level
    mid = (nm - 1) // 2
    picks = sorted({mid, nm // 2, *(() if c is None else (c, nm - 1 - c))})
    part = np.partition(diffs, picks)
    estimate = 0.5 * (float(part[mid]) + float(part[nm // 2]))
    if c is None or c > nm - 1 - c:
        return Shift(estimate, None, None, p, method, n, m)
    return Shift(estimate, float(part[c]), float(part[nm - 1 - c]), p, method, n, m)


def _boot_means(values: FloatArray, rng: np.random.Generator, n_boot: int) -> FloatArray:
    n = values.size
    out = np.empty(n_boot)
    rows = max(1, _BOOT_CELLS // max(n, 1))
    for start in range(0, n_boot, rows):
        k = min(rows, n_boot - start)
        out[start : start + k] = values[rng.integers(0, n, size=(k, n))].mean(axis=1)
    return out


@dataclass(frozen=True)
class MeanDiff:
    """Difference of means ``x - y`` with its bootstrap interval at ``confidence``."""

    estimate: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        return self.low > 0.0 or self.high < 0.0


def bootstrap_mean_diff(
    x: npt.ArrayLike, y: npt.ArrayLike, confidence: float, seed: int = 0, n_boot: int = N_BOOT
) -> MeanDiff:
    """``mean(x) - mean(y)`` and its percentile bootstrap interval (each sample resampled
    on its own, ``n_boot`` times, from a generator seeded with ``seed``)."""
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.size == 0 or ys.size == 0:
        raise ValueError("bootstrap_mean_diff needs two non-empty samples")
    rng = np.random.default_rng(seed)
    d = _boot_means(xs, rng, n_boot) - _boot_means(ys, rng, n_boot)
    alpha = 1.0 - confidence
    low, high = np.quantile(d, [alpha / 2.0, 1.0 - alpha / 2.0])
    return MeanDiff(float(xs.mean() - ys.mean()), float(low), float(high))


def usable_runs(runs: list[FloatArray]) -> int:
    """The runs :func:`between_run_variance` can use (two values or more)."""
    return sum(1 for r in runs if len(r) >= 2)


def between_run_variance(runs: list[FloatArray]) -> float | None:
    """The variance of the runs' medians beyond what their own steps' noise explains:
    ``max(0, var(medians) - mean(var of each median))``, each median's variance taken as
    ``pi/2 * s^2 / n`` (the large-sample variance of a median). ``None`` with fewer than
    three runs of at least two values: too few to say. It has ``usable_runs - 1`` degrees
    of freedom: use Student's quantile with it."""
    usable = [np.asarray(r, dtype=np.float64) for r in runs if len(r) >= 2]
    if len(usable) < 3:
        return None
    medians = np.array([np.median(r) for r in usable])
    own = np.array([math.pi / 2.0 * float(np.var(r, ddof=1)) / r.size for r in usable])
    return max(0.0, float(np.var(medians, ddof=1)) - float(own.mean()))
