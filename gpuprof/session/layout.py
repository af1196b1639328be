"""Session folder format, version 1 (``gpuprof.session/1``).

One folder per ``gpuprof run``. Every file is either written atomically (temp file +
rename) or appended line by line and flushed at least once a second, so a SIGKILL of
gpuprof, of the job, or of the machine loses at most about a second of data, and the
folder stays readable by ``gpuprof analyze`` whatever moment the run stopped at::

    <session>/
      session.json              metadata, atomic; rewritten at start and at end
      samples.jsonl             NVML samples: one JSON object per GPU per poll (append-only)
      processes.jsonl           per-process GPU memory / utilization of the job's processes
      events.jsonl              gpuprof's own events: warnings, GPU lost, sampler errors
      hooks/rank<R>-<pid>.jsonl torch hook records: steps, memory stats, hook errors
                                (hooks/pid<pid>.jsonl when the process has no RANK)
      traces/rank<R>.pt.trace.json.gz   one Kineto (PyTorch profiler) trace per rank (the first window)
      traces/job/pid<P>-<name>  the last trace the job's own profiler wrote in process P,
                                brought in when the run ended (a hard link, else a copy)
      windows/0001/...          later profiling windows (revision 2, below)
      control/                  windows asked for by ``gpuprof trigger`` (revision 2)
      report.json, report.html  the report made when the run ended (not with --no-report)

Trace names: ``rank<R>`` with the rank from torch.distributed, else ``RANK``; a process
with neither that multiprocessing did not start is rank 0 (``python train.py``). A process
whose rank nobody knows (``torch.multiprocessing.spawn`` trainers without torch.distributed)
writes ``unranked-pid<P>.pt.trace.json.gz``; a second process claiming a taken rank writes
``rank<R>-<pid>.pt.trace.json.gz``. Names are taken with an exclusive link, never by
overwriting. A job that runs its own ``torch.profiler`` keeps it: gpuprof's profiler steps
aside (stopped, its trace dropped, when it was recording) and the session's traces are
``traces/`` plus, for each process without a trace there, the last trace the job's own
profiler wrote (its ``job_trace`` records), brought into ``traces/job/`` when the run ends:
a session is read only from inside itself (:mod:`gpuprof.session.trust`), and the paths in
its records are never opened.
A trace is exported to ``traces/.<pid>.tmp.pt.trace.json.gz`` first and
renamed when complete: such a file left behind (its process was killed mid-export) is
reported by the reader as an unfinished trace.

Permissions: ``session.json`` and the hook logs hold the job's command line and are 0600
whatever the umask; every other file and folder gets what the umask gives. A folder
another user owns is refused as ``--session-dir``.

Creating ``session.json`` exclusively claims the folder: a second run given the same
folder is refused. While the run lasts, ``.gpuprof-reserve`` holds back disk space
(:data:`gpuprof.session.writer.RESERVE_BYTES`) that is released at the end so that the
final metadata fits on a disk the job filled; a run killed with SIGKILL leaves it behind.

``session.json`` keys:

* ``schema``: ``"gpuprof.session/1"``;
* ``status``: ``"running"`` until the run ends, then ``"finished"`` (a session still
  ``"running"`` with no gpuprof process left was killed);
* ``command`` (argv list), ``cwd``, ``host``, ``pid`` (the job's process id, which is also
  its process group id);
* ``start_time_unix_s``, ``end_time_unix_s`` (null while running);
* ``exit_code`` (what gpuprof returned: the job's code, 128+N for signal N; null while
  running), ``signal`` (N or null);
* ``sample_interval_ms``, ``hooks_enabled``, ``profile_schedule`` (``{"wait", "warmup",
  "active"}`` in optimizer steps);
* ``gpus``: list of ``{"index", "uuid", "name", "mem_total_bytes", "mig"}``;
* ``versions``: ``gpuprof``, ``python``, ``nvidia-ml-py``, ``driver``, ``nvml`` (the torch
  version of each Python process is in its hook ``start`` record);
* ``warnings``: list of strings (e.g. no driver: no samples; "the session is incomplete:
  samples.jsonl: No space left on device (120 records lost)" after a full disk).

A key of the wrong type (``"warnings": 5``) makes the session unreadable with one error
naming the key, never a crash later.

``samples.jsonl`` keys, one line per GPU per poll; ``null`` means the metric is
unsupported or could not be read -- never 0. :data:`SAMPLE_COLUMNS` lists them with units.
A line with ``"lost": true`` marks the poll at which NVML reported the GPU lost; that GPU
has no later lines.

``processes.jsonl``: ``time_unix_s``, ``gpu``, ``pid``, ``mem_used_bytes``,
``util_sm_pct``, ``util_mem_pct`` (null when unknown).

``events.jsonl``: ``time_unix_s``, ``kind`` (``warning``, ``gpu_lost``, ``error``),
``message``, optional ``gpu``; a ``warning`` some code must recognise has its ``code``
(:mod:`gpuprof.model.notice`, e.g. ``session.no_sampling``), the same text in
``session.json``'s ``warnings``.

``hooks/rank<R>-<pid>.jsonl``, one file per Python process that imported torch:
``time_unix_s``, ``kind``, ``rank`` (null when unknown), ``pid``. Kinds: ``start`` (``argv``, ``torch_version``,
``schedule``), ``step`` (one per optimizer step: ``step``; when CUDA is in use, the
:data:`MEMORY_STAT_KEYS` of ``torch.cuda.memory_stats()`` under their names with units --
``allocated_bytes``, ``reserved_bytes``, ``alloc_retries``, ``ooms``, ... -- on every step,
or every N steps when reading them would cost over 0.2 % of a step), ``profiler_start``,
``trace`` (``path`` of the written trace), ``note`` (``message``: why no trace was
taken; ``job_profiler`` true when the job started its own profiler and gpuprof stepped
aside), ``job_trace`` (``path``, absolute: a trace the job's own profiler wrote, e.g. with
``tensorboard_trace_handler``), ``error`` (``where``, ``message``, ``traceback``:
a hook failed and switched itself off; the job went on), ``exit`` (``steps``; ``signal``
15 when SIGTERM ended the process inside the profiler window, after the trace was written). Steps are
counted on the first optimizer that steps; ``rank`` is ``RANK`` from the environment.

**Revision 2** (``"revision": 2`` in ``session.json``; still ``gpuprof.session/1``: a
reader of revision 1 reads such a session as one window, ``traces/``). Windows after the
first, each in ``windows/<NNNN>/`` (:mod:`gpuprof.session.windows`): ``request.json`` (the
steps every rank records and why: ``window``, ``start_step``, ``warmup``, ``active``,
``reason`` -- ``every``, ``change`` or ``demand`` --, ``detail``, ``requested_unix_s``,
``requested_at_step``, ``change``, ``demand``), ``traces/`` (one trace per rank, named as in
``traces/``), ``diagnosis.json`` (the window's diagnosis, made while the job runs) and
``report.json`` (its full report; both stay when ``--keep`` prunes the window's traces). ``control/demand-<ns>-<pid>.json``: a window asked for (``requested_unix_s``,
``at_step``), removed once ``gpuprof run`` answered it with a window. ``session.json``
gains ``windows`` (``every_steps``, ``every_s``, ``on_change``, ``keep``, ``trigger_gap_s``).
Hook records gain: ``backward_unix_s`` on ``step`` (when the step's first
``torch.autograd.backward`` started), ``window`` on ``profiler_start`` and ``trace`` (absent
or 0: the first window), ``window_steps`` on ``profiler_start`` and ``trace`` (``[first,
last]``: the optimizer steps the window records) and the kind ``window_missed``
(``window``, ``step``, ``start_step``: the process was past the window's start when it saw
the request). Every path a window writes is inside the session folder, and the records name
it relative to it. How windows are asked for: docs/long-runs.md.

Every ``*.jsonl`` file is readable with ``pandas.read_json(path, lines=True)`` once the
run has finished; a run killed mid-write may leave a torn last line, which
:func:`gpuprof.session.read_session` drops.
"""

