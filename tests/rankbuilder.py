"""Build small ``RankTrace``s by hand: every interval, launch and answer known by construction.

    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)            # compute kernel, launched by cudaLaunchKernel
    b.host(100, 400, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    b.kernel(410, 500, launch_at=400)
    trace = b.build()

Launch calls last ``launch_us`` (5 µs by default) on host thread ``tid`` 1. Categories are
set with the project's classifier, as a reader would.
"""

from __future__ import annotations

from typing import Any

from gpuprof.model.classify import classify, parse_copy
from gpuprof.model.timeline import (
    DEVICE_COLUMNS,
    HOST_COLUMNS,
    Category,
    CopyKind,
    Kind,
    MemorySample,
    RankTrace,
    Step,
    make_table,
)


class RankBuilder:
    def __init__(self, launch_us: float = 5.0) -> None:
        self.launch_us = launch_us
        self.dev: list[dict[str, Any]] = []
        self.hst: list[dict[str, Any]] = []
        self.steps: list[Step] = []
        self._corr = 1000

    def _launch(self, at: float | None, name: str, tid: int) -> int:
        self._corr += 1
        if at is not None:
            self.host(at, at + self.launch_us, name, kind=Kind.RUNTIME, tid=tid, correlation=self._corr)
        return self._corr

    def kernel(
        self,
        start: float,
        end: float,
        launch_at: float | None = None,
        name: str = "sm90_gemm_kernel",
        stream: int = 7,
        tid: int = 1,
        category: Category | None = None,
    ) -> int:
        """A device kernel; ``launch_at`` None = its launch is not in the trace."""
        corr = self._launch(launch_at, "cudaLaunchKernel", tid)
        cat = category if category is not None else classify(Kind.KERNEL, name)
        self.dev.append(
            {
                "start_us": start,
                "end_us": end,
                "kind": int(Kind.KERNEL),
                "category": int(cat),
                "stream": stream,
                "correlation": corr,
                "name": name,
            }
        )
        return corr

    def copy(
        self,
        start: float,
        end: float,
        name: str = "Memcpy HtoD (Pinned -> Device)",
        launch_at: float | None = None,
        nbytes: int = -1,
        stream: int = 7,
    ) -> int:
        corr = self._launch(launch_at, "cudaMemcpyAsync", 1)
        ck, pageable = parse_copy(name)
        self.dev.append(
            {
                "start_us": start,
                "end_us": end,
                "kind": int(Kind.MEMCPY),
                "category": int(Category.COPY),
                "stream": stream,
                "correlation": corr,
                "name": name,
                "copy_kind": int(ck),
                "pageable": pageable,
                "bytes": nbytes,
            }
        )
        return corr

    def memset(self, start: float, end: float, launch_at: float | None = None) -> int:
        corr = self._launch(launch_at, "cudaMemsetAsync", 1)
        self.dev.append(
            {
                "start_us": start,
                "end_us": end,
                "kind": int(Kind.MEMSET),
                "category": int(Category.MEMSET),
                "stream": 7,
                "correlation": corr,
                "name": "Memset (Device)",
                "copy_kind": int(CopyKind.NONE),
            }
        )
        return corr

    def host(
        self,
        start: float,
        end: float,
        name: str,
        kind: Kind = Kind.OP,
        tid: int = 1,
        correlation: int = -1,
    ) -> None:
        self.hst.append(
            {
                "start_us": start,
                "end_us": end,
                "kind": int(kind),
                "category": int(classify(kind, name)),
                "tid": tid,
                "correlation": correlation,
                "name": name,
            }
        )

    def step(self, number: int, start: float, end: float) -> None:
        self.steps.append(Step(number, start, end))
        self.host(start, end, f"ProfilerStep#{number}", kind=Kind.ANNOTATION)

    def build(self, **kw: Any) -> RankTrace:
        def table(rows: list[dict[str, Any]], schema: tuple[str, ...]) -> Any:
            cols: dict[str, list[Any]] = {c: [] for c in schema}
            keys = {k for r in rows for k in r} | {"start_us", "end_us", "kind", "name"}
            for r in rows:
                for c in schema:
                    if c in keys:
                        cols[c].append(r.get(c, _DEFAULT.get(c)))
            return make_table({c: v for c, v in cols.items() if c in keys}, schema)

        memory: tuple[MemorySample, ...] = kw.pop("memory", ())
        return RankTrace(
            rank=kw.pop("rank", 0),
            source=kw.pop("source", "built.json"),
            fmt="kineto",
            device=table(self.dev, DEVICE_COLUMNS),
            host=table(self.hst, HOST_COLUMNS),
            steps=tuple(self.steps),
            memory=memory,
            **kw,
        )


_DEFAULT: dict[str, Any] = {
    "stream": -1,
    "correlation": -1,
    "copy_kind": int(CopyKind.NONE),
    "pageable": False,
    "bytes": -1,
    "tid": -1,
}


def lost_by_cause(trace: RankTrace) -> dict[str, float]:
    """Summarize a trace and attribute its local claims: ``{cause: µs}`` plus ``compute``."""
    from gpuprof.accounting.attribution import attribute
    from gpuprof.accounting.summarize import summarize

    s = summarize(trace)
    att = attribute(s.lost, s.claims)
    out = {c.value: v for c, v in att.lost_us.items()}
    out["compute"] = float(sum(s.compute[1] - s.compute[0]))
    out["window"] = s.window_us
    return out


def advice_context(*traces: RankTrace) -> Any:
    """An AdviceContext for the local advisors: each trace summarized and its local claims
    attributed, as the pipeline does for a job without cross-rank findings, with the job's
    what-if replays."""
    from gpuprof.accounting.attribution import attribute
    from gpuprof.accounting.summarize import summarize
    from gpuprof.advice import AdviceContext
    from gpuprof.job.cross_rank import analyze_job
    from gpuprof.model.report import RankReport

    summaries, reports = [], []
    done = [summarize(t) for t in traces]
    cross = analyze_job(done)
    for s in done:
        att = attribute(s.lost, s.claims)
        summaries.append(s)
        reports.append(
            RankReport(
                rank=s.rank,
                device=None,
                steps=len(s.steps),
                window_us=s.window_us,
                compute_us=float(sum(s.compute[1] - s.compute[0])),
                lost_us=dict(att.lost_us),
                step_times_us=tuple(x.duration_us for x in s.steps),
            )
        )
    return AdviceContext(summaries=summaries, reports=reports, whatifs=cross.whatifs)
