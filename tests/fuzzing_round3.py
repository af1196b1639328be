"""Generators for the attack classes of issue 33, beside tests/fuzzing.py.

Two kinds of case run in the fuzz harness like the others (registered in ``fuzzing.KINDS``):

* **sessionpaths**: a session folder that points outside itself -- hook records naming an
  outside trace (absolute, relative, through ``..``), ``traces/`` or ``hooks/`` as symbolic
  links out, a trace or ``samples.jsonl`` linked out (``/dev/zero``), a FIFO as a session
  file. The outside trace claims rank 77: a report holding rank 77 read it.
* **deep**: hostile numbers and depth in an input that is not a trace -- a pyproject
  (``check --config``) with thousands of digits or 10**5 levels, session lines and
  ``session.json`` nested 10**5 deep, a rank of 245 digits in a file name,
  ``GPUPROF_MAX_EVENT_MB`` of ``inf`` or 400 nines, a huge ``meta-*.yaml`` size.

Two more run real processes and servers, so they have campaigns of their own
(:func:`disposition_case`, :func:`dask_address_case`), a few cases each in the suite:

* **dispositions**: ``gpuprof run`` started with a random set of signals ignored and sent a
  random signal; the job must see the same set ignored and outlive an ignored signal.
* **dask addresses**: a random malformed address, or a server on 127.0.0.1 that is no
  scheduler; one line, exit 2, within the timeout.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN_RANK = 77
DEEP = "[" * 100_000 + "]" * 100_000


def _session_meta() -> dict[str, Any]:
    from gpuprof.session.layout import SESSION_SCHEMA

    return {"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "train.py"], "gpus": [],
            "hooks_enabled": True, "warnings": []}


def _outside_trace(r: random.Random, src: Any, where: Path) -> Path:
    """A copy of one of the job's traces outside the session, claiming rank 77 by its name."""
    where.mkdir(parents=True, exist_ok=True)
    f = r.choice(list(src.files))
    out = where / f"rank{FORBIDDEN_RANK}.pt.trace.json{'.gz' if f.name.endswith('.gz') else ''}"
    shutil.copy(f, out)
    return out


def sessionpaths_case(seed: int, index: int, all_sources: Sequence[Any], out_dir: Path,
                      max_events: int) -> tuple[Any, list[Path]]:
    import fuzzing

    r = random.Random(f"{seed}:{index}")
    src = fuzzing._trace_source(r, all_sources)
    sess = out_dir / "job"
    fuzzing._job_files(r, src, sess / "traces", limit=1)
    (sess / "session.json").write_text(json.dumps(_session_meta()))
    outside = _outside_trace(r, src, out_dir / "elsewhere")
    case = fuzzing.Case(seed, index, src.name, "analyze", "session", kind="sessionpaths")
    case.forbidden_rank = FORBIDDEN_RANK
    hooks = [{"time_unix_s": 1.0, "kind": "start", "rank": 1, "pid": 9}]
    for _ in range(r.choice([1, 2, 3])):
        what = r.choice(["absolute", "relative", "dotdot", "traces-link", "hooks-link", "trace-link",
                         "samples-zero", "fifo", "passwd"])
        case.steps.append(what)
        if what in ("absolute", "relative", "dotdot", "passwd"):
            path = {"absolute": str(outside), "relative": os.path.relpath(outside, sess),
                    "dotdot": str(sess / ".." / "elsewhere" / outside.name), "passwd": "/etc/passwd"}[what]
            hooks.append({"time_unix_s": 2.0 + len(hooks), "kind": "job_trace", "rank": 1, "pid": 9, "path": path})
        elif what == "traces-link" and not (sess / "traces").is_symlink():
            shutil.rmtree(sess / "traces")
            (sess / "traces").symlink_to(outside.parent, target_is_directory=True)
        elif what == "hooks-link" and not (sess / "hooks").exists():
            (sess / "hooks").symlink_to(outside.parent, target_is_directory=True)
        elif what == "trace-link" and (sess / "traces").is_dir() and not (sess / "traces").is_symlink():
            link = sess / "traces" / f"rank{FORBIDDEN_RANK}-x.pt.trace.json.gz"
            if not link.exists():
                link.symlink_to(outside)
        elif what == "samples-zero" and not os.path.lexists(sess / "samples.jsonl"):
            (sess / "samples.jsonl").symlink_to("/dev/zero")
        elif what == "fifo" and hasattr(os, "mkfifo") and not os.path.lexists(sess / "events.jsonl"):
            os.mkfifo(sess / "events.jsonl")
    if not (sess / "hooks").exists():
        (sess / "hooks").mkdir()
    if not (sess / "hooks").is_symlink():
        (sess / "hooks" / "rank1-9.jsonl").write_text("".join(json.dumps(h) + "\n" for h in hooks))
    case.argv = ["analyze", str(sess), "--format", "json"]
    return case, [sess]


