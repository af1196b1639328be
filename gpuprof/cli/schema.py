"""``gpuprof schema``: the JSON Schema of the JSON report, as shipped in the package."""

from __future__ import annotations

from gpuprof.cli.root import app


@app.command()
def schema() -> None:
    """Print the JSON Schema (draft 2020-12) of the JSON report, gpuprof.report/1.

    Save it with `gpuprof schema > report.schema.json` and validate reports with any JSON
    Schema validator. Keys may be added within schema 1; the required ones are never
    renamed or dropped. `gpuprof check --baseline` and `gpuprof diff` validate saved
    reports against it.
    """
    from gpuprof.cli.streams import write_stdout
    from gpuprof.model.schema import shipped_schema_text

    write_stdout(shipped_schema_text(), "the schema")
