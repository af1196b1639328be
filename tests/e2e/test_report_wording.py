"""What the report says, case by case (issue 21, sections 1 and 2): each wording bug of the
issue on the trace that showed it, the caveats beside the savings they qualify, the window
without step markers, advice fitted to the optimizer the trace names, and --brief / --top.
The rules over every trace are in test_report_invariants.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from analyzed import report_of
from clirun import run_cli
from reportfactory import rank, report

from gpuprof.model.report import Report
from gpuprof.pipeline import run_analysis
from gpuprof.render import figures as fg
from gpuprof.render.text import render_text
from gpuprof.util import phrases

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _shared(name: str, root: str) -> Report:
    return report_of(Path(root) / name)  # gpuprof.analyze, once per session


@pytest.fixture
def shared(shared_traces: Path):  # type: ignore[no-untyped-def]
    return lambda name: _shared(name, str(shared_traces))


def _text(r: Report) -> str:
    return render_text(r, 100, wrap=False)


# --- section 1: one number for one thing -------------------------------------------------------


def test_combined_savings_name_the_replayed_recommendations_and_follow_the_sum(shared) -> None:  # type: ignore[no-untyped-def]
    r = shared("megatron-pp4-timeline")
    assert [i for i, x in enumerate(r.recommendations, 1) if x.whatif] == [1, 2, 3]
    line = fg.combined_line(r)
    assert line is not None and line.startswith("Recommendations 1, 2 and 3 replayed together: step 2.21 s -> ")
    total = sum(x.estimated_savings_pct for x in r.recommendations if x.whatif)
    assert f"more than the {total:.1f}% they save one by one: these fixes reinforce each other" in line
    a100 = fg.combined_line(shared("a100-2rank-nccl"))
    assert a100 is not None and "Recommendations 1 and 2" in a100 and "less than the 80.5%" in a100


def test_the_largest_savings_say_which_recommendation_carries_them_or_why_none(shared) -> None:  # type: ignore[no-untyped-def]
    text = _text(shared("dlrm-8rank"))
    assert "Largest single savings" not in text
    carried = next(ln for ln in text.splitlines() if "Replayed alone, the recommended fixes save" in ln)
    assert "free launches 32.7% (recommendation 1)" in carried
    others = next(ln for ln in text.splitlines() if "Replayed but not recommended" in ln)
    assert "free host 54.9% (every host cost gone at once: the bound of any host-side fix, not one change)" in others
    assert re.search(r"no sync 8\.1% \(no recommendation acts on it: sync holds 0\.7% of the job's time\)", others)


def test_one_step_statistic_named_and_one_duration_formatter(shared) -> None:  # type: ignore[no-untyped-def]
    r = shared("resnet50-nw0")
    text = _text(r)
    assert "mean step 208.6 ms" in text.splitlines()[0]  # the replay's step; the median (211.8 ms) is gone
    assert "211.8" not in text and "its step 208.6 ms ->" in text
    mega = _text(shared("megatron-pp4-timeline"))
    assert "2,208" not in mega.split("Per rank")[0] and "2208" not in mega  # 2.21 s, one way
    assert phrases.duration(2_208_900) == "2.21 s" and phrases.duration(999.7) == "1.0 ms"


def test_without_step_markers_the_window_is_the_unit(shared) -> None:  # type: ignore[no-untyped-def]
    r = shared("b200-eager-rank0")
    text = _text(r)
    head = text.splitlines()[0]
    assert "0 steps" not in head and "no step markers: the window is first to last GPU activity, 84.5 ms" in head
    advice = "\n".join(ln for ln in text.split("Per rank")[0].splitlines() if not ln.startswith("   > "))
    for word in ("per step", "/step", "of step time", "of the step", "job step"):
        assert word not in advice, word
    assert "saves ≤59.1% of the window" in advice and "the window 84.5 ms -> 34.5 ms" in advice


# --- section 2: caveats beside the number they qualify ------------------------------------------


def test_a_saving_from_part_of_the_job_is_an_upper_bound_said_beside_it(shared) -> None:  # type: ignore[no-untyped-def]
    r = shared("mi300-resnet-ckpt-rank0")
    top = r.recommendations[0]
    assert top.category.value == "communication" and top.savings_bound == "upper"
    assert "upper bound: 1 of 8 ranks profiled" in top.caveats
    meta = next(ln for ln in _text(r).splitlines() if ln.startswith("   communication · "))
    assert meta.startswith("   communication · saves ≤61.5% of step time (") and "upper bound: 1 of 8 ranks profiled" in meta


def test_the_profilers_slowing_of_the_host_is_said_on_the_host_saving_not_at_the_bottom(shared) -> None:  # type: ignore[no-untyped-def]
    r = shared("a100-2rank-nccl")
    host = r.recommendations[0]
    assert host.category.value == "host"
    assert any(c.startswith("host time may be inflated by the profiler: host ops run slow") for c in host.caveats)
    text = _text(r)
    first_meta = next(ln for ln in text.splitlines() if ln.startswith("   host · "))
    assert "host ops run slow" in first_meta
    warnings = text.split("Warnings")[1] if "Warnings" in text else ""
    assert "host ops run slow" not in warnings
    assert any("host ops run slow" in w for w in r.warnings)  # still in the JSON report's warnings


def test_one_profiled_step_is_said_once_under_the_headline(shared) -> None:  # type: ignore[no-untyped-def]
    text = _text(shared("dlrm-8rank"))
    lines = text.splitlines()
    assert lines[1] == "  ! Every estimate below rests on one profiled step (low confidence): profile a few steps to confirm."
    assert text.lower().count("profiled step") == 1


def test_no_source_path_or_internal_id_in_the_prose(shared) -> None:  # type: ignore[no-untyped-def]
    from gpuprof.render import render

    r = shared("a100-2rank-nccl")
    page = render(r, "html").split('<script type="application/json"')[0]
    for text in (_text(r), page):
        assert "gpuprof/job/whatifs.py" not in text and "host-ddp-buffer-sync" not in text
        assert "What-if 'free_launches'" not in text and "replayed as" not in text
    mega = render(shared("megatron-pp4-timeline"), "html").split('<script type="application/json"')[0]
    assert "double_microbatches" not in mega and "straggler-barrier" not in mega


# --- the text bugs, each on a report that showed it ---------------------------------------------


def test_bandwidth_not_measurable_is_said_once(shared) -> None:  # type: ignore[no-untyped-def]
    text = _text(shared("a100-2rank-nccl"))
    assert "not measurable: not measurable" not in text
    assert "Bus bandwidth not measurable: the other members of these collectives are not all in the input" in text


def test_a_range_of_one_value_is_one_value(shared) -> None:  # type: ignore[no-untyped-def]
    text = _text(shared("megatron-pp4-timeline"))
    assert "58-58%" not in text and "the other stages sit idle 58% of the pipeline span" in text
    assert phrases.pct_range(58.2, 57.9) == "58%" and phrases.pct_range(33.7, 68.6) == "34-69%"


def test_a_range_of_equal_ends_is_said_once() -> None:
    """Calls all of one size and one duration read '50.0 MB take 15.0 ms', and a factor
    below the peak '180x', never '15.0 ms-15.0 ms' or '180-180x' (sample dp-exposed)."""
    text = "\n".join(
        e for r in run_analysis([SAMPLES / "dp-exposed"]).report.recommendations for e in r.evidence
    )
    assert "calls of 50.0 MB take 15.0 ms" in text and "180x below" in text
    assert not re.search(r"(\b[\d.]+ ?\w*)-\1\b", text), "a range whose two ends read the same"
    assert phrases.value_range(15.0e3, 15.04e3, phrases.duration) == "15.0 ms"
    assert phrases.value_range(1.2e3, 3.4e3, phrases.duration) == "1.2 ms-3.4 ms"
    # The spread of a local finding over its ranks, when every rank loses the same share.
    from gpuprof.advice.phrasebook.inputs import idle

    same = idle("dataloader-starvation", 2, 0, 39e3, True, 60.9, 60.91, 60.94)
    assert "; 60.9% across those ranks" in same, same
    assert "; 60.1-60.9% across" in idle("dataloader-starvation", 2, 0, 39e3, True, 60.9, 60.1, 60.9)


def test_ranks_are_rank_n_or_every_rank() -> None:
    from reportfactory import rec

    one = report([rank(0, lost_ms={"host": 40})], [rec("host", 20.0, ranks=(0,)), rec("dataloader", 10.0, ranks=())])
    text = _text(one)
    assert "· rank 0" in text and "· every rank" in text
    assert not re.search(r"\branks (?:0|all)\b", text)
    assert phrases.ranks([3]) == "rank 3" and phrases.ranks([0, 1, 2, 6]) == "ranks 0-2, 6" and phrases.ranks([]) == "every rank"


def test_the_checks_count_their_plural() -> None:
    from gpuprof.ci.gate import CheckResult
    from gpuprof.ci.gate_output import summary_line

    ok = CheckResult("min_compute_pct", 70.0, 60.0, "%", True, "fine")
    assert summary_line([ok]) == "gpuprof check: the 1 check passed"
    assert summary_line([ok, ok]) == "gpuprof check: all 2 checks passed"


def test_a_call_with_many_launches_is_counted_once(shared) -> None:  # type: ignore[no-untyped-def]
    text = _text(shared("dlrm-8rank"))
    assert "1 call of 36 launches each" not in text
    assert "DistributedDataParallel.forward 1.3 ms/step, 1 call, 36 kernel launches" in text


def test_one_waiting_rank_waits() -> None:
    import tempfile

    from gpuprof.api import analyze
    from gpuprof.simulate import generate

    with tempfile.TemporaryDirectory() as tmp:
        out = generate("straggler", Path(tmp) / "s", ranks=2, slow_rank=1, steps=2, layers=4, whatifs=False)
        text = _text(analyze(out))
    assert "rank 0 wait for it" not in text
    assert "rank 0 waits for it in collectives, up to" in text and "of its step" in text


def test_one_item_is_one_blocking_call() -> None:
    from gpuprof.api import analyze

    text = _text(analyze(SAMPLES / "sync-heavy"))
    line = next(ln for ln in text.splitlines() if "blocking calls:" in ln)
    assert "aten::item" in line and "_local_scalar_dense" not in line and "cudaStreamSynchronize" not in line


def test_two_durations_that_differ_read_differently(shared) -> None:  # type: ignore[no-untyped-def]
    text = _text(shared("dlrm-8rank"))
    assert "1.1 ms against 1.1 ms" not in text
    assert re.search(r"computes 1\.07× the median rank per step \(1\.\d\d ms against 1\.\d\d ms\)", text)
    assert phrases.duration_pair(1131.0, 1054.0) == ("1.13 ms", "1.05 ms")


def test_a_share_has_no_space_before_its_percent_sign(shared) -> None:  # type: ignore[no-untyped-def]
    text = _text(shared("edge-cpu-only-gloo"))
    assert "(85%) in gloo collectives" in text and not re.search(r"\d %", text)


# --- advice fitted to what the trace names ------------------------------------------------------


def test_the_optimizer_advice_names_the_trace_s_optimizer(shared) -> None:  # type: ignore[no-untyped-def]
    sgd = shared("a100-2rank-nccl").recommendations[0]
    assert "Optimizer.step#SGD.step" in " ".join(sgd.evidence)
    assert any("torch.optim.SGD(..., foreach=True)" in a for a in sgd.actions)
    assert not any("AdamW" in a for a in sgd.actions)
    adagrad = shared("dlrm-8rank").recommendations[0]
    assert any("torch.optim.Adagrad(..., foreach=True)" in a for a in adagrad.actions)
    assert not any("AdamW" in a for a in adagrad.actions)


# --- --brief and --top ----------------------------------------------------------------------------


def test_brief_and_top(shared_traces: Path) -> None:
    folder = str(shared_traces / "megatron-pp4-timeline")
    brief = run_cli("analyze", folder, "--brief")
    assert brief.code == 0, brief.stderr
    lines = brief.stdout.splitlines()
    assert lines[0].startswith("gpuprof: 46.0% of GPU time is compute")
    assert [ln.split(".")[0] for ln in lines if re.match(r"\d\. ", ln)] == ["1", "2", "3", "4"]
    assert not any(ln.startswith(("   - ", "   > ")) for ln in lines) and "Per rank" not in brief.stdout
    assert lines[-1].startswith("Recommendations 1, 2 and 3 replayed together")
    top = run_cli("analyze", folder, "--brief", "--top", "2")
    assert [ln[:2] for ln in top.stdout.splitlines() if re.match(r"\d\. ", ln)] == ["1.", "2."]
    assert "... and 2 more (without --top)" in top.stdout and "replayed together" not in top.stdout
    md = run_cli("analyze", folder, "--top", "1", "--format", "markdown").stdout
    assert "1. **" in md and "2. **" not in md and "Per rank" in md
    refused = run_cli("analyze", folder, "--brief", "--format", "json")
    assert refused.code == 2 and "--brief" in refused.stderr
