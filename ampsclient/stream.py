"""Message streams: the iterator form of subscriptions and queries.

One :class:`MessageStream` serves both colours: ``for message in stream`` blocks the calling
thread (the sync facade), ``async for message in stream`` awaits on the client's loop. Messages
are put by the client's receive path on the loop thread.

A stream ends when its command completes (a ``sow`` query after ``group_end`` and the
``completed`` ack; a ``sow_delete`` after its ``stats`` ack), when it is closed (which
unsubscribes), or when the connection drops (iteration then raises
:class:`~ampsclient.exceptions.DisconnectedError`, unless the stream belongs to an HA client
that re-places it).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Protocol

from .exceptions import AMPSError
from .protocol.message import Message

__all__ = ["MessageStream", "TimeoutMessageStream"]

_END = object()


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class TimeoutMessageStream(Protocol):
    """What :meth:`MessageStream.timeout` returns, for type checkers: the same stream, whose
    iteration yields ``None`` when nothing arrived in time (the official behaviour)."""

    def __iter__(self) -> Iterator[Message | None]: ...

    def __next__(self) -> Message | None: ...

    def __aiter__(self) -> AsyncIterator[Message | None]: ...

    async def aclose(self) -> None: ...

    def max_depth(self, depth: int) -> TimeoutMessageStream: ...

    def close(self) -> None: ...

    def __enter__(self) -> TimeoutMessageStream: ...

    def __exit__(self, *exc: object) -> None: ...


class MessageStream(Iterator[Message], AsyncIterator[Message]):
    """A queue of messages for one command, iterable synchronously or asynchronously.

    Args:
        loop: the client's event loop (where messages are put).
        on_close: called once when the application closes the stream early.
        max_depth: when more than this many messages wait, ``pause``/``resume`` callbacks
            push back on the socket (0 = unbounded).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        on_close: Callable[[MessageStream], None] | None = None,
        max_depth: int = 0,
        pause: Callable[[], None] | None = None,
        resume: Callable[[], None] | None = None,
    ) -> None:
        self._loop = loop
        self._items: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: BaseException | None = None
        self._closed = False
        self._on_close = on_close
        self._timeout: float | None = None
        self._max_depth = max_depth
        self._pause = pause
        self._resume = resume
        self._paused = False
        self.command_id: str | None = None
        """The command id of the command this stream belongs to."""
        self.sub_id: str | None = None
        """The subscription id, for subscriptions."""
        self.query_id: str | None = None
        """The query id, for queries."""
        self._settle: Callable[[Message], None] | None = None
        self._hand_out: Callable[[Message], None] | None = None
        self._idle: Callable[[Message], None] | None = None
        self._idle_seconds: Callable[[], float] | None = None
        self._held: Message | None = None
        self._held_at = 0.0
        self._idle_timer = False
        self._conflate = False

    # -- producer side (loop thread) ------------------------------------------------------

    def _put(self, message: Message) -> None:
        with self._cond:
            # under the lock with _finish: a stream closed by another thread while this
            # message arrives is either seen ended here, or sees the pause in _release
            if self._ended:
                return
            if self._conflate and self._replace(message):
                return
            self._items.append(message)
            self._cond.notify()
            pause = (
                bool(self._max_depth) and not self._paused and len(self._items) >= self._max_depth
            )
            if pause:
                self._paused = True
        self._wake()
        if pause and self._pause is not None:
            self._pause()  # a resume _release schedules from now on runs after this

    def _finish(self, error: BaseException | None = None) -> None:
        with self._cond:
            if self._ended:
                return
            self._ended = True
            self._error = error
            self._items.append(_END)
            self._cond.notify_all()
            self._release()
        self._wake()

    put = _put
    """Add a message (the client's receive path, on the loop thread)."""

    finish = _finish
    """End the stream: iteration stops, or raises ``error`` when one is given."""

    def _wake(self) -> None:
        w = self._waiter
        if w is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            if not w.done():
                w.set_result(None)
        else:
            self._loop.call_soon_threadsafe(_set_done, w)

    def _release(self) -> None:
        """Resume the socket if this stream paused it (the caller holds ``_cond``)."""
        if self._paused:
            self._paused = False
            if self._resume is not None:
                try:
                    self._loop.call_soon_threadsafe(self._resume)
                except RuntimeError:  # loop closed
                    pass

    def _taken(self) -> None:
        if self._paused and len(self._items) <= self._max_depth // 2:
            self._release()

    # -- consumer side -----------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Messages waiting to be read."""
        return sum(1 for m in self._items if m is not _END)

    def get_depth(self) -> int:
        """Official spelling of :attr:`depth`."""
        return self.depth

    def timeout(self, milliseconds: int) -> TimeoutMessageStream:
        """Make ``next()`` yield ``None`` when nothing arrives for this long (official API).

        Returns the stream itself, typed as a :class:`TimeoutMessageStream` (its items are
        ``Message | None``).
        """
        self._timeout = milliseconds / 1000.0 if milliseconds else None
        return self

    def max_depth(self, depth: int) -> MessageStream:
        """Push back on the socket when this many messages wait (official API)."""
        self._max_depth = depth
        return self

    def _settle_held(self) -> None:
        """Auto-ack: the application asks for the next message, so it is done with the one
        it holds; ack that one now, before waiting (with a full backlog the next message
        comes only once this ack is sent)."""
        if self._settle is None:
            return
        with self._cond:
            held, self._held = self._held, None
        if held is not None:
            self._settle(held)

    def _take(self) -> Message:
        item = self._items.popleft()
        if self._settle is not None:
            held, self._held = self._held, (None if item is _END else item)
            if held is not None:
                self._settle(held)  # a held message left by a concurrent reader
            if item is not _END:
                self._hold(item)
        if item is _END:
            self._items.appendleft(_END)
            self._raise_end()
        self._taken()
        return item  # type: ignore[no-any-return]

    def _replace(self, message: Message) -> bool:
        key = message.sow_key
        if not key:
            return False
        items = self._items
        for i in range(len(items) - 1, -1, -1):
            old = items[i]
            if old is not _END and old.sow_key == key:
                items[i] = message
                return True
        return False

    def set_auto_ack(
        self,
        settle: Callable[[Message], None] | None,
        *,
        hand_out: Callable[[Message], None] | None = None,
        idle: Callable[[Message], None] | None = None,
        idle_seconds: Callable[[], float] | None = None,
    ) -> None:
        """Ack each queue message with ``settle(message)`` when the next one is asked for,
        or with ``idle(message)`` when the application has held it for ``idle_seconds()``
        without asking for the next one (so that a quiet stream leaves nothing leased).
        ``hand_out(message)`` is called as each message goes to the application."""
        self._settle = settle
        self._hand_out = hand_out
        self._idle = idle
        self._idle_seconds = idle_seconds

    def _hold(self, message: Message) -> None:
        """``message`` goes to the application (under the lock): start its idle clock."""
        if self._hand_out is not None:
            self._hand_out(message)
        self._held_at = time.monotonic()
        if self._idle is None or self._idle_seconds is None or self._idle_timer:
            return
        delay = self._idle_seconds()
        if delay > 0:
            self._idle_timer = True
            self._schedule_idle(delay)

    def _schedule_idle(self, delay: float) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if running is self._loop:
                self._loop.call_later(delay, self._on_idle)
            else:
                self._loop.call_soon_threadsafe(self._loop.call_later, delay, self._on_idle)
        except RuntimeError:  # loop closed
            self._idle_timer = False

    def _on_idle(self) -> None:
        """The idle clock ran out: ack the held message if it is still held that long."""
        with self._cond:
            self._idle_timer = False
            held = self._held
            if held is None or self._ended or self._idle is None or self._idle_seconds is None:
                return
            delay = self._idle_seconds()
            if delay <= 0:
                return
            left = self._held_at + delay - time.monotonic()
            if left > 0:
                self._idle_timer = True
                self._loop.call_later(left, self._on_idle)
                return
            self._held = None
        self._idle(held)

    def conflate(self) -> MessageStream:
        """Keep only the newest waiting message per SOW key (official API)."""
        self._conflate = True
        return self

    def get_max_depth(self) -> int:
        """The ``max_depth`` (0 = unbounded)."""
        return self._max_depth

    def _raise_end(self) -> None:
        if self._error is not None:
            raise self._error
        raise StopIteration

    def __iter__(self) -> MessageStream:
        return self

    def __next__(self) -> Message:
        self._settle_held()
        with self._cond:
            if not self._items:
                if self._timeout is None:
                    while not self._items:
                        self._cond.wait()
                else:
                    deadline = time.monotonic() + self._timeout
                    while not self._items:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return None  # type: ignore[return-value]  # official behaviour
                        self._cond.wait(left)
            return self._take()

    def get(self, timeout: float | None = None) -> Message | None:
        """Blocking read with a timeout in seconds; ``None`` on timeout; raises at the end."""
        self._settle_held()
        with self._cond:
            if not self._items:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._items:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    self._cond.wait(left)
            try:
                return self._take()
            except StopIteration:
                raise AMPSError("the stream has ended") from None

    def __aiter__(self) -> _AsyncIteration:
        """An ``async for`` over the stream: leaving the loop early (``break``, ``return``,
        an exception) closes the stream (a subscription is unsubscribed), as leaving an async
        generator's loop finalizes it; :meth:`aclose` closes it explicitly."""
        return _AsyncIteration(self)

    async def aclose(self) -> None:
        """Close the stream (a subscription is unsubscribed): the async iterator protocol's
        ``aclose``, as :func:`contextlib.aclosing` calls it."""
        self.close()

    async def __anext__(self) -> Message:
        self._settle_held()
        while True:
            if self._items:
                try:
                    with self._cond:
                        return self._take()
                except StopIteration:
                    raise StopAsyncIteration from None
            self._waiter = self._loop.create_future()
            try:
                if self._items:
                    continue
                if self._timeout is None:
                    await self._waiter
                else:
                    try:
                        await asyncio.wait_for(self._waiter, self._timeout)
                    except TimeoutError:
                        return None  # type: ignore[return-value]
            finally:
                self._waiter = None

    # -- closing -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """``True`` once the stream ended or was closed."""
        return self._ended

    def close(self) -> None:
        """Stop the stream; a subscription is unsubscribed."""
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None and not self._ended:
            self._on_close(self)
        self._finish(None)

    def __enter__(self) -> MessageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MessageStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # dropping an unfinished stream unsubscribes, like the official client
        if not self._ended and not self._closed and self._on_close is not None:
            try:
                self._loop.call_soon_threadsafe(self.close)
            except RuntimeError:
                pass


class _AsyncIteration(AsyncIterator[Message]):
    """One ``async for`` over a :class:`MessageStream`: dropped before the stream ended (the
    loop was left by ``break``, ``return`` or an exception), it closes the stream."""

    __slots__ = ("_stream",)

    def __init__(self, stream: MessageStream) -> None:
        self._stream = stream

    def __aiter__(self) -> _AsyncIteration:
        return self

    def __anext__(self) -> Coroutine[Any, Any, Message]:
        return self._stream.__anext__()

    async def aclose(self) -> None:
        self._stream.close()

    def __del__(self) -> None:
        stream = self._stream
        if stream._ended or stream._closed:
            return
        try:
            stream._loop.call_soon_threadsafe(stream.close)
        except RuntimeError:  # the loop is closed
            pass
