"""Write ``tests/migration/official_api.json``: the public names of the official AMPS client.

Run once, where the official client (``amps-python-client``, module ``AMPS``) is installed::

    python tools/official_api_manifest.py [output.json]

The official module is a black box: this looks only at ``dir()``, the type of each name, the
value of plain constants, and the first line of docstrings that show a call signature
(argument names and defaults). Nothing of its code is read or copied. The manifest is kept in
git so that ``tests/migration/test_api_manifest.py`` needs no official client.
"""

from __future__ import annotations

import importlib
import json
import pathlib
import sys
from typing import Any

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "migration" / "official_api.json"
NESTED = {
    "Message": ("Options", "Command", "AckType"),
    "Client": ("Bookmarks", "ConnectionStateListener"),
}
"""Classes nested in classes whose members are listed too (``Message.Options.OOF``...)."""


def _signature(obj: Any) -> str | None:
    doc = getattr(obj, "__doc__", None)
    if not isinstance(doc, str):
        return None
    first = doc.strip().splitlines()[0].strip() if doc.strip() else ""
    return first if "(" in first and first.endswith(")") else None


def _describe(value: Any) -> dict[str, Any]:
    if isinstance(value, type):
        return {"kind": "class"}
    if isinstance(value, (bool, int, float, str)):
        return {"kind": "constant", "value": value}
    if callable(value):
        entry: dict[str, Any] = {"kind": "callable"}
        sig = _signature(value)
        if sig:
            entry["signature"] = sig
        return entry
    if isinstance(value, property) or type(value).__name__ == "getset_descriptor":
        return {"kind": "property"}
    return {"kind": type(value).__name__}


def _members(cls: type) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        members[name] = _describe(getattr(cls, name))
    return members


def build(module_name: str = "AMPS") -> dict[str, Any]:
    """The manifest of ``module_name`` as a JSON-ready dict."""
    mod = importlib.import_module(module_name)
    manifest: dict[str, Any] = {
        "module": module_name,
        "version": getattr(mod, "VERSION", None),
        "names": {},
        "classes": {},
    }
    for name in sorted(dir(mod)):
        if name.startswith("_"):
            continue
        value = getattr(mod, name)
        manifest["names"][name] = _describe(value)
        if isinstance(value, type) and not issubclass(value, BaseException):
            entry: dict[str, Any] = {"signature": _signature(value), "members": _members(value)}
            for nested in NESTED.get(name, ()):
                inner = getattr(value, nested, None)
                if isinstance(inner, type):
                    entry.setdefault("nested", {})[nested] = _members(inner)
            manifest["classes"][name] = entry
        elif isinstance(value, type):
            manifest["names"][name]["bases"] = [b.__name__ for b in value.__mro__[1:-1]]
    return manifest


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else OUT
    manifest = build()
    out.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    n = len(manifest["names"]) + sum(
        len(c["members"]) + sum(len(v) for v in c.get("nested", {}).values())
        for c in manifest["classes"].values()
    )
    print(f"{out}: {len(manifest['names'])} top-level names, {n} names in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
