"""The analyze command line parsed without typer gives exactly what typer gives.

Every argument vector below runs twice through :func:`gpuprof.cli.main`: as it is (plain
analyze command lines take the fast path of :mod:`gpuprof.cli.fast`) and with the fast path
switched off (typer parses everything). Exit code, stdout, stderr and the files written
must be the same. The vectors marked fast must really take the fast path, and the others
must not: otherwise the comparison would only compare typer with itself.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clirun import CliResult, run_cli

from gpuprof.cli import BLAS_THREAD_VARIABLES, fast

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
TRACE = str(SAMPLES / "healthy" / "rank0.pt.trace.json.gz")
FOLDER = str(SAMPLES / "straggler")

# (argv after "gpuprof", whether the fast path takes it). OUT is replaced by a file path.
VECTORS: list[tuple[list[str], bool]] = [
    (["analyze", TRACE, "--format", "json"], True),
    (["analyze", TRACE], True),  # text, no colour: stdout is not a terminal
    (["analyze", "-f", "markdown", TRACE], True),
    (["analyze", "-fjson", "--steps", "2:3", TRACE], True),
    (["analyze", "--format=json", "--jobs", "2", FOLDER], True),
    (["analyze", "-j2", "--max-input-gb", "1.5", "-o", "OUT", "--format", "json", FOLDER], True),
    (["analyze", TRACE, "-o", "OUT.md"], True),
    (["analyze", TRACE, "--color", "always"], True),
    (["analyze", TRACE, "--color=never", "--format", "text"], True),
    (["analyze", "--format", "json", "--format", "markdown", TRACE], True),  # the last one counts
    (["analyze", "-f", "json", "--", TRACE], True),
    (["analyze", TRACE, "-o", "-", "-f", "json"], True),
    # Errors of the analysis itself: gpuprof's one line, exit 2, from either parser.
    (["analyze", "/no/such/trace.json"], True),
    (["analyze", TRACE, "--format", "xml"], True),
    (["analyze", TRACE, "--steps", "banana"], True),
    (["analyze", TRACE, "-o", "OUT.unknown"], True),
    (["analyze", TRACE, "--max-input-gb", "0.001", "-f", "json"], True),
    # typer's to parse: help, errors of the command line, values typer converts.
    (["analyze", "--help"], False),
    (["analyze", "-h"], False),
    (["analyze"], False),
    (["analyze", TRACE, "--jobs", "0"], False),
    (["analyze", TRACE, "--jobs", "two"], False),
    (["analyze", TRACE, "--jobs", "+2", "-f", "json"], False),
    (["analyze", TRACE, "--jobs", "02", "-f", "json"], False),
    (["analyze", TRACE, "--max-input-gb", "0"], False),
    (["analyze", TRACE, "--max-input-gb", "1e-9"], False),
    (["analyze", TRACE, "--max-input-gb", "1."], False),
    (["analyze", TRACE, "--color", "AUTO", "-f", "json"], False),
    (["analyze", TRACE, "--color", "sometimes"], False),
    (["analyze", TRACE, "--bogus"], False),
    (["analyze", TRACE, "-o"], False),
    (["analyze", TRACE, "--format", "--help"], False),
    (["analyze", TRACE, "-jf"], False),
    (["analyze", "-", "-f", "json"], False),
    (["analyze", "", "-f", "json"], False),
    (["analyze", TRACE, "--output="], False),
    (["--version"], False),
    (["check", TRACE], False),
]


def _run(
    argv: list[str], tmp: Path, monkeypatch: pytest.MonkeyPatch, fast_on: bool
) -> tuple[CliResult, dict[str, bytes], list[bool]]:
    """``gpuprof ARGV`` with the fast path on or off: the result (the output folder's path
    made ``DIR``), the files written, and whether the fast path took the command line."""
    out_dir = tmp / ("fast" if fast_on else "typer")
    out_dir.mkdir()
    args = [a.replace("OUT", str(out_dir / "report")) if a.startswith("OUT") else a for a in argv]
    taken: list[bool] = []
    real = fast.analyze

    def spy(words: Any) -> Any:
        if not fast_on:
            taken.append(False)
            return fast.NOT_HANDLED
        try:
            rc = real(words)
        except BaseException:  # an error of the analysis, raised on the fast path
            taken.append(True)
            raise
        taken.append(rc is not fast.NOT_HANDLED)
        return rc

    with monkeypatch.context() as m:
        m.setattr(fast, "analyze", spy)
        for name in BLAS_THREAD_VARIABLES:
            m.delenv(name, raising=False)
        for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"):
            m.delenv(name, raising=False)
        result = run_cli(*args)
    files = {p.name: p.read_bytes() for p in sorted(out_dir.iterdir())}
    text = CliResult(
        result.code,
        result.stdout.replace(str(out_dir), "DIR"),
        result.stderr.replace(str(out_dir), "DIR"),
        result.traceback,
    )
    return text, files, taken


@pytest.mark.parametrize("argv, is_fast", VECTORS, ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_fast_path_gives_what_typer_gives(
    argv: list[str], is_fast: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [a.replace("OUT", str(tmp_path / "x")) for a in argv]
    assert (fast.parse(args[1:]) is not None and args[:1] == ["analyze"]) is is_fast
    quick, quick_files, taken = _run(argv, tmp_path, monkeypatch, fast_on=True)
    typer_, typer_files, not_taken = _run(argv, tmp_path, monkeypatch, fast_on=False)
    assert taken == [is_fast] and not_taken == [False]
    assert quick.traceback is None and typer_.traceback is None
    assert (quick.code, quick.stdout, quick.stderr) == (typer_.code, typer_.stdout, typer_.stderr)
    assert quick_files == typer_files


def test_vectors_cover_reports_and_errors() -> None:
    """The comparison above is worth something only if it holds reports and error lines."""
    fast_ones = [argv for argv, is_fast in VECTORS if is_fast]
    assert len(fast_ones) >= 15 and len(VECTORS) - len(fast_ones) >= 15


@pytest.mark.parametrize(
    "error, code, stderr",
    [
        (KeyboardInterrupt(), 130, ""),
        (EOFError(), 130, "\n"),  # typer: an empty line, then Abort
        (OSError(errno.EPIPE, "Broken pipe"), 1, ""),
    ],
)
def test_interruptions_end_as_under_typer(
    error: BaseException, code: int, stderr: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuprof.pipeline

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise error

    results = []
    for fast_on in (True, False):
        with monkeypatch.context() as m:
            m.setattr(gpuprof.pipeline, "run_analysis", interrupted)
            m.setattr(sys, "stdout", sys.stdout)  # restored after: a broken pipe replaces them
            m.setattr(sys, "stderr", sys.stderr)
            if not fast_on:
                m.setattr(fast, "analyze", lambda words: fast.NOT_HANDLED)
            results.append(run_cli("analyze", TRACE, "-f", "json"))
    quick, typer_ = results
    assert (quick.code, quick.stderr, quick.traceback) == (typer_.code, typer_.stderr, typer_.traceback)
    assert (quick.code, quick.stderr) == (code, stderr)


def _probe(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``gpuprof ARGV`` in a fresh interpreter; which modules it imported, its exit code."""
    code = (
        "import runpy, sys, json, atexit\n"
        "atexit.register(lambda: sys.__stderr__.write('\\nMODULES ' + json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('typer', 'rich', 'pydantic', 'pandas', 'click'))) + '\\n'))\n"
        f"sys.argv = ['gpuprof', *{argv!r}]\n"
        "runpy.run_module('gpuprof', run_name='__main__')\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**base, "PYTHONPATH": str(REPO), **(env or {})},
        timeout=120,
        check=False,
    )
    import json

    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return {"code": done.returncode, "modules": json.loads(line[len("MODULES "):]), "stdout": done.stdout}


