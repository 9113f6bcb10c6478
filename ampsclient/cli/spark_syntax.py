"""AMPS ``spark`` syntax: ``ampsclient spark <command> -flag value ...`` (also ``amps-spark``).

AMPS ships a command-line client, ``spark`` (AMPS User Guide, chapter "Spark",
https://devnull.crankuptheamps.com/documentation/html/5.3.3.0/user-guide/html/chapters/spark.html),
with single-dash flags and a ``-server host:port`` without a scheme. This module translates such
a command line into ``ampsclient``'s own options and runs the same commands; it runs nothing of
its own. A spark flag we cannot honour is refused with an error naming it (exit status 2).
``--long`` options after the spark flags are ``ampsclient``'s own and are passed on as they are
(``--count 2``, ``--quiet``...).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, TextIO

from ..exceptions import UsageError
from .exit_codes import ExitCode
from .main import main as ampsclient_main

__all__ = ["COMMANDS", "SparkSyntaxError", "main", "server_uri", "translate"]


@dataclass(frozen=True)
class _Flag:
    option: str | None
    """Our long option, or ``None`` for a switch handled by :func:`translate`."""
    takes_value: bool
    text: str


_CONNECTION: dict[str, _Flag] = {
    "server": _Flag(None, True, "[user[:password]@]host:port of the AMPS server"),
    "proto": _Flag(None, True, "protocol: amps (default), or a legacy name such as fix"),
    "type": _Flag(None, True, "message type (json, fix, nvfix, xml, bson...)"),
    "uri": _Flag(None, True, "a full URI, tcp://host:port/amps/json (instead of -server)"),
    "secure": _Flag(None, False, "connect with TLS (tcps)"),
    "timeout": _Flag("--timeout", True, "milliseconds to wait for an ack"),
    "verbose": _Flag("--verbose", False, "log the client's events"),
}
_QUERY: dict[str, _Flag] = {
    "topic": _Flag("--topic", True, "topic or topic regex"),
    "filter": _Flag("--filter", True, "content filter"),
    "opts": _Flag("--options", True, "command options"),
    "format": _Flag("--template", True, "output format, with {data} {topic} {bookmark}..."),
    "delimiter": _Flag("--delimiter", True, "decimal value of the message separator"),
}
_SOW: dict[str, _Flag] = {
    "orderby": _Flag("--order-by", True, "sort order of the records"),
    "topn": _Flag("--top-n", True, "at most this many records"),
    "batchsize": _Flag("--batch-size", True, "records per batch"),
    "bookmark": _Flag("--bookmark", True, "historical query point"),
}

COMMANDS: dict[str, dict[str, _Flag]] = {
    "publish": {
        **_CONNECTION,
        "topic": _QUERY["topic"],
        "file": _Flag("--file", True, "file to publish (.gz and .zip read uncompressed)"),
        "delimiter": _QUERY["delimiter"],
        "delta": _Flag("--delta", False, "delta publish"),
        "rate": _Flag("--rate", True, "messages a second ('.25': one every 4 s)"),
    },
    "subscribe": {
        **_CONNECTION,
        **_QUERY,
        "delta": _Flag("--delta", False, "delta subscription"),
        "ack": _Flag("--ack", False, "acknowledge the messages of a queue"),
        "backlog": _Flag("--backlog", True, "max_backlog of a queue subscription"),
        "bookmark": _Flag("--bookmark", True, "replay from this bookmark"),
    },
    "sow": {**_CONNECTION, **_QUERY, **_SOW},
    "sow_and_subscribe": {
        **_CONNECTION,
        **_QUERY,
        **_SOW,
        "delta": _Flag("--delta", False, "delta subscription"),
    },
    "sow_delete": {**_CONNECTION, "topic": _QUERY["topic"], "filter": _QUERY["filter"]},
    "ping": dict(_CONNECTION),
}
"""Each spark command's flags that we honour."""

_REFUSED: dict[str, str] = {
    "authenticator": "a Java authenticator class cannot be loaded here; give the password in "
    "-server user:password@host:port or use --password-file / --ask-password",
    "copy": "copying messages to another server is not offered by this command line",
}
"""Spark flags we recognise and cannot honour, with the reason given."""


class SparkSyntaxError(UsageError, ValueError):
    """A spark command line we cannot run (names the flag)."""


