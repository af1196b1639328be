"""Bad input, cut-off traces, discovery of trace files and rank assignment."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuprof.errors import BadTraceError
from gpuprof.model.notice import GUESSED_RANK
from gpuprof.readers import check_ranks, discover, load_all, load_file
from gpuprof.readers.ranks import rank_hint_from_name

Builder = Callable[..., dict[str, Any]]
WriteTrace = Callable[..., Path]


def _kineto_text(kineto: Builder, event: Builder, n: int = 5, rank: int | None = 0) -> bytes:
    """Kineto-style text with one event per line, as the profiler writes it."""
    events = [event("kernel", f"k{i}", 10 * i, 5, pid=0, tid=7, correlation=i, stream=7) for i in range(n)]
    doc = kineto([], rank=rank)
    head = json.dumps(doc)[: -len('"traceEvents": []}')]  # keep the top-level keys, reopen the list
    body = ",\n".join("  " + json.dumps(e) for e in events)
    return (head + '"traceEvents": [\n' + body + "\n]}").encode()


# --- bad input -----------------------------------------------------------------------


def _error(path: Path) -> BadTraceError:
    with pytest.raises(BadTraceError) as info:
        load_file(path)
    err = info.value
    assert err.path == str(path)  # the message names the file
    assert "\n" not in str(err)  # one line
    return err


def test_missing_file(tmp_path: Path) -> None:
    assert "no such file" in _error(tmp_path / "nope.json").message


def test_empty_file(write_trace: WriteTrace) -> None:
    assert "empty" in _error(write_trace("empty.json", b"")).message
    assert "whitespace" in _error(write_trace("blank.json", b"  \n ")).message


def test_not_json(write_trace: WriteTrace) -> None:
    assert "not JSON" in _error(write_trace("notes.json", "hello world")).message
    assert "not valid JSON" in _error(write_trace("broken.json", b'{"traceEvents": [}')).message
    assert "not JSON" in _error(write_trace("bin.json.gz", b"\x00\x01\x02garbage", gz=True)).message


@pytest.mark.parametrize(
    "content",
    [
        {"foo": 1},
        [1, 2, 3],
        [],
        {"traceEvents": []},
        {"traceEvents": "x"},
        [{"ph": "M", "name": "process_name"}],
    ],
)
def test_json_that_is_not_a_trace(write_trace: WriteTrace, content: Any) -> None:
    err = _error(write_trace("x.json", content))
    assert "trace" in err.message


def test_bad_gzip(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    full = gzip.compress(_kineto_text(kineto, event))
    assert "cut off before any data" in _error(write_trace("cut.json.gz", full[:12])).message
    assert "gzip" in _error(write_trace("bad.json.gz", b"\x1f\x8b" + b"\xff" * 40)).message


@pytest.mark.parametrize("odd_phase", ["Q", ["X"], None, 7])
def test_unknown_event_phases_are_skipped_not_fatal(
    write_trace: WriteTrace, kineto: Builder, event: Builder, odd_phase: Any
) -> None:
    odd = {"ph": odd_phase, "cat": "kernel", "name": "odd", "ts": 0, "dur": 1, "pid": 0, "tid": 7}
    doc = kineto([odd, event("kernel", "k", 1, 2, pid=0, tid=7)], rank=0)
    (t,) = load_file(write_trace("odd.json", doc))
    assert list(t.device["name"].astype(str)) == ["k"]


def test_folder_given_as_file_path(tmp_path: Path) -> None:
    (tmp_path / "d.json").mkdir()
    assert "directory" in _error(tmp_path / "d.json").message


# --- cut-off traces ------------------------------------------------------------------


def test_trace_cut_mid_list_is_read_up_to_the_cut(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    text = _kineto_text(kineto, event, n=5)
    cut = text[: text.index(b'"k3"') + 10]  # inside the 4th event
    (t,) = load_file(write_trace("cut.json", cut))
    assert list(t.device["name"].astype(str)) == ["k0", "k1", "k2"]
    assert any("cut off" in w and "3 complete events" in w for w in t.warnings)
    assert t.rank == 0  # top-level keys before traceEvents survive the cut


def test_cut_in_trailing_keys_keeps_every_event(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    text = _kineto_text(kineto, event, n=4)[:-1] + b', "traceName": "x", "displayTimeUnit": "ms"}'
    (t,) = load_file(write_trace("tail.json", text[:-12]))
    assert list(t.device["name"].astype(str)) == ["k0", "k1", "k2", "k3"]
    assert any("cut off" in w for w in t.warnings)


def test_bare_list_cut_after_a_comma(write_trace: WriteTrace, event: Builder) -> None:
    events = [event("kernel", f"k{i}", i, 1, pid=0, tid=7) for i in range(3)]
    text = json.dumps(events).encode()
    cut = text[: text.rindex(b"}, {") + 3]  # ends with "}, "
    (t,) = load_file(write_trace("list.json", cut))
    assert list(t.device["name"].astype(str)) == ["k0", "k1"]
    assert t.warnings and "cut off" in t.warnings[0]


def test_cut_gzip_of_a_cut_trace_is_read_up_to_the_cut(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    text = _kineto_text(kineto, event, n=400)
    gz = gzip.compress(text)
    (t,) = load_file(write_trace("cut.json.gz", gz[: len(gz) * 2 // 3]))
    assert 0 < len(t.device) < 400
    names = list(t.device["name"].astype(str))
    assert names == [f"k{i}" for i in range(len(names))]  # an intact prefix
    assert any("gzip" in w for w in t.warnings) and any("cut off after" in w for w in t.warnings)


def test_cut_before_any_event_is_an_error(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    text = _kineto_text(kineto, event)
    cut = text[: text.index(b'"traceEvents"') + 20]
    assert "JSON" in _error(write_trace("early.json", cut)).message


def _old_schema_text(event: Builder) -> bytes:
    """An old-schema trace as Kineto wrote it: all host events first, GPU events last."""
    host = [event("Operator", f"aten::op{i}", 10 * i, 5, pid=1, tid=2) for i in range(6)]
    host += [
        event("Runtime", "cudaLaunchKernel", 10 * i + 1, 2, pid=1, tid=2, correlation=i) for i in range(6)
    ]
    gpu = [event("Kernel", f"k{i}", 10 * i + 3, 4, pid=0, tid="stream 7", correlation=i) for i in range(6)]
    body = ",\n".join(json.dumps(e) for e in host + gpu)
    return ('{"schemaVersion": 1, "traceEvents": [\n' + body + "\n]}").encode()


def test_trace_cut_before_its_gpu_events_is_not_called_cpu_only(
    write_trace: WriteTrace, event: Builder
) -> None:
    text = _old_schema_text(event)
    cut = text[: text.index(b'"Kernel"') - 20]  # inside the first GPU event
    (t,) = load_file(write_trace("cut.json", cut))
    assert len(t.device) == 0 and len(t.host) == 12 and t.truncated
    (note,) = [w for w in t.warnings if "cut off" in w]
    assert "none of them GPU events" in note and "GPU events may be missing" in note
    assert "not known to be CPU-only" in note


def test_trace_cut_after_some_gpu_events_keeps_the_plain_cut_warning(
    write_trace: WriteTrace, event: Builder
) -> None:
    text = _old_schema_text(event)
    cut = text[: text.index(b'"k3"')]
    (t,) = load_file(write_trace("cut.json", cut))
    assert list(t.device["name"].astype(str)) == ["k0", "k1", "k2"] and t.truncated
    assert not any("GPU events may be missing" in w for w in t.warnings)


def test_whole_trace_without_gpu_events_is_not_truncated(write_trace: WriteTrace, event: Builder) -> None:
    text = _old_schema_text(event)
    host_only = text[: text.index(b'{"ph": "X", "cat": "Kernel"') - 2] + b"\n]}"
    (t,) = load_file(write_trace("cpu.json", host_only))
    assert len(t.device) == 0 and not t.truncated
    assert not any("cut off" in w for w in t.warnings)


# --- discovery -----------------------------------------------------------------------


def test_discover_folder_skips_non_traces(
    write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path
) -> None:
    doc = kineto([event("kernel", "k", 0, 1, pid=0)])
    for name in ["b_rank1.json", "a_rank0.json.gz", "c.json"]:
        write_trace(f"job/{name}", doc, gz=name.endswith(".gz"))
    for name in ["meta.yaml", "notes.txt", "README.md", "data.csv", "samples.jsonl", "log.jsonl"]:
        write_trace(f"job/{name}", "x")
    sources = discover([tmp_path / "job"])
    assert [s.path.name for s in sources] == ["a_rank0.json.gz", "b_rank1.json", "c.json"]
    assert [s.rank_hint for s in sources] == [0, 1, None]
    assert [s.order for s in sources] == [0, 1, 2]


def test_discover_session_folder_reads_traces_subfolder(
    write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path
) -> None:
    doc = kineto([event("kernel", "k", 0, 1, pid=0)])
    write_trace("session/session.json", {"schema": "gpuprof.session/1"})
    write_trace("session/samples-0.jsonl", "{}\n")
    write_trace("session/traces/rank0.json.gz", doc, gz=True)
    write_trace("session/traces/rank1.json.gz", doc, gz=True)
    sources = discover([tmp_path / "session"])
    assert [s.path.name for s in sources] == ["rank0.json.gz", "rank1.json.gz"]
    assert [t.rank for t in load_all([tmp_path / "session"])] == [0, 1]


def test_folder_of_several_jobs_is_refused_before_reading(
    write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path
) -> None:
    doc = kineto([event("kernel", "k", 0, 1, pid=0)], rank=0)
    for job in ("job-b", "job-a", "job-c", "job-d"):
        write_trace(f"all/{job}/trace.json", doc)
    write_trace("all/notes/readme.md", "x")  # a subfolder without traces is no job
    with pytest.raises(BadTraceError) as info:
        discover([tmp_path / "all"])
    err = info.value
    assert err.path == str(tmp_path / "all")
    assert "holds 4 separate trace folders (job-a, job-b, job-c, ...)" in err.message
    assert f"gpuprof analyze {tmp_path / 'all' / 'job-a'}" in err.message


def test_folder_with_one_trace_subfolder_reads_it(
    write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path
) -> None:
    doc = kineto([event("kernel", "k", 0, 1, pid=0)])
    write_trace("run/traces/rank0.json", doc)
    write_trace("run/traces/rank1.json", doc)
    write_trace("run/logs/out.txt", "x")
    assert [s.path.name for s in discover([tmp_path / "run"])] == ["rank0.json", "rank1.json"]


def test_discover_errors(tmp_path: Path, write_trace: WriteTrace) -> None:
    with pytest.raises(BadTraceError, match="no such file or folder") as info:
        discover([tmp_path / "missing"])
    assert info.value.path == str(tmp_path / "missing")
    write_trace("nothing/readme.md", "x")
    with pytest.raises(BadTraceError, match="no trace files") as info:
        discover([tmp_path / "nothing"])
    assert info.value.path == str(tmp_path / "nothing")
    with pytest.raises(BadTraceError):
        discover([])


def test_explicit_file_is_taken_whatever_its_name(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    path = write_trace("trace.txt", kineto([event("kernel", "k", 0, 1, pid=0)], rank=4))
    (src,) = discover([path])
    assert src.path == path
    assert [t.rank for t in src.load()] == [4]


# --- ranks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("trace_rank-3.json", 3),
        ("rank3.json.gz", 3),
        ("job_rank_3.pt.trace.json", 3),
        ("worker3.pt.trace.json.gz", 3),
        ("worker0_step_12.1694128201545.pt.trace.json.gz", 0),
        ("RANK12.json", 12),
        ("trace.json", None),
        ("workers.json", None),
        ("step_12.json", None),
    ],
)
def test_rank_hint_from_name(name: str, rank: int | None) -> None:
    assert rank_hint_from_name(Path(name)) == rank


def test_rank_precedence(write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path) -> None:
    dev = [event("kernel", "k", 0, 1, pid=0)]
    write_trace("p/rank5.json", kineto(dev, rank=9))  # distributedInfo wins over the name
    write_trace("p/rank7.json", kineto(dev))  # the name
    write_trace("p/zz.json", kineto(dev))  # neither: position in the listing (3rd -> 2)
    traces = {Path(t.source).name: t for t in load_all([tmp_path / "p"])}
    assert {name: t.rank for name, t in traces.items()} == {"rank5.json": 9, "rank7.json": 7, "zz.json": 2}
    assert [name for name, t in traces.items() if t.notices] == ["zz.json"]
    assert not any(t.warnings for t in traces.values())  # the guess is a notice, not free text


def test_file_order_fallback_warns(
    write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path
) -> None:
    dev = [event("kernel", "k", 0, 1, pid=0)]
    write_trace("q/a.json", kineto(dev))
    write_trace("q/b.json", kineto(dev))
    traces = load_all([tmp_path / "q"])
    assert [(Path(t.source).name, t.rank) for t in traces] == [("a.json", 0), ("b.json", 1)]
    assert all(any("position in the folder listing" in n.text for n in t.notices) for t in traces)
    assert all([(n.code, n.rank) for n in t.notices] == [(GUESSED_RANK, t.rank)] for t in traces)


def test_duplicate_rank_names_both_files(
    write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path
) -> None:
    dev = [event("kernel", "k", 0, 1, pid=0)]
    a = write_trace("d/a.json", kineto(dev, rank=1))
    b = write_trace("d/b.json", kineto(dev, rank=1))
    with pytest.raises(BadTraceError) as info:
        load_all([tmp_path / "d"])
    assert str(a) in str(info.value) and str(b) in str(info.value)
    assert "rank 1" in str(info.value)
    with pytest.raises(BadTraceError):
        check_ranks(load_file(a) + load_file(b))
    check_ranks(load_file(a))  # one file alone is fine
