"""The numpy-backed table of the timeline model: the same data as the pandas tables it
replaces on the analysis path, and `gpuprof analyze` of a single-GPU trace without pandas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuprof.accounting.facts import _count_by_name
from gpuprof.model.table import Cat, Table
from gpuprof.model.timeline import DEVICE_COLUMNS, HOST_COLUMNS, RankTrace, build_table, make_table

REPO = Path(__file__).resolve().parents[2]


def _names(rng: np.random.Generator, n: int, k: int) -> list[str]:
    return [f"op{int(x)}" if x % 7 else "" for x in rng.integers(0, k, n)]


@pytest.mark.parametrize("k", [1, 5, 200, 40000])
def test_categories_codes_and_their_width_are_those_of_pandas(k: int) -> None:
    rng = np.random.default_rng(k)
    values = _names(rng, 60000 if k > 200 else 300, k)
    mine = Cat.from_values(values)
    theirs = pd.Categorical(values)
    assert list(mine.categories) == list(theirs.categories)
    assert mine.codes.dtype == theirs.codes.dtype
    assert np.array_equal(mine.codes, theirs.codes)


def test_missing_values_and_unused_categories() -> None:
    mine = Cat.from_values(["b", None, "a", float("nan"), "b"])
    theirs = pd.Categorical(["b", None, "a", None, "b"])
    assert list(mine.categories) == list(theirs.categories)
    assert mine.codes.tolist() == theirs.codes.tolist() == [1, -1, 0, -1, 1]
    got = mine.values()
    assert got[0] == "b" and got[1] != got[1]  # NaN where missing, as pandas gives it
    some = Cat(np.array([3, 0, 3]), ["d", "c", "b", "a"])
    kept = some.remove_unused()
    ref = pd.Categorical.from_codes(np.array([3, 0, 3]), pd.Index(["d", "c", "b", "a"])).remove_unused_categories()
    assert list(kept.categories) == list(ref.categories) == ["d", "a"]
    assert kept.codes.tolist() == ref.codes.tolist()


def _columns(n: int, seed: int = 0) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    start = np.round(rng.uniform(0, 1000, n), 1)  # unsorted, with ties
    start[::5] = start[0]
    return {
        "start_us": start,
        "end_us": start + 1.0,
        "kind": rng.integers(0, 3, n).astype(np.int8),
        "name": _names(rng, n, 9),
        "stream": rng.integers(0, 4, n),
        "pg": ["0" if i % 2 else "" for i in range(n)],
    }


def test_a_table_is_the_dataframe_make_table_gave() -> None:
    cols = _columns(50)
    df = make_table(cols, DEVICE_COLUMNS)
    # What make_table built with pandas before the table existed: one Series per column,
    # defaults filled, rows sorted by start (stable).
    ref = pd.DataFrame(
        {
            c: pd.Series(cols[c], dtype=t)
            for c, t in (("start_us", "float64"), ("end_us", "float64"), ("kind", "int8"), ("stream", "int64"))
        }
    )
    order = np.argsort(np.asarray(cols["start_us"]), kind="stable")
    assert np.array_equal(df["start_us"].to_numpy(), ref["start_us"].to_numpy()[order])
    assert np.array_equal(df["stream"].to_numpy(), ref["stream"].to_numpy()[order])
    assert df["kind"].dtype == np.int8 and df["bytes"].dtype == np.int64 and (df["bytes"] == -1).all()
    assert list(df["name"].astype(str)) == [cols["name"][i] for i in order]  # type: ignore[index]
    assert list(df["name"].cat.categories) == sorted(set(cols["name"]))  # type: ignore[call-overload]
    assert list(df.columns) == list(DEVICE_COLUMNS)
    # The table and its DataFrame hold the same columns, both ways.
    table = build_table(cols, DEVICE_COLUMNS)
    back = Table.from_pandas(df)
    for c in DEVICE_COLUMNS:
        assert np.array_equal(np.asarray(table[c], dtype=object), np.asarray(back[c], dtype=object)), c
    assert table.to_pandas().equals(df)
    assert np.array_equal(table.codes("name"), df["name"].cat.codes.to_numpy())
    assert table.labels("name").tolist() == [str(c) for c in df["name"].cat.categories]
    # Empty tables keep their dtypes and have no categories.
    empty = make_table({"start_us": [], "end_us": [], "kind": [], "name": []}, HOST_COLUMNS)
    assert len(empty) == 0 and empty["tid"].dtype == np.int64 and len(empty["pg"].cat.categories) == 0


def test_a_trace_given_a_table_or_a_dataframe_reads_the_same_both_ways() -> None:
    table = build_table(_columns(20), DEVICE_COLUMNS)
    host = build_table({"start_us": [], "end_us": [], "kind": [], "name": []}, HOST_COLUMNS)
    from_table = RankTrace(rank=0, source="a", fmt="kineto", device=table, host=host)
    assert from_table.device_cols is table
    frame = from_table.device
    assert isinstance(frame, pd.DataFrame) and frame is from_table.device  # made once
    from_frame = RankTrace(rank=0, source="a", fmt="kineto", device=frame, host=host.to_pandas())
    assert from_frame.device is frame
    assert np.array_equal(from_frame.device_cols["start_us"], table["start_us"])
    assert np.array_equal(from_frame.device_cols.codes("name"), table.codes("name"))
    with pytest.raises(TypeError, match="device"):
        RankTrace(rank=0, source="a", fmt="kineto", device=[1, 2], host=host)  # type: ignore[arg-type]


def test_calls_by_name_are_counted_and_ordered_as_pandas_counts_them() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        cols = _columns(400, int(rng.integers(1 << 30)))
        cols["name"] = _names(rng, 400, int(rng.integers(2, 60)))
        table = build_table(cols, HOST_COLUMNS)
        rows = rng.random(400) < 0.6
        ref = table.to_pandas()["name"][rows].astype(str).value_counts()
        assert list(_count_by_name(table, rows).items()) == [(str(k), int(v)) for k, v in ref.items()]


@pytest.mark.parametrize("sample", ["sync-heavy", "cpu-training"])  # one GPU; a CPU-only rank
def test_analyze_of_a_single_gpu_trace_never_imports_pandas(tmp_path: Path, sample: str) -> None:
    # pandas costs ~0.25 s to import: more than all the analysis of a small trace.
    script = (
        "import sys, runpy; sys.modules['pandas'] = None; "
        "sys.argv = ['gpuprof', 'analyze', sys.argv[1], '--format', 'json', '-o', sys.argv[2]]; "
        "runpy.run_module('gpuprof', run_name='__main__')"
    )
    out = tmp_path / "report.json"
    got = subprocess.run(
        [sys.executable, "-c", script, str(REPO / "sample_traces" / sample), str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert got.returncode == 0, got.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["ranks"] and report["ranks"][0]["rank"] == 0


def test_one_rank_is_matched_without_pandas_exactly_as_pandas_matches_it() -> None:
    import pandas_reference

    from gpuprof.accounting.summarize import summarize
    from gpuprof.job.collectives import match_collectives
    from gpuprof.readers import load_all

    seen = 0
    for folder in ("dp-exposed", "pipeline-dp2"):
        for trace in load_all([REPO / "sample_traces" / folder]):
            s = summarize(trace)
            mine, theirs = match_collectives([s]), pandas_reference.match([s])
            assert mine.n_calls == len(theirs["calls"]) > 0
            got, ref = mine.calls, theirs["calls"]
            assert list(got.columns) == list(ref.columns)
            for c in ref.columns:
                assert got[c].tolist() == ref[c].tolist(), (folder, trace.rank, c)
                assert got[c].dtype.kind == ref[c].dtype.kind or c in ("pg", "coll_name"), c
            assert dict(mine.offsets_us) == dict(theirs["offsets_us"])
            assert mine.unmatched == theirs["unmatched"]
            assert dict(mine.incomplete_groups) == dict(theirs["incomplete_groups"])
            assert mine.world_size_inferred == theirs["world_size_inferred"]
            seen += 1
    assert seen >= 4


def test_one_of_is_isin_for_a_few_integer_values() -> None:
    from gpuprof.model.table import one_of

    rng = np.random.default_rng(5)
    for dtype in (np.int8, np.int64, np.float64):
        values = rng.integers(-3, 12, 500).astype(dtype)
        for choices in ((), (3,), (0, 11), (-1, 2, 5, 7), [int(c) for c in range(-3, 12, 2)]):
            assert np.array_equal(one_of(values, choices), np.isin(values, choices)), (dtype, choices)
