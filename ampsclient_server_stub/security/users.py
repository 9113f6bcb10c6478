"""The users file: salted password hashes and per-user entitlements, in JSON.

Example ``users.json``::

    {
      "users": {
        "alice": {
          "password": "scrypt$16384$8$1$<salt>$<hash>",
          "read": ["^orders\\\\.", "^prices$"],
          "write": ["^orders\\\\."]
        },
        "auditor": {"password": "pbkdf2-sha256$200000$<salt>$<hash>", "read": [".*"]}
      },
      "default": {"read": ["^public\\\\."]}
    }

``read`` patterns allow ``subscribe`` and ``sow`` (and their combinations), ``write``
patterns allow ``publish`` and ``sow_delete``; the keys ``subscribe``, ``sow``, ``publish`` and
``sow_delete`` give one command its own list instead; ``admin`` patterns are searched in the
admin interface's request paths (``"admin": ["^/amps/instance"]``: statistics only). Patterns
are regular expressions searched in the topic name (anchor them with ``^...$``). ``default``
applies to users not listed (and to logons without a user id when authentication is off).

Command line (passwords are read from the terminal, or from standard input with
``--password-stdin``)::

    python -m ampsclient_server_stub.security.users add users.json alice --read '^orders\\.'
    python -m ampsclient_server_stub.security.users remove users.json alice
    python -m ampsclient_server_stub.security.users list users.json
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..errors import SecurityError
from ..regexes import RegexError, SafeRegex, compile_regex
from .passwords import DEFAULT_PBKDF2_ITERATIONS, DEFAULT_SCRYPT_N, hash_password

__all__ = [
    "OPERATIONS",
    "UserEntry",
    "UsersFile",
    "UsersFileError",
    "main",
]

logger = logging.getLogger(__name__)

OPERATIONS: Final = ("subscribe", "sow", "publish", "sow_delete")
"""The commands entitlements govern."""

_READ_OPS: Final = ("subscribe", "sow")
_WRITE_OPS: Final = ("publish", "sow_delete")
_MAX_FILE: Final = 16 * 1024 * 1024
_MAX_PATTERN: Final = 1000


class UsersFileError(SecurityError, ValueError):
    """A users file that cannot be read or understood."""


def _compile(patterns: Any, where: str) -> tuple[SafeRegex, ...]:
    if patterns is None:
        return ()
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list):
        raise UsersFileError(f"{where}: expected a list of regular expressions")
    out = []
    for text in patterns:
        if not isinstance(text, str) or len(text) > _MAX_PATTERN:
            raise UsersFileError(f"{where}: a pattern must be a string of at most 1000 chars")
        try:
            out.append(compile_regex(text))
        except RegexError as exc:
            raise UsersFileError(f"{where}: bad regular expression {text!r}: {exc}") from None
    return tuple(out)


@dataclass(frozen=True, slots=True)
class UserEntry:
    """One user: the password hash (``None``: cannot log on with a password) and the topic
    patterns allowed per operation."""

    name: str
    password: str | None
    allow: Mapping[str, tuple[SafeRegex, ...]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, name: str, data: Any, where: str) -> UserEntry:
        if not isinstance(data, dict):
            raise UsersFileError(f"{where}: expected an object")
        password = data.get("password")
        if password is not None and not isinstance(password, str):
            raise UsersFileError(f"{where}: password must be a string")
        read = _compile(data.get("read"), f"{where}.read")
        write = _compile(data.get("write"), f"{where}.write")
        allow: dict[str, tuple[SafeRegex, ...]] = {}
        for op in OPERATIONS:
            own = data.get(op)
            if own is not None:
                allow[op] = _compile(own, f"{where}.{op}")
            else:
                allow[op] = read if op in _READ_OPS else write
        # the admin interface: patterns searched in the request path (never implied by read)
        allow["admin"] = _compile(data.get("admin"), f"{where}.admin")
        return cls(name, password, allow)

    def allowed(self, operation: str, topic: str) -> bool:
        """Whether the user may run ``operation`` on the literal ``topic``."""
        return any(p.test(topic) for p in self.allow.get(operation, ()))

    def any_allowed(self, operation: str) -> bool:
        """Whether the user has any pattern for ``operation``."""
        return bool(self.allow.get(operation))


class UsersFile:
    """A parsed users file (reloaded when it changes on disk, checked at most once a second).

    Raises:
        UsersFileError: unreadable file, bad JSON, bad pattern or hash field.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._mtime: float | None = None
        self._checked = 0.0
        self.users: dict[str, UserEntry] = {}
        self.default: UserEntry = UserEntry("", None, {op: () for op in OPERATIONS})
        self.reload()

    @classmethod
    def parse(
        cls, text: str | bytes, path: str = "<users>"
    ) -> tuple[dict[str, UserEntry], UserEntry]:
        """Parse the JSON text of a users file."""
        if len(text) > _MAX_FILE:
            raise UsersFileError(f"{path}: file too large")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise UsersFileError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise UsersFileError(f"{path}: the top level must be an object")
        users_data = data.get("users", {})
        if not isinstance(users_data, dict):
            raise UsersFileError(f"{path}: 'users' must be an object")
        users = {
            str(name): UserEntry.from_json(str(name), entry, f"{path}: users.{name}")
            for name, entry in users_data.items()
        }
        default_data = data.get("default", {})
        default = UserEntry.from_json("", default_data, f"{path}: default")
        return users, default

    def reload(self) -> None:
        """Read the file again."""
        try:
            stat = self.path.stat()
            raw = self.path.read_bytes()
        except OSError as exc:
            raise UsersFileError(f"cannot read users file {self.path}: {exc}") from None
        self.users, self.default = self.parse(raw, str(self.path))
        self._mtime = stat.st_mtime

    def refresh(self, now: float) -> None:
        """Reload when the file changed (at most one ``stat`` a second); keep the old contents
        if the new ones are invalid."""
        if now - self._checked < 1.0:
            return
        self._checked = now
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return
        if mtime != self._mtime:
            try:
                self.reload()
                logger.info("users file %s reloaded (%d users)", self.path, len(self.users))
            except UsersFileError as exc:
                logger.error("users file %s not reloaded: %s", self.path, exc)
                self._mtime = mtime

    def user(self, name: str | None) -> UserEntry:
        """The entry of ``name``, or the ``default`` entry."""
        if name:
            entry = self.users.get(name)
            if entry is not None:
                return entry
        return self.default


