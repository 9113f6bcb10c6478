"""When a queued message expires: ``Expiration``, ``ExpirationModel`` and the message's own
expiration (``shared/queues.md`` §2, §8, §11).

A message carries its own expiration when its underlying topic is a SOW topic: the publish's
``e`` header, else the SOW topic's ``Expiration``, stamped on the message when it is
published (journaled with it as ``e``, seconds from the publish). A message of a topic
without a SOW has none. Both intervals are measured from the message's publication (its
transaction-log timestamp), so a restart does not extend them.

``ExpirationModel`` combines the two: ``default`` the message's own when it has one, else
the queue's; ``queue`` always the queue's; ``latest`` the later, ``earliest`` the earlier
of those that are set (an unset one does not take part: with one set, it applies).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..engine.journal import JournalRecord
from ..engine.sow_service import SowService
from .config import QueueConfig

__all__ = ["MessageExpiry", "deadline", "sow_expiry"]


def deadline(config: QueueConfig, published: float, own: float | None) -> float | None:
    """The epoch second a message published at ``published`` expires (``None``: never),
    with ``own`` its own expiration (epoch seconds) or ``None``."""
    queue = None if config.expiration is None else published + config.expiration
    model = config.expiration_model
    if model == "queue" or own is None:
        return queue
    if model == "default" or queue is None:
        return own
    if model == "latest":
        return max(queue, own)
    return min(queue, own)


class MessageExpiry:
    """A message's own expiration, looked up in the SOW topic it was published to.

    Args:
        record: ``(message type, topic, SOW key)`` -> the SOW record's expiration (epoch
            seconds) or ``None`` (no such SOW topic or record, or no expiration).
        default: ``(message type, topic)`` -> the SOW topic's ``Expiration`` in seconds, or
            ``None`` (not a SOW topic, or none configured).
    """

    def __init__(
        self,
        *,
        record: Callable[[str, str, str], float | None],
        default: Callable[[str, str], float | None],
    ) -> None:
        self._record = record
        self._default = default

    def live(self, mt: str, topic: str, key: str | None) -> float | None:
        """The expiration of a message just published to ``topic`` (a SOW record ``key``)."""
        if key is None:
            return None
        return self._record(mt, topic, key)

    def recorded(self, mt: str, record: JournalRecord) -> float | None:
        """The expiration of a journaled message (recovery): its ``e`` field, else its SOW
        topic's ``Expiration``, from its publication."""
        published = record.timestamp / 1e6
        seconds = _seconds(record.fields)
        if seconds is None:
            seconds = self._default(mt, record.topic)
        return None if seconds is None else published + seconds


def _seconds(fields: Mapping[str, str | int]) -> float | None:
    e = fields.get("e")
    if e is None or e == "":
        return None
    try:
        seconds = float(e)
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def sow_expiry(sows: SowService) -> MessageExpiry | None:
    """The :class:`MessageExpiry` of a broker's SOW topics (``None``: it has none, so no
    message carries an expiration)."""
    if not sows.topics:
        return None

    def record(mt: str, topic: str, key: str) -> float | None:
        sow = sows.topic(topic, mt)
        found = None if sow is None else sow.get(key)
        return None if found is None else found.expiration

    def default(mt: str, topic: str) -> float | None:
        sow = sows.topic(topic, mt)
        return None if sow is None else sows.expiration(sow, {}, 0.0)

    return MessageExpiry(record=record, default=default)
