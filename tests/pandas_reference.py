"""The cross-rank matching and straggler group-bys as pandas computed them (main at 3e36284,
before they moved to numpy columns): a frozen oracle for the tests that check the numpy
code gives the same tables and numbers. Never used by gpuprof itself.

The code is the pandas code it replaced, trimmed to what the comparison needs; the numpy
helpers it called (``ready_times``, ``_expected_sizes``, ``INFER_MAX_UNMATCHED_SHARE``)
are gpuprof's own, unchanged by that move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuprof.accounting.summary import RankSummary
from gpuprof.job.collectives import INFER_MAX_UNMATCHED_SHARE, _expected_sizes
from gpuprof.job.untimed import READY_PIPELINE, ready_times
from gpuprof.model import intervals as iv
from gpuprof.model.timeline import Category

CALLS_COLUMNS = (
    "rank", "row", "key", "pg", "step", "k", "coll_name", "start_us", "end_us", "ready_us",
    "arrival_us", "duration_us", "wait_us", "own_wait_us", "exposed_wait_us", "lateness_us",
    "is_last", "n_present", "n_expected", "complete",
)  # fmt: skip


def _gather(summaries: Sequence[RankSummary]) -> pd.DataFrame:
    frames = []
    for s in summaries:
        c = s.comms
        if c is None or len(c) == 0:
            continue
        c = c.loc[
            c["category"].to_numpy() == int(Category.COLLECTIVE),
            ["start_us", "end_us", "coll_name", "pg", "seq", "step"],
        ]
        if len(c) == 0:
            continue
        start = c["start_us"].to_numpy(dtype=np.float64)
        ready, kind = (
            ready_times(s, start) if s.holds.untimed_waits else (start, np.zeros(start.size, dtype=np.int8))
        )
        c = c.assign(
            rank=s.rank,
            source=s.source,
            row=c.index.to_numpy(dtype=np.int64),
            ready_us=ready,
            ready_kind=kind,
            replica=int(s.parallel.get("dp_rank", -1)) if "pp_rank" in s.parallel else -1,
        )
        frames.append(c)
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    df["pg"] = df["pg"].astype(str)
    df["coll_name"] = df["coll_name"].astype(str)
    df["step"] = df["step"].astype(np.int64)
    df["pg_code"] = pd.factorize(df["pg"])[0]
    df["coll_code"] = pd.factorize(df["coll_name"])[0]
    df["src_code"] = pd.factorize(df["source"])[0]
    lane = ["rank", "pg_code", "coll_code", "step"]
    df = df.sort_values([*lane, "seq"], kind="stable", ignore_index=True)
    df["k"] = df.groupby(lane, sort=False).cumcount().astype(np.int64)
    df["key"] = df.groupby(["pg_code", "coll_code", "step", "k"], sort=False).ngroup().astype(np.int64)
    return df


def _own_replica_waits(df: pd.DataFrame) -> np.ndarray:
    out = np.zeros(len(df))
    replica = df["replica"].to_numpy()
    sel = np.flatnonzero(replica >= 0)
    if sel.size == 0:
        return out
    key = df["key"].to_numpy()[sel]
    rep = replica[sel]
    arr = df["arrival_us"].to_numpy()[sel]
    kind = df["ready_kind"].to_numpy()[sel]
    wait = df["wait_us"].to_numpy()[sel]
    order = np.lexsort((arr, rep, key))
    k, r, a, kd = key[order], rep[order], arr[order], kind[order]
    block = np.concatenate(([True], (k[1:] != k[:-1]) | (r[1:] != r[:-1])))
    bid = np.cumsum(block) - 1
    last = np.flatnonzero(np.concatenate((block[1:], [True])))
    size = np.diff(np.concatenate((np.flatnonzero(block), [order.size])))
    li = last[bid]
    pi = np.where(size[bid] > 1, li - 1, li)
    awaited = np.where(np.arange(order.size) == li, pi, li)
    got = np.where(
        (awaited != np.arange(order.size)) & (kd[awaited] == READY_PIPELINE),
        np.clip(a[awaited] - a, 0.0, None),
        0.0,
    )
    res = np.empty(order.size)
    res[order] = got
    out[sel] = np.minimum(res, wait)
    return out


def _inferred_world(summaries: Sequence[RankSummary], df: pd.DataFrame, expected: Mapping[str, int]) -> int | None:
    if any(s.world_size for s in summaries) or any(n > 0 for n in expected.values()):
        return None
    ranks = sorted({s.rank for s in summaries})
    n = len(ranks)
    if n < 2 or ranks != list(range(n)):
        return None
    size = df.groupby("key", sort=False)["rank"].size()
    matched = size[size >= 2]
    if len(matched) == 0 or not bool((matched == n).all()):
        return None
    if int((size < 2).sum()) > INFER_MAX_UNMATCHED_SHARE * len(size):
        return None
    return n


def _clock_offsets(df: pd.DataFrame) -> pd.Series:
    n_src = int(df["src_code"].max()) + 1
    offsets = np.zeros(n_src)
    if n_src < 2:
        return pd.Series(offsets, index=pd.unique(df["source"]))
    by_key = df.groupby("key", sort=False)["src_code"]
    multi = (by_key.transform("min") != by_key.transform("max")).to_numpy()
    key = df["key"].to_numpy()[multi]
    src = df["src_code"].to_numpy()[multi]
    end = df["end_us"].to_numpy()[multi]
    if key.size:
        for _ in range(2):
            aligned = pd.Series(end - offsets[src])
            ref = aligned.groupby(key, sort=False).transform("median").to_numpy()
            delta = pd.Series(aligned.to_numpy() - ref).groupby(src).median()
            offsets[delta.index.to_numpy()] += delta.to_numpy()
        offsets -= float(np.median(offsets))
    names = df.drop_duplicates("src_code").sort_values("src_code")["source"].to_numpy()
    return pd.Series(offsets, index=names)


def _exposed(df: pd.DataFrame, summaries: Sequence[RankSummary]) -> np.ndarray:
    out = np.zeros(len(df))
    lost = {s.rank: s.lost for s in summaries}
    ranks = df["rank"].to_numpy()
    start = df["ready_us"].to_numpy()
    wait = df["wait_us"].to_numpy()
    order = np.argsort(ranks, kind="stable")
    bounds = np.flatnonzero(np.diff(ranks[order])) + 1
    for idx in np.split(order, bounds):
        if idx.size == 0:
            continue
        r = int(ranks[idx[0]])
        lo = lost.get(r)
        if lo is None:
            continue
        out[idx] = iv.overlap_with_each((start[idx], start[idx] + wait[idx]), lo)
    return out


def match(summaries: Sequence[RankSummary]) -> dict[str, Any]:
    """What ``match_collectives`` returned, as a dict: ``calls`` (a DataFrame),
    ``offsets_us``, ``unmatched``, ``incomplete_groups``, ``world_size_inferred``."""
    df = _gather(summaries)
    offsets_by_source = _clock_offsets(df)
    offsets = {s.rank: float(offsets_by_source.get(s.source, 0.0)) for s in summaries}
    df["arrival_us"] = df["ready_us"] - df["rank"].map(offsets).to_numpy()
    df["duration_us"] = df["end_us"] - df["start_us"]
    groups = df.groupby("key", sort=False)
    df["n_present"] = groups["rank"].transform("size").astype(np.int64)
    last = groups["arrival_us"].transform("max")
    median = groups["arrival_us"].transform("median")
    reach = (df["end_us"] - df["ready_us"]).clip(lower=0.0)
    df["wait_us"] = np.clip(last - df["arrival_us"], 0.0, reach)
    df.loc[df["n_present"] < 2, "wait_us"] = 0.0
    df["own_wait_us"] = _own_replica_waits(df)
    df["exposed_wait_us"] = _exposed(df, summaries)
    df["lateness_us"] = df["arrival_us"] - median
    df["is_last"] = (df["arrival_us"] >= last) & (df["n_present"] >= 2)
    pg_ranks = df.groupby("pg_code")["rank"].transform("nunique")
    present: dict[str, int] = dict(zip(df["pg"].to_numpy(), pg_ranks.to_numpy().astype(int)))
    expected = _expected_sizes(summaries, list(present), present)
    world = _inferred_world(summaries, df, expected)
    if world is not None:
        expected = {pg: world for pg in expected}
    df["n_expected"] = df["pg"].map(expected).astype(np.int64)
    df["complete"] = (df["n_expected"] > 0) & (df["n_present"] >= df["n_expected"])
    incomplete = {
        pg: (int(present[pg]), int(expected[pg])) for pg in present if expected[pg] < 0 or present[pg] < expected[pg]
    }
    unmatched = int(((df["n_present"] < 2) & (pg_ranks >= 2)).sum())
    return {
        "calls": df[list(CALLS_COLUMNS)],
        "offsets_us": offsets,
        "unmatched": unmatched,
        "incomplete_groups": incomplete,
        "world_size_inferred": world,
    }


def per_rank_waits(calls: pd.DataFrame) -> pd.DataFrame:
    if len(calls) == 0:
        return pd.DataFrame(columns=["wait_us", "exposed_wait_us", "late_us", "calls", "last_calls", "complete_calls"])
    g = calls.assign(late=calls["lateness_us"].clip(lower=0.0)).groupby("rank")
    return pd.DataFrame(
        {
            "wait_us": g["wait_us"].sum(),
            "exposed_wait_us": g["exposed_wait_us"].sum(),
            "late_us": g["late"].sum(),
            "calls": g["k"].size(),
            "last_calls": g["is_last"].sum(),
            "complete_calls": g["complete"].sum(),
        }
    )


def wait_claims(calls: pd.DataFrame) -> dict[int, iv.Intervals]:
    if len(calls) == 0 or not (calls["wait_us"] > 0).any():
        return {}
    waiting = calls.loc[calls["wait_us"] > 0]
    out: dict[int, iv.Intervals] = {}
    for rank, rows in waiting.groupby("rank", sort=False):
        start = rows["ready_us"].to_numpy()
        out[int(rank)] = iv.union(start, start + rows["wait_us"].to_numpy())  # type: ignore[call-overload]
    return out


def caused_waits(calls: pd.DataFrame) -> dict[int, tuple[float, int]]:
    full = calls.loc[calls["complete"] & (calls["n_present"] >= 2)]
    if len(full) == 0:
        return {}
    others = full.loc[~full["is_last"]].groupby("key")["exposed_wait_us"].median()
    last = full.loc[full["is_last"]].drop_duplicates("key")
    caused = last.set_index("key").join(others.rename("caused"), how="left")["caused"].fillna(0.0)
    ranks = last.set_index("key")["rank"]
    out: dict[int, tuple[float, int]] = {}
    for rank, total in caused.groupby(ranks.to_numpy()).sum().items():
        out[int(rank)] = (float(total), int((ranks == rank).sum()))
    return out


def net_exposed_waits(calls: pd.DataFrame, bubbles: Mapping[int, iv.Intervals]) -> np.ndarray:
    out = calls["exposed_wait_us"].to_numpy(dtype=np.float64).copy()
    if not bubbles or len(calls) == 0:
        return out
    ranks = calls["rank"].to_numpy()
    start = calls["ready_us"].to_numpy(dtype=np.float64)
    wait = calls["wait_us"].to_numpy(dtype=np.float64)
    for rank, claim in bubbles.items():
        idx = np.flatnonzero(ranks == rank)
        if idx.size == 0 or claim[0].size == 0:
            continue
        covered = iv.overlap_with_each((start[idx], start[idx] + wait[idx]), claim)
        out[idx] = np.maximum(out[idx] - covered, 0.0)
    return out


def critical_gains(calls: pd.DataFrame, bubbles: Mapping[int, iv.Intervals]) -> pd.DataFrame:
    calls = calls.assign(exposed_wait_us=net_exposed_waits(calls, bubbles))
    full = calls.loc[calls["complete"] & (calls["n_present"] >= 2), ["key", "rank", "arrival_us", "exposed_wait_us"]]
    if len(full) == 0:
        return pd.DataFrame({"key": [], "rank": [], "gain_us": []})
    full = full.sort_values(["key", "arrival_us"], kind="stable")
    by_key = full.groupby("key", sort=False)
    full = full.assign(prev=by_key["arrival_us"].shift(1), prev_exposed=by_key["exposed_wait_us"].shift(1))
    last = full.groupby("key", sort=False).tail(1)
    gap = (last["arrival_us"] - last["prev"]).clip(lower=0.0)
    gain = np.minimum(gap.to_numpy(), last["prev_exposed"].to_numpy())
    return pd.DataFrame(
        {"key": last["key"].to_numpy(), "rank": last["rank"].to_numpy(), "gain_us": np.nan_to_num(gain)}
    )


def group_gain_us(calls: pd.DataFrame, bubbles: Mapping[int, iv.Intervals], group: Sequence[int]) -> float:
    calls = calls.assign(exposed_wait_us=net_exposed_waits(calls, bubbles))
    full = calls.loc[
        calls["complete"] & (calls["n_present"] >= 2), ["key", "rank", "arrival_us", "exposed_wait_us"]
    ].sort_values(["key", "arrival_us"], kind="stable")
    if len(full) == 0:
        return 0.0
    last = full.groupby("key", sort=False).tail(1).set_index("key")
    outside = full.loc[~full["rank"].isin(list(group))].groupby("key", sort=False).tail(1).set_index("key")
    outside = outside.rename(columns=lambda c: f"{c}_out")
    last = last.loc[last["rank"].isin(list(group))].join(outside, how="inner")
    if len(last) == 0:
        return 0.0
    gap = (last["arrival_us"] - last["arrival_us_out"]).clip(lower=0.0).to_numpy()
    return float(np.minimum(gap, last["exposed_wait_us_out"].to_numpy()).sum())
