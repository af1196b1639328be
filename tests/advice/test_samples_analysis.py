"""Sample findings and advice on sample tables whose answer is known by construction."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest

from gpuprof.accounting.samples import IDLE_UTIL_PCT, summarize_samples
from gpuprof.advice.samples import advise_samples
from gpuprof.model.report import Cause
from gpuprof.session.layout import SAMPLE_COLUMNS

GiB = 1024**3


def table(
    n_gpus: int, duration_s: float, interval_s: float, values: Callable[[int, float], dict[str, Any]]
) -> pd.DataFrame:
    """One row per GPU per poll; columns the session's, NaN where ``values`` says nothing."""
    rows = []
    for t in np.arange(0.0, duration_s, interval_s):
        for g in range(n_gpus):
            row: dict[str, Any] = {c: np.nan for c in SAMPLE_COLUMNS}
            row.update(time_unix_s=1e9 + float(t), gpu=g, uuid=f"GPU-{g}", lost=False)
            row.update(values(g, float(t)))
            rows.append(row)
    df = pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))
    df["lost"] = df["lost"].astype(bool)
    return df


def rl(period_s: float = 40.0, idle_s: float = 15.0, offset_s: float = 5.0) -> Callable[[int, float], dict[str, Any]]:
    """Busy at 90% except ``idle_s`` out of every ``period_s``, the idle phase starting at ``offset_s``."""

    def values(g: int, t: float) -> dict[str, Any]:
        phase = (t - offset_s) % period_s
        idle = t >= offset_s and phase < idle_s
        return {"util_gpu_pct": 0.0 if idle else 90.0, "mem_used_bytes": 40 * GiB, "mem_total_bytes": 80 * GiB,
                "power_w": 100.0 if idle else 600.0}

    return values


def test_periodic_idle_period_and_duty_cycle() -> None:
    f = summarize_samples(table(4, 400.0, 0.5, rl()))
    assert f is not None
    p = f.periodic_idle
    assert p is not None
    assert p.period_s == pytest.approx(40.0)
    assert p.mean_idle_s == pytest.approx(15.0, abs=0.5)
    assert p.duty_cycle_pct == pytest.approx(37.5, abs=1.5)
    # Phases at 5, 45, ..., 365 s: all interior except the last, which runs to 380 < 400.
    assert p.phases == 10
    assert p.idle_pct_of_run == pytest.approx(100 * 150 / 400, abs=1.0)
    assert f.idle_pct == pytest.approx(37.5, abs=1.0)


def test_periodic_idle_advice_is_actionable_and_honest() -> None:
    f = summarize_samples(table(2, 400.0, 0.5, rl()))
    recs = advise_samples(f)
    (rec,) = [r for r in recs if r.id == "samples-periodic-idle"]
    assert rec.category is Cause.OTHER
    assert "periodic phases of ~15 s every ~40 s" in rec.title and "overlap rollout" in rec.title
    assert rec.estimated_savings_pct == pytest.approx(37.5, abs=1.0)


def test_startup_that_is_one_more_period_joins_the_pattern() -> None:
    f = summarize_samples(table(1, 400.0, 0.5, rl(offset_s=0.0)))
    assert f is not None and f.periodic_idle is not None
    assert f.periodic_idle.includes_startup
    assert f.periodic_idle.phases == 10
    assert not [r for r in advise_samples(f) if r.id == "samples-startup-idle"]


def test_irregular_idle_is_not_periodic() -> None:
    idle = [(20, 30), (35, 60), (150, 155)]

    def values(g: int, t: float) -> dict[str, Any]:
        return {"util_gpu_pct": 0.0 if any(a <= t < b for a, b in idle) else 80.0}

    f = summarize_samples(table(2, 300.0, 1.0, values))
    assert f is not None and f.periodic_idle is None
    assert [(p.start_s, p.end_s) for p in f.idle_phases] == [(20.0, 30.0), (35.0, 60.0), (150.0, 155.0)]
    (rec,) = [r for r in advise_samples(f) if r.id == "samples-idle-phases"]
    assert rec.estimated_savings_pct == pytest.approx(100 * 40 / 300)


def test_job_is_idle_only_when_every_gpu_is() -> None:
    def values(g: int, t: float) -> dict[str, Any]:
        return {"util_gpu_pct": 0.0 if (g == 0 and 10 <= t < 50) else 70.0}

    f = summarize_samples(table(2, 100.0, 1.0, values))
    assert f is not None and f.idle_phases == ()
    assert f.gpus[0].idle_samples_pct == pytest.approx(40.0)
    assert f.gpus[1].idle_samples_pct == pytest.approx(0.0)


def test_short_blips_are_not_phases() -> None:
    f = summarize_samples(table(1, 60.0, 0.5, lambda g, t: {"util_gpu_pct": 0.0 if 10 <= t < 11 else 90.0}))
    assert f is not None and f.idle_phases == ()


