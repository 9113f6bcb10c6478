"""Regular expressions from clients and configuration, matched in bounded time.

AMPS matches regex topics and ``LIKE`` patterns with PCRE (Perl syntax; AMPS user guide,
"Regular Expressions" and "LIKE Operator": https://docs.crankuptheamps.com/amps-user-guide/
amps-expressions/regular-expressions). Python's backtracking :mod:`re` takes exponential time on
patterns such as ``^(a+)+$``: one hostile subscription plus one publish would hold the event loop
for ever (issue 31). Every client- or configuration-supplied pattern is therefore compiled here,
by :func:`compile_regex`, and nowhere else:

* **RE2** (the ``google-re2`` package) runs almost every pattern: its time is linear in the text,
  whatever the pattern. RE2 accepts Perl's syntax except the constructs that need backtracking.
* Patterns that use such a construct and that AMPS documents (a backreference such as
  ``(.)\\1``, the like-operator page's own example; lookahead/lookbehind ``(?=`` ``(?!``
  ``(?<=`` ``(?<!``; atomic groups ``(?>``; possessive ``a++``; ``\\Z``, ``\\K``, ``(?x)``,
  conditionals...) run on the backtracking ``regex`` package with a **per-evaluation time
  limit** of :data:`EVALUATION_LIMIT` seconds. An evaluation that runs out of time counts as
  *no match* and is logged; after :data:`MAX_TIMEOUTS` such evaluations the pattern is
  disabled (it never matches again) and that is logged once. Such a pattern's counted
  repetitions may multiply to at most :data:`MAX_REPEAT_PRODUCT` (the backtracking engine's
  compile time grows with them).
* Anything else that does not compile is refused with a :class:`RegexError` naming the problem
  (the filter's ``bad filter``, the topic's ``bad regex topic``).

Known differences from PCRE, all in RE2's favour of predictability: ``$`` outside ``(?m)``
matches only at the very end (PCRE also matches before a final newline; use ``\\n?$``);
``\\w \\d \\s \\b`` are ASCII (as in AMPS, which is "not unicode-aware"), while ``.`` and
``(?i)`` work on Unicode characters rather than bytes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, Final

import re2
import regex

from .errors import OptionError

__all__ = [
    "EVALUATION_LIMIT",
    "MAX_REPEAT_PRODUCT",
    "MAX_TIMEOUTS",
    "RegexError",
    "SafeRegex",
    "compile_regex",
]

_log = logging.getLogger(__name__)

EVALUATION_LIMIT: Final = 0.005
"""Seconds one evaluation of a backtracking-only pattern may run before it counts as no match."""
MAX_TIMEOUTS: Final = 3
"""Evaluations that may run out of time before a backtracking-only pattern is disabled."""
MAX_REPEAT_PRODUCT: Final = 1000
"""Largest product of the counted repetitions (``{n,m}``) of a backtracking-only pattern."""
MAX_PATTERN_LENGTH: Final = 8192
"""Longest pattern accepted, in characters."""

_CACHE_SIZE: Final = 1024
"""Results remembered per pattern (values such as symbols and topic names repeat)."""
_CACHED_LENGTH: Final = 256
"""Longest value whose result is remembered."""

_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False  # errors are raised (and reported once by the caller)
_RE2_OPTIONS.never_capture = True  # only "is there a match" is ever asked
_UNANCHORED: Final = re2._re2.RE2.Anchor.UNANCHORED
_NO_MATCH: Final = -1

# RE2 parse errors that mean "a Perl construct RE2 does not implement" rather than "broken"
_BACKTRACKING_ONLY: Final = (
    "invalid escape sequence",
    "invalid perl operator",
    "bad repetition operator",  # possessive quantifiers: a++ a*+ a?+ a{n}+
)
_COUNTED: Final = re.compile(r"\\.|\{(\d+)(?:,(\d*))?\}")


class RegexError(OptionError):
    """A pattern that cannot be matched safely; ``str(exc)`` names the problem (not the
    pattern: the caller says which one)."""


class SafeRegex:
    """A compiled pattern whose :meth:`test` takes bounded time.

    Attributes:
        pattern: the pattern text as given.
        linear: True when RE2 runs it (time linear in the text), False when it runs on the
            time-limited backtracking engine.
    """

    __slots__ = ("_cache", "_fallback", "_match", "_timeouts", "linear", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern: Final = pattern
        self._timeouts = 0
        self._cache: dict[str, bool] = {}
        self._fallback: regex.Pattern[str] | None = None
        self._match: Callable[[Any, bytes, int, int], list[tuple[int, int]]] | None
        compiled = re2._re2.RE2(pattern.encode("utf-8", "surrogatepass"), _RE2_OPTIONS)
        if compiled.ok():
            self._match = compiled.Match
        else:
            reason = _re2_reason(compiled.error())
            if not reason.startswith(_BACKTRACKING_ONLY):
                raise RegexError(reason)
            self._fallback = _compile_backtracking(pattern, reason)
            self._match = None
        self.linear: Final = self._fallback is None

    def test(self, text: str) -> bool:
        """Whether the pattern occurs anywhere in ``text`` (an unanchored search)."""
        cache = self._cache
        hit = cache.get(text)
        if hit is not None:
            return hit
        match = self._match
        if match is not None:
            data = text.encode("utf-8", "surrogatepass")
            found = bool(match(_UNANCHORED, data, 0, len(data))[0][0] != _NO_MATCH)
        else:
            found = self._bounded(text)
        if len(text) <= _CACHED_LENGTH:
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[text] = found
        return found

    def _bounded(self, text: str) -> bool:
        fallback = self._fallback
        assert fallback is not None
        if self._timeouts >= MAX_TIMEOUTS:
            return False
        try:
            return fallback.search(text, timeout=EVALUATION_LIMIT) is not None
        except TimeoutError:
            self._timeouts += 1
            if self._timeouts >= MAX_TIMEOUTS:
                _log.warning(
                    "regular expression %r ran out of its %.0f ms budget %d times: "
                    "disabled, it matches nothing from now on",
                    self.pattern,
                    EVALUATION_LIMIT * 1000,
                    self._timeouts,
                )
            else:
                _log.warning(
                    "regular expression %r ran out of its %.0f ms budget on a %d-character "
                    "value: counted as no match",
                    self.pattern,
                    EVALUATION_LIMIT * 1000,
                    len(text),
                )
            return False

    def __repr__(self) -> str:
        return f"SafeRegex({self.pattern!r}, {'re2' if self.linear else 'bounded'})"


def _re2_reason(error: bytes | str) -> str:
    return error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)


def _compile_backtracking(pattern: str, construct: str) -> regex.Pattern[str]:
    product = 1
    for m in _COUNTED.finditer(pattern):
        if m.group(1) is not None:
            upper = m.group(2)
            product *= max(int(m.group(1)), int(upper) if upper else 0, 1)
    if product > MAX_REPEAT_PRODUCT:
        raise RegexError(
            f"{construct}: a pattern that needs the time-limited backtracking engine may "
            f"have counted repetitions that multiply to at most {MAX_REPEAT_PRODUCT}, "
            f"not {product}"
        )
    try:
        return regex.compile(pattern, regex.ASCII)
    except (regex.error, RecursionError, OverflowError, ValueError) as exc:
        raise RegexError(f"{construct} (unsupported: {exc})") from None


def compile_regex(pattern: str) -> SafeRegex:
    """Compile a client- or configuration-supplied regular expression (AMPS' PCRE syntax).

    Raises:
        RegexError: the pattern does not compile, is longer than :data:`MAX_PATTERN_LENGTH`,
            or needs the backtracking engine and is too large for it; the message names why.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise RegexError(f"{len(pattern)} characters (at most {MAX_PATTERN_LENGTH})")
    return SafeRegex(pattern)
