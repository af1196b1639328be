"""The gate's statistics against brute force: every count of U enumerated, every interval
checked against the test it inverts."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gpuprof.ci import stats


def _brute_counts(n: int, m: int) -> np.ndarray:
    """U for every way of choosing which n of n+m ranks are the first sample's."""
    counts = np.zeros(n * m + 1)
    for pos in itertools.combinations(range(n + m), n):
        chosen = set(pos)
        u = sum(1 for i in pos for j in range(n + m) if j not in chosen and i > j)
        counts[u] += 1
    return counts


def _brute_p(x: list[float], y: list[float]) -> float:
    """Two-sided exact p-value by enumerating every relabelling of the pooled values."""
    pooled = x + y
    n = len(x)
    u_of = lambda xs, ys: sum(1 for a in xs for b in ys if a > b)
    u_obs = u_of(x, y)
    us = []
    for pos in itertools.combinations(range(len(pooled)), n):
        xs = [pooled[i] for i in pos]
        ys = [pooled[i] for i in range(len(pooled)) if i not in pos]
        us.append(u_of(xs, ys))
    lower = sum(1 for u in us if u <= u_obs) / len(us)
    upper = sum(1 for u in us if u >= u_obs) / len(us)
    return min(1.0, 2 * min(lower, upper))


@pytest.mark.parametrize("n, m", [(1, 1), (1, 4), (2, 3), (3, 3), (4, 6), (5, 5), (6, 3)])
def test_null_counts_are_the_enumerated_ones(n: int, m: int) -> None:
    got = stats.null_counts(n, m)
    assert np.array_equal(got, _brute_counts(n, m))
    assert got.sum() == math.comb(n + m, n)


def test_null_counts_stay_exact_at_the_largest_exact_size() -> None:
    c = stats.null_counts(stats.EXACT_MAX, stats.EXACT_MAX)
    assert c.sum() == pytest.approx(math.comb(2 * stats.EXACT_MAX, stats.EXACT_MAX), rel=1e-12)
    assert np.array_equal(c, c[::-1]) and (c >= 1).all()  # symmetric, and no tail lost to rounding
    assert c[:3].tolist() == [1, 1, 2] and c[-1] == 1


def test_min_per_side_is_where_the_level_becomes_reachable() -> None:
    assert stats.min_per_side(0.99) == 5  # 2 / C(10, 5) = 0.0079 <= 0.01 < 2 / C(8, 4) = 0.029
    assert stats.min_per_side(0.95) == 4
    assert stats.min_per_side(0.999) == 7
    for conf in (0.9, 0.95, 0.99, 0.999):
        n = stats.min_per_side(conf)
        assert 2 / math.comb(2 * n, n) <= 1 - conf < 2 / math.comb(2 * n - 2, n - 1)


def test_complete_separation_has_the_smallest_p_value() -> None:
    s = stats.shift_estimate([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], 0.99)
    assert s.method == "exact" and s.p_value == pytest.approx(2 / 252)
    assert s.estimate == 5.0 and s.low == 1.0 and s.high == 9.0  # the extreme pairwise differences
    assert stats.shift_estimate([2, 3, 4, 5], [1, 6, 7, 8], 0.99).low is None  # 4 a side cannot reach 99 %


@pytest.mark.parametrize("seed", range(12))
def test_exact_p_value_and_interval_agree_with_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(3, 7)), int(rng.integers(3, 7))
    x = list(rng.normal(0.3 * (seed % 3), 1.0, n).round(6))
    y = list(rng.normal(0.0, 1.0, m).round(6))
    s = stats.shift_estimate(x, y, 0.9)
    assert s.method == "exact"
    assert s.p_value == pytest.approx(_brute_p(x, y))
    diffs = sorted(a - b for a in x for b in y)
    assert s.estimate == pytest.approx(float(np.median(diffs)))
    if s.low is not None and s.high is not None:
        # The interval inverts the test: it leaves 0 out exactly when p <= alpha; a shift
        # inside it is not rejected, one just beyond either end is.
        assert (s.low > 0 or s.high < 0) == (s.p_value <= 0.1)
        eps = 1e-6
        for delta in (s.low + eps, s.high - eps, s.estimate):
            if s.low + eps <= delta <= s.high - eps:
                assert _brute_p([a - delta for a in x], y) > 0.1
        for delta in (s.low - eps, s.high + eps):
            assert _brute_p([a - delta for a in x], y) <= 0.1


