"""``[tool.gpuprof.check]`` in pyproject.toml: the thresholds a project commits for its CI gate.

Keys (all optional)::

    min_compute_pct = 60                  # % of the window
    max_step_ms = 250                     # ms
    max_lost_pct = { dataloader = 10 }    # cause -> % of the window (or a [..max_lost_pct] table)
    baseline = "ci/baseline.json"         # relative to the pyproject.toml that names it
    tolerance_pct = 5                     # pp a share may worsen against the baseline
    step_tolerance_pct = 5                # % the step time may grow against the baseline

Unknown keys and causes are errors naming the file, so a typo never disables a check.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.errors import GpuprofError
from gpuprof.gate import Thresholds
from gpuprof.model.report import CAUSES, Cause

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

KNOWN_KEYS = frozenset({"min_compute_pct", "max_step_ms", "max_lost_pct", "baseline", "tolerance_pct", "step_tolerance_pct"})


@dataclass(frozen=True)
class CheckSettings:
    thresholds: Thresholds = field(default_factory=Thresholds)
    baseline: Path | None = None
    tolerance_pct: float | None = None
    step_tolerance_pct: float | None = None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml in ``start`` or a folder above it."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _cause(name: str, where: str) -> Cause:
    try:
        return Cause(name.strip())
    except ValueError:
        raise GpuprofError(f"{where}: unknown cause {name.strip()!r}; causes are: {', '.join(c.value for c in CAUSES)}") from None


def _pct(value: Any, where: str, upper: float | None = 100.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise GpuprofError(f"{where}: expected a number, got {value!r}")
    try:
        v = float(value)
    except ValueError:
        raise GpuprofError(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (upper is not None and v > upper):
        limit = f"0 and {upper:g}" if upper is not None else "0 and infinity"
        raise GpuprofError(f"{where}: {value!r} is not between {limit}")
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


def settings_from_table(table: Mapping[str, Any], base_dir: Path, where: str) -> CheckSettings:
    """Validate the ``[tool.gpuprof.check]`` table; relative paths resolve against ``base_dir``."""
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise GpuprofError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KNOWN_KEYS))}")
    lost_table = table.get("max_lost_pct", {})
    if not isinstance(lost_table, Mapping):
        raise GpuprofError(f"{where}: max_lost_pct must be a table of cause = percent")
    lost = {_cause(k, f"{where} max_lost_pct"): _pct(v, f"{where} max_lost_pct.{k}") for k, v in lost_table.items()}
    baseline = table.get("baseline")
    if baseline is not None and not isinstance(baseline, str):
        raise GpuprofError(f"{where}: baseline must be a path string")

    def opt(key: str, upper: float | None = 100.0) -> float | None:
        return None if key not in table else _pct(table[key], f"{where} {key}", upper)

    return CheckSettings(
        thresholds=Thresholds(min_compute_pct=opt("min_compute_pct"), max_lost_pct=lost, max_step_ms=opt("max_step_ms", None)),
        baseline=None if baseline is None else (base_dir / baseline),
        tolerance_pct=opt("tolerance_pct"),
        step_tolerance_pct=opt("step_tolerance_pct", None),
    )


def load_settings(pyproject: Path) -> CheckSettings:
    """Read ``[tool.gpuprof.check]`` from ``pyproject``; empty settings when the table is absent."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GpuprofError("no such file", pyproject) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GpuprofError(f"cannot read: {exc}", pyproject) from None
    except tomllib.TOMLDecodeError as exc:
        raise GpuprofError(f"not valid TOML: {exc}", pyproject) from None
    table = data.get("tool", {}).get("gpuprof", {}).get("check")
    if table is None:
        return CheckSettings()
    if not isinstance(table, Mapping):
        raise GpuprofError("[tool.gpuprof.check] must be a table", pyproject)
    return settings_from_table(table, pyproject.parent, f"{pyproject} [tool.gpuprof.check]")
