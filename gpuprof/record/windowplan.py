"""When ``gpuprof run`` opens a profiling window after the first, and which windows it keeps.

Pure decisions, fed with the step clock, the time, the detected changes and the demands, so
that tests run them step by step without a job. The controller (:mod:`gpuprof.record.windows`)
does the reading and writing.

**When.** One window at a time: while a window is asked for and not yet recorded, nothing else
is; while a recorded window waits for its diagnosis, only a demand is answered (so windows
never pile up faster than they are diagnosed, and the disk stays bounded). Then, first to
last in priority: a demand (``gpuprof trigger``, SIGRTMIN+1 to gpuprof), a
change of the step time (:mod:`gpuprof.record.changepoint`; at most one such window per
``trigger_gap_s``), and the schedule of ``--profile-every`` (every N steps: windows start
at steps N, 2N, ... exactly, so that several nodes each running gpuprof agree without talking;
or every duration: the first step that can still be reached once the duration has passed).

**Which step.** A window's first step must be one that no rank has reached when it reads
the request. The controller sees steps up to a second late (the hooks write their log once
a second), so it takes the furthest step any rank has reached to be the last one logged
plus the steps its time since then holds; the hooks read requests every 0.5 s, so a window
starts ``LEAD_S`` (1 s) of steps after that, never fewer than ``MIN_LEAD_STEPS`` (2), plus
the warm-up before it. Counted from the step at which a change is declared, a triggered
window so starts about 2.5 s of steps later (1 s for the log, 0.5 s until the controller
looks, 1 s of lead), plus the warm-up and one step.

**Which are kept** (``--keep K``): the first window (``traces/``, never removed), the
window whose profiled steps were slowest (the worst), and the K most recent diagnosed ones.
Pruning a window removes its traces; its request, diagnosis and report stay, so the run's
report still lists it with its causes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuprof.record.changepoint import Change, ChangeTest
from gpuprof.session.windows import Demand, WindowRequest

LEAD_S = 1.0
MIN_LEAD_STEPS = 2
UNKNOWN_STEP_LEAD = 10  # steps of lead when the step time is not known yet
DEFAULT_KEEP = 3
DEFAULT_TRIGGER_GAP_S = 300.0
_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class WindowOptions:
    """The windows after the first (``gpuprof run --profile-every/--keep/...``)."""

    every_steps: int | None = None
    every_s: float | None = None
    on_change: bool = True
    keep: int = DEFAULT_KEEP
    trigger_gap_s: float = DEFAULT_TRIGGER_GAP_S
    warmup: int = 2
    active: int = 3
    test: ChangeTest = field(default_factory=ChangeTest)

    def to_meta(self) -> dict[str, object]:
        return {"every_steps": self.every_steps, "every_s": self.every_s, "on_change": self.on_change,
                "keep": self.keep, "trigger_gap_s": self.trigger_gap_s, "warmup": self.warmup, "active": self.active}


def parse_duration_s(text: str) -> float:
    """``90s``, ``10m``, ``1.5h``, ``2d`` (or plain seconds with an ``s``) in seconds; ``ValueError``."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([smhd])\s*", text.lower())
    if not m:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 10m, 2h)")
    value = float(m.group(1)) * _UNITS_S[m.group(2)]
    if value <= 0:
        raise ValueError(f"{text!r}: a duration must be more than zero")
    return value


def parse_every(text: str) -> tuple[int | None, float | None]:
    """``--profile-every``: a number of optimizer steps (``500``) or a duration (``10m``)."""
    t = text.strip()
    if t.isdigit():
        n = int(t)
        if n < 1:
            raise ValueError("--profile-every: give at least 1 step")
        return n, None
    return None, parse_duration_s(t)


def lead_steps(step_s: float | None, warmup: int) -> int:
    """Steps between the furthest step logged and a window's first step (see the module docstring)."""
    lead = UNKNOWN_STEP_LEAD if not step_s or step_s <= 0 else max(MIN_LEAD_STEPS, math.ceil(LEAD_S / step_s))
    return warmup + 1 + lead


