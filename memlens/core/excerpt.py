"""What memlens echoes of outside text (a file's content, a user's exception): a short,
one-line excerpt, never the whole of it, and never an error of its own."""

from __future__ import annotations

import re

EXCERPT_CHARS = 200  # an echoed value or message is cut to this many characters
ERROR_LINES = 3  # lines kept of a user's exception message


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """`value` as text (str() of an exception, repr() of anything else), on one line and
    cut to `limit` characters with the count of what was left out. A __str__ or __repr__
    that raises gives the type's name instead."""
    try:
        text = str(value) if isinstance(value, BaseException | str) else repr(value)
    except RecursionError:
        return f"<{type(value).__name__}: nested too deeply to show>"
    except Exception:  # the user's own __str__ broke: say so, go on
        return f"<{type(value).__name__}: its message cannot be shown>"
    text = text.replace("\r", " ").replace("\n", " ")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def safe_str(exc: BaseException) -> str:
    """str(exc), whole, or a note where the exception's own __str__ raises."""
    try:
        return str(exc)
    except RecursionError:
        return "<its message is nested too deeply to show>"
    except Exception:  # the user's own __str__ broke
        return f"<its message cannot be shown: {type(exc).__name__}.__str__ raised>"


def error_message(exc: BaseException, limit: int = EXCERPT_CHARS * 2) -> str:
    """A user's exception message: its first ERROR_LINES lines joined, cut to `limit`."""
    text = safe_str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    more = len(lines) > ERROR_LINES
    return excerpt(" / ".join(lines[:ERROR_LINES]) + (" / …" if more else ""), limit)


# Characters a terminal acts on instead of showing: C0 and C1 controls (ESC starts the
# sequences that move the cursor, clear the screen or retitle the window), DEL, the bidi
# overrides that reorder what is shown, and lone surrogates (which no encoding can write).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                          "\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` as a terminal may show it: every control character and lone surrogate
    written as its escape (ESC as \\x1b), so text read from a file can only be read, never
    act on the terminal. Lines become one: a newline is written as \\n."""
    return _UNPRINTABLE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
