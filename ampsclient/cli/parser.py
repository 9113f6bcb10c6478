"""The ``ampsclient`` command line: one argparse sub-command per AMPS command."""

from __future__ import annotations

import argparse
import os

from .._version import __version__

__all__ = ["DEFAULT_SERVER", "build_parser", "default_servers"]

DEFAULT_SERVER = "tcp://127.0.0.1:9007/amps/json"
"""Where to connect without ``--server`` (or ``AMPSCLIENT_SERVER``)."""

_EPILOG = """\
exit status: 0 done (also Ctrl-C of subscribe, sow_and_subscribe, replay --follow);
1 the server refused a command; 2 bad command line; 3 no server reachable; 4 timed out;
5 publishes left unpersisted; 6 input not in --format; 130 Ctrl-C of any other command.
AMPS spark's syntax: ampsclient spark help (also the amps-spark command).
"""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _byte(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 255:
        raise argparse.ArgumentTypeError(f"must be a byte value, 0 to 255, got {value}")
    return value


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument(
        "--server",
        "-s",
        action="append",
        metavar="URI",
        help="server URI, e.g. tcp://host:9007/amps/json; repeat it for failover "
        f"(default: $AMPSCLIENT_SERVER or {DEFAULT_SERVER})",
    )
    group.add_argument(
        "--name",
        help="client name (default: ampsclient-cli-<host>-<pid>); a stable name "
        "lets the server de-duplicate a publisher's messages",
    )
    group.add_argument(
        "--format",
        "-f",
        choices=("raw", "json", "jsonl"),
        default="raw",
        help="raw: bodies, one per line; jsonl: one JSON envelope per line; json: one JSON "
        "array (default raw)",
    )
    group.add_argument(
        "--template",
        metavar="TEXT",
        help="write each message as TEXT, with {data} {topic} {bookmark} {sow_key} "
        "{correlation_id} {timestamp} {command} {sequence} {expiration} {user_id} "
        "{lease_period} {message_length} replaced (AMPS spark's -format)",
    )
    group.add_argument(
        "--delimiter",
        type=_byte,
        metavar="N",
        help="the decimal value of the byte that ends each message, read (publish: raw and "
        "jsonl) and written (raw and --template); default 10, a line end",
    )
    group.add_argument(
        "--timeout",
        type=_positive_int,
        default=30_000,
        metavar="MS",
        help="wait at most this long for an ack, for publish's persisted acks in all, and for "
        "each logon attempt (0 = no limit; default 30000)",
    )
    group.add_argument(
        "--retry-time",
        type=_positive_int,
        default=5_000,
        metavar="MS",
        help="the whole time allowed to reach and log on to a server, every attempt included "
        "(0 = never give up; default 5000)",
    )
    group.add_argument(
        "--heartbeat",
        type=float,
        default=None,
        metavar="SECONDS",
        help="ask for heartbeats, to detect a silent server (default: none)",
    )
    group.add_argument(
        "--quiet", "-q", action="store_true", help="no progress line and no summary on stderr"
    )
    group.add_argument(
        "--verbose", "-v", action="count", default=0, help="log the client's events (-vv: debug)"
    )
    _security(common)
    return common


def _security(common: argparse.ArgumentParser) -> None:
    """The credentials and TLS options."""
    creds = common.add_argument_group(
        "credentials (for --server URIs with a user and no password: tcp://USER@host:port/...)"
    )
    secret = creds.add_mutually_exclusive_group()
    secret.add_argument(
        "--password-file",
        metavar="FILE",
        help="read the password from the first line of FILE (keep it chmod 600), so it is not "
        "in the command line (visible in ps) nor in the shell's history",
    )
    secret.add_argument(
        "--ask-password",
        action="store_true",
        help="prompt for the password on the terminal (not echoed)",
    )
    tls = common.add_argument_group("TLS (tcps:// and wss:// servers)")
    tls.add_argument(
        "--cafile",
        metavar="PEM",
        help="the CAs to trust for the server's certificate (default: the system's trust store)",
    )
    tls.add_argument(
        "--cert", metavar="PEM", help="client certificate, for servers that require one"
    )
    tls.add_argument("--key", metavar="PEM", help="the client certificate's key, if not in --cert")
    tls.add_argument(
        "--insecure",
        action="store_true",
        help="do not verify the server's certificate (throwaway tests only: anyone in the "
        "path can read and change the traffic)",
    )


def _query(p: argparse.ArgumentParser, *, topic_required: bool = True) -> None:
    p.add_argument("--topic", "-t", required=topic_required, help="topic or topic regex")
    p.add_argument("--filter", help='content filter, e.g. "/qty > 10"')
    p.add_argument("--options", "-o", help="command options, e.g. oof,conflation=1s")


def _bookmark(p: argparse.ArgumentParser, default: str | None) -> None:
    p.add_argument(
        "--bookmark",
        "-b",
        default=default,
        help="EPOCH, NOW, a bookmark, a timestamp YYYYmmddTHHMMSS[Z], a comma list, or a "
        "range like [start:end)" + (f" (default {default})" if default else ""),
    )


def _delta(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--delta",
        action="store_true",
        help="a delta subscription: updates carry only the fields that changed",
    )


def _queue(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ack",
        action="store_true",
        help="acknowledge each queue message once written (else it returns to the queue when "
        "its lease ends or the command exits)",
    )
    p.add_argument(
        "--backlog",
        type=_positive_int,
        metavar="N",
        help="queue messages leased at once, unacknowledged (the max_backlog option)",
    )


def _rate(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _count(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--count", "-n", type=_positive_int, default=0, help="stop after this many messages"
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``ampsclient`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="ampsclient",
        description="Publish, subscribe, query and replay on an AMPS server.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ampsclient {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common()

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=text,
            description=text,
            parents=[common],
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    p = command("publish", "publish the messages read from stdin (or --file, or --data)")
    p.add_argument(
        "--topic", "-t", help="topic of every message (without it: JSON envelopes with a topic)"
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--file", "-i", help="read the messages from this file")
    source.add_argument("--data", "-d", help="publish this one message")
    p.add_argument("--delta", action="store_true", help="delta_publish: merge into the SOW record")
    p.add_argument(
        "--rate",
        type=_rate,
        metavar="PER_SECOND",
        help="publish at most this many messages a second (0.25: one every 4 s)",
    )

    p = command("subscribe", "print the messages published to a topic, until Ctrl-C")
    _query(p)
    _delta(p)
    _queue(p)
    _bookmark(p, None)
    _count(p)

    p = command("sow", "print the State of the World records of a topic")
    _query(p)
    _bookmark(p, None)
    p.add_argument("--batch-size", type=_positive_int, default=100, help="records per batch")
    p.add_argument("--top-n", type=_positive_int, default=None, help="at most this many records")
    p.add_argument("--order-by", help='sort order, e.g. "/price DESC"')

    p = command("sow_and_subscribe", "print the SOW records, then the updates, until Ctrl-C")
    _query(p)
    _delta(p)
    _bookmark(p, None)
    p.add_argument("--batch-size", type=_positive_int, default=100, help="records per batch")
    p.add_argument("--top-n", type=_positive_int, default=None, help="at most this many records")
    p.add_argument("--order-by", help='sort order, e.g. "/price DESC"')
    _count(p)

    p = command("sow_delete", "delete the SOW records matching --filter (or --keys)")
    p.add_argument("--topic", "-t", required=True, help="SOW topic")
    p.add_argument("--filter", help="content filter of the records to delete")
    p.add_argument("--keys", help="comma-separated SOW keys to delete (instead of --filter)")

    p = command("ping", "connect, log on and time a round trip to the server")
    p.add_argument("--count", "-n", type=_positive_int, default=1, help="round trips to time")

    p = command("replay", "replay a topic from the transaction log (a bookmark subscription)")
    _query(p)
    _bookmark(p, "EPOCH")
    p.add_argument(
        "--follow",
        action="store_true",
        help="after the replay, keep printing live messages until Ctrl-C (or a range's end)",
    )
    _count(p)
    return parser


def default_servers() -> list[str]:
    """The servers used without ``--server``."""
    return [os.environ.get("AMPSCLIENT_SERVER") or DEFAULT_SERVER]
