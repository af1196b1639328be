"""The decoded shape of a trace event, for every Chrome trace-event based format.

Decoding uses ``msgspec`` into structs that keep only the fields readers use, so a trace
is never turned into per-event Python dicts (the unused ``args`` such as call stacks are
skipped by the decoder, and input shapes are kept as raw JSON text until a communication
row needs them). Why msgspec and not another decoder: see ``benchmarks/README.md``
(measured side by side). :mod:`gpuprof.readers.jsonio` cuts a file into pieces and hands
each to :func:`decode_doc`.

Fields whose type varies between producers (``pid``/``tid`` int or string, ``stream``
int or ``"0x0"``, integers beyond 64 bits in ``args``) are typed loosely so that no
valid trace fails validation; readers coerce them column by column. A missing ``ts`` or
``dur`` is NaN, as is a value that is not a number: readers drop such events and count
them (see :mod:`gpuprof.readers.timecheck`). A piece whose values do not fit even these
types (a float pid, a null name) is decoded loosely and coerced event by event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast, get_args

import msgspec

# A raw ``args`` field the event does not have (``msgspec.Raw | None`` is not a type
# msgspec decodes into: the empty text stands for "absent").
NO_RAW = msgspec.Raw()


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` keys any reader uses; everything else in ``args`` is skipped."""

    correlation: Any = None
    stream: Any = None
    nbytes: Any = msgspec.field(default=None, name="bytes")
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    # Message of a collective (record_param_comms, and communication kernels in newer traces).
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    # Shapes and C++ types of an op's inputs: the size of a collective that records no
    # nelems (symm_mem ops). Every op of a trace recorded with shapes carries both, as
    # nested lists; kept as the raw JSON text (validated, not built into Python lists) and
    # decoded only for the communication rows that read them (see :func:`raw_value`):
    # building them for every op cost a third of the reading time, and fed the cyclic GC.
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    name: Any = None  # metadata events: thread_name / process_name
    step: Any = None  # op-level timelines
    mb_id: Any = None  # op-level timelines
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    # Merged multi-rank files (TraceFusion): the event's rank and its pid before merging.
    rank: Any = None
    pid_raw: Any = None


NO_ARGS = Args()
_RAW_FIELDS = ("input_dims", "input_type")


def raw_value(value: Any) -> Any:
    """The value of an ``args`` field kept as raw JSON text (:class:`msgspec.Raw`), decoded
    (``None`` when absent); any other value (one an :class:`Args` was built with) as it is.

    The text was validated when the event was decoded (nesting too deep for the decoder
    fails there, as for any field), so decoding it again cannot fail."""
    if not isinstance(value, msgspec.Raw):
        return value
    return msgspec.json.decode(value) if value else None


# Every event phase of the Chrome trace-event format. Decoding ``ph`` as one of them hands
# out the same string object for every event (no string per event, and comparisons by
# identity); a producer writing another phase makes the piece decode loosely instead.
Phase = Literal[
    "B",
    "E",
    "X",
    "i",
    "I",
    "C",
    "b",
    "n",
    "e",
    "S",
    "T",
    "p",
    "F",
    "s",
    "t",
    "f",
    "P",
    "N",
    "O",
    "D",
    "M",
    "V",
    "v",
    "R",
    "c",
    "(",
    ")",
    "",
]


PHASES: frozenset[str] = frozenset(get_args(Phase))


NAN = float("nan")
INF = float("inf")


class Event(msgspec.Struct, gc=False):
    """One trace event; times are microseconds as in the Chrome trace-event format."""

    # In the order Kineto writes the keys: the decoder looks for each key's field from the
    # one after the last key's, so a key in that order is found at the first comparison.
    ph: Phase = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = NAN  # missing: NaN (never 0, which would read as a time)
    dur: float = NAN
    args: Args = NO_ARGS


class _LooseEvent(msgspec.Struct):
    """Fallback when a producer writes odd types (e.g. a float pid or a null name)."""

    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    ts: Any = 0.0
    dur: Any = 0.0
    pid: Any = -1
    tid: Any = -1
    args: Any = None