def server_uri(
    server: str, *, proto: str | None, message_type: str | None, secure: bool, command: str
) -> str:
    """The URI for spark's ``-server [user[:pw]@]host:port``, ``-proto`` and ``-type``."""
    if "://" in server:
        raise SparkSyntaxError(f"-server {server!r}: host:port without a scheme (or use -uri)")
    host_port = server.rpartition("@")[2]
    if ":" not in host_port or not host_port.rpartition(":")[2].isdigit():
        raise SparkSyntaxError(f"-server {server!r}: expected [user[:password]@]host:port")
    protocol = (proto or "amps").lower()
    if protocol == "amps":
        if message_type is None:
            if command != "ping":
                raise SparkSyntaxError("-type is required with -proto amps (the default)")
            message_type = "json"
    elif message_type is not None and message_type.lower() != protocol:
        raise SparkSyntaxError(f"-type {message_type!r} conflicts with -proto {proto!r}")
    else:  # a legacy protocol name is also its message type: sent over the amps protocol
        message_type = protocol
    scheme = "tcps" if secure else "tcp"
    return f"{scheme}://{server}/amps/{message_type.lower()}"


def translate(argv: Sequence[str]) -> list[str]:
    """``ampsclient``'s argv for a spark argv (``publish -server h:p -topic t ...``)."""
    if not argv:
        raise SparkSyntaxError("a command is needed: " + " ".join(COMMANDS))
    command, rest = argv[0], list(argv[1:])
    if command not in COMMANDS:
        raise SparkSyntaxError(f"unknown command {command!r} (known: {' '.join(COMMANDS)})")
    flags = COMMANDS[command]
    out = [command]
    values: dict[str, str] = {}
    switches: set[str] = set()
    ours: list[str] = []
    i = 0
    while i < len(rest):
        token = rest[i]
        if token.startswith("--"):  # ours, passed on with what follows
            ours = rest[i:]
            break
        if not token.startswith("-") or len(token) == 1:
            raise SparkSyntaxError(f"unexpected argument {token!r} (flags are -name value)")
        name = token[1:].lower()
        if name in _REFUSED:
            raise SparkSyntaxError(f"-{name} is not supported: {_REFUSED[name]}")
        if name not in flags:
            raise SparkSyntaxError(f"{command}: unknown flag -{name}")
        flag = flags[name]
        if not flag.takes_value:
            switches.add(name)
            i += 1
            continue
        if i + 1 >= len(rest):
            raise SparkSyntaxError(f"-{name} needs a value")
        values[name] = rest[i + 1]
        i += 2
    if "uri" in values:
        for name in ("server", "proto", "type"):
            if name in values:
                raise SparkSyntaxError(f"-{name} and -uri: give one of them")
        out += ["--server", values.pop("uri")]
    elif "server" in values:
        out += [
            "--server",
            server_uri(
                values.pop("server"),
                proto=values.pop("proto", None),
                message_type=values.pop("type", None),
                secure="secure" in switches,
                command=command,
            ),
        ]
    else:
        raise SparkSyntaxError("-server is required")
    for name in ("proto", "type"):
        values.pop(name, None)
    for name, value in values.items():
        option = flags[name].option
        assert option is not None
        out += [option, value]
    for name in sorted(switches - {"secure"}):
        option = flags[name].option
        assert option is not None
        out.append(option)
    if command == "sow_delete" and "filter" not in values:
        raise SparkSyntaxError("sow_delete: -filter is required")
    return out + ours


def _help(command: str | None) -> tuple[str, ExitCode]:
    if command is None:
        lines = ["spark syntax of ampsclient", "Usage: ampsclient spark help [command]", ""]
        lines += ["Supported commands:", *(f"    {name}" for name in ("help", *COMMANDS))]
        return "\n".join(lines) + "\n", ExitCode.OK
    if command not in COMMANDS:
        return f"unknown command {command!r}\n", ExitCode.USAGE
    lines = [f"Usage: ampsclient spark {command} -server host:port [flags]", "", "Flags:"]
    for name, flag in sorted(COMMANDS[command].items()):
        ours = f" (ampsclient {flag.option})" if flag.option else ""
        lines.append(f"    -{name:<10} {flag.text}{ours}")
    return "\n".join(lines) + "\n", ExitCode.OK


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: IO[bytes] | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run a spark command line (default: ``sys.argv[1:]``); return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    err = stderr if stderr is not None else sys.stderr
    if not args or args[0] in ("help", "-help", "--help", "-h"):
        text, code = _help(args[1] if len(args) > 1 else None)
        out = stdout if stdout is not None else sys.stdout.buffer
        out.write(text.encode())
        out.flush()
        return int(code)
    try:
        ours = translate(args)
    except SparkSyntaxError as exc:
        err.write(f"ampsclient spark {args[0]}: UsageError: {exc}\n")
        return int(ExitCode.USAGE)
    return ampsclient_main(ours, stdout=stdout, stderr=stderr)
