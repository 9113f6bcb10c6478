"""Bookmarks: parse, build and validate every bookmark form AMPS understands.

Sources: ``shared/protocol.md`` §8 and the AMPS transaction-log chapter (seed 000). The forms are:

=================================  =============================================================
``0``                              EPOCH: replay the whole journal, then go live.
``0|1|``                           NOW: no replay, live messages only.
``recent``                         MOST_RECENT: resolved by the client's bookmark store into a
                                   real bookmark (or EPOCH). It is never sent, so
                                   :func:`parse_bookmark` rejects it.
``<publisherId>|<sequence>|``      A bookmark id: two unsigned 64-bit decimal integers, each
                                   followed by ``|`` (the trailing pipe is required).
``a|1|,b|5|``                      A comma list of ids and/or timestamps; replay starts at the
                                   oldest of them.
``YYYYmmddTHHMMSS[.ffffff][Z]``    A timestamp, always UTC (``Z`` is optional; only a literal
                                   ``Z`` is accepted as a zone).
``[start:end]`` ``(start:end)``    A range: ``[``/``]`` include the bound, ``(``/``)`` exclude
``[start:end)`` ``(start:end]``    it. Each bound is an id, a timestamp or a comma list.
                                   ``end`` may be empty (open-ended).
=================================  =============================================================

Two readings go beyond the seed, which defines range bounds as "timestamps ... or literal bookmarks"
(and lists of them) and never shows an empty end: this module also accepts EPOCH and NOW as range
bounds and an empty end (``[a|1|:)``), because both are unambiguous and the API models them. EPOCH
and NOW are *not* accepted inside a comma list.

Everything here is pure computation: no I/O, no clocks other than what the caller passes in.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Final, TypeAlias, final

from ampsclient.exceptions import InvalidBookmarkError

__all__ = [
    "EPOCH",
    "MOST_RECENT",
    "NOW",
    "Bookmark",
    "BookmarkId",
    "BookmarkList",
    "BookmarkRange",
    "Bookmarks",
    "Epoch",
    "Now",
    "Point",
    "Timestamp",
    "bookmark_list",
    "format_timestamp",
    "parse_bookmark",
    "publisher_id_for",
    "range_bookmark",
    "timestamp_bookmark",
]

EPOCH: Final = "0"
"""Replay the whole transaction log, then continue with live messages."""
NOW: Final = "0|1|"
"""Skip replay: deliver only messages recorded from now on."""
MOST_RECENT: Final = "recent"
"""Client-side only: the bookmark store substitutes its most recent bookmark (or EPOCH)."""

_REASON: Final = "invalid bookmark"
_UINT64_MAX: Final = 2**64 - 1
_ID_RE: Final = re.compile(r"([0-9]{1,20})\|([0-9]{1,20})\|")
_TS_RE: Final = re.compile(
    r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})(?:\.([0-9]{1,9}))?(Z?)"
)
_RANGE_OPEN: Final = "[("
_RANGE_CLOSE: Final = "])"
_MAX_ECHO: Final = 80


class Bookmarks:
    """The special bookmark values, spelt like the official client's ``Client.Bookmarks``."""

    __slots__ = ()

    EPOCH: Final = EPOCH
    NOW: Final = NOW
    MOST_RECENT: Final = MOST_RECENT


def _invalid(detail: str, text: object) -> InvalidBookmarkError:
    shown = repr(text)
    if len(shown) > _MAX_ECHO:
        shown = shown[: _MAX_ECHO - 3] + "..."
    return InvalidBookmarkError(f"invalid bookmark: {detail}: {shown}", reason=_REASON)


@final
class Epoch:
    """The EPOCH point (``"0"``): the start of the transaction log. A singleton."""

    __slots__ = ()
    _instance: ClassVar[Epoch | None] = None

    def __new__(cls) -> Epoch:
        """Return the one instance."""
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __str__(self) -> str:
        """The wire form, ``"0"``."""
        return EPOCH

    def __repr__(self) -> str:
        """``Epoch()``."""
        return "Epoch()"

    def __reduce__(self) -> tuple[type[Epoch], tuple[()]]:
        """Keep the singleton through pickle and copy."""
        return (Epoch, ())


@final
class Now:
    """The NOW point (``"0|1|"``): the end of the transaction log. A singleton."""

    __slots__ = ()
    _instance: ClassVar[Now | None] = None

    def __new__(cls) -> Now:
        """Return the one instance."""
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __str__(self) -> str:
        """The wire form, ``"0|1|"``."""
        return NOW

    def __repr__(self) -> str:
        """``Now()``."""
        return "Now()"

    def __reduce__(self) -> tuple[type[Now], tuple[()]]:
        """Keep the singleton through pickle and copy."""
        return (Now, ())


