"""The package face loads lazily (PEP 562): ``import ampsclient.protocol`` pulls in no client.

The reference server and the tools import ``ampsclient.protocol`` only; they must not pay for
(or depend on) the client, the stores, the HA client or the sync facade.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

import ampsclient
import ampsclient.stores

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEAVY = ("ampsclient.client", "ampsclient.sync", "ampsclient.stores", "ampsclient.ha")


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.split())


@pytest.mark.parametrize(
    "statement",
    [
        "import ampsclient.protocol",
        "from ampsclient.protocol import TcpFramer, Message",
        "import ampsclient",
        "from ampsclient_server_stub import ServerThread",
    ],
)
def test_protocol_import_loads_no_client(statement: str) -> None:
    loaded = _loaded_after(statement)
    assert "ampsclient" in loaded  # the statement did import the package
    heavy = sorted(m for m in loaded if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY)))
    assert heavy == [], f"{statement!r} imported {heavy}"


def test_a_public_name_loads_its_module_on_first_use() -> None:
    loaded = _loaded_after("import ampsclient\nampsclient.Client")
    assert "ampsclient.sync" in loaded
    loaded = _loaded_after("from ampsclient import MessageStream")
    assert "ampsclient.stream" in loaded
    assert "ampsclient.sync" not in loaded


def test_every_exported_name_resolves() -> None:
    for name in ampsclient.__all__:
        assert getattr(ampsclient, name) is not None, name
    # the value is the defining module's object, cached on the package after the first use
    assert ampsclient.Client is ampsclient.sync.Client
    assert "Client" in vars(ampsclient)
    assert ampsclient.stores.__name__ == "ampsclient.stores"


def test_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        _ = ampsclient.NoSuchName  # type: ignore[attr-defined]
    assert not hasattr(ampsclient, "NoSuchName")


def test_dir_lists_lazy_names_before_use() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import ampsclient; print(' '.join(dir(ampsclient)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listed = set(done.stdout.split())
    assert set(ampsclient.__all__) <= listed
    assert {"stores", "ha", "protocol"} <= listed


def _type_checking_imports() -> dict[str, str]:
    """name -> module for the ``if TYPE_CHECKING:`` block of ``ampsclient/__init__.py``."""
    tree = ast.parse((ROOT / "ampsclient" / "__init__.py").read_text())
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.ImportFrom):
                    assert stmt.level == 1 and stmt.module
                    for alias in stmt.names:
                        assert alias.asname == alias.name, "re-export as `X as X`"
                        names[alias.name] = f"ampsclient.{stmt.module}"
    return names


def test_type_checking_block_and_all_agree() -> None:
    """Static typing (the TYPE_CHECKING block) and runtime (``__all__``, the lazy table) agree."""
    from ampsclient import exceptions

    static = _type_checking_imports()
    lazy = set(ampsclient.__all__) - set(exceptions.__all__) - {"__version__"}
    assert set(static) == lazy
    for name, module in static.items():
        # what the package hands out is the object of the module mypy was told about
        value = getattr(ampsclient, name)
        assert value is getattr(importlib.import_module(module), name), (name, module)
