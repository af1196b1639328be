"""The reader's column fast paths give what the plain per-value rules give.

``int_column`` takes a list of all-``int`` values straight to numpy (bools, floats, strings
and integers beyond 64 bits still become -1), and the host table classifies each (kind,
name) pair through a lookup table when names are few next to rows: every row's category
must still be ``classify(kind, name)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpuprof.model import classify as cl
from gpuprof.model.timeline import Category, Kind
from gpuprof.readers import load_file
from gpuprof.readers.columns import int_column


def test_int_column_keeps_only_64_bit_integers() -> None:
    assert int_column([3, 7, -5]).tolist() == [3, 7, -5]
    assert int_column([True, False]).tolist() == [-1, -1]  # bool is not an id
    assert int_column([1, True, 2.0, "3", None, -4]).tolist() == [1, -1, -1, -1, -1, -4]
    assert int_column([1, 2**63, -(2**63), 2**70]).tolist() == [1, -1, -(2**63), -1]
    assert int_column([]).dtype == np.int64


def _trace(path: Path, names: list[str], repeat: int) -> None:
    events = []
    t = 0.0
    for _ in range(repeat):
        for i, name in enumerate(names):
            cat = "cuda_runtime" if name.startswith("cuda") else "cpu_op"
            args = {"correlation": int(t) + 1} if cat == "cuda_runtime" else {}
            events.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": 1,
                    "tid": 1 + i % 2,
                    "ts": t,
                    "dur": 1.0,
                    "args": args,
                }
            )
            t += 2.0
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 1.0,
            "dur": 1.0,
            "args": {"stream": 7, "correlation": 1},
        }
    )
    path.write_text(json.dumps({"traceEvents": events}))


def _check_categories(path: Path) -> None:
    host = load_file(path)[0].host_cols
    names = host["name"]
    kinds = host["kind"]
    want = [int(cl.classify(Kind(int(k)), str(n))) for k, n in zip(kinds, names)]
    assert host["category"].tolist() == want
    assert int(Category.OTHER) not in set(want) or len(set(want)) > 1


NAMES = [
    "aten::mm",
    "cudaLaunchKernel",
    "cudaDeviceSynchronize",
    "aten::copy_",
    "cudaMemcpyAsync",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "Optimizer.step#SGD.step",
]


def test_host_categories_with_few_names_many_rows(tmp_path: Path) -> None:
    path = tmp_path / "few.json"
    _trace(path, NAMES, 200)  # 7 names, 1400 rows: the lookup table
    _check_categories(path)


def test_host_categories_with_many_names_few_rows(tmp_path: Path) -> None:
    path = tmp_path / "many.json"
    _trace(path, [f"{n}_{i}" for i in range(3) for n in NAMES], 1)  # one row a name: np.unique
    _check_categories(path)


def test_row_strings_make_the_categorical_of_their_strings() -> None:
    from gpuprof.model.table import Cat
    from gpuprof.readers.accumulate import RowStrings

    labels = ["", "allreduce", "", "broadcast", "unused"]  # two codes give ""
    codes = np.array([0, 1, 2, 3, 3, 0, 1], np.int32)
    rows = RowStrings(codes, labels)
    assert [rows[i] for i in range(len(rows))] == [
        "",
        "allreduce",
        "",
        "broadcast",
        "broadcast",
        "",
        "allreduce",
    ]
    rows[3] = "all_gather"  # "broadcast" is still used by row 4
    rows[1] = "reduce_scatter"
    rows[6] = "reduce_scatter"  # "allreduce" is used by no row any more
    strings = [rows[i] for i in range(len(rows))]
    got, want = rows.to_cat(), Cat.from_values(strings)
    assert list(got.categories) == list(want.categories) == ["", "all_gather", "broadcast", "reduce_scatter"]
    assert got.codes.tolist() == want.codes.tolist()
    assert got.codes.dtype == want.codes.dtype
    empty = RowStrings(np.zeros(0, np.int32), [""])
    assert list(empty.to_cat().categories) == list(Cat.from_values([]).categories)
    assert len(empty.to_cat()) == 0
