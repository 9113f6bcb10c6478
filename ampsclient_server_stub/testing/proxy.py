"""A loopback TCP proxy that injects network faults: cut every connection, or stall traffic.

For chaos tests: clients dial the proxy, the proxy dials the server; :meth:`LoopbackProxy.cut`
aborts every proxied connection at once (both sides see a reset), :meth:`LoopbackProxy.stall`
stops moving bytes for a while (both directions) without closing anything, like a network that
hangs. Only loopback addresses are accepted, for the listener and for the target.

Example::

    with LoopbackProxy("127.0.0.1", server.tcp_port) as proxy:
        client.connect(f"tcp://127.0.0.1:{proxy.port}/amps/json")
        proxy.stall(1.0)
        proxy.resume()
        proxy.cut()
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Final

__all__ = ["LoopbackProxy"]

logger = logging.getLogger(__name__)

_CHUNK: Final = 64 * 1024


def _require_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"LoopbackProxy only uses loopback addresses, not {host!r}")


class _Pipe:
    """One proxied connection: two sockets and the two copy tasks between them."""

    def __init__(self, proxy: LoopbackProxy) -> None:
        self.proxy = proxy
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for writer in self.writers:
            transport = writer.transport
            with contextlib.suppress(Exception):
                transport.abort()
        for task in self.tasks:
            task.cancel()

    async def copy(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool
    ) -> None:
        proxy = self.proxy
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                # a stalled network: hold the bytes, close nothing (resume() ends it early)
                while (wait := proxy._stall_until - time.monotonic()) > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proxy._resumed.wait(), wait)
                if upstream and proxy.upstream is not None:
                    proxy.upstream.extend(data)
                writer.write(data)
                proxy.bytes += len(data)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self.abort()


class LoopbackProxy:
    """A fault-injecting TCP proxy on its own event loop thread.

    Args:
        target_host / target_port: where to forward (a loopback address).
        listen_host / listen_port: where to listen (port 0 picks a free one; :attr:`port`).
        record: keep a copy of what clients send (:attr:`upstream`), for tests that compare
            the bytes two clients put on the wire.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        record: bool = False,
    ) -> None:
        _require_loopback(target_host)
        _require_loopback(listen_host)
        self.target = (target_host, target_port)
        self.listen = (listen_host, listen_port)
        self.port = 0
        self.connections = 0
        self.cuts = 0
        self.stalls = 0
        self.bytes = 0
        self.upstream: bytearray | None = bytearray() if record else None
        """With ``record=True``: every byte forwarded from clients to the server, in order."""
        self._pipes: set[_Pipe] = set()
        self._stall_until = 0.0
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
        loop = self._loop
        if loop is None:
            return 0
        done = threading.Event()
        count = [0]

        def run() -> None:
            count[0] = len(self._pipes)
            for pipe in list(self._pipes):
                pipe.abort()
            self._pipes.clear()
            done.set()

        loop.call_soon_threadsafe(run)
        done.wait(5)
        self.cuts += 1
        return count[0]

    def stall(self, seconds: float) -> None:
        """Stop forwarding bytes (both ways) for ``seconds``, without closing anything."""
        self.stalls += 1
        self._call(self._resumed.clear)
        self._stall_until = max(self._stall_until, time.monotonic() + seconds)

    def resume(self) -> None:
        """End a :meth:`stall` now: the held bytes move on."""
        self._stall_until = 0.0
        self._call(self._resumed.set)

    def _call(self, fn: Callable[[], object]) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn)

    @property
    def open_connections(self) -> int:
        """Connections being proxied now."""
        return len(self._pipes)

    # ------------------------------------------------------------------ internals

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError as exc:
            logger.debug("proxy: target %s:%d refused: %s", *self.target, exc)
            writer.transport.abort()
            return
        pipe = _Pipe(self)
        pipe.writers = [writer, up_writer]
        self._pipes.add(pipe)
        pipe.tasks = [
            asyncio.ensure_future(pipe.copy(reader, up_writer, True)),
            asyncio.ensure_future(pipe.copy(up_reader, writer, False)),
        ]
        try:
            await asyncio.gather(*pipe.tasks, return_exceptions=True)
        finally:
            self._pipes.discard(pipe)