@dataclass(frozen=True, slots=True, order=True)
class BookmarkId:
    """A journal position: ``<publisher_id>|<sequence>|``.

    Ordering compares ``(publisher_id, sequence)``; only sequences of the *same* publisher say
    anything about journal order. ``0|1|`` is not a valid id: that text is NOW.

    Attributes:
        publisher_id: the publisher's id (a hash of its client name), an unsigned 64-bit integer.
        sequence: the publisher's sequence number, an unsigned 64-bit integer.
    """

    publisher_id: int
    sequence: int

    def __post_init__(self) -> None:
        """Reject values that do not fit an unsigned 64-bit integer.

        Raises:
            InvalidBookmarkError: a field is not an int in ``0 .. 2**64 - 1``, or the id is
                ``0|1|``, which is NOW (use :class:`Now`).
        """
        for name in ("publisher_id", "sequence"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise _invalid(f"{name} must be an int", value)
            if not 0 <= value <= _UINT64_MAX:
                raise _invalid(f"{name} must fit an unsigned 64-bit integer", value)
        if self.publisher_id == 0 and self.sequence == 1:
            raise _invalid("0|1| is NOW, not a bookmark id: use Now()", "0|1|")

    def __str__(self) -> str:
        """The wire form, e.g. ``"10620414156524534001|3836|"``."""
        return f"{self.publisher_id}|{self.sequence}|"


def _to_utc(when: datetime) -> datetime:
    # AMPS timestamps are always UTC, so a naive datetime is read as UTC (not local time).
    if when.tzinfo is None or when.utcoffset() is None:
        return when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


@dataclass(frozen=True, slots=True, order=True)
class Timestamp:
    """A point in time used as a bookmark (replay starts at the closest journal position).

    Attributes:
        when: an aware UTC datetime. A naive datetime passed in is taken to be UTC; an aware one
            in another zone is converted.
    """

    when: datetime

    def __post_init__(self) -> None:
        """Normalise :attr:`when` to an aware UTC datetime.

        Raises:
            InvalidBookmarkError: ``when`` is not a datetime.
        """
        if not isinstance(self.when, datetime):
            raise _invalid("a Timestamp needs a datetime", self.when)
        object.__setattr__(self, "when", _to_utc(self.when))

    def __str__(self) -> str:
        """The canonical form ``YYYYmmddTHHMMSS[.ffffff]Z``."""
        return format_timestamp(self.when)


Point: TypeAlias = Epoch | Now | BookmarkId | Timestamp
"""A single position: EPOCH, NOW, a bookmark id or a timestamp."""


@dataclass(frozen=True, slots=True)
class BookmarkList:
    """A comma list of bookmark ids and timestamps; replay starts at the oldest of them.

    Attributes:
        items: at least one id or timestamp, in the order given. :func:`parse_bookmark` only
            builds lists of two or more (a single item parses as itself).
    """

    items: tuple[BookmarkId | Timestamp, ...]

    def __post_init__(self) -> None:
        """Freeze :attr:`items` into a tuple and check its members.

        Raises:
            InvalidBookmarkError: the list is empty or holds something other than ids/timestamps.
        """
        items = tuple(self.items)
        if not items:
            raise _invalid("a bookmark list needs at least one item", items)
        for item in items:
            if not isinstance(item, BookmarkId | Timestamp):
                raise _invalid("a bookmark list holds only bookmark ids and timestamps", item)
        object.__setattr__(self, "items", items)

    def __str__(self) -> str:
        """The wire form, items joined with ``,``."""
        return ",".join(str(item) for item in self.items)


@dataclass(frozen=True, slots=True)
class BookmarkRange:
    """A replay range ``[start:end)`` and its variants.

    Attributes:
        start: where replay begins.
        start_inclusive: ``[`` (the start bookmark is replayed) rather than ``(``.
        end: where replay stops, or ``None`` for an open end.
        end_inclusive: ``]`` (the end bookmark is replayed) rather than ``)``.
    """

    start: Point | BookmarkList
    start_inclusive: bool
    end: Point | BookmarkList | None
    end_inclusive: bool

    def __post_init__(self) -> None:
        """Check the bound types.

        Raises:
            InvalidBookmarkError: a bound is not a point or a list (or the start is missing).
        """
        if not isinstance(self.start, _BOUND_TYPES):
            raise _invalid("a range start must be a point or a bookmark list", self.start)
        if self.end is not None and not isinstance(self.end, _BOUND_TYPES):
            raise _invalid("a range end must be a point, a bookmark list or None", self.end)

    def __str__(self) -> str:
        """The wire form, e.g. ``"[20200604T000000Z:20200605T000000Z)"``."""
        opener = "[" if self.start_inclusive else "("
        closer = "]" if self.end_inclusive else ")"
        end = "" if self.end is None else str(self.end)
        return f"{opener}{self.start}:{end}{closer}"


_BOUND_TYPES: Final = (Epoch, Now, BookmarkId, Timestamp, BookmarkList)

Bookmark: TypeAlias = Epoch | Now | BookmarkId | Timestamp | BookmarkList | BookmarkRange
"""Anything :func:`parse_bookmark` returns."""


# --------------------------------------------------------------------------------------------
# parsing


def _parse_timestamp(text: str) -> Timestamp | None:
    match = _TS_RE.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or ""
    micro = int(fraction[:6].ljust(6, "0")) if fraction else 0  # beyond microseconds: truncated
    try:
        when = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
    except ValueError as exc:
        raise _invalid(f"bad date or time ({exc})", text) from None
    return Timestamp(when)


def _parse_id(text: str) -> BookmarkId | None:
    match = _ID_RE.fullmatch(text)
    if match is None:
        return None
    publisher, sequence = int(match.group(1)), int(match.group(2))
    if publisher > _UINT64_MAX or sequence > _UINT64_MAX:
        raise _invalid("publisher id and sequence must fit an unsigned 64-bit integer", text)
    return BookmarkId(publisher, sequence)


def _parse_point(text: str, whole: str) -> Point:
    if text == EPOCH:
        return Epoch()
    if text == NOW:
        return Now()
    point: Point | None = _parse_id(text) or _parse_timestamp(text)
    if point is None:
        raise _invalid(_explain(text), whole)
    return point


def _explain(text: str) -> str:
    if not text:
        return "empty bookmark"
    if text == MOST_RECENT:
        return "'recent' (MOST_RECENT) must be resolved by a bookmark store and is never sent"
    if "|" in text and not text.endswith("|"):
        return "a bookmark id needs a trailing '|' (publisherId|sequence|)"
    if "|" in text:
        return "a bookmark id is publisherId|sequence| with two unsigned decimal integers"
    if "T" in text:
        return "a timestamp is YYYYmmddTHHMMSS with optional .ffffff and optional Z"
    return "not EPOCH, NOW, a bookmark id, a timestamp, a list or a range"


def _parse_list(text: str, whole: str) -> BookmarkList:
    items: list[BookmarkId | Timestamp] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise _invalid("empty item in a bookmark list", whole)
        point = _parse_point(part, whole)
        if not isinstance(point, BookmarkId | Timestamp):
            raise _invalid("EPOCH and NOW cannot appear in a bookmark list", whole)
        items.append(point)
    return BookmarkList(tuple(items))


def _parse_simple(text: str, whole: str) -> Point | BookmarkList:
    if "," in text:
        return _parse_list(text, whole)
    return _parse_point(text, whole)


def _parse_range(text: str, whole: str) -> BookmarkRange:
    if len(text) < 2 or text[0] not in _RANGE_OPEN or text[-1] not in _RANGE_CLOSE:
        raise _invalid("unbalanced range brackets (use [ or ( ... ] or ))", whole)
    inner = text[1:-1]
    if any(ch in inner for ch in "[]()"):
        raise _invalid("unbalanced or nested range brackets", whole)
    parts = inner.split(":")
    if len(parts) != 2:
        raise _invalid("a range is <[|(>start:end<]|)> with exactly one ':'", whole)
    start_text, end_text = parts[0].strip(), parts[1].strip()
    if not start_text:
        raise _invalid("a range needs a start", whole)
    start = _parse_simple(start_text, whole)
    end = _parse_simple(end_text, whole) if end_text else None
    return BookmarkRange(
        start=start,
        start_inclusive=text[0] == "[",
        end=end,
        end_inclusive=text[-1] == "]",
    )


def parse_bookmark(text: str) -> Bookmark:
    """Parse a bookmark header value into a structured value.

    Surrounding whitespace, and whitespace around list commas and the range colon, is ignored.

    Args:
        text: the bookmark as sent on the wire (never ``"recent"``, which the client resolves).

    Returns:
        :class:`Epoch`, :class:`Now`, a :class:`BookmarkId`, a :class:`Timestamp`, a
        :class:`BookmarkList` (two or more items) or a :class:`BookmarkRange`. ``str()`` of the
        result is the canonical wire form.

    Raises:
        InvalidBookmarkError: (reason ``"invalid bookmark"``) for anything else, including the
            empty string, ``"recent"``, a missing trailing pipe and impossible dates.
    """
    if not isinstance(text, str):
        raise _invalid("a bookmark must be a str", text)
    stripped = text.strip()
    if not stripped:
        raise _invalid("empty bookmark", text)
    if stripped[0] in _RANGE_OPEN or stripped[-1] in _RANGE_CLOSE:
        return _parse_range(stripped, text)
    if any(ch in stripped for ch in ":[]()"):
        raise _invalid("range syntax outside a range", text)
    return _parse_simple(stripped, text)


# --------------------------------------------------------------------------------------------
# building


def format_timestamp(when: datetime) -> str:
    """Format a datetime as an AMPS timestamp bookmark.

    Args:
        when: the moment; a naive datetime is taken to be UTC, an aware one is converted to UTC.

    Returns:
        ``"YYYYmmddTHHMMSSZ"``, or ``"YYYYmmddTHHMMSS.ffffffZ"`` when there are microseconds.
    """
    utc = _to_utc(when)
    text = (
        f"{utc.year:04d}{utc.month:02d}{utc.day:02d}T{utc.hour:02d}{utc.minute:02d}{utc.second:02d}"
    )
    if utc.microsecond:
        text += f".{utc.microsecond:06d}"
    return text + "Z"


def timestamp_bookmark(when: datetime | float) -> str:
    """Build a timestamp bookmark.

    Args:
        when: a datetime (naive means UTC) or POSIX seconds since 1970-01-01 UTC.

    Returns:
        The canonical timestamp form, as :func:`format_timestamp`.

    Raises:
        InvalidBookmarkError: the number is not a finite time a datetime can hold.
    """
    if isinstance(when, datetime):
        return format_timestamp(when)
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise _invalid("a timestamp needs a datetime or POSIX seconds", when)
    try:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=when)
    except (OverflowError, ValueError) as exc:
        raise _invalid(f"time out of range ({exc})", when) from None
    return format_timestamp(moment)


