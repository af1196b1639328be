"""The torch hooks run inside the user's interpreter without gpuprof: the modules of their
folder load from that folder alone, with the standard library only, and they carry their
own copy of the memory-stat columns, which must match the session format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpuprof.session.layout import MEMORY_STAT_KEYS

HOOKS = Path(__file__).resolve().parents[2] / "gpuprof" / "record" / "hooks"

# Run with -I -S: no site-packages, no PYTHONPATH, no current folder on sys.path; only the
# standard library and the hooks' folder can be imported.
_PROBE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import gpuprof_torch_hooks
hooks = {m: os.path.dirname(os.path.abspath(f)) for m, mod in sys.modules.items()
         if m.startswith("gpuprof") and (f := getattr(mod, "__file__", None))}
print(json.dumps({"keys": gpuprof_torch_hooks._MEMORY_STAT_KEYS, "hooks": hooks}))
"""


def _load_alone() -> dict[str, object]:
    p = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE, str(HOOKS)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert isinstance(doc, dict)
    return doc


def test_the_hooks_load_from_their_folder_alone_with_the_standard_library() -> None:
    loaded = _load_alone()["hooks"]
    assert isinstance(loaded, dict)
    # Every module of the hooks came from their folder; gpuprof itself was never imported.
    assert set(loaded) == {"gpuprof_torch_hooks", "gpuprof_hook_profiler", "gpuprof_hook_files", "gpuprof_hook_windows"}
    assert set(loaded.values()) == {str(HOOKS)}


def test_hook_memory_stat_keys_match_the_session_layout() -> None:
    assert _load_alone()["keys"] == MEMORY_STAT_KEYS


def test_hook_window_names_match_the_session_layout() -> None:
    """The hooks read window requests by their own copy of the folder and file names."""
    import sys

    from gpuprof.session import layout, windows

    sys.path.insert(0, str(HOOKS))
    try:
        import gpuprof_hook_windows as hw
    finally:
        sys.path.remove(str(HOOKS))
    assert hw.WINDOWS_DIR == layout.WINDOWS_DIR and hw.REQUEST_FILE == windows.REQUEST_FILE
    assert windows.window_name(7) == f"{7:04d}"  # the hooks' own spelling of a window's folder
