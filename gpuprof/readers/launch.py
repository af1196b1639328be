"""Tie communication kernels to the host ops that launched them.

A kernel's ``args.correlation`` equals that of the runtime/driver call that launched it
(``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``hipExtLaunchKernel``, ...). The host ops
around that call on the same thread (innermost first) are its launch context, e.g.
``record_param_comms`` < ``nccl:all_to_all`` < ``c10d::alltoall_base_``. From that context a
communication kernel gets:

* its category, when the kernel name is ambiguous: ``ncclKernel_SendRecv`` under an
  all-to-all is a COLLECTIVE, under ``nccl:send``/``c10d::send`` it is P2P; ROCm's
  ``ncclDevKernel_Generic`` likewise;
* its collective name and process group, when the kernel's own ``args`` lack them: from
  the enclosing ``record_param_comms`` args (``Collective name``, ``Process Group Name``),
  else from an enclosing ``nccl:<collective>`` op name;
* its message size in bytes, when the kernel's own ``args`` lack it: that of the
  innermost enclosing op that has one (``record_param_comms``: ``In msg nelems``,
  ``Out msg nelems``, ``dtype``; ops without them, such as ``symm_mem::`` all-reduces, by
  their input tensors' shapes and types; see the host table's ``bytes``).

Only communication kernels are resolved (a few per step), each by a bounded backwards
walk over the sorted host ops of its thread, so this costs little on large traces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpuprof.model import classify as cl
from gpuprof.model.table import Table
from gpuprof.model.timeline import Category, Kind
from gpuprof.readers.accumulate import RowStrings

# How far back (in host ops of the same thread) to look for enclosing ops. Comm ops sit a
# few levels above the launch; the bound keeps a pathological trace from going quadratic.
_MAX_WALK = 512
_CONTEXT_KINDS = (int(Kind.OP), int(Kind.ANNOTATION))


def resolve_comm_kernels(
    comm_rows: npt.NDArray[np.intp],
    names: Mapping[int, str],
    correlation: npt.NDArray[np.int64],
    category: npt.NDArray[np.int8],
    coll: RowStrings,
    pg: RowStrings,
    nbytes: npt.NDArray[np.int64],
    host: Table,
) -> None:
    """Refine ``category`` and fill ``coll``/``pg`` (strings by row) and ``nbytes`` (-1:
    unknown) of the communication kernels in place.

    ``names`` maps each row of ``comm_rows`` to its kernel name. The arrays and lists are
    the reader's own, not yet wrapped in a table.
    """
    if len(host) == 0:
        return
    h_corr = host["correlation"]
    h_kind = host["kind"]
    launch_mask = (h_kind == int(Kind.RUNTIME)) | (h_kind == int(Kind.DRIVER))
    wanted = np.unique(correlation[comm_rows])
    wanted = wanted[wanted >= 0]
    hit = np.flatnonzero(launch_mask & np.isin(h_corr, wanted))
    launch_of = {int(h_corr[i]): int(i) for i in hit}
    if not launch_of:
        return
    h_start = host["start_us"]
    h_end = host["end_us"]
    h_tid = host["tid"]
    h_name_codes = host.codes("name")
    h_names = list(host.cat("name").categories)
    # Categorical codes, not strings: converting whole columns would cost per host event.
    h_coll_codes = host.codes("coll_name")
    h_colls = host.labels("coll_name").tolist()
    h_pg_codes = host.codes("pg")
    h_pgs = host.labels("pg").tolist()
    h_bytes = host["bytes"]
    ctx_mask = np.isin(h_kind, _CONTEXT_KINDS)
    per_tid: dict[int, tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]] = {}
    for row in comm_rows:
        launch = launch_of.get(int(correlation[row]))
        if launch is None:
            continue
        tid = int(h_tid[launch])
        cached = per_tid.get(tid)
        if cached is None:
            rows_of_tid = np.flatnonzero(ctx_mask & (h_tid == tid))  # sorted by start already
            cached = (rows_of_tid, h_start[rows_of_tid])
            per_tid[tid] = cached
        rows, starts = cached
        t0, t1 = h_start[launch], h_end[launch]
        pos = int(np.searchsorted(starts, t0, side="right"))
        window = rows[max(0, pos - _MAX_WALK) : pos]
        enclosing = window[h_end[window] >= t1][::-1]  # innermost (latest start) first
        context: list[str] = []
        ctx_coll = ""
        ctx_pg = ""
        ctx_bytes = -1
        for j in enclosing.tolist():
            name = h_names[h_name_codes[j]]
            context.append(name)
            if not ctx_coll and h_coll_codes[j] >= 0:
                ctx_coll = h_colls[h_coll_codes[j]]
            if not ctx_pg and h_pg_codes[j] >= 0:
                ctx_pg = h_pgs[h_pg_codes[j]]
            if ctx_bytes < 0:
                ctx_bytes = int(h_bytes[j])
            if name.startswith("ProfilerStep#"):
                break
        if not ctx_coll:
            ctx_coll = _coll_from_op_names(context)
        if ctx_coll:
            context.insert(0, ctx_coll)
        category[row] = int(cl.refine_comm_category(names[int(row)], Category(int(category[row])), context))
        if not coll[row] and ctx_coll:
            coll[row] = ctx_coll
        if not pg[row] and ctx_pg:
            pg[row] = ctx_pg
        if nbytes[row] < 0:
            nbytes[row] = ctx_bytes


def _coll_from_op_names(context: Sequence[str]) -> str:
    """``all_to_all`` from an enclosing ``nccl:all_to_all`` op (or ``rccl:``, ``gloo:``,
    ``vllm::``, ``symm_mem::`` ops: ``symm_mem::multimem_all_reduce_`` -> ``multimem_all_reduce``)."""
    for name in context:
        for prefix in ("nccl:", "rccl:", "gloo:", "vllm::", "symm_mem::"):
            if name.startswith(prefix):
                return name[len(prefix) :].rstrip("_")
    return ""