def test_a_plain_analyze_imports_neither_typer_nor_rich() -> None:
    got = _probe(["analyze", TRACE, "--format", "json"])
    assert got["code"] == 0 and got["stdout"].startswith("{")
    assert got["modules"] == []
    # The same report through typer (a value typer converts) imports it: the probe can tell.
    slow = _probe(["analyze", TRACE, "--format", "json", "--color", "AUTO"])
    assert slow["code"] == 0 and slow["stdout"] == got["stdout"]
    assert any(m.startswith("typer") for m in slow["modules"])


def test_a_json_file_report_imports_no_other_renderer(tmp_path: Path) -> None:
    """``-o x.json`` tells the format from the name without loading every renderer: no rich."""
    out = tmp_path / "r.json"
    got = _probe(["analyze", TRACE, "-o", str(out)])
    assert got["code"] == 0 and out.read_text(encoding="utf-8").startswith("{")
    assert got["modules"] == []
    page = tmp_path / "r.md"
    assert _probe(["analyze", TRACE, "-o", str(page)])["code"] == 0 and page.read_text(encoding="utf-8").startswith("#")


def test_one_blas_thread_for_analyze_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    run_cli("analyze", TRACE, "-f", "json")
    assert all(os.environ.get(name) == "1" for name in BLAS_THREAD_VARIABLES)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    run_cli("analyze", TRACE, "-f", "json")
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"


def test_the_job_gpuprof_run_starts_keeps_its_environment(tmp_path: Path) -> None:
    probe = "import os; print([os.environ.get(n) for n in ('OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS')])"
    base = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-m", "gpuprof", "run", "--no-report", "--no-hooks", "--out", str(tmp_path / "s"), "--",
         sys.executable, "-c", probe],
        capture_output=True, text=True, cwd=REPO, env={**base, "PYTHONPATH": str(REPO)}, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[None, None]"


def test_each_format_module_registers_that_format() -> None:
    """render.get imports only the module its table names for a format: the table must
    name, for every renderer there is, the module that registers it."""
    from gpuprof.render import registry as render

    render.names()  # loads every format
    assert set(render.RENDERERS) == set(render._MODULES) == set(render._EXTENSIONS)
    for name, renderer in render.RENDERERS.items():
        assert renderer.render.__module__ == render._MODULES[name]
        assert renderer.extensions == render._EXTENSIONS[name]
    assert render.get("MD").name == "markdown" and render.get("htm").name == "html"


def test_the_gc_is_off_for_the_command_and_on_again_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from gpuprof.cli import reporting

    seen: list[bool] = []
    real = reporting.analyze_command

    def spy(*args: Any, **kwargs: Any) -> None:
        seen.append(gc.isenabled())
        real(*args, **kwargs)

    monkeypatch.setattr(reporting, "analyze_command", spy)
    assert gc.isenabled()
    ok = run_cli("analyze", TRACE, "-f", "json")
    bad = run_cli("analyze", "/no/such/trace.json")  # an error inside the command
    assert (ok.code, bad.code) == (0, 2) and seen == [False, False]
    assert gc.isenabled()
    gc.disable()  # a caller that had it off keeps it off
    try:
        run_cli("analyze", TRACE, "-f", "json")
        assert not gc.isenabled()
    finally:
        gc.enable()