def deep_case(seed: int, index: int, all_sources: Sequence[Any], out_dir: Path,
              max_events: int) -> tuple[Any, list[Path]]:
    import fuzzing

    r = random.Random(f"{seed}:{index}")
    src = fuzzing._trace_source(r, all_sources)
    job = out_dir / "job"
    files = fuzzing._job_files(r, src, job, limit=1)
    what = r.choice(["config-digits", "config-deep", "config-lost", "session-lines", "session-json",
                     "rank-digits", "event-mb", "meta-yaml"])
    case = fuzzing.Case(seed, index, src.name, "analyze", files[0].name, kind="deep")
    case.steps.append(what)
    if what.startswith("config"):
        body = {"config-digits": "min_compute_pct = " + "9" * r.choice([400, 4301, 5000]),
                "config-deep": "min_compute_pct = " + DEEP,
                "config-lost": "max_lost_pct = {host = " + "9" * r.choice([310, 450]) + "}"}[what]
        cfg = out_dir / "pyproject.toml"
        cfg.write_text("[tool.gpuprof.check]\n" + body + "\n")
        case.command = "check"
        case.argv = ["check", str(job), "--config", str(cfg)]
        return case, [job]
    if what in ("session-lines", "session-json"):
        sess = out_dir / "sess"
        fuzzing._job_files(r, src, sess / "traces", limit=1)
        (sess / "hooks").mkdir(parents=True)
        meta = json.dumps(_session_meta())
        if what == "session-json":
            meta = meta[:-1] + ', "x": ' + DEEP + "}"
        (sess / "session.json").write_text(meta)
        deep_line = '{"time_unix_s": 1, "gpu": 0, "kind": "step", "x": ' + DEEP + "}\n"
        for name in r.sample(["samples.jsonl", "processes.jsonl", "events.jsonl", "hooks/rank0-1.jsonl"], 2):
            (sess / name).write_text(deep_line)
        case.argv = ["analyze", str(sess), "--format", "json"]
        return case, [sess]
    if what == "rank-digits":
        name = r.choice(["rank" + "9" * 230, "worker9223372036854775808", "rank-" + "1" * 30])
        files[0].rename(job / (name + ".pt.trace.json.gz"))
    elif what == "event-mb":
        case.env["GPUPROF_MAX_EVENT_MB"] = r.choice(["inf", "1e400", "9" * 400, "1e-9", "-1", "nan", "lots"])
    elif what == "meta-yaml":
        (job / "meta-x.yaml").write_text("pp_size: " + "9" * r.choice([20, 5000]) + "\ndp_size: 2\n")
    case.argv = ["analyze", str(job), "--format", "json"]
    return case, [job]


KINDS = {"sessionpaths": 6, "deep": 6}
BUILDERS = {"sessionpaths": sessionpaths_case, "deep": deep_case}


# -- dispositions: real `gpuprof run` processes -------------------------------------------

