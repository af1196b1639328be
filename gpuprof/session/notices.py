"""A session's warnings as records (:class:`gpuprof.model.notice.Notice`).

``Session.warnings`` are the words (``session.json``'s ``warnings``, then what reading the
folder found); the runner also wrote each of its warnings as an ``events.jsonl`` record of
kind ``warning``, with a ``code`` where some code must recognise it (the NVML failure:
``session.no_sampling``). A warning takes the code of the event with its text; the rest
are :data:`~gpuprof.model.notice.TEXT`.

A session written before warnings had codes (none of its warning events has one, or its
events could not be read) is read
by the words its version wrote, :data:`~gpuprof.session.layout.NO_SAMPLING_BEFORE_CODES`:
those files are worded so for good, whatever the runner says today.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.model import notice
from gpuprof.model.notice import Notice
from gpuprof.session import layout

if TYPE_CHECKING:
    from gpuprof.session.reader import Session


def session_notices(session: Session) -> tuple[Notice, ...]:
    """``session.warnings`` as notices, in order, each with its code where it has one."""
    told = [e for e in session.events if e.get("kind") == "warning" and isinstance(e.get("message"), str)]
    codes = {str(e["message"]): str(e["code"]) for e in told if isinstance(e.get("code"), str)}
    # No code at all: an older session, or one whose events.jsonl could not be read.
    before_codes = not codes
    return tuple(Notice(_code(w, codes, before_codes), w) for w in session.warnings)


def _code(text: str, codes: dict[str, str], before_codes: bool) -> str:
    if text in codes:
        return codes[text]
    if before_codes and text.startswith(layout.NO_SAMPLING_BEFORE_CODES):
        return notice.NO_SAMPLING
    return notice.TEXT


__all__ = ["session_notices"]
