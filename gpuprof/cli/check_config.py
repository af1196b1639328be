"""``[tool.gpuprof.check]`` in pyproject.toml: the thresholds a project commits for its CI gate.

Keys (all optional)::

    min_compute_pct = 60                  # % of the window
    max_step_ms = 250                     # ms
    max_lost_pct = { dataloader = 10 }    # cause -> % of the window (or a [..max_lost_pct] table)
    baseline = "ci/baseline.json"         # relative to the pyproject.toml that names it; a
                                          # folder of reports, or a list of them, is pooled
    history = "ci/gpuprof-history.jsonl"  # a history of runs (file or folder), appended to
    min_effect_pct = 5                    # the floor: the smallest change of the step that matters
    confidence_pct = 99                   # the intervals' level (50 to under 100)
    tolerance_pct = 5                     # opt-in: pp a share may worsen against the baseline
    step_tolerance_pct = 5                # opt-in: % the mean step may grow (the fixed rule)

Unknown keys and causes are errors naming the file, so a typo never disables a check.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.ci.gate import Thresholds
from gpuprof.errors import GpuprofError
from gpuprof.model.report import CAUSES, Cause
from gpuprof.util.suggest import did_you_mean, match_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

KNOWN_KEYS = frozenset(
    {
        "min_compute_pct", "max_step_ms", "max_lost_pct", "baseline", "tolerance_pct", "step_tolerance_pct",
        "min_effect_pct", "confidence_pct", "history",
    }
)  # fmt: skip


@dataclass(frozen=True)
class CheckSettings:
    thresholds: Thresholds = field(default_factory=Thresholds)
    baselines: tuple[Path, ...] = ()
    tolerance_pct: float | None = None
    step_tolerance_pct: float | None = None
    min_effect_pct: float | None = None
    confidence_pct: float | None = None
    history: Path | None = None

    @property
    def baseline(self) -> Path | None:
        """The first baseline (the one the fixed-tolerance rules compare with)."""
        return self.baselines[0] if self.baselines else None


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml in ``start`` (default: the current folder) or a folder
    above it. A current folder that was deleted (``sh`` runs there) holds none."""
    if start is None:
        try:
            start = Path.cwd()
        except OSError:
            return None
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _cause(name: str, where: str) -> Cause:
    names = [c.value for c in CAUSES]
    found = match_name(name, names)  # pipeline-bubble and Straggler name causes too
    if found is None:
        raise GpuprofError(
            f"{where}: unknown cause {name.strip()!r}{did_you_mean(name, names)}; causes are: {', '.join(names)}"
        )
    return Cause(found)


def shown_value(value: Any, most: int = 40) -> str:
    """A value from a file or the command line, as an error line may echo it: short, never
    a 5,000-digit number written out (which Python refuses to convert anyway)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    text = repr(value) if not isinstance(value, (list, dict)) else type(value).__name__
    return text if len(text) <= most else text[: most - 3] + "..."


def _pct(value: Any, where: str, upper: float | None = 100.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise GpuprofError(f"{where}: expected a number, got {shown_value(value)}")
    try:
        v = float(value)
    except ValueError:
        raise GpuprofError(f"{where}: expected a number, got {shown_value(value)}") from None
    except OverflowError:  # an integer beyond any float
        v = math.inf
    if not math.isfinite(v) or v < 0 or (upper is not None and v > upper):
        expected = f"a number between 0 and {upper:g}" if upper is not None else "a finite number >= 0"
        raise GpuprofError(f"{where}: expected {expected}, got {shown_value(value)}")
    return v


def parse_cause_limits(items: Iterable[str], where: str) -> dict[Cause, float]:
    """``["dataloader=10", "host=5"]`` (from repeated ``--max-lost-pct``) to a cause map."""
    out: dict[Cause, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise GpuprofError(f"{where}: expected CAUSE=PCT, got {item!r}")
        out[_cause(name, where)] = _pct(value.strip().rstrip("%"), f"{where} {name.strip()}")
    return out


# The largest value of each number setting, the same in pyproject.toml and on the command
# line (None: any finite value >= 0). Shares and percentage points cannot pass 100.
UPPER: dict[str, float | None] = {
    "min_compute_pct": 100.0,
    "max_step_ms": None,
    "tolerance_pct": 100.0,
    "step_tolerance_pct": None,
    "min_effect_pct": None,
    "confidence_pct": 100.0,
}


def _numbers(values: Mapping[str, Any], label: Callable[[str], str]) -> dict[str, float | None]:
    """The number settings in ``values`` validated; ``label(key)`` names a key in errors."""
    out = {key: None if values.get(key) is None else _pct(values[key], label(key), upper) for key, upper in UPPER.items()}
    conf = out["confidence_pct"]
    if conf is not None and not 50.0 <= conf < 100.0:
        raise GpuprofError(f"{label('confidence_pct')}: expected a level from 50 to under 100 (e.g. 99), got {values['confidence_pct']!r}")
    return out


def _settings(
    numbers: Mapping[str, float | None],
    lost: Mapping[Cause, float],
    baselines: Iterable[Path] = (),
    history: Path | None = None,
) -> CheckSettings:
    return CheckSettings(
        thresholds=Thresholds(
            min_compute_pct=numbers["min_compute_pct"], max_lost_pct=dict(lost), max_step_ms=numbers["max_step_ms"]
        ),
        baselines=tuple(baselines),
        tolerance_pct=numbers["tolerance_pct"],
        step_tolerance_pct=numbers["step_tolerance_pct"],
        min_effect_pct=numbers["min_effect_pct"],
        confidence_pct=numbers["confidence_pct"],
        history=history,
    )


def settings_from_table(table: Mapping[str, Any], base_dir: Path, where: str) -> CheckSettings:
    """Validate the ``[tool.gpuprof.check]`` table; relative paths resolve against ``base_dir``."""
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        shown = ", ".join(shown_value(k) for k in unknown[:5])
        raise GpuprofError(f"{where}: unknown key(s) {shown}; known: {', '.join(sorted(KNOWN_KEYS))}")
    lost_table = table.get("max_lost_pct", {})
    if not isinstance(lost_table, Mapping):
        raise GpuprofError(f"{where}: max_lost_pct must be a table of cause = percent")
    lost = {_cause(k, f"{where} max_lost_pct"): _pct(v, f"{where} max_lost_pct.{k}") for k, v in lost_table.items()}
    baseline = table.get("baseline")
    if isinstance(baseline, str):
        baseline = [baseline]
    if baseline is not None and not (isinstance(baseline, list) and all(isinstance(b, str) for b in baseline)):
        raise GpuprofError(f"{where}: baseline must be a path string or a list of them")
    history = table.get("history")
    if history is not None and not isinstance(history, str):
        raise GpuprofError(f"{where}: history must be a path string")
    numbers = _numbers(table, lambda key: f"{where} {key}")
    return _settings(numbers, lost, [base_dir / b for b in baseline or ()], None if history is None else base_dir / history)


_OPTION_NAMES = {"confidence_pct": "--confidence"}  # the setting's option where its name differs


def settings_from_options(
    *,
    min_compute_pct: float | None = None,
    max_lost_pct: Iterable[str] = (),
    max_step_ms: float | None = None,
    baseline: Path | Iterable[Path] | None = None,
    tolerance_pct: float | None = None,
    step_tolerance_pct: float | None = None,
    min_effect_pct: float | None = None,
    confidence_pct: float | None = None,
    history: Path | None = None,
) -> CheckSettings:
    """The command line's settings, validated exactly as the pyproject.toml table is."""
    given = {
        "min_compute_pct": min_compute_pct,
        "max_step_ms": max_step_ms,
        "tolerance_pct": tolerance_pct,
        "step_tolerance_pct": step_tolerance_pct,
        "min_effect_pct": min_effect_pct,
        "confidence_pct": confidence_pct,
    }
    numbers = _numbers(given, lambda key: _OPTION_NAMES.get(key, "--" + key.replace("_", "-")))
    baselines = [baseline] if isinstance(baseline, Path) else list(baseline or ())
    return _settings(numbers, parse_cause_limits(max_lost_pct, "--max-lost-pct"), baselines, history)