def test_a_tie_in_a_small_sample_stays_exact_and_on_the_safe_side() -> None:
    s = stats.shift_estimate([6, 7, 8, 9, 10], [1, 2, 3, 4, 6], 0.99)  # one tie: U = 24.5 of 25
    assert s.method == "exact" and s.p_value == pytest.approx(2 * 2 / 252)  # P(U >= 24), both sides
    assert s.low == 0.0 and s.high is not None  # the interval still exists at 5 a side
    untied = stats.shift_estimate([6.5, 7, 8, 9, 10], [1, 2, 3, 4, 6], 0.99)
    assert untied.p_value == pytest.approx(2 / 252) and untied.low is not None and untied.low > 0


def test_normal_approximation_with_ties_and_large_samples() -> None:
    rng = np.random.default_rng(1)
    x = np.round(rng.normal(1.0, 1.0, 400), 1)  # rounded: many ties
    y = np.round(rng.normal(0.0, 1.0, 300), 1)
    s = stats.shift_estimate(x, y, 0.99)
    assert s.method == "normal" and s.p_value < 1e-10
    assert s.low is not None and s.high is not None and s.low < 1.0 < s.high
    same = stats.shift_estimate(x, x, 0.99)
    assert same.p_value == pytest.approx(1.0) and same.estimate == 0.0
    flat = stats.shift_estimate([2.0] * 8, [2.0] * 9, 0.99)
    assert flat.estimate == 0.0 and flat.low == 0.0 and flat.high == 0.0  # no spread: exactly no shift


def test_beyond_the_cap_order_statistics_stand_in() -> None:
    rng = np.random.default_rng(2)
    big = rng.normal(0.05, 0.02, 5000)
    s = stats.shift_estimate(big, rng.normal(0.0, 0.02, 5000), 0.99)
    assert (s.n_x, s.n_y) == (stats.MAX_PER_SIDE, stats.MAX_PER_SIDE)
    assert s.low is not None and s.high is not None and s.low < 0.05 < s.high


def test_bootstrap_is_seeded_and_covers_the_difference() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.exponential(2.0, 40) + 3.0, rng.exponential(2.0, 50)
    a = stats.bootstrap_mean_diff(x, y, 0.99)
    assert a == stats.bootstrap_mean_diff(x, y, 0.99)  # the same data, the same interval
    assert a.low < a.estimate < a.high and a.estimate == pytest.approx(x.mean() - y.mean())
    assert a.significant
    zero = stats.bootstrap_mean_diff([0.0] * 6, [0.0] * 6, 0.99)
    assert (zero.estimate, zero.low, zero.high) == (0.0, 0.0, 0.0) and not zero.significant
    with pytest.raises(ValueError):
        stats.bootstrap_mean_diff([], [1.0], 0.99)


def test_between_run_variance_sees_run_offsets_only() -> None:
    rng = np.random.default_rng(4)
    assert stats.between_run_variance([rng.normal(0, 0.02, 30) for _ in range(2)]) is None  # two runs: unknown
    same = stats.between_run_variance([rng.normal(0, 0.02, 30) for _ in range(8)])
    assert same is not None and same < 0.005**2
    offsets = rng.normal(0, 0.03, 40)
    shifted = stats.between_run_variance([rng.normal(o, 0.02, 30) for o in offsets])
    assert shifted is not None and 0.02 < math.sqrt(shifted) < 0.04


@pytest.mark.parametrize(
    "df, p, table",
    [(1, 0.975, 12.7062), (2, 0.975, 4.3027), (4, 0.995, 4.6041), (10, 0.995, 3.1693), (30, 0.95, 1.6973), (1000, 0.995, 2.5808)],
)
def test_student_quantiles_match_the_tables(df: int, p: float, table: float) -> None:
    assert stats.t_quantile(p, df) == pytest.approx(table, abs=5e-4)
    assert stats.t_quantile(1 - p, df) == pytest.approx(-table, abs=5e-4)
    assert stats.t_cdf(stats.t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
