"""Every public name of the official AMPS Python client exists on ``ampsclient``.

The manifest (``official_api.json``) was written by ``tools/official_api_manifest.py`` from the
installed official module (names, kinds, constants, signature lines; a black box). This test
needs no official client: it checks our module and each of our classes against the manifest,
camelCase aliases included, and checks that the few names that cannot apply in pure Python
raise a :class:`~ampsclient.UsageError` naming the Pythonic alternative.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

import ampsclient

MANIFEST: dict[str, Any] = json.loads(
    pathlib.Path(__file__).with_name("official_api.json").read_text()
)

NOT_APPLICABLE: dict[str, str] = {
    "CMessageHandler": "a Python callable",
    "ssl_init": "ssl_context",
}
"""Names that exist but refuse, with a UsageError naming the alternative (in its message)."""


def missing_names() -> list[str]:
    """The manifest's names that ``ampsclient`` lacks, as dotted paths."""
    missing: list[str] = []
    for name in MANIFEST["names"]:
        if not hasattr(ampsclient, name):
            missing.append(name)
    for cls_name, entry in MANIFEST["classes"].items():
        ours = getattr(ampsclient, cls_name, None)
        for member in entry["members"]:
            if ours is None or not hasattr(ours, member):
                missing.append(f"{cls_name}.{member}")
        for nested, members in entry.get("nested", {}).items():
            inner = getattr(ours, nested, None) if ours is not None else None
            for member in members:
                if inner is None or not hasattr(inner, member):
                    missing.append(f"{cls_name}.{nested}.{member}")
    return missing


def test_manifest_is_complete() -> None:
    assert len(MANIFEST["names"]) == 97
    assert "HAClient" in MANIFEST["classes"]
    assert "ack" in MANIFEST["classes"]["Client"]["members"]


def test_no_official_name_is_missing() -> None:
    missing = missing_names()
    print(f"missing from ampsclient: {len(missing)}: {missing}")
    assert missing == []


def test_constants_have_the_official_values() -> None:
    for cls_name, entry in MANIFEST["classes"].items():
        ours = getattr(ampsclient, cls_name, None)
        if ours is None:
            continue  # reported by test_no_official_name_is_missing
        groups = [(ours, entry["members"])] + [
            (getattr(ours, n), m) for n, m in entry.get("nested", {}).items()
        ]
        for owner, members in groups:
            for member, desc in members.items():
                if desc["kind"] == "constant" and cls_name != "Client":
                    assert getattr(owner, member) == desc["value"], (cls_name, member)


HIERARCHY_DIVERGENCES: dict[str, str] = {
    "AlreadyConnected": "UsageError: connecting twice is a usage error here",
    "AlreadyConnectedException": "UsageError: connecting twice is a usage error here",
    "TimedOut": "TimeoutError (also builtins.TimeoutError), not a connection error",
    "TimedOutException": "TimeoutError (also builtins.TimeoutError), not a connection error",
    "CommandTimedOut": "TimeoutError (also builtins.TimeoutError), not a command error",
    "CommandTypeError": "UsageError: an unknown command name is refused before sending",
    "StreamError": "ProtocolError: a malformed frame, not a connection error",
    "StreamException": "ProtocolError: a malformed frame, not a connection error",
    "InvalidTransportOptions": "InvalidURIError: transport options are URI options here",
    "InvalidTransportOptionsException": "InvalidURIError: transport options are URI options",
    "TransportNotFound": "InvalidURIError: an unknown scheme is an invalid URI",
}
"""Official exception names whose base classes differ here (named in docs/migration.md)."""


def test_exception_hierarchy_matches() -> None:
    for name, desc in MANIFEST["names"].items():
        if "bases" not in desc:
            continue
        ours = getattr(ampsclient, name)
        assert issubclass(ours, ampsclient.AMPSException), name
        wrong = [
            base
            for base in desc["bases"]
            if base not in ("Exception", "BaseException")
            and not issubclass(ours, getattr(ampsclient, base))
        ]
        if name in HIERARCHY_DIVERGENCES:
            assert wrong, f"{name} now matches: drop it from HIERARCHY_DIVERGENCES"
        else:
            assert wrong == [], (name, wrong)


@pytest.mark.parametrize("name", sorted(NOT_APPLICABLE))
def test_not_applicable_names_refuse_clearly(name: str) -> None:
    obj = getattr(ampsclient, name)
    with pytest.raises(ampsclient.UsageError) as info:
        obj("/usr/lib/libssl.so") if name == "ssl_init" else obj(print, None)
    assert NOT_APPLICABLE[name] in str(info.value)
