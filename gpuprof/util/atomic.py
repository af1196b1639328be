"""Write the files gpuprof makes for the user, so that nobody ever sees half of one.

Every file gpuprof writes for the user (reports, JUnit XML, annotated traces, session
metadata) goes through :func:`write_atomic`. What happens depends on what the path is:

- a new path, or a regular file: the content lands in a temporary file beside it, which
  then replaces it in one ``os.replace``. A run that fails midway (disk full, Ctrl-C)
  leaves the previous file (or none), never a truncated one. A replaced file keeps its
  permission bits; a new one gets ``mode`` (0666 unless the caller asks for less) minus
  the umask, given by the kernel as the temporary file is created: the umask is never
  read by setting it, which would give another thread's files (a training process's
  checkpoints, beside ``trace_handler``) the wrong permissions meanwhile;
- a symbolic link: written through to what it points at, by the rules here; the link
  stays a link;
- a FIFO or a character device (``/dev/null``, ``/dev/stdout``, a terminal): written
  straight into, as a shell's ``>`` would. Nothing is ever renamed over a device node;
- ``-``: standard output;
- a folder, a block device or a socket: refused.

Every failure to write is a :class:`GpuprofError` naming the path (one line, exit 2).
"""

from __future__ import annotations

import errno
import gzip
import os
import secrets
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, cast

from gpuprof.errors import GpuprofError

STDOUT = "-"  # the file name that means standard output
_RANDOM_CHARS = 8  # what a temporary file's name adds after its prefix


def is_stdout(dest: str | Path | None) -> bool:
    """True for ``-``, the output path that means standard output."""
    return dest is not None and str(dest) == STDOUT


def _cannot_write(dest: Path, exc: OSError) -> GpuprofError:
    return GpuprofError(f"cannot write: {exc.strerror or exc}", dest)


def _compressed(raw: IO[bytes], gz: bool) -> IO[bytes]:
    return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0)) if gz else raw


def _write_pieces(raw: IO[bytes], pieces: Iterable[bytes], gz: bool) -> None:
    """Write ``pieces`` into ``raw`` (gzip-compressed when ``gz``) and flush it."""
    out = _compressed(raw, gz)
    for piece in pieces:
        out.write(piece)
    if out is not raw:
        out.close()
    raw.flush()


def remove_quietly(path: str | os.PathLike[str]) -> None:
    """Remove a file gpuprof made for itself (a temporary file, a disk reserve) if it can;
    one already gone, or that cannot be removed, is no error: the caller has its own to
    report, or none."""
    try:
        os.unlink(path)
    except OSError:
        pass


def _target(dest: Path) -> tuple[Path, os.stat_result | None]:
    """Where writing ``dest`` goes (symbolic links followed) and what is there now."""
    target = Path(os.path.realpath(dest)) if dest.is_symlink() else dest
    try:
        return target, target.stat()
    except FileNotFoundError:
        return target, None
    except OSError as exc:  # a loop of links, a component that is not a folder, ...
        raise _cannot_write(dest, exc) from None


def write_atomic(dest: str | Path, pieces: Iterable[bytes], *, gz: bool | None = None, fsync: bool = False,
                 mode: int = 0o666) -> None:
    """Write ``pieces`` to ``dest``; gzip-compress when ``gz`` (default: name ends in .gz).

    See the module docstring for what each kind of path gets; ``mode`` is a new file's
    permissions before the umask (0o600 for a file only its owner should read).
    """
    if is_stdout(dest):
        _write_stdout(pieces, bool(gz))
        return
    dest = Path(dest).expanduser()
    if gz is None:
        gz = dest.name.lower().endswith(".gz")
    target, st = _target(dest)
    if st is None or stat.S_ISREG(st.st_mode):
        _replace(dest, target, st, pieces, gz, fsync, mode)
    elif stat.S_ISDIR(st.st_mode):
        raise GpuprofError("is a folder; give a file name to write", dest)
    elif stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
        _write_into(dest, target, pieces, gz)
    else:
        what = "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file"
        raise GpuprofError(f"is {what}; refusing to write onto it (give a file name)", dest)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, whatever it holds. Under a locale that is not UTF-8 (``LC_ALL=POSIX``)
    Python decodes a file name's bytes with ``surrogateescape``: those are given back as the
    bytes they were when they were UTF-8 (``sé`` stays ``sé``), else as U+FFFD; never an error
    that would cost ``gpuprof run`` the job's exit code."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode("utf-8", "replace")


def write_text_atomic(dest: str | Path, text: str, *, fsync: bool = False) -> None:
    write_atomic(dest, [utf8(text)], gz=False, fsync=fsync)


