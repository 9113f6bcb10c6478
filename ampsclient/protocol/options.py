"""Options strings: the ``o`` header (``shared/protocol.md`` §11, ``amps-semantics.md`` §4.4, §5).

An options string is a comma list of ``name`` or ``name=value`` items, e.g.
``"oof,conflation=1s,select=[-/,+/a]"``. Commas inside ``[...]`` or ``(...)`` belong to the value,
and so do commas and brackets inside quotes *within* those brackets (``projection=[...'a,b'...]``).
Empty items are skipped, so the trailing comma that the official client's constants carry
(``"oof,"``) and a trailing comma on the wire are both harmless.

:class:`Options` mirrors the official ``AMPS.Message.Options``: its constants and builders return
an item **with a trailing comma** (``Options.OOF == "oof,"``, ``Options.TopN(5) == "top_n=5,"``),
exactly as the official client does, so that they can be concatenated
(``Options.OOF + Options.TopN(5)``).

Units (the AMPS server's exact rules are unconfirmed; these are this library's choices):

* Durations (:func:`parse_duration`): a non-negative decimal number followed by ``ns``, ``us``,
  ``ms``, ``s``, ``m``, ``h``, ``d`` or ``w`` (case-insensitive). A bare number is read in
  ``default_unit``, **milliseconds** unless the caller says otherwise. The result is in seconds.
* Rates (:func:`parse_rate`): ``1000`` messages per second, ``500KB`` bytes per second (binary
  multiples: ``K``/``KB`` = 1024, ``M``/``MB``, ``G``/``GB``, ``T``/``TB``; ``B`` = bytes) and
  ``2X``/``.5X`` multiples of the original publish rate (seed 000, "Delivery Rate Control").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Final

from ampsclient.exceptions import InvalidOptionsError

__all__ = [
    "Options",
    "format_options",
    "parse_duration",
    "parse_options",
    "parse_rate",
]

_REASON: Final = "invalid options"
_MAX_ECHO: Final = 80
_OPENERS: Final = {"[": "]", "(": ")"}
_CLOSERS: Final = frozenset("])")
_QUOTES: Final = frozenset("'\"")
_KEY_RE: Final = re.compile(r"[^\s=,\[\]()'\"]+")
_NUMBER: Final = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_DURATION_RE: Final = re.compile(_NUMBER + r"\s*([a-zA-Z]*)")
_RATE_RE: Final = re.compile(_NUMBER + r"\s*([a-zA-Z]*)")
_DURATION_UNITS: Final[Mapping[str, float]] = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_BYTE_UNITS: Final[Mapping[str, int]] = {
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
}


def _invalid(detail: str, text: object) -> InvalidOptionsError:
    shown = repr(text)
    if len(shown) > _MAX_ECHO:
        shown = shown[: _MAX_ECHO - 3] + "..."
    return InvalidOptionsError(f"invalid options: {detail}: {shown}", reason=_REASON)


# --------------------------------------------------------------------------------------------
# options strings


def _split_items(text: str) -> list[str]:
    """Split at top-level commas, checking that brackets balance and quotes close."""
    items: list[str] = []
    stack: list[str] = []
    quote = ""
    start = 0
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif stack and char in _QUOTES:
            quote = char
        elif char in _OPENERS:
            stack.append(_OPENERS[char])
        elif char in _CLOSERS:
            if not stack or stack.pop() != char:
                raise _invalid(f"unbalanced {char!r} at position {index}", text)
        elif char == "," and not stack:
            items.append(text[start:index])
            start = index + 1
    if quote:
        raise _invalid("unterminated quote", text)
    if stack:
        raise _invalid(f"unbalanced brackets: missing {''.join(reversed(stack))!r}", text)
    items.append(text[start:])
    return items


def parse_options(text: str | None) -> dict[str, str]:
    """Parse an options string into a dict.

    Args:
        text: the ``o`` header, e.g. ``"oof,conflation=1s,select=[-/,+/a]"``; ``None`` or ``""``
            mean no options.

    Returns:
        ``{name: value}`` in the order given, ``""`` for a bare flag:
        ``{"oof": "", "conflation": "1s", "select": "[-/,+/a]"}``. Whitespace around items,
        names and values is stripped; empty items are skipped; a repeated name keeps its last
        value.

    Raises:
        InvalidOptionsError: (reason ``"invalid options"``) unbalanced ``[]``/``()``, an
            unterminated quote inside brackets, or an item with an empty or malformed name.
    """
    if text is None:
        return {}
    if not isinstance(text, str):
        raise _invalid("options must be a str", text)
    result: dict[str, str] = {}
    for raw in _split_items(text):
        item = raw.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not _KEY_RE.fullmatch(name):
            raise _invalid(f"bad option name {name!r}", text)
        result[name] = value.strip() if sep else ""
    return result


def _format_value(name: str, value: str | float | None) -> str | None:
    """The text after ``=`` (``None`` for a bare flag)."""
    if value is None or value is True:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise _invalid(f"option {name!r} needs a finite number", value)
        return str(value)
    if not isinstance(value, str):
        raise _invalid(f"option {name!r} has a value of unsupported type", value)
    text = value.strip()
    if not text:
        return None
    if len(_split_items(text)) != 1:
        raise _invalid(f"option {name!r} has a top-level comma in its value", value)
    return text


def format_options(options: Mapping[str, str | int | float | None]) -> str:
    """Format a mapping as an options string (the inverse of :func:`parse_options`).

    Args:
        options: ``{name: value}``; ``None``, ``""`` or ``True`` give a bare flag (``oof``),
            ``False`` leaves the option out, numbers are written with ``str()``.

    Returns:
        The items joined with ``,`` and no trailing comma, e.g. ``"oof,top_n=5"``.

    Raises:
        InvalidOptionsError: a name is empty or malformed, or a value has unbalanced brackets or
            a comma outside brackets (which would split it).
    """
    parts: list[str] = []
    for name, value in options.items():
        if not isinstance(name, str) or not _KEY_RE.fullmatch(name):
            raise _invalid(f"bad option name {name!r}", name)
        if value is False:
            continue
        text = _format_value(name, value)
        parts.append(name if text is None else f"{name}={text}")
    return ",".join(parts)


# --------------------------------------------------------------------------------------------
# durations and rates


def parse_duration(text: str, *, default_unit: str = "ms") -> float:
    """Parse an AMPS time interval into seconds.

    Args:
        text: e.g. ``"10ms"``, ``"1s"``, ``"2m"``, ``"1h"``, ``"1d"``, ``"100us"``, ``"1.5s"``.
        default_unit: the unit of a bare number (``"250"``). Milliseconds by default: the AMPS
            documentation seen so far always writes a unit, so this is a choice, not a fact.

    Returns:
        The duration in seconds (a float, ``>= 0``).

    Raises:
        InvalidOptionsError: (reason ``"invalid options"``) a negative or malformed number or an
            unknown unit.
    """
    if not isinstance(text, str):
        raise _invalid("a duration must be a str", text)
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise _invalid("a duration is a non-negative number and a unit (ns us ms s m h d w)", text)
    unit = (match.group(2) or default_unit).lower()
    scale = _DURATION_UNITS.get(unit)
    if scale is None:
        raise _invalid(f"unknown time unit {unit!r} (ns us ms s m h d w)", text)
    return float(match.group(1)) * scale


def parse_rate(text: str) -> tuple[str, float]:
    """Parse a ``rate=`` value (bookmark replay pacing, seed 000 "Delivery Rate Control").

    Args:
        text: ``"1000"`` (messages per second), ``"500KB"`` (bytes per second) or ``"2X"`` /
            ``".5x"`` (a multiple of the original publish rate).

    Returns:
        ``("msgs", n)``, ``("bytes", n)`` (in bytes; ``K``/``KB`` = 1024) or ``("multiple", f)``.

    Raises:
        InvalidOptionsError: (reason ``"invalid options"``) a malformed, zero or negative rate or
            an unknown suffix.
    """
    if not isinstance(text, str):
        raise _invalid("a rate must be a str", text)
    match = _RATE_RE.fullmatch(text.strip())
    if match is None:
        raise _invalid("a rate is a positive number with an optional B/KB/MB/GB or X suffix", text)
    number = float(match.group(1))
    if number <= 0:
        raise _invalid("a rate must be positive", text)
    unit = match.group(2).lower()
    if not unit:
        return ("msgs", number)
    if unit == "x":
        return ("multiple", number)
    scale = _BYTE_UNITS.get(unit)
    if scale is None:
        raise _invalid(f"unknown rate unit {unit!r} (B KB MB GB TB or X)", text)
    return ("bytes", number * scale)


def _format_duration(value: str | float | timedelta) -> str:
    """A duration argument as AMPS text: strings pass through, numbers are seconds."""
    if isinstance(value, str):
        parse_duration(value)  # validate
        return value.strip()
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise _invalid("a duration must be a str, a number of seconds or a timedelta", value)
    if not math.isfinite(seconds) or seconds < 0:
        raise _invalid("a duration must be finite and non-negative", value)
    for unit, scale in (("s", 1), ("ms", 1_000), ("us", 1_000_000)):
        scaled = seconds * scale
        if scaled == int(scaled):
            return f"{int(scaled)}{unit}"
    return f"{round(seconds * 1_000_000_000)}ns"


def _format_list(value: str | Sequence[str]) -> str:
    """``[a,b]`` from a sequence; a string is bracketed unless it already is."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            return text
        return f"[{text}]"
    return "[" + ",".join(str(item).strip() for item in value) + "]"


