"""Text that is safe to show a person: the one filter between gpuprof and a terminal.

Strings reach gpuprof's output from many sources it does not control: trace files (kernel
names, device names, process group names), saved reports someone edited, session files,
file names on the command line and in folders. Any of them may hold control characters:
an escape sequence that clears the screen (``ESC [2J``), writes the clipboard (OSC 52,
``ESC ]52;c;...BEL``), retitles the window or moves the cursor; a newline that forges a
second line (``gpuprof: all checks passed``); a C1 control (U+009B is a one-character
CSI on some terminals); a bidirectional override that shows text in another order than it
is stored.

The rule (docs/reliability.md, "What reaches a terminal"): every text gpuprof writes for a
person -- the text report and the Markdown report wherever they go (stdout, a file, stderr,
``$GITHUB_STEP_SUMMARY``), JUnit XML, and every line on stderr -- passes through this
module on its way out, whatever the strings in it came from. It is applied to the
finished text at the sink, not to each source, so that a new source cannot be forgotten:

- :func:`one_line` for a message that must stay one line (errors, warnings, progress):
  every control character is shown as an escape (``\\x1b``, ``\\n``, ``\\u202e``);
- :func:`visible_text` for a document of many lines (reports): line breaks and tabs stay,
  every other control character is shown as an escape; with ``keep_color`` the colour and
  weight sequences gpuprof's own renderer writes (SGR, ``ESC [ ... m`` with the parameters
  of :data:`_SGR_PARAMS`) are kept, and no other escape sequence.

JSON and HTML need no such filter: JSON escapes control characters (``\\u001b``) and the
HTML report escapes every string and is read by a browser, which does not interpret them.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls; line and paragraph separators (a line break to some
# terminals and editors); bidirectional embeddings, overrides and isolates (they reorder
# what is shown); lone surrogates (a file name with bytes that are not UTF-8 holds them as
# U+DC80-U+DCFF: shown as the byte, \xNN).
_OTHER_UNSAFE = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x1f{_OTHER_UNSAFE}]")
_UNSAFE_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHER_UNSAFE}]")  # tab and newline kept
# SGR parameters gpuprof's renderers use (rich, "standard" colours): reset, bold, dim,
# italic, underline and their resets, the 16 colours. Not conceal (8), blink, reverse.
_SGR_PARAMS = frozenset({0, 1, 2, 3, 4, 22, 23, 24, 39, 49, *range(30, 38), *range(40, 48), *range(90, 98), *range(100, 108)})
_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a file name that is not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _sub(m: re.Match[str]) -> str:
    return _escape(m.group(0))


def one_line(text: object) -> str:
    """``text`` as one line with every control character shown as an escape."""
    s = str(text)
    return _UNSAFE_ONE_LINE.sub(_sub, s) if _UNSAFE_ONE_LINE.search(s) else s


def _sgr_ok(params: str) -> bool:
    if not params:
        return True
    try:
        return all(int(p or 0) in _SGR_PARAMS for p in params.split(";"))
    except ValueError:
        return False


def visible_text(text: str, keep_color: bool = False) -> str:
    """A document of many lines with line breaks and tabs kept and every other control
    character shown as an escape; ``keep_color`` keeps gpuprof's own colour sequences."""
    if not _UNSAFE_IN_TEXT.search(text):
        return text
    if not keep_color:
        return _UNSAFE_IN_TEXT.sub(_sub, text)
    out: list[str] = []
    pos = 0
    for m in _SGR.finditer(text):
        if not _sgr_ok(m.group(1)):
            continue
        out.append(_UNSAFE_IN_TEXT.sub(_sub, text[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_UNSAFE_IN_TEXT.sub(_sub, text[pos:]))
    return "".join(out)


__all__ = ["one_line", "visible_text"]
