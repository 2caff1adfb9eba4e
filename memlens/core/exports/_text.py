"""Vectorised JSON text: many rows of one template, numbers formatted by numpy, not Python.

A `RowTemplate` is literal text with holes for numbers and choices. Its rows live in one
reusable buffer whose literal bytes are written once; for each chunk of rows only the holes
are filled, four characters per table lookup, as whole uint32 words (every hole starts on a
4-byte boundary). Unused bytes are NUL, which JSON text never contains, and are dropped on
output. A million rows cost a few numpy passes instead of a million f-strings.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np


def _words(strings: Sequence[bytes]) -> np.ndarray:
    """Strings of at most 4 bytes, right-aligned and NUL-padded, one uint32 each."""
    t = np.zeros((len(strings), 4), dtype=np.uint8)
    for i, s in enumerate(strings):
        t[i, 4 - len(s) :] = np.frombuffer(s, dtype=np.uint8)
    return t.view(np.uint32).reshape(-1)


def _digit_words(pad: bool) -> np.ndarray:
    """Words for 0..9999: zero-padded ("0042") or without leading zeros ("  42", 0 -> "   0")."""
    n = np.arange(10_000)
    chars = np.stack([n // 1000, n // 100 % 10, n // 10 % 10, n % 10], axis=1) + ord("0")
    if not pad:
        width = np.searchsorted(np.array([10, 100, 1000]), n, side="right") + 1
        chars[np.arange(4) < 4 - width[:, None]] = 0
    return np.ascontiguousarray(chars.astype(np.uint8)).view(np.uint32).reshape(-1)


# Index i + 10_000 * leading: inner groups are zero-padded, the leading group is not; a
# group beyond the number's top (leading, value 0) is empty in _BEYOND, "0" in _FIRST.
_FIRST = np.concatenate([_digit_words(True), _digit_words(False)])
_BEYOND = _FIRST.copy()
_BEYOND[10_000] = 0
_FRACTION = _words([f".{i:03d}".encode() for i in range(1000)])
_NULL = _words([b"null"])[0]
_EXACT = float(2**46)  # below this, float division by 10**4 then floor is exact


def digit_groups(values: np.ndarray, groups: int) -> np.ndarray:
    """|values| (integers) as `groups` uint32 words, four characters each, most significant
    first; leading zeros are NUL."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    out = np.empty((len(a), groups), dtype=np.uint32)
    exact = not len(a) or float(a.max()) < _EXACT
    rest = a if exact else np.abs(np.asarray(values, dtype=np.int64))
    for g in range(groups):
        if exact:
            q = np.floor(rest / 10_000.0)
            low = rest - q * 10_000.0
        else:
            q, low = np.divmod(rest, 10_000)
        idx = low.astype(np.int32)
        idx += (q == 0) * np.int32(10_000)
        out[:, groups - 1 - g] = (_FIRST if g == 0 else _BEYOND)[idx]
        rest = q
    return out