from __future__ import annotations

from pathlib import Path

SESSION_SCHEMA = "gpuprof.session/1"

META_FILE = "session.json"
SAMPLES_FILE = "samples.jsonl"
PROCESSES_FILE = "processes.jsonl"
EVENTS_FILE = "events.jsonl"
HOOKS_DIR = "hooks"
TRACES_DIR = "traces"
# The traces the job's own profiler wrote, brought into the session when the run ended.
JOB_TRACES_DIR = "traces/job"
WINDOWS_DIR = "windows"  # revision 2: windows after the first
CONTROL_DIR = "control"  # revision 2: demands for a window
# Additive revisions within gpuprof.session/1 (readers of an older revision still read it).
SESSION_REVISION = 2
RESERVE_FILE = ".gpuprof-reserve"
# How a ``warnings`` entry of session.json starts when no GPU could be sampled (no driver,
# NVML failed): the words only. A report on a job that ran on the CPU leaves the warning
# out by its code (its event's ``code``, gpuprof.model.notice.NO_SAMPLING): see
# gpuprof.session.notices.
NO_SAMPLING = "no GPU sampling"
# How sessions written before warnings had codes (no warning event with a ``code``) begin
# that warning: their files are worded so for good, so only such a session is read by it.
NO_SAMPLING_BEFORE_CODES = "no GPU sampling"

