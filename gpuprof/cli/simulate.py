"""``gpuprof simulate``: write realistic traces of a simulated job, with the known answer."""

from __future__ import annotations

import inspect
import shutil
import textwrap
from pathlib import Path
from typing import Any

import typer

from gpuprof.cli.command import Command
from gpuprof.cli.console import working
from gpuprof.cli.root import app
from gpuprof.errors import GpuprofError
from gpuprof.util.suggest import did_you_mean, match_name

_SUMMARY = (
    "Simulate a training job and write one Kineto trace per rank into DIR, with "
    "the ground truth beside them in truth/ground_truth.json (lost time per cause, expected top recommendation, "
    "and the true saving of each what-if fix, from simulating the fixed job)."
)


def _summary(fn: Any) -> str:
    """A scenario's description: the first paragraph of its docstring, whole."""
    return " ".join((inspect.cleandoc(fn.__doc__ or "").split("\n\n") or [""])[0].split())


def _help_text() -> str:
    from gpuprof.simulate import SCENARIOS, knobs_of

    lines = [
        _SUMMARY,
        "Knobs are given as KNOB=VALUE, e.g.:",
        "",
        "  gpuprof simulate pipeline stages=4 microbatches=16 schedule=1f1b -o out/",
        "  gpuprof analyze out/",
        "",
        (
            "--platform rocm writes MI300X traces with HIP/RCCL names; --layout megatron writes a "
            "pipeline job as one Megatron-style op-level timer timeline; --whatif FIX writes the "
            "job with a what-if fix applied (e.g. to diff against the original)."
        ),
        "Scenarios, with their knobs and defaults (`gpuprof simulate --list` says what each knob means):",
    ]
    for name, fn in SCENARIOS.items():
        doc = _summary(fn)
        knob_list = ", ".join(f"{k}={v}" for k, v in knobs_of(name).items())
        lines.append(f"{name}: {doc} Knobs: {knob_list}.")
    # Typer reflows single newlines; blank-line-separated paragraphs keep their breaks.
    return "\n\n".join(line for line in lines if line)


def _list_text(width: int | None = None) -> str:
    """The scenario list for ``--list``, as plain text, then the what-if fixes. ``width``
    (a terminal's): each entry wrapped to it on word boundaries, hanging under its text;
    ``None``: one line per entry, whatever its length."""
    from gpuprof.simulate import KNOB_HELP, SCENARIOS, WHATIF_HELP, knobs_of

    def entry(head: str, text: str, indent: int) -> str:
        if width is None:
            return (head + text).rstrip()
        return textwrap.fill(text, width=max(40, width), initial_indent=head, subsequent_indent=" " * indent,
                             break_long_words=False, break_on_hyphens=False) or head.rstrip()

    lines = []
    for name, fn in SCENARIOS.items():
        lines.append(entry(f"{name}: ", _summary(fn), 4))
        for knob, default in knobs_of(name).items():
            lines.append(entry(f"    {knob + '=' + str(default):<22} ", KNOB_HELP.get(knob, ""), 27))
    lines.append("")
    lines.append(entry("", "What-if fixes (the ground truth's whatif section; --whatif FIX writes the fixed job):", 0))
    for fix, text in WHATIF_HELP.items():
        lines.append(entry(f"    {fix:<22} ", text, 27))
    lines.append(entry(f"    {'all':<22} ", "every fix above that changes the job, at once", 27))
    return "\n".join(lines)


def _scenario_names(incomplete: str = "") -> list[str]:
    """Scenario names, for shell completion."""
    from gpuprof.simulate import SCENARIOS

    return [n for n in SCENARIOS if n.startswith(incomplete.replace("-", "_"))]