class WindowPlanner:
    """Decides the next window; one :meth:`tick` per look at the run."""

    def __init__(self, opts: WindowOptions, start_s: float, busy_until_step: int = 0) -> None:
        self.opts = opts
        self.next_id = 1
        self.requests: list[WindowRequest] = []
        # The last step of the window in flight (its trace is written on the step after):
        # the first window's, until the hooks say where it is.
        self.busy_until_step = busy_until_step
        self.last_change_s = -math.inf
        self.next_every_step = opts.every_steps
        self.next_every_s = start_s + opts.every_s if opts.every_s else None

    def busy(self, lead_step: int) -> bool:
        """A window is asked for and its trace not yet written (on the step after its last)."""
        return lead_step <= self.busy_until_step

    def tick(
        self,
        now_s: float,
        now_unix_s: float,
        lead_step: int,
        step_s: float | None,
        change: Change | None = None,
        demands: Sequence[Demand] = (),
        ready: bool = True,
    ) -> WindowRequest | None:
        """The window to ask for now, if any. ``now_s``: the controller's clock (monotonic);
        ``lead_step``: the furthest step any rank has reached (as far as the controller can
        tell); ``step_s``: the step time; ``ready``: no window waits for its diagnosis (else
        only a demand is answered)."""
        o = self.opts
        soonest = lead_step + lead_steps(step_s, o.warmup)
        if self.busy(lead_step):
            return None
        if demands:
            d = demands[0]
            start = d.at_step if d.at_step is not None and d.at_step >= lead_step + o.warmup + 2 else soonest
            detail = "asked for (gpuprof trigger or SIGRTMIN+1)"
            if d.at_step is not None and start != d.at_step:
                detail += f"; step {d.at_step} had passed"
            return self._issue(start, "demand", detail, now_unix_s, lead_step, demand=d.name)
        if not ready:
            return None
        if change is not None and o.on_change and now_s - self.last_change_s >= o.trigger_gap_s:
            self.last_change_s = now_s
            detail = f"step time {change.direction} {abs(change.change_pct):.0f} % from step {change.step}"
            return self._issue(soonest, "change", detail, now_unix_s, lead_step, change=change.to_dict())
        if self.next_every_step is not None:
            n = o.every_steps or 1
            every = self.next_every_step
            # Ask one tick's worth of steps early (the controller looks twice a second), so
            # that the window starts exactly on the multiple of N.
            early = 0 if not step_s else math.ceil(1.0 / step_s)
            if soonest + early >= every:
                start = every if lead_step + o.warmup + 2 <= every else soonest
                nxt = every
                while nxt <= start + o.active:
                    nxt += n
                self.next_every_step = nxt
                return self._issue(start, "every", f"every {n} steps", now_unix_s, lead_step)
        if self.next_every_s is not None and now_s >= self.next_every_s:
            every_s = o.every_s or 1.0
            while self.next_every_s <= now_s:
                self.next_every_s += every_s
            return self._issue(soonest, "every", f"every {_duration(every_s)}", now_unix_s, lead_step)
        return None

    def _issue(self, start: int, reason: str, detail: str, now_unix_s: float, lead_step: int,
               change: dict[str, float | int] | None = None, demand: str | None = None) -> WindowRequest:
        req = WindowRequest(window=self.next_id, start_step=start, warmup=self.opts.warmup, active=self.opts.active,
                            reason=reason, detail=detail, requested_unix_s=now_unix_s, requested_at_step=lead_step,
                            change=change, demand=demand)
        self.next_id += 1
        self.requests.append(req)
        self.busy_until_step = req.last_step + 1
        return req


def _duration(s: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if s >= size and (s / size).is_integer():
            return f"{int(s / size)}{unit}"
    return f"{s:g}s"


@dataclass(frozen=True)
class KeptWindow:
    """What pruning needs to know of a window after the first."""

    window: int
    done: bool  # diagnosed (or its diagnosis failed): its traces are no longer needed to make it
    pruned: bool
    step_us: float | None  # its profiled steps' mean time, for the worst one


def to_prune(windows: Sequence[KeptWindow], keep: int) -> list[int]:
    """Windows whose traces go: every diagnosed one but the worst and the ``keep`` latest."""
    live = [w for w in windows if w.done and not w.pruned]
    if not live:
        return []
    kept = {w.window for w in sorted(live, key=lambda w: w.window)[-keep:]} if keep > 0 else set()
    timed = [w for w in live if w.step_us is not None]
    if timed:
        worst = max(timed, key=lambda w: (w.step_us, -w.window))
        kept.add(worst.window)
    return sorted(w.window for w in live if w.window not in kept)


__all__ = ["KeptWindow", "WindowOptions", "WindowPlanner", "lead_steps", "parse_duration_s", "parse_every", "to_prune"]
