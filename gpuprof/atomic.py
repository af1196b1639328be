"""Write files so that nobody ever sees half of one.

Every file gpuprof writes for the user (reports, JUnit XML, annotated traces, session
metadata) goes through :func:`write_atomic`: the content lands in a temporary file beside
the destination, which then replaces it in one ``os.replace``. A run that fails midway
leaves the previous file (or none), never a truncated one.
"""

from __future__ import annotations

import gzip
import os
import tempfile
from pathlib import Path
from typing import IO, Iterable, cast

from gpuprof.errors import GpuprofError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(dest: Path, pieces: Iterable[bytes], *, gz: bool | None = None, fsync: bool = False) -> None:
    """Write ``pieces`` to ``dest``; gzip-compress when ``gz`` (default: name ends in .gz).

    The file gets the usual permissions (0666 minus the umask), not the 0600 of a
    temporary file, so shared reports and CI artefacts stay readable.
    """
    dest = Path(dest).expanduser()
    if dest.is_dir():
        raise GpuprofError("is a folder; give a file name to write", dest)
    parent = dest.parent if str(dest.parent) else Path(".")
    if not parent.is_dir():
        raise GpuprofError("output folder does not exist", parent)
    if gz is None:
        gz = dest.name.lower().endswith(".gz")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=parent)
    except OSError as exc:
        raise GpuprofError(f"cannot write here: {exc.strerror}", parent) from None
    try:
        with os.fdopen(fd, "wb") as raw:
            out = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0)) if gz else raw
            for piece in pieces:
                out.write(piece)
            if out is not raw:
                out.close()
            raw.flush()
            if fsync:
                os.fsync(raw.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text_atomic(dest: Path, text: str, *, fsync: bool = False) -> None:
    write_atomic(dest, [text.encode("utf-8")], gz=False, fsync=fsync)
