"""``gpuprof simulate``: write realistic traces of a simulated job, with the known answer."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from gpuprof.cli import app
from gpuprof.errors import GpuprofError

_SUMMARY = (
    "Simulate a training job and write one Kineto trace per rank into DIR, with "
    "ground_truth.json beside them (lost time per cause, expected top recommendation)."
)


def _help_text() -> str:
    from gpuprof.simulate import SCENARIOS, knobs_of

    lines = [
        _SUMMARY,
        "Knobs are given as KNOB=VALUE, e.g.:",
        "",
        "  gpuprof simulate pipeline stages=4 microbatches=16 schedule=1f1b -o out/",
        "  gpuprof analyze out/",
        "",
        "Scenarios, with their knobs and defaults (`gpuprof simulate --list` says what each knob means):",
    ]
    for name, fn in SCENARIOS.items():
        doc = (fn.__doc__ or "").strip().splitlines()[0]
        knob_list = ", ".join(f"{k}={v}" for k, v in knobs_of(name).items())
        lines.append(f"{name}: {doc} Knobs: {knob_list}.")
    # Typer reflows single newlines; blank-line-separated paragraphs keep their breaks.
    return "\n\n".join(line for line in lines if line)


def _list_text() -> str:
    """The scenario list for ``--list``, as plain text."""
    from gpuprof.simulate import KNOB_HELP, SCENARIOS, knobs_of

    lines = []
    for name, fn in SCENARIOS.items():
        lines.append(f"{name}: {(fn.__doc__ or '').strip().splitlines()[0]}")
        for knob, default in knobs_of(name).items():
            lines.append(f"    {knob + '=' + str(default):<22} {KNOB_HELP.get(knob, '')}")
    return "\n".join(lines)


def _clear_previous(out: Path) -> None:
    """Allow writing into an empty folder or over an earlier ``simulate`` output only."""
    if not out.exists():
        return
    if not out.is_dir():
        raise GpuprofError("output exists and is not a folder", out)
    entries = [p for p in out.iterdir() if not p.name.startswith(".")]
    if not entries:
        return
    if not (out / "ground_truth.json").is_file():
        raise GpuprofError(
            "output folder is not empty and was not written by gpuprof simulate; choose another -o", out
        )
    for p in entries:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


class _LazyHelpCommand(TyperCommand):
    """A command whose long help (the scenario list) is built only when it is shown.

    Building it imports the whole simulator (numpy included), which every other command
    would otherwise pay for at start-up. The command listing of ``gpuprof --help`` reads
    ``short_help`` (the first paragraph), so it does not trigger the import either.
    """

    _help_text: str | None = None

    @property  # type: ignore[override]
    def help(self) -> str | None:
        if self._help_text is None:
            self._help_text = inspect.cleandoc(_help_text())
        return self._help_text

    @help.setter
    def help(self, value: str | None) -> None:
        # Typer passes the callback's docstring (None here); the real text comes lazily.
        self._help_text = value


@app.command(
    cls=_LazyHelpCommand,
    short_help=_SUMMARY,
    context_settings={"help_option_names": ["-h", "--help"]},
)
def simulate(
    scenario: str | None = typer.Argument(None, help="scenario to simulate (see the list below)"),
    knobs: list[str] | None = typer.Argument(None, metavar="[KNOB=VALUE]...", help="scenario knobs"),
    out: Path | None = typer.Option(
        None, "-o", "--output", help="folder to write the traces and ground_truth.json into"
    ),
    seed: int = typer.Option(0, "--seed", help="random seed (same seed, same traces)"),
    list_: bool = typer.Option(False, "--list", help="list the scenarios and their knobs, then exit"),
) -> None:
    from gpuprof.simulate import generate, read_truth

    if list_:
        typer.echo(_list_text())
        return
    if scenario is None:
        raise GpuprofError("missing SCENARIO (gpuprof simulate --list shows them)")
    if out is None:
        raise GpuprofError("missing -o DIR: the folder to write the traces into")
    parsed: dict[str, Any] = {}
    for item in knobs or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise GpuprofError(f"knob {item!r} is not of the form KNOB=VALUE")
        parsed[name.strip()] = value.strip()
    from gpuprof.simulate import resolve_knobs

    resolve_knobs(scenario, parsed)  # fail on a bad knob before touching the output folder
    _clear_previous(out)
    path = generate(scenario, out, seed=seed, **parsed)
    truth = read_truth(path)
    exp = truth["expected"]
    n = len(truth["ranks"])
    typer.echo(
        f"wrote {n} trace{'s' if n != 1 else ''} of scenario {scenario} to {path}/ (ground truth: {path}/ground_truth.json)"
    )
    window = sum(r["window_us"] for r in truth["ranks"])
    compute = sum(r["compute_us"] for r in truth["ranks"])
    lost = {c: sum(r["lost_us"][c] for r in truth["ranks"]) for c in truth["ranks"][0]["lost_us"]}
    parts = ", ".join(
        f"{c} {100 * v / window:.1f}%"
        for c, v in sorted(lost.items(), key=lambda kv: -kv[1])
        if v / window >= 0.005
    )
    typer.echo(f"simulated: compute {100 * compute / window:.1f}% of the window; lost: {parts or 'none'}")
    if exp.get("theoretical_bubble_fraction") is not None:
        typer.echo(
            f"pipeline bubble: {100 * exp['measured_bubble_fraction']:.1f}% simulated, "
            f"{100 * exp['theoretical_bubble_fraction']:.1f}% theoretical for this schedule"
        )
    typer.echo(
        f"expected top cause: {exp.get('top_category') or 'none (healthy)'}"
        + (f", ranks {exp['culprit_ranks']}" if exp.get("culprit_ranks") else "")
    )
    typer.echo(f"next: gpuprof analyze {path}")
