"""``gpuprof trigger SESSION``: ask a running ``gpuprof run`` for a profiling window now."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from gpuprof.cli.root import app
from gpuprof.errors import GpuprofError

TRIGGER_HELP = """Ask the `gpuprof run` recording SESSION for a profiling window now: every rank of
the job records the same few optimizer steps (the run's --profile-warmup and
--profile-active), and the window is diagnosed while the job runs.

The demand goes through the session folder (its control/ folder), which every rank of a
node sees; gpuprof answers within a second with the steps it chose, printed here. On
several nodes, each with its own `gpuprof run` and session, give every node the same
--at-step so that they all record the same steps. `kill -s RTMIN+1 <gpuprof's pid>` asks for a
window too.

Exit code 0 when the run answered, 1 when it did not within --wait seconds (the demand
stays and is answered when the run gets to it), 2 when SESSION is not a running session.
"""


@app.command(help=TRIGGER_HELP)
def trigger(
    session: Path = typer.Argument(..., metavar="SESSION", help="The session folder of a running `gpuprof run`."),
    at_step: int | None = typer.Option(None, "--at-step", min=1, metavar="STEP",
                                       help="Record from exactly this optimizer step (several nodes, one step)."),
    wait: float = typer.Option(10.0, "--wait", min=0.0, metavar="SECONDS",
                               help="How long to wait for the run's answer."),
) -> None:
    from gpuprof.cli.console import say
    from gpuprof.cli.streams import write_stdout
    from gpuprof.session.windows import read_window_files, running_with_windows, write_demand

    running_with_windows(session)  # a GpuprofError (exit 2) says why not
    try:
        name = write_demand(session, at_step)
    except OSError as exc:
        raise GpuprofError(f"cannot ask for a window: {exc.strerror or exc}", session) from None
    deadline = time.monotonic() + wait
    while True:
        for w in read_window_files(session):
            r = w.request
            if r is not None and r.demand == name:
                write_stdout(f"window {r.window}: every rank records optimizer steps {r.start_step}-{r.last_step} "
                             f"(asked for at step {r.requested_at_step}; {r.detail})\n")
                return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    say(f"no answer from gpuprof run within {wait:g} s (another window may be on its way, or the job is not "
        f"stepping); the demand stays in {session / 'control' / name} and is answered when the run gets to it")
    raise typer.Exit(1)
