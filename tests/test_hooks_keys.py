"""The torch hooks run inside the user's interpreter without importing gpuprof, so they
carry their own copy of the memory-stat columns: it must match the session format."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gpuprof.session.layout import MEMORY_STAT_KEYS


def test_hook_memory_stat_keys_match_the_session_layout() -> None:
    path = Path(__file__).resolve().parents[1] / "gpuprof" / "record" / "hooks" / "gpuprof_torch_hooks.py"
    spec = importlib.util.spec_from_file_location("hooks_copy_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._MEMORY_STAT_KEYS == MEMORY_STAT_KEYS
