"""Authentication and entitlement of replication links (called by the replication engine).

Incoming links (the instance that receives replication): ``<Authentication>`` and
``<Entitlement>`` on the ``amps-replication`` transport, as on any other transport (or at the
instance level). Every link logs on during its handshake
(:mod:`~ampsclient_server_stub.replication.link`); the replication engine checks the logon
with :func:`authenticate_link` and every replicated record with :func:`link_may_replicate`
(the link's user needs the ``publish`` entitlement to the record's topic, ``sow_delete`` for a
replicated ``sow_delete``).

Outgoing links (the instance that sends): ``<Destination><Transport><Authenticator>`` names the
module that provides the credentials (else the instance's ``<Authenticator>``, else
``amps-default-authenticator-module``); :func:`outgoing_credentials` returns the user and an
:class:`ampsclient.Authenticator` that answers the remote transport's logon::

    <Transport>
      <InetAddr>127.0.0.1:10005</InetAddr><Type>amps-replication</Type>
      <Authenticator>
        <Module>amps-default-authenticator-module</Module>   <!-- or challenge-response -->
        <Options><User>repl</User><PasswordFileName>repl.secret</PasswordFileName></Options>
      </Authenticator>
    </Transport>
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ampsclient.authenticator import (
    Authenticator,
    ChallengeResponseAuthenticator,
    DefaultAuthenticator,
)
from ampsclient_server_stub.config import DestinationConfig

from .auth import AuthVerdict, EntitlementModule, SecurityConfigError
from .policy import ServerSecurity

__all__ = [
    "AUTHENTICATOR_MODULES",
    "authenticate_link",
    "instance_credentials",
    "link_entitlements",
    "link_may_replicate",
    "outgoing_credentials",
]

_SUCCESS = AuthVerdict("success")

AUTHENTICATOR_MODULES: Final = ("amps-default-authenticator-module", "challenge-response")
"""The ``<Authenticator><Module>`` names accepted."""

_OPTION_ALIASES: Final = {
    "User": "User",
    "Password": "Password",
    "PasswordFileName": "PasswordFileName",
    "PasswordFile": "PasswordFileName",
    "PasswordEnvironmentVariable": "PasswordEnvironmentVariable",
    "PasswordEnv": "PasswordEnvironmentVariable",
}


def authenticate_link(
    security: ServerSecurity,
    transport_name: str,
    user: str,
    password: str,
    state: dict[str, Any],
) -> AuthVerdict:
    """Check an incoming replication link's credentials with its transport's module.

    ``state`` must be kept by the caller for the link between ``retry`` rounds. Success when the
    transport (and the instance) configures no authentication.
    """
    module = security.policy_for(transport_name).auth
    if module is None:
        return _SUCCESS
    return module.authenticate(user, password, state)


def link_entitlements(security: ServerSecurity, transport_name: str) -> EntitlementModule | None:
    """The entitlement module replicated records are checked with (``None``: everything)."""
    return security.policy_for(transport_name).entitlements


def link_may_replicate(
    security: ServerSecurity,
    transport_name: str,
    user: str | None,
    topic: str,
    command: str = "publish",
) -> bool:
    """Whether the link's user may replicate ``command`` on ``topic`` into this instance."""
    ents = link_entitlements(security, transport_name)
    operation = "sow_delete" if command == "sow_delete" else "publish"
    return ents is None or ents.allowed(user, operation, topic)


class _PresetPassword(DefaultAuthenticator):
    def __init__(self, password: str | None) -> None:
        self._password = password

    def authenticate(self, user: str | None, password: str | None) -> str | None:
        return self._password if self._password is not None else password


def _process_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # pragma: no cover - no passwd entry and no LOGNAME/USER
        return os.environ.get("USER", "")


def outgoing_credentials(
    destination: DestinationConfig,
    base_dir: Path | None = None,
    *,
    instance_extra: Mapping[str, str] | None = None,
) -> tuple[str, Authenticator]:
    """``(user, authenticator)`` for the outgoing link to ``destination``.

    The destination's ``<Transport><Authenticator>``, else the instance's ``<Authenticator>``
    (``instance_extra``: the root's extra elements; see :func:`instance_credentials`).

    Raises:
        SecurityConfigError: see :func:`instance_credentials`.
    """
    prefix = "Transport/Authenticator/"
    if any(k.startswith(prefix) for k in destination.extra):
        where = f"the <Authenticator> of replication destination {destination.name!r}"
        return _credentials(destination.extra, prefix, where, base_dir)
    return instance_credentials(instance_extra or {}, base_dir)


def instance_credentials(
    instance_extra: Mapping[str, str], base_dir: Path | None = None
) -> tuple[str, Authenticator]:
    """``(user, authenticator)`` of the instance's ``<Authenticator>`` (root element), or of
    ``amps-default-authenticator-module`` with no options when there is none.

    Options (as AMPS' default authenticator): ``User`` (default: the user running this
    process), and the password from ``Password``, ``PasswordFileName`` (first line; relative to
    ``base_dir``) or ``PasswordEnvironmentVariable`` (``PasswordFile`` and ``PasswordEnv`` are
    accepted as older spellings); none: an empty password. Module
    ``amps-default-authenticator-module`` sends the password as is; ``challenge-response``
    answers the remote transport's challenge without sending it.

    Raises:
        SecurityConfigError: unknown module or option, unreadable password file, unset
            environment variable.
    """
    return _credentials(instance_extra, "Authenticator/", "the instance <Authenticator>", base_dir)


def _credentials(
    extra: Mapping[str, str], prefix: str, where: str, base_dir: Path | None
) -> tuple[str, Authenticator]:
    module = (extra.get(prefix + "Module") or "amps-default-authenticator-module").strip()
    options: dict[str, str] = {}
    for key, value in extra.items():
        if not key.startswith(prefix) or key in (prefix + "Module", prefix + "Options"):
            continue
        name = key[len(prefix) :]
        if not name.startswith("Options/"):
            raise SecurityConfigError(f"{where}: unknown element <{name}>")
        option = _OPTION_ALIASES.get(name[len("Options/") :])
        if option is None:
            known = ", ".join(k for k, v in _OPTION_ALIASES.items() if k == v)
            raise SecurityConfigError(
                f"{where}: unknown option <{name[len('Options/') :]}> (expected one of {known})"
            )
        options[option] = value
    user = options.get("User") or _process_user()
    password: str | None = options.get("Password") or None
    if options.get("PasswordFileName"):
        path = Path(options["PasswordFileName"]).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            password = path.read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError) as exc:
            raise SecurityConfigError(
                f"{where}: cannot read the password file {path}: {exc}"
            ) from None
    elif options.get("PasswordEnvironmentVariable"):
        variable = options["PasswordEnvironmentVariable"]
        password = os.environ.get(variable)
        if password is None:
            raise SecurityConfigError(f"{where}: environment variable {variable} is not set")
    if module == "amps-default-authenticator-module":
        return user, _PresetPassword(password)
    if module == "challenge-response":
        return user, ChallengeResponseAuthenticator(password)
    raise SecurityConfigError(
        f"{where}: unknown authenticator module {module!r} "
        f"(expected one of {', '.join(AUTHENTICATOR_MODULES)})"
    )
