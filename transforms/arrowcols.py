"""Arrow columns from Python values without importing pandas.

``pa.array`` and ``pa.table`` probe whether their input is a pandas object, and the probe imports
pandas (~0.3 s). A run that reads a few new lines builds a handful of small tables, so that import
was most of what the first ingest step with new data cost beyond a no-op run. These build the
same arrays from buffers (``pa.Array.from_buffers``), which never looks at pandas.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _validity(values: Sequence) -> tuple[pa.Buffer | None, int]:
    present = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    nulls = len(values) - int(present.sum())
    return (pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None), nulls


def ints(values: Sequence[int | None] | np.ndarray, kind: pa.DataType = pa.int64()) -> pa.Array:
    """int64 (or int32, or a timestamp of integer ticks), None for null."""
    if isinstance(values, np.ndarray):
        data = np.ascontiguousarray(values, dtype=np.int32 if kind == pa.int32() else np.int64)
        return pa.Array.from_buffers(kind, len(data), [None, pa.py_buffer(data)])
    validity, nulls = _validity(values)
    dtype = np.int32 if kind == pa.int32() else np.int64
    data = np.fromiter((0 if v is None else v for v in values), dtype=dtype, count=len(values))
    return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(data)], null_count=nulls)


def bools(values: Sequence[bool | None] | np.ndarray) -> pa.Array:
    flags = np.asarray(values, dtype=bool) if isinstance(values, np.ndarray) else \
        np.fromiter((bool(v) for v in values), dtype=bool, count=len(values))
    validity, nulls = (None, 0) if isinstance(values, np.ndarray) else _validity(values)
    return pa.Array.from_buffers(pa.bool_(), len(flags), [validity, pa.py_buffer(np.packbits(flags, bitorder="little"))],
                                 null_count=nulls)


def strings(values: Sequence[str | None], kind: pa.DataType = pa.string()) -> pa.Array:
    """string or large_string, None for null."""
    return _variable([None if v is None else v.encode("utf-8") for v in values], kind)


def repeated(value: str, n: int, kind: pa.DataType = pa.string()) -> pa.Array:
    """``value`` ``n`` times (string or large_string), one copy of its bytes per row.
    ``pa.repeat`` and a dictionary's ``cast`` import pyarrow.compute (~25 ms a process)."""
    data = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(data)
    if kind == pa.string():
        if offsets[-1] > np.iinfo(np.int32).max:
            raise OverflowError(f"arrowcols: {offsets[-1]:,} bytes do not fit a {kind} array; use its large type")
        offsets = offsets.astype(np.int32)
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def binaries(values: Sequence[bytes | None], kind: pa.DataType = pa.binary()) -> pa.Array:
    """binary or large_binary (DuckDB BLOB), None for null."""
    return _variable(values, kind)


def _variable(encoded: Sequence[bytes | None], kind: pa.DataType) -> pa.Array:
    large = kind in (pa.large_string(), pa.large_binary())
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((0 if v is None else len(v) for v in encoded), dtype=np.int64, count=len(encoded)),
              out=offsets[1:])
    if not large:  # 32-bit offsets: past 2 GiB they would wrap silently
        if offsets[-1] > np.iinfo(np.int32).max:
            raise OverflowError(f"arrowcols: {offsets[-1]:,} bytes do not fit a {kind} array; use its large type")
        offsets = offsets.astype(np.int32)
    validity, nulls = _validity(encoded)
    data = b"".join(v for v in encoded if v is not None)
    return pa.Array.from_buffers(kind, len(encoded), [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def timestamps(values: Sequence[datetime | None]) -> pa.Array:
    """timestamp[us, tz=UTC] of aware datetimes (a naive one is read as UTC), None for null."""
    def micros(v: datetime) -> int:
        v = v if v.tzinfo else v.replace(tzinfo=timezone.utc)
        delta = v - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return ints([None if v is None else micros(v) for v in values], pa.timestamp("us", tz="UTC"))


def column(values: Sequence, kind: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(kind):
        return timestamps(values).cast(kind) if kind != pa.timestamp("us", tz="UTC") else timestamps(values)
    if pa.types.is_boolean(kind):
        return bools(values)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return strings(values, kind)
    if kind in (pa.int64(), pa.int32()):
        return ints(values, kind)
    raise TypeError(f"arrowcols.column: unsupported type {kind}")


def table(columns: dict[str, pa.Array], schema: pa.Schema | None = None) -> pa.Table:
    return pa.Table.from_arrays(list(columns.values()), schema=schema) if schema is not None else \
        pa.Table.from_arrays(list(columns.values()), names=list(columns))


def from_rows(rows: Sequence[dict], schema: pa.Schema) -> pa.Table:
    """``pa.Table.from_pylist(rows, schema=schema)`` for the types above."""
    return pa.Table.from_arrays([column([r.get(f.name) for r in rows], f.type) for f in schema], schema=schema)
