"""The phrasebook's index: every phrase by name, and the one function that says a record.

A phrase is a template (or a group of templates: actions that always go together) filled
from a :class:`~gpuprof.advice.finding.Said` record's values, or, where the words depend on
the values in more ways than a template says, a function of them. Family modules register
theirs with :func:`templates` and :func:`phrase`; :func:`words` looks a record up and writes
it.

A template is ``str.format`` text whose fields name the record's values, every value used
(a value no template of the phrase says is an error, so a record and its phrase cannot
drift apart). Besides the usual format specs (``{pct:.1f}``), a field may be written as:

====================  ===============================================================
``{x:dur}``           a duration in microseconds, as every report writes one (``12.3 ms``)
``{x:durs}``          several, joined by commas
``{x:list}``          values joined by commas (``0, 3, 5``)
``{x:spans}``         numbers with runs joined (``0-3, 6``)
``{x:ranks}``         ``rank 3``, ``ranks 0-3, 6``
``{x:s}``             ``s`` unless ``x`` (a count, or a sequence's length) is one
``{x:v}``             a verb's ``s`` when ``x`` is one (``rank 3 begins``, ``ranks begin``)
``{x:them}``          ``it`` or ``them``; ``{x:their}``: ``its`` or ``their``
``{x:span}``          one duration, or two joined by a dash (``1.2 ms-3.4 ms``; one when alike)
``{x:pct_range}``     two shares as a range (``33-69%``, one value when they round alike)
``{x:words}``         a name as words (``compute_ops``: ``compute ops``)
``{unit.per}``        the report's unit, given by the phrasebook, not the record: ``per step``
                      or ``in the window`` (the others: :class:`~.unit.UnitWords`)
====================  ===============================================================

A family may add its own (:func:`specs`): a table it looks a value up in, a list it joins;
one that names the unit (``2.1 ms/step``) is registered with :func:`unit_specs` and is given
the unit's words too. A phrase written as a function that names the unit takes them as its
``unit`` argument. ``unit`` is therefore no name for a record's value.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from gpuprof.advice.finding import Said
from gpuprof.advice.phrasebook.unit import UNIT_WORDS, Unit, UnitWords
from gpuprof.util import phrases

Phrase = Callable[..., "str | tuple[str, ...]"]
PHRASES: dict[str, Phrase] = {}
TEMPLATES: dict[str, str | tuple[str, ...]] = {}
_P = TypeVar("_P", bound=Phrase)
# The phrases written as functions that name the unit (they take ``unit: UnitWords``).
_TAKES_UNIT: set[str] = set()


def _one(value: Any) -> bool:
    return (len(value) if isinstance(value, (list, tuple)) else value) == 1


def listed(values: Iterable[Any]) -> str:
    """``0, 3, 5``: values joined by commas, as the advice names ranks and stages; more than
    four whole numbers are said compactly (``0-31, 33``, ``4, 8, ..., 60``)."""
    vals = list(values)
    if len(vals) > 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return phrases.spans(vals)
    return ", ".join(str(v) for v in vals)


_SPECS: dict[str, Callable[[Any], str]] = {
    "dur": phrases.duration,
    "durs": lambda v: ", ".join(phrases.duration(x) for x in v),
    "list": listed,
    "spans": phrases.spans,
    "ranks": phrases.ranks,
    "s": lambda v: "" if _one(v) else "s",
    "v": lambda v: "s" if _one(v) else "",
    "them": lambda v: "it" if _one(v) else "them",
    "their": lambda v: "its" if _one(v) else "their",
    "span": lambda v: phrases.value_range(v[0], v[-1], phrases.duration),
    "pct_range": lambda v: phrases.pct_range(*v),
    "words": lambda v: str(v).replace("_", " "),
}


def specs(table: Mapping[str, Callable[[Any], str]]) -> None:
    """Register a family's own ways of writing a field (``{x:name}``), by name (unique)."""
    for name, fn in table.items():
        if name in _SPECS:
            raise ValueError(f"field spec {name!r} is registered twice")
        _SPECS[name] = fn


_UNIT_SPECS: dict[str, Callable[[Any, UnitWords], str]] = {}