@dataclass
class TopLevel:
    """The top-level keys readers use (``None`` when absent).

    With a trace decoded in pieces, keys after the event list are only known once every
    piece has been read.
    """

    device_properties: Any = None
    distributed_info: Any = None
    schema_version: Any = None
    with_stack: Any = None  # Kineto writes the profiler's with_stack setting (1 / true)

    def update(self, later: TopLevel) -> None:
        """Take the keys ``later`` (a later piece) found."""
        if later.device_properties is not None:
            self.device_properties = later.device_properties
        if later.distributed_info is not None:
            self.distributed_info = later.distributed_info
        if later.schema_version is not None:
            self.schema_version = later.schema_version
        if later.with_stack is not None:
            self.with_stack = later.with_stack



_E = TypeVar("_E")


class _Doc(msgspec.Struct, Generic[_E]):
    """A trace written as a JSON object: its event list and the top-level keys readers use."""

    traceEvents: list[_E] | None = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    schemaVersion: Any = None
    with_stack: Any = None

    def top(self) -> TopLevel:
        return TopLevel(self.deviceProperties, self.distributedInfo, self.schemaVersion, self.with_stack)


_EVENT_DOC = _Doc[Event]
_LOOSE_DOC = _Doc[_LooseEvent]


DocTuple = tuple[list[Event] | None, TopLevel]


def decode_doc(data: bytes | bytearray | memoryview, is_object: bool) -> DocTuple:
    """A JSON text (an object with ``traceEvents``, or a list) as its events and top-level
    keys (no events: ``None``). Raises :class:`msgspec.DecodeError` for text that is not
    JSON, :class:`msgspec.ValidationError` for JSON that is not a list of objects."""
    try:
        if is_object:
            doc = msgspec.json.decode(data, type=_EVENT_DOC)
            return doc.traceEvents, doc.top()
        return msgspec.json.decode(data, type=list[Event]), TopLevel()
    except msgspec.ValidationError:
        pass
    # Rare: odd types somewhere. Decode loosely and coerce; raises ValidationError when the
    # JSON is not a list of objects at all.
    if is_object:
        loose = msgspec.json.decode(data, type=_LOOSE_DOC)
        evs = None if loose.traceEvents is None else [_coerce(e) for e in loose.traceEvents]
        return evs, loose.top()
    return [_coerce(e) for e in msgspec.json.decode(data, type=list[_LooseEvent])], TopLevel()


def _num(v: Any) -> float:
    """A time from a loosely typed value: a number or numeric string as it is, ``None``
    (``null``) as missing (NaN), anything else (``"abc"``, ``"NaN"``, ``true``) as not a
    number (infinity), so that readers can tell the two apart."""
    if v is None:
        return NAN
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return INF
    try:
        f = float(v)
    except (ValueError, OverflowError):
        return INF
    return INF if f != f else f


def _coerce(e: _LooseEvent) -> Event:
    args = NO_ARGS
    if isinstance(e.args, dict):
        given = dict(e.args)
        # Raw fields cannot be converted from Python values: set as their JSON text.
        raws = {
            f.name: msgspec.Raw(msgspec.json.encode(given.pop(f.encode_name)))
            for f in msgspec.structs.fields(Args)
            if f.name in _RAW_FIELDS and f.encode_name in given
        }
        try:
            args = msgspec.convert(given, type=Args, strict=False)
        except msgspec.ValidationError:
            args = NO_ARGS
        else:
            if raws:
                args = msgspec.structs.replace(args, **raws)

    def ident(v: Any) -> int | str:
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            return int(v) if isinstance(v, float) else str(v)
        return v

    return Event(
        ph=cast(Phase, e.ph) if isinstance(e.ph, str) and e.ph in PHASES else "",  # unknown: no row
        cat=str(e.cat or ""),
        name=str(e.name or ""),
        ts=_num(e.ts),
        dur=_num(e.dur),
        pid=ident(e.pid),
        tid=ident(e.tid),
        args=args,
    )
