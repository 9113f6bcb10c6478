"""Topic matching for subscriptions and SOW queries: exact names and regular expressions.

AMPS treats a topic given to ``subscribe``/``sow``/``sow_delete`` as a regular expression
when it contains a regex character (amps-semantics.md §3). The full trigger set is
unconfirmed; this module uses any of ``. ^ $ * + ? ( ) [ ] { } | \\``. A regex topic is
searched (unanchored, like ``LIKE``): ``ORDERS`` as a regex would also match ``X_ORDERS_Y``;
anchor with ``^...$`` for an exact match. Patterns are compiled by
:func:`~ampsclient_server_stub.regexes.compile_regex`, so matching takes bounded time.

Publishing always names one literal topic; only subscriptions and queries use patterns.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from ..errors import OptionError
from ..regexes import RegexError, SafeRegex, compile_regex

__all__ = ["REGEX_CHARS", "TopicError", "TopicMatcher", "compile_topic", "is_regex_topic"]

REGEX_CHARS: Final = frozenset(".^$*+?()[]{}|\\")
"""Characters that make a topic a regular expression."""

_REGEX_RE: Final = re.compile(r"[.^$*+?()\[\]{}|\\]")


class TopicError(OptionError):
    """A regex topic that does not compile (AMPS reason ``bad regex topic``)."""

    reason: Final = "bad regex topic"


def is_regex_topic(topic: str) -> bool:
    """Whether ``topic`` contains a regex character and so is matched as a pattern."""
    return _REGEX_RE.search(topic) is not None


class TopicMatcher:
    """A compiled subscription topic: :meth:`matches` tells whether a published topic fits.

    Attributes:
        topic: the topic text as given by the client.
        pattern: the compiled regex, or ``None`` for an exact (literal) topic.
    """

    __slots__ = ("pattern", "topic")

    def __init__(self, topic: str, pattern: SafeRegex | None) -> None:
        self.topic: Final = topic
        self.pattern: Final = pattern

    @property
    def is_regex(self) -> bool:
        """True when the topic is a pattern rather than a literal name."""
        return self.pattern is not None

    def matches(self, topic: str) -> bool:
        """Whether the literal ``topic`` is selected by this matcher."""
        pattern = self.pattern
        if pattern is None:
            return topic == self.topic
        return pattern.test(topic)

    def __repr__(self) -> str:
        kind = "regex" if self.pattern is not None else "exact"
        return f"TopicMatcher({self.topic!r}, {kind})"


@lru_cache(maxsize=4096)
def compile_topic(topic: str) -> TopicMatcher:
    """Compile a subscription/query topic (cached).

    Raises:
        TopicError: the topic is a regex and does not compile.
    """
    if not is_regex_topic(topic):
        return TopicMatcher(topic, None)
    try:
        pattern = compile_regex(topic)
    except RegexError as exc:
        raise TopicError(f"bad regex topic {topic!r}: {exc}") from None
    return TopicMatcher(topic, pattern)
