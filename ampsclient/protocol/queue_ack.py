"""The application's side of a queue acknowledgement: what :meth:`Message.ack` returns and
:meth:`Message.processing`, the context manager that acks on success and cancels on error.

Both only hand the ack to the client that delivered the message (its batch, see
:mod:`ampsclient.acks`); nothing here does I/O::

    async for message in await client.subscribe("orders", max_backlog=10):
        async with message.processing():
            await handle(message)        # returns: acked; raises: cancelled (redelivered)
"""

from __future__ import annotations

from collections.abc import Generator
from types import TracebackType
from typing import Generic, Protocol, TypeVar

__all__ = ["AckHandedOver", "AckSink", "Ackable", "Processing"]


class AckSink(Protocol):
    """The client side that :class:`Processing` reports to (``ampsclient.acks.QueueAcks``)."""

    def handed_out(self, topic: str, bookmark: str) -> None:
        """A delivery of ``bookmark`` reaches the application (it is not settled yet)."""

    def is_settled(self, topic: str, bookmark: str) -> bool:
        """Whether this delivery was already acked or cancelled by the application."""
        ...


class Ackable(Protocol):
    """What :class:`Processing` needs of a message (:class:`~ampsclient.Message` is one)."""

    @property
    def topic(self) -> str | None: ...

    @property
    def bookmark(self) -> str | None: ...

    def ack(self, options: str | None = None) -> AckHandedOver: ...


_M = TypeVar("_M", bound=Ackable)


class AckHandedOver:
    """What :meth:`Message.ack` returns: the ack is already handed to the client (sent, or
    in its batch, sent when the batch fills or the ack timeout passes). Awaiting it is
    optional and returns at once, so ``message.ack()`` and ``await message.ack()`` are the
    same."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # a generator that finishes at once

    def __repr__(self) -> str:
        return "AckHandedOver()"


HANDED_OVER = AckHandedOver()


class Processing(Generic[_M]):
    """``with message.processing():`` / ``async with message.processing():``.

    On a normal exit the message is acked; when the block raises it is cancelled
    (``"o":"cancel"``: returned to the queue for redelivery) and the exception propagates.
    If the block acked or cancelled the message itself, nothing more is sent. With
    auto-ack on a stream, the stream does not ack it again.
    """

    __slots__ = ("_message", "_sink")

    def __init__(self, message: _M, sink: AckSink | None) -> None:
        self._message = message
        self._sink = sink  # the delivering client's, or None for a message built here

    def __enter__(self) -> _M:
        m = self._message
        sink = self._sink
        topic, bookmark = m.topic, m.bookmark
        if sink is not None and topic and bookmark:
            sink.handed_out(topic, bookmark)
        return m

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        m = self._message
        sink = self._sink
        topic, bookmark = m.topic, m.bookmark
        if sink is not None and topic and bookmark and sink.is_settled(topic, bookmark):
            return  # the block acked or cancelled it itself
        m.ack("cancel" if exc_type is not None else None)

    async def __aenter__(self) -> _M:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
