"""The step clock's change-point test (gpuprof/record/changepoint.py): its stated delays,
its robustness to spikes and noise, and the whole-series replay the report uses."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprof.record.changepoint import ChangeTest, StepChangeDetector, detect_changes

MIN = math.log1p(0.10)  # the smallest shift that counts for a noiseless job


def run(series: list[float], test: ChangeTest | None = None) -> list[tuple[int, int, float, float]]:
    det = StepChangeDetector(test)
    out = []
    for i, dt in enumerate(series, start=1):
        c = det.add(i, dt)
        if c is not None:
            out.append((c.step, c.detected_step, c.before_s, c.after_s))
    return out


def test_the_stated_delays() -> None:
    t = ChangeTest()
    assert t.delay_steps(1.0) == 8 and t.delay_steps(2.0) == 3 and t.delay_steps(10.0) == 3
    with pytest.raises(ValueError):
        t.delay_steps(0.5)


@pytest.mark.parametrize("ratio, delay", [(math.exp(MIN), 8), (math.exp(2 * MIN), 3), (3.0, 3)])
def test_a_clean_shift_is_declared_exactly_when_stated(ratio: float, delay: int) -> None:
    series = [0.1] * 30 + [0.1 * ratio] * 20
    [(step, detected, before, after)] = run(series)
    assert step == 31  # the first slow step
    assert detected == 30 + delay
    assert before == pytest.approx(0.1) and after == pytest.approx(0.1 * ratio)


def test_a_shift_below_the_smallest_is_never_declared() -> None:
    assert run([0.1] * 30 + [0.104] * 2000) == []  # +4 %: under 10 %, the slack eats it
    assert run([0.1] * 30 + [0.107] * 2000) == []  # +7 %: its sums reach the threshold, slowly; still no change
    # A slow drift is declared once it has moved three quarters of the smallest shift.
    drift = [0.1] * 30 + [0.1 * (1 + 0.0005 * i) for i in range(400)]
    found = run(drift)
    assert found, "a drift of +20 % over the run is a change"
    _, detected, before, after = found[0]
    assert after / before >= math.exp(0.75 * MIN) and detected < 30 + 400


def test_one_or_two_spikes_in_a_row_never_declare_a_change() -> None:
    series = [0.1] * 30
    for _ in range(40):
        series += [5.0, 5.0] + [0.1] * 8  # a checkpoint write: two 50x steps, then back
    assert run(series) == []
    assert run([0.1] * 30 + [5.0] * 3 + [0.1] * 10)  # three in a row do: the stated minimum


def test_noise_sets_the_smallest_shift_and_no_false_alarms_over_long_runs() -> None:
    rng = random.Random(7)
    noisy = [0.1 * math.exp(rng.gauss(0, 0.05)) for _ in range(20000)]  # 5 % noise, no change
    assert run(noisy) == []
    det = StepChangeDetector()
    for i, dt in enumerate(noisy[:20], start=1):
        det.add(i, dt)
    assert det.shift is not None and det.shift > MIN  # 3 sigma of 5 % noise is more than 10 %


def test_a_noisy_shift_is_declared_within_the_stated_delay_and_located() -> None:
    rng = random.Random(3)
    hits = 0
    for _ in range(50):
        series = [0.1 * math.exp(rng.gauss(0, 0.02)) for _ in range(40)]
        series += [0.131 * math.exp(rng.gauss(0, 0.02)) for _ in range(40)]  # +31 %
        found = run(series)
        assert len(found) == 1
        step, detected, before, after = found[0]
        assert 41 <= detected <= 40 + ChangeTest().delay_steps(1.0)
        hits += abs(step - 41) <= 1
        assert after / before == pytest.approx(1.31, rel=0.06)
    assert hits >= 45  # the change's own step, or one off, nearly always


def test_a_fall_is_a_change_too_and_the_test_goes_on_after_one() -> None:
    series = [0.2] * 30 + [0.1] * 30 + [0.3] * 30
    found = run(series)
    assert [f[0] for f in found] == [31, 61]
    assert found[0][3] < found[0][2] and found[1][3] > found[1][2]


def test_detect_changes_leaves_profiled_windows_out_and_keeps_the_reference() -> None:
    steps = list(range(1, 101))
    fast = [0.1] * 100
    slow_window = [3.0 if 40 <= s <= 45 else 0.1 for s in steps]  # a profiled window, 30x slower
    assert detect_changes(steps, slow_window, skip=[(40, 45)]) == []
    assert detect_changes(steps, slow_window)  # without the skip, the window reads as a change
    # A change inside a window is declared on the first steps after it.
    shifted = [0.1 if s < 43 else 0.2 for s in steps]
    [c] = detect_changes(steps, shifted, skip=[(40, 45)])
    assert c.step == 46 and c.detected_step <= 46 + 3 and c.change_pct == pytest.approx(100.0)
    assert detect_changes(steps, fast) == []


@settings(max_examples=40, deadline=None)
@given(base=st.floats(1e-4, 100.0), ratio=st.floats(1.25, 20.0), at=st.integers(25, 200))
def test_any_large_enough_shift_is_declared_at_its_step(base: float, ratio: float, at: int) -> None:
    series = [base] * (at - 1) + [base * ratio] * 20
    found = run(series)
    assert len(found) == 1 and found[0][0] == at and found[0][1] - at + 1 <= 3