def test_unknown_utilization_is_none_not_idle() -> None:
    f = summarize_samples(table(2, 30.0, 1.0, lambda g, t: {"mem_used_bytes": 1, "mem_total_bytes": 2}))
    assert f is not None
    assert f.idle_pct is None and f.idle_phases == ()
    assert f.gpus[0].mean_util_pct is None
    assert f.energy_j is None
    assert advise_samples(f) == []


def test_memory_near_capacity() -> None:
    def values(g: int, t: float) -> dict[str, Any]:
        used = 79 * GiB if (g == 1 and t >= 50) else 40 * GiB
        return {"util_gpu_pct": 90.0, "mem_used_bytes": used, "mem_total_bytes": 80 * GiB}

    f = summarize_samples(table(2, 100.0, 1.0, values))
    assert f is not None
    (m,) = f.memory_pressure
    assert m.gpu == 1 and m.peak_pct == pytest.approx(100 * 79 / 80)
    assert m.time_near_capacity_pct == pytest.approx(50.0)
    (rec,) = [r for r in advise_samples(f) if r.category is Cause.MEMORY]
    assert rec.estimated_savings_pct == 0.0 and "GPU 1" in rec.title


def test_throttling_share_and_clock_loss() -> None:
    def values(g: int, t: float) -> dict[str, Any]:
        capped = t >= 75
        return {"util_gpu_pct": 95.0, "clock_event_reasons": 0x4 if capped else 0,
                "clock_sm_mhz": 1500.0 if capped else 2000.0}

    f = summarize_samples(table(1, 100.0, 1.0, values))
    assert f is not None
    (th,) = f.throttling
    assert th.reason == "sw_power_cap" and th.busy_samples_pct == pytest.approx(25.0)
    assert th.clock_loss_pct == pytest.approx(25.0)
    (rec,) = advise_samples(f)
    assert rec.estimated_savings_pct == pytest.approx(25.0 * 0.25)


def test_idle_gpu_reason_is_not_throttling() -> None:
    f = summarize_samples(table(1, 20.0, 1.0, lambda g, t: {"util_gpu_pct": 0.0, "clock_event_reasons": 0x1}))
    assert f is not None and f.throttling == ()


def test_energy_from_counter_and_from_power() -> None:
    counter = table(1, 10.0, 1.0, lambda g, t: {"energy_mj": 5000.0 + 300_000.0 * t, "power_w": 1.0})
    f = summarize_samples(counter)
    assert f is not None and f.energy_j == pytest.approx(300.0 * 9)
    power = table(1, 10.0, 1.0, lambda g, t: {"power_w": 200.0})
    f2 = summarize_samples(power)
    assert f2 is not None and f2.energy_j == pytest.approx(200.0 * 9)


def test_lost_gpu_is_reported() -> None:
    df = table(2, 20.0, 1.0, lambda g, t: {"util_gpu_pct": 80.0})
    df = df[~((df["gpu"] == 1) & (df["time_unix_s"] > 1e9 + 12))].copy()
    lost_row = df.index[(df["gpu"] == 1) & (df["time_unix_s"] == 1e9 + 12)]
    df.loc[lost_row, "lost"] = True
    df.loc[lost_row, "util_gpu_pct"] = np.nan
    f = summarize_samples(df)
    assert f is not None and f.lost_gpus == (1,)
    assert f.gpus[1].lost_at_s == pytest.approx(12.0)
    assert any(r.id == "samples-gpu-lost" for r in advise_samples(f))


def test_timeline_bins_and_to_dict() -> None:
    f = summarize_samples(table(1, 400.0, 0.5, rl()))
    assert f is not None
    d = f.to_dict()
    assert len(d["timeline"]) <= 41
    assert {"t_s", "gpu", "gpu_util_pct"} <= set(d["timeline"][0])
    # 400 s in 10 s bins: 0-10 s is half busy (idle from 5 s), 10-20 s idle, 20-30 s busy.
    assert [b["gpu_util_pct"] for b in d["timeline"][:3]] == pytest.approx([45.0, 0.0, 90.0])
    assert d["timeline"][1]["t_s"] == 10.0
    import json

    json.dumps(d)  # JSON-ready


def test_input_is_not_mutated() -> None:
    df = table(1, 30.0, 1.0, lambda g, t: {"util_gpu_pct": 50.0})
    before = df.copy()
    summarize_samples(df)
    pd.testing.assert_frame_equal(df, before)


def test_empty_table_has_no_findings() -> None:
    assert summarize_samples(pd.DataFrame(columns=list(SAMPLE_COLUMNS))) is None
    assert advise_samples(None) == []
    assert IDLE_UTIL_PCT == 5.0


def test_gpus_polled_at_slightly_different_times_are_one_poll() -> None:
    df = table(2, 400.0, 0.5, rl())
    df.loc[df["gpu"] == 1, "time_unix_s"] += 0.013  # GPU 1 read 13 ms after GPU 0 in each poll
    f = summarize_samples(df)
    assert f is not None and f.periodic_idle is not None
    assert f.interval_s == pytest.approx(0.5)
    assert f.periodic_idle.period_s == pytest.approx(40.0, abs=0.5)
    assert f.idle_pct == pytest.approx(37.5, abs=1.0)
