"""Names for JSON documents, the one kind of untyped mapping allowed across stages.

Data that one stage hands to another is a typed record (frozen dataclasses with units in
their field names: :class:`gpuprof.model.timeline.RankTrace`,
:class:`gpuprof.accounting.summary.RankSummary`, :class:`gpuprof.job.findings.JobFindings`,
...). A mapping of strings to anything crosses a stage only where it *is* a JSON document
at an edge: what a file held when it was read (a session's ``session.json`` and hook
records, a saved window's diagnosis, a simulated job's knobs), or a section of the report's
JSON being written (the report's ``extra`` sections, a schema). Those places say so with
these names, and ``tests/test_typed_boundaries.py`` lists each of them: a new one is a
decision, not an accident.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A JSON object being built, or one just decoded (keys and values as JSON gives them).
JsonObject = dict[str, Any]
# A JSON object only read.
JsonMapping = Mapping[str, Any]

__all__ = ["JsonMapping", "JsonObject"]
