"""CI pieces, together: reports in, verdicts and differences out.

``gate`` compares a report with thresholds and a baseline (``gpuprof check``) and gives a
list of :class:`~gpuprof.ci.gate.CheckResult`; ``gate_output`` writes them as terminal
text, Markdown for job summaries, JUnit XML and JSON. Against a baseline the verdict comes
from step-time distributions (docs/gate.md): ``samples`` reduces a report to its job's steps
and fingerprint, ``stats`` holds the statistics, ``verdict`` decides and ``verdict_text``
words the :class:`~gpuprof.ci.verdict.Verdict`; ``history`` and ``changepoints`` keep the
runs of ``check --history`` and find where the step moved. ``diff`` compares two reports
(``gpuprof diff``) into a :class:`~gpuprof.ci.diff.ReportDiff`, with the same verdict;
``diff_output`` writes it as text, Markdown, HTML (with the renderers' charts) or JSON.
``schemas`` are the JSON Schemas of what the gate writes. The command line reads the
reports and the history, picks the outputs and writes the files.
"""
