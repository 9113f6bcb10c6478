"""The sub-commands: each takes a :class:`Session` and returns an exit status."""

from __future__ import annotations

import gzip
import io
import os
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from typing import IO, cast

from ..command import Command
from ..exceptions import TimeoutError, UsageError
from ..protocol.acks import AckType
from ..protocol.bookmarks import BookmarkRange, parse_bookmark
from ..protocol.message import Message
from ..stream import MessageStream
from .exit_codes import ExitCode
from .formats import Outgoing, read_messages
from .session import Session, redact, resolve_bookmark

__all__ = ["COMMANDS", "STREAMING"]


def _input(session: Session) -> tuple[IO[bytes], int | None]:
    """The input stream and its size in bytes, when known (for the progress bar)."""
    path: str | None = session.args.file
    if path is None:
        return sys.stdin.buffer, None
    try:
        if path.endswith(".gz"):  # decompressed as read; its size is not known
            return cast(IO[bytes], gzip.open(path, "rb")), None
        if path.endswith(".zip"):  # every member, one after the other, in the archive's order
            with zipfile.ZipFile(path) as archive:
                data = b"".join(archive.read(info) for info in archive.infolist())
            return io.BytesIO(data), len(data)
        source = open(path, "rb")  # noqa: SIM115 - closed by publish()
    except OSError as exc:
        raise UsageError(f"--file {path!r}: {exc.strerror}") from None
    except zipfile.BadZipFile as exc:
        raise UsageError(f"--file {path!r}: {exc}") from None
    return source, os.fstat(source.fileno()).st_size


def publish(session: Session) -> ExitCode:
    """Publish each message read (or ``--data``); wait until all are persisted."""
    args = session.args
    if args.topic is None and (args.data is not None or args.format == "raw"):
        raise UsageError("--topic is needed with --data and with --format raw")
    if args.data is not None:
        messages: Iterator[Outgoing] = iter([Outgoing(args.topic, args.data.encode())])
        source: IO[bytes] | None = None
    else:
        source, size = _input(session)
        session.progress.total = size
        session.progress.unit = "bytes"
        delimiter = bytes([args.delimiter]) if args.delimiter is not None else b"\n"
        messages = read_messages(source, args.format, args.topic, delimiter=delimiter)
    try:
        first = next(messages, None)  # bad input fails before connecting
        client = session.connect()
        progress = session.progress
        message = first
        start, sent = time.monotonic(), 0
        while message is not None:
            if args.rate is not None:  # message n leaves at start + n / rate
                wait = start + sent / args.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            if not args.delta:
                client.publish(
                    message.topic,
                    message.data,
                    message.expiration,
                    correlation_id=message.correlation_id,
                    sow_key=message.sow_key,
                )
            elif message.correlation_id is None and message.sow_key is None:
                client.delta_publish(message.topic, message.data, message.expiration)
            else:
                raise UsageError("--delta publishes no correlation_id nor sow_key")
            sent += 1
            progress.tick(message.size)
            message = next(messages, None)
        try:  # --timeout bounds this wait and the close's together
            client.publish_flush(session.remaining())
        except TimeoutError:
            pass  # the summary counts what is not persisted; the exit status is 5
    finally:
        if source is not None and source is not sys.stdin.buffer:
            source.close()
    return ExitCode.OK


def _drain(
    session: Session,
    stream: MessageStream,
    keep: Callable[[Message], bool],
    stop: Callable[[Message], bool] = lambda m: False,
) -> None:
    """Write the messages of ``stream`` that ``keep`` selects, until ``stop`` or ``--count``."""
    limit: int = getattr(session.args, "count", 0) or 0
    session.progress.total = limit or None
    writer, progress = session.writer, session.progress
    session.stream = stream
    if session.lost is not None:
        stream.close()
    try:
        for message in stream:
            if keep(message):
                writer.write(message)
                progress.tick()
                if limit and progress.count >= limit:
                    return
            elif stop(message):
                return
    finally:
        session.stream = None
        stream.close()
    if session.lost is not None:
        raise session.lost


def _query(command: str, session: Session) -> Command:
    args = session.args
    cmd = Command(command).set_topic(args.topic).set_filter(args.filter)
    cmd.set_options(args.options)
    if getattr(args, "bookmark", None) is not None:
        cmd.set_bookmark(resolve_bookmark(args.bookmark))
    cmd.set_timeout(args.timeout)
    return cmd


def _data(message: Message) -> bool:
    return message.command in ("publish", "sow")


