"""Authentication of replication links (hooks for the replication engine).

Incoming links (the instance that receives replication): configure ``<Authentication>`` and
``<Entitlement>`` on the ``amps-replication`` transport as on any other. When the link's logon
goes through :class:`~ampsclient_server_stub.engine.broker.Broker` on a session whose
``policy`` is that transport's, the broker's guard checks it by itself. A replication engine
that reads the link's logon itself calls :func:`authenticate_link` (and
:func:`link_may_replicate` per topic).

Outgoing links (the instance that sends): ``<Destination><Transport><Authenticator>`` names the
module that provides credentials; :func:`outgoing_credentials` returns the user and an
:class:`ampsclient.Authenticator` to pass to the client's ``logon``::

    <Transport>
      <InetAddr>127.0.0.1:10005</InetAddr><Type>amps-replication</Type>
      <Authenticator>
        <Module>amps-default-authenticator-module</Module>   <!-- or challenge-response -->
        <Options><User>repl</User><PasswordFile>repl.secret</PasswordFile></Options>
      </Authenticator>
    </Transport>
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ampsclient.authenticator import (
    Authenticator,
    ChallengeResponseAuthenticator,
    DefaultAuthenticator,
)
from ampsclient_server_stub.config import DestinationConfig

from .auth import AuthVerdict, SecurityConfigError
from .policy import ServerSecurity

__all__ = ["authenticate_link", "link_may_replicate", "outgoing_credentials"]

_SUCCESS = AuthVerdict("success")


def authenticate_link(
    security: ServerSecurity,
    transport_name: str,
    user: str,
    password: str,
    state: dict[str, Any],
) -> AuthVerdict:
    """Check an incoming replication link's credentials with its transport's module.

    ``state`` must be kept by the caller for the link between ``retry`` rounds. Success when the
    transport configures no authentication.
    """
    module = security.policy_for(transport_name).auth
    if module is None:
        return _SUCCESS
    return module.authenticate(user, password, state)


def link_may_replicate(
    security: ServerSecurity, transport_name: str, user: str | None, topic: str
) -> bool:
    """Whether the link's user may write ``topic`` (its transport's entitlements)."""
    ents = security.policy_for(transport_name).entitlements
    return ents is None or ents.allowed(user, "publish", topic)


class _PresetPassword(DefaultAuthenticator):
    def __init__(self, password: str | None) -> None:
        self._password = password

    def authenticate(self, user: str | None, password: str | None) -> str | None:
        return self._password if self._password is not None else password


def outgoing_credentials(
    destination: DestinationConfig, base_dir: Path | None = None
) -> tuple[str | None, Authenticator]:
    """``(user, authenticator)`` for the outgoing link to ``destination``.

    Options: ``User``, ``Password`` or ``PasswordFile`` (first line; relative to ``base_dir``)
    or ``PasswordEnv`` (an environment variable). Module ``amps-default-authenticator-module``
    sends the password as is; ``challenge-response`` answers the server's challenge.

    Raises:
        SecurityConfigError: unknown module or unreadable password file.
    """
    extra: Mapping[str, str] = destination.extra
    prefix = "Transport/Authenticator/"
    module = (extra.get(prefix + "Module") or "amps-default-authenticator-module").strip()
    options = {
        k[len(prefix + "Options/") :]: v
        for k, v in extra.items()
        if k.startswith(prefix + "Options/")
    }
    user = options.get("User") or None
    password: str | None = options.get("Password") or None
    if options.get("PasswordFile"):
        path = Path(options["PasswordFile"]).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            password = path.read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError) as exc:
            raise SecurityConfigError(f"cannot read the password file {path}: {exc}") from None
    elif options.get("PasswordEnv"):
        password = os.environ.get(options["PasswordEnv"])
    if module == "amps-default-authenticator-module":
        return user, _PresetPassword(password)
    if module == "challenge-response":
        return user, ChallengeResponseAuthenticator(password)
    raise SecurityConfigError(f"unknown authenticator module {module!r}")
