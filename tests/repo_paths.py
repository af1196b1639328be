"""Where the tests find the project's files, computed once from this module's place.

A test in a sub-folder (``tests/job/test_x.py``) imports these instead of counting parents of
its own ``__file__``, so it keeps working when it moves: ``from repo_paths import SAMPLES``.
"""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""The ``tests/`` folder (this module, ``conftest.py`` and the shared helpers live here)."""
ROOT = TESTS.parent
"""The clone's root (``pyproject.toml``, ``gpuprof/``, ``sample_traces/``)."""
PACKAGE = ROOT / "gpuprof"
SAMPLES = ROOT / "sample_traces"
"""The shipped sample traces, one folder per sample."""
TESTS_DATA = TESTS / "data"
"""Small files the tests run or read (``tiny_train.py``, ``shifting_train.py``)."""
HOOKS = PACKAGE / "record" / "hooks"
"""The torch hooks' folder, which runs inside the user's interpreter without gpuprof."""
SHARED_TRACES = Path(os.environ.get("GPUPROF_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
"""Real traces from real jobs: ``../shared/traces`` beside the clone, or the folder
``GPUPROF_SHARED_TRACES`` names (tests that need them skip when it is absent)."""
