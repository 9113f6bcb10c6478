"""A loopback TCP proxy that injects network faults: cuts, stalls, and what ``netem`` would do.

For chaos tests: clients dial the proxy, the proxy dials the server.

* :meth:`LoopbackProxy.cut` aborts every proxied connection at once (both sides see a reset);
* :meth:`LoopbackProxy.stall` stops moving bytes for a while (both directions, or one)
  without closing anything, like a network that hangs; :meth:`~LoopbackProxy.resume` ends it;
* :meth:`~LoopbackProxy.latency` (with jitter), :meth:`~LoopbackProxy.fragment`,
  :meth:`~LoopbackProxy.coalesce`, :meth:`~LoopbackProxy.bandwidth` shape each direction
  (``to_server``: client to server, ``to_client``: back) the way Linux ``netem``/``tbf``
  would, bytes kept in order (see :mod:`ampsclient_server_stub.testing.netem`);
* :meth:`~LoopbackProxy.partition` drops one direction (bytes read and discarded, both sockets
  open: a half-open connection only heartbeats detect); :meth:`~LoopbackProxy.heal` ends it.

Every setting can change while connections are open; random draws come from ``seed``. Only
loopback addresses are accepted, for the listener and for the target.

Example::

    with LoopbackProxy("127.0.0.1", server.tcp_port, seed=7) as proxy:
        client.connect(f"tcp://127.0.0.1:{proxy.port}/amps/json")
        proxy.latency(0.05, jitter=0.01)                # 50 ms ± 10 ms, each way
        proxy.fragment(1, direction="to_client")        # the client reads byte by byte
        proxy.partition("to_client")                    # the server's bytes vanish
        proxy.heal()
        proxy.stall(1.0)
        proxy.resume()
        proxy.cut()
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Final, Literal, TypeVar

from .netem import (
    DIRECTIONS,
    Direction,
    DirectionShaper,
    DirectionStats,
    LinkShape,
    direction_rng,
)

__all__ = ["Direction", "LinkShape", "LoopbackProxy"]

logger = logging.getLogger(__name__)

_CHUNK: Final = 64 * 1024
_QUEUED_CHUNKS: Final = 64
"""Chunks held per direction (shaped traffic) before the proxy stops reading the sender."""
_FLUSH_ON_EOF: Final = 10.0
"""Seconds the held bytes of a direction may take to leave once its sender closed."""

_T = TypeVar("_T")
_Item = tuple[float, bytes] | None
"""A held chunk (release time, bytes), or ``None``: the sender closed."""


def _require_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"LoopbackProxy only uses loopback addresses, not {host!r}")


def _directions(direction: Direction | Literal["both"]) -> tuple[Direction, ...]:
    if direction == "both":
        return DIRECTIONS
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'to_server', 'to_client' or 'both', not {direction!r}")
    return (direction,)


class _Link:
    """One direction of a proxied connection: read, shape, write, bytes kept in order."""

    def __init__(
        self,
        pipe: _Pipe,
        direction: Direction,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        proxy = pipe.proxy
        self.proxy = proxy
        self.direction = direction
        self.reader = reader
        self.writer = writer
        self.stats = proxy.stats[direction]
        self.shaper = DirectionShaper(direction_rng(proxy.seed, pipe.number, direction))
        self.held: deque[_Item] = deque()
        self.pending = 0
        """Chunks held or being written by :meth:`deliver` (direct writes wait for zero)."""
        self.lost = False
        """Bytes of this direction were dropped (a partition): the stream has a gap."""
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()

    def _write(self, data: bytes) -> None:
        if self.direction == "to_server" and self.proxy.upstream is not None:
            self.proxy.upstream.extend(data)
        self.writer.write(data)
        self.stats.forwarded += len(data)
        self.stats.writes += 1
        self.proxy.bytes += len(data)

    def _drop(self, data: bytes) -> None:
        self.stats.dropped += len(data)
        self.lost = True

    async def pump(self) -> None:
        """Read the sender until it closes; write directly or hand over to :meth:`deliver`."""
        proxy = self.proxy
        loop = asyncio.get_running_loop()
        while True:
            data = await self.reader.read(_CHUNK)
            if not data:
                break
            await proxy._wait_stall(self.direction)
            shape = proxy._shapes[self.direction]
            if shape.drop:
                self._drop(data)
            elif self.pending == 0 and shape.plain:
                self._write(data)
                await self.writer.drain()
            else:
                await self._hold((self.shaper.release_time(loop.time(), shape), data))
        if self.pending:
            await self._hold(None)
            deadline = loop.time() + _FLUSH_ON_EOF
            while self.pending and loop.time() < deadline:
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), deadline - loop.time())

    async def _hold(self, item: _Item) -> None:
        while len(self.held) >= _QUEUED_CHUNKS:
            self._room.clear()
            await self._room.wait()
        self.held.append(item)
        if item is not None:
            self.pending += 1
        self._arrived.set()

    async def _take(self, until: float | None) -> _Item | bool:
        """The next held item; ``False`` when none came before ``until`` (loop time)."""
        loop = asyncio.get_running_loop()
        while not self.held:
            self._arrived.clear()
            if until is None:
                await self._arrived.wait()
                continue
            timeout = until - loop.time()
            if timeout <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout)
        return self.held[0]

    def _pop(self) -> None:
        self.held.popleft()
        self._room.set()

    async def deliver(self) -> None:
        """Write the held chunks at their release times: merged (coalesce), cut (fragment),
        paced (bandwidth); dropped while the direction is partitioned."""
        loop = asyncio.get_running_loop()
        while True:
            item = await self._take(None)
            if not isinstance(item, tuple):
                return  # the sender closed and everything before it left
            self._pop()
            release, data = item
            await asyncio.sleep(max(0.0, release - loop.time()))
            shape = self.proxy._shapes[self.direction]
            parts = [data]
            if shape.coalesce > 1:
                end = loop.time() + shape.coalesce_window
                while len(parts) < shape.coalesce:
                    nxt = await self._take(end)
                    if not isinstance(nxt, tuple) or nxt[0] > end:
                        break
                    self._pop()
                    await asyncio.sleep(max(0.0, nxt[0] - loop.time()))
                    parts.append(nxt[1])
            try:
                await self._send(b"".join(parts))
            finally:
                self.pending -= len(parts)
                self._room.set()

    async def _send(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        shape = self.proxy._shapes[self.direction]
        if shape.drop:
            self._drop(data)
            return
        for piece in self.shaper.pieces(data, shape):
            wait = self.shaper.send_delay(len(piece), loop.time(), shape)
            if wait:
                await asyncio.sleep(wait)
            self._write(piece)
            await self.writer.drain()


class _Pipe:
    """One proxied connection: two sockets and the two directions between them."""

    def __init__(self, proxy: LoopbackProxy, number: int) -> None:
        self.proxy = proxy
        self.number = number
        self.writers: list[asyncio.StreamWriter] = []
        self.links: list[_Link] = []
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for writer in self.writers:
            transport = writer.transport
            with contextlib.suppress(Exception):
                transport.abort()
        for task in self.tasks:
            task.cancel()

    async def run_link(self, link: _Link) -> None:
        """Both halves of one direction; when the sender closes (or a socket fails), the
        whole connection is aborted, as it always was."""
        deliver = asyncio.ensure_future(link.deliver())
        try:
            await link.pump()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            deliver.cancel()
            with contextlib.suppress(BaseException):
                await deliver
            self.abort()


class LoopbackProxy:
    """A fault-injecting TCP proxy on its own event loop thread.

    Args:
        target_host / target_port: where to forward (a loopback address).
        listen_host / listen_port: where to listen (port 0 picks a free one; :attr:`port`).
        record: keep a copy of what clients send (:attr:`upstream`), for tests that compare
            the bytes two clients put on the wire.
        seed: the seed of every random draw (jitter, fragment sizes); ``None``: a fresh one.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        record: bool = False,
        seed: int | None = None,
    ) -> None:
        _require_loopback(target_host)
        _require_loopback(listen_host)
        self.target = (target_host, target_port)
        self.listen = (listen_host, listen_port)
        self.seed = seed
        self.port = 0
        self.connections = 0
        self.cuts = 0
        self.stalls = 0
        self.bytes = 0
        self.upstream: bytearray | None = bytearray() if record else None
        """With ``record=True``: every byte forwarded from clients to the server, in order."""
        self.stats: dict[Direction, DirectionStats] = {d: DirectionStats() for d in DIRECTIONS}
        """Per direction: bytes forwarded, writes made, bytes dropped by a partition."""
        self._shapes: dict[Direction, LinkShape] = {d: LinkShape() for d in DIRECTIONS}
        self._pipes: set[_Pipe] = set()
        self._stall_until: dict[Direction, float] = {d: 0.0 for d in DIRECTIONS}
        self._resumed = asyncio.Event()
        """Set by :meth:`resume` (on the proxy's loop) to wake stalled copies."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 10.0) -> LoopbackProxy:
        """Start listening (returns once :attr:`port` is known)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name="loopback-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("proxy did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._accept, self.listen[0], self.listen[1])
            )
            self.port = int(self._server.sockets[0].getsockname()[1])
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            for pipe in list(self._pipes):
                pipe.abort()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    def stop(self) -> None:
        """Close the listener and every connection; join the thread (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            loop.stop()

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(shutdown)
        thread.join(10)
        self._thread = None

    def __enter__(self) -> LoopbackProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ faults

    def cut(self) -> int:
        """Abort every proxied connection now; returns how many were cut."""

        def run() -> int:
            count = len(self._pipes)
            for pipe in list(self._pipes):
                pipe.abort()
            self._pipes.clear()
            return count

        if self._loop is None:
            return 0
        count = self._on_loop(run, 0)
        self.cuts += 1
        return count

    def stall(self, seconds: float, *, direction: Direction | Literal["both"] = "both") -> None:
        """Stop forwarding bytes (both ways, or one ``direction``) for ``seconds``, without
        closing anything; the held bytes move on afterwards, in order."""
        directions = _directions(direction)
        self.stalls += 1
        self._call(self._resumed.clear)
        until = time.monotonic() + seconds
        for d in directions:
            self._stall_until[d] = max(self._stall_until[d], until)

    def resume(self) -> None:
        """End a :meth:`stall` now (both directions): the held bytes move on."""
        for d in DIRECTIONS:
            self._stall_until[d] = 0.0
        self._call(self._resumed.set)

    def shape(self, direction: Direction) -> LinkShape:
        """How ``direction`` behaves now."""
        return self._shapes[_directions(direction)[0]]

    def set_shape(
        self, shape: LinkShape, *, direction: Direction | Literal["both"] = "both"
    ) -> None:
        """Make ``direction`` (or both) behave as ``shape`` from now on (open connections
        included; chunks already held keep their release times). Applied on the proxy's
        loop, so once this returns no write decided under the old shape is still to come."""

        def apply() -> None:
            for d in _directions(direction):
                self._shapes[d] = shape

        self._apply(apply)

    def _change(
        self, direction: Direction | Literal["both"], **changes: float | int | bool
    ) -> None:
        def apply() -> None:
            for d in _directions(direction):
                self._shapes[d] = dataclasses.replace(self._shapes[d], **changes)  # type: ignore[arg-type]

        self._apply(apply)

    def _apply(self, change: Callable[[], None]) -> None:
        """Run ``change`` on the proxy's loop (between two of its steps) when it runs, else
        here: a link reads its shape and writes in one step, never across a change."""
        loop = self._loop
        thread = self._thread
        if (
            loop is None
            or loop.is_closed()
            or thread is None
            or not thread.is_alive()
            or thread is threading.current_thread()
        ):
            change()
            return

        def run() -> bool:
            change()
            return True

        if not self._on_loop(run, False):
            change()

    def stats_snapshot(self) -> dict[Direction, DirectionStats]:
        """A consistent copy of :attr:`stats`, taken on the proxy's loop between two steps."""

        def copy() -> dict[Direction, DirectionStats]:
            return {d: dataclasses.replace(s) for d, s in self.stats.items()}

        return self._on_loop(copy, {d: dataclasses.replace(s) for d, s in self.stats.items()})

    def latency(
        self,
        seconds: float,
        *,
        jitter: float = 0.0,
        direction: Direction | Literal["both"] = "both",
    ) -> None:
        """Hold every chunk ``seconds ± jitter`` (uniform) in ``direction``; bytes keep their
        order (a chunk never leaves before the one ahead of it). ``latency(0)``: off."""
        self._change(direction, latency=seconds, jitter=jitter)

    def fragment(self, max_bytes: int, *, direction: Direction | Literal["both"] = "both") -> None:
        """Cut every write in ``direction`` into pieces of 1..``max_bytes`` bytes (random
        sizes; ``fragment(1)``: byte by byte). ``fragment(0)``: off."""
        self._change(direction, fragment=max_bytes)

    def coalesce(
        self,
        chunks: int,
        *,
        window: float = 0.005,
        direction: Direction | Literal["both"] = "both",
    ) -> None:
        """Merge up to ``chunks`` chunks read from the sender within ``window`` seconds into
        one write. ``coalesce(0)``: off."""
        self._change(direction, coalesce=chunks, coalesce_window=window)

    def bandwidth(
        self,
        bytes_per_second: float,
        *,
        burst: int = 0,
        direction: Direction | Literal["both"] = "both",
    ) -> None:
        """Limit ``direction`` to ``bytes_per_second`` (a token bucket of ``burst`` bytes, by
        default a tenth of a second's worth). ``bandwidth(0)``: unlimited."""
        self._change(direction, bandwidth=bytes_per_second, burst=burst)

    def partition(self, direction: Direction | Literal["both"]) -> None:
        """Drop every byte in ``direction`` (read and discarded; both sockets stay open): a
        half-open connection that only heartbeats detect. :meth:`heal` ends it."""
        self._change(direction, drop=True)

    def heal(self) -> int:
        """End every partition. A connection that lost bytes has a gap in its stream (TCP
        would have reset it), so it is aborted; returns how many were."""
        self._change("both", drop=False)

        def run() -> int:
            gaps = [p for p in self._pipes if any(link.lost for link in p.links)]
            for pipe in gaps:
                pipe.abort()
                self._pipes.discard(pipe)
            return len(gaps)

        return self._on_loop(run, 0)

    def clear_shapes(self) -> None:
        """Every direction back to a plain wire (no latency, cutting, merging, limit or
        partition); connections that lost bytes to a partition are aborted (:meth:`heal`)."""
        self.set_shape(LinkShape())
        self.heal()

    @property
    def open_connections(self) -> int:
        """Connections being proxied now."""
        return len(self._pipes)

    @property
    def connection_numbers(self) -> frozenset[int]:
        """The numbers (1, 2, ... in accept order) of the connections being proxied now."""
        return self._on_loop(lambda: frozenset(p.number for p in self._pipes), frozenset())

    # ------------------------------------------------------------------ internals

    def _call(self, fn: Callable[[], object]) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn)

    def _on_loop(self, fn: Callable[[], _T], default: _T) -> _T:
        """Run ``fn`` on the proxy's loop and return its result (``default`` when the proxy
        is not running or did not answer within 5 s)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return default
        done = threading.Event()
        result = [default]

        def run() -> None:
            try:
                result[0] = fn()
            finally:
                done.set()

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(run)
            done.wait(5)
        return result[0]

    async def _wait_stall(self, direction: Direction) -> None:
        # a stalled network: hold the bytes, close nothing (resume() ends it early)
        while (wait := self._stall_until[direction] - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._resumed.wait(), wait)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError as exc:
            logger.debug("proxy: target %s:%d refused: %s", *self.target, exc)
            writer.transport.abort()
            return
        pipe = _Pipe(self, number)
        pipe.writers = [writer, up_writer]
        pipe.links = [
            _Link(pipe, "to_server", reader, up_writer),
            _Link(pipe, "to_client", up_reader, writer),
        ]
        self._pipes.add(pipe)
        pipe.tasks = [asyncio.ensure_future(pipe.run_link(link)) for link in pipe.links]
        try:
            await asyncio.gather(*pipe.tasks, return_exceptions=True)
        finally:
            self._pipes.discard(pipe)
