"""The public API in a fresh interpreter (issue 29, item 1).

Every check here runs in a new ``python`` process that imports nothing but ``gpuprof``,
so no earlier test can have loaded a module the API silently depends on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _fresh(code: str, tmp_path: Path) -> dict[str, object]:
    """Run ``code`` alone in a new interpreter; it prints one JSON object as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_report_prints_saves_and_tabulates_with_only_gpuprof_imported(tmp_path: Path) -> None:
    out = _fresh(
        f"""
        import json, sys
        import gpuprof
        r = gpuprof.analyze({str(SAMPLES / "dp-exposed")!r})
        text = str(r)
        html = r._repr_html_()
        md = r.to_markdown()
        page = r.to_html()
        kinds = {{k: len(r.to_dataframe(k)) for k in
                 ("ranks", "steps", "kernels", "collectives", "whatifs", "recommendations")}}
        saved = {{ext: gpuprof.load_report(r.save("r" + ext)) == r for ext in (".json", ".json.gz")}}
        for ext in (".html", ".md", ".txt"):
            r.save("r" + ext)
        print(json.dumps({{"text": text[:200], "html": html[:7], "md": md[:40], "page": page[:15],
                          "kinds": kinds, "saved": saved}}))
        """,
        tmp_path,
    )
    assert "Rank" in out["text"] or "rank" in str(out["text"]).lower()
    assert out["html"] == "<iframe"
    assert str(out["page"]).lower().startswith("<!doctype html")
    kinds = out["kinds"]
    assert isinstance(kinds, dict) and kinds["ranks"] >= 2 and kinds["recommendations"] >= 1
    assert out["saved"] == {".json": True, ".json.gz": True}
    for ext in (".html", ".md", ".txt"):
        assert (tmp_path / f"r{ext}").stat().st_size > 0


def test_a_report_rebuilt_from_its_dict_alone_prints(tmp_path: Path) -> None:
    """``Report.from_dict`` through the model's own import path, with no API call at all
    (what a notebook that unpickles or loads a document does)."""
    doc = tmp_path / "doc.json"
    subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", str(SAMPLES / "healthy"), "--format", "json", "-o", str(doc)],
        check=True, capture_output=True, timeout=300,
    )
    out = _fresh(
        f"""
        import json
        from gpuprof.model.report import Report
        r = Report.from_dict(json.load(open({str(doc)!r})))
        print(json.dumps({{"lines": len(str(r).splitlines()), "ranks": len(r.to_dataframe())}}))
        """,
        tmp_path,
    )
    assert int(out["lines"]) > 5 and int(out["ranks"]) >= 1  # type: ignore[call-overload]


def test_a_pickled_report_renders_in_another_process(tmp_path: Path) -> None:
    """A report unpickled in a process that never analyzed anything (a Dask worker's case)."""
    import pickle

    import gpuprof

    blob = tmp_path / "r.pkl"
    blob.write_bytes(pickle.dumps(gpuprof.analyze(str(SAMPLES / "healthy"))))
    out = _fresh(
        f"""
        import json, pickle
        r = pickle.loads(open({str(blob)!r}, "rb").read())
        print(json.dumps({{"md": r.to_markdown()[:1]}}))
        """,
        tmp_path,
    )
    assert out["md"] == "#"
