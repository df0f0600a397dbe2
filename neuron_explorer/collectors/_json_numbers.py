"""The numbers of a trace as the run holds them, exactly or not at all.

`ts` and `dur` come as JSON text (microseconds) and are converted digit by digit to integer
nanoseconds (`_ns`): a float64 would round epoch microseconds to multiples of 256 ns. Ids, streams
and byte counts must fit int64 (a memory device int32): one beyond is an InputError naming the
field, never wrapped. A pid or tid that is an integer's text (`"tid": "25738"`, as torch 1.8-1.10
write their threads) is that integer; one beyond int64, or not an integer, is kept as text
(`_id_columns`).

Must not: know which event or table a column belongs to (_json_tables does).
"""

from __future__ import annotations

import decimal
import re

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError

_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)
_NS_EXACT = pa.decimal128(38, 3)
"""Microseconds with 3 decimals: the 128-bit integer behind it is the value in ns."""
_NS_DECIMAL = pa.decimal128(38, 12)
"""What finer ts/dur are read into: up to 26 integer and 12 fraction digits of a microsecond."""
_NUMBER_START = np.zeros(256, dtype=bool)
_NUMBER_START[list(b"-0123456789")] = True
_INT64_MAX = 2**63 - 1


def _ns(path: str, values: list, what: str) -> np.ndarray:
    """Microseconds as JSON text (`msgspec.Raw`) → int64 ns, exact: the decimal digits are
    converted, never a float; below a nanosecond the value is rounded half to even; null is 0
    (a slice's or flow's ts never is: `odd_times` drops those events first).

    The texts are joined into one buffer (by msgspec, in C) and read by Arrow's decimal parser;
    odd ones (numeric strings, more than 12 decimals, values that do not fit) go one by one.
    """
    n = len(values)
    if not n:
        return np.zeros(0, dtype=np.int64)
    text = msgspec.json.encode(values)  # b"[v0,v1,...]": numbers hold no commas
    inner = np.frombuffer(text, dtype=np.uint8)[1:-1]
    is_comma = inner == ord(",")
    commas = np.flatnonzero(is_comma)
    if len(commas) != n - 1:  # a string value with a comma in it
        return _ns_each(path, values, what)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = commas + 1
    first = inner[starts]
    is_null = first == ord("n")
    if not (_NUMBER_START[first] | is_null).all():  # strings, booleans, objects: one by one
        return _ns_each(path, values, what)
    ends = np.empty(n, dtype=np.int64)
    ends[:-1] = commas
    ends[-1] = len(inner)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=offsets[1:])
    digits = inner[~is_comma]
    nulls = int(np.count_nonzero(is_null))
    bitmap = pa.py_buffer(np.packbits(~is_null, bitorder="little")) if nulls else None
    texts = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(digits), bitmap, nulls)
    try:  # the usual case, at most 3 decimals (whole ns): read straight to ns
        ns = pc.cast(texts, _NS_EXACT)
    except pa.ArrowInvalid:
        try:  # below a nanosecond: round half to even
            ns = pc.round(pc.cast(texts, _NS_DECIMAL), ndigits=3, round_mode="half_to_even").cast(_NS_EXACT)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _ns_each(path, values, what)
    # a decimal128 with 3 decimals stores µs * 1000 = ns as a 128-bit little-endian integer
    words = np.frombuffer(ns.buffers()[1], dtype=np.int64, count=2 * n, offset=16 * ns.offset)
    low, high = words[0::2], words[1::2]
    fits = high == (low >> 63)
    if nulls:
        fits |= is_null
    if not fits.all():
        shown = bytes(values[int(np.flatnonzero(~fits)[0])]).decode(errors="replace")[:40]
        raise InputError(path, f"wrong value: {what} {shown} does not fit in int64 nanoseconds")
    out = low.copy()
    if nulls:
        out[is_null] = 0
    return out


_NOT_IN_NUMBERS = (b'"', b"n", b"t", b"f", b"{", b"[")
"""Bytes that start a JSON value other than a number (string, null, true, false, object, array)."""


