"""CI pieces, together: reports in, verdicts and differences out.

``gate`` compares a report with thresholds and a baseline (``gpuprof check``) and gives a
list of :class:`~gpuprof.ci.gate.CheckResult`; ``gate_output`` writes them as terminal
text, Markdown for job summaries and JUnit XML. ``diff`` compares two reports
(``gpuprof diff``) into a :class:`~gpuprof.ci.diff.ReportDiff`; ``diff_output`` writes it
as text, Markdown, HTML (with the renderers' charts) or JSON. The command line reads the
reports, picks the outputs and writes the files.
"""