def merged(file: CheckSettings, options: CheckSettings) -> CheckSettings:
    """``options`` over ``file``: a value given on the command line wins, cause by cause."""

    def pick(a: float | None, b: float | None) -> float | None:
        return a if a is not None else b

    ft, ot = file.thresholds, options.thresholds
    return CheckSettings(
        thresholds=Thresholds(
            min_compute_pct=pick(ot.min_compute_pct, ft.min_compute_pct),
            max_lost_pct={**ft.max_lost_pct, **ot.max_lost_pct},
            max_step_ms=pick(ot.max_step_ms, ft.max_step_ms),
        ),
        baselines=options.baselines or file.baselines,
        tolerance_pct=pick(options.tolerance_pct, file.tolerance_pct),
        step_tolerance_pct=pick(options.step_tolerance_pct, file.step_tolerance_pct),
        min_effect_pct=pick(options.min_effect_pct, file.min_effect_pct),
        confidence_pct=pick(options.confidence_pct, file.confidence_pct),
        history=options.history if options.history is not None else file.history,
    )


# A pyproject.toml is kilobytes; --config /dev/zero would otherwise be read until memory
# runs out. Read at most this much, and refuse a file that holds more.
MAX_CONFIG_BYTES = 4 << 20


def load_settings(pyproject: Path) -> CheckSettings:
    """Read ``[tool.gpuprof.check]`` from ``pyproject``; empty settings when the table is absent."""
    try:
        with open(pyproject, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise GpuprofError(f"is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a configuration file", pyproject)
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise GpuprofError("no such file", pyproject) from None
    except IsADirectoryError:
        raise GpuprofError("is a folder, not a pyproject.toml", pyproject) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GpuprofError(f"cannot read: {exc}", pyproject) from None
    except tomllib.TOMLDecodeError as exc:
        raise GpuprofError(f"not valid TOML: {exc}", pyproject) from None
    except RecursionError:
        raise GpuprofError("not valid TOML for gpuprof: arrays or tables nested too deeply", pyproject) from None
    except ValueError:  # a number of more than 4,300 digits (Python's limit on reading one)
        raise GpuprofError("not valid TOML for gpuprof: a number too long to read", pyproject) from None
    table: Any = data
    for depth, key in enumerate(("tool", "gpuprof", "check")):
        table = table.get(key)
        if table is None:
            return CheckSettings()
        if not isinstance(table, Mapping):
            name = ".".join(("tool", "gpuprof", "check")[: depth + 1])
            raise GpuprofError(f"{name} must be a table ([{name}]), not {type(table).__name__}", pyproject)
    return settings_from_table(table, pyproject.parent, f"{pyproject} [tool.gpuprof.check]")
