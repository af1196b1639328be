"""Traces of different jobs are never merged into one job (issue 29, item 3).

Ranks of one job agree on the world size, the parallel layout, the GPU model, the trace
format and on communicating at all; a folder that mixes jobs is refused with exit 2 and
one line naming the files and what differs, unless ``--force`` (``force=True``) asks for
one report anyway, which then says so. Checked on folders combining real traces of
different jobs (symlinks into ``tmp_path``, never copies in the project) and on a
simulated job rewritten one rank at a time.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import layouts as L
import pytest
from analyzed import report_of
from clirun import run_cli

from gpuprof.api import analyze
from gpuprof.errors import GpuprofError
from gpuprof.simulate import generate

FORCED = "analyzed as one job although the traces may come from different jobs"


def _mix(tmp_path: Path, shared: Path, *members: str) -> Path:
    """A folder of symlinks to the named real trace files (``folder/file``, or ``folder``
    for every file of it, meta files included)."""
    out = tmp_path / "mixed"
    out.mkdir()
    for m in members:
        src = shared / m
        for f in sorted(src.iterdir()) if src.is_dir() else [src]:
            os.symlink(f, out / f.name)
    return out


def _refused(folder: Path, *expected: str) -> str:
    got = run_cli("analyze", str(folder))
    assert got.code == 2 and got.traceback is None, got.stderr
    assert len(got.stderr_lines) == 1 and got.stdout == "", got.stderr
    line = got.stderr_lines[0]
    assert "--force" in line
    for x in expected:
        assert x in line, (x, line)
    return line


# Real traces of different jobs, put in one folder: what differs, and which files say it.
MIXES = [
    # world size 2 (A100-PG509) against 128 (a sampled rank of a 128-rank job)
    (("a100-2rank-nccl/nccl_data.json.gz", "hta-sampled-2rank/sampled_rank-1.json.gz"),
     ("world size 2 (", "nccl_data.json.gz", "vs 128 (", "sampled_rank-1.json.gz")),
    # both world size 8, on an MI300X and on a V100
    (("mi300-resnet-ckpt-rank0", "dlrm-8rank/worker3_step_12.1694128201557.pt.trace.json.gz"),
     ("GPU model AMD Instinct MI300X (", "vs Tesla V100-SXM2-32GB (", "worker3_step_12")),
    (("b200-eager-rank0", "dlrm-8rank/worker1_step_12.1694128201556.pt.trace.json.gz"),
     ("GPU model NVIDIA B200", "Tesla V100-SXM2-32GB")),
    # two Megatron timelines with their meta files: the meta files say 64 and 8 GPUs
    (("megatron-pp4-timeline", "megatron-dp4pp4-timeline"),
     ("world size 64 (", "timeline-AR.json.gz", "vs 8 (", "timeline-ST.json.gz",
      "parallel layout PP 4 x TP 4 x DP 4", "PP 4 x TP 1 x DP 2")),
    # a trace that calls a collective beside a single-GPU ResNet run
    (("edge-large-integer", "resnet50-nw0"),
     ("collective or point-to-point calls in", "large-integer.pt.trace.json.gz", "none in", "worker0.pt.trace.json.gz")),
    # the same ResNet run twice, DataLoader workers 0 and 4: two runs, not two ranks
    (("resnet50-nw0/worker0.pt.trace.json.gz", "resnet50-nw4/worker0.pt.trace.json.gz"),
     ("these 2 traces show no sign of one job", "gpuprof diff")),
]


@pytest.mark.parametrize("members,expected", MIXES, ids=["world", "device", "device-same-world", "megatron-meta", "communication", "two-runs"])
def test_real_traces_of_two_jobs_are_refused(members: tuple[str, ...], expected: tuple[str, ...], tmp_path: Path, shared_traces: Path) -> None:
    if members[0].startswith("resnet50-nw0/"):
        # Two files of the same name: link them under names of their own.
        out = tmp_path / "mixed"
        out.mkdir()
        for i, m in enumerate(members):
            os.symlink(shared_traces / m, out / f"run{i}.pt.trace.json.gz")
        expected = (*expected, "run0.pt.trace.json.gz", "run1.pt.trace.json.gz")
    else:
        out = _mix(tmp_path, shared_traces, *members)
    _refused(out, *expected)
    with pytest.raises(GpuprofError, match="not one job|no sign of one job"):
        analyze(out)


def test_force_analyzes_them_as_one_job_and_says_so(tmp_path: Path, shared_traces: Path) -> None:
    out = _mix(tmp_path, shared_traces, "mi300-resnet-ckpt-rank0", "dlrm-8rank/worker3_step_12.1694128201557.pt.trace.json.gz")
    got = run_cli("analyze", str(out), "--force", "--format", "json")
    assert got.code == 0, got.stderr
    assert FORCED in got.stdout and "AMD Instinct MI300X" in got.stdout
    report = analyze(out, force=True)
    assert [r.rank for r in report.ranks] == [0, 3]
    (line,) = [w for w in report.warnings if FORCED in w]
    assert "GPU model AMD Instinct MI300X" in line and "Tesla V100-SXM2-32GB" in line
    assert FORCED in str(report)


@pytest.mark.parametrize("job", ["hta-sampled-2rank", "dlrm-8rank", "megatron-dp4pp4-timeline", "megatron-pp4-timeline"])
def test_the_ranks_of_one_real_job_are_one_job(job: str, shared_traces: Path) -> None:
    report = report_of(shared_traces / job)  # analyze(), once per session; "2 of 128 ranks" is one job too
    assert not any(FORCED in w for w in report.warnings)


# -- a simulated job, one rank rewritten ----------------------------------------------------


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate("straggler", tmp_path_factory.mktemp("job"), ranks=4, steps=2, layers=2, slow_rank=3, whatifs=False)


def _rank1(doc: L.Doc, change: str) -> L.Doc:
    if change == "device":
        for props in doc["deviceProperties"]:
            props["name"] = "NVIDIA A100-SXM4-80GB"
    elif change == "world":
        doc["distributedInfo"]["world_size"] = 16
    elif change == "silent":
        doc = L._events(doc, lambda e: not L.is_nccl_kernel(e) and "nccl" not in str(e.get("name", "")).lower())
    elif change == "no-info":
        doc.pop("distributedInfo")
        for props in doc["deviceProperties"]:
            props.pop("name")
    return doc


def _rewritten(job: Path, out: Path, change: str) -> Path:
    split = L.per_rank(job, out)
    path = split / "rank1.json.gz"
    L.save(_rank1(L.load(path), change), path)
    return split


@pytest.mark.parametrize(
    "change,expected",
    [
        ("device", ("GPU model NVIDIA H100 80GB HBM3 (", "and 1 more) vs NVIDIA A100-SXM4-80GB (", "rank1.json.gz)")),
        ("world", ("world size 4 (", "vs 16 (", "rank1.json.gz")),
        ("silent", ("collective or point-to-point calls in", "none in", "rank1.json.gz")),
    ],
)
def test_one_rank_of_another_job_is_refused(job: Path, tmp_path: Path, change: str, expected: tuple[str, ...]) -> None:
    _refused(_rewritten(job, tmp_path / "split", change), *expected)


def test_a_rank_that_does_not_say_agrees(job: Path, tmp_path: Path) -> None:
    """No distributedInfo and no GPU name on one rank: nothing disagrees, one job."""
    report = analyze(_rewritten(job, tmp_path / "split", "no-info"))
    assert [r.rank for r in report.ranks] == [0, 1, 2, 3]
    assert not any(FORCED in w for w in report.warnings)


def test_one_trace_of_each_is_no_question(tmp_path: Path) -> None:
    """One single-GPU trace, or one file holding every rank, is one job by construction."""
    one = generate("healthy", tmp_path / "one", steps=1, layers=2, whatifs=False)
    assert len(analyze(one).ranks) == 1


def test_force_is_a_flag_of_check_diff_and_annotate(job: Path, tmp_path: Path) -> None:
    split = _rewritten(job, tmp_path / "split", "device")
    got = run_cli("check", str(split), "--min-compute-pct", "1")
    assert got.code == 2 and "--force" in got.stderr, got.stderr
    assert run_cli("check", str(split), "--min-compute-pct", "1", "--force").code == 0
    assert run_cli("diff", str(split), str(job)).code == 2
    assert run_cli("diff", str(split), str(job), "--force").code == 0
    got = run_cli("annotate", str(split / "rank0.json.gz"), "--job", str(split), "-o", str(tmp_path / "a.json.gz"))
    assert got.code == 2 and "--force" in got.stderr
    got = run_cli("annotate", str(split / "rank0.json.gz"), "--job", str(split), "-o", str(tmp_path / "a.json.gz"), "--force")
    assert got.code == 0, got.stderr


def test_a_run_session_still_gets_its_report_with_the_warning(tmp_path: Path, shared_traces: Path) -> None:
    """The report gpuprof run gives when the job ends is never lost to the check (the
    traces came from one command); analyzing the session again refuses as for a folder."""
    from gpuprof.pipeline.session_report import session_report
    from gpuprof.session import SESSION_SCHEMA
    from gpuprof.session.writer import SessionWriter

    root = tmp_path / "session"
    w = SessionWriter(root)
    w.write_meta({"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "x.py"], "exit_code": 0,
                  "gpus": [], "hooks_enabled": True, "warnings": []})
    w.close()
    for f in (shared_traces / "mi300-resnet-ckpt-rank0" / "resnet_act_checkpoint.json.gz",
              shared_traces / "dlrm-8rank" / "worker3_step_12.1694128201557.pt.trace.json.gz"):
        # copied in: a session reads only files inside itself (a link out is refused)
        shutil.copyfile(f, root / "traces" / f.name)
    report = session_report(root)
    assert [r.rank for r in report.ranks] == [0, 3]
    assert any(FORCED in x for x in report.warnings)
    _refused(root, "GPU model AMD Instinct MI300X")
