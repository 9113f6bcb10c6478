"""A small blocking admin client for a running instance's replication (over its
``amps-replication`` port, authenticated with the same shared secret as the links).

For tests, harnesses and operators::

    from ampsclient_server_stub.replication.admin import admin_call

    admin_call("127.0.0.1", 10004, "s3cret", "status")
    admin_call("127.0.0.1", 10004, "s3cret", "downgrade", destination="amps-2")
    admin_call("127.0.0.1", 10004, "s3cret", "partition", peer="amps-2")
    admin_call("127.0.0.1", 10004, "s3cret", "heal", peer="amps-2")

In process, the same commands are methods of the running
:class:`~ampsclient_server_stub.replication.manager.ReplicationManager`
(``ReferenceServer.replication``), or :meth:`ReferenceServer.replication_admin
<ampsclient_server_stub.server.ReferenceServer.replication_admin>`.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from ampsclient.authenticator import challenge_response

from ..errors import ReplicationError
from .protocol import PROTOCOL_VERSION, decode_frame, encode_frame, make_nonce, proof, verify_proof

__all__ = ["AdminError", "admin_call"]

_LEN = struct.Struct(">I")


class AdminError(ReplicationError, RuntimeError):
    """The instance refused the admin connection or the command failed."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise AdminError("connection closed by the instance")
        out += chunk
    return bytes(out)


def _recv(sock: socket.socket) -> tuple[dict[str, Any], Any]:
    (n,) = _LEN.unpack(_recv_exact(sock, 4))
    header, body = decode_frame(_recv_exact(sock, n))
    if header.get("c") == "rreject":
        raise AdminError(f"refused: {header.get('reason')}")
    return header, body


def admin_call(
    host: str,
    port: int,
    secret: str,
    cmd: str,
    *,
    timeout: float = 10.0,
    user: str = "",
    password: str = "",
    **args: Any,
) -> Any:
    """Run one admin command on the instance listening for replication at ``host:port``.

    ``user``/``password`` log on to the replication transport (needed when it has
    ``<Authentication>``; a ``challenge-response`` challenge is answered with the password).

    Raises:
        AdminError: authentication failed, the command is unknown or failed.
        OSError: the instance cannot be reached.
    """
    nonce = make_nonce()
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(
            encode_frame(
                {"c": "rhello", "name": "", "role": "admin", "nonce": nonce, "v": PROTOCOL_VERSION}
            )
        )
        header, _ = _recv(sock)
        if header.get("c") != "rchallenge":
            raise AdminError(f"unexpected {header.get('c')!r} from the instance")
        name = str(header.get("name") or "")
        if not verify_proof(secret, "listener", nonce, name, header.get("proof")):
            raise AdminError(f"instance {name!r} does not know the shared secret")
        sock.sendall(
            encode_frame({"c": "rauth", "proof": proof(secret, "dialer", str(header["nonce"]), "")})
            + encode_frame({"c": "rlogon", "user": user, "pw": password})
        )
        while True:
            header, _ = _recv(sock)
            if header.get("c") == "rready":
                break
            if header.get("c") == "rlogonack" and header.get("status") == "retry":
                answer = challenge_response(user, password, str(header.get("pw") or ""))
                sock.sendall(encode_frame({"c": "rlogon", "user": user, "pw": answer}))
        sock.sendall(encode_frame({"c": "radmin", "cmd": cmd}, args))
        while True:
            header, body = _recv(sock)
            if header.get("c") == "rresult":
                break
        if not header.get("ok"):
            raise AdminError(str(header.get("error") or "admin command failed"))
        return body


def main(argv: list[str] | None = None) -> int:
    """``python -m ampsclient_server_stub.replication.admin HOST:PORT COMMAND [key=value ...]``.

    The secret comes from ``--secret`` or the ``AMPS_REPLICATION_SECRET`` environment
    variable; the logon (when the transport has ``<Authentication>``) from ``--user`` and
    ``AMPS_REPLICATION_PASSWORD``. Prints the result as JSON; exit status 1 when the command
    failed.
    """
    import argparse
    import json
    import os
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m ampsclient_server_stub.replication.admin",
        description="Replication admin: status, downgrade/upgrade destination=NAME, "
        "partition/heal peer=NAME, journal.",
    )
    parser.add_argument("address", help="the instance's amps-replication address, HOST:PORT")
    parser.add_argument("command")
    parser.add_argument("args", nargs="*", help="key=value arguments")
    parser.add_argument("--secret", default=os.environ.get("AMPS_REPLICATION_SECRET", ""))
    parser.add_argument(
        "--user", default="", help="logon user (password: $AMPS_REPLICATION_PASSWORD)"
    )
    options = parser.parse_args(argv)
    host, _, port = options.address.rpartition(":")
    kwargs = dict(arg.split("=", 1) for arg in options.args if "=" in arg)
    try:
        result = admin_call(
            host or "127.0.0.1",
            int(port),
            options.secret,
            options.command,
            user=options.user,
            password=os.environ.get("AMPS_REPLICATION_PASSWORD", ""),
            **kwargs,
        )
    except (AdminError, OSError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
