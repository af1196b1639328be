"""gpuprof.model.notice: warnings as records, worded into the report's strings once."""

from __future__ import annotations

import pytest

from gpuprof.model import notice
from gpuprof.model.notice import Notice


def test_codes_are_distinct_and_dotted() -> None:
    assert len(set(notice.CODES)) == len(notice.CODES)
    assert all(c == notice.TEXT or "." in c for c in notice.CODES)


def test_words_keep_the_order_and_filters_go_by_code() -> None:
    ns = (Notice(notice.SLOW_HOST, "b"), notice.said("a"), Notice(notice.SLOW_HOST, "c", rank=2))
    assert notice.words(ns) == ("b", "a", "c")
    assert notice.of_code(ns, notice.SLOW_HOST) == (ns[0], ns[2])
    assert notice.without(ns, notice.SLOW_HOST) == (ns[1],)
    assert notice.said_all(["x", "y"]) == (Notice(notice.TEXT, "x"), Notice(notice.TEXT, "y"))


def test_a_notice_is_frozen() -> None:
    n = notice.said("x")
    with pytest.raises(AttributeError):
        n.text = "y"  # type: ignore[misc]
