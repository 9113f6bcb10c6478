"""Unix domain socket listener: ``<Transport><Type>unix</Type><Path>...</Path>``.

The sessions are :class:`~ampsclient_server_stub.net.tcp.TcpSession` (the same 4-byte framed
AMPS protocol as tcp). The socket file is created mode 0600 (owner only: file permissions are
a unix socket's access control); a file already at the path is replaced only when it is a
socket no process listens on (a stale one from a crashed server), and the listener removes
its own socket file when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
from typing import TYPE_CHECKING

from ampsclient_server_stub.config_values import ConfigError
from ampsclient_server_stub.engine.broker import Broker

from .session import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_WRITE_BUFFER
from .tcp import TcpSession

if TYPE_CHECKING:
    from ampsclient_server_stub.security.policy import TransportPolicy

    from .flow import FlowControl

__all__ = ["UnixListener", "start_unix_listener"]

SOCKET_MODE = 0o600


class UnixListener:
    """A running unix listener: its asyncio server and the socket file it owns."""

    def __init__(self, server: asyncio.Server, path: str, inode: tuple[int, int]) -> None:
        self.server = server
        self.path = path
        self._inode = inode

    def close(self) -> None:
        """Stop accepting and remove the socket file (if it is still this listener's)."""
        self.server.close()
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self.path)

    async def wait_closed(self) -> None:
        await self.server.wait_closed()


def _clear_stale(path: str) -> None:
    """Remove ``path`` if it is a socket nobody listens on; refuse anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ConfigError(f"unix transport: {path} exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # stale: left by a server that did not stop cleanly
        return
    except OSError as exc:
        raise ConfigError(f"unix transport: cannot probe {path}: {exc}") from exc
    finally:
        probe.close()
    raise ConfigError(f"unix transport: {path} is in use by a running server")


def _bind(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the file is born 0600: no window where others may connect
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"unix transport: cannot listen on {path}: {exc}") from exc
    finally:
        os.umask(old)
    os.chmod(path, SOCKET_MODE)
    return sock


async def start_unix_listener(
    broker: Broker,
    path: str,
    *,
    message_type: str | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    policy: TransportPolicy | None = None,
    flow: FlowControl | None = None,
) -> UnixListener:
    """Listen on the Unix domain socket ``path`` and serve AMPS over it."""
    loop = asyncio.get_running_loop()

    def factory() -> TcpSession:
        session = TcpSession(
            broker,
            loop,
            message_type=message_type,
            max_frame_size=max_frame_size,
            max_write_buffer=max_write_buffer,
        )
        session.transport_name = "unix"
        session.policy = policy
        session.flow = flow
        return session

    _clear_stale(path)
    sock = _bind(path)
    st = os.lstat(path)
    try:
        server = await loop.create_unix_server(factory, sock=sock)
    except BaseException:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return UnixListener(server, path, (st.st_dev, st.st_ino))
