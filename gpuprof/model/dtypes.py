"""Element sizes of tensor dtypes, and the bytes a collective moves.

The PyTorch profiler writes a collective's message as element counts and a dtype name
(``In msg nelems``, ``Out msg nelems``, ``dtype`` in the args of ``record_param_comms``
and, in newer traces, of the communication kernel itself). Readers turn those into the
``bytes`` column of the device table; the analysis turns bytes into bandwidth.

Some communication ops record no message at all: ``symm_mem::multimem_all_reduce_``
writes only the profiler's ``Input Dims`` and ``Input type`` (C++ type names such as
``c10::BFloat16``); their size is then that of the largest input tensor.
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


# Element sizes in bytes of the C++ type names the PyTorch profiler writes in ``Input type``
# (``c10::BFloat16``, ``float``, ``long int``, ...).
INPUT_TYPE_BYTES: Mapping[str, int] = {
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "float": 4,
    "double": 8,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::Float8_e8m0fnu": 1,
    "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "unsigned short": 2,
    "unsigned int": 4,
    "unsigned long": 8,
}


def input_bytes(dims: object, types: object) -> int | None:
    """Bytes of an op's largest input tensor from the profiler's ``Input Dims`` (e.g.
    ``[[2557440], [], []]``) and ``Input type`` (e.g. ``["c10::BFloat16", "", ""]``): the
    product of its dims times its element size. ``None`` when no input is a tensor of a
    known type (scalars, strings, tensor lists and unknown types are passed over).

    The largest, not the first: for ``symm_mem::multimem_all_reduce_`` (one tensor, then
    strings) they are the same, but ``c10d::_reduce_scatter_base_`` takes its (smaller)
    output first, and a collective's size is the larger of its input and output message.
    """
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    best: int | None = None
    for shape, dtype in zip(dims, types):
        size = INPUT_TYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        if size is None or not isinstance(shape, list) or not shape:
            continue  # a 0-d tensor's [] is indistinguishable from "not a tensor": skipped
        n = size
        for d in shape:
            if not isinstance(d, int) or isinstance(d, bool) or d < 0:
                n = -1
                break
            n *= d
        if 0 <= n < 2**62 and (best is None or n > best):
            best = n
    return best


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
