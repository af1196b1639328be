"""The caveat beside a host-side saving finds the profiler's slowing of the host among the
rank's trust warnings by its code (gpuprof.model.notice), whatever the warning's words."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rankbuilder import RankBuilder
from test_advice_local import _ctx

from gpuprof.accounting import hostfacts
from gpuprof.advice.wording import _host_caveats
from gpuprof.model import notice
from gpuprof.model.notice import Notice
from gpuprof.model.timeline import Kind, RankTrace


def _slow_host(stacks: bool = False) -> RankTrace:
    b = RankBuilder()
    for k in range(3):
        b.step(k + 1, k * 5000.0, (k + 1) * 5000.0)
        b.kernel(k * 5000.0, k * 5000.0 + 4990, launch_at=k * 5000.0 - 20)
    if stacks:
        b.host(10, 20, "train.py(12): step", kind=Kind.PYTHON)
    for i in range(5):
        b.host(100 * i, 100 * i + 30, "aten::empty")  # 30 µs: slow
    return b.build()


def _reworded(code_of: dict[str, str] | None = None) -> object:
    """trust_warnings with other words (and, given ``code_of``, other codes)."""
    original = hostfacts.trust_warnings

    def trust_warnings(f: hostfacts.TrustFacts) -> tuple[Notice, ...]:
        codes = code_of or {}
        return tuple(replace(n, text=f"REWORDED {n.code}", code=codes.get(n.code, n.code)) for n in original(f))

    return trust_warnings


def test_the_slow_host_caveat_stands_for_its_warning() -> None:
    (rank, (caveat, warning)), = _host_caveats(_ctx(_slow_host())).items()
    assert rank == 0 and caveat.startswith("host time may be inflated by the profiler")
    assert warning.startswith("host ops run slow (median aten::empty 30 µs")


def test_a_reworded_slow_host_warning_is_still_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostfacts, "trust_warnings", _reworded())
    caveats = _host_caveats(_ctx(_slow_host()))
    assert caveats[0][1] == f"REWORDED {notice.SLOW_HOST}"
    assert caveats[0][0].startswith("host time may be inflated by the profiler")


def test_python_stacks_come_first_by_their_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostfacts, "trust_warnings", _reworded())
    caveats = _host_caveats(_ctx(_slow_host(stacks=True)))
    assert caveats[0][1] == f"REWORDED {notice.PYTHON_STACKS}"


def test_without_the_code_there_is_no_caveat(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same words, another code: the warning is not taken for the slow host.
    original = hostfacts.trust_warnings
    monkeypatch.setattr(
        hostfacts, "trust_warnings", lambda f: tuple(replace(n, code=notice.TEXT) for n in original(f))
    )
    assert _host_caveats(_ctx(_slow_host())) == {}
