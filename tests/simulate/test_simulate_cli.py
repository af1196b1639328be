"""``gpuprof simulate`` on the command line, and the shipped ``sample_traces/``."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.simulate import SCENARIOS, generate, knobs_of, read_truth

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _gpuprof(*args: str) -> _Result:
    """Run the ``gpuprof`` entry point in this process (exit code, stdout, stderr)."""
    import contextlib
    import io

    from gpuprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["gpuprof", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return _Result(code, out.getvalue(), err.getvalue())


def test_help_and_list_name_every_scenario_and_knob() -> None:
    help_text = _gpuprof("simulate", "--help")
    listed = _gpuprof("simulate", "--list")
    assert help_text.returncode == 0 and listed.returncode == 0
    flat_help = " ".join(help_text.stdout.split())
    for name in SCENARIOS:
        assert name in flat_help
        assert re.search(rf"^{name}: ", listed.stdout, re.MULTILINE)
        for knob in knobs_of(name):
            assert f"{knob}=" in listed.stdout


def test_simulate_writes_traces_and_truth_then_summarizes(tmp_path: Path) -> None:
    out = tmp_path / "pp"
    res = _gpuprof(
        "simulate", "pipeline", "microbatches=16", "steps=1", "act_mb=0.25", "--seed", "2", "-o", str(out)
    )
    assert res.returncode == 0, res.stderr
    truth = read_truth(out)
    assert truth["knobs"]["microbatches"] == 16 and truth["seed"] == 2
    assert sorted(p.name for p in out.glob("rank*.pt.trace.json.gz")) == [
        f"rank{r}.pt.trace.json.gz" for r in range(4)
    ]
    # the summary quotes the schedule's theory: (p-1)/(m+p-1) = 3/19
    assert "15.8% theoretical" in res.stdout
    assert f"gpuprof analyze {out}" in res.stdout
    # running again over its own output replaces it
    again = _gpuprof("simulate", "healthy", "steps=1", "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert read_truth(out)["scenario"] == "healthy" and not (out / "rank3.pt.trace.json.gz").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["nope"], "unknown scenario"),
        (["pipeline", "microbatchs=3"], "unknown knob"),
        (["pipeline", "microbatches"], "KNOB=VALUE"),
        (["pipeline"], "missing -o"),
        ([], "missing SCENARIO"),
        (["healthy", "--platform", "tpu"], "unknown platform"),
        (["healthy", "--layout", "nsys"], "unknown layout"),
        (["healthy", "--whatif", "faster"], "unknown what-if"),
        (["straggler", "--layout", "megatron"], "megatron layout is for pipeline"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    out_args = [] if message == "missing -o" else ["-o", str(tmp_path / "out")]
    res = _gpuprof("simulate", *args, *out_args)
    assert res.returncode == 2
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_summary_gives_the_whatif_truth_and_options_reach_the_job(tmp_path: Path) -> None:
    res = _gpuprof("simulate", "straggler", "ranks=3", "steps=1", "layers=2", "-o", str(tmp_path / "s"))
    assert res.returncode == 0, res.stderr
    wi = read_truth(tmp_path / "s")["whatif"]
    assert "intended: peer_median_compute" in res.stdout
    saving = wi["savings_pct"]["peer_median_compute"]
    assert re.search(rf"peer_median_compute\s+step\s+[\d.]+ ms\s+saves\s+{saving:.1f}%", res.stdout)
    fixed = _gpuprof(
        "simulate", "straggler", "ranks=3", "steps=1", "layers=2", "--whatif", "all", "--platform", "rocm",
        "--no-whatifs", "-o", str(tmp_path / "f"),
    )  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr
    truth = read_truth(tmp_path / "f")
    # every applicable fix but free_host, which leaves no host timeline to write
    assert "free_host" in wi["applied"]
    assert truth["fixes"] == [f for f in wi["applied"] if f != "free_host"]
    assert truth["whatif"] is None and truth["platform"] == "rocm"
    refused = _gpuprof("simulate", "straggler", "--whatif", "free_host", "-o", str(tmp_path / "h"))
    assert refused.returncode == 2 and "free_host" in refused.stderr and "Traceback" not in refused.stderr
    assert "written with these what-if fixes applied" in fixed.stdout
    timeline = _gpuprof(
        "simulate", "pipeline", "steps=1", "microbatches=2", "--layout", "megatron", "-o", str(tmp_path / "m")
    )
    assert timeline.returncode == 0, timeline.stderr
    assert (tmp_path / "m" / "timeline-sim.json.gz").is_file()


def test_list_explains_the_whatif_fixes() -> None:
    from gpuprof.simulate import WHATIFS

    listed = _gpuprof("simulate", "--list").stdout
    for fix in (*WHATIFS, "all"):
        assert re.search(rf"^    {fix}\s+\S", listed, re.MULTILINE), fix


def test_refuses_to_write_into_a_folder_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    res = _gpuprof("simulate", "healthy", "-o", str(tmp_path))
    assert res.returncode == 2 and "not empty" in res.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def _sample_folders() -> list[Path]:
    if not SAMPLES.is_dir():
        pytest.skip("sample_traces/ is not in this checkout")
    return sorted(p for p in SAMPLES.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def test_every_sample_has_a_readme_line_and_the_readme_command_works() -> None:
    readme = (SAMPLES / "README.md").read_text()
    for folder in _sample_folders():
        assert f"| `{folder.name}/` |" in readme, f"sample_traces/README.md has no line for {folder.name}/"
    cmd = re.search(r"^gpuprof analyze (sample_traces/\S+)$", readme, re.MULTILINE)
    assert cmd, "the README's main command"
    res = subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", cmd.group(1)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    total = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert total < 4 << 20, "sample_traces/ stays a few MB"


def test_simulated_samples_are_current() -> None:
    """Each simulated sample is what ``make_samples.py`` makes with today's simulator."""
    sys.path.insert(0, str(SAMPLES))
    try:
        from make_samples import SAMPLES as TABLE  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(SAMPLES))
    folders = {p.name for p in _sample_folders()}
    assert set(TABLE) | {"cpu-training"} == folders
    for name in ("healthy", "straggler", "pipeline-slow-stage"):
        scenario, _ = TABLE[name]
        shipped = read_truth(SAMPLES / name)
        assert shipped["scenario"] == scenario
        assert shipped["expected"]["top_category"] == shipped["expected"]["intended"]
    for name, (scenario, knobs) in TABLE.items():
        shipped = read_truth(SAMPLES / name)
        assert shipped["scenario"] == scenario and shipped["layout"] == knobs.get("layout", "kineto")
        wi = shipped["whatif"]
        assert wi is not None and "all" in wi["step_us"] and set(wi["intended"]) <= set(wi["applied"])