def unit_specs(table: Mapping[str, Callable[[Any, UnitWords], str]]) -> None:
    """Register ways of writing a field that name the unit (``{x:name}``, called with the
    value and the unit's words), by name (unique among all specs)."""
    for name, fn in table.items():
        if name in _SPECS or name in _UNIT_SPECS:
            raise ValueError(f"field spec {name!r} is registered twice")
        _UNIT_SPECS[name] = fn


class _Fill(string.Formatter):
    def __init__(self, unit: UnitWords) -> None:
        self.unit = unit

    def format_field(self, value: Any, format_spec: str) -> str:
        special = _SPECS.get(format_spec)
        if special is not None:
            return special(value)
        named = _UNIT_SPECS.get(format_spec)
        return named(value, self.unit) if named is not None else format(value, format_spec)


_FILL = {unit: _Fill(w) for unit, w in UNIT_WORDS.items()}


def fill(template: str, values: Mapping[str, Any], unit: Unit = Unit.STEP) -> str:
    """``template`` with its fields written from ``values``, its unit fields from ``unit``
    (see the module docstring)."""
    if "unit" in values:
        raise ValueError("'unit' is the phrasebook's field, not a record's value")
    return _FILL[unit].vformat(template, (), {**values, "unit": UNIT_WORDS[unit]})


def fields(template: str) -> set[str]:
    """The names of the values ``template`` says."""
    names = {name.split(".")[0].split("[")[0] for _, name, _, _ in _FILL[Unit.STEP].parse(template) if name}
    return names - {"unit"}


def _claim(name: str) -> None:
    if name in PHRASES or name in TEMPLATES:
        raise ValueError(f"phrase {name!r} is registered twice")


def templates(table: Mapping[str, str | tuple[str, ...]]) -> None:
    """Register phrases written as templates, by name (unique)."""
    for name, text in table.items():
        _claim(name)
        TEMPLATES[name] = text


def phrase(name: str) -> Callable[[_P], _P]:
    """Decorator: register a phrase written as a function of the record's values."""

    def register(fn: _P) -> _P:
        _claim(name)
        PHRASES[name] = fn
        if "unit" in inspect.signature(fn).parameters:
            _TAKES_UNIT.add(name)
        return fn

    return register


def words(s: Said, unit: Unit = Unit.STEP) -> tuple[str, ...]:
    """The sentences of one record, measured in ``unit`` (see :mod:`.unit`): said once,
    never rewritten after."""
    fn = PHRASES.get(s.phrase)
    if fn is not None:
        if "unit" in s.values:
            raise ValueError(f"phrase {s.phrase!r}: 'unit' is the phrasebook's argument, not a record's value")
        out = fn(**s.values, unit=UNIT_WORDS[unit]) if s.phrase in _TAKES_UNIT else fn(**s.values)
        return (out,) if isinstance(out, str) else tuple(out)
    text = TEMPLATES.get(s.phrase)
    if text is None:
        raise KeyError(f"no phrase {s.phrase!r} in the phrasebook")
    group = (text,) if isinstance(text, str) else text
    unsaid = sorted(set(s.values) - {f for t in group for f in fields(t)})
    if unsaid:
        raise ValueError(f"phrase {s.phrase!r} does not say {', '.join(unsaid)}")
    try:
        return tuple(fill(t, s.values, unit) for t in group)
    except KeyError as exc:
        raise ValueError(f"phrase {s.phrase!r} needs {exc}") from None


def sentence(s: Said, unit: Unit = Unit.STEP) -> str:
    """The one sentence of a record that gives exactly one (a title, a line), in ``unit``."""
    out = words(s, unit)
    if len(out) != 1:
        raise ValueError(f"phrase {s.phrase!r} gave {len(out)} sentences where one was wanted")
    return out[0]


def lines(records: Iterable[Said], unit: Unit = Unit.STEP) -> tuple[str, ...]:
    """The sentences of records in order, in ``unit``."""
    return tuple(x for s in records for x in words(s, unit))


__all__ = [
    "PHRASES",
    "TEMPLATES",
    "Phrase",
    "fields",
    "fill",
    "lines",
    "listed",
    "phrase",
    "sentence",
    "specs",
    "templates",
    "unit_specs",
    "words",
]
