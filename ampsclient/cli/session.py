"""One run of the command: the HA client, the output, the progress line, the summary."""

from __future__ import annotations

import argparse
import builtins
import getpass
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import IO, Any, TextIO

from ..exceptions import (
    AMPSConnectionError,
    AMPSError,
    AuthenticationError,
    InvalidBookmarkError,
    NotAmpsPortError,
    TimeoutError,
    UsageError,
)
from ..ha import DefaultServerChooser, ExponentialDelayStrategy, RetryLimitError
from ..protocol.bookmarks import parse_bookmark
from ..protocol.message import Message
from ..stream import MessageStream
from ..sync import HAClient
from ..tls import client_context
from ..uri import parse_uri
from .formats import Format, Writer
from .parser import default_servers
from .progress import Progress

__all__ = ["BOOKMARK_NAMES", "Session", "redact", "resolve_bookmark"]

BOOKMARK_NAMES = {"EPOCH": "0", "NOW": "0|1|"}
"""Names accepted by ``--bookmark`` besides the wire forms."""


def resolve_bookmark(text: str) -> str:
    """``--bookmark``'s value as sent: a name resolved, anything else checked.

    Raises:
        UsageError: not a bookmark in any AMPS form.
    """
    named = BOOKMARK_NAMES.get(text.strip().upper())
    if named is not None:
        return named
    try:
        parse_bookmark(text)
    except InvalidBookmarkError as exc:
        raise UsageError(f"--bookmark {text!r}: {exc}") from None
    return text.strip()


def redact(uri: str | None) -> str:
    """``uri`` without its password."""
    if uri is None:
        return "?"
    if "@" in uri and "://" in uri:
        scheme, rest = uri.split("://", 1)
        return scheme + "://" + rest.split("@", 1)[1]
    return uri


class _Password:
    """An authenticator that sends the password read from ``--password-file`` or the prompt
    (it is never put into a URI, so it cannot be logged with one)."""

    def __init__(self, password: str) -> None:
        self._password = password

    def authenticate(self, user: str | None, password: str | None) -> str | None:
        return self._password

    def retry(self, user: str | None, password: str | None) -> str | None:
        raise AuthenticationError("the server asked to retry the logon (a challenge)")

    def completed(self, user: str | None, password: str | None, reason: str | None) -> None:
        return None

    def __repr__(self) -> str:
        return "_Password(<hidden>)"


def supplied_password(args: argparse.Namespace, servers: list[str], stderr: TextIO) -> str | None:
    """The password of ``--password-file`` (its first line) or ``--ask-password`` (read on the
    terminal, not echoed); ``None`` without either.

    Raises:
        UsageError: no ``--server`` URI names a user, one already carries a password, the
            file cannot be read, or there is no terminal to prompt on.
    """
    path = getattr(args, "password_file", None)
    ask = bool(getattr(args, "ask_password", False))
    if path is None and not ask:
        return None
    option = "--password-file" if path is not None else "--ask-password"
    uris = [parse_uri(uri) for uri in servers]
    if not any(uri.user for uri in uris):
        raise UsageError(f"{option} needs a user in the --server URI (tcp://USER@host:port/...)")
    if any(uri.password is not None for uri in uris):
        raise UsageError(f"{option}: a --server URI already carries a password")
    if path is not None:
        try:
            with open(path, encoding="utf-8") as file:
                lines = file.read().splitlines()
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise UsageError(f"--password-file {path!r}: {exc.strerror}") from None
        if mode & 0o077:
            stderr.write(
                f"ampsclient: warning: --password-file {path!r} can be read by other users "
                "(chmod 600 it)\n"
            )
        if not lines or not lines[0]:
            raise UsageError(f"--password-file {path!r}: the first line is empty")
        return lines[0]
    user = next(uri.user for uri in uris if uri.user)
    try:  # getpass reads /dev/tty, and would fall back to stdin (publish's input) without it
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:
        raise UsageError("--ask-password needs a terminal (use --password-file)") from None
    return getpass.getpass(f"password for {user}: ")


