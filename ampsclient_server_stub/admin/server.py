"""The admin HTTP listener of a :class:`~ampsclient_server_stub.server.ReferenceServer`.

Routes (``GET`` and ``HEAD`` unless said otherwise):

* ``/``: the live dashboard (HTML and JavaScript, no build step);
* ``/amps``: the host and instance trees and the list of admin actions;
* ``/amps/host[/...]`` and ``/amps/instance[/<part>[/<key>...]]``: the statistics tree or any
  node of it, bare (collections as objects keyed by id), or with a ``.json`` or ``.xml``
  suffix in AMPS' documented form (a document rooted at ``amps``, collections as lists of
  entries with an ``id``; ``/amps.json`` is the whole tree); ``/amps/instance/history``: the
  samples the dashboard draws;
* ``/amps/administrator[/...]``: the admin actions (``GET`` or ``POST``, see :mod:`.actions`),
  each with the admin token (CSRF defence, see :mod:`.origin`);
* ``/metrics``: Prometheus' text format;
* ``/static/query.js``: the dashboard's query panel; ``POST /query/logon``: where and how the
  panel logs on to the WebSocket transport (see :mod:`.query`), with the admin token as actions.

Other paths answer 404, other methods 405 (with ``Allow``), bad requests 400, oversized ones
413/431, without credentials (when security is configured) 401, an action without the admin
token or from another site 403, and a ``Host`` that does not name this interface 421.

At most :data:`MAX_CONNECTIONS` connections are open at once. When a new one arrives and every
place is taken, the connection that has waited longest for its client (idle, or trickling a
request) is closed to make room: slow or idle clients cannot lock the operator out. Only when
every connection is running a request is the new one answered 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import ssl
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ampsclient.tls import server_context

from ..config import AdminConfig, ConfigError
from ..regexes import RegexError, compile_regex
from .actions import ACTIONS, run_action
from .auth import AdminAuth
from .http import MAX_HEAD_BYTES, HttpError, Request, Response, Slot, serve_connection
from .metrics import CONTENT_TYPE, render_metrics
from .origin import TOKEN_FIELD, TOKEN_HEADER, RequestOrigin, is_loopback
from .query import query_logon
from .stats import HISTORY, StatisticsCollector
from .tree import NotFound, amps_document, find, to_xml

if TYPE_CHECKING:
    from .host import AdminHost

__all__ = ["MAX_CONNECTIONS", "AdminServer"]

logger = logging.getLogger(__name__)

MAX_CONNECTIONS: Final = 64
"""Open admin connections at once; beyond it the longest-waiting connection is closed (the
messaging ports are not affected either way)."""

_READ: Final = ("GET", "HEAD")
_ACTION: Final = ("GET", "POST")
_SUPPORTED_OPTIONS: Final = (
    "WWWAuthenticate",
    "AnonymousPaths",
    "AllowedHosts",
    "Certificate",
    "PrivateKey",
)
_QUERY_SCRIPT: Final = "query.js"
_TOKEN_PLACEHOLDER: Final = b"__AMPS_ADMIN_TOKEN__"
_BASIC_REALM: Final = re.compile(r'\s*Basic(?:\s+realm="([^"]*)")?\s*', re.I)


def _tls_context(server: AdminHost, options: dict[str, str]) -> ssl.SSLContext | None:
    """The HTTPS context of ``<Admin><Certificate>``/``<PrivateKey>`` (``None`` without).

    Raises:
        ConfigError: a key without a certificate, or files that cannot be loaded.
    """
    cert, key = options.get("Certificate"), options.get("PrivateKey")
    if not cert:
        if key:
            raise ConfigError("<Admin><PrivateKey> needs a <Certificate>")
        return None
    config = server.config
    if config.source is not None:
        base = config.source.parent
    elif config.data_dir is not None:
        base = config.data_dir
    else:
        base = Path.cwd()

    def resolve(text: str) -> Path:
        path = Path(text).expanduser()
        return path if path.is_absolute() else base / path

    try:
        return server_context(certfile=resolve(cert), keyfile=resolve(key) if key else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"<Admin><Certificate>/<PrivateKey>: cannot load them: {exc}") from None


def _encode(value: Any) -> bytes:
    return json.dumps(value, indent=1, sort_keys=True, default=str).encode() + b"\n"


def _json(value: Any, status: int = 200) -> Response:
    return Response(status, _encode(value), "application/json")


def _xml_bytes(document: dict[str, Any]) -> bytes:
    return to_xml(document).encode()


async def _json_off_loop(value: Any) -> Response:
    """:func:`_json` encoded in a worker thread (a tree of thousands of clients takes a
    fifth of a second to encode; the loop keeps serving meanwhile). ``value`` is a fresh tree
    nobody else holds, so the thread reads it safely."""
    return Response(200, await asyncio.to_thread(_encode, value), "application/json")


class AdminServer:
    """Serves statistics, admin actions, ``/metrics`` and the dashboard over HTTP/1.1.

    Args:
        server: the running reference server (read on its event loop).
        host, port: the listening address (port 0 picks a free port).
        interval: seconds between statistics samples (AMPS ``<Admin><Interval>``, at least 1).
        options: other ``<Admin>`` options: ``WWWAuthenticate`` (``Basic realm="..."``),
            ``AnonymousPaths`` (a regular expression), ``AllowedHosts`` (host names, comma
            separated, the ``Host`` field may carry besides IP addresses and ``localhost``),
            ``Certificate`` and ``PrivateKey`` (PEM files: the interface is served over
            HTTPS, as AMPS does with them); any other is refused.

    Raises:
        ConfigError: an option this server does not support, or a bad value.
    """

    def __init__(
        self,
        server: AdminHost,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        interval: float = 1.0,
        options: dict[str, str] | None = None,
    ) -> None:
        options = dict(options or {})
        unknown = sorted(set(options) - set(_SUPPORTED_OPTIONS))
        if unknown:
            raise ConfigError(
                f"<Admin> option(s) {', '.join(unknown)} not supported by the reference server "
                f"(supported: InetAddr, Interval, {', '.join(_SUPPORTED_OPTIONS)})"
            )
        if interval < 1.0:
            raise ConfigError(f"<Admin><Interval> must be at least 1s, got {interval:g}s")
        realm = "AMPS Admin"
        www = options.get("WWWAuthenticate")
        if www is not None:
            match = _BASIC_REALM.fullmatch(www)
            if match is None:
                raise ConfigError(
                    f"<Admin><WWWAuthenticate> {www!r}: only Basic authentication is supported"
                )
            realm = match[1] or realm
        anonymous = None
        if options.get("AnonymousPaths"):
            try:
                anonymous = compile_regex(options["AnonymousPaths"])
            except RegexError as exc:
                raise ConfigError(
                    f"<Admin><AnonymousPaths>: bad regular expression: {exc}"
                ) from None
        self.server = server
        self.host = host
        self.requested_port = port
        self.interval = interval
        self.collector = StatisticsCollector(server, history=HISTORY)
        self.auth = AdminAuth(server.security, realm=realm, anonymous=anonymous)
        self.ssl_context = _tls_context(server, options)
        allowed = [h for h in (options.get("AllowedHosts") or "").split(",") if h.strip()]
        self.origin = RequestOrigin(bind_host=host, allowed_hosts=allowed)
        self.requests = 0
        """Requests answered."""
        self._listener: asyncio.Server | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._connections: dict[asyncio.Task[None], Slot] = {}
        self.evicted = 0
        """Waiting connections closed to make room for a new one."""
        self._dashboard: bytes | None = None
        self._static: dict[str, bytes] = {}

    @classmethod
    def from_config(cls, server: AdminHost, config: AdminConfig) -> AdminServer:
        """An admin server for the ``<Admin>`` section of the configuration.

        Raises:
            ConfigError: ``<FileName>`` (statistics are kept in memory only) or an option
                this server does not support.
        """
        if config.file_name is not None and str(config.file_name) != ":memory:":
            raise ConfigError(
                "<Admin><FileName> is not supported by the reference server: statistics are "
                f"kept in memory ({HISTORY} samples); remove it"
            )
        return cls(
            server,
            host=config.host,
            port=config.port,
            interval=config.interval if config.interval is not None else 1.0,
            options=dict(config.extra),
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind the listener and start sampling."""
        self.collector.sample()
        self._listener = await asyncio.start_server(
            self._accept,
            self.host,
            self.requested_port,
            limit=MAX_HEAD_BYTES,
            ssl=self.ssl_context,
            ssl_handshake_timeout=10 if self.ssl_context is not None else None,
        )
        self._sampler = asyncio.create_task(self._sample_loop())
        logger.info("admin interface at %s", self.url)
        if not is_loopback(self.host) and not self.auth.enabled:
            logger.warning(
                "SECURITY WARNING: the admin interface listens on %s (beyond this machine) "
                "without authentication: anyone who can reach it can read every client and "
                "topic and run admin actions. Configure <Authentication> or listen on "
                "127.0.0.1 (<Admin><InetAddr>127.0.0.1:PORT</InetAddr>).",
                self.host or "every address",
            )

    async def stop(self) -> None:
        """Close the listener and every admin connection."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        if self._listener is not None:
            self._listener.close()
            for task in list(self._connections):
                task.cancel()
            if self._connections:
                await asyncio.gather(*self._connections, return_exceptions=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listener.wait_closed(), 2)
            self._listener = None

    @property
    def port(self) -> int:
        """The bound port."""
        if self._listener is None or not self._listener.sockets:
            raise RuntimeError("the admin interface is not listening")
        port: int = self._listener.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` (``https`` with a certificate) of the listener."""
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{host}:{self.port}/"

    async def _sample_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.collector.sample()
            except Exception:  # never let statistics stop the sampler
                logger.exception("admin statistics sample failed")

    def _make_room(self) -> bool:
        """Close the connection that has waited longest for its client; ``False`` when every
        connection is running a request."""
        waiting = [(slot.since, task) for task, slot in self._connections.items() if not slot.busy]
        if not waiting:
            return False
        _, task = min(waiting, key=lambda item: item[0])
        del self._connections[task]
        task.cancel()
        self.evicted += 1
        return True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or (len(self._connections) >= MAX_CONNECTIONS and not self._make_room()):
            writer.write(
                Response(503, b"too many admin connections\n", "text/plain").encode(
                    keep_alive=False
                )
            )
            writer.close()
            return
        slot = self._connections[task] = Slot(since=asyncio.get_running_loop().time())
        try:
            await serve_connection(reader, writer, self.handle, slot=slot)
        except asyncio.CancelledError:
            # closed by stop() or to make room (serve_connection closed the socket): end
            # quietly, as asyncio's stream callback (3.11) calls exception() on this task
            # and logs the CancelledError of a cancelled one as an unhandled error
            if task.cancelling() == 0:
                raise
        finally:
            self._connections.pop(task, None)

    # ------------------------------------------------------------------ routing

    async def handle(self, request: Request) -> Response:
        """Answer one request (the :data:`~.http.Handler` of every connection)."""
        self.requests += 1
        self.origin.check_host(request)
        path = list(request.path)
        form: str | None = None
        for suffix in (".json", ".xml"):
            if path and path[-1].endswith(suffix):
                path[-1] = path[-1][: -len(suffix)]
                form = suffix[1:]
                break
        if path[:3] == ["amps", "host", "cpu"]:
            path[2] = "cpus"  # the guide's "Admin path: /amps/host/cpu/<id>/<metric>"
        if not path:
            self._allow(request, _READ)
            await self.auth.check(request)
            return Response(200, self.dashboard(), "text/html; charset=utf-8")
        if path == ["static", _QUERY_SCRIPT] and form is None:
            self._allow(request, _READ)
            await self.auth.check(request)
            return Response(200, self.static(_QUERY_SCRIPT), "text/javascript; charset=utf-8")
        if path == ["query", "logon"] and form is None:
            self._allow(request, ("POST",))
            user = await self.auth.check(request)
            self.origin.check_action(request)
            return _json(query_logon(self.server, user))
        if path == ["metrics"] and form is None:
            self._allow(request, _READ)
            await self.auth.check(request)
            tree = await self.collector.build()
            host = self.collector.host.tree()
            text = await asyncio.to_thread(render_metrics, tree, host)
            return Response(200, text.encode(), CONTENT_TYPE)
        if path[0] != "amps":
            raise HttpError(404, f"not found: {request.target}")
        if len(path) >= 2 and path[1] == "administrator":
            self._allow(request, _ACTION)
            await self.auth.check(request)
            if len(path) == 2 and request.method in _READ:
                return _json(self._action_list())
            self.origin.check_action(request)
            if len(path) == 2:
                return _json(self._action_list())
            return _json(await run_action(self.server, request))
        self._allow(request, _READ)
        if len(path) > 1 and path[1] not in ("host", "instance"):
            raise HttpError(404, f"not found: {request.target}")
        await self.auth.check(request)
        if path[1:] == ["instance", "history"] and form is None:
            return _json(self.collector.history())
        try:
            node, steps = find(await self._root(path), path[1:])
        except (KeyError, NotFound):
            raise HttpError(404, f"not found: {request.target}") from None
        if form is None:
            return await _json_off_loop(node)
        document = amps_document(path, node, [False, *steps])
        if form == "json":
            return await _json_off_loop(document)
        body = await asyncio.to_thread(_xml_bytes, document)
        return Response(200, body, "application/xml; charset=utf-8")

    async def _root(self, path: list[str]) -> dict[str, Any]:
        """As much of the tree below ``/amps`` as ``path`` needs (an instance request builds
        only the part it names).

        Raises:
            KeyError: the instance has no such part.
        """
        collector = self.collector
        if len(path) == 1:
            return {
                "host": collector.host.tree(),
                "instance": await collector.build(),
                "administrator": dict(ACTIONS),
            }
        if path[1] == "host":
            return {"host": collector.host.tree()}
        if len(path) == 2:
            return {"instance": await collector.build()}
        return {"instance": {path[2]: await collector.build(path[2])}}

    def _action_list(self) -> dict[str, Any]:
        return {
            "actions": dict(ACTIONS),
            TOKEN_FIELD: self.origin.token,
            "token_header": TOKEN_HEADER,
        }

    @staticmethod
    def _allow(request: Request, methods: tuple[str, ...]) -> None:
        if request.method not in methods:
            raise HttpError(
                405,
                f"{request.method} not allowed here (allowed: {', '.join(methods)})",
                {"Allow": ", ".join(methods)},
            )

    def dashboard(self) -> bytes:
        """The dashboard page (read once from the package)."""
        if self._dashboard is None:
            source = resources.files(__package__ or "ampsclient_server_stub.admin")
            page = (source / "static" / "dashboard.html").read_bytes()
            self._dashboard = page.replace(_TOKEN_PLACEHOLDER, self.origin.token.encode())
        return self._dashboard

    def static(self, name: str) -> bytes:
        """A file of the package's ``static`` folder (read once)."""
        data = self._static.get(name)
        if data is None:
            source = resources.files(__package__ or "ampsclient_server_stub.admin")
            data = self._static[name] = (source / "static" / name).read_bytes()
        return data
