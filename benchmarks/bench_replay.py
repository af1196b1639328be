"""What the job-level what-if replay costs against the rest of ``gpuprof analyze`` (issue 10).

    python benchmarks/bench_replay.py [PATH ...] [--repeat 3] [--gen]

For each input (a trace file or a job folder; by default every folder of
``../shared/traces``, and with ``--gen`` the generated cases of ``bench_analyze.py`` that
are already in ``benchmarks/out/traces``), the whole analysis runs in this process, one
rank after the other, with the CPU time (user + system; the machine is shared, wall time
would measure the neighbours) of each part recorded:

* ``read``: the readers, trace -> RankTrace;
* ``summarize``: RankTrace -> RankSummary, of which ``graph`` is building the rank's
  dependency graph (:func:`gpuprof.accounting.graph.build_rank_graph`);
* ``job``: the job-level analysis, of which ``model`` is tying the graphs into the job
  model (:func:`gpuprof.job.assemble.build_job_model`) and ``replays`` every replay of
  it (the unchanged job, each what-if, the combined one the advice asks for);
* ``advice`` and ``render``: the rest of the report, replays excluded.

``replay share`` is what the replay adds to analyze: (graph + model + replays) / (the
rest), the figure issue 10 bounds at 25 %. Imports are done before the clock starts. The
fastest of ``--repeat`` runs counts. Peak memory of the graphs: the sum of their arrays.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "traces"
GENERATED = HERE / "out" / "traces"
GEN_CASES = ("gen-1r-100MB", "gen-1r-200MB", "gen-8r-50MB", "gen-128r-4MB", "gen-1r-50MB-5steps")


class Clock:
    """CPU seconds spent inside wrapped functions, by part (nested parts are not subtracted
    from their parents; the report does that)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.depth: dict[str, int] = defaultdict(int)

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth[part]:  # re-entered: counted by the outer call
                return fn(*args, **kwargs)
            self.depth[part] += 1
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[part] += time.process_time() - t0
                self.calls[part] += 1
                self.depth[part] -= 1

        return timed


def _patch(clock: Clock) -> list[tuple[Any, str, Any]]:
    """Wrap the timed functions; returns what to put back."""
    import gpuprof.accounting.summarize as summarize
    import gpuprof.job.cross_rank as cross_rank
    import gpuprof.job.whatifs as whatifs
    import gpuprof.pipeline as pipeline
    import gpuprof.pipeline.executors as executors

    targets = [
        (summarize, "build_rank_graph", "graph"),
        (cross_rank, "build_job_model", "model"),
        (whatifs.JobModel, "replay", "replays"),
        (whatifs.JobModel, "microbatch_saving_us", "replays"),
        (pipeline, "analyze_job", "job"),
        (pipeline, "advise_all", "advice"),
        (executors, "summarize", "summarize"),
    ]
    undo = []
    for owner, attr, part in targets:
        fn = getattr(owner, attr)
        undo.append((owner, attr, fn))
        setattr(owner, attr, clock.wrap(part, fn))
    return undo


def measure(path: Path) -> dict[str, Any]:
    """One analysis of ``path`` with the time of each part."""
    import gpuprof.pipeline as pipeline
    import gpuprof.pipeline.executors as executors
    from gpuprof.readers import ReadLimits, discover
    clock = Clock()
    undo = _patch(clock)
    try:
        sources = discover([path], [], ReadLimits.from_gb(None))
        t0 = time.process_time()
        traces_read = 0.0
        summaries = []
        for src in sources:
            r0 = time.process_time()
            it = iter(src.load())
            traces_read += time.process_time() - r0
            while True:
                r0 = time.process_time()
                try:
                    trace = next(it)
                except StopIteration:
                    traces_read += time.process_time() - r0
                    break
                traces_read += time.process_time() - r0
                summaries.append(executors.summarize(trace, pipeline.AnalyzeOptions().steps))
        clock.spent["read"] = traces_read
        # The rest of run_analysis, on the summaries already made.
        orig = pipeline._summaries
        pipeline._summaries = lambda *a, **k: list(summaries)  # type: ignore[assignment]
        try:
            analysis = pipeline.run_analysis([path])
        finally:
            pipeline._summaries = orig  # type: ignore[assignment]
        r0 = time.process_time()
        _render_json(analysis.report)
        clock.spent["render"] = time.process_time() - r0
        total = time.process_time() - t0
    finally:
        for owner, attr, fn in undo:
            setattr(owner, attr, fn)
    graph_bytes = sum(s.graph.nbytes for s in summaries if s.graph is not None)
    events = sum(s.graph.n_events for s in summaries if s.graph is not None)
    replay = clock.spent["graph"] + clock.spent["model"] + clock.spent["replays"]
    return {
        "ranks": len(summaries),
        "graph_events": events,
        "graph_bytes": graph_bytes,
        "total_s": total,
        "parts_s": dict(clock.spent),
        "replay_calls": clock.calls["replays"],
        "replay_s": replay,
        "rest_s": total - replay,
        "replay_share": replay / max(total - replay, 1e-9),
    }


def _render_json(report: Any) -> str:
    from gpuprof.render.json import render_json

    return render_json(report)


def cases(args: argparse.Namespace) -> list[Path]:
    if args.paths:
        return [Path(p) for p in args.paths]
    out = []
    if SHARED.is_dir():
        out += sorted(p for p in SHARED.iterdir() if p.is_dir() and p.name != "LICENSES")
    if args.gen:
        for name in GEN_CASES:
            folder = GENERATED / name
            if folder.is_dir():
                out.append(folder)
            else:
                print(f"note: {folder} is absent (run bench_analyze.py once to make it)", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="trace files or job folders [every shared trace folder]")
    ap.add_argument("--gen", action="store_true", help="also the generated cases already made")
    ap.add_argument("--repeat", type=int, default=1, help="keep the fastest of N runs [1]")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    import gpuprof.pipeline  # noqa: F401  imports before any clock
    import gpuprof.readers  # noqa: F401
    import gpuprof.render.json  # noqa: F401

    rows: dict[str, Any] = {}
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) at start")
    head = f"{'case':32s} {'ranks':>5s} {'events':>9s} {'total':>7s} {'read':>6s} {'summ':>6s} {'graph':>6s} {'job':>6s} {'model':>6s} {'replays':>8s} {'n':>3s} {'advice':>6s} {'share':>6s} {'graph MB':>8s}"
    print(head)
    for path in cases(args):
        best: dict[str, Any] | None = None
        for _ in range(max(1, args.repeat)):
            got = measure(path)
            if best is None or got["total_s"] < best["total_s"]:
                best = got
        assert best is not None
        p = best["parts_s"]
        name = path.name
        rows[name] = best
        print(
            f"{name:32s} {best['ranks']:5d} {best['graph_events']:9d} {best['total_s']:7.3f} {p.get('read', 0):6.3f} "
            f"{p.get('summarize', 0):6.3f} {p.get('graph', 0):6.3f} {p.get('job', 0):6.3f} {p.get('model', 0):6.3f} "
            f"{p.get('replays', 0):8.3f} {best['replay_calls']:3d} {p.get('advice', 0):6.3f} "
            f"{100 * best['replay_share']:5.0f}% {best['graph_bytes'] / 1e6:8.2f}",
            flush=True,
        )
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) at end")
    print("CPU seconds; share = (graph + model + replays) / (total - them)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
