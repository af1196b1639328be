"""gzip traces are inflated by zlib-ng where it is installed, by the standard library's zlib
where it is not, with the same text, the same warnings and the same errors either way."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from gpuprof.readers import textstream

REPO = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter with zlib_ng made unimportable (as where its wheel is missing):
# which module inflates, then what reading gives for a whole, a cut and a corrupt gzip file.
_PROBE = """
import json, sys
if sys.argv[1] == "missing":
    sys.modules["zlib_ng"] = None  # import zlib_ng raises ImportError
from pathlib import Path
from gpuprof.errors import BadTraceError
from gpuprof.readers import textstream
out = {"module": textstream.inflate_module().__name__}
for name in sys.argv[2:]:
    warnings = []
    try:
        text = b"".join(textstream.text_blocks(Path(name), warnings, block_bytes=4096))
        out[name] = {"len": len(text), "head": text[:40].decode("latin-1"), "warnings": warnings}
    except BadTraceError as exc:
        out[name] = {"error": str(exc)}
print(json.dumps(out))
"""


def _probe(mode: str, files: list[Path]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, *map(str, files)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(done.stdout)


@pytest.fixture
def gz_files(tmp_path: Path) -> list[Path]:
    text = json.dumps({"traceEvents": [{"ph": "X", "name": f"k{i}", "ts": i, "dur": 1} for i in range(3000)]})
    data = gzip.compress(text.encode())
    files = {
        "whole.json.gz": data,
        "two-members.json.gz": gzip.compress(text[:5000].encode()) + gzip.compress(text[5000:].encode()),
        "cut.json.gz": data[: len(data) * 2 // 3],
        "corrupt-head.json.gz": data[:10] + bytes(64) + data[74:],
        "corrupt-tail.json.gz": data[: len(data) // 2] + bytes(64) + data[len(data) // 2 + 64 :],
        "empty-member.json.gz": gzip.compress(b""),
    }
    out = []
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        out.append(tmp_path / name)
    return out


def test_without_zlib_ng_reading_falls_back_to_zlib_with_the_same_results(gz_files: list[Path]) -> None:
    fallback = _probe("missing", gz_files)
    assert fallback.pop("module") == "zlib"
    default = _probe("installed", gz_files)
    module = default.pop("module")
    assert fallback == default  # text, warnings and error lines: the same either way
    whole = fallback[str(gz_files[0])]
    assert isinstance(whole, dict) and whole["len"] > 50_000 and whole["warnings"] == []
    assert module in ("zlib_ng.zlib_ng", "zlib")


def test_zlib_ng_inflates_when_installed() -> None:
    pytest.importorskip("zlib_ng", reason="zlib-ng is not installed here (reading uses zlib)")
    assert textstream.inflate_module().__name__ == "zlib_ng.zlib_ng"
    assert textstream.inflate_module() is not zlib