def tls_context(args: argparse.Namespace, servers: list[str]) -> ssl.SSLContext | None:
    """The TLS settings of ``--cafile``/``--cert``/``--key``/``--insecure`` (``None``: none
    given, the client's default: the system's trust store, verification on).

    Raises:
        UsageError: a TLS option without a ``tcps://``/``wss://`` server, ``--key`` without
            ``--cert``, or a file that cannot be loaded.
    """
    cafile = getattr(args, "cafile", None)
    cert = getattr(args, "cert", None)
    key = getattr(args, "key", None)
    insecure = bool(getattr(args, "insecure", False))
    if cafile is None and cert is None and key is None and not insecure:
        return None
    if not any(uri.split("://", 1)[0].lower() in ("tcps", "wss") for uri in servers):
        raise UsageError(
            "--cafile, --cert, --key and --insecure apply to tcps:// and wss:// servers"
        )
    if key is not None and cert is None:
        raise UsageError("--key needs --cert (the certificate the key belongs to)")
    try:
        return client_context(cafile=cafile, certfile=cert, keyfile=key, verify=not insecure)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise UsageError(f"TLS options: {exc}") from None


class _Chooser(DefaultServerChooser):
    """The ``--server`` URIs, round-robin; it keeps the failures no retry can mend, and the
    command stops at once on them: a logon refused for its credentials, a ``tcp://`` URI
    that reached an HTTP port (a WebSocket or admin port)."""

    def __init__(self, *uris: str) -> None:
        super().__init__(*uris)
        self.refused: AuthenticationError | NotAmpsPortError | None = None

    def report_failure(self, exception: BaseException, info: object = None) -> None:
        if isinstance(exception, AuthenticationError | NotAmpsPortError) and self.refused is None:
            self.refused = exception
        super().report_failure(exception, info)