def _item(name: str, value: str) -> str:
    text = f"{name}={value}"
    if len(_split_items(text)) != 1:  # also checks brackets and quotes
        raise _invalid(f"{name} value has a comma outside brackets", value)
    return text + ","


def _count(name: str, value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _invalid(f"{name} needs a non-negative int", value)
    return f"{name}={value},"


class Options:
    """Option constants and builders, like the official ``AMPS.Message.Options``.

    Every constant and builder result ends with a comma, as in the official client, so they
    concatenate: ``Options.OOF + Options.TopN(10)`` is ``"oof,top_n=10,"``.
    :func:`parse_options` ignores the trailing comma. snake_case aliases are provided for each
    name (``Options.oof``, ``Options.top_n(10)``).
    """

    __slots__ = ()

    OOF: Final = "oof,"
    Replace: Final = "replace,"
    Pause: Final = "pause,"
    Resume: Final = "resume,"
    Live: Final = "live,"
    NoEmpties: Final = "no_empties,"
    NoSowKey: Final = "no_sowkey,"
    SendKeys: Final = "send_keys,"
    Timestamp: Final = "timestamp,"
    Cancel: Final = "cancel,"
    FullyDurable: Final = "fully_durable,"
    Expire: Final = "expire,"
    BookmarkNotFoundEpoch: Final = "bookmark_not_found=epoch,"
    BookmarkNotFoundNow: Final = "bookmark_not_found=now,"
    BookmarkNotFoundFail: Final = "bookmark_not_found=fail,"

    oof: Final = OOF
    replace: Final = Replace
    pause: Final = Pause
    resume: Final = Resume
    live: Final = Live
    no_empties: Final = NoEmpties
    no_sowkey: Final = NoSowKey
    send_keys: Final = SendKeys
    timestamp: Final = Timestamp
    cancel: Final = Cancel
    fully_durable: Final = FullyDurable
    expire: Final = Expire
    bookmark_not_found_epoch: Final = BookmarkNotFoundEpoch
    bookmark_not_found_now: Final = BookmarkNotFoundNow
    bookmark_not_found_fail: Final = BookmarkNotFoundFail

    @staticmethod
    def Conflation(interval: str | float | timedelta) -> str:
        """``conflation=<interval>,``.

        Args:
            interval: AMPS text such as ``"1s"`` / ``"250ms"``, or seconds / a timedelta
                (written as ``s``, ``ms``, ``us`` or ``ns``, whichever is exact).
        """
        return _item("conflation", _format_duration(interval))

    @staticmethod
    def ConflationKey(key: str | Sequence[str]) -> str:
        """``conflation_key=<key>,``.

        Args:
            key: a field (``"/id"``), a bracketed list (``"[/a,/b]"``), a comma-separated string
                (``"/a,/b"``, bracketed here so that it stays one option) or a sequence of fields.
        """
        if isinstance(key, str):
            text = key.strip()
            if len(_split_items(text)) > 1:
                text = f"[{text}]"
        else:
            text = _format_list(key)
        return _item("conflation_key", text)

    @staticmethod
    def TopN(n: int) -> str:
        """``top_n=<n>,``: at most ``n`` records."""
        return _count("top_n", n)

    @staticmethod
    def SkipN(n: int) -> str:
        """``skip_n=<n>,``: skip the first ``n`` records (with top_n, for paging)."""
        return _count("skip_n", n)

    @staticmethod
    def MaxBacklog(n: int) -> str:
        """``max_backlog=<n>,``: queue messages leased at once."""
        return _count("max_backlog", n)

    @staticmethod
    def Rate(rate: str | int) -> str:
        """``rate=<rate>,``: ``1000`` msgs/s, ``"500KB"`` bytes/s or ``"2X"`` (see parse_rate)."""
        if isinstance(rate, bool) or not isinstance(rate, str | int):
            raise _invalid("a rate must be a str or an int", rate)
        text = str(rate).strip()
        parse_rate(text)  # validate
        return _item("rate", text)

    @staticmethod
    def RateMaxGap(gap: str | float | timedelta) -> str:
        """``rate_max_gap=<interval>,``: the longest paced-replay wait (as Conflation)."""
        return _item("rate_max_gap", _format_duration(gap))

    @staticmethod
    def Projection(fields: str | Sequence[str]) -> str:
        """``projection=[...],`` for aggregated subscriptions."""
        return _item("projection", _format_list(fields))

    @staticmethod
    def Grouping(fields: str | Sequence[str]) -> str:
        """``grouping=[...],`` for aggregated subscriptions."""
        return _item("grouping", _format_list(fields))

    @staticmethod
    def Select(fields: str | Sequence[str]) -> str:
        """``select=[...],``, e.g. ``Options.Select(["-/", "+/id"]) == "select=[-/,+/id],"``."""
        return _item("select", _format_list(fields))

    @staticmethod
    def BookmarkNotFound(action: str) -> str:
        """``bookmark_not_found=<now|epoch|fail>,``."""
        text = action.strip().lower() if isinstance(action, str) else ""
        if text not in ("now", "epoch", "fail"):
            raise _invalid("bookmark_not_found is now, epoch or fail", action)
        return f"bookmark_not_found={text},"

    @staticmethod
    def AckConflationInterval(interval: str | float | timedelta) -> str:
        """``ack_conflation=<interval>,`` (a logon option)."""
        return _item("ack_conflation", _format_duration(interval))

    conflation = Conflation
    conflation_key = ConflationKey
    top_n = TopN
    skip_n = SkipN
    max_backlog = MaxBacklog
    rate = Rate
    rate_max_gap = RateMaxGap
    projection = Projection
    grouping = Grouping
    select = Select
    bookmark_not_found = BookmarkNotFound
    ack_conflation_interval = AckConflationInterval
