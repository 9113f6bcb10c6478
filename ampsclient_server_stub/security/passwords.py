"""Salted password hashes (hashlib only): scrypt by default, PBKDF2-SHA256 where a
challenge-response logon needs the derived key.

Encoded forms (one string, safe in JSON)::

    scrypt$<n>$<r>$<p>$<salt base64>$<hash base64>
    pbkdf2-sha256$<iterations>$<salt base64>$<hash base64>
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final, Literal

from ..errors import SecurityError

__all__ = [
    "DEFAULT_PBKDF2_ITERATIONS",
    "DEFAULT_SCRYPT_N",
    "PasswordHash",
    "PasswordHashError",
    "Scheme",
    "hash_password",
    "parse_hash",
    "verify_password",
]

Scheme = Literal["scrypt", "pbkdf2-sha256"]

DEFAULT_SCRYPT_N: Final = 2**14
"""scrypt cost (16 MiB of memory, tens of milliseconds per check)."""

DEFAULT_PBKDF2_ITERATIONS: Final = 200_000
"""PBKDF2-SHA256 iterations."""

_MAX_SCRYPT_N: Final = 2**20
_MAX_ITERATIONS: Final = 10_000_000
_MAX_FIELD: Final = 1024


class PasswordHashError(SecurityError, ValueError):
    """An encoded hash that cannot be understood."""


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """A decoded password hash."""

    scheme: Scheme
    salt: bytes
    digest: bytes
    iterations: int = 0
    n: int = 0
    r: int = 0
    p: int = 0

    def derive(self, password: str) -> bytes:
        """The digest ``password`` gives with this hash's parameters."""
        secret = password.encode()
        if self.scheme == "scrypt":
            return hashlib.scrypt(
                secret,
                salt=self.salt,
                n=self.n,
                r=self.r,
                p=self.p,
                maxmem=256 * self.n * self.r + 1024 * 1024,
                dklen=len(self.digest),
            )
        return hashlib.pbkdf2_hmac(
            "sha256", secret, self.salt, self.iterations, dklen=len(self.digest)
        )

    def encode(self) -> str:
        """The string form stored in a users file."""
        salt = base64.b64encode(self.salt).decode()
        digest = base64.b64encode(self.digest).decode()
        if self.scheme == "scrypt":
            return f"scrypt${self.n}${self.r}${self.p}${salt}${digest}"
        return f"pbkdf2-sha256${self.iterations}${salt}${digest}"


def _b64(text: str) -> bytes:
    if len(text) > _MAX_FIELD:
        raise PasswordHashError("hash field too long")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise PasswordHashError("bad base64 in a password hash") from None


def _int(text: str, low: int, high: int, what: str) -> int:
    if not text.isdigit() or len(text) > 12:
        raise PasswordHashError(f"bad {what} in a password hash")
    value = int(text)
    if not low <= value <= high:
        raise PasswordHashError(f"{what} out of range in a password hash")
    return value


def parse_hash(text: str) -> PasswordHash:
    """Decode an encoded hash.

    Raises:
        PasswordHashError: unknown scheme or malformed fields.
    """
    parts = text.split("$")
    if parts[0] == "scrypt" and len(parts) == 6:
        n = _int(parts[1], 2, _MAX_SCRYPT_N, "scrypt n")
        if n & (n - 1):
            raise PasswordHashError("scrypt n must be a power of two")
        r = _int(parts[2], 1, 64, "scrypt r")
        p = _int(parts[3], 1, 16, "scrypt p")
        salt, digest = _b64(parts[4]), _b64(parts[5])
        if not digest:
            raise PasswordHashError("empty digest")
        return PasswordHash("scrypt", salt, digest, n=n, r=r, p=p)
    if parts[0] == "pbkdf2-sha256" and len(parts) == 4:
        iterations = _int(parts[1], 1, _MAX_ITERATIONS, "iterations")
        salt, digest = _b64(parts[2]), _b64(parts[3])
        if not digest:
            raise PasswordHashError("empty digest")
        return PasswordHash("pbkdf2-sha256", salt, digest, iterations=iterations)
    raise PasswordHashError("unknown password hash scheme")


def hash_password(
    password: str,
    *,
    scheme: Scheme = "scrypt",
    iterations: int = DEFAULT_PBKDF2_ITERATIONS,
    n: int = DEFAULT_SCRYPT_N,
) -> str:
    """Hash ``password`` with a fresh 16-byte salt; returns the encoded form."""
    salt = os.urandom(16)
    if scheme == "scrypt":
        proto = PasswordHash("scrypt", salt, bytes(32), n=n, r=8, p=1)
    elif scheme == "pbkdf2-sha256":
        proto = PasswordHash("pbkdf2-sha256", salt, bytes(32), iterations=iterations)
    else:
        raise ValueError(f"unknown scheme {scheme!r}")
    digest = proto.derive(password)
    return PasswordHash(
        proto.scheme, salt, digest, iterations=proto.iterations, n=proto.n, r=proto.r, p=proto.p
    ).encode()


def verify_password(password: str, encoded: str | PasswordHash) -> bool:
    """Whether ``password`` matches ``encoded`` (constant-time comparison)."""
    try:
        parsed = encoded if isinstance(encoded, PasswordHash) else parse_hash(encoded)
    except PasswordHashError:
        return False
    return hmac.compare_digest(parsed.derive(password), parsed.digest)
