"""Per-rank work on a Dask distributed cluster (``gpuprof analyze --scheduler ADDRESS``).

When one machine is not enough (thousands of ranks, terabytes of traces), the per-rank step
-- read one trace and reduce it to a compact :class:`RankSummary` -- runs on the workers of
an existing Dask cluster; only the summaries come back, and the job-level analysis, the
attribution and the advice run here exactly as they do locally, so the report is the same.

What the cluster must provide:

* every worker can import the same version of gpuprof (``pip install 'gpuprof[dask]'``);
* every worker sees the trace files at the same absolute paths as this machine (a shared
  file system such as NFS, Lustre or a mounted bucket): only the small source descriptions
  (a path and a format) travel to the workers, never the trace bytes.

Dask is an optional extra: it is imported here, lazily, and only when ``--scheduler`` is
given, so ``gpuprof analyze`` without it never needs it.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuprof.accounting.summary import RankSummary
from gpuprof.accounting.window import StepSelection
from gpuprof.errors import GpuprofError
from gpuprof.pipeline.dask_address import CONNECT_TIMEOUT_S as CHECK_TIMEOUT_S
from gpuprof.pipeline.dask_address import check_scheduler
from gpuprof.pipeline.executors import Progress, Unreadable, summarize_source
from gpuprof.util.version import __version__

INSTALL_HINT = "pip install 'gpuprof[dask]'"
# How long to wait for the scheduler to answer (the address checks of dask_address and the
# client's connection, each), and then for at least one worker to join; while the ranks
# are summarized, how long the cluster may have no worker before the run gives up.
CONNECT_TIMEOUT_S = CHECK_TIMEOUT_S
WORKER_WAIT_S = 60.0
POLL_S = 2.0


def _import_client() -> Any:
    try:
        from dask.distributed import Client
    except ImportError as exc:  # dask or distributed missing, or a broken install
        raise GpuprofError(
            f"--scheduler needs Dask distributed, which is not installed ({exc}): {INSTALL_HINT}"
        )
    return Client


def _worker_version() -> str:
    """Runs on each worker: the gpuprof version it imports (checked against ours)."""
    return __version__


def _summarize_on_worker(source: Any, selection: StepSelection) -> list[RankSummary]:
    """Runs on a worker: :func:`gpuprof.pipeline.executors.summarize_source`, after checking
    that this worker sees the file (the usual mistake on a cluster without a shared file
    system)."""
    path = getattr(source, "path", None)
    if path is not None and not Path(path).exists():
        raise GpuprofError(
            f"not found on Dask worker {socket.gethostname()}: the workers must see the traces "
            "at the same path as this machine (a shared file system)",
            path,
        )
    return summarize_source(source, selection)


def _absolute(source: Any) -> Any:
    """The source with an absolute path, so that a worker with another working folder finds it.

    Sources are small frozen dataclasses holding ``path``; anything else is sent unchanged.
    """
    path = getattr(source, "path", None)
    if path is None or not dataclasses.is_dataclass(source) or isinstance(source, type):
        return source
    p = Path(path)
    if p.is_absolute():
        return source
    absolute = Path(os.path.abspath(p))
    return dataclasses.replace(source, path=absolute if isinstance(path, Path) else str(absolute))


def _restore_source_names(summaries: list[RankSummary], sent: Any, original: Any) -> list[RankSummary]:
    """Give summaries the source name a local run would have shown (not the absolute path)."""
    sent_name, orig_name = str(getattr(sent, "path", "")), str(getattr(original, "path", ""))
    if sent_name == orig_name:
        return summaries
    return [dataclasses.replace(s, source=orig_name) if s.source == sent_name else s for s in summaries]


def _connect(client_cls: Any, address: str) -> Any:
    """The client, made in a thread of its own so that no server can keep gpuprof past
    :data:`CONNECT_TIMEOUT_S` (the address was checked, but a server may still stop
    answering); any failure is one line."""
    import threading

    made: dict[str, Any] = {}

    def make() -> None:
        try:
            made["client"] = client_cls(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except BaseException as exc:  # noqa: BLE001 -- reported below, in the caller's thread
            made["error"] = exc

    thread = threading.Thread(target=make, name="gpuprof-dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S + 5.0)
    if thread.is_alive():
        raise GpuprofError(f"the Dask scheduler at {address} did not accept a client within {CONNECT_TIMEOUT_S:g} s")
    if "error" in made:
        exc = made.pop("error")
        _quietly_collect()
        raise GpuprofError(f"cannot connect to the Dask scheduler at {address}: {_first_line(exc)}")
    return made["client"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:200] if text else type(exc).__name__) or type(exc).__name__


def _quietly_collect() -> None:
    """Collect the half-made client now, so that its ``__del__`` complaining about the
    failed connection is not printed as a traceback at exit."""
    import gc
    import sys

    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        gc.collect()
    finally:
        sys.unraisablehook = hook


def _check_workers(client: Any, address: str) -> None:
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    except (OSError, TimeoutError) as exc:
        raise GpuprofError(f"the Dask scheduler at {address} has no workers ({exc})")
    try:
        versions = client.run(_worker_version)
    except (ImportError, AttributeError) as exc:
        raise GpuprofError(
            f"Dask workers at {address} cannot import gpuprof ({exc}): {INSTALL_HINT} on every worker"
        )
    wrong = sorted(f"{w} has {v}" for w, v in versions.items() if v != __version__)
    if wrong:
        raise GpuprofError(
            f"Dask workers run another gpuprof version than this one ({__version__}): "
            + ", ".join(wrong)
        )


def summarize_on_cluster(
    sources: Sequence[Any],
    steps: StepSelection,
    scheduler_address: str,
    progress: Progress | None = None,
) -> list[RankSummary]:
    """Summarize every source on the Dask cluster at ``scheduler_address``.

    Returns the summaries in the order of ``sources`` (as the local serial path does), so
    the report does not depend on which worker finished first. A trace the workers cannot
    read raises the same :class:`GpuprofError` a local run would, naming the file.
    """
    client_cls = _import_client()
    where = check_scheduler(scheduler_address, CONNECT_TIMEOUT_S).url
    sent = [_absolute(s) for s in sources]
    client = _connect(client_cls, where)
    try:
        _check_workers(client, scheduler_address)
        # pure=False: a trace file may change between runs on a long-lived cluster, so a
        # result is never reused from an earlier submission of the same path.
        futures = client.map(_summarize_on_worker, sent, selection=steps, pure=False)
        results = _gather(client, futures, sources, scheduler_address, progress)
    finally:
        with _suppressed():
            client.close(timeout=CONNECT_TIMEOUT_S)
    out: list[RankSummary] = []
    for src_sent, src_orig, got in zip(sent, sources, results):
        assert got is not None  # every future was waited for above
        out.extend(_restore_source_names(got, src_sent, src_orig))
    return out


def _gather(client: Any, futures: list[Any], sources: Sequence[Any], address: str,
            progress: Progress | None) -> list[list[RankSummary] | None]:
    """Every future's summaries, in order; a cluster that is lost meanwhile -- the scheduler
    gone, or no worker left for :data:`WORKER_WAIT_S` -- is one line naming what was lost."""
    import time

    from dask.distributed import as_completed

    index = {f.key: i for i, f in enumerate(futures)}
    results: list[list[RankSummary] | None] = [None] * len(futures)
    pending = as_completed(futures, loop=client.loop)
    n, done = len(futures), 0
    no_workers_since: float | None = None
    last_look = time.monotonic()
    while not pending.is_empty():
        finished = pending.next_batch(block=False) if pending.has_ready() else []
        for fut in finished:
            i = index[fut.key]
            try:
                # A GpuprofError raised on a worker is raised again here, with the same message.
                results[i] = fut.result()
            except GpuprofError:
                raise
            except Exception as exc:  # noqa: BLE001 -- a worker lost, the scheduler gone: name it
                raise GpuprofError(f"the Dask cluster at {address} lost the work on "
                                   f"{getattr(sources[i], 'path', sources[i])}: {_first_line(exc)}") from None
            done += 1
            if progress:
                progress(f"read {getattr(sources[i], 'path', sources[i])} ({done}/{n}) on {address}")
            fut.release()  # the summary is here now; free the worker's copy
        if finished:
            continue
        time.sleep(0.05)
        if time.monotonic() - last_look < POLL_S:
            continue
        last_look = time.monotonic()
        try:
            workers = len(client.scheduler_info().get("workers", {}))
        except Exception as exc:  # noqa: BLE001
            raise GpuprofError(f"lost the Dask scheduler at {address} while the ranks were read: {_first_line(exc)}")
        if workers:
            no_workers_since = None
        elif no_workers_since is None:
            no_workers_since = time.monotonic()
        elif time.monotonic() - no_workers_since > WORKER_WAIT_S:
            raise GpuprofError(f"the Dask cluster at {address} lost all its workers; {n - done} of {n} ranks "
                               f"were not read (none came back within {WORKER_WAIT_S:g} s)")
    return results


def _suppressed() -> Any:
    import contextlib

    return contextlib.suppress(Exception)


class DaskExecutor:
    """The per-rank work on the Dask cluster at ``address`` (see the module docstring); a
    source the workers cannot read raises, as a local run of that file would."""

    def __init__(self, address: str) -> None:
        self.address = address

    def summaries(
        self, sources: Sequence[Any], steps: StepSelection, progress: Progress | None, unreadable: Unreadable
    ) -> list[RankSummary]:
        return summarize_on_cluster(sources, steps, self.address, progress)


__all__ = ["INSTALL_HINT", "DaskExecutor", "summarize_on_cluster"]