def odd_times(values: list) -> tuple[list[int], list[int]]:
    """Which of `values` (ts or dur as JSON text, `msgspec.Raw`) are not JSON numbers: (indexes of
    those that give no time, indexes of numeric strings).

    A JSON number is a time. A string that spells a finite number (`"100"`, `" 12.5"`; a JSON
    reader would give text) is read as that number by `_ns`. null, a missing value (the decoder's
    default is null), other text (`"soon"`, `"NaN"`), true/false, objects and arrays give no time:
    the caller drops their events (0 would place them at the epoch). The usual case, all numbers,
    is one scan of the joined text."""
    if not values:
        return [], []
    text = msgspec.json.encode(values)
    if not any(c in text for c in _NOT_IN_NUMBERS):
        return [], []
    none, strings = [], []
    for i, v in enumerate(values):
        token = bytes(v)
        if _NUMBER_START[token[0]]:
            continue
        if token[:1] == b'"' and _spells_number(token):
            strings.append(i)
        else:
            none.append(i)
    return none, strings


def _spells_number(token: bytes) -> bool:
    """A JSON string whose text `_ns_of_text` reads as a finite number."""
    text = msgspec.json.decode(token)
    try:
        return decimal.Decimal(text.strip()).is_finite()
    except decimal.InvalidOperation:
        return False


def _ns_each(path: str, values: list, what: str) -> np.ndarray:
    return np.array([_ns_of_text(path, bytes(v), what) for v in values], dtype=np.int64)


def _ns_of_text(path: str, token: bytes, what: str) -> int:
    """One JSON value (number, numeric string or null) in microseconds → exact int ns."""
    if token == b"null":
        return 0
    shown = token.decode(errors="replace")[:40]
    text = msgspec.json.decode(token) if token[:1] == b'"' else token.decode() if _NUMBER_START[token[0]] else None
    if not isinstance(text, str):
        raise InputError(path, f"wrong value type: {what} is {shown}, not a number")
    try:
        us = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        raise InputError(path, f"wrong value type: {what} is {shown}, not a number") from None
    if not us.is_finite():
        raise InputError(path, f"wrong value: {what} is {shown}")
    with decimal.localcontext() as ctx:
        ctx.prec = max(60, len(text) + 10)
        ctx.Emax = 10**6
        ns = int((us * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN)) if abs(us.adjusted()) < 10**4 else 2**64
    if not -_INT64_MAX - 1 <= ns <= _INT64_MAX:
        raise InputError(path, f"wrong value: {what} {shown} does not fit in int64 nanoseconds")
    return ns


def _fits(v: int, bounds: tuple[int, int] = _INT64) -> bool:
    return bounds[0] <= v <= bounds[1]


_INT_TEXT = re.compile(r"0|-?[1-9][0-9]*")
"""An integer's own text: no sign but '-', no leading zeros, no spaces (so `str(int(t)) == t`: the
text comes back as it was). The C++ reader's `int_text` is the same rule."""


def id_value(v):
    """A pid or tid as the run holds it: an int64 integer, or an integer's text (torch 1.8-1.10
    write `"tid": "25738"` on spans and `"tid": 25738` on flow starts) as that integer; else None."""
    if type(v) is int:
        return v if _fits(v) else None
    if type(v) is str and _INT_TEXT.fullmatch(v):
        i = int(v)
        return i if _fits(i) else None
    return None


def _id_columns(values: list) -> tuple[pa.Array, pa.Array]:
    """pid/tid → (int64 with nulls for non-integers, original text for non-integers). An integer's
    text is the integer (`id_value`). An integer beyond int64 is kept as its text, like a named
    thread: nothing is lost or wrapped."""
    try:  # the common case: all integers
        return pa.array(values, pa.int64()), pa.nulls(len(values), pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    ints = [id_value(v) for v in values]
    texts = [None if v is None or i is not None else str(v) for v, i in zip(values, ints)]
    return pa.array(ints, pa.int64()), pa.array(texts, pa.string())


def _int_column(path: str, values: list, what: str, bounds: tuple[int, int] = _INT64,
                typ: pa.DataType = pa.int64()) -> pa.Array:
    """Integers (or None) that must fit the column: one beyond it is an InputError naming the field."""
    try:
        return pa.array(values, typ)
    except (pa.ArrowInvalid, OverflowError):
        bad = str(next(v for v in values if v is not None and not _fits(v, bounds)))
        shown = bad if len(bad) <= 40 else bad[:37] + "..."
        raise InputError(path, f"wrong value: {what} {shown} does not fit in a {64 if bounds == _INT64 else 32}-bit integer") from None


def _opt_int(path: str, values: list, what: str) -> pa.Array:
    """Integers, numeric strings or floats → int64; what is not a number → null; a number beyond
    int64 → InputError."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    out = []
    for v in values:
        if v is None or type(v) is int:
            out.append(v)
        else:
            try:
                out.append(int(v))
            except (TypeError, ValueError, OverflowError):
                out.append(None)
    return _int_column(path, out, what)

