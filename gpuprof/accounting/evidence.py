"""What a rank's trace holds and lacks: the evidence conclusions can rest on.

Traces are often exported filtered (only the NCCL kernels, to look at collectives; only
the GPU events; only the runtime calls that launched work) or sampled. The analysis runs
on what is there, but a conclusion about a part that is not there would be made up: no
compute kernels means no overlap of communication with compute can be judged; no host
events means no DataLoader, sync or launch overhead can be seen. :func:`trace_lacks`
finds, per rank, which of these kinds of evidence (:class:`Evidence`) the trace lacks and
why; :mod:`gpuprof.advice` holds back the recommendations that need them.

Detection, for traces of a format that records launch calls (``RankTrace.holds``: Kineto)
with device activity (op-level timelines record framework timers by design and are not
judged):

``compute_kernels``  no compute kernel among the device events (only communication
                     kernels, copies or memsets);
``host_events``      no host event at all (no framework op, runtime or driver call,
                     annotation): a GPU-only export;
``launch_calls``     host events but no kernel launch call (``cudaLaunchKernel``, ...);
``runtime_calls``    every runtime call launched device work (at least
                     :data:`~gpuprof.accounting.hostfacts.FILTERED_MIN_RUNTIME_CALLS` of
                     them) and none of the usual synchronization, event or allocation
                     calls: an export filtered to launches;
``all_launches``     under :data:`MIN_LAUNCH_SHARE` of the device work has its launch
                     call in the trace: host events sampled or partly filtered;
``all_kernels``      of at least :data:`MIN_LAUNCHES` kernel launch calls, under
                     :data:`MIN_LAUNCH_SHARE` have their device event in the trace: device
                     events sampled or filtered (compute is then under-counted).

A rank without host events lacks the last three as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

import numpy as np

from gpuprof.accounting.hostfacts import FILTERED_MIN_RUNTIME_CALLS, TrustFacts
from gpuprof.accounting.launches import activity_mask
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, Kind, RankTrace

# Below this share of device work with a known launch call, the launches are taken to be
# sampled or filtered (the same bound as the trust warning in hostfacts).
MIN_LAUNCH_SHARE = 0.5
# Fewer launch calls than this say nothing about missing device events.
MIN_LAUNCHES = 20


class Evidence(str, Enum):
    """A kind of event a conclusion may need from the trace."""

    COMPUTE_KERNELS = "compute_kernels"
    HOST_EVENTS = "host_events"
    LAUNCH_CALLS = "launch_calls"
    RUNTIME_CALLS = "runtime_calls"
    ALL_LAUNCHES = "all_launches"
    ALL_KERNELS = "all_kernels"

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Evidence.COMPUTE_KERNELS: "compute kernels",
    Evidence.HOST_EVENTS: "host events",
    Evidence.LAUNCH_CALLS: "kernel launch calls",
    Evidence.RUNTIME_CALLS: "the runtime calls besides launches (synchronization, allocation)",
    Evidence.ALL_LAUNCHES: "the launch call of every kernel (an unsampled trace)",
    Evidence.ALL_KERNELS: "the device event of every launch (an unsampled trace)",
}
_HOST_KINDS = (int(Kind.OP), int(Kind.RUNTIME), int(Kind.DRIVER), int(Kind.ANNOTATION), int(Kind.PYTHON))


def trace_lacks(trace: RankTrace, trust: TrustFacts) -> dict[str, str]:
    """``{evidence: why}`` for each kind of :class:`Evidence` the rank's trace lacks.

    ``trust`` are the rank's measured trust facts (its runtime calls, the share of them
    matched to device work, the share of device work whose launch call is in the trace).
    Empty for op-level timelines and ranks with no device activity.
    """
    dev = trace.device_cols
    act = activity_mask(dev)
    if not trace.holds.launch_calls or not act.any():
        return {}
    out: dict[str, str] = {}
    cat = dev["category"][act]
    if not (cat == int(Category.COMPUTE)).any():
        comm = one_of(cat, (int(Category.COLLECTIVE), int(Category.P2P)))
        what = "only communication kernels" if comm.all() else "only communication kernels, copies or memsets"
        out[Evidence.COMPUTE_KERNELS.value] = f"no compute kernels, {what}"
    host = trace.host_cols
    kinds = host["kind"]
    if not one_of(kinds, _HOST_KINDS).any():
        why = "no host events: a GPU-only trace"
        for e in (Evidence.HOST_EVENTS, Evidence.LAUNCH_CALLS, Evidence.RUNTIME_CALLS, Evidence.ALL_LAUNCHES):
            out[e.value] = why
        return out
    runtime = one_of(kinds, (int(Kind.RUNTIME), int(Kind.DRIVER)))
    launches = runtime & (host["category"] == int(Category.LAUNCH))
    if not launches.any():
        why = "no kernel launch calls among its host events"
        out[Evidence.LAUNCH_CALLS.value] = why
        out[Evidence.ALL_LAUNCHES.value] = why
        return out
    n_rt, matched = trust.runtime_calls, trust.runtime_calls_matched_share
    if n_rt >= FILTERED_MIN_RUNTIME_CALLS and matched is not None and matched >= 0.999:
        out[Evidence.RUNTIME_CALLS.value] = (
            f"only launch calls among its {n_rt} runtime calls, no synchronization, event or allocation call: "
            "a filtered export"
        )
    corr = host["correlation"][launches]
    dev_corr = dev["correlation"]
    seen = float(np.isin(corr, dev_corr[dev_corr >= 0]).mean())
    if corr.size >= MIN_LAUNCHES and seen < MIN_LAUNCH_SHARE:
        out[Evidence.ALL_KERNELS.value] = (
            f"only {100 * seen:.0f}% of its {corr.size} launch calls have their device event in the trace: "
            "device events filtered or sampled"
        )
    share = trust.launch_matched_share
    if share is not None and share < MIN_LAUNCH_SHARE:
        out[Evidence.ALL_LAUNCHES.value] = (
            f"only {100 * share:.0f}% of its device work has its launch call in the trace: sampled or filtered"
        )
    return out


def lacks_warnings(lacks: Mapping[str, str]) -> tuple[str, ...]:
    """Report lines for what a rank's trace lacks that other warnings do not already say."""
    out = []
    why = lacks.get(Evidence.COMPUTE_KERNELS.value)
    if why:
        out.append(
            f"the trace has {why}; compute time, and how much communication it hides, are unknown, and "
            "conclusions that need them are held back"
        )
    why = lacks.get(Evidence.ALL_KERNELS.value)
    if why and Evidence.COMPUTE_KERNELS.value not in lacks:
        out.append(
            f"device events are missing ({why}); compute is under-counted, and conclusions that need every "
            "kernel are held back"
        )
    why = lacks.get(Evidence.HOST_EVENTS.value)
    if why:
        out.append(
            f"the trace has {why}; DataLoader waits, host syncs and launch overhead cannot be seen (their time "
            "shows as other), and conclusions that need them are held back"
        )
    return tuple(out)
