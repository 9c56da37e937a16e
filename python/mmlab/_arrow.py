"""Columns from the native module (Arrow memory layout, as byte buffers)
wrapped as pyarrow arrays without copying, and as pandas DataFrames whose
columns are Arrow-backed (``pd.ArrowDtype``)."""

from __future__ import annotations

from typing import Any, Sequence, cast

import pandas as pd
import pyarrow as pa

_PRIM = {
    "u8": pa.uint8(),
    "u32": pa.uint32(),
    "i32": pa.int32(),
    "u64": pa.uint64(),
    "i64": pa.int64(),
    "f64": pa.float64(),
}


def _buf(b: bytes | None) -> pa.Buffer | None:
    return None if b is None else pa.py_buffer(b)


class _Zeros:
    """Zeroed memory shared by the all-null columns of one table: a trace
    without some event kind has many, each as long as the trace. ``bytes(n)``
    is calloc'ed, so pages nobody reads are never even touched."""

    def __init__(self) -> None:
        self.buf = pa.py_buffer(b"")

    def get(self, nbytes: int) -> pa.Buffer:
        if self.buf.size < nbytes:
            self.buf = pa.py_buffer(bytes(nbytes))
        return self.buf


def _nulls(ty: str, n: int, zeros: _Zeros) -> pa.Array:
    """``n`` null rows of type ``ty``: every buffer is zeros (string
    offsets all 0, no bytes)."""
    t = pa.string() if ty == "str" else pa.bool_() if ty == "bool" else _PRIM[ty]
    width = 4 if ty == "str" else 0 if ty == "bool" else t.bit_width // 8
    z = zeros.get(max((n + 1) * width, (n + 7) // 8, 1))
    bufs = [z, z, pa.py_buffer(b"")] if ty == "str" else [z, z]
    return pa.Array.from_buffers(t, n, bufs, null_count=n)


def array(col: Sequence[Any], zeros: _Zeros | None = None) -> pa.Array:
    """One column tuple ``(name, type, len, nulls, validity, a, b, extra)``."""
    _name, ty, n, nulls, validity, a, b, extra = col
    if ty == "null":
        return _nulls(extra, n, zeros or _Zeros())
    v = _buf(validity)
    if ty in _PRIM:
        return pa.Array.from_buffers(_PRIM[ty], n, [v, _buf(a)], null_count=nulls)
    if ty == "bool":
        return pa.Array.from_buffers(pa.bool_(), n, [v, _buf(a)], null_count=nulls)
    if ty == "str":
        return pa.Array.from_buffers(pa.string(), n, [v, _buf(a), _buf(b)], null_count=nulls)
    if ty == "dict":
        idx = pa.Array.from_buffers(pa.uint32(), n, [v, _buf(a)], null_count=nulls)
        # Decoded to plain strings: every pandas version filters, groups and
        # pivots string[pyarrow] columns.
        return pa.array(extra, pa.string()).take(idx)
    if ty == "list":
        struct = pa.StructArray.from_arrays([array(c, zeros) for c in extra], names=[c[0] for c in extra])
        return pa.Array.from_buffers(
            pa.list_(struct.type), n, [v, _buf(a)], null_count=nulls, children=[struct]
        )
    raise TypeError(f"unknown column type {ty!r} from mmlab._native")


def table(cols: Sequence[Sequence[Any]]) -> pa.Table:
    """The native module's columns as a pyarrow Table."""
    zeros = _Zeros()
    return pa.table({c[0]: array(c, zeros) for c in cols})


def frame(t: pa.Table) -> pd.DataFrame:
    """A pyarrow Table as a DataFrame of Arrow-backed columns."""
    return cast(pd.DataFrame, t.to_pandas(types_mapper=pd.ArrowDtype))