def _resolve(scenario: str, knobs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The scenario and knob names as the simulator spells them: ``dp-exposed`` is
    ``dp_exposed``, ``Stages=4`` is ``stages=4``; a near miss gets a "did you mean"."""
    from gpuprof.simulate import SCENARIOS, knobs_of

    name = match_name(scenario, SCENARIOS)
    if name is None:
        raise GpuprofError(
            f"unknown scenario {scenario!r}{did_you_mean(scenario, SCENARIOS)}; gpuprof simulate --list shows them"
        )
    known = knobs_of(name)
    out: dict[str, Any] = {}
    for knob, value in knobs.items():
        real = match_name(knob, known)
        if real is None:
            raise GpuprofError(
                f"{name}: unknown knob {knob!r}{did_you_mean(knob, known)}; its knobs are: {', '.join(known)}"
            )
        out[real] = value
    return name, out


def _clear_previous(out: Path) -> None:
    """Allow writing into an empty folder or over an earlier ``simulate`` output only."""
    if not out.exists():
        return
    if not out.is_dir():
        raise GpuprofError("output exists and is not a folder", out)
    entries = [p for p in out.iterdir() if not p.name.startswith(".")]
    if not entries:
        return
    from gpuprof.simulate.truth import truth_path

    if truth_path(out) is None:
        raise GpuprofError(
            "output folder is not empty and was not written by gpuprof simulate; choose another -o", out
        )
    for p in entries:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


class _LazyHelpCommand(Command):
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
    scenario: str | None = typer.Argument(
        None, metavar="SCENARIO", autocompletion=_scenario_names, help="scenario to simulate (see the list below)"
    ),
    knobs: list[str] | None = typer.Argument(None, metavar="[KNOB=VALUE]...", help="scenario knobs"),
    out: Path | None = typer.Option(
        None, "-o", "--output", metavar="DIR", help="folder to write the traces and the ground truth (truth/ground_truth.json) into"
    ),
    seed: int = typer.Option(0, "--seed", metavar="N", help="random seed (same seed, same traces)"),
    platform: str | None = typer.Option(
        None,
        "--platform",
        metavar="PLATFORM",
        help="cuda (H100, CUDA names) or rocm (MI300X, HIP/RCCL names); default: the scenario's",
    ),
    layout: str | None = typer.Option(
        None,
        "--layout",
        metavar="LAYOUT",
        help="kineto (one torch.profiler trace per rank) or megatron (pipeline scenarios: one op-level timer "
        "timeline); default: kineto, megatron for the megatron_* scenarios",
    ),
    whatif: str | None = typer.Option(
        None, "--whatif", metavar="FIX", help="write the job with this what-if fix applied (see --list), or 'all'"
    ),
    no_whatifs: bool = typer.Option(
        False, "--no-whatifs", help="skip the what-if truth (each what-if is one more simulation)"
    ),
    step_noise: float = typer.Option(
        0.0, "--step-noise", metavar="PCT", help="noise from step to step: every duration of a step scaled by exp(N(0, PCT %))"
    ),
    run_noise: float = typer.Option(
        0.0, "--run-noise", metavar="PCT", help="noise from run to run (one draw per --seed): every duration scaled by exp(N(0, PCT %))"
    ),
    list_: bool = typer.Option(
        False, "--list", help="list the scenarios, their knobs and the what-if fixes, then exit"
    ),
) -> None:
    from gpuprof.simulate import TRUTH_FILE, generate, read_truth

    if list_:
        from gpuprof.cli.console import is_terminal, terminal_width

        typer.echo(_list_text(terminal_width() if is_terminal() else None))
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
    from gpuprof.simulate import prepare, with_noise

    scenario, parsed = _resolve(scenario, parsed)
    # fail on a bad knob or option before touching the output folder
    with_noise(prepare(scenario, parsed, seed=seed, platform=platform, layout=layout, whatif=whatif)[1], step_noise, run_noise)
    _clear_previous(out)
    with working(f"simulating {scenario}" + ("" if no_whatifs else " and its what-if fixes")):
        path = generate(
            scenario,
            out,
            seed=seed,
            platform=platform,
            layout=layout,
            whatif=whatif,
            whatifs=not no_whatifs,
            step_noise_pct=step_noise,
            run_noise_pct=run_noise,
            **parsed,
        )
    truth = read_truth(path)
    exp = truth["expected"]
    n = len(truth["ranks"])
    typer.echo(
        f"wrote {n} trace{'s' if n != 1 else ''} of scenario {scenario} to {path}/ (ground truth: {path}/{TRUTH_FILE})"
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
    if truth.get("fixes"):
        typer.echo(f"the job is written with these what-if fixes applied: {', '.join(truth['fixes'])}")
    wi = truth.get("whatif")
    if wi and wi["step_us"]:
        typer.echo(
            f"what-if truth (the fixed job simulated; step {wi['baseline_step_us'] / 1e3:.2f} ms now), "
            f"intended: {', '.join(wi['intended']) or 'none'}:"
        )
        for name, pct in sorted(wi["savings_pct"].items(), key=lambda kv: -kv[1]):
            typer.echo(f"  {name:<20} step {wi['step_us'][name] / 1e3:8.2f} ms   saves {pct:5.1f}%")
    typer.echo(f"next: gpuprof analyze {path}")