# --------------------------------------------------------------------------- editing / CLI


def _load_raw(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"users": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsersFileError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.setdefault("users", {}), dict):
        raise UsersFileError(f"{path}: not a users file")
    return data


def _save_raw(path: Path, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    UsersFile.parse(text, str(path))  # never write a file the server would refuse
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".users-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with_suppress_unlink(tmp)
        raise


def with_suppress_unlink(path: str) -> None:
    """Remove ``path`` if it exists."""
    try:
        os.unlink(path)
    except OSError:
        pass


def add_user(
    path: str | os.PathLike[str],
    user: str,
    password: str,
    *,
    read: Sequence[str] | None = None,
    write: Sequence[str] | None = None,
    admin: Sequence[str] | None = None,
    scheme: str = "scrypt",
    iterations: int = DEFAULT_PBKDF2_ITERATIONS,
    n: int = DEFAULT_SCRYPT_N,
) -> None:
    """Add or update ``user`` in the users file at ``path`` (created if missing).

    Entitlements given replace the user's; ``None`` keeps them (``admin``: the admin
    interface's request-path patterns).
    """
    if not user:
        raise UsersFileError("empty user name")
    file = Path(path)
    data = _load_raw(file)
    entry = data["users"].get(user)
    if not isinstance(entry, dict):
        entry = {}
    if scheme not in ("scrypt", "pbkdf2-sha256"):
        raise UsersFileError(f"unknown scheme {scheme!r}")
    entry["password"] = hash_password(
        password,
        scheme="scrypt" if scheme == "scrypt" else "pbkdf2-sha256",
        iterations=iterations,
        n=n,
    )
    if read is not None:
        entry["read"] = list(read)
    if write is not None:
        entry["write"] = list(write)
    if admin is not None:
        entry["admin"] = list(admin)
    data["users"][user] = entry
    _save_raw(file, data)


def remove_user(path: str | os.PathLike[str], user: str) -> bool:
    """Remove ``user``; returns whether it was there."""
    file = Path(path)
    data = _load_raw(file)
    found = data["users"].pop(user, None) is not None
    if found:
        _save_raw(file, data)
    return found


def _read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        line = sys.stdin.readline()
        return line.rstrip("\r\n")
    first = getpass.getpass(f"password for {args.user}: ")
    second = getpass.getpass("again: ")
    if first != second:
        raise UsersFileError("the passwords differ")
    return first


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ampsclient_server_stub.security.users add|remove|list FILE [USER]``."""
    parser = argparse.ArgumentParser(
        prog="python -m ampsclient_server_stub.security.users",
        description="Manage a reference-server users file (salted password hashes).",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="add a user or change a password")
    add.add_argument("file", type=Path)
    add.add_argument("user")
    add.add_argument("--password-stdin", action="store_true", help="read one line from stdin")
    add.add_argument("--read", action="append", default=None, help="topic regex (repeatable)")
    add.add_argument("--write", action="append", default=None, help="topic regex (repeatable)")
    add.add_argument("--admin", action="append", default=None, help="admin path regex (repeatable)")
    add.add_argument(
        "--scheme",
        choices=("scrypt", "pbkdf2-sha256"),
        default="scrypt",
        help="hash scheme (pbkdf2-sha256 is needed for the challenge-response module)",
    )
    add.add_argument("--iterations", type=int, default=DEFAULT_PBKDF2_ITERATIONS)
    rm = sub.add_parser("remove", help="remove a user")
    rm.add_argument("file", type=Path)
    rm.add_argument("user")
    ls = sub.add_parser("list", help="list the users and their entitlements")
    ls.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    out = sys.stdout
    try:
        if args.action == "add":
            password = _read_password(args)
            add_user(
                args.file,
                args.user,
                password,
                read=args.read,
                write=args.write,
                admin=args.admin,
                scheme=args.scheme,
                iterations=args.iterations,
            )
            out.write(f"user {args.user} saved in {args.file}\n")
        elif args.action == "remove":
            if not remove_user(args.file, args.user):
                sys.stderr.write(f"no user {args.user} in {args.file}\n")
                return 1
            out.write(f"user {args.user} removed from {args.file}\n")
        else:
            users, _default = UsersFile.parse(Path(args.file).read_bytes(), str(args.file))
            for name, entry in sorted(users.items()):
                rules = {op: [p.pattern for p in pats] for op, pats in entry.allow.items()}
                out.write(f"{name}: {json.dumps(rules, sort_keys=True)}\n")
    except (UsersFileError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
