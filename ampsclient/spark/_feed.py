"""A bounded replay read as chunks of raw delivery payloads, for the executor side of a read.

:func:`replay_payloads` drives an :class:`~ampsclient.client.AsyncClient` on a private event
loop that only runs while the caller waits for the next chunk. There is no second thread and
no per-message hand-over: the subscription's handler keeps each delivery's payload bytes
(header and body, undecoded) in a list, and the caller gets the list once it holds ``chunk``
payloads (or the replay completed). While the caller works on a chunk the loop is stopped,
the socket is not read and TCP pushes back on the server: memory stays at about one chunk.

Nothing here imports pyspark or pyarrow.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Final

from ..client import AsyncClient, ConnectionEvent, ConnectionState
from ..command import Command
from ..exceptions import DisconnectedError, TimeoutError as AMPSTimeoutError, error_for_reason
from ..protocol.acks import AckType
from ..protocol.message import Message
from ..uri import parse_uri
from ._core import WAIT_MS, Reconnect

__all__ = ["DEFAULT_CHUNK", "replay_payloads"]

log = logging.getLogger("ampsclient.spark")

DEFAULT_CHUNK: Final = 32_768
"""Payloads per chunk: large enough that per-chunk costs (an Arrow conversion, a loop run)
vanish, small enough to keep a few MB in memory."""

_DELIVERY: Final = b'{"c":"p"'


@dataclass
class _Inbox:
    """What the subscription handler collected since the caller last took a chunk.

    A payload sink (:meth:`ampsclient.core.routes.Routes.learn`): once the client's fast
    path has learned the subscription's delivery prefix, it appends each delivery's payload
    bytes to :attr:`payloads` itself (no message object, no call per delivery) and calls
    :meth:`sink_filled` once per socket read; the first delivery and the acks come as
    messages (the handler is the inbox itself: a bound method would hide its sink).
    """

    chunk: int
    payloads: list[bytes] = field(default_factory=list)
    completed: bool = False
    error: BaseException | None = None
    waiter: asyncio.Future[None] | None = None

    @property
    def payload_sink(self) -> list[bytes]:
        """The list the client's fast path appends this subscription's payloads to (always
        the same object: :meth:`take` empties it)."""
        return self.payloads

    def sink_filled(self) -> None:
        """The fast path appended payloads: wake the caller once a chunk is there."""
        if len(self.payloads) >= self.chunk:
            self.wake()

    def take(self) -> list[bytes]:
        """The payloads collected so far (the sink list is emptied, not replaced)."""
        out = self.payloads[:]
        self.payloads.clear()
        return out

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __call__(self, message: Message) -> None:
        raw = message.raw_payload
        if raw.startswith(_DELIVERY) or message.command == "publish":
            self.payloads.append(raw)
            if len(self.payloads) >= self.chunk:
                self.wake()
            return
        if message.command != "ack":
            return
        if message.status == "failure":
            self.error = error_for_reason(message.reason, ack=message)
            self.wake()
        elif message.ack_type & AckType.COMPLETED:
            self.completed = True
            self.wake()

    def on_state(self, event: ConnectionEvent) -> None:
        if event.state is ConnectionState.DISCONNECTED and not self.completed:
            self.error = DisconnectedError(
                f"the connection dropped during the replay: {event.cause or 'closed'}"
            )
            self.wake()


async def _connect(
    uris: Sequence[str], name: str, timeout_ms: int, schedule: Reconnect
) -> tuple[AsyncClient, str]:
    """A logged-on client and the URI it is connected to."""
    while True:
        for uri in uris:
            client = AsyncClient(name)
            try:
                await client.connect_and_logon(uri, timeout=timeout_ms)
            except Exception as exc:
                await client.close()
                schedule.failed(uri, exc)
                continue
            return client, uri
        await asyncio.sleep(schedule.pause())


def _command(topic: str, filter: str | None, bookmark: str, options: str) -> Command:
    cmd = Command("subscribe").set_topic(topic).set_filter(filter).set_bookmark(bookmark)
    if options:
        cmd.set_options(options)
    return cmd.add_ack_type("completed")


def replay_payloads(
    uris: Sequence[str],
    name: str,
    timeout_ms: int,
    *,
    topic: str,
    filter: str | None,
    bookmark: str,
    options: str,
    chunk: int = DEFAULT_CHUNK,
    reconnect_ms: int = 0,
    wait_ms: int = WAIT_MS,
) -> Generator[list[bytes], None, None]:
    """The delivery payloads of a bounded bookmark replay, in order, in lists of about
    ``chunk``, up to the server's ``completed`` ack. Closing the generator early closes the
    connection.

    A connection that drops before the replay completed is resumed, not failed: the next URI
    (then the others in turn, the dropped one last, for ``reconnect_ms`` with back-off; one
    round when 0) replays the rest of the range, after the last message handed to the caller
    (``bookmark``'s end kept), so nothing is lost or repeated.

    Every wait for the server has a deadline: ``wait_ms`` without a message or the
    replay's end (while the caller waits for the next chunk) raises a timeout.

    Raises:
        TimeoutError: (:class:`ampsclient.exceptions.TimeoutError`) the server sent nothing
            for ``wait_ms`` while a chunk was awaited; the message names the topic and range.
        AMPSUnavailableError: no server in ``uris`` answered (within ``reconnect_ms``: every
            URI in turn, with back-off), at the start or after a drop.
        CommandError: the server refused the subscription (``invalid bookmark``...).
    """
    what = f"reading {topic!r} {bookmark}"
    loop = asyncio.new_event_loop()
    try:
        schedule = Reconnect(uris, reconnect_ms, what)
        order: Sequence[str] = uris
        current = bookmark
        last: bytes | None = None  # the last payload handed to the caller
        while True:
            client, used = loop.run_until_complete(_connect(order, name, timeout_ms, schedule))
            inbox = _Inbox(chunk)
            client.add_connection_state_listener(inbox.on_state)
            try:
                cmd = _command(topic, filter, current, options)
                loop.run_until_complete(client.execute_async(cmd, inbox))
                while True:
                    if len(inbox.payloads) < chunk and not inbox.completed and inbox.error is None:
                        inbox.waiter = loop.create_future()
                        _wait(loop, inbox, wait_ms, what, used)
                    if inbox.error is not None:
                        raise inbox.error
                    if inbox.payloads:
                        out = inbox.take()
                        last = out[-1]
                        yield out
                    elif inbox.completed:
                        return
            except DisconnectedError as exc:
                dropped: DisconnectedError = exc
            finally:
                inbox.completed = True  # our own close is not a failure
                loop.run_until_complete(client.close())
            current = resume_range(bookmark, last, dropped)
            log.warning(
                "%s: the connection to %s dropped (%s); resuming with %s",
                what,
                parse_uri(used).redacted(),
                dropped,
                current,
            )
            schedule = Reconnect(uris, reconnect_ms, f"resuming {what} with {current}")
            schedule.dropped(dropped)
            i = list(uris).index(used)
            order = [*uris[i + 1 :], *uris[: i + 1]]
    finally:
        loop.close()


def _wait(
    loop: asyncio.AbstractEventLoop, inbox: _Inbox, wait_ms: int, what: str, uri: str
) -> None:
    """Run the loop until the inbox's waiter is woken, for ``wait_ms`` at most."""
    assert inbox.waiter is not None
    try:
        loop.run_until_complete(asyncio.wait_for(inbox.waiter, wait_ms / 1000.0))
    except TimeoutError:  # asyncio's (the builtin): the server went quiet
        raise AMPSTimeoutError(
            f"nothing arrived within {wait_ms} ms while {what} from "
            f"{parse_uri(uri).redacted()} (no message and no end of the replay; "
            f"{len(inbox.payloads)} message(s) since the last chunk)"
        ) from None


def resume_range(bookmark: str, last: bytes | None, dropped: DisconnectedError) -> str:
    """The rest of the range ``bookmark`` after the delivery ``last`` (its payload bytes):
    ``(<last's bookmark>:<the range's end>``; the whole range when nothing was delivered.

    Raises:
        DisconnectedError: ``dropped``, when ``bookmark`` is not a range (nothing to resume).
    """
    if last is None:
        return bookmark
    colon = bookmark.find(":")
    bm = Message(last).bookmark
    if colon < 0 or not bm:
        raise dropped
    return f"({bm}:{bookmark[colon + 1 :]}"
