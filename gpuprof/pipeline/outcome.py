"""What a command gets from an input: the report, and its warnings as records.

The report's ``warnings`` are strings (the JSON contract, ``Report.warnings``); a caller that
acts on a warning (``gpuprof analyze`` naming on stderr the files of a folder it left out)
asks :attr:`Outcome.notices` by code instead of reading those strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprof.model import notice
from gpuprof.model.notice import Notice
from gpuprof.model.report import Report


@dataclass(frozen=True)
class Outcome:
    """``report`` and ``notices``, its warnings as records, in order
    (``report.warnings == notice.words(notices)``). A saved report read back has no codes:
    each of its warnings is a :data:`~gpuprof.model.notice.TEXT` notice."""

    report: Report
    notices: tuple[Notice, ...] = ()

    @classmethod
    def of_saved(cls, report: Report) -> Outcome:
        return cls(report, notice.said_all(report.warnings))

    @property
    def skipped(self) -> tuple[Notice, ...]:
        """The files found in folders that could not be read and were left out (``path``)."""
        return notice.of_code(self.notices, notice.SKIPPED_UNREADABLE)


__all__ = ["Outcome"]