# Column -> meaning and unit, in the order the samples table uses.
SAMPLE_COLUMNS: dict[str, str] = {
    "time_unix_s": "poll time, seconds since the Unix epoch",
    "gpu": "GPU index in the job's visible order (CUDA_VISIBLE_DEVICES order)",
    "uuid": "GPU (or MIG device) UUID",
    "lost": "true on the poll where NVML reported the GPU lost",
    "util_gpu_pct": "share of the last sample period a kernel was running, percent",
    "util_mem_pct": "share of the last sample period device memory was read/written, percent",
    "mem_used_bytes": "device memory in use, bytes",
    "mem_total_bytes": "device memory capacity, bytes",
    "power_w": "board power draw, watts",
    "energy_mj": "energy counter since driver load, millijoules (cumulative)",
    "clock_sm_mhz": "SM clock, MHz",
    "clock_mem_mhz": "memory clock, MHz",
    "clock_event_reasons": "bitmask of NVML clock-event (throttle) reasons",
    "temperature_c": "GPU temperature, degrees Celsius",
    "pcie_tx_bytes_per_s": "PCIe transmit throughput, bytes per second",
    "pcie_rx_bytes_per_s": "PCIe receive throughput, bytes per second",
    "nvlink_tx_kib": "NVLink data transmitted since counter reset, KiB (cumulative)",
    "nvlink_rx_kib": "NVLink data received since counter reset, KiB (cumulative)",
    "gpm_sm_active_pct": "GPM: share of SMs busy, percent (Hopper and newer)",
    "gpm_sm_occupancy_pct": "GPM: active warps vs theoretical maximum, percent",
    "gpm_tensor_active_pct": "GPM: share of time SMs ran any tensor op, percent",
    "gpm_dram_bw_pct": "GPM: DRAM bandwidth used vs peak, percent",
}

# torch.cuda.memory_stats() key -> our column name (units in the name).
MEMORY_STAT_KEYS: dict[str, str] = {
    "allocated_bytes.all.current": "allocated_bytes",
    "allocated_bytes.all.peak": "allocated_peak_bytes",
    "reserved_bytes.all.current": "reserved_bytes",
    "reserved_bytes.all.peak": "reserved_peak_bytes",
    "num_alloc_retries": "alloc_retries",
    "num_ooms": "ooms",
    "num_device_alloc": "device_allocs",
    "num_device_free": "device_frees",
}


def is_session(path: str | Path) -> bool:
    """True when ``path`` is a folder written by ``gpuprof run``."""
    p = Path(path)
    return p.is_dir() and (p / META_FILE).is_file()


def trace_file_name(rank: int, pid: int | None = None) -> str:
    """Kineto trace name for a rank; ``pid`` disambiguates two processes with one rank."""
    return f"rank{rank}.pt.trace.json.gz" if pid is None else f"rank{rank}-{pid}.pt.trace.json.gz"
