"""Communication paths compared with their peers: one slow pipeline link, one slow
data-parallel group (op-level timelines).

A *family* (:func:`gpuprof.job.opdag._families`) is one communication path of the job: a
pipeline link (the sends and receives between stage s and s+1 of one replica, one phase)
or a collective's process group (one op on one group, e.g. ``grads-reduce-scatter`` of
stage 2's data-parallel replicas). Its *transfer* per call is what the replay scales: the
time from the group's common start to the member's end (a transfer-only timer's whole
op), or the op itself for a buffered send.

Peers: a link's peers are the same stage boundary and phase on the other replicas (with one
replica, every other link of the phase); a group's peers are the same op on the other
groups. A family whose median transfer is above its peers' median runs at that median
in the what-if (``peer_median_link``, ``peer_median_collective``); a family is *slow*
(:func:`slow_families`) at :data:`SLOW_RATIO` times its peers' median. A heavier group
(a stage that also holds the embedding) is compared with the others as it is: the timers
give no sizes, so a slow group is named with its ratio and left to the reader to weigh.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuprof.job.opdag_compile import OpDag

FloatArray = npt.NDArray[np.float64]

# A path this many times its peers' median transfer is named slow.
SLOW_RATIO = 1.5


@dataclass(frozen=True)
class Family:
    """One communication path: its key, its nodes' ranks, median transfer (us), and the
    median of its peers' medians (``None`` without peers)."""

    key: tuple[str, ...]
    ranks: tuple[int, ...]
    median_us: float
    peers_median_us: float | None
    calls: int

    @property
    def kind(self) -> str:
        return self.key[0]

    @property
    def ratio(self) -> float | None:
        if self.peers_median_us is None or self.peers_median_us <= 0:
            return None
        return self.median_us / self.peers_median_us


def _transfer(dag: OpDag) -> FloatArray:
    """Per node, the part the replay scales for communication: the group transfer of a
    member, the op itself otherwise."""
    return np.where(dag.group >= 0, dag.transfer, dag.end - dag.start)


def families(dag: OpDag) -> list[Family]:
    """Every family of the model with its peers' median (see the module docstring)."""
    fam = dag.family
    if fam.size == 0 or not dag.family_keys or not (fam >= 0).any():
        return []
    t = _transfer(dag)
    med: dict[int, float] = {}
    ranks: dict[int, set[int]] = {}
    calls: dict[int, int] = {}
    order = np.argsort(fam, kind="stable")
    f_sorted = fam[order]
    lo = np.searchsorted(f_sorted, np.arange(len(dag.family_keys)), side="left")
    hi = np.searchsorted(f_sorted, np.arange(len(dag.family_keys)), side="right")
    for code in range(len(dag.family_keys)):
        nodes = order[lo[code] : hi[code]]
        if nodes.size == 0:
            continue
        med[code] = float(np.median(t[nodes]))
        ranks[code] = {dag.ranks[int(p)] for p in np.unique(dag.rank_pos[nodes]).tolist()}
        calls[code] = int(nodes.size)
    keys = dag.family_keys
    links = {c for c in med if keys[c][0] == "link"}
    replicas = {keys[c][1] for c in links}
    out: list[Family] = []
    for code, m in med.items():
        key = keys[code]
        if key[0] == "link":
            if len(replicas) >= 2:
                peers = [c for c in links if keys[c][2:] == key[2:] and c != code]
            else:
                peers = [c for c in links if keys[c][4] == key[4] and c != code]
        else:
            peers = [c for c in med if keys[c][0] == "collective" and keys[c][1] == key[1] and c != code]
        pm = float(np.median([med[c] for c in peers])) if peers else None
        out.append(Family(key, tuple(sorted(ranks[code])), m, pm, calls[code]))
    return out


def factors(dag: OpDag, kind: str) -> dict[int, FloatArray]:
    """Per rank, each event's factor that brings its family's transfers (``kind``:
    ``link`` or ``collective``) to at most the peers' median; ranks with nothing to scale
    are left out."""
    by_code: dict[tuple[str, ...], float] = {}
    for f in families(dag):
        r = f.ratio
        if f.kind == kind and r is not None and r > 1.0:
            by_code[f.key] = 1.0 / r
    if not by_code:
        return {}
    per_code = np.ones(len(dag.family_keys) + 1)
    for code, key in enumerate(dag.family_keys):
        per_code[code] = by_code.get(key, 1.0)
    node_f = np.where(dag.family >= 0, per_code[dag.family], 1.0)
    out: dict[int, FloatArray] = {}
    for p, r in enumerate(dag.ranks):
        lo, hi = int(dag.node_lo[p]), int(dag.node_lo[p + 1])
        part = np.asarray(node_f[lo:hi], dtype=np.float64)
        if bool((part < 1.0).any()):
            out[r] = part.copy()
    return out


def slow_families(dag: OpDag, kind: str, ratio: float = SLOW_RATIO) -> list[Family]:
    """The families of ``kind`` at ``ratio`` or more times their peers' median, slowest first."""
    got = [f for f in families(dag) if f.kind == kind and f.ratio is not None and f.ratio >= ratio]
    return sorted(got, key=lambda f: -(f.ratio or 0.0))


def describe(f: Family, stage_of: Mapping[int, int]) -> dict[str, object]:
    """A family as JSON-ready facts."""
    out: dict[str, object] = {
        "kind": f.kind,
        "ranks": list(f.ranks),
        "median_us": round(f.median_us, 3),
        "peers_median_us": None if f.peers_median_us is None else round(f.peers_median_us, 3),
        "ratio": None if f.ratio is None else round(f.ratio, 3),
        "calls": f.calls,
    }
    if f.kind == "link":
        out.update(replica=int(f.key[1]), stages=[int(f.key[2]), int(f.key[3])], phase=f.key[4])
    else:
        out.update(op=f.key[1], group=f.key[2])
        stages = sorted({stage_of[r] for r in f.ranks if r in stage_of})
        if stages:
            out["stages"] = stages
    return out


__all__ = ["SLOW_RATIO", "Family", "describe", "factors", "families", "slow_families"]
