"""Element sizes of tensor dtypes, and the bytes a collective moves.

The PyTorch profiler writes a collective's message as element counts and a dtype name
(``In msg nelems``, ``Out msg nelems``, ``dtype`` in the args of ``record_param_comms``
and, in newer traces, of the communication kernel itself). Readers turn those into the
``bytes`` column of the device table; the analysis turns bytes into bandwidth.
"""

from __future__ import annotations

from collections.abc import Mapping

# Element sizes in bytes of the ``dtype`` names the PyTorch profiler writes (c10 ScalarType
# names) in record_param_comms and communication kernel args.
DTYPE_BYTES: Mapping[str, int] = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}


def message_bytes(in_nelems: object, out_nelems: object, dtype: object) -> int | None:
    """Bytes a collective moves: the larger of its input and output message (an
    all-gather's output, a reduce-scatter's input), from the profiler's ``In msg nelems``,
    ``Out msg nelems`` and ``dtype``; ``None`` when they are missing or unknown."""
    size = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    counts = [
        int(n)
        for n in (in_nelems, out_nelems)
        if isinstance(n, (int, float)) and not isinstance(n, bool) and 0 <= n < 2**62
    ]
    if size is None or not counts:
        return None
    return max(counts) * size
