"""Helpers of the admin interface tests: a server with an admin port, and a small HTTP client."""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
from typing import Any

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import AdminConfig, ServerConfig, default_config


def with_admin(config: ServerConfig | None = None, **admin: Any) -> ServerConfig:
    """``config`` (default: :func:`default_config` on free ports) with an ``<Admin>`` on a free
    loopback port."""
    base = config if config is not None else default_config(tcp_port=0, ws_port=0)
    return dataclasses.replace(base, admin=AdminConfig(host="127.0.0.1", port=0, **admin))


def admin_port(thread: ServerThread) -> int:
    admin = thread.server.admin
    assert admin is not None, "the admin interface is not running"
    return admin.port


def request(
    port: int,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    auth: tuple[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request on a fresh connection: (status, lower-cased headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        sent = dict(headers or {})
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            sent["Authorization"] = f"Basic {token}"
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def get_json(port: int, path: str, **kwargs: Any) -> Any:
    status, _, body = request(port, path, **kwargs)
    assert status == 200, f"{path}: {status} {body!r}"
    return json.loads(body)


def admin_token(port: int, **kwargs: Any) -> str:
    """The admin token actions must carry (``GET /amps/administrator``, field ``token``)."""
    token: str = get_json(port, "/amps/administrator", **kwargs)["token"]
    return token


def action(port: int, path: str, *, method: str = "POST", **kwargs: Any) -> Any:
    """Run an admin action as a script does: with the admin token in its header."""
    auth = kwargs.get("auth")
    headers = {"X-AMPS-Admin-Token": admin_token(port, auth=auth), **kwargs.pop("headers", {})}
    return request(
        port, path, method=method, headers=headers, body=b"" if method == "POST" else None, **kwargs
    )


def action_json(port: int, path: str, **kwargs: Any) -> Any:
    status, _, body = action(port, path, **kwargs)
    assert status == 200, f"{path}: {status} {body!r}"
    return json.loads(body)
