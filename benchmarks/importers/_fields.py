"""Reading untrusted JSON: loading bytes, and typed field access that fails with clear messages.

Every problem becomes a ReportFormatError that names the place ("llama-bench JSON: entry 2")
and the field, so a user can fix the file; no KeyError/TypeError ever reaches the caller.
"""
from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from typing import Any

from .model import ReportFormatError

MIB = 1024 * 1024
MAX_BYTES = 20 * MIB
# What one import may hold: JSON values (a cheap upper bound on the objects json.loads builds, so
# memory stays around 100 MB for the largest accepted file) and levels (test entries, results,
# benchmarks), so that the stored report and its pages stay small whatever the file's size.
MAX_VALUES = 1_000_000
MAX_LEVELS = 1000
_SCALARS = (str, int, float, bool, type(None))


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def size_text(n: int) -> str:
    """Bytes as limits are configured: 20971520 -> '20 MiB', 1572864 -> '1.5 MiB', and exact
    where one decimal would hide the difference: 20971521 -> '20,971,521 bytes'."""
    for unit, name in ((MIB, "MiB"), (1024, "KiB")):
        if n >= unit:
            shown = f"{n / unit:.1f}".removesuffix(".0")
            return f"{shown} {name}" if float(shown) * unit == n or n % unit > unit // 20 else f"{n:,} bytes"
    return f"{n:,} bytes"


def load_documents(data: Any, max_bytes: int = MAX_BYTES) -> list[Any]:
    """Bytes -> the JSON document(s) in them.

    One document for plain JSON; several for JSON Lines (llama-bench `-o jsonl`, or
    `vllm bench serve --append-result`, which writes one result object per line).
    Files over `max_bytes`, or with more than MAX_VALUES values, are refused before parsing.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ReportFormatError(f"expected the file's bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > max_bytes:
        raise ReportFormatError(f"file is {size_text(len(data))}; the limit is {size_text(max_bytes)}")
    if not data.strip():
        raise ReportFormatError("empty file")
    # Every value after the first in an array or object follows a comma; containers open with a
    # bracket. Counted in the raw bytes (commas inside strings too), so it never undercounts.
    values = data.count(b",") + data.count(b"[") + data.count(b"{")
    if values > MAX_VALUES:
        raise ReportFormatError(
            f"the file holds about {values:,} JSON values; one import reads at most {MAX_VALUES:,} "
            "(per-request arrays such as vllm bench serve --save-detailed output are not imported: "
            "save the result without them, or split the file)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ReportFormatError(f"not UTF-8 text: invalid byte at position {exc.start}") from None
    try:
        return [_loads(text)]
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if len(lines) > 1:
                return [_load_line(ln, i) for i, ln in enumerate(lines, 1)]
        truncated = _unclosed(text)
        raise ReportFormatError(
            f"not JSON: {exc.msg}{' ' if exc.msg.endswith(' at') else ' at '}"
            f"line {exc.lineno} column {exc.colno}"
            + (" (the file looks truncated)" if truncated else "")) from None


def _unclosed(text: str) -> bool:
    """True when the text ends inside a string or with brackets left open: a cut-off file."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return in_string or depth > 0


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise ReportFormatError("not usable JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise ReportFormatError(f"not usable JSON: {exc}") from None


def _load_line(line: str, number: int) -> Any:
    try:
        return _loads(line)
    except json.JSONDecodeError as exc:
        raise ReportFormatError(
            f"not JSON: line {number}: {exc.msg} at column {exc.colno}") from None


class Fields:
    """Typed reads from one JSON object; `where` prefixes every message."""

    def __init__(self, obj: Any, where: str, *, nested: bool = False):
        if not isinstance(obj, dict):
            raise ReportFormatError(f"{where}: expected an object, got {json_type(obj)}")
        self.obj, self.where, self.nested = obj, where, nested

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def _missing(self, key: str) -> ReportFormatError:
        if self.nested:
            return ReportFormatError(f"{self.where} has no '{key}'")
        return ReportFormatError(f"{self.where}: missing field '{key}'")

    def _wrong(self, key: str, want: str, value: Any) -> ReportFormatError:
        return ReportFormatError(
            f"{self.where}: field '{key}' must be {want}, got {json_type(value)}")

    def number(self, key: str, *, required: bool = False, integer: bool = False,
               positive: bool = False) -> float | int | None:
        """A finite, non-negative number (or None when absent/null and not required).

        Everything we import is a count, a duration or a rate, so negatives and NaN are errors.
        """
        value = self.obj.get(key)
        if value is None:
            if required:
                raise self._missing(key)
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(key, "a number", value)
        try:
            as_float = float(value)
        except OverflowError:
            raise ReportFormatError(f"{self.where}: field '{key}' is too large") from None
        if math.isnan(as_float):
            raise ReportFormatError(f"{self.where}: field '{key}' is NaN")
        if math.isinf(as_float):
            raise ReportFormatError(f"{self.where}: field '{key}' is infinite")
        if as_float < 0:
            raise ReportFormatError(
                f"{self.where}: field '{key}' must not be negative, got {value}")
        if positive and as_float == 0:
            raise ReportFormatError(f"{self.where}: field '{key}' must be greater than 0, got 0")
        if integer:
            if not as_float.is_integer():
                raise ReportFormatError(
                    f"{self.where}: field '{key}' must be a whole number, got {value}")
            return int(as_float)
        return as_float

    def string(self, key: str, *, required: bool = False) -> str | None:
        value = self.obj.get(key)
        if value is None:
            if required:
                raise self._missing(key)
            return None
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value)
        return value

    def array(self, key: str, *, required: bool = False) -> list | None:
        value = self.obj.get(key)
        if value is None:
            if required:
                raise self._missing(key)
            return None
        if not isinstance(value, list):
            raise self._wrong(key, "an array", value)
        return value

    def sub(self, key: str, *, required: bool = False, where: str | None = None) -> "Fields | None":
        value = self.obj.get(key)
        if value is None:
            if required:
                raise self._missing(key)
            return None
        if not isinstance(value, dict):
            raise self._wrong(key, "an object", value)
        default = f"{self.where}.{key}" if self.nested else f"{self.where}: {key}"
        return Fields(value, where or default, nested=True)


def small_meta(obj: dict, keys: tuple[str, ...] | None = None, limit: int = 40) -> dict:
    """Copy scalar config fields only (strings cut to 200 chars, keys over 100 skipped) so raw_meta
    stays small."""
    out: dict[str, Any] = {}
    for key in (keys if keys is not None else tuple(obj)):
        value = obj.get(key)
        if key not in obj or not isinstance(key, str) or len(key) > 100 or not isinstance(value, _SCALARS):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)
        out[key] = value[:200] if isinstance(value, str) else value
        if len(out) >= limit:
            break
    return out


def epoch_to_iso(seconds: float | None) -> str | None:
    """Unix seconds -> ISO 8601 UTC; None when absent or out of range."""
    if seconds is None or seconds <= 0:
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def basename(path: Any) -> Any:
    """File name without directories, for strings; anything else is returned unchanged."""
    return os.path.basename(path.replace("\\", "/")) if isinstance(path, str) and path else path


def fmt(value: float) -> str:
    """Short number for labels: 8 -> '8', 2.5 -> '2.5'."""
    return f"{value:g}"
