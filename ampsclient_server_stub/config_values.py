"""Value syntax of the AMPS-style configuration: sizes, durations, addresses.

:func:`parse_size` (``10MB``), :func:`parse_duration` (``500ms``) and :func:`parse_inet_addr`
(``host:9007``) are used by the XML reader (:mod:`.config_reader`) and by the command line;
each raises :class:`ConfigError` with a message that quotes the bad value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from types import MappingProxyType

from .errors import ServerError

__all__ = [
    "DEFAULT_HOST",
    "ConfigError",
    "InetAddr",
    "parse_duration",
    "parse_inet_addr",
    "parse_size",
    "shorten",
]

DEFAULT_HOST = "127.0.0.1"
"""Host used for an ``InetAddr`` that is a bare port number."""

_MAX_SIZE = 2**63 - 1


class ConfigError(ServerError, ValueError):
    """An invalid configuration document or value; the message names the problem."""


@dataclass(frozen=True, slots=True)
class InetAddr:
    """A host/port pair parsed from an ``<InetAddr>`` element."""

    host: str
    port: int

    def __str__(self) -> str:
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zµ]*)")
_DURATION_UNITS: Mapping[str, float] = MappingProxyType(
    {
        "": 1.0,
        "ns": 1e-9,
        "us": 1e-6,
        "µs": 1e-6,
        "ms": 1e-3,
        "s": 1.0,
        "sec": 1.0,
        "m": 60.0,
        "min": 60.0,
        "h": 3600.0,
        "d": 86400.0,
        "w": 604800.0,
    }
)

_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)")
_SIZE_UNITS: Mapping[str, int] = MappingProxyType(
    {
        "": 1,
        "b": 1,
        "k": 1024,
        "kb": 1024,
        "kib": 1024,
        "m": 1024**2,
        "mb": 1024**2,
        "mib": 1024**2,
        "g": 1024**3,
        "gb": 1024**3,
        "gib": 1024**3,
        "t": 1024**4,
        "tb": 1024**4,
        "tib": 1024**4,
    }
)


def shorten(text: str, limit: int = 60) -> str:
    """``repr`` of ``text``, truncated so error messages stay readable."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def parse_duration(text: str) -> float:
    """Parse an AMPS time interval into seconds.

    Accepts a non-negative decimal number followed by an optional unit: ``ns``, ``us``,
    ``ms``, ``s``, ``m`` (minutes), ``h``, ``d`` or ``w`` (case-insensitive).  A bare
    number is seconds.  ``"500ms"`` -> ``0.5``, ``"2m"`` -> ``120.0``.

    Raises:
        ConfigError: if ``text`` is not a valid interval.
    """
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _DURATION_UNITS:
        raise ConfigError(
            f"invalid duration {shorten(text)}: expected a number with an optional unit "
            "(ns, us, ms, s, m, h, d, w), e.g. '500ms' or '10s'"
        )
    value = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not math.isfinite(value):
        raise ConfigError(f"invalid duration {shorten(text)}: value out of range")
    return value


def parse_size(text: str) -> int:
    """Parse an AMPS size into bytes.

    Accepts a non-negative decimal number followed by an optional (case-insensitive) unit
    ``B``, ``KB``, ``MB``, ``GB`` or ``TB`` (also ``K``/``KiB`` etc.); units are powers of
    1024, as in AMPS.  ``"10MB"`` -> ``10485760``; fractions are truncated to whole bytes.

    Raises:
        ConfigError: if ``text`` is not a valid size.
    """
    match = _SIZE_RE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise ConfigError(
            f"invalid size {shorten(text)}: expected a number with an optional unit "
            "(B, KB, MB, GB, TB), e.g. '10MB'"
        )
    try:
        value = int(Decimal(match.group(1)) * _SIZE_UNITS[match.group(2)])
    except (InvalidOperation, ValueError, OverflowError) as exc:  # pragma: no cover - regex
        raise ConfigError(f"invalid size {shorten(text)}") from exc
    if value > _MAX_SIZE:
        raise ConfigError(f"invalid size {shorten(text)}: larger than {_MAX_SIZE} bytes")
    return value


_HOST_RE = re.compile(r"[A-Za-z0-9_.*%-]+")
_PORT_RE = re.compile(r"[0-9]{1,5}")


def parse_inet_addr(text: str, *, default_host: str = DEFAULT_HOST) -> InetAddr:
    """Parse an ``InetAddr`` value: ``9007``, ``host:9007``, ``[::1]:9007``.

    A bare port means ``default_host`` (``127.0.0.1`` for the reference server).  IPv6
    literals must be bracketed.  Ports must be in ``0..65535`` (0 = pick a free port).

    Raises:
        ConfigError: if ``text`` is not a valid address.
    """
    value = text.strip()
    host: str
    if value.startswith("["):
        close = value.find("]")
        if close < 0 or value[close + 1 : close + 2] != ":":
            raise ConfigError(f"invalid InetAddr {shorten(text)}: expected '[ipv6-address]:port'")
        host, port_text = value[1:close], value[close + 2 :]
        if not host or not re.fullmatch(r"[0-9A-Fa-f:.%A-Za-z]+", host):
            raise ConfigError(f"invalid InetAddr {shorten(text)}: bad IPv6 address {shorten(host)}")
    elif ":" in value:
        host, _, port_text = value.rpartition(":")
        if ":" in host:
            raise ConfigError(
                f"invalid InetAddr {shorten(text)}: IPv6 addresses must be bracketed, "
                "e.g. '[::1]:9007'"
            )
        if not _HOST_RE.fullmatch(host):
            raise ConfigError(f"invalid InetAddr {shorten(text)}: bad host name {shorten(host)}")
    else:
        host, port_text = default_host, value
    if not _PORT_RE.fullmatch(port_text) or int(port_text) > 65535:
        raise ConfigError(f"invalid InetAddr {shorten(text)}: port must be a number in 0..65535")
    return InetAddr(host, int(port_text))
