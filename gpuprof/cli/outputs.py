"""One rule for every command that writes files: an output never replaces an input, and two
outputs of one command are never the same file (docs/reliability.md, "Outputs").

``gpuprof analyze rank0.json -o rank0.json`` would replace the trace with its own report;
``gpuprof check T --baseline b.json --junit b.json`` the baseline with the JUnit XML;
``--save-report x --junit x`` would write two documents to one path and keep one. Each is
refused before any work, with one line naming the path and both roles.

Files are compared by what they are, not how they are named: a symbolic link, ``./a`` and
``a``, a hard link to an input are all the input. A file found in an input folder is an
input when gpuprof reads it (a trace of the folder, a session's own files); a new file in
an input folder is not. FIFOs and character devices (``/dev/null``, ``/dev/stdout``) are
written into, never replaced, and may take several outputs; ``-`` is standard output.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpuprof.errors import GpuprofError
from gpuprof.util.atomic import is_stdout

# Files of a session folder gpuprof writes when a run ends; everything else in it is read.
_SESSION_OUTPUTS = ("report.json", "report.html")

Identity = object  # (st_dev, st_ino) of an existing file, else its resolved path


def _identity(path: Path) -> tuple[Identity, os.stat_result | None]:
    try:
        st = path.stat()  # through symbolic links
    except OSError:
        return os.path.realpath(path), None
    return (st.st_dev, st.st_ino), st


def _replaced(st: os.stat_result | None) -> bool:
    """Whether writing there replaces a file (a new path or a regular file), rather than
    writing into a FIFO or a device."""
    return st is None or stat.S_ISREG(st.st_mode)


def _folder_inputs(folder: Path) -> Iterable[Path]:
    """The files gpuprof reads in an input folder."""
    from gpuprof.readers import discover
    from gpuprof.session import is_session

    if is_session(folder):
        for p in folder.rglob("*"):
            if p.is_file() and not (p.parent == folder and p.name in _SESSION_OUTPUTS):
                yield p
        return
    try:
        yield from (s.path for s in discover([folder]))
    except GpuprofError:
        return  # reading the folder will say what is wrong with it


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
    except ValueError:
        return False
    return True


def check_outputs(inputs: Sequence[tuple[str, Path | None]], outputs: Sequence[tuple[str, Path | None]]) -> None:
    """Refuse an output that is one of the inputs, or the same file as another output.

    ``inputs`` and ``outputs`` are ``(role, path)`` pairs, e.g. ``("the trace", p)`` and
    ``("--junit", j)``; ``None`` and ``-`` are skipped.
    """
    outs = [(role, Path(p)) for role, p in outputs if p is not None and not is_stdout(p)]
    if not outs:
        return
    seen: dict[Identity, str] = {}
    for role, path in outs:
        ident, st = _identity(path)
        if not _replaced(st):
            continue  # a FIFO or a device: written into, as often as asked
        if ident in seen:
            raise GpuprofError(f"{seen[ident]} and {role} name the same file; give each its own", path)
        seen[ident] = role
        if st is None:
            continue  # a new file cannot be an input
        for what, given in inputs:
            if given is None or is_stdout(given):
                continue
            given = Path(given)
            if given.is_dir():
                if not _inside(path, given):
                    continue
                if any(_identity(f)[0] == ident for f in _folder_inputs(given)):
                    raise GpuprofError(f"{role} would overwrite a file of {what} {given}; choose another file", path)
            elif _identity(given)[0] == ident:
                raise GpuprofError(f"{role} would overwrite {what}; choose another file", path)


__all__ = ["check_outputs"]
