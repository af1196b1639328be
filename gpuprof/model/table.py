"""A light, numpy-backed table: the model's device, host and comms tables without pandas.

Importing pandas costs about a quarter of a second, more than all the analysis of a small
trace, and the per-rank analysis only ever needs a column as a numpy array, row selection
and the codes and labels of a categorical column. :class:`Table` holds exactly that.
``to_pandas`` builds the equivalent DataFrame (importing pandas then) for the code that
truly needs one: job-level group-bys, the public ``RankTrace.device`` / ``.host`` and
``RankSummary.comms`` attributes (see :class:`FrameField`).

A categorical column is a :class:`Cat`: ``codes`` (an integer array, -1 missing, of the
width pandas would choose) and ``categories`` (an object array). Built from values,
categories are the sorted distinct values, as pandas sorts them.

Tables are never modified after construction, and neither are the arrays they hand out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

if TYPE_CHECKING:  # pandas is imported only when a DataFrame is asked for
    import pandas as pd


def codes_dtype(n_categories: int) -> np.dtype[Any]:
    """The integer width pandas gives the codes of a categorical of ``n_categories``."""
    if n_categories < np.iinfo(np.int8).max:
        return np.dtype(np.int8)
    if n_categories < np.iinfo(np.int16).max:
        return np.dtype(np.int16)
    if n_categories < np.iinfo(np.int32).max:
        return np.dtype(np.int32)
    return np.dtype(np.int64)


class Cat:
    """A categorical column: ``codes`` into ``categories`` (-1: missing)."""

    __slots__ = ("categories", "codes")

    def __init__(self, codes: Any, categories: Sequence[Any]) -> None:
        cats = np.empty(len(categories), dtype=object)
        cats[:] = list(categories)
        self.categories: np.ndarray = cats
        self.codes: np.ndarray = np.asarray(codes).astype(codes_dtype(len(cats)), copy=False)

    @classmethod
    def from_values(cls, values: Iterable[Any]) -> Cat:
        """Categories sorted as pandas sorts them; ``None`` and NaN are missing (-1)."""
        vals = values if isinstance(values, list) else list(values)
        distinct = set(vals)
        if None not in distinct and not any(isinstance(v, float) and math.isnan(v) for v in distinct):
            uniq = sorted(distinct)
            index = {v: i for i, v in enumerate(uniq)}
            return cls(np.fromiter(map(index.__getitem__, vals), np.int64, len(vals)), uniq)
        missing = [v is None or (isinstance(v, float) and math.isnan(v)) for v in vals]
        present = sorted({v for v, m in zip(vals, missing) if not m})
        index = {v: i for i, v in enumerate(present)}
        return cls(np.array([-1 if m else index[v] for v, m in zip(vals, missing)], np.int64), present)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows: Any) -> Cat:
        """The rows ``rows`` (a boolean mask or an index array), same categories."""
        out = Cat.__new__(Cat)
        out.categories = self.categories
        out.codes = self.codes[rows]
        return out

    def remove_unused(self) -> Cat:
        """The same column with only the categories some row uses, in their order (as
        pandas' ``remove_unused_categories``)."""
        used = np.unique(self.codes)
        used = used[used >= 0]
        if used.size == len(self.categories):
            return self
        remap = np.full(len(self.categories) + 1, -1, dtype=np.int64)  # the last: missing
        remap[used] = np.arange(used.size)
        return Cat(remap[self.codes], self.categories[used])

    def values(self) -> np.ndarray:
        """The value of every row as an object array (NaN where missing), as pandas'
        ``Series.to_numpy()`` of a categorical gives it."""
        if len(self.categories) == 0:
            return np.full(len(self.codes), np.nan, dtype=object)
        out: np.ndarray = self.categories[np.maximum(self.codes, 0)]
        missing = self.codes < 0
        if missing.any():
            out[missing] = np.nan
        return out

    def to_pandas(self) -> pd.Categorical:
        import pandas as pd

        return pd.Categorical.from_codes(self.codes, pd.Index(self.categories, dtype=object))


class Table:
    """Named columns of equal length: numpy arrays, or :class:`Cat` for categorical ones.

    ``table["start_us"]`` is a column's array (for a categorical column, its values as an
    object array); :meth:`codes` and :meth:`labels` give a categorical column's codes and
    its categories as strings (an object array indexed by code); :meth:`take` selects rows.
    Arrays are shared: never modify them in place.
    """

    __slots__ = ("_cache", "_columns", "_data", "_n")

    def __init__(self, data: Mapping[str, Any], columns: Sequence[str] | None = None) -> None:
        self._columns: tuple[str, ...] = tuple(columns if columns is not None else data)
        self._data: dict[str, Any] = {c: data[c] for c in self._columns}
        self._n = len(self._data[self._columns[0]]) if self._columns else 0
        self._cache: dict[str, Any] = {}

    @property
    def columns(self) -> tuple[str, ...]:
        return self._columns

    def __len__(self) -> int:
        return self._n

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def is_categorical(self, name: str) -> bool:
        return isinstance(self._data[name], Cat)

    def __getitem__(self, name: str) -> Any:
        col = self._data[name]
        if not isinstance(col, Cat):
            return col
        got = self._cache.get(name)
        if got is None:
            got = self._cache[name] = col.values()
        return got

    def cat(self, name: str) -> Cat:
        col = self._data[name]
        if not isinstance(col, Cat):
            raise TypeError(f"column {name!r} is not categorical")
        return col

    def codes(self, name: str) -> Any:
        """Codes of a categorical column (-1: missing)."""
        return self.cat(name).codes

    def labels(self, name: str) -> Any:
        """Categories of a categorical column as strings, an object array indexed by code."""
        key = name + "\0labels"
        got = self._cache.get(key)
        if got is None:
            cats = self.cat(name).categories
            got = self._cache[key] = np.array([str(c) for c in cats], dtype=object)
        return got

    def derived(self, key: str, make: Any) -> Any:
        """``make(self)``, computed once per table and kept (tables never change); an array
        is made read-only, so that no caller can change what the others get."""
        k = "\0derived:" + key
        got = self._cache.get(k)
        if got is None:
            got = self._cache[k] = make(self)
            if isinstance(got, np.ndarray):
                got.flags.writeable = False
        return got

    def take(self, rows: Any) -> Table:
        """The rows ``rows`` (a boolean mask or an index array) as a new table."""
        return Table({c: col[rows] for c, col in self._data.items()}, self._columns)

    def to_pandas(self) -> pd.DataFrame:
        """The same table as a pandas DataFrame (categorical columns as categoricals)."""
        import pandas as pd

        data = {c: (col.to_pandas() if isinstance(col, Cat) else col) for c, col in self._data.items()}
        frame: pd.DataFrame = pd.DataFrame(data, columns=list(self._columns))
        return frame

    @classmethod
    def from_pandas(cls, df: pd.DataFrame) -> Table:
        """A DataFrame's columns (categorical ones as :class:`Cat`)."""
        data: dict[str, Any] = {}
        for c in df.columns:
            s = df[c]
            if s.dtype.name == "category":
                data[str(c)] = Cat(s.cat.codes.to_numpy(), list(s.cat.categories))
            else:
                data[str(c)] = s.to_numpy()
        return cls(data, [str(c) for c in df.columns])


def one_of(values: Any, choices: Iterable[int]) -> np.ndarray:
    """``np.isin(values, choices)`` for a few integer ``choices`` (kinds, categories): the
    same mask from one comparison per choice, without ``isin``'s fixed cost (tens of
    microseconds a call, paid hundreds of times per rank)."""
    arr = np.asarray(values)
    out = np.zeros(arr.shape, dtype=bool)
    for c in choices:
        out |= arr == c
    return out


def is_dataframe(value: object) -> bool:
    """Whether ``value`` is a pandas DataFrame, without importing pandas."""
    return type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas")


class FrameField:
    """A dataclass field that holds a table, given as a :class:`Table` or a DataFrame.

    Reading the attribute gives a pandas DataFrame (built once, on first use, from the
    table); ``table_of(obj, name)`` gives the :class:`Table` (built once from a DataFrame
    when one was given). So the public attribute keeps its pandas type while the analysis
    reads numpy columns and never imports pandas.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name
        self._table_key = f"_{name}_table"
        self._frame_key = f"_{name}_frame"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> FrameField: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> pd.DataFrame: ...

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self._name)  # no class-level default: the field is required
        d = obj.__dict__
        got = d.get(self._frame_key)
        if got is None:
            got = d[self._frame_key] = d[self._table_key].to_pandas()
        return got

    def __set__(self, obj: Any, value: Table | pd.DataFrame) -> None:
        d = obj.__dict__
        if isinstance(value, Table):
            d[self._table_key] = value
            d.pop(self._frame_key, None)
        elif is_dataframe(value):
            d[self._frame_key] = value
            d.pop(self._table_key, None)
        else:
            raise TypeError(f"{self._name}: expected a Table or a pandas DataFrame, got {type(value).__name__}")

    def table(self, obj: Any) -> Table:
        d = obj.__dict__
        got: Table | None = d.get(self._table_key)
        if got is None:
            got = d[self._table_key] = Table.from_pandas(d[self._frame_key])
        return got