def test_simulated_samples_regenerate_identically(tmp_path: Path) -> None:
    sys.path.insert(0, str(SAMPLES))
    try:
        from make_samples import SAMPLES as TABLE
    finally:
        sys.path.remove(str(SAMPLES))
    _sample_folders()
    scenario, knobs = TABLE["straggler"]
    fresh = generate(scenario, tmp_path / "s", seed=0, **knobs)
    assert read_truth(fresh) == read_truth(SAMPLES / "straggler"), (
        "regenerate with: python sample_traces/make_samples.py"
    )
    for f in sorted((SAMPLES / "straggler").glob("*.gz")):
        assert gzip.decompress(f.read_bytes()) == gzip.decompress((fresh / f.name).read_bytes())


def test_cpu_sample_is_a_real_profiler_trace() -> None:
    _sample_folders()
    path = SAMPLES / "cpu-training" / "worker0.pt.trace.json.gz"
    assert path.stat().st_size < 500 * 1024
    doc = json.loads(gzip.decompress(path.read_bytes()))
    names = {e.get("name") for e in doc["traceEvents"]}
    assert any(str(n).startswith("ProfilerStep#") for n in names)
    assert "aten::addmm" in names and "Optimizer.step#AdamW.step" in names
    res = _gpuprof("analyze", str(path.parent))
    assert res.returncode == 0, res.stderr
