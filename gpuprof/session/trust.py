"""A session folder is untrusted input: gpuprof reads only files inside it.

Anyone can hand over a folder that looks like a session (a colleague's run, a CI artifact,
a folder the job itself wrote into). What it names must not make ``gpuprof analyze`` open
anything else: ``/etc/passwd`` named in a hook record, ``traces/`` as a symbolic link to
someone's home, ``samples.jsonl`` as a link to ``/dev/zero``. The rule:

* every file gpuprof reads from a session is a regular file (not a FIFO, a device or a
  socket) that lies inside the session folder once every symbolic link on the way is
  resolved; paths written in its records (the job's own traces) are never opened;
* ``hooks/`` and ``traces/`` that are symbolic links are not read (one warning each), nor
  is a file in them that is a link leading out of the folder, a FIFO or a device (one
  warning with the count);
* the traces the job's own profiler wrote outside the folder are brought into it when the
  run ends (``traces/job/``, :mod:`gpuprof.session.adopt`), so a session read later is
  complete without looking outside.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def real_root(root: Path) -> str:
    """The session folder with every symbolic link resolved (the folder may be given by one)."""
    return os.path.realpath(root)


def is_inside(root_real: str, path: Path) -> bool:
    """True when ``path``, resolved, is ``root_real`` or lies under it."""
    real = os.path.realpath(path)
    base = root_real.rstrip(os.sep) or os.sep
    return real == base or real.startswith(base + os.sep) or base == os.sep


def why_not_readable(root_real: str, path: Path) -> str | None:
    """None when ``path`` is a regular file inside the session; else why it is not read.
    A file that does not exist is None too: the caller treats it as absent."""
    if not is_inside(root_real, path):
        return "a symbolic link leading out of the session folder"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    return None


def session_subfolder(root: Path, name: str) -> tuple[Path | None, str | None]:
    """``root/name`` if it is a real folder of the session, else ``None`` and, when it exists
    but is refused (a symbolic link, or leading out), the warning to give."""
    sub = root / name
    if sub.is_symlink():
        return None, f"{name}/ is a symbolic link and was not read (a session is read only from inside itself)"
    if not sub.is_dir():
        return None, None
    if not is_inside(real_root(root), sub):
        return None, f"{name}/ leads out of the session folder and was not read"
    return sub, None


def files_inside(root: Path, folder: Path, names: list[str]) -> tuple[list[Path], list[str]]:
    """Of ``folder``'s entries ``names``, the regular files inside the session, sorted by
    name, and the warnings for the others (one line per reason, with the count)."""
    base = real_root(root)
    kept: list[Path] = []
    refused: dict[str, list[str]] = {}
    for name in sorted(names):
        path = folder / name
        why = why_not_readable(base, path)
        if why is None:
            if path.is_file():
                kept.append(path)
            continue
        refused.setdefault(why, []).append(name)
    rel = os.path.relpath(folder, root)
    notes = []
    for why, refused_names in refused.items():
        n = len(refused_names)
        first = f"{rel}/{refused_names[0]}"
        more = f" and {n - 1} more" if n > 1 else ""
        notes.append(f"{first}{more} not read: {why}")
    return kept, notes


def refuse_foreign_folder(root: Path) -> str | None:
    """Why ``root`` may not become this user's session folder, or ``None``.

    ``--session-dir`` may name an existing empty folder. One that another user made (an
    empty 0777 folder waiting in ``/tmp``), or a symbolic link another user placed in a
    shared sticky folder, would hand that user the session: the command line in
    ``session.json``, and files gpuprof appends to that they could replace with links. The
    kernel's ``fs.protected_symlinks`` reasons the same way about links in sticky folders.
    """
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None:  # no POSIX owners here
        return None
    me = geteuid()
    try:
        link = os.lstat(root)
    except OSError:
        return None  # nothing there yet: it is created, and ours
    if stat.S_ISLNK(link.st_mode) and link.st_uid != me:
        try:
            parent = os.stat(os.path.dirname(os.path.abspath(root)) or os.sep)
        except OSError:
            parent = None
        if parent is not None and parent.st_mode & stat.S_ISVTX and parent.st_mode & stat.S_IWOTH:
            return (f"is a symbolic link that another user (uid {link.st_uid}) placed in a shared folder; "
                    "give a session folder of your own")
    try:
        st = os.stat(root)
    except OSError:
        return None
    if st.st_uid != me:
        return f"belongs to another user (uid {st.st_uid}); give a session folder of your own"
    return None


__all__ = ["files_inside", "refuse_foreign_folder", "is_inside", "real_root", "session_subfolder", "why_not_readable"]