def subscribe(session: Session) -> ExitCode:
    """Print what is published to ``--topic`` (from ``--bookmark``, when given); with
    ``--ack``, acknowledge each queue message once written."""
    args = session.args
    cmd = _query("delta_subscribe" if args.delta else "subscribe", session)
    if args.backlog is not None:
        cmd.set_options(",".join(o for o in (args.options, f"max_backlog={args.backlog}") if o))
    client = session.connect()
    session.writer.begin()
    keep: Callable[[Message], bool] = _data
    if args.ack:

        def keep(message: Message) -> bool:
            if not _data(message):
                return False
            if message.topic and message.bookmark and message.lease_period:
                client.ack(message.topic, message.bookmark)
            return True

    _drain(session, client.execute(cmd), keep)
    return ExitCode.OK


def _sow_command(name: str, session: Session) -> Command:
    args = session.args
    cmd = _query(name, session).set_batch_size(args.batch_size)
    cmd.set_top_n(args.top_n).set_order_by(args.order_by)
    return cmd


def sow(session: Session) -> ExitCode:
    """Print the SOW records of ``--topic`` matching ``--filter``."""
    cmd = _sow_command("sow", session)
    client = session.connect()
    session.writer.begin()
    _drain(session, client.execute(cmd), lambda m: m.command == "sow")
    return ExitCode.OK


def sow_and_subscribe(session: Session) -> ExitCode:
    """Print the SOW records, then every update (and ``oof`` notices in json/jsonl)."""
    name = "sow_and_delta_subscribe" if session.args.delta else "sow_and_subscribe"
    cmd = _sow_command(name, session)
    client = session.connect()
    session.writer.begin()
    raw = session.args.format == "raw"
    _drain(
        session,
        client.execute(cmd),
        lambda m: _data(m) or (m.command == "oof" and not raw),
    )
    return ExitCode.OK


def sow_delete(session: Session) -> ExitCode:
    """Delete SOW records; print how many matched and were deleted."""
    args = session.args
    if (args.keys is None) == (args.filter is None):
        raise UsageError("sow_delete needs --filter or --keys (one of them)")
    client = session.connect()
    session.writer.begin()
    if args.keys is not None:
        stats = client.sow_delete_by_keys(args.topic, args.keys, timeout=args.timeout)
    else:
        stats = client.sow_delete(args.topic, args.filter, timeout=args.timeout)
    assert isinstance(stats, Message)  # no handler: the stats ack
    matches = stats.get_matches() or 0
    deleted = stats.get_records_deleted() or 0
    session.writer.write_document(
        {"topic": args.topic, "matches": matches, "records_deleted": deleted},
        f"deleted {deleted} of {matches} matching records from {args.topic}",
    )
    session.extra = f"{deleted} deleted"
    return ExitCode.OK


def ping(session: Session) -> ExitCode:
    """Log on, time ``--count`` round trips (a flush each), print the server's answer."""
    progress = session.progress
    start = time.monotonic()
    client = session.connect()
    logon_ms = (time.monotonic() - start) * 1000
    session.writer.begin()
    for _ in range(session.args.count):
        start = progress.elapsed
        client.flush(session.args.timeout)  # --timeout bounds each round trip
        rtt = (progress.elapsed - start) * 1000
        progress.tick()
        version = client.get_server_version_info() or "unknown version"
        session.writer.write_document(
            {
                "server": redact(client.uri),
                "version": version,
                "logon_ms": round(logon_ms, 3),
                "round_trip_ms": round(rtt, 3),
            },
            f"pong from {redact(client.uri)} ({version}): logon {logon_ms:.1f} ms, "
            f"round trip {rtt:.2f} ms",
        )
    return ExitCode.OK


def replay(session: Session) -> ExitCode:
    """A bookmark subscription: print what the transaction log replays, then stop.

    Stops at the ``completed`` ack (the replay caught up, or a range's end), or with
    ``--follow`` keeps printing live messages (until a range's end, Ctrl-C or ``--count``).
    """
    args = session.args
    cmd = _query("subscribe", session).add_ack_type(AckType.COMPLETED)
    is_range = isinstance(parse_bookmark(resolve_bookmark(args.bookmark)), BookmarkRange)
    client = session.connect()
    session.writer.begin()

    def done(message: Message) -> bool:
        completed = message.command == "ack" and bool(message.ack_type & AckType.COMPLETED)
        return completed and (not args.follow or is_range)

    _drain(session, client.execute(cmd), lambda m: m.command == "publish", done)
    return ExitCode.OK


COMMANDS: dict[str, Callable[[Session], ExitCode]] = {
    "publish": publish,
    "subscribe": subscribe,
    "sow": sow,
    "sow_and_subscribe": sow_and_subscribe,
    "sow_delete": sow_delete,
    "ping": ping,
    "replay": replay,
}
"""Each sub-command's implementation."""

STREAMING = frozenset({"subscribe", "sow_and_subscribe"})
"""Commands without an end: Ctrl-C is their normal stop (exit status 0); also ``replay
--follow``."""
