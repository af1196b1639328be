"""Encodings and trailing bytes: read what can be read, warn once (issue 20, cases 21, 23)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from clirun import run_cli

HEALTHY = Path(__file__).resolve().parents[2] / "sample_traces" / "healthy" / "rank0.pt.trace.json.gz"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    d: dict[str, Any] = json.loads(gzip.decompress(HEALTHY.read_bytes()))
    # Eight copies of the events, each shifted after the last: a text of several pieces, so
    # that damaged names land in more than one of them.
    events = [e for e in d["traceEvents"] if e.get("ph") != "M"]
    meta = [e for e in d["traceEvents"] if e.get("ph") == "M"]
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(e.get("ts", 0) for e in events) + 1000
    copies = [_shifted(e, k, span) for k in range(8) for e in events]
    d["traceEvents"] = meta + copies
    for i, e in enumerate(d["traceEvents"]):
        if e.get("cat") == "cpu_op" and i % 97 == 0:
            e["name"] = "MARK" + e["name"]
    return d


def _shifted(e: dict[str, Any], k: int, span: float) -> dict[str, Any]:
    """Copy ``k`` of an event: later by ``k`` spans, with correlation ids of its own."""
    out = dict(e)
    if "ts" in out:
        out["ts"] = out["ts"] + k * span
    if isinstance(out.get("args"), dict):
        out["args"] = {
            key: (v + k * 10**6 if key in ("correlation", "External id") and isinstance(v, int) else v)
            for key, v in out["args"].items()
        }
    return out


def _analyze(path: Path) -> dict[str, Any]:
    r = run_cli("analyze", str(path), "--format", "json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def plain(doc: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("plain") / "t.json"
    path.write_text(json.dumps(doc))
    return _analyze(path)


def _same_ranks(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert [(r["window_us"], r["compute_us"], r["lost_us"]) for r in a["ranks"]] == [
        (r["window_us"], r["compute_us"], r["lost_us"]) for r in b["ranks"]
    ]


def _notes(report: dict[str, Any], text: str) -> list[str]:
    return [w for w in report["warnings"] if text in w]


@pytest.mark.parametrize(
    "encoding, bom",
    [("utf-8", b"\xef\xbb\xbf"), ("utf-16", b""), ("utf-16-le", b""), ("utf-16-be", b""), ("utf-32", b"")],
)
def test_a_byte_order_mark_or_utf16_or_utf32_text_is_read(
    doc: dict[str, Any], plain: dict[str, Any], tmp_path: Path, encoding: str, bom: bytes
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(bom + json.dumps(doc).encode(encoding))
    got = _analyze(path)
    _same_ranks(got, plain)
    converted = _notes(got, "not UTF-8: read after converting it")
    assert len(converted) == (0 if encoding == "utf-8" else 1)


@pytest.mark.parametrize("damage", ["byte", "surrogate"])
def test_names_that_are_not_unicode_are_replaced_with_one_warning(
    doc: dict[str, Any], plain: dict[str, Any], tmp_path: Path, damage: str
) -> None:
    text = json.dumps(doc).encode()
    if damage == "byte":
        text = text.replace(b'"MARK', b'"MA\xffRK')  # a byte that is not UTF-8
    else:
        text = text.replace(b'"MARK', b'"MA\\ud800RK')  # a lone surrogate escape
    assert text.count(b"MA") > 4
    path = tmp_path / "t.json"
    path.write_bytes(text)
    got = _analyze(path)
    _same_ranks(got, plain)
    assert len(_notes(got, "are not valid Unicode")) == 1


def test_bytes_after_the_json_text_are_ignored_with_a_warning(doc: dict[str, Any], plain: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(doc).encode() + b"\n}garbage here")
    got = _analyze(path)
    _same_ranks(got, plain)
    assert _notes(got, "bytes after the end of the JSON text were ignored")
    assert not _notes(got, "cut off")  # the text is whole: nothing is missing


def test_bytes_after_the_gzip_data_are_ignored_with_a_warning(doc: dict[str, Any], plain: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()) + b"trailing garbage")
    got = _analyze(path)
    _same_ranks(got, plain)
    assert _notes(got, "bytes after the end of the gzip data were ignored")
    padded = tmp_path / "p.json.gz"  # zero padding (tape blocks) is no news
    padded.write_bytes(gzip.compress(json.dumps(doc).encode()) + b"\0" * 512)
    assert not _notes(_analyze(padded), "ignored")


# --- case 24: a named pipe is read as a stream, and --help says so -----------------------


def test_a_named_pipe_is_read_once_as_a_stream_and_help_says_so(
    doc: dict[str, Any], plain: dict[str, Any], tmp_path: Path
) -> None:
    import os
    import threading

    r = run_cli("analyze", "--help")
    words = " ".join(w for w in r.stdout.split() if w.strip("│╭╮╰╯─"))  # the words, without rich's box
    assert r.code == 0 and "named pipe (FIFO) is read once, as a stream" in words
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    data = json.dumps(doc).encode()

    def writer() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    got = _analyze(fifo)
    t.join(timeout=60)
    _same_ranks(got, plain)
