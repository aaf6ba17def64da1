"""RFC 8785 JSON Canonicalization Scheme (JCS): the bytes a JSF signature covers. Pure.

- Objects: members sorted by their names' UTF-16 code units (not code
  points: the two orders differ for names mixing characters above U+FFFF
  with U+E000..U+FFFF), no whitespace.
- Strings: only `"`, `\\`, and control characters are escaped (`\\b \\f \\n
  \\r \\t`, others as `\\u00xx`, lowercase hex); everything else is written
  as UTF-8. A lone surrogate cannot be encoded: ValueError.
- Numbers: IEEE 754 doubles written as ECMAScript's `Number.prototype.toString`
  does (`1.0` -> `1`, `0.8` -> `0.8`, `1e21` -> `1e+21`, `1e-7` -> `1e-7`);
  NaN and infinities are refused. Python ints are converted to doubles first
  (as a JavaScript verifier would read them).

`json.dumps(..., sort_keys=True, separators=(",", ":"))` is not JCS: it writes
`1.0` for a float, and sorts by code point.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any


class CanonicalizationError(ValueError):
    """A value JCS cannot represent (NaN, infinity, a lone surrogate, a non-JSON type)."""


def canonicalize(value: Any) -> bytes:
    """The JCS bytes of a JSON value (dicts, lists, str, int, float, bool, None).

    Fast path: when every member name is ASCII (so code-point and UTF-16
    order agree) and every number is one `json.dumps` writes as ECMAScript
    does once integral floats are ints (no exponent forms, no integer past
    2**53), the C encoder with sorted keys writes exactly the JCS text. Our
    documents always qualify; anything else takes the reference path
    (`canonicalize_reference`). The tests check both agree.
    """
    try:
        prepared = _prepare(value)
    except _Slow:
        return canonicalize_reference(value)
    try:
        text = json.dumps(prepared, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalizationError(f"a string is not valid Unicode: {exc.reason}") from None


def canonicalize_reference(value: Any) -> bytes:
    """JCS written member by member, as RFC 8785 describes it (any JSON value)."""
    out: list[str] = []
    _write(value, out)
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalizationError(f"a string is not valid Unicode: {exc.reason}") from None


class _Slow(Exception):
    """A value the fast path cannot write as JCS does."""


_MAX_SAFE = 2**53


def _prepare(value: Any) -> Any:
    t = type(value)
    if t is str or value is None or t is bool:
        return value
    if t is dict:
        out = {}
        for name, item in value.items():
            if type(name) is not str or not name.isascii():
                raise _Slow
            out[name] = _prepare(item)
        return out
    if t is list or t is tuple:
        return [_prepare(item) for item in value]
    if t is int:
        if -_MAX_SAFE <= value <= _MAX_SAFE:
            return value
        raise _Slow
    if t is float:
        if value.is_integer():
            if abs(value) <= _MAX_SAFE:
                return int(value)
            raise _Slow  # json.dumps would write "1e+16" or "9007199254740994.0"
        text = repr(value)
        if "e" in text or "n" in text:  # exponent form, nan, inf: the reference path decides
            raise _Slow
        return value
    raise _Slow


def _utf16_key(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int | float):
        out.append(number(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for name in sorted(value, key=_key_of):
            if not first:
                out.append(",")
            first = False
            out.append(json.dumps(name, ensure_ascii=False))
            out.append(":")
            _write(value[name], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise CanonicalizationError(f"not a JSON value: {type(value).__name__}")


def _key_of(name: Any) -> bytes:
    if not isinstance(name, str):
        raise CanonicalizationError(f"an object member name is not a string: {name!r}")
    return _utf16_key(name)


def number(value: int | float) -> str:
    """ECMAScript Number.prototype.toString of the double nearest `value`."""
    x = float(value)
    if math.isnan(x) or math.isinf(x):
        raise CanonicalizationError(f"{value!r} has no JSON representation")
    if x == 0:
        return "0"  # also -0
    sign = "-" if x < 0 else ""
    # repr() is the shortest string that round-trips, as ECMAScript requires.
    digits_tuple, exponent = Decimal(repr(abs(x))).normalize().as_tuple()[1:]
    assert isinstance(exponent, int)
    digits = "".join(map(str, digits_tuple))
    k = len(digits)
    n = exponent + k  # value = 0.<digits> * 10**n
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        body = "0." + "0" * -n + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        body = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + body
