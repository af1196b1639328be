"""``gpuprof schema``: the JSON Schema of the JSON report (as shipped in the package), or of
what ``gpuprof check`` writes."""

from __future__ import annotations

import typer

from gpuprof.cli.root import app

KINDS = ("report", "check", "history")


@app.command()
def schema(
    kind: str = typer.Argument(
        "report", metavar="[KIND]", help="report (default), check (gpuprof check --json) or history (a --history line)."
    ),
) -> None:
    """Print the JSON Schema (draft 2020-12) of the JSON report, gpuprof.report/1.

    Save it with `gpuprof schema > report.schema.json` and validate reports with any JSON
    Schema validator. Keys may be added within schema 1; the required ones are never
    renamed or dropped. `gpuprof check --baseline` and `gpuprof diff` validate saved
    reports against it. `gpuprof schema check` prints the schema of `gpuprof check --json`
    (gpuprof.check/1), `gpuprof schema history` that of a line of a `--history` file
    (gpuprof.history/1).
    """
    from gpuprof.cli.streams import write_stdout
    from gpuprof.errors import GpuprofError

    if kind == "report":
        from gpuprof.model.schema import shipped_schema_text

        write_stdout(shipped_schema_text(), "the schema")
        return
    if kind not in KINDS:
        from gpuprof.util.suggest import did_you_mean

        raise GpuprofError(f"unknown schema {kind!r}{did_you_mean(kind, list(KINDS))}; known: {', '.join(KINDS)}")
    import json

    from gpuprof.ci.schemas import check_schema, history_schema

    doc = check_schema() if kind == "check" else history_schema()
    write_stdout(json.dumps(doc, indent=2) + "\n", "the schema")
