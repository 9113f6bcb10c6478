"""``Message`` (:mod:`ampsclient.protocol.message`): its lazy accessors, the body offset and
a SOW batch's split; and it is owned by its module: other code builds it with the constructor
or :meth:`Message.refill` and reads it through its properties, and a client's per-client
subclass (:func:`ampsclient.acks.bound_message_type`) takes the same path as a plain
``Message``.

Unit tests: no sockets.
"""

from __future__ import annotations

import ast
import pathlib
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

import ampsclient
from ampsclient import Message, _accel
from ampsclient.acks import bound_message_type
from ampsclient.core.routes import deliver
from ampsclient.protocol import body_offset, encode_header, find_sids, split_sow_batch
from ampsclient.stores import MemoryBookmarkStore

PACKAGE = pathlib.Path(ampsclient.__file__).parent
SLOTS = set(_accel.PyMessageFields.__slots__)  # Message's storage (its base class)
BM = "7|42|"
PAYLOAD = b'{"c":"p","t":"orders","sub_id":"S","bm":"7|42|","s":1}{"a":1}'


def _modules() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_but_message_py_touches_its_slots() -> None:
    found = []
    for path in _modules():
        if path == PACKAGE / "protocol" / "message.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in SLOTS
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}")
    assert SLOTS and Message.__slots__ == ()
    assert found == []  # before: core/routes.py (writes), stores/bookmark/memory.py (reads)


def test_no_exact_type_check_a_subclass_would_miss() -> None:
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Call)
                and isinstance(node.left.func, ast.Name)
                and node.left.func.id == "type"
                and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
                and any(isinstance(c, ast.Name) and c.id == "Message" for c in node.comparators)
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []  # before: three in stores/bookmark/memory.py


def test_the_constructor_and_refill_set_what_the_properties_read() -> None:
    m = Message(b'{"c":"p","t":"x","sub_id":"H","bm":"1|1|"}', "S", bookmark=BM)
    assert (m.bookmark, m.sub_id, m.topic) == (BM, "S", "x")
    m.refill(PAYLOAD, "R")
    assert (m.bookmark, m.sub_id, m.data) == (BM, "R", b'{"a":1}')  # bm from the header
    m.refill(b'{"c":"p","t":"y"}z', None, "9|9|")
    assert (m.bookmark, m.sub_id, m.topic, m.data) == ("9|9|", None, "y", b"z")


def _calls(fn: Callable[[], Any]) -> list[str]:
    """The Python functions ``fn`` runs, in order (``sys.setprofile``)."""
    seen: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            seen.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen[1:]  # without fn itself


def _client_message_type() -> type[Message]:
    return bound_message_type(lambda topic, bm, opts: None)


@pytest.mark.parametrize("method", ["log", "discard_message"])
def test_a_client_subclass_message_takes_the_plain_message_path(method: str) -> None:
    """A client hands out its own subclass; the store must read it as it reads a Message
    (before: ``type(message) is Message`` sent the subclass through the duck-typed accessors,
    ``_ids`` -> ``get_bookmark`` -> ``bookmark`` -> ``get_sub_id`` -> ``sub_id``)."""
    paths = []
    for cls in (Message, _client_message_type()):
        store = MemoryBookmarkStore()
        store.log(cls(PAYLOAD, "S", bookmark=BM))
        message = cls(PAYLOAD, "S", bookmark=BM)
        paths.append(_calls(lambda m=message, s=store: getattr(s, method)(m)))
        assert store.is_discarded(message) == (method == "discard_message")
    assert paths[0] == paths[1]


def test_the_python_receive_loop_fills_a_client_subclass_through_refill() -> None:
    cls = _client_message_type()
    got: list[tuple[type[Message], str | None, str | None, bytes]] = []
    prefix = b'{"c":"p","t":"orders","sub_id":"S",'
    route = ("S", lambda m: got.append((type(m), m.bookmark, m.sub_id, m.data)), True, None, None)
    reports: list[BaseException] = []
    deliver(
        [PAYLOAD, PAYLOAD], {prefix: route}, [len(prefix)], cls, print, reports.append, b'"bm":"'
    )
    assert reports == []
    assert got == [(cls, BM, "S", b'{"a":1}')] * 2


# ------------------------------------------------------------- accessors and batches

SOW_BATCH = (
    b'{"c":"sow","t":"topicS","query_id":"auto2","bs":2}'
    b'{"k":"k1","bm":"9|1|","l":8}{"id":1}'
    b'{"k":"k2","bm":"9|2|","l":8}{"id":2}'
)


def test_message_lazy_accessors() -> None:
    raw = b'{"c":"p","t":"orders","sids":"s1,s2","bm":"10|3|","s":7,"x":"corr"}{"id":1}'
    assert find_sids(raw) == "s1,s2"
    assert body_offset(raw) == raw.index(b"}{") + 1
    m = Message(raw, sub_id="s2")
    assert m.data == b'{"id":1}'
    assert m.get_data() == '{"id":1}'
    assert m.json() == {"id": 1}
    assert m.get_command() == "publish"  # official spelling of "c":"p"
    assert m.get_topic() == "orders"
    assert m.get_sub_id() == "s2"
    assert m.get_sub_ids() == "s1,s2"
    assert m.get_bookmark() == "10|3|"
    assert m.get_sequence() == 7
    assert m.get_correlation_id() == "corr"


def test_body_offset_with_braces_and_escapes_in_strings() -> None:
    raw = encode_header({"c": "p", "t": 'a}"b', "x": "}}"}) + b"{BODY}"
    assert raw[body_offset(raw) :] == b"{BODY}"
    raw = encode_header({"c": "p", "t": "a}b"}) + b"}"
    assert raw[body_offset(raw) :] == b"}"


def test_split_sow_batch() -> None:
    outer, records = split_sow_batch(SOW_BATCH)
    assert outer == {"c": "sow", "t": "topicS", "query_id": "auto2", "bs": 2}
    assert [r.get_sow_key() for r in records] == ["k1", "k2"]
    assert [r.get_bookmark() for r in records] == ["9|1|", "9|2|"]
    assert [r.data for r in records] == [b'{"id":1}', b'{"id":2}']
    assert all(r.get_topic() == "topicS" and r.get_query_id() == "auto2" for r in records)
    assert all(r.get_command() == "sow" for r in records)
