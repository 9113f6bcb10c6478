"""Pluggable authentication (who may log on) and entitlement (what they may touch) modules.

An authentication module answers a logon with an :class:`AuthVerdict`: ``success``,
``failure`` (with the AMPS reason, ``auth failure``), or ``retry`` with a challenge that the
client's authenticator answers in a second logon (``status: retry``; the challenge travels in
the ack's ``pw`` field).

Modules by name (``<Authentication><Module>``):

* ``amps-default-authentication-module``: the users file named by ``<Options><UsersFile>``,
  or everyone when no file is given (as AMPS' default module);
* ``users-file``: passwords checked against the users file's salted hashes;
* ``challenge-response``: no password on the wire; the server sends a nonce and the salt of the
  user's ``pbkdf2-sha256`` hash, the client answers with an HMAC (see
  :func:`ampsclient.authenticator.challenge_response`);
* ``allow-all`` (or ``none``);
* ``package.module:factory``: ``factory(options)`` returns an object with ``authenticate``.

Entitlement modules (``<Entitlement><Module>``): ``amps-default-entitlement-module`` (the
users file's rules, or everything when no file is given), ``users-file``, ``allow-all``, or
``package.module:factory``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from ampsclient.authenticator import CHALLENGE_SCHEME
from ampsclient_server_stub.config import ConfigError

from .passwords import DEFAULT_PBKDF2_ITERATIONS, PasswordHashError, parse_hash
from .users import UsersFile, UsersFileError

__all__ = [
    "AllowAll",
    "AuthVerdict",
    "AuthenticationModule",
    "ChallengeResponseAuthentication",
    "EntitlementModule",
    "SecurityConfigError",
    "UsersFileAuthentication",
    "UsersFileEntitlements",
    "build_authentication",
    "build_entitlements",
]

AUTH_FAILURE: Final = "auth failure"
_CACHE_LIMIT: Final = 4096


class SecurityConfigError(ConfigError):
    """A security setting that cannot be used (bad module name, missing file...)."""


@dataclass(frozen=True, slots=True)
class AuthVerdict:
    """The outcome of one logon attempt."""

    status: Literal["success", "failure", "retry"]
    reason: str = ""
    challenge: str = ""

    @property
    def ok(self) -> bool:
        """``True`` for ``success``."""
        return self.status == "success"


SUCCESS: Final = AuthVerdict("success")
FAILURE: Final = AuthVerdict("failure", AUTH_FAILURE)


class AuthenticationModule(Protocol):
    """Checks logons. ``state`` is private to one connection (kept between retry rounds)."""

    def authenticate(self, user: str, password: str, state: dict[str, Any]) -> AuthVerdict:
        """Decide on one logon attempt."""
        ...


class EntitlementModule(Protocol):
    """Decides whether a user may run an operation on a topic."""

    def allowed(self, user: str | None, operation: str, topic: str) -> bool:
        """``operation`` is ``subscribe``, ``sow``, ``publish`` or ``sow_delete``."""
        ...

    def any_allowed(self, user: str | None, operation: str) -> bool:
        """Whether some topic may be used (decides regex subscriptions up front)."""
        ...


class AllowAll:
    """Everyone logs on; every topic is allowed."""

    def authenticate(self, user: str, password: str, state: dict[str, Any]) -> AuthVerdict:
        return SUCCESS

    def allowed(self, user: str | None, operation: str, topic: str) -> bool:
        return True

    def any_allowed(self, user: str | None, operation: str) -> bool:
        return True


class _Lru:
    """A small bounded cache."""

    def __init__(self, limit: int = _CACHE_LIMIT) -> None:
        self.limit = limit
        self.data: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any) -> Any:
        value = self.data.get(key)
        if value is not None:
            self.data.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.limit:
            self.data.popitem(last=False)

    def clear(self) -> None:
        self.data.clear()


class UsersFileAuthentication:
    """Passwords checked against the users file's salted hashes.

    A successful check is remembered (keyed by a keyed BLAKE2b of the password, never the
    password) so that reconnecting clients do not pay for the slow hash again.
    """

    def __init__(self, users: UsersFile, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.users = users
        self.clock = clock
        self._key = secrets.token_bytes(32)
        self._ok = _Lru()

    def authenticate(self, user: str, password: str, state: dict[str, Any]) -> AuthVerdict:
        self.users.refresh(self.clock())
        entry = self.users.users.get(user) if user else None
        if entry is None or entry.password is None or not password:
            return FAILURE
        tag = hashlib.blake2b(password.encode(), key=self._key, digest_size=32).digest()
        cache_key = (user, entry.password, tag)
        if self._ok.get(cache_key):
            return SUCCESS
        try:
            parsed = parse_hash(entry.password)
        except PasswordHashError:
            return FAILURE
        if not hmac.compare_digest(parsed.derive(password), parsed.digest):
            return FAILURE
        self._ok.put(cache_key, True)
        return SUCCESS


class ChallengeResponseAuthentication:
    """No password on the wire: a nonce challenge answered with an HMAC.

    Round 1 (any password): ``retry`` with ``hmac-sha256:<nonce>:<salt>:<iterations>``, the salt
    and iterations of the user's ``pbkdf2-sha256`` hash (made up, but stable, for unknown users
    so that user names cannot be probed). Round 2: the answer must be
    ``hmac-sha256:<hex HMAC(derived key, nonce:user)>``. A nonce is used once.
    """

    def __init__(self, users: UsersFile, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.users = users
        self.clock = clock
        self._secret = secrets.token_bytes(32)

    def _params(self, user: str) -> tuple[bytes, int, bytes | None]:
        entry = self.users.users.get(user) if user else None
        if entry is not None and entry.password is not None:
            try:
                parsed = parse_hash(entry.password)
            except PasswordHashError:
                parsed = None
            if parsed is not None and parsed.scheme == "pbkdf2-sha256":
                return parsed.salt, parsed.iterations, parsed.digest
        fake_salt = hmac.new(self._secret, user.encode(), hashlib.sha256).digest()[:16]
        return fake_salt, DEFAULT_PBKDF2_ITERATIONS, None

    def authenticate(self, user: str, password: str, state: dict[str, Any]) -> AuthVerdict:
        self.users.refresh(self.clock())
        nonce = state.pop("nonce", None)
        if nonce is None or not password.startswith(CHALLENGE_SCHEME + ":"):
            rounds = state.get("rounds", 0) + 1
            state["rounds"] = rounds
            if rounds > 3:
                return FAILURE
            salt, iterations, _ = self._params(user)
            fresh = secrets.token_urlsafe(18)
            state["nonce"] = fresh
            challenge = f"{CHALLENGE_SCHEME}:{fresh}:{base64.b64encode(salt).decode()}:{iterations}"
            return AuthVerdict("retry", challenge=challenge)
        _, _, derived = self._params(user)
        if derived is None:
            return FAILURE
        expected = hmac.new(derived, f"{nonce}:{user}".encode(), hashlib.sha256).hexdigest()
        answer = password[len(CHALLENGE_SCHEME) + 1 :]
        if hmac.compare_digest(expected.encode(), answer.encode()):
            return SUCCESS
        return FAILURE


class UsersFileEntitlements:
    """Per-user topic rules from the users file (decisions cached per user, operation and
    topic)."""

    def __init__(self, users: UsersFile, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.users = users
        self.clock = clock
        self._cache = _Lru(65536)
        self._stamp = 0.0

    def _fresh(self) -> None:
        now = self.clock()
        if now - self._stamp >= 1.0:
            self._stamp = now
            before = self.users.users, self.users.default
            self.users.refresh(now)
            if (self.users.users, self.users.default) != before:
                self._cache.clear()

    def allowed(self, user: str | None, operation: str, topic: str) -> bool:
        self._fresh()
        key = (user, operation, topic)
        hit = self._cache.get(key)
        if hit is not None:
            return bool(hit)
        verdict = self.users.user(user).allowed(operation, topic)
        self._cache.put(key, verdict)
        return verdict

    def any_allowed(self, user: str | None, operation: str) -> bool:
        self._fresh()
        return self.users.user(user).any_allowed(operation)


# --------------------------------------------------------------------------- factories


def _users_file(
    options: Mapping[str, str], base_dir: Path | None, cache: dict[Path, UsersFile]
) -> UsersFile | None:
    name = options.get("UsersFile")
    if not name:
        return None
    path = Path(name).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    found = cache.get(path)
    if found is None:
        try:
            found = cache[path] = UsersFile(path)
        except UsersFileError as exc:
            raise SecurityConfigError(str(exc)) from None
    return found


_BUILTIN_AUTHENTICATION = ("amps-default-authentication-module", "users-file", "challenge-response")
_BUILTIN_ENTITLEMENT = ("amps-default-entitlement-module", "users-file")


def _refuse_unused(kind: str, name: str, options: Mapping[str, str], used: tuple[str, ...]) -> None:
    """A built-in module uses only ``used``: any other option is refused by name (issue 28:
    nothing is accepted and ignored)."""
    for option in options:
        if option not in used:
            uses = f"uses only <{'>, <'.join(used)}>" if used else "takes no options"
            raise SecurityConfigError(
                f"<{kind}><Options><{option}> is not an option of the built-in {kind.lower()} "
                f"module {name!r} (it {uses})"
            )


def _import_factory(spec: str) -> Callable[[Mapping[str, str]], Any]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise SecurityConfigError(f"cannot load security module {spec!r}: {exc}") from None
    if not callable(factory):
        raise SecurityConfigError(f"security module {spec!r} is not callable")
    return factory  # type: ignore[no-any-return]


def _custom_module(name: str, options: Mapping[str, str], method: str, kind: str) -> Any:
    """The module a ``package.module:factory`` spec builds; it must offer ``method``."""
    built = _import_factory(name)(options)
    if not callable(getattr(built, method, None)):
        raise SecurityConfigError(f"{name!r} did not return {kind} module")
    return built


def build_authentication(
    module: str,
    options: Mapping[str, str],
    base_dir: Path | None = None,
    *,
    cache: dict[Path, UsersFile] | None = None,
) -> AuthenticationModule:
    """The authentication module called ``module`` with its ``<Options>``."""
    files = cache if cache is not None else {}
    name = module.strip()
    if name in ("allow-all", "none", ""):
        _refuse_unused("Authentication", name, options, ())
        return AllowAll()
    if ":" in name:
        return _custom_module(name, options, "authenticate", "an authentication")  # type: ignore[no-any-return]
    if name in _BUILTIN_AUTHENTICATION:
        _refuse_unused("Authentication", name, options, ("UsersFile",))
    users = _users_file(options, base_dir, files)
    if name == "amps-default-authentication-module":
        return AllowAll() if users is None else UsersFileAuthentication(users)
    if name in ("users-file", "challenge-response"):
        if users is None:
            raise SecurityConfigError(f"authentication module {name!r} needs <UsersFile>")
        if name == "users-file":
            return UsersFileAuthentication(users)
        return ChallengeResponseAuthentication(users)
    raise SecurityConfigError(f"unknown authentication module {name!r}")


def build_entitlements(
    module: str,
    options: Mapping[str, str],
    base_dir: Path | None = None,
    *,
    cache: dict[Path, UsersFile] | None = None,
) -> EntitlementModule:
    """The entitlement module called ``module`` with its ``<Options>``."""
    files = cache if cache is not None else {}
    name = module.strip()
    if name in ("allow-all", "none", ""):
        _refuse_unused("Entitlement", name, options, ())
        return AllowAll()
    if ":" in name:
        return _custom_module(name, options, "allowed", "an entitlement")  # type: ignore[no-any-return]
    if name in _BUILTIN_ENTITLEMENT:
        _refuse_unused("Entitlement", name, options, ("UsersFile",))
    users = _users_file(options, base_dir, files)
    if name == "amps-default-entitlement-module":
        return AllowAll() if users is None else UsersFileEntitlements(users)
    if name == "users-file":
        if users is None:
            raise SecurityConfigError("entitlement module 'users-file' needs <UsersFile>")
        return UsersFileEntitlements(users)
    raise SecurityConfigError(f"unknown entitlement module {name!r}")