_RangeBound: TypeAlias = str | datetime | Epoch | Now | BookmarkId | Timestamp | BookmarkList


def _bound(value: _RangeBound, what: str) -> Point | BookmarkList:
    if isinstance(value, datetime):
        return Timestamp(value)
    if isinstance(value, _BOUND_TYPES):
        return value
    if not isinstance(value, str):
        raise _invalid(f"a range {what} must be a str or a datetime", value)
    parsed = parse_bookmark(value)
    if isinstance(parsed, BookmarkRange):
        raise _invalid(f"a range {what} cannot itself be a range", value)
    return parsed


def range_bookmark(
    start: _RangeBound,
    end: _RangeBound | None = None,
    *,
    start_inclusive: bool = True,
    end_inclusive: bool = False,
) -> str:
    """Build a replay range such as ``[20200604T000000Z:20200605T000000Z)``.

    Args:
        start: where replay begins: a bookmark id, a timestamp string, a comma list, EPOCH/NOW,
            a datetime (naive means UTC) or an already parsed value.
        end: where replay stops (same forms), or ``None`` for an open end.
        start_inclusive: replay the start bookmark itself (``[``) rather than begin after it
            (``(``).
        end_inclusive: replay the end bookmark itself (``]``) rather than stop before it (``)``).

    Returns:
        The canonical range string; each bound is re-formatted canonically.

    Raises:
        InvalidBookmarkError: a bound is not a valid bookmark, is a range, or is ``"recent"``.
    """
    return str(
        BookmarkRange(
            start=_bound(start, "start"),
            start_inclusive=bool(start_inclusive),
            end=None if end is None else _bound(end, "end"),
            end_inclusive=bool(end_inclusive),
        )
    )