class _GivingUpDelay(ExponentialDelayStrategy):
    """The HA client's delay strategy, telling the session when it gives up reconnecting
    (the HA client then stops trying; a subscription's stream would wait forever). It gives
    up at once after an authentication failure (the official HA client retries those as any
    failure; the command does not, the user is told at once)."""

    def __init__(
        self,
        on_give_up: Callable[[RetryLimitError], None],
        chooser: _Chooser,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._on_give_up = on_give_up
        self._chooser = chooser

    def get_connect_wait_duration(self, uri: str) -> int:
        try:
            if self._chooser.refused is not None:
                raise RetryLimitError(f"logon refused: {self._chooser.refused}")
            return super().get_connect_wait_duration(uri)
        except RetryLimitError as exc:
            self._on_give_up(exc)
            raise


class Session:
    """What a command needs: its arguments, a connected client, the output and the counters.

    Args:
        args: the parsed command line.
        stdout: where messages go (binary).
        stderr: where the progress line, the summary and errors go.
    """

    def __init__(self, args: argparse.Namespace, *, stdout: IO[bytes], stderr: TextIO) -> None:
        self.args = args
        self.command: str = args.command
        self.stderr = stderr
        self.servers: list[str] = args.server or default_servers()
        for uri in self.servers:
            try:
                parse_uri(uri)
            except AMPSConnectionError as exc:
                raise UsageError(f"--server {redact(uri)!r}: {exc}") from None
        password = supplied_password(args, self.servers, stderr)
        self.name: str = args.name or f"ampsclient-cli-{socket.gethostname()}-{os.getpid()}"
        self.ssl_context = tls_context(args, self.servers)
        fmt: Format = args.format
        delimiter = b"\n" if args.delimiter is None else bytes([args.delimiter])
        try:
            self.writer = Writer(
                stdout,
                fmt,
                live=self.command != "sow",
                template=args.template,
                separator=delimiter,
            )
        except ValueError as exc:
            raise UsageError(f"--template: {exc}") from None
        self.progress = Progress(self.command, stream=stderr, enabled=not args.quiet)
        self.client: HAClient | None = None
        self.extra = ""
        """Facts for the summary line (``"3 persisted"``)."""
        self.unpersisted = 0
        """Messages ``publish`` left unpersisted when the client closed."""
        self.connected = False
        """Whether a client was made (and so closed)."""
        self.chooser = _Chooser()
        for uri in self.servers:  # a supplied password goes with the URIs that name a user
            named = password is not None and parse_uri(uri).user is not None
            self.chooser.add(uri, _Password(password) if named and password else None)
        self.stream: MessageStream | None = None
        """The stream being written out (closed when the client gives up reconnecting)."""
        self.lost: AMPSError | None = None
        """Why the client gave up reconnecting, after a connection was made (the
        authentication error when a logon was refused)."""
        self.deadline: float | None = None
        """``time.monotonic()`` by which the command's waits for acks end (``--timeout``
        from the first wait; ``None``: no limit, or no wait yet)."""
        self.refused: dict[str, int] = {}
        """``publish``: how many messages the server refused, by reason (failed writes)."""
        self._refused_lock = threading.Lock()

    def _failed_write(self, _message: Message, reason: str) -> None:
        """On the client's thread: the server refused a stored publish (persisted failure)."""
        with self._refused_lock:
            key = reason or "no reason given"
            self.refused[key] = self.refused.get(key, 0) + 1

    def remaining(self) -> int:
        """Milliseconds left of ``--timeout`` (its deadline starts at the first call); 0 when
        ``--timeout 0`` (no limit).

        Raises:
            TimeoutError: the deadline has passed.
        """
        timeout: int = self.args.timeout
        if not timeout:
            return 0
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + timeout / 1000
        left = int((self.deadline - now) * 1000)
        if left <= 0:
            raise TimeoutError(f"--timeout {timeout} ms passed")
        return left

    @property
    def refused_count(self) -> int:
        """How many published messages the server refused."""
        with self._refused_lock:
            return sum(self.refused.values())

    def _gave_up(self, exc: RetryLimitError) -> None:
        """On the client's thread: no server came back within ``--retry-time`` (or one
        refused the logon)."""
        self.lost = self.chooser.refused or exc
        if self.stream is not None:
            self.stream.close()  # the command's loop ends and raises ``lost``

    def connect(self) -> HAClient:
        """An HA client logged on to the first server that answers.

        ``--retry-time`` bounds the whole of it (every connect and logon attempt included:
        a server that accepts connections and never answers does not hold it longer), and
        ``--timeout`` each attempt.

        Raises:
            AuthenticationError: a server refused the logon (at once, not retried).
            RetryLimitError: no server logged on within ``--retry-time``.
        """
        timeout: int = self.args.timeout
        retry: int = self.args.retry_time
        attempt = min(t for t in (timeout, retry) if t) if (timeout or retry) else 0
        client = HAClient(
            self.name,
            server_chooser=self.chooser,
            reconnect_delay_strategy=_GivingUpDelay(
                self._gave_up,
                self.chooser,
                initial_delay=100,
                maximum_delay=2000,
                maximum_retry_time=self.args.retry_time,
                jitter=0.5,
            ),
            logon_timeout=attempt,
            connect_timeout=attempt / 1000 if attempt else None,
            close_timeout=timeout or 5000,
            ssl_context=self.ssl_context,
        )
        self.client = client
        self.connected = True
        client.set_failed_write_handler(self._failed_write)
        if self.args.heartbeat:
            client.set_heartbeat(self.args.heartbeat)
        start = time.monotonic()
        try:
            client.connect_and_logon(timeout=retry)
        except RetryLimitError:
            if self.chooser.refused is not None:
                raise self.chooser.refused from None  # the authentication error, at once
            raise
        except builtins.TimeoutError:  # (AMPS' TimeoutError is a subclass)
            if self.chooser.refused is not None:
                raise self.chooser.refused from None
            spent = (time.monotonic() - start) * 1000
            last = self.chooser.get_error() or "a logon that did not complete"
            raise RetryLimitError(
                f"gave up reconnecting after {spent:.0f} ms (--retry-time {retry}) "
                f"without success (last failure: {last})"
            ) from None
        self.progress.restart()
        return client

    def close(self) -> None:
        """Finish the output and close the client (flushing what ``publish`` stored, within
        what is left of ``--timeout``)."""
        try:
            self.writer.end()
        finally:
            client, self.client = self.client, None
            if client is not None:
                budget = None
                if self.deadline is not None:
                    budget = max(1, int((self.deadline - time.monotonic()) * 1000))
                self.unpersisted = client.close(budget)

    def error(self, exc: BaseException) -> None:
        """Show an error as one line on stderr."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        last = self.chooser.get_error()
        if (
            isinstance(exc, AMPSConnectionError)
            and not isinstance(exc, AuthenticationError | NotAmpsPortError)
            and last
            and last not in text
        ):
            text += f" (last failure: {last})"
        self.stderr.write(f"ampsclient {self.command}: {type(exc).__name__}: {text}\n")
        self.stderr.flush()
