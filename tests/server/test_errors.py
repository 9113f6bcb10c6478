"""The server's exception tree: one root, every exception class under it, drawn in the docs.

Unit test: imports every module of ``ampsclient_server_stub`` and inspects the classes it
defines; no sockets.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import ampsclient_server_stub
from ampsclient_server_stub import errors
from ampsclient_server_stub.errors import (
    OptionError,
    ReplicationError,
    RequestError,
    SecurityError,
    ServerError,
    StorageError,
)


def _server_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(
        ampsclient_server_stub.__path__, ampsclient_server_stub.__name__ + "."
    ):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = obj
    return found


EXCEPTIONS = _server_exceptions()


def test_the_scan_finds_the_known_classes() -> None:
    names = {qual.rsplit(".", 1)[1] for qual in EXCEPTIONS}
    assert {
        "ConfigError",
        "SecurityConfigError",
        "CommandFailure",
        "ReplayError",
        "ConflationError",
        "FilterError",
        "TopicError",
        "SelectError",
        "OrderByError",
        "JournalError",
        "JournalClosedError",
        "JournalInUseError",
        "SequenceOrderError",
        "CorruptJournalError",
        "UsersFileError",
        "PasswordHashError",
        "AdminError",
    } <= names


@pytest.mark.parametrize("qualname", sorted(EXCEPTIONS))
def test_every_server_exception_has_the_one_root(qualname: str) -> None:
    assert issubclass(EXCEPTIONS[qualname], ServerError), qualname


@pytest.mark.parametrize("qualname", sorted(EXCEPTIONS))
def test_the_tree_in_the_docstring_names_every_class(qualname: str) -> None:
    assert errors.__doc__ is not None
    name = qualname.rsplit(".", 1)[1]
    assert f" {name}" in errors.__doc__, name


def _leaf(name: str) -> type[BaseException]:
    hits = [cls for qual, cls in EXCEPTIONS.items() if qual.rsplit(".", 1)[1] == name]
    assert len(hits) >= 1, name
    return hits[0]


@pytest.mark.parametrize(
    ("name", "family", "mixin"),
    [
        ("ConfigError", ServerError, ValueError),
        ("SecurityConfigError", ServerError, ValueError),
        ("CommandFailure", RequestError, Exception),
        ("ReplayError", RequestError, Exception),
        ("ConflationError", RequestError, Exception),
        ("FilterError", OptionError, ValueError),
        ("TopicError", OptionError, ValueError),
        ("SelectError", OptionError, ValueError),
        ("OrderByError", OptionError, ValueError),
        ("JournalError", StorageError, Exception),
        ("JournalClosedError", StorageError, ValueError),
        ("JournalInUseError", StorageError, OSError),
        ("SequenceOrderError", StorageError, ValueError),
        ("CorruptJournalError", StorageError, ValueError),
        ("UsersFileError", SecurityError, ValueError),
        ("PasswordHashError", SecurityError, ValueError),
        ("AdminError", ReplicationError, RuntimeError),
    ],
)
def test_families_and_the_builtin_bases_callers_catch(
    name: str, family: type[BaseException], mixin: type[BaseException]
) -> None:
    cls = _leaf(name)
    assert issubclass(cls, family)
    assert issubclass(cls, mixin)


def test_refusals_carry_their_amps_reason() -> None:
    from ampsclient_server_stub.engine.conflation import ConflationError
    from ampsclient_server_stub.engine.txlog import ReplayError

    failure = _leaf("CommandFailure")("not entitled", "user 'x' may not publish")
    assert isinstance(failure, RequestError)
    assert failure.reason == "not entitled"  # type: ignore[attr-defined]
    assert str(failure) == "user 'x' may not publish"
    replay = ReplayError("invalid bookmark", "detail")
    assert replay.reason == "invalid bookmark" and str(replay) == "detail"
    assert isinstance(ConflationError("bad").reason, str)
    assert ConflationError("bad").reason != ""


def test_errors_imports_nothing_from_the_server() -> None:
    source = inspect.getsource(errors)
    assert "import ampsclient_server_stub" not in source
    assert "from ." not in source and "from ampsclient_server_stub" not in source