def bookmark_list(*bookmarks: str) -> str:
    """Join bookmark ids and timestamps into the comma-list form.

    Arguments that are themselves comma lists are flattened; order and duplicates are kept.

    Args:
        *bookmarks: bookmark ids (``"a|1|"``), timestamps, or comma lists of them.

    Returns:
        The canonical list, e.g. ``"1|5|,2|9|"`` (a single item comes back as itself).

    Raises:
        InvalidBookmarkError: no arguments, or an argument that is EPOCH, NOW, ``"recent"``, a
            range or not a bookmark at all.
    """
    items: list[BookmarkId | Timestamp] = []
    for text in bookmarks:
        parsed = parse_bookmark(text)
        if isinstance(parsed, BookmarkList):
            items.extend(parsed.items)
        elif isinstance(parsed, BookmarkId | Timestamp):
            items.append(parsed)
        else:
            raise _invalid("only bookmark ids and timestamps can be listed", text)
    if not items:
        raise _invalid("a bookmark list needs at least one bookmark", bookmarks)
    return str(BookmarkList(tuple(items)))


def publisher_id_for(client_name: str) -> int:
    """A stable unsigned 64-bit publisher id for a client name.

    AMPS uses a hash of the publishing client's name as the first field of its bookmarks. This is
    BLAKE2b with an 8-byte digest over the UTF-8 name, read big-endian: the same value in every
    process and on every platform (unlike :func:`hash`). It is not the real AMPS server's hash.

    Args:
        client_name: the client name given at logon.

    Returns:
        An int in ``0 .. 2**64 - 1``.
    """
    digest = hashlib.blake2b(client_name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")
