"""Issue 32: an output format is one registration (gpuprof.render.registry.register); the
command line, the API's save and the file-name lookup find it there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprof import render
from gpuprof.cli.reporting import analyze_command
from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report
from gpuprof.render import registry

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture
def toy_format() -> Iterator[str]:
    """A format registered from outside the package: the ranks' compute, one line each."""

    @registry.register("toycsv", (".toy.csv",))
    def toy(report: Report, width: int) -> str:
        return "\n".join(f"{r.rank},{r.compute_us:.0f}" for r in report.ranks) + "\n"

    try:
        yield "toycsv"
    finally:
        registry.RENDERERS.pop("toycsv", None)


def test_a_registered_format_is_found_by_name_and_by_file_name(toy_format: str) -> None:
    assert render.get("TOYCSV").name == toy_format  # the same spelling rules as the built-in ones
    assert render.format_for_path("out.toy.csv") == toy_format
    assert toy_format in render.names()


def test_the_command_line_writes_a_registered_format(toy_format: str, tmp_path: Path) -> None:
    out = tmp_path / "r.toy.csv"
    analyze_command([SAMPLES / "straggler"], output=out)
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and all(line.split(",")[0].isdigit() for line in lines)


def test_an_unknown_format_is_still_refused() -> None:
    with pytest.raises(GpuprofError, match="unknown format 'toycsv'"):
        render.get("toycsv")