def groups_for(max_abs: float) -> int:
    return max(1, (len(str(int(max_abs))) + 3) // 4)


@dataclass(frozen=True)
class Int:
    """An integer hole sized for |value| <= max_abs; `signed` allows '-', `nullable` writes
    null for NaN (the column is then float)."""

    max_abs: int
    signed: bool = False
    nullable: bool = False


@dataclass(frozen=True)
class Micros:
    """Integer nanoseconds (>= 0) written as microseconds with three decimals: 1234.567."""

    max_ns: int


@dataclass(frozen=True)
class Float:
    """A float in scientific notation with 9 significant digits; null when not finite."""


@dataclass(frozen=True)
class Choice:
    """One of a few fixed strings (already JSON-escaped); the column holds indexes."""

    options: tuple[str, ...]


def max_abs(values: np.ndarray) -> int:
    """The largest finite |value| (0 for none): what an Int hole must be sized for."""
    v = np.asarray(values)
    if not len(v):
        return 0
    if v.dtype.kind in "iu":
        return int(max(abs(int(v.max())), abs(int(v.min()))))
    finite = np.isfinite(v)
    return int(np.abs(v).max(where=finite, initial=0))


class RowTemplate:
    """Literal text (str parts) with holes (Int, Micros, Float, Choice), rows in chunks."""

    def __init__(self, parts: Sequence[object], chunk: int = 65_536) -> None:
        self.chunk = chunk
        t = bytearray()
        self._holes: list[tuple] = []

        def align() -> None:
            t.extend(b"\0" * (-len(t) % 4))

        def word() -> int:
            align()
            t.extend(b"\0\0\0\0")
            return len(t) // 4 - 1

        def byte(text: bytes = b"\0") -> int:
            t.extend(text)
            return len(t) - 1

        for part in parts:
            if isinstance(part, str):
                t.extend(part.encode())
            elif isinstance(part, Int):
                sign = byte() if part.signed else None
                null = word() if part.nullable else None
                g = groups_for(part.max_abs)
                first = word()
                t.extend(b"\0" * 4 * (g - 1))
                self._holes.append(("int", (first, g, sign, null)))
            elif isinstance(part, Micros):
                g = groups_for(part.max_ns // 1000)
                first = word()
                t.extend(b"\0" * 4 * g)  # the digits, then ".ddd"
                self._holes.append(("micros", (first, g)))
            elif isinstance(part, Float):
                # [null][sign][d]["."][dddd][dddd]["e"][sign][exponent]
                null, sign, lead = word(), byte(), word()
                dot = byte(b".")
                frac = word()
                t.extend(b"\0\0\0\0")
                e = byte(b"e")
                esign = byte()
                exp = word()
                self._holes.append(("float", (null, sign, lead, dot, frac, e, esign, exp)))
            elif isinstance(part, Choice):
                encoded = [o.encode() for o in part.options]
                words = max(1, (max(len(e) for e in encoded) + 3) // 4)
                table = np.zeros((len(encoded), 4 * words), dtype=np.uint8)
                for i, e in enumerate(encoded):
                    table[i, 4 * words - len(e) :] = np.frombuffer(e, dtype=np.uint8)
                first = word()
                t.extend(b"\0" * 4 * (words - 1))
                self._holes.append(("choice", (first, words,
                                               table.view(np.uint32).reshape(-1, words))))
            else:
                raise TypeError(f"not a template part: {part!r}")
        align()
        self.width = len(t)
        self._row = np.frombuffer(bytes(t), dtype=np.uint8)
        self._buf: np.ndarray | None = None

    def render(self, *columns: np.ndarray) -> Iterator[bytes]:
        """Rows for the given columns (one per hole, equal lengths), in chunks of bytes."""
        if len(columns) != len(self._holes):
            raise ValueError(f"{len(self._holes)} columns expected, got {len(columns)}")
        n = len(columns[0]) if columns else 0
        for (kind, spec), col in zip(self._holes, columns, strict=True):
            if kind in ("int", "micros"):
                top = max_abs(col) // (1000 if kind == "micros" else 1)
                if top >= 10 ** (4 * spec[1]):
                    raise ValueError(f"{top} does not fit a hole of {4 * spec[1]} digits")
        if self._buf is None or len(self._buf) < min(self.chunk, n):
            self._buf = np.tile(self._row, (max(1, min(self.chunk, n)), 1))
        buf = self._buf
        words = buf.view(np.uint32)
        for start in range(0, n, len(buf)):
            stop = min(n, start + len(buf))
            m = stop - start
            for (kind, spec), col in zip(self._holes, columns, strict=True):
                _fill(kind, spec, col[start:stop], buf[:m], words[:m])
            flat = buf[:m].reshape(-1)
            yield flat[flat != 0].tobytes()


def _fill(kind: str, spec: tuple, v, buf: np.ndarray, words: np.ndarray) -> None:
    if kind == "int":
        first, g, sign, null = spec
        if null is not None:
            v = np.asarray(v, dtype=np.float64)
            missing = ~np.isfinite(v)
            v = np.where(missing, 0, v)
        words[:, first : first + g] = digit_groups(v, g)
        if sign is not None:
            buf[:, sign] = (np.asarray(v) < 0) * np.uint8(ord("-"))
        if null is not None:
            words[:, null] = missing * _NULL
            if missing.any():
                words[missing, first : first + g] = 0
    elif kind == "micros":
        first, g = spec
        whole = np.floor_divide(np.asarray(v, dtype=np.int64), 1000)
        frac = np.asarray(v, dtype=np.int64) - whole * 1000
        words[:, first : first + g] = digit_groups(whole, g)
        words[:, first + g] = _FRACTION[frac]
    elif kind == "float":
        null, sign, lead, dot, frac, e, esign, exp = spec
        x = np.asarray(v, dtype=np.float64)
        ok = np.isfinite(x)
        a = np.where(ok, np.abs(x), 0.0)
        a[a < 1e-300] = 0.0  # subnormals would overflow 10**-exponent; they print as 0
        expo = np.floor(np.log10(np.where(a > 0, a, 1.0)))
        mant = np.round(a / 10.0**expo * 1e8)
        over = mant >= 1e9  # 9.999999999 rounds up to 10
        mant = np.where(over, np.round(mant / 10), mant)
        expo += over
        head = np.floor(mant / 1e8)
        words[:, lead] = _FIRST[10_000 + head.astype(np.int32)]
        words[:, frac : frac + 2] = digit_groups(mant - head * 1e8 + 1e8, 3)[:, 1:]
        words[:, exp] = _FIRST[10_000 + np.abs(expo).astype(np.int32)]
        buf[:, sign] = (x < 0) * np.uint8(ord("-"))
        buf[:, esign] = np.where(expo < 0, np.uint8(ord("-")), np.uint8(ord("+")))
        buf[:, dot] = np.uint8(ord("."))
        buf[:, e] = np.uint8(ord("e"))
        words[:, null] = ~ok * _NULL
        if not ok.all():
            bad = ~ok
            words[bad, lead] = 0
            words[bad, frac : frac + 2] = 0
            words[bad, exp] = 0
            buf[bad, sign] = buf[bad, dot] = buf[bad, e] = buf[bad, esign] = 0
    else:
        first, nwords, table = spec
        words[:, first : first + nwords] = table[np.asarray(v, dtype=np.intp)]


def join_rows(template: RowTemplate, *columns: np.ndarray) -> bytes:
    """All rows at once (small tables, tests)."""
    return b"".join(template.render(*columns))
