"""Command line: ``python -m ampsclient_server_stub`` / ``ampsclient-server``.

Starts a :class:`~ampsclient_server_stub.server.ReferenceServer`, logs
``listening tcp://HOST:PORT ws://HOST:PORT`` (INFO, stderr) once every listener is bound,
and shuts down cleanly (exit status 0) on SIGINT or SIGTERM.

Without ``--config`` the server uses :func:`~ampsclient_server_stub.config.default_config`
and records every topic in a transaction log (``--no-txlog``: none), so bookmark subscriptions
work with zero configuration. With ``--config`` the file's ``<TransactionLog>`` decides what is
recorded; a file without one records nothing, as AMPS does, and bookmark subscriptions fail.
With ``--config FILE`` (AMPS-style XML) the file's settings apply, and the flags given
explicitly override them: ``--host``/``--tcp-port`` the first TCP transport,
``--host``/``--ws-port`` the first WebSocket transport, ``--name`` and ``--data-dir`` the
instance name and data directory (every relative path of the file for what the server writes
resolves against ``--data-dir``, so two servers can share one file). ``--admin-port`` turns on
the admin interface (statistics, admin actions, ``/metrics``, dashboard) on loopback, or on
``HOST:PORT``; it overrides the address of the file's ``<Admin>``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from ampsclient_server_stub.config import (
    DEFAULT_HOST,
    DEFAULT_SERVER_NAME,
    AdminConfig,
    ConfigError,
    ServerConfig,
    TransportConfig,
    default_config,
    load_config,
    load_document,
    parse_duration,
    parse_inet_addr,
)
from ampsclient_server_stub.config_expand import SAMPLE_CONFIG, add_defaults, expanded_xml

from .security.policy import ServerSecurity
from .server import ReferenceServer

__all__ = ["build_config", "main", "parse_args"]

logger = logging.getLogger("ampsclient_server_stub")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="ampsclient-server",
        description="AMPS-compatible reference server (TCP and WebSocket).",
    )
    parser.add_argument("--host", default=None, help=f"listen address (default {DEFAULT_HOST})")
    parser.add_argument(
        "--tcp-port", type=int, default=None, help="TCP port, 0 = any free port (default 9007)"
    )
    parser.add_argument(
        "--ws-port", type=int, default=None, help="WebSocket port, 0 = any (default 9008)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory: journal and SOW files; with --config, every relative path the "
        "file gives for what the server writes (journal, SOW files, MessageDiskPath) resolves "
        "against it instead of the file's directory or <DataDirectory>",
    )
    parser.add_argument("--name", default=None, help=f"instance name ({DEFAULT_SERVER_NAME})")
    parser.add_argument("--config", type=Path, default=None, help="AMPS-style XML config file")
    parser.add_argument(
        "--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING, ...)"
    )
    parser.add_argument(
        "--fsync",
        choices=("always", "interval", "never"),
        default="always",
        help="journal durability: group-committed fsync before persisted acks (always), "
        "every few ms (interval), or left to the OS (never); default always",
    )
    parser.add_argument(
        "--journal-max-age",
        default=None,
        help="remove journal files older than this (e.g. 7d, 12h), checked every minute; "
        "files still needed by a replay are kept",
    )
    parser.add_argument(
        "--persisted-ack-interval",
        default="1s",
        help="time between the persisted acks sent to bookmark subscriptions that were "
        "delivered something since their last one (e.g. 1s, 250ms; 0 = none); default 1s",
    )
    parser.add_argument(
        "--admin-port",
        default=None,
        metavar="[HOST:]PORT",
        help="serve the admin interface (statistics, actions, /metrics, dashboard) on this "
        "port of 127.0.0.1, or on HOST:PORT; 0 = any free port (default: off, unless the "
        "config file has <Admin>)",
    )
    parser.add_argument(
        "--no-txlog",
        action="store_true",
        help="without --config, record nothing (default without --config: every topic is "
        "recorded, so bookmark subscriptions work with zero configuration); with --config the "
        "file's <TransactionLog> decides what is recorded, and a file without one records "
        "nothing, as AMPS does",
    )
    tooling = parser.add_mutually_exclusive_group()
    tooling.add_argument(
        "--verify-config",
        action="store_true",
        help="check the --config file (variables, includes, every element) and exit: 0 when "
        "it is valid, 2 with the error otherwise",
    )
    tooling.add_argument(
        "--dump-config",
        action="store_true",
        help="print the --config file with its environment variables expanded, its <Include> "
        "files inlined and the defaults of <Group>, <Protocol>, <JournalSize> and "
        "<PreallocatedJournalFiles> filled in (what the server runs with), then exit",
    )
    tooling.add_argument(
        "--sample-config",
        action="store_true",
        help="print a minimal configuration the server starts with, then exit",
    )
    return parser.parse_args(argv)


def _override(transport: TransportConfig, host: str | None, port: int | None) -> TransportConfig:
    changes: dict[str, object] = {}
    if host is not None:
        changes["host"] = host
    if port is not None:
        changes["port"] = port
    return dataclasses.replace(transport, **changes) if changes else transport  # type: ignore[arg-type]


def build_config(args: argparse.Namespace) -> ServerConfig:
    """The configuration selected by the parsed command line.

    Raises:
        ConfigError: the file is invalid or a flag is out of range.
    """
    config = _build_config(args)
    admin_port = getattr(args, "admin_port", None)
    if admin_port is None:
        return config
    addr = parse_inet_addr(str(admin_port), default_host="127.0.0.1")
    if config.admin is not None:
        admin = dataclasses.replace(config.admin, host=addr.host, port=addr.port)
    else:
        admin = AdminConfig(host=addr.host, port=addr.port)
    return dataclasses.replace(config, admin=admin)


def _build_config(args: argparse.Namespace) -> ServerConfig:
    for label, port in (("--tcp-port", args.tcp_port), ("--ws-port", args.ws_port)):
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"{label} must be in 0..65535, got {port}")
    if args.config is None:
        return default_config(
            host=args.host if args.host is not None else DEFAULT_HOST,
            tcp_port=args.tcp_port if args.tcp_port is not None else 9007,
            ws_port=args.ws_port if args.ws_port is not None else 9008,
            data_dir=args.data_dir,
            name=args.name if args.name is not None else DEFAULT_SERVER_NAME,
        )
    config = load_config(args.config, data_dir=args.data_dir)
    transports: list[TransportConfig] = []
    seen_tcp = seen_ws = False
    for transport in config.transports:
        if transport.is_websocket and not seen_ws:
            seen_ws = True
            transport = _override(transport, args.host, args.ws_port)
        elif transport.type == "tcp" and not transport.is_websocket and not seen_tcp:
            seen_tcp = True
            transport = _override(transport, args.host, args.tcp_port)
        elif args.host is not None:
            transport = _override(transport, args.host, None)
        transports.append(transport)
    changes: dict[str, object] = {"transports": tuple(transports)}
    if args.name is not None:
        changes["name"] = args.name
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]


def _records_everything(args: argparse.Namespace | None) -> bool:
    """Zero configuration records every topic; a config file's <TransactionLog> decides
    otherwise (none: nothing is recorded); ``--no-txlog`` records nothing."""
    if args is None:
        return True
    return getattr(args, "config", None) is None and not getattr(args, "no_txlog", False)


async def _serve(config: ServerConfig, args: argparse.Namespace | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - e.g. Windows
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop.set))
    server = ReferenceServer(
        config,
        fsync=getattr(args, "fsync", "always"),
        record_all_topics=_records_everything(args),
        persisted_ack_interval=parse_duration(getattr(args, "persisted_ack_interval", "1s")),
    )
    await server.start()
    # The server's own objects from start-up are never garbage: keep them out of every
    # collection, and collect the young generation less often (each run of publishes makes
    # tuples by the thousand; the default 700 cost ~10% of the CPU per message, #18).
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    max_age = getattr(args, "journal_max_age", None)
    retention: asyncio.Task[None] | None = None
    if max_age:
        retention = asyncio.create_task(server.retention_loop(parse_duration(max_age), 60.0))
    try:
        await stop.wait()
        logger.info("signal received, shutting down")
    finally:
        if retention is not None:
            retention.cancel()
        await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ampsclient-server``; returns the process exit status."""
    args = parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.sample_config:
        sys.stdout.write(SAMPLE_CONFIG)
        return 0
    if (args.verify_config or args.dump_config) and args.config is None:
        logger.error("configuration error: --verify-config and --dump-config need --config")
        return 2
    try:
        if args.dump_config:
            build_config(args)  # only a valid configuration is printed
            doc = load_document(args.config)
            add_defaults(doc)
            sys.stdout.write(expanded_xml(doc))
            return 0
        config = build_config(args)
        if args.verify_config:
            ServerSecurity.from_config(config)  # modules, their options, users files, TLS
            sys.stdout.write(f"{args.config}: configuration is valid\n")
            return 0
    except ConfigError as exc:
        logger.error("configuration error: %s", exc)
        return 2
    try:
        asyncio.run(_serve(config, args))
    except (OSError, ConfigError) as exc:  # ConfigError: e.g. a certificate that cannot load
        logger.error("cannot start the server: %s", exc)
        return 1
    except KeyboardInterrupt:  # pragma: no cover - signal arrived before the handler was set
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
