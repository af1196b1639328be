"""Small helpers that turn lists of loosely typed trace values into numpy columns fast."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_JUST_INT = frozenset((int,))  # bool is its own type here: True is not an id


def int_column(values: Sequence[Any]) -> npt.NDArray[np.int64]:
    """int64 column; ``None``, strings, floats and integers beyond 64 bits become -1."""
    try:
        if set(map(type, values)) <= _JUST_INT:  # the common case: ids, all integers
            return np.array(values, np.int64)
        return np.array([v if v.__class__ is int else -1 for v in values], np.int64)
    except OverflowError:
        # Some producers write ids beyond a C long (see edge-large-integer); they are not
        # usable as ids here, so they become "unknown" rather than failing the read.
        return np.array(
            [v if v.__class__ is int and _INT64_MIN <= v <= _INT64_MAX else -1 for v in values], np.int64
        )


def str_column(values: Sequence[Any]) -> list[str]:
    """Strings for a categorical column; anything that is not a string becomes ``""``."""
    if None in values and len(set(values)) == 1:
        return [""] * len(values)  # the common case: no event carries the key
    return [v if v.__class__ is str else ("" if v is None else str(v)) for v in values]


# Digit strings longer than this are not ids (and Python refuses to convert > 4300 digits).
_MAX_DIGITS = 40


def as_int(value: Any) -> int | None:
    """An integer from a JSON value (int, integral float or ASCII digit string), else ``None``.

    Strings of other digits (``"²"``, Arabic-Indic digits) and of more than 40 digits are
    not integers here: ``int()`` would refuse some of them, and none is an id or a rank.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        digits = s[1:] if s.startswith("-") else s
        if digits.isascii() and digits.isdigit() and len(digits) <= _MAX_DIGITS:
            return int(s)
    return None