def make_temp(folder: Path, prefix: str, mode: int = 0o666) -> tuple[int, str]:
    """A new file ``folder/PREFIX<random>``, created exclusively with ``mode`` minus the
    umask (the kernel applies it: nothing reads or changes the process's umask); its
    descriptor, open for writing, and its path. ``tempfile.mkstemp`` always makes 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(10000):
        path = os.path.join(folder, prefix + secrets.token_hex(_RANDOM_CHARS // 2))
        try:
            return os.open(path, flags, mode), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(folder))


def _replace(dest: Path, target: Path, old: os.stat_result | None, pieces: Iterable[bytes], gz: bool, fsync: bool,
             mode: int = 0o666) -> None:
    """A new file or a regular file: temporary file beside it, then one rename over it."""
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise GpuprofError("output folder does not exist", parent)
    try:
        fd, tmp = make_temp(parent, temp_prefix(target.name, parent), mode if old is None else 0o600)
    except OSError as exc:
        raise GpuprofError(f"cannot write here: {exc.strerror}", parent) from None
    try:
        try:  # closing flushes too, so it is inside: a full disk may only show there
            with os.fdopen(fd, "wb") as raw:
                _write_pieces(raw, pieces, gz)
                if fsync:
                    os.fsync(raw.fileno())
        except OSError as exc:
            raise _cannot_write(dest, exc) from None
        try:
            if old is not None:  # a new file already has its mode, from the umask
                os.chmod(tmp, stat.S_IMODE(old.st_mode))
                _keep_owner(tmp, old)
            os.replace(tmp, target)
        except OSError as exc:
            raise _cannot_write(dest, exc) from None
    except BaseException:
        remove_quietly(tmp)
        raise


_DEFAULT_NAME_MAX = 255


def temp_prefix(name: str, folder: Path) -> str:
    """``.NAME.`` for the temporary file beside ``NAME``, cut so that the temporary name
    (prefix and the random characters) stays within the folder's NAME_MAX bytes: any name
    legal for the output is legal for its temporary file."""
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        name_max = _DEFAULT_NAME_MAX
    budget = max(1, (name_max if name_max > 0 else _DEFAULT_NAME_MAX) - _RANDOM_CHARS - 2)
    raw = os.fsencode(name)
    if len(raw) > budget:
        name = os.fsdecode(raw[:budget])
        while len(os.fsencode(name)) > budget:  # a cut inside a multi-byte character
            name = name[:-1]
    return f".{name}."


def _keep_owner(path: str, old: os.stat_result) -> None:
    """Give the new file the old one's owner and group where allowed (as root, or one's own group)."""
    now = os.stat(path)
    if (now.st_uid, now.st_gid) == (old.st_uid, old.st_gid):
        return
    try:
        os.chown(path, old.st_uid, old.st_gid)
    except OSError:
        pass  # not permitted: the file is the writer's, as with any editor's save


def _write_into(dest: Path, target: Path, pieces: Iterable[bytes], gz: bool) -> None:
    """A FIFO or character device: open it for writing as it is (never create, never truncate)."""
    try:
        fd = os.open(target, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _cannot_write(dest, exc) from None
    try:
        with os.fdopen(fd, "wb") as raw:
            _write_pieces(raw, pieces, gz)
    except OSError as exc:
        raise _cannot_write(dest, exc) from None


class OutputClosed(GpuprofError):
    """The reader of standard output went away (``| head``, ``| true``): stop writing.

    Not a failure of gpuprof's: the command line exits 141 (128 + SIGPIPE), as a shell
    reports any program a closed pipe ends, or with the verdict of ``gpuprof check``.
    """

    def __init__(self) -> None:
        super().__init__("standard output was closed by the program reading it")


def silence_fd(stream: object) -> None:
    """Point the descriptor under ``stream`` at ``/dev/null``, so that what it still holds
    in its buffer is dropped quietly when the interpreter exits (instead of failing again
    and turning the exit code into 120)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        null = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)


def stdout_error(exc: BaseException, stream: object, what: str = "the report") -> GpuprofError:
    """What a failed write to standard output means: its reader went away
    (:class:`OutputClosed`) or it cannot take the output (one line, exit 2)."""
    silence_fd(stream)
    if isinstance(exc, BrokenPipeError):
        return OutputClosed()
    if isinstance(exc, OSError):
        why = exc.strerror or str(exc)
    else:  # ValueError: "I/O operation on closed file"
        why = "it is closed"
    return GpuprofError(f"cannot write {what} to standard output: {why}")


def _write_stdout(pieces: Iterable[bytes], gz: bool) -> None:
    stream = sys.stdout
    if stream is None:  # started with stdout closed (>&-)
        raise GpuprofError("cannot write the output to standard output: it is closed")
    buffer = getattr(stream, "buffer", None)
    try:
        stream.flush()
        if buffer is None:  # stdout replaced by a text stream (tests, notebooks)
            for piece in pieces:
                stream.write(piece.decode("utf-8", errors="replace"))
            stream.flush()
            return
        _write_pieces(buffer, pieces, gz)
    except (OSError, ValueError) as exc:
        raise stdout_error(exc, stream, "the output") from None