_SIGNALS = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM")
_JOB = r"""
import os, sys, time
mask = 0
for line in open('/proc/self/status'):
    if line.startswith('SigIgn:'):
        mask = int(line.split()[1], 16)
print(mask, flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
"""


def disposition_case(seed: int, index: int, work: Path) -> str | None:
    """One ``gpuprof run`` started with a random set of signals ignored, sent one of them (or
    another, which the job must receive); the problem found, or ``None``."""
    r = random.Random(f"{seed}:{index}:dispositions")
    ignored = sorted(r.sample(_SIGNALS, r.randint(0, 3)))
    sent = r.choice(ignored) if ignored and r.random() < 0.7 else r.choice(_SIGNALS)
    go = work / "go"

    def setup() -> None:
        for name in ignored:
            signal.signal(getattr(signal, name), signal.SIG_IGN)

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "gpuprof", "run", "--no-live", "--no-hooks", "--no-report",
                             "--out", str(work / "s"), "--", sys.executable, "-c", _JOB, str(go)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=setup, env=env)
    try:
        assert proc.stdout is not None
        mask = int(proc.stdout.readline() or -1)
        want = sum(1 << (getattr(signal, n) - 1) for n in ignored)
        if mask & sum(1 << (getattr(signal, n) - 1) for n in _SIGNALS) != want:
            return f"ignored {ignored or 'none'}: the job started with SigIgn {mask:#x}"
        proc.send_signal(getattr(signal, sent))
        time.sleep(0.3)
        go.write_text("")
        code = proc.wait(timeout=60)
        expect = 0 if sent in ignored else 128 + getattr(signal, sent)
        if code != expect:
            return f"ignored {ignored or 'none'}, sent {sent}: exit {code}, not {expect}"
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- dask addresses: small servers on 127.0.0.1 ---------------------------------------------

def _serve(behaviour: str) -> tuple[socket.socket, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)

    def answer() -> None:
        while True:
            try:
                c, _ = sock.accept()
            except OSError:
                return
            try:
                if behaviour == "garbage":
                    c.sendall(os.urandom(64))
                elif behaviour == "http":
                    c.sendall(b"HTTP/1.0 200 OK\r\n\r\n<html>")
                elif behaviour == "huge":
                    c.sendall((2**63 - 1).to_bytes(8, "little"))
                elif behaviour == "hang-up":
                    c.close()
            except OSError:
                pass

    threading.Thread(target=answer, daemon=True).start()
    return sock, f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def dask_address_case(seed: int, index: int, timeout_s: float = 1.0) -> str | None:
    """A random address problem through :func:`check_scheduler`; the problem found, or None."""
    from gpuprof.errors import GpuprofError
    from gpuprof.pipeline.dask_address import check_scheduler

    r = random.Random(f"{seed}:{index}:dask")
    what = r.choice(["malformed", "silent", "garbage", "http", "huge", "hang-up"])
    sock = None
    if what == "malformed":
        address = r.choice(["", " ", "tcp://", "foo://bar", "inproc://x", "tls://h:1", "ucx://h:1", "ws://h:1",
                            "h:0", "h:65536", "h:-1", "h:" + "9" * 50, "tcp://[::1", "\x1b]52;c;x\x07:1"])
    else:
        sock, address = _serve(what)
    t0 = time.monotonic()
    try:
        check_scheduler(address, timeout_s)
        return f"{what} {address!r}: accepted as a scheduler"
    except GpuprofError as exc:
        if "\n" in str(exc):
            return f"{what} {address!r}: a message of more than one line"
    except Exception as exc:  # noqa: BLE001 -- the harness reports it
        return f"{what} {address!r}: {type(exc).__name__}: {exc}"
    finally:
        if sock is not None:
            sock.close()
    if time.monotonic() - t0 > timeout_s + 10:
        return f"{what} {address!r}: took {time.monotonic() - t0:.0f} s, past the timeout"
    return None
