"""Exception class names: a class with an official name carries it as its own ``__name__``
(``type(exc).__name__`` reads as with the official client), and the Pythonic ``...Error``
name stays an alias of the same class."""

from __future__ import annotations

import importlib
import pickle
from typing import Any

import pytest

import ampsclient
from ampsclient import exceptions
from ampsclient_server_stub import ServerThread

OFFICIAL_EXCEPTIONS = sorted(exceptions.OFFICIAL_NAMES.values())


@pytest.mark.parametrize("name", OFFICIAL_EXCEPTIONS)
def test_the_official_name_is_the_class_name(name: str) -> None:
    cls = getattr(ampsclient, name)
    assert cls.__name__ == name and cls.__qualname__ == name  # before: "BadFilterError"...
    assert getattr(exceptions, name) is cls
    assert pickle.loads(pickle.dumps(cls("x"))).__class__ is cls


def test_the_pythonic_names_stay_aliases() -> None:
    assert ampsclient.BadFilterError is ampsclient.BadFilterException
    assert exceptions.TimeoutError is ampsclient.TimedOutException
    assert exceptions.UsageError is ampsclient.UsageException
    assert exceptions.FrameTooLargeError.__name__ == "FrameTooLargeError"  # no official name


@pytest.mark.parametrize("name", OFFICIAL_EXCEPTIONS)
def test_the_official_client_has_the_same_names(name: str) -> None:
    official = pytest.importorskip("AMPS")
    assert getattr(official, name).__name__ == name


@pytest.mark.integration
@pytest.mark.parametrize("module", ["ampsclient", "AMPS"])
def test_a_refused_filter_is_named_as_the_official_client_names_it(
    server: ServerThread, module: str
) -> None:
    amps: Any = pytest.importorskip("AMPS") if module == "AMPS" else importlib.import_module(module)
    client = amps.Client(f"{module}-names")
    client.connect(server.uri("tcp", "json"))
    client.logon()
    try:
        with pytest.raises(amps.CommandException) as info:
            client.subscribe(lambda m: None, "t", "((((", timeout=5000)
        assert type(info.value).__name__ == "BadFilterException"
        with pytest.raises(amps.DisconnectedException) as dropped:
            client.disconnect()
            client.publish("t", "{}")
        assert type(dropped.value).__name__ == "DisconnectedException"
    finally:
        client.close()
