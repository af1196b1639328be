"""The terminal report: recommendations first, every cause in the totals, any width."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from reportfactory import XSS, rank, rec, report

from gpuprof.model.report import CAUSES
from gpuprof.render import render
from gpuprof.render.text import render_text


def _two_ranks():
    return report(
        [rank(0, lost_ms={"dataloader": 30, "host": 5}), rank(1, lost_ms={"communication": 12})],
        [
            rec("dataloader", 25.0, "Use more DataLoader workers", ("waited 30 ms for [bold]batches[/bold]",), ("set num_workers=4",)),
            rec("host", 2.5, "Capture the step in a CUDA graph", ("1200 tiny kernels",), ("torch.compile(mode='reduce-overhead')",)),
        ],
        warnings=("rank 1: something odd",),
    )


def test_leads_with_recommendations_then_tables() -> None:
    text = render(_two_ranks(), "text", 100)
    first = text.index("Use more DataLoader workers")
    assert first < text.index("Capture the step") < text.index("Per rank") < text.index("Totals")
    # Evidence and actions are printed as written (rich markup in a trace string is not applied).
    assert "waited 30 ms for [bold]batches[/bold]" in text
    assert "set num_workers=4" in text
    assert "saves ~25.0% of step time" in text
    assert "rank 1: something odd" in text


def test_totals_have_every_cause_in_ms_and_percent() -> None:
    text = render(_two_ranks(), "text", 100)
    lines = {line.split()[1]: line for line in text.splitlines() if line.startswith("lost: ")}
    assert set(lines) == {c.value for c in CAUSES}
    # 200 ms of window: dataloader 30 ms = 15 %, communication 12 ms = 6 %, host 5 ms = 2.5 %.
    assert re.search(r"30\.0\s+15\.0%", lines["dataloader"])
    assert re.search(r"12\.0\s+6\.0%", lines["communication"])
    assert re.search(r"5\.0\s+2\.5%", lines["host"])
    assert re.search(r"0\.0\s+0\.0%", lines["straggler"])
    assert "76.5% of GPU time is compute" in text  # (200 - 47) / 200


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_fits_any_width(width: int) -> None:
    text = render_text(_two_ranks(), width, wrap=True)  # as on a terminal
    assert max(len(line) for line in text.splitlines()) <= width
    assert "lost: dataloader" in text and "15.0%" in text
    assert "\x1b[" not in text  # no colour unless asked


def test_wide_terminal_has_a_column_per_cause_narrow_one_the_largest() -> None:
    wide = render(_two_ranks(), "text", 160)
    header = next(line for line in wide.splitlines() if line.lstrip().startswith("rank"))
    for short in ("bubble", "comm", "straggler", "memory", "data", "sync", "host", "other"):
        assert short in header
    narrow = render(_two_ranks(), "text", 100)
    row0 = next(line for line in narrow.splitlines() if re.match(r"\s*0\s+4\s", line))
    assert "dataloader 30.0%" in row0 and "host 5.0%" in row0


def test_colour_only_when_asked() -> None:
    assert "\x1b[" in render_text(_two_ranks(), 100, color=True)


def test_many_ranks_are_summarized() -> None:
    ranks = [rank(i, lost_ms={"straggler": float(i % 50)}) for i in range(128)]
    text = render(report(ranks), "text", 100)
    rows = [line for line in text.splitlines() if re.match(r"\s*\d+\s+4\s+25\.0", line)]
    assert 4 <= len(rows) <= 16
    shown = {int(r.split()[0]) for r in rows}
    assert 49 in shown  # the lowest compute share (49 ms straggler) is listed
    assert 0 in shown or 50 in shown or 100 in shown  # and a highest (no straggler time)
    assert "of 128 ranks" in text


def test_cpu_only_trace_says_nothing_to_analyze() -> None:
    r = report([rank(0, window_ms=0.0, steps=0, device=None, extra={"note": "no GPU events: a CPU-only trace"})])
    text = render(r, "text", 100)
    assert "nothing to analyze" in text and "CPU-only" in text
    assert "Totals" not in text


def test_unknown_values_show_na() -> None:
    r = report(
        [rank(0, lost_ms={"host": 10}, steps=0)],
        extra={"samples": {"timeline": [{"t_s": 0.0, "gpu": 0}, {"t_s": 1.0, "gpu": 0, "gpu_util_pct": None}]}},
    )
    text = render(r, "text", 100)
    row = next(line for line in text.splitlines() if re.match(r"\s*0\s+0\s", line))
    assert "N/A" in row  # no steps: no step time (never 0)
    assert "GPU 0: mean N/A, p90 N/A, min N/A" in text


def test_utilization_summary_from_samples() -> None:
    # No per-GPU summary: every statistic comes from the same timeline points.
    pts = [{"t_s": float(t), "gpu": 0, "gpu_util_pct": u} for t, u in enumerate([20.0, 40.0, 90.0])]
    text = render(report([rank(0)], extra={"samples": {"timeline": pts}}), "text", 100)
    assert "GPU 0: mean 50%, p90 80%, min 20%, max 90% over 3 samples" in text


def test_summary_statistics_are_never_mixed_with_the_timeline_bins() -> None:
    # The timeline holds bin means (max 60 %); the polls behind them reached 100 %. A summary
    # without min/max shows N/A there rather than a max below its own p90.
    bins = [{"t_s": float(t), "end_s": t + 1.0, "gpu": 0, "gpu_util_pct": 60.0} for t in range(3)]
    gpus = [{"gpu": 0, "samples": 30, "mean_util_pct": 60.0, "p90_util_pct": 100.0}]
    text = render(report([rank(0)], extra={"samples": {"timeline": bins, "gpus": gpus}}), "text", 100)
    assert "GPU 0: mean 60%, p90 100%, min N/A, max N/A over 30 samples" in text


def test_xss_string_is_plain_text() -> None:
    text = render(report([rank(0, device=XSS)], [rec("host", 1.0, evidence=(XSS,))]), "text", 200)
    assert XSS in text


def test_real_trace(shared_traces: Path) -> None:
    from gpuprof.pipeline import analyze_paths
    from gpuprof.render.json import render_json

    rep = analyze_paths([shared_traces / "resnet50-nw0"])
    data = json.loads(render_json(rep))
    text = render(rep, "text", 100)
    r0 = data["ranks"][0]
    share = 100 * r0["compute_us"] / r0["window_us"]
    assert f"{share:.1f}% of GPU time is compute" in text
    for c in CAUSES:
        assert f"lost: {c.value}" in text
    if data["recommendations"]:
        assert data["recommendations"][0]["title"] in text


def _sample_findings() -> dict:
    """The real sample-analysis output shape, built from its own dataclasses."""
    from gpuprof.accounting.samples import GpuUtilization, IdlePhase, SampleFindings, ThrottleSeen, UtilBin

    gpu = GpuUtilization(gpu=0, uuid=None, samples=4, mean_util_pct=61.0, p90_util_pct=95.0, idle_samples_pct=25.0,
                         p50_util_pct=70.0, mem_peak_bytes=None, mem_total_bytes=None, mem_peak_pct=None,
                         energy_j=1234.0, lost_at_s=None, min_util_pct=0.0, max_util_pct=95.0)  # fmt: skip
    bins = tuple(UtilBin(gpu=0, start_s=float(i), end_s=float(i + 1), util_gpu_pct=u) for i, u in enumerate([0.0, 70.0, None, 95.0]))
    return SampleFindings(
        start_unix_s=0.0, duration_s=4.0, interval_s=1.0, gpus=(gpu,), timeline=bins,
        idle_phases=(IdlePhase(0.0, 1.0, "startup"),), idle_pct=25.0, periodic_idle=None, memory_pressure=(),
        throttling=(ThrottleSeen(reason="hw_thermal", gpus=(0,), busy_samples_pct=50.0, clock_loss_pct=20.0),),
        energy_j=1234.0, lost_gpus=(),
    ).to_dict()  # fmt: skip


def test_real_sample_findings_shape() -> None:
    text = render(report([rank(0)], extra={"samples": _sample_findings()}), "text", 160)
    assert "GPU 0: mean 61%, p90 95%, min 0%, max 95% over 4 samples; memory peak N/A; 1,234 J" in text
    assert "GPUs idle 25.0% of the run" in text
    assert "throttled (hw_thermal) on GPU 0 in 50.0% of busy samples" in text


def test_samples_only_run_still_shows_gpus() -> None:
    text = render(report([], extra={"samples": _sample_findings()}), "text", 160)
    assert "nothing to analyze" in text and "GPU 0: mean 61%" in text
    md = render(report([], extra={"samples": _sample_findings()}), "markdown")
    assert "| 0 | 4 | 61% | 95% | 0% | 95% | N/A |" in md
    page = render(report([], extra={"samples": _sample_findings()}), "html")
    assert page.count("<polyline") == 2  # bins 0 and 1 joined; bin 3 alone after the N/A bin


def test_the_combined_replay_of_overlapping_fixes_is_said_once_in_every_format() -> None:
    """Allocator frees inside the operators a CUDA graph would remove: the two fixes act on
    the same idle time, and the report says what both save together (one replay), below
    the sum of their estimates."""
    from pathlib import Path

    from gpuprof.pipeline import analyze_paths
    from gpuprof.render import render

    rep = analyze_paths([Path(__file__).resolve().parents[2] / "sample_traces" / "alloc-churn-rocm"])
    replayed = [r for r in rep.recommendations if r.whatif]
    assert len(replayed) >= 2
    combined = rep.extra["job"]["combined_savings_pct"]
    assert max(r.estimated_savings_pct for r in replayed) <= combined < sum(r.estimated_savings_pct for r in replayed)
    for fmt in ("text", "markdown", "html"):
        out = render(rep, fmt, width=200)
        assert "replayed together" in out and f"{combined:.1f}% saved, less than the" in out, fmt
        assert out.count("act partly on the same idle time") == 1, fmt
