"""The job's own traces, brought into its session when ``gpuprof run`` ends.

A job that runs its own ``torch.profiler`` writes its traces where it likes (``./log``
with ``tensorboard_trace_handler``); the hooks record each path (``job_trace``). A session
is read only from inside itself (:mod:`gpuprof.session.trust`), so the run brings the last
trace of each process into ``traces/job/`` while the paths are known good -- the run made
them -- as ``pid<P>-<name>``: a hard link where the file system allows one (no copy, no
space), else a copy. A reader never opens a path a record names.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from gpuprof.session.layout import JOB_TRACES_DIR
from gpuprof.session.reader import adopted_name, hook_records, job_traces_by_process
from gpuprof.session.records import Problems
from gpuprof.util.atomic import remove_quietly


def adopt_job_traces(root: Path) -> list[str]:
    """Link (or copy) the last trace of each of the job's processes into ``traces/job/``;
    returns one warning per trace that could not be brought in. Never raises."""
    try:
        recs, _ = hook_records(root, Problems())
    except Exception:  # the hook logs are the job's: whatever they hold, the run goes on
        return []
    warnings: list[str] = []
    for pid, paths in job_traces_by_process(recs).items():
        src = Path(paths[-1])
        try:
            st = os.stat(src)
        except OSError:
            warnings.append(f"the job's own profiler wrote {src} (process {pid}), which is no longer there")
            continue
        if not stat.S_ISREG(st.st_mode):
            warnings.append(f"the job's own profiler wrote {src} (process {pid}), which is not a regular file")
            continue
        folder = root / JOB_TRACES_DIR
        dest = folder / adopted_name(pid, str(src))
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _link_or_copy(src, dest)
        except FileExistsError:
            continue
        except OSError as exc:
            warnings.append(f"the job's own trace {src} (process {pid}) could not be brought into the session: "
                            f"{exc.strerror or exc}")
    return warnings


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
        return
    except FileExistsError:
        raise
    except OSError:
        pass  # another file system, or links not allowed: copy
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        remove_quietly(tmp)
        raise


__all__ = ["adopt_job_traces"]
