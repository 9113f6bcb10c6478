"""The optional C speedups (``ampsclient/_speedups_src/``) against their pure-Python twins.

Each C function is fed the same inputs as its Python reference and must give the same
results, input by input: ``split_frames`` (TCP framing), ``deliver`` (routing deliveries to
handlers, recycling messages), ``BookmarkLane`` (``MemoryBookmarkStore``'s common case) and
``PublishLane`` and ``PlainPublishLane`` (the common cases of ``AsyncHAClient.publish`` and
``AsyncClient.publish``).
The client tests that run through real sockets use whichever is active; the ones here that
use a server run under both.
"""

from __future__ import annotations

import gc
import itertools
import os
import queue
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import weakref
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient import Client, Message, _accel
from ampsclient.client import AsyncClient, deliver as deliver_py
from ampsclient.core.connection import ClientCore
from ampsclient.core.publish import publish_frame as publish_frame_py, publish_header
from ampsclient.core.routes import deliver_stream as routes_deliver_stream
from ampsclient.exceptions import DisconnectedError, FrameTooLargeError
from ampsclient.ha.client import AsyncHAClient
from ampsclient.ha.store_forward import StoreAndForward
from ampsclient.protocol.framing import TcpFramer, split_frames as split_py
from ampsclient.protocol.header import decode_header
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.stores.publish import FilePublishStore, MemoryPublishStore
from ampsclient.stores.publish.base import initial_sequence, join_seq as join_seq_py
from ampsclient.stores.publish.file import inspect_store, write_record as write_record_py
from ampsclient.stores.recovery import RecoveryPoint
from ampsclient.sync import HAClient
from ampsclient.transport.ws import ws_messages
from ampsclient_server_stub.testing import LoopbackProxy, wait_for

C: Any = _accel.implementations().get("c")
needs_c = pytest.mark.skipif(C is None, reason="the C speedups are not built here")
needs_c_message = pytest.mark.skipif(
    C is None or not issubclass(Message, C.MessageFields),
    reason="Message is built on the Python twin of MessageFields (AMPSCLIENT_PUREPYTHON)",
)
needs_publish_lane_type = pytest.mark.skipif(
    _accel.PublishLane is None, reason="no C publish lane (AMPSCLIENT_PUREPYTHON)"
)
needs_lane = pytest.mark.skipif(
    _accel.BookmarkLane is None, reason="stores do not use the C lane (AMPSCLIENT_PUREPYTHON)"
)


def test_speedups_are_built_where_the_build_requires_them() -> None:
    """``make test`` sets AMPSCLIENT_REQUIRE_SPEEDUPS=1: CI fails if the extension did not build."""
    required = os.environ.get("AMPSCLIENT_REQUIRE_SPEEDUPS") == "1"
    if not required:
        pytest.skip("AMPSCLIENT_REQUIRE_SPEEDUPS is not set")
    assert C is not None
    assert _accel.SPEEDUPS is True
    assert _accel.BookmarkLane is not None


def test_purepython_switch_selects_the_python_code() -> None:
    code = (
        "from ampsclient import _accel\n"
        "from ampsclient.stores.bookmark import MemoryBookmarkStore\n"
        "from ampsclient.protocol.framing import TcpFramer\n"
        "s = MemoryBookmarkStore()\n"
        "f = TcpFramer(); f.receive_data(b'\\x00\\x00\\x00\\x02hi')\n"
        "print(_accel.SPEEDUPS, _accel.deliver, s._lane, f.frames())\n"
    )
    env = dict(os.environ, AMPSCLIENT_PUREPYTHON="1")
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.split() == ["False", "None", "None", "[b'hi']"]


# ------------------------------------------------------------- no layout: values and own types


def c_source() -> str:
    """The whole C source of ``ampsclient._speedups``: every ``.c`` and ``.h`` of
    ``ampsclient/_speedups_src`` (one file per concept, one module), as one text, so that each
    check below holds for the module whichever file a function is in."""
    src = os.path.join(os.path.dirname(_accel.__file__), "_speedups_src")
    names = sorted(n for n in os.listdir(src) if n.endswith((".c", ".h")))
    assert {"module.c", "speedups.h", "lane_method.c", "publish_lane.c"} <= set(names), names
    texts = []
    for name in names:
        with open(os.path.join(src, name)) as f:
            texts.append(f.read())
    return "\n".join(texts)


def c_function(source: str, signature: str) -> str:
    """The body of the C function whose definition starts with ``signature``."""
    body = source[source.index(signature) :]
    return body[: body.index("\n}\n")]


def test_there_is_no_layout_table() -> None:
    """Issue #29: C reads or writes no slot or instance attribute of a class it does not own;
    it takes values (given to its functions and lanes' constructors) and works on the fields
    of its own types. So there is no table of roles to bind: ``_accel`` has no ``LAYOUT``,
    the extension no ``bind``/``roles``, and its source no role table."""
    assert not hasattr(_accel, "LAYOUT")
    source = c_source()
    for gone in ("role_keys", "bind(", "roles(", "NAME(", "need_layout"):
        assert gone not in source, gone
    if C is not None:
        assert not hasattr(C, "bind") and not hasattr(C, "roles")


def test_the_c_source_reads_no_slot_offset_of_a_python_class() -> None:
    """The only member descriptor the C code looks up is ``LaneMethod``'s (the lane attribute
    the decorated class itself names): the lanes and the bookmark lane find every field they
    touch at an ``offsetof`` of one of the extension's own structs. The names it looks up
    on an object are the standard library's (a lock's ``locked``)."""
    source = c_source()
    lane_method = c_function(source, "lanemethod_lane(LaneMethod *lm")
    for lookup in ("PyMemberDescr_Type", "_PyType_Lookup("):
        assert source.count(lookup) == 1, lookup
        assert lookup in lane_method, lookup
    assert "slot_offset" not in source
    assert "tp_dictoffset" not in source
    calls = re.findall(r"take_attr\(([^,]+), ([^,]+),", source)
    assert calls[0] == ("PyObject *obj", "PyObject *name")  # its definition, then its calls
    assert calls[1:] and {name for _, name in calls[1:]} == {"str_locked"}, calls
    # every attribute lookup by name: take_attr (given str_locked), and LaneMethod's
    # forwarding of its own Python method's attributes (__doc__, __name__...)
    looked_up_in = {
        re.findall(r"^(\w+)\(", source[: m.start()], re.M)[-1]
        for m in re.finditer(r"PyObject_GetAttr(?:String)?\(", source)
    }
    assert looked_up_in == {"take_attr", "lanemethod_getattro", "lanemethod_doc"}


def test_the_c_source_reads_no_instance_dict_but_the_lane_methods_own_attribute() -> None:
    """No C function reads another object's instance ``__dict__`` (the auto-ack handler did,
    for the QueueAcks' batches; it gets an AckBatches now). The one dict read left is
    ``LaneMethod``'s: the lane attribute the decorated class itself names (``lane_method``)."""
    source = c_source()
    assert "GenericGetDict" not in source
    assert source.count("_PyObject_GetDictPtr(") == 1
    assert "_PyObject_GetDictPtr(" in c_function(source, "lanemethod_lane(LaneMethod *lm")


def assert_field_type(cls: Any, fields: set[str], *, deletable: bool = False) -> None:
    """A C-owned field type or its Python twin: exactly ``fields`` public, each unset on a new
    instance and settable (and deletable where asked), no instance dict."""
    assert {n for n in dir(cls) if not n.startswith("_")} == fields, cls
    obj = cls()
    for name in sorted(fields):
        with pytest.raises(AttributeError):
            getattr(obj, name)
        setattr(obj, name, [name])
        assert getattr(obj, name) == [name]
        if deletable:
            delattr(obj, name)
            with pytest.raises(AttributeError):
                getattr(obj, name)
    with pytest.raises(AttributeError):
        obj.other = 1


@needs_lane
def test_bookmark_record_fields_twins_behave_alike() -> None:
    """The C ``BookmarkSubscriptionFields``/``BookmarkPublisherFields`` (the lane works on
    their fields) and their twins: the same public fields, unset on a new instance,
    settable, no instance dict; the store's record classes are built on the ones in use,
    and the lane refuses record types that are not."""
    from ampsclient.stores.bookmark import memory

    pairs = [
        (C.BookmarkSubscriptionFields, _accel.PyBookmarkSubscriptionFields, memory._Subscription),
        (C.BookmarkPublisherFields, _accel.PyBookmarkPublisherFields, memory._Publisher),
    ]
    for c_type, twin, record in pairs:
        names = set(twin.__slots__)
        for cls in (c_type, twin):
            assert_field_type(cls, names)
        assert record.__mro__[1] is c_type
        assert not names & set(record.__slots__)  # the record keeps only its own slots
    store = MemoryBookmarkStore()

    class Other:
        __slots__ = _accel.PyBookmarkSubscriptionFields.__slots__

    with pytest.raises(TypeError, match="BookmarkSubscriptionFields"):
        C.BookmarkLane(
            {},
            C.StoreLock(),
            store.log,
            store.discard_message,
            Other,
            memory._Publisher,
            Message,
            True,
        )


@needs_publish_lane_type
def test_publish_index_fields_twins_behave_alike(tmp_path: Any) -> None:
    """The C ``PublishIndexFields`` (the HA publish lane works on its fields) and its twin:
    the same public fields, unset on a new instance, settable, no instance dict; both
    bundled stores are built on the one in use, and a file store's ``index_log`` is its
    segment files; the lane refuses a store that is not built on it."""
    names = set(_accel.PyPublishIndexFields.__slots__)
    for cls in (C.PublishIndexFields, _accel.PyPublishIndexFields):
        assert_field_type(cls, names)
    memory = MemoryPublishStore()
    assert isinstance(memory, C.PublishIndexFields) and memory.index_log is None
    assert (memory.index_closed, memory.index_count, memory.index_buf) == (False, 0, [])
    with FilePublishStore(str(tmp_path / "s"), fsync="never") as file_store:
        assert file_store.index_log is file_store.segment_log
    writer = AsyncClient("index")._wiring.writer
    state = StoreAndForward(MemoryPublishStore(), writer).fields
    state.store = object()  # (what only a test does: StoreAndForward alone writes it)
    with pytest.raises(TypeError, match="PublishIndexFields"):
        C.PublishLane(state=state, file=False, publish=print, head=b"", **writer.lane_arguments())


@needs_publish_lane_type
def test_writer_fields_twins_behave_alike() -> None:
    """The C ``WriterFields`` (the publish lanes read the writer's flags through it) and its
    twin: the same four public fields, unset on a new instance, settable, no instance dict;
    a client's writer holds the one in use and hands it to its lanes, which refuse
    anything else (a writer object, whatever its attributes)."""
    names = {"transport", "wake_pending", "blocked", "caller_writes"}
    assert set(_accel.PyWriterFields.__slots__) == names
    for cls in (C.WriterFields, _accel.PyWriterFields):
        assert_field_type(cls, names)
    writer = AsyncClient("fields")._wiring.writer
    assert type(writer.fields) is C.WriterFields is _accel.WriterFields
    f = writer.fields
    assert (f.transport, f.wake_pending, f.blocked, f.caller_writes) == (None, False, False, False)
    args = writer.lane_arguments()
    assert args["fields"] is f
    with pytest.raises(TypeError, match="WriterFields"):
        C.PlainPublishLane(publish=print, result=0, prefixes={}, **{**args, "fields": writer})
    assert type(writer.plain_publish_lane()) is C.PlainPublishLane


@needs_publish_lane_type
def test_store_forward_fields_twins_behave_alike() -> None:
    """The C ``StoreForwardFields`` (the HA publish lane is built on it: store, lock, suffix
    cache, gate) and its twin: the same four public fields, unset on a new instance,
    settable, no instance dict; an HA client's ``StoreAndForward`` holds the one in use, its
    lane is built on it, and the lane refuses anything else as its state."""
    names = {"store", "lock", "suffixes", "can_send"}
    assert set(_accel.PyStoreForwardFields.__slots__) == names
    for cls in (C.StoreForwardFields, _accel.PyStoreForwardFields):
        assert_field_type(cls, names)
    client = AsyncHAClient("state")
    publishing = client._publishing
    f = publishing.fields
    assert type(f) is C.StoreForwardFields is _accel.StoreForwardFields
    assert f.store is client.publish_store and f.can_send is False and f.suffixes == {}
    assert publishing.lock is f.lock and not publishing.gate_open
    with publishing.lock:
        publishing.open_gate()
    assert f.can_send is True and publishing.wait_open(0)
    with publishing.lock:
        publishing.close_gate()
    assert f.can_send is False and not publishing.wait_open(0)
    assert type(client._lane) is C.PublishLane  # built on those fields
    writer = client.client._wiring.writer
    with pytest.raises(TypeError):
        C.PublishLane(
            state=publishing, file=False, publish=print, head=b"", **writer.lane_arguments()
        )


@needs_publish_lane_type
def test_segment_log_fields_twins_behave_alike(tmp_path: Any) -> None:
    """The C ``SegmentLogFields`` (the HA publish lane works on its fields) and its twin:
    the same public fields, unset on a new instance, settable, no instance dict;
    ``SegmentLog`` is built on the one in use and keeps only its other slots."""
    from ampsclient.stores.publish.segments import SegmentLog

    names = set(_accel.PySegmentLogFields.__slots__)
    for cls in (C.SegmentLogFields, _accel.PySegmentLogFields):
        assert_field_type(cls, names)
    assert SegmentLog.__mro__[1] is C.SegmentLogFields
    assert not names & set(SegmentLog.__slots__)
    log = SegmentLog(tmp_path, segment_size=1 << 20, sync_files=False)
    assert (log.broken, log.mm, log.active_size, log.write_gen) == (None, None, 0, 0)


@needs_lane
def test_ack_batches_twins_behave_alike() -> None:
    """The C ``AckBatches`` (what the C auto-ack reads) and its twin ``PyAckBatches``: the
    same three public fields, unset on a new instance, settable, no instance dict; a
    ``QueueAcks`` holds the one in use, and the C handler refuses anything else."""
    for cls in (C.AckBatches, _accel.PyAckBatches):
        assert_field_type(cls, {"pending", "caps", "batch_size"})
    from ampsclient.acks import QueueAcks

    acks = QueueAcks(lambda payload: None, lambda seconds, fn: None)
    assert type(acks._batches) is C.AckBatches
    acks.set_batch_size(7)
    assert acks._batches.batch_size == 7 == acks.batch_size
    with pytest.raises(TypeError, match="AckBatches"):
        C.AutoAck(print, acks, {}, acks._lock, print, print, print, print, print)


@needs_c
def test_deliver_fills_its_own_message_type_without_the_table() -> None:
    """A fresh process loads the extension before ampsclient: ``deliver`` needs no table (it
    fills the fields of its own ``MessageFields`` type, in any subclass), and refuses a
    class not built on that type, whatever slots it has."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('ampsclient._speedups', {C.__file__!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "class Msg(m.MessageFields):\n"
        "    __slots__ = ('extra',)\n"
        "class Other:\n"
        "    __slots__ = ('payload_bytes', 'routed_sub_id', 'parsed_header', 'parsed_data',\n"
        "                 'seen_bookmark', 'body_start')\n"
        "seen = []\n"
        "args = [[b'PREFIX}x'], {b'PREFIX': ('S', seen.append, False, None, None)}, [6],\n"
        '        Msg, print, print, b\',"bm":"\']\n'
        "m.deliver(*args)\n"
        "f = seen[0]\n"
        "print('filled:', f.payload_bytes, f.routed_sub_id, f.seen_bookmark, f.body_start)\n"
        "args[3] = Other\n"
        "try:\n"
        "    m.deliver(*args)\n"
        "except TypeError as exc:\n"
        "    print('refused:', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out[0] == "filled: b'PREFIX}x' S None -1"
    assert out[1].startswith("refused: message_type must be a subclass of")


@needs_c
def test_message_fields_twins_behave_alike() -> None:
    """The C ``MessageFields`` and its twin ``PyMessageFields``: the same six public fields,
    unset on a new instance, settable and deletable, no instance dict; ``Message`` is built
    on one of them and keeps no slot of its own."""
    fields = {
        "payload_bytes",
        "routed_sub_id",
        "parsed_header",
        "parsed_data",
        "seen_bookmark",
        "body_start",
    }
    for cls in (C.MessageFields, _accel.PyMessageFields):
        assert_field_type(cls, fields, deletable=True)
    assert Message.__slots__ == ()
    assert Message.__mro__[1] is _accel.MessageFields
    if _accel.SPEEDUPS:
        assert _accel.MessageFields is C.MessageFields


def _twin(path: str) -> Any:
    import importlib

    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


@needs_c
def test_every_c_lane_has_exactly_one_python_twin() -> None:
    """``_accel.TWINS`` names one Python twin for each C function and lane method; each
    twin exists. (The differential tests below run each pair on the same inputs.)"""
    exported: set[str] = set()
    for name in dir(C):
        obj = getattr(C, name)
        if name.startswith("_") or not callable(obj):
            continue
        if isinstance(obj, type):
            methods = {
                f"{name}.{meth}"
                for meth in vars(obj)
                if not meth.startswith("_") and meth != "disable" and callable(getattr(obj, meth))
            }
            exported |= methods or {name}  # a type with no method of its own: its call
        else:
            exported.add(name)
    assert exported == set(_accel.TWINS)
    for path in _accel.TWINS.values():
        assert callable(_twin(path)), path
    assert len(set(_accel.TWINS.values())) == len(_accel.TWINS)


# ----------------------------------------------------------------------------- split_frames


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=40), max_size=8),
    tail=st.binary(max_size=9),
    pos=st.integers(0, 12),
    limit=st.integers(0, 50),
)
def test_split_frames_matches_python(
    payloads: list[bytes], tail: bytes, pos: int, limit: int
) -> None:
    data = b"".join(frame(p) for p in payloads) + tail
    pos = min(pos, len(data))
    out_c: list[bytes] = [b"before"]
    out_py: list[bytes] = [b"before"]
    assert C.split_frames(data, pos, limit, out_c) == split_py(data, pos, limit, out_py)
    assert out_c == out_py


@needs_c
def test_split_frames_golden() -> None:
    data = frame(b"ab") + frame(b"") + frame(b"xyz")[:5]
    out: list[bytes] = []
    assert C.split_frames(data, 0, 100, out) == 10
    assert out == [b"ab", b""]
    # an oversized prefix: -1 - its offset; frames before it are kept
    out = []
    assert C.split_frames(frame(b"ok") + frame(b"x" * 10), 0, 5, out) == -1 - 6
    assert out == [b"ok"]
    with pytest.raises(TypeError):
        C.split_frames(bytearray(b"...."), 0, 5, [])


@pytest.fixture(params=["c", "python"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the C speedups and again with the pure-Python code."""
    if request.param == "c":
        if C is None:
            pytest.skip("the C speedups are not built here")
    else:
        monkeypatch.setattr(_accel, "split_frames", None)
        monkeypatch.setattr(_accel, "deliver", None)
        monkeypatch.setattr(_accel, "deliver_stream", None)
        monkeypatch.setattr(_accel, "BookmarkLane", None)
        monkeypatch.setattr(_accel, "ws_encode", None)
    return str(request.param)


def test_tcp_framer_oversized_and_chunked(implementation: str) -> None:
    stream = frame(b"first") + frame(b"second" * 50) + frame(b"third")
    framer = TcpFramer(max_frame_size=1000)
    got: list[bytes] = []
    for i in range(0, len(stream), 7):
        framer.receive_data(stream[i : i + 7])
        got += framer.frames()
    assert got == [b"first", b"second" * 50, b"third"]
    small = TcpFramer(max_frame_size=10)
    with pytest.raises(FrameTooLargeError, match="frame of 300 bytes exceeds the maximum of 10"):
        small.receive_data(frame(b"ok") + frame(b"second" * 50))
    assert small.frames() == [b"ok"]


def test_core_receive_data_delivers_the_same_in_any_chunking(implementation: str) -> None:
    """``ClientCore.receive_data`` (one pass: frames cut and delivered together) gives the
    handlers every payload once, in order, however the stream is cut into reads; a frame
    over the limit raises after the ones before it were delivered."""
    payloads = [b'{"c":"p","t":"a","sids":"A"}' + b"x" * (i % 7) for i in range(60)]
    stream = b"".join(frame(p) for p in payloads)
    rng = random.Random(20261124)
    for _ in range(40):
        core = ClientCore(max_frame_size=100)
        got: list[bytes] = []
        core.routes["A"] = lambda m, got=got: got.append(bytes(bytearray(m.payload_bytes)))
        pos = 0
        while pos < len(stream):
            step = rng.choice([1, 2, 3, 5, 40, 97, 400, len(stream)])
            core.receive_data(stream[pos : pos + step])
            pos += step
        assert got == payloads
        assert core.stats["frames_received"] == len(payloads)
    core = ClientCore(max_frame_size=100)
    got = []
    core.routes["A"] = lambda m: got.append(bytes(bytearray(m.payload_bytes)))
    with pytest.raises(FrameTooLargeError, match="frame of 300 bytes exceeds the maximum of 100"):
        core.receive_data(frame(payloads[0]) + frame(payloads[1]) + frame(b"z" * 300))
    assert got == payloads[:2]


class _Sink:
    """A payload sink handler (Routes.learn): the fast path appends to ``payload_sink``."""

    def __init__(self) -> None:
        self.payload_sink: list[bytes] = []
        self.messages: list[bytes] = []  # what came as messages (the first, before learning)
        self.passes = 0

    def __call__(self, m: Message) -> None:
        self.messages.append(bytes(bytearray(m.payload_bytes)))
        self.payload_sink.append(m.payload_bytes)

    def sink_filled(self) -> None:
        self.passes += 1


def test_core_receive_data_fills_a_payload_sink_in_any_chunking(implementation: str) -> None:
    """A handler with a payload sink gets its first delivery as a message, then every
    payload appended to its list by the fast path (no message), in order, once each, and
    one ``sink_filled`` call per pass of deliveries, not per payload; a route change falls
    back to messages until the prefix is learned again."""
    payloads = [
        b'{"c":"p","t":"a","sids":"A","bm":"1|%d|"}' % i + b"x" * (i % 7) for i in range(60)
    ]
    stream = b"".join(frame(p) for p in payloads)
    rng = random.Random(20261129)
    for _ in range(40):
        core = ClientCore(max_frame_size=100)
        sink = _Sink()
        core.routes["A"] = sink
        pos = reads = 0
        while pos < len(stream):
            step = rng.choice([1, 2, 3, 5, 40, 97, 400, len(stream)])
            core.receive_data(stream[pos : pos + step])
            pos += step
            reads += 1
        assert sink.payload_sink == payloads
        assert sink.messages == payloads[:1]  # only the first: the route was learned from it
        assert 1 <= sink.passes <= 2 * reads  # per pass: a frame completed, then the rest
    core = ClientCore(max_frame_size=100)
    sink = _Sink()
    core.routes["A"] = sink
    core.receive_data(b"".join(frame(p) for p in payloads[:3]))
    core.routes["B"] = _Sink()  # any route change forgets the learned prefixes
    core.receive_data(frame(payloads[3]) + frame(payloads[4]))
    assert sink.payload_sink == payloads[:5]
    assert sink.messages == [payloads[0], payloads[3]]


# ----------------------------------------------------------------------------- publish stores


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    head=st.binary(max_size=20),
    seq=st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(10**30), 10**30)),
    tail=st.binary(max_size=300),
)
def test_join_seq_matches_python(head: bytes, seq: int, tail: bytes) -> None:
    assert C.join_seq(head, seq, tail) == join_seq_py(head, seq, tail)


@needs_c
def test_join_seq_digits_at_every_length() -> None:
    """The C digits (a multiply for each division by 10, as the publish lane spells them)
    at every decimal length's edges and the 64-bit limits."""
    edges = [0, 2**63 - 1, -(2**63), 2**32 - 1, 2**32, 2**53 + 1]
    for k in range(1, 19):
        edges += [10**k - 1, 10**k, 10**k + 1, 2 * 10**k - 1, -(10**k), -(10**k) + 1]
    for seq in edges:
        assert C.join_seq(b"s=", seq, b",") == b"s=%d," % seq


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    command=st.sampled_from(["p", "publish", "delta_publish"]),
    topic=_TEXT,
    stored=st.booleans(),
    expiration=st.none() | st.integers(-(10**12), 10**12),
    correlation_id=st.none() | _TEXT,
    sow_key=st.none() | _TEXT,
    seq=st.one_of(st.integers(0, 2**64 - 1), st.integers(-(10**30), 10**30)),
    data=st.binary(max_size=300),
)
def test_publish_frame_matches_the_core_encoder(
    command: str,
    topic: str,
    stored: bool,
    expiration: int | None,
    correlation_id: str | None,
    sow_key: str | None,
    seq: int,
    data: bytes,
) -> None:
    """The C ``publish_frame`` (which both publish lanes spell their frames with) and its twin,
    the core's :func:`~ampsclient.core.publish.publish_frame`, on the head and tail the core's
    encoder makes for every option the client sends, stored (with a sequence) or not."""
    head, tail = publish_header(
        command,
        topic,
        sequenced=stored,
        ack_type="persisted" if stored else None,
        expiration=expiration,
        correlation_id=correlation_id,
        sow_key=sow_key,
    )
    sequence = seq if stored else None
    assert C.publish_frame(head, sequence, tail, data) == publish_frame_py(
        head, sequence, tail, data
    )


@needs_c
def test_publish_frame_edges_and_refusals() -> None:
    for seq in [None, 0, 1, 9, 10, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -1, -(2**63)]:
        for head, tail, data in [(b"", b"", b""), (b'{"c":"p","s":', b',"t":"t"}', b"x" * 70001)]:
            assert C.publish_frame(head, seq, tail, data) == publish_frame_py(head, seq, tail, data)
    for bad in [
        ("h", None, b"", b""),
        (b"h", 1.0, b"", b""),
        (b"h", True, b"", b""),
        (b"h", None, b"", "data"),
        (b"h", None, bytearray(), b""),
    ]:
        with pytest.raises(TypeError, match="publish_frame"):
            C.publish_frame(*bad)
    with pytest.raises(TypeError):
        C.publish_frame(b"h", None, b"")


@needs_c
@settings(max_examples=200, deadline=None)
@given(
    size=st.sampled_from([0, 1, 7, 8, 9, 255, 256, 257, 65535, 65536, 70001]),
    seq=st.integers(0, 2**64 - 1),
    start=st.integers(0, 9),
    value=st.integers(0, 2**32 - 1),
)
def test_write_record_and_crc32_match_python(size: int, seq: int, start: int, value: int) -> None:
    payload = bytes((i * 7 + seq) & 0xFF for i in range(size))
    assert C.crc32(payload) == zlib.crc32(payload)
    assert C.crc32(payload, value) == zlib.crc32(payload, value)
    a = bytearray(b"\xee" * (size + 40))
    b = bytearray(a)
    assert C.write_record(a, start, seq, payload) == write_record_py(b, start, seq, payload)
    assert a == b
    with pytest.raises(ValueError):
        C.write_record(bytearray(size + 19), start, seq, payload)
    with pytest.raises(ValueError):
        write_record_py(bytearray(size + 19), start, seq, payload)


@needs_c
def test_write_record_into_a_read_only_buffer_is_refused() -> None:
    with pytest.raises(BufferError):
        C.write_record(b"\x00" * 64, 0, 1, b"x")


# ----------------------------------------------------------------------------- deliver


class Recorder:
    """Handlers, ``log``, ``unrouted`` and ``report`` that write down everything they see."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.kept: list[tuple[Message, bytes]] = []
        self.sink: list[bytes] = []  # a payload sink's list (Routes.learn)

    def handler(self, name: str) -> Any:
        def call(m: Message) -> None:
            fields = (m.payload_bytes, m.routed_sub_id, m.seen_bookmark, m.parsed_header)
            self.events.append((name, *fields, m.parsed_data, m.body_start))
            if m.payload_bytes.endswith(b"keep"):
                self.kept.append((m, m.payload_bytes))
            if m.payload_bytes.endswith(b"boom"):
                raise ValueError(f"boom in {name}")

        return call

    def log(self, m: Message) -> int:
        self.events.append(("log", m.seen_bookmark))
        if m.seen_bookmark == "9|13|":
            raise RuntimeError("log failed")
        return 0 if m.seen_bookmark and m.seen_bookmark.startswith("9|2") else 7

    def unrouted(self, payload: bytes) -> None:
        self.events.append(("unrouted", payload))

    def report(self, exc: BaseException) -> None:
        self.events.append(("report", type(exc).__name__, str(exc)))


PREFIX_A = b'{"c":"p","t":"a","sids":"A"'
PREFIX_B = b'{"c":"p","t":"bb","sids":"B"'
PREFIX_S = b'{"c":"p","t":"s","sids":"S"'  # a payload sink's route (as long as PREFIX_A)


def run_deliver(fn: Any, payloads: list[bytes], lengths: list[int]) -> Recorder:
    rec = Recorder()
    cache = {
        PREFIX_A: ("A", rec.handler("a"), False, None, None),
        PREFIX_B: ("B", rec.handler("b-outer"), True, rec.log, rec.handler("b-inner")),
        PREFIX_S: ("S", rec.sink, False, None, None),
    }
    fn(payloads, cache, lengths, Message, rec.unrouted, rec.report, b',"bm":"')
    return rec


payload_st = st.one_of(
    st.builds(lambda t: PREFIX_A + b"}" + t, st.sampled_from([b"", b"x", b"keep", b"boom"])),
    st.builds(
        lambda seq, t: PREFIX_B + b',"bm":"9|' + str(seq).encode() + b'|"}' + t,
        st.integers(0, 30),
        st.sampled_from([b"", b"keep", b"boom"]),
    ),
    st.builds(lambda t: PREFIX_B + b',"bm":"9|1' + t, st.sampled_from([b"", b"keep"])),
    st.just(PREFIX_B + b',"bm":"\xff\xfe"}'),  # not UTF-8: reported, like the Python one
    st.just(PREFIX_B + b"}keep"),
    st.builds(lambda t: PREFIX_S + b"}" + t, st.sampled_from([b"", b"x", b"keep", b"boom"])),
    st.binary(max_size=30),
)


@needs_c_message
@settings(max_examples=300, deadline=None)
@given(payloads=st.lists(payload_st, max_size=12), two=st.booleans())
def test_deliver_matches_python(payloads: list[bytes], two: bool) -> None:
    lengths = [len(PREFIX_A), len(PREFIX_B)] if two else [len(PREFIX_B)]
    c = run_deliver(C.deliver, payloads, lengths)
    py = run_deliver(deliver_py, payloads, lengths)
    assert c.events == py.events
    assert c.sink == py.sink  # a sink route: the payloads appended, in order
    # a message a handler kept is never reused: it still holds its own delivery
    assert [raw for _, raw in c.kept] == [raw for _, raw in py.kept]
    for m, raw in c.kept:
        assert m.payload_bytes == raw


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in payloads)


def run_deliver_stream(fn: Any, data: bytes, pos: int, limit: int) -> tuple[Any, Recorder]:
    rec = Recorder()
    cache = {
        PREFIX_A: ("A", rec.handler("a"), False, None, None),
        PREFIX_B: ("B", rec.handler("b-outer"), True, rec.log, rec.handler("b-inner")),
        PREFIX_S: ("S", rec.sink, False, None, None),
    }
    lengths = [len(PREFIX_A), len(PREFIX_B)]
    out = fn(data, pos, limit, cache, lengths, Message, rec.unrouted, rec.report, b',"bm":"')
    return out, rec


@needs_c_message
@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(payload_st, max_size=12),
    tail=st.binary(max_size=6),
    pos=st.integers(0, 5),
    limit=st.sampled_from([40, 1000]),
)
def test_deliver_stream_matches_python(
    payloads: list[bytes], tail: bytes, pos: int, limit: int
) -> None:
    """split_frames + deliver in one pass, C and Python: the same position, count and
    handler calls, for any stream (a partial tail, a start offset, an oversized prefix)."""
    data = framed(payloads) + tail
    c_out, c = run_deliver_stream(C.deliver_stream, data, pos, limit)
    py_out, py = run_deliver_stream(routes_deliver_stream, data, pos, limit)
    assert c_out == py_out
    assert c.events == py.events
    assert c.sink == py.sink
    assert [raw for _, raw in c.kept] == [raw for _, raw in py.kept]
    for m, raw in c.kept:
        assert m.payload_bytes == raw


@needs_c_message
def test_deliver_stream_refills_only_payloads_nobody_holds() -> None:
    """The C pass reuses a payload's bytes for the next payload of the same size only when
    the recycled message alone held them: a payload or message a handler kept never
    changes afterwards, and a refilled payload hashes as its new contents."""
    payloads = [PREFIX_A + b"}%04d" % i for i in range(200)]
    seen: list[str] = []
    ids: list[int] = []
    kept: list[bool] = []
    kept_raw: list[tuple[bytes, bytes]] = []
    kept_msg: list[tuple[Message, bytes]] = []

    def handler(m: Message) -> None:
        raw = m.payload_bytes
        ids.append(id(raw))
        seen.append(raw.hex())
        assert {raw: 1}.get(bytes(bytearray(raw))) == 1  # its hash is of what it holds now
        i = len(seen)
        kept.append(i % 3 == 0 or i % 5 == 0)
        if i % 3 == 0:
            kept_raw.append((raw, bytes(bytearray(raw))))
        elif i % 5 == 0:
            kept_msg.append((m, bytes(bytearray(raw))))

    cache = {PREFIX_A: ("A", handler, False, None, None)}
    data = framed(payloads)
    out = C.deliver_stream(data, 0, 1000, cache, [len(PREFIX_A)], Message, None, None, b',"bm":"')
    assert out == (len(data), 200)
    assert seen == [p.hex() for p in payloads]
    assert all(raw == copy for raw, copy in kept_raw)
    assert all(m.payload_bytes == copy for m, copy in kept_msg)
    # the next payload is the same object exactly when the previous one was not kept (a
    # new object is made while the previous one is still alive: it cannot share its id)
    for i in range(1, 200):
        assert (ids[i] == ids[i - 1]) == (not kept[i - 1]), i


@needs_c_message
def test_deliver_recycles_exactly_when_python_does() -> None:
    def ignore(x: object) -> None:
        raise AssertionError(x)

    def run(fn: Any) -> list[bool]:
        ids: list[int] = []
        keep: list[Message] = []

        def handler(m: Message) -> None:
            ids.append(id(m))
            if len(ids) % 4 == 0:
                keep.append(m)

        cache = {PREFIX_A: ("A", handler, False, None, None)}
        fn(
            [PREFIX_A + b"}" + bytes([i]) for i in range(20)],
            cache,
            [len(PREFIX_A)],
            Message,
            ignore,
            ignore,
            b',"bm":"',
        )
        return [a == b for a, b in itertools.pairwise(ids)]

    assert run(C.deliver) == run(deliver_py)
    assert not all(run(C.deliver)) and any(run(C.deliver))


@needs_c_message
def test_deliver_sees_routes_a_handler_adds_or_removes_mid_batch() -> None:
    """The C loop reuses the last prefix it looked up (no new key per payload); the lookup
    itself still happens for each payload, so a route a handler removes or replaces is seen
    by the next payload, as in Python."""

    def run(fn: Any) -> list[tuple[Any, ...]]:
        events: list[tuple[Any, ...]] = []
        cache: dict[bytes, Any] = {}

        def first(m: Message) -> None:
            events.append(("first", m.payload_bytes))
            if m.payload_bytes.endswith(b"swap"):
                cache[PREFIX_A] = ("A2", second, False, None, None)
            if m.payload_bytes.endswith(b"drop"):
                del cache[PREFIX_A]

        def second(m: Message) -> None:
            events.append(("second", m.payload_bytes, m.routed_sub_id))
            if m.payload_bytes.endswith(b"drop"):
                del cache[PREFIX_A]

        def unrouted(payload: bytes) -> None:
            events.append(("unrouted", payload))
            if payload.endswith(b"learn"):
                cache[PREFIX_A] = ("A", first, False, None, None)

        cache[PREFIX_A] = ("A", first, False, None, None)
        tails = [b"1", b"swap", b"2", b"drop", b"3", b"learn", b"4", b"drop", b"5"]
        payloads = [PREFIX_A + b"}" + t for t in tails] + [PREFIX_B + b"}" + b"6"]
        fn(payloads, cache, [len(PREFIX_A), len(PREFIX_B)], Message, unrouted, print, b"")
        return events

    c = run(C.deliver)
    assert c == run(deliver_py)
    assert [e[0] for e in c] == [
        "first",
        "first",
        "second",
        "second",
        "unrouted",
        "unrouted",
        "first",
        "first",
        "unrouted",
        "unrouted",
    ]


@needs_c_message
def test_deliver_takes_message_subclasses_and_refuses_other_classes() -> None:
    """A subclass of Message is filled as Python fills it; a class not built on the C
    ``MessageFields`` (even one with the same slot names) is refused, by both passes."""

    class Sub(Message):
        __slots__ = ()

    class Other:
        __slots__ = _accel.PyMessageFields.__slots__

    classes: list[type[Any]] = [Sub, Message, Sub]
    for cls in classes:
        seen: list[Any] = []
        C.deliver(
            [PREFIX_A + b"}x"],
            {PREFIX_A: ("A", seen.append, False, None, None)},
            [len(PREFIX_A)],
            cls,
            print,
            print,
            b"",
        )
        assert type(seen[0]) is cls
        assert (
            seen[0].payload_bytes,
            seen[0].routed_sub_id,
            seen[0].seen_bookmark,
            seen[0].body_start,
        ) == (PREFIX_A + b"}x", "A", None, -1)
    route = {PREFIX_A: ("A", print, False, None, None)}
    with pytest.raises(TypeError, match="MessageFields"):
        C.deliver([PREFIX_A + b"}x"], route, [len(PREFIX_A)], Other, print, print, b"")
    with pytest.raises(TypeError, match="MessageFields"):
        C.deliver_stream(frame(PREFIX_A), 0, 100, route, [6], Other, print, print, b"")


@needs_c_message
def test_deliver_lets_base_exceptions_through() -> None:
    def handler(m: Message) -> None:
        raise KeyboardInterrupt

    for fn in (C.deliver, deliver_py):
        with pytest.raises(KeyboardInterrupt):
            fn(
                [PREFIX_A + b"}"],
                {PREFIX_A: ("A", handler, False, None, None)},
                [len(PREFIX_A)],
                Message,
                handler,
                handler,
                b',"bm":"',
            )


@pytest.mark.integration
def test_client_receive_path(implementation: str, server: Any) -> None:
    """End to end over a real socket: handlers that keep messages and ones that do not."""
    kept: list[Message] = []
    seen: list[str] = []
    with Client(f"speedups-{implementation}") as client:
        client.connect(server.uri())
        client.logon(5000)

        def handler(m: Message) -> None:
            seen.append(m.get_data())
            if len(seen) % 5 == 0:
                kept.append(m)

        client.subscribe(handler, "speedups")
        for i in range(500):
            client.publish("speedups", f'{{"i":{i}}}')
        client.flush(5000)
        wait_for(lambda: len(seen) == 500, what="every delivery")
    assert seen == [f'{{"i":{i}}}' for i in range(500)]
    assert [m.get_data() for m in kept] == [f'{{"i":{i}}}' for i in range(4, 500, 5)]


# ----------------------------------------------------------------------------- BookmarkLane


def delivery(sub_id: str, bookmark: str) -> Message:
    """A message as the receive path fills it (slots, no header parse)."""
    m = Message()
    m.seen_bookmark = bookmark
    m.routed_sub_id = sub_id
    return m


class Updates:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def update(self, point: RecoveryPoint) -> None:
        self.seen.append((point.sub_id, point.bookmark))

    def purge(self, sub_id: str | None = None) -> None:
        self.seen.append(("purge", str(sub_id)))

    def close(self) -> None:
        pass

    def __iter__(self) -> Iterator[RecoveryPoint]:
        return iter(())


op_st = st.tuples(
    st.sampled_from(["log", "log", "log", "discard", "discard", "persisted", "purge", "dup"]),
    st.sampled_from(["s1", "s2"]),
    st.sampled_from(["111", "222", "333"]),
    st.integers(1, 12),
)


@needs_lane
@settings(max_examples=200, deadline=None)
@given(ops=st.lists(op_st, max_size=60), with_adapter=st.booleans())
def test_bookmark_lane_matches_the_python_store(
    ops: list[tuple[str, str, str, int]], with_adapter: bool
) -> None:
    """Random logs, discards (in and out of order), persisted acks and purges: the store
    driven through the lane and one driven through the Python methods agree after every step."""
    ad_fast, ad_ref = (Updates(), Updates()) if with_adapter else (None, None)
    fast = MemoryBookmarkStore(ad_fast)
    ref = MemoryBookmarkStore(ad_ref)
    assert fast._lane is not None
    ref._lane.disable()  # every call goes to the Python methods
    for op, sub, pub, seq in ops:
        bookmark = f"{pub}|{seq}|"
        if op in ("log", "dup"):
            a = fast.log_lane(delivery(sub, bookmark))
            b = ref.log_lane(delivery(sub, bookmark))
            assert a == b
        elif op == "discard":
            fast.discard_lane(delivery(sub, bookmark))
            ref.discard_lane(delivery(sub, bookmark))
        elif op == "persisted":
            fast.persisted(sub, bookmark)
            ref.persisted(sub, bookmark)
        else:
            fast.purge(sub)
            ref.purge(sub)
        for s in ("s1", "s2"):
            assert fast.get_most_recent(s) == ref.get_most_recent(s)
            assert fast.get_unprocessed_count(s) == ref.get_unprocessed_count(s)
            assert fast.is_discarded(delivery(s, bookmark)) == ref.is_discarded(
                delivery(s, bookmark)
            )
    if with_adapter:
        assert ad_fast is not None and ad_ref is not None
        assert ad_fast.seen == ad_ref.seen
    fast.close()
    ref.close()


@needs_lane
def test_bookmark_lane_in_order_stream_resume_point() -> None:
    store = MemoryBookmarkStore()
    for i in range(1, 1001):
        m = delivery("s", f"42|{i}|")
        assert store.log_lane(m) == i
        store.discard_lane(m)
    assert store.get_most_recent("s") == "42|1000|"
    # a redelivery is a duplicate through the lane too
    assert store.log_lane(delivery("s", "42|1000|")) == 0
    store.close()
    from ampsclient.exceptions import StoreError

    with pytest.raises(StoreError):
        store.log_lane(delivery("s", "42|1001|"))


@needs_lane
def test_bookmark_lane_remembers_no_message_class_strongly() -> None:
    """The C check that a message is a MessageFields remembers the last class it accepted
    (one comparison per call on the bookmark path) only weakly: a client's per-connection
    Message subclass, which holds its ack function, is collected once nothing else holds it,
    and the next class is checked and taken by the lane's common case as well."""
    store = MemoryBookmarkStore()
    seed = delivery("s", "7|1|")
    store.log(seed)  # Python: the publisher is new
    store.discard_message(seed)
    lane = store._lane
    logs, discards = lane.fast_logs, lane.fast_discards

    def through_the_lane(cls: type[Message], first: int) -> None:
        for i in range(first, first + 3):
            m = cls()
            m.seen_bookmark = f"7|{i}|"
            m.routed_sub_id = "s"
            assert store.log_lane(m) == i
            store.discard_lane(m)

    class PerClient(Message):
        __slots__ = ()

    through_the_lane(PerClient, 2)
    assert (lane.fast_logs - logs, lane.fast_discards - discards) == (3, 3)
    gone = weakref.ref(PerClient)
    del PerClient
    gc.collect()
    assert gone() is None

    class Next(Message):
        __slots__ = ()

    through_the_lane(Next, 5)
    assert (lane.fast_logs - logs, lane.fast_discards - discards) == (6, 6)
    store.close()


@needs_lane
def test_bookmark_lane_keeps_the_common_case_in_c_until_a_python_method_takes_the_lock() -> None:
    """The lane numbers and discards the common case itself, keeping the numbers as C state;
    a Python method of the store (it takes the store's lock) sees the records exactly as if
    every call had gone through it."""
    store = MemoryBookmarkStore()
    seed = delivery("s", "5|1|")
    store.log(seed)  # Python: the publisher is new, it has no point yet
    store.discard_message(seed)
    lane = store._lane
    sub: Any = store._subs["s"]
    pub: Any = sub.pubs["5"]
    logs, discards, flushes = lane.fast_logs, lane.fast_discards, lane.flushes
    for i in range(2, 102):
        m = delivery("s", f"5|{i}|")
        assert store.log_lane(m) == i
        store.discard_lane(m)
    assert (lane.fast_logs - logs, lane.fast_discards - discards) == (100, 100)
    assert lane.flushes == flushes  # nothing written back yet: the records still say 5|1|
    assert (pub.high, pub.point, sub.next_no) == (1, "5|1|", 2)
    with store._lock:  # what every Python method of the store does first
        assert lane.flushes == flushes + 1
        assert (pub.high, pub.done, pub.point, sub.points, sub.next_no, sub.last_pub) == (
            101,
            101,
            "5|101|",
            ["5|101|"],
            102,
            "5",
        )
        assert sub.inflight is None and sub.recent is None
    # one in flight when a Python method runs: it finds the entry log would have made
    m = delivery("s", "5|102|")
    assert store.log_lane(m) == 102
    assert store.get_unprocessed_count("s") == 1
    with store._lock:
        assert store._subs["s"].inflight == [pub, 102, "5|102|", 102, False]
    store.discard_lane(m)  # the Python method (the lane forgot its state at the flush)
    assert store.get_most_recent("s") == "5|102|"
    assert store.get_unprocessed_count("s") == 0
    # a second log before the discard: Python's branches (the first entry is settled)
    a, b = delivery("s", "5|103|"), delivery("s", "5|104|")
    assert (store.log_lane(a), store.log_lane(b)) == (103, 104)
    store.discard_lane(b)
    assert store.get_most_recent("s") == "5|102|"  # 103 is still being processed
    store.discard_lane(a)
    assert store.get_most_recent("s") == "5|104|"
    # a duplicate through the lane: 0, nothing changes
    assert store.log_lane(delivery("s", "5|104|")) == 0
    # another publisher in between: its own records, then back
    for bm in ("6|1|", "5|105|", "6|2|", "5|106|"):
        d = delivery("s", bm)
        store.log_lane(d)
        store.discard_lane(d)
    assert store.get_most_recent("s") == "5|106|,6|2|"
    store.close()


@needs_lane
def test_store_lock_is_a_lock() -> None:
    """``StoreLock`` (the lane's store lock) behaves as ``threading.Lock``: acquire with and
    without blocking and with a timeout, ``locked``, ``with``, a release of an unlocked lock
    refused, and a thread waiting for it until the holder releases it."""
    assert _accel.StoreLock is not None
    for lock in (_accel.StoreLock(), threading.Lock()):
        assert lock.locked() is False
        assert lock.acquire() is True and lock.locked() is True
        assert lock.acquire(False) is False
        assert lock.acquire(timeout=0.01) is False
        with pytest.raises(ValueError):
            lock.acquire(False, 1)
        lock.release()
        with pytest.raises(RuntimeError):
            lock.release()
        with lock:
            assert lock.locked()
        assert not lock.locked()
        lock.acquire()
        got: list[bool] = []
        waiter = threading.Thread(
            target=lambda lk=lock, out=got: out.append(lk.acquire(timeout=30))
        )
        waiter.start()
        lock.release()
        waiter.join(30)
        assert got == [True] and lock.locked()
        lock.release()


@needs_lane
def test_bookmark_lane_steps_aside_while_another_thread_holds_the_store() -> None:
    """While a Python method of the store holds its lock in another thread, the lane's log
    and discard take the Python methods (which wait for the lock): the numbers and the
    recovery point come out as without the other thread."""
    store = MemoryBookmarkStore()
    seed = delivery("s", "7|1|")
    store.log(seed)
    store.discard_message(seed)
    store._lock.acquire()  # as a Python method of the store running in another thread
    done: list[int] = []

    def receive() -> None:
        for i in range(2, 6):
            m = delivery("s", f"7|{i}|")
            done.append(store.log_lane(m))
            store.discard_lane(m)

    t = threading.Thread(target=receive)
    t.start()
    store._lock.release()
    t.join(30)
    assert done == [2, 3, 4, 5]
    assert store.get_most_recent("s") == "7|5|"
    store.close()


@pytest.mark.integration
def test_a_facade_holding_a_replaced_publish_lane_publishes_into_the_new_store(
    server_uri: str,
) -> None:
    """The sync ``HAClient`` holds its asyncio client's publish path (the C lane's publish):
    a store set on the asyncio client directly (past the facade) switches the old lane off,
    so publishes through the facade take the Python path into the new store (the old one
    would keep them unpersisted for good); the facade's own ``set_publish_store`` takes the
    new store's lane."""
    old, new, newer = MemoryPublishStore(), MemoryPublishStore(), MemoryPublishStore()
    client = HAClient("replaced-lane", old)
    try:
        held = client._async_publish
        client.async_client.set_publish_store(new)
        assert client._async_publish is held  # stale, switched off
        client.connect_and_logon(server_uri)
        for i in range(50):  # the second on would take a live lane's fast path
            client.publish("orders", f'{{"n":{i}}}')
        client.publish_flush(10_000)
        assert (old.unpersisted_count, new.unpersisted_count) == (0, 0)
        assert old.get_last_persisted() in (0, None) and new.get_last_persisted()
    finally:
        client.close()
    client = HAClient("replaced-lane-facade", old)
    try:
        client.set_publish_store(newer)
        assert client._async_publish == client.async_client.publish_path()
        client.publish("orders", "{}")
        assert (old.unpersisted_count, newer.unpersisted_count) == (0, 1)
    finally:
        client.close()


def test_ha_discard_is_the_stores_lane_and_follows_a_new_store() -> None:
    """``HAClient.discard`` (sync and async) hands each call to the bookmark store's discard
    lane (C ``LaneMethod``s and a ``Relay`` in between: no Python frame); after
    ``set_bookmark_store`` to the new store's, also through a ``discard`` taken before (with
    the C speedups ``client.discard`` is the relay's C function itself: no dispatch per call);
    a subclass that overrides ``discard`` keeps its override."""
    first, second = MemoryBookmarkStore(), MemoryBookmarkStore()
    client = HAClient("discard-lane", bookmark_store=first)
    held = client.discard
    held_async = client.async_client.discard
    try:
        for store in (first, second):
            if store is second:
                client.set_bookmark_store(second)
            if _accel.LaneMethod is not None:
                assert type(HAClient.discard) is _accel.LaneMethod
                assert type(AsyncHAClient.discard) is _accel.LaneMethod
                assert held == client.async_client._discard_relay.call  # the relay's C function
            assert client._ha_discard == client.async_client.discard
            assert client.async_client._discard_relay.target == store.discard_lane
            assert "discard" not in vars(client) and "discard" not in vars(client.async_client)
            for i, discard in ((1, client.discard), (2, held), (3, held_async)):
                m = delivery("s", f"9|{i}|")
                store.log_lane(m)
                discard(m)
                assert store.get_most_recent("s") == f"9|{i}|"
        assert first.get_most_recent("s") == "9|3|"
    finally:
        client.close()

    calls: list[Message] = []

    class Counting(HAClient):
        def discard(self, message: Message) -> None:
            calls.append(message)
            super().discard(message)

    counting = Counting("discard-override")
    try:
        m = delivery("s", "9|1|")
        counting.bookmark_store.log(m)
        counting.discard(m)
        assert calls == [m]
        assert counting.bookmark_store.get_most_recent("s") == "9|1|"
    finally:
        counting.close()


def test_bookmark_store_log_and_discard_on_two_threads(implementation: str) -> None:
    """One thread logs (the receive loop), another discards (a worker): nothing is lost."""
    store = MemoryBookmarkStore()
    n = 20_000
    handoff: queue.Queue[Message | None] = queue.Queue()

    def worker() -> None:
        while (m := handoff.get()) is not None:
            store.discard_lane(m)

    t = threading.Thread(target=worker)
    t.start()
    for i in range(1, n + 1):
        m = delivery("s", f"7|{i}|")
        assert store.log_lane(m) == i
        handoff.put(m)
    handoff.put(None)
    t.join(60)
    assert not t.is_alive()
    assert store.get_most_recent("s") == f"7|{n}|"
    assert store.get_unprocessed_count("s") == 0


# ------------------------------------------------------------------------------ PublishLane

needs_publish_lane = pytest.mark.skipif(
    _accel.PublishLane is None, reason="HAClient does not use the C lane (AMPSCLIENT_PUREPYTHON)"
)
TOPICS = ["orders", "o/ü", 'quote"d', "back\\slash"]
_SEQ = re.compile(rb'"s":(\d+)')


def relative(data: bytes, start: int) -> bytes:
    """``data`` with every ``"s":N`` rewritten as ``"s":N-start`` (stores start apart)."""
    return _SEQ.sub(lambda m: b'"s":%d' % (int(m.group(1)) - start), data)


def publish_frames(upstream: bytes, start: int) -> list[bytes]:
    """The publish payloads in bytes a client sent, sequence numbers made relative."""
    framer = TcpFramer()
    framer.receive_data(bytes(upstream))
    return [
        relative(p, start)
        for p in framer.frames()
        if p.startswith((b'{"c":"p"', b'{"c":"delta_publish"'))
    ]


def index_state(store: Any, start: int) -> tuple[Any, ...]:
    """The store's index, sequence numbers made relative."""
    with store.index_lock:
        buf = store.index_buf
        live = [None if p is None else relative(p, start) for p in buf[store._head :]]
        first = store.index_first - start if store.index_count else None
        count, pad, next_ = store.index_count, store.index_pad, store.index_next
        return live, first, count, store._holes, pad, next_ - start


def run_script(client: HAClient, seed: int, steps: int) -> list[int]:
    """Publishes of every kind, and single discards (holes, trailing holes), from a seed;
    returns the sequence numbers ``publish`` returned."""
    rng = random.Random(seed)
    store = client.publish_store
    seqs: list[int] = []
    for i in range(steps):
        topic = rng.choice(TOPICS)
        r = rng.random()
        if r < 0.55:
            data = rng.choice([f'{{"n":{i}}}', b'{"b":%d}' % i, f'{{"ü":{i}}}', "", b""])
            if rng.random() < 0.05:  # the records' three length sizes, and segment growth
                data = rng.choice(["x" * 300, b"y" * 70_000])
            seqs.append(client.publish(topic, data))
        elif r < 0.65:
            seqs.append(client.publish(topic, {"n": i}))
        elif r < 0.72:
            seqs.append(client.publish(topic, f'{{"n":{i}}}', correlation_id=f"c{i}"))
        elif r < 0.78:
            seqs.append(client.delta_publish(topic, f'{{"n":{i}}}'))
        elif r < 0.8:
            for seq in seqs:  # every stored message failed: the index is empty again
                store.discard(seq)
        elif seqs:
            # a failed write drops one message; the newest ones leave trailing holes
            victim = seqs[-1] if r < 0.9 else rng.choice(seqs)
            store.discard(victim)
    return seqs


def make_store(kind: str, path: Any, start: int) -> Any:
    if kind == "memory":
        return MemoryPublishStore(next_sequence=start)
    return FilePublishStore(path, fsync=kind, segment_size=64 * 1024)  # rolls over


@pytest.mark.integration
@needs_publish_lane
@pytest.mark.parametrize("kind", ["memory", "never", "interval"])
@pytest.mark.parametrize("seed", [1, 2])
def test_publish_lane_matches_python(kind: str, seed: int, server: Any, tmp_path: Any) -> None:
    """The same script through the lane and through the Python publish: the same sequence
    numbers, the same store index and records while no ack can arrive (the proxy holds every
    byte), then the same frames on the wire and everything persisted."""
    start = initial_sequence()
    host, port = "127.0.0.1", server.tcp_port
    runs = []
    with (
        LoopbackProxy(host, port, record=True) as pa,
        LoopbackProxy(host, port, record=True) as pb,
        HAClient(f"lane-{kind}-{seed}", make_store(kind, tmp_path / "a", start)) as a,
        HAClient(f"py-{kind}-{seed}", make_store(kind, tmp_path / "b", start)) as b,
    ):
        b._ha._lane.disable()
        for client, proxy in ((a, pa), (b, pb)):
            client.get_server_chooser().add(f"tcp://{host}:{proxy.port}/amps/json")
            client.connect_and_logon()
        for client, proxy in ((a, pa), (b, pb)):
            begin = client.publish_store.next_sequence()
            proxy.stall(120)  # no ack until resume(): the stores change only by the script
            seqs = run_script(client, seed, 400)
            state = index_state(client.publish_store, begin)
            records = None
            if kind != "memory":
                found = inspect_store(client.publish_store.path)
                records = (
                    [(m.sequence - begin, relative(m.payload, begin)) for m in found.messages],
                    [h - begin for h in found.holes],
                )
            runs.append(([s - begin for s in seqs], state, records, begin))
        assert a._ha._lane.fast > 100  # the lane did the plain publishes...
        assert b._ha._lane.fast == 0  # ...and the other client never used it
        assert runs[0][:3] == runs[1][:3]
        for client, proxy in ((a, pa), (b, pb)):
            proxy.resume()
            client.publish_flush(20_000)
            assert client.get_unpersisted_count() == 0
        wire = [publish_frames(p.upstream or b"", r[3]) for p, r in ((pa, runs[0]), (pb, runs[1]))]
    assert len(wire[0]) > 200
    assert wire[0] == wire[1]


@pytest.mark.integration
@needs_publish_lane
def test_publish_lane_threads_keep_each_publishers_order(server: Any) -> None:
    """Four threads publish through one HAClient while acks discard concurrently: the server
    receives every message once, in each thread's order (an out-of-order sequence number
    would be refused as a duplicate and lost)."""
    got: dict[int, list[int]] = {t: [] for t in range(4)}

    def on(message: Message) -> None:
        t, n = message.get_data().split(":")
        got[int(t)].append(int(n))

    count = 3000
    with Client("lane-observer") as observer, HAClient("lane-threads") as ha:
        observer.connect(server.uri())
        observer.logon(5000)
        observer.subscribe(on, "lane-threads")
        ha.get_server_chooser().add(server.uri())
        ha.connect_and_logon()

        def publisher(t: int) -> None:
            for n in range(count):
                ha.publish("lane-threads", f"{t}:{n}")

        threads = [threading.Thread(target=publisher, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        ha.publish_flush(30_000)
        assert ha.get_unpersisted_count() == 0
        assert ha._ha._lane.fast > 0
        wait_for(lambda: sum(map(len, got.values())) >= 4 * count, what="every delivery")
    for t in range(4):
        assert got[t] == list(range(count)), f"thread {t}"


def test_publish_lane_is_used_only_where_it_does_what_python_does(tmp_path: Any) -> None:
    """Memory stores and file stores that do not fsync each message; not fsync="always" (the
    record must be on disk before the frame is queued), other stores, or subclasses that
    override publish."""

    class Custom(AsyncHAClient):
        def publish(self, topic: str, data: Any, *args: Any, **kwargs: Any) -> int:
            return super().publish(topic, data, *args, **kwargs)

    class MyStore(MemoryPublishStore):
        pass

    built = _accel.PublishLane is not None
    with FilePublishStore(tmp_path / "n", fsync="never") as never:
        assert (AsyncHAClient("m")._lane is not None) is built
        assert (AsyncHAClient("n", never)._lane is not None) is built
    with FilePublishStore(tmp_path / "a") as always:
        assert AsyncHAClient("a", always)._lane is None
    assert AsyncHAClient("s", MyStore())._lane is None
    assert Custom("c")._lane is None


# ------------------------------------------------------------------------- PlainPublishLane

needs_plain_lane = pytest.mark.skipif(
    _accel.PlainPublishLane is None, reason="Client does not use the C lane (AMPSCLIENT_PUREPYTHON)"
)


def plain_script(client: Client, seed: int, steps: int) -> None:
    """Plain publishes of every kind the lane takes or hands back, from a seed."""
    rng = random.Random(seed)
    for i in range(steps):
        topic = rng.choice(TOPICS)
        r = rng.random()
        if r < 0.7:
            data = rng.choice([f'{{"n":{i}}}', b'{"b":%d}' % i, f'{{"ü":{i}}}', "", b"x" * 300])
            client.publish(topic, data)
        elif r < 0.8:
            client.publish(topic, {"n": i})
        elif r < 0.9:
            client.publish(topic, f'{{"n":{i}}}', correlation_id=f"c{i}")
        else:
            client.delta_publish(topic, f'{{"n":{i}}}')


@pytest.mark.integration
@needs_plain_lane
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_plain_publish_lane_matches_python(seed: int, server: Any) -> None:
    """The same publishes through the lane and through the Python publish put the same
    frames on the wire (recorded by a proxy), in the same order."""
    host, port = "127.0.0.1", server.tcp_port
    with (
        LoopbackProxy(host, port, record=True) as pa,
        LoopbackProxy(host, port, record=True) as pb,
        Client(f"plain-lane-{seed}") as a,
        Client(f"plain-py-{seed}") as b,
    ):
        b.async_client._plain_lane.disable()
        for client, proxy in ((a, pa), (b, pb)):
            client.connect(f"tcp://{host}:{proxy.port}/amps/json")
            client.logon(5000)
            plain_script(client, seed, 500)
            client.flush(10_000)
        assert a.async_client._plain_lane.fast > 200
        assert b.async_client._plain_lane.fast == 0
        wire = [publish_frames(p.upstream or b"", 0) for p in (pa, pb)]
    assert len(wire[0]) == 500
    assert wire[0] == wire[1]


@pytest.mark.integration
@needs_plain_lane
def test_plain_publish_lane_disconnected_raises_as_python_does(server: Any) -> None:
    with Client("plain-lane-disconnected") as client:
        client.connect(server.uri())
        client.logon(5000)
        client.publish("orders", "{}")  # the topic's prefix is cached: the lane would take it
        client.disconnect()
        with pytest.raises(DisconnectedError):
            client.publish("orders", "{}")


def test_plain_publish_lane_is_not_used_by_subclasses_that_override_publish() -> None:
    class Custom(AsyncClient):
        def publish(self, topic: str, data: Any, *args: Any, **kwargs: Any) -> None:
            super().publish(topic, data, *args, **kwargs)

    assert (AsyncClient("plain")._plain_lane is not None) is (_accel.PlainPublishLane is not None)
    assert Custom("custom")._plain_lane is None
    assert getattr(AsyncHAClient("ha"), "_plain_lane", None) is None  # it has its own lane


# -------------------------------------------------------------------------------- ws_encode


def unframe(wire: bytes) -> list[tuple[bytes, bool]]:
    """RFC 6455 client frames back to ``(message, is_text)``; every frame must be masked."""
    out = []
    pos = 0
    while pos < len(wire):
        first, second = wire[pos], wire[pos + 1]
        assert first & 0x80 and second & 0x80  # FIN, masked
        n = second & 0x7F
        pos += 2
        if n == 126:
            (n,) = struct.unpack_from(">H", wire, pos)
            pos += 2
        elif n == 127:
            (n,) = struct.unpack_from(">Q", wire, pos)
            pos += 8
        key = wire[pos : pos + 4]
        pos += 4
        data = bytes(b ^ key[i % 4] for i, b in enumerate(wire[pos : pos + n]))
        pos += n
        out.append((data, first & 0x0F == 1))
    return out


headers = st.builds(
    lambda topic, extra: b'{"c":"p","t":"' + topic + b'"' + extra + b"}",
    st.binary(max_size=20).filter(lambda b: b'"' not in b and b"\\" not in b),
    st.sampled_from([b"", b',"x":"a}b"', b',"x":"q\\"}"', b',"k":"\xc3\xa9"', b',"n":1']),
)
bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    st.integers(min_value=120, max_value=70_000).map(lambda n: b"y" * n),
)


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(headers, bodies), max_size=6), st.booleans())
def test_ws_encode_matches_python(payloads: list[tuple[bytes, bytes]], text: bool) -> None:
    """The C frames carry exactly the messages the Python path sends, or C declines."""
    data = b"".join(frame(h + b) for h, b in payloads)
    wire = C.ws_encode(data, text)
    expected = ws_messages(data, text)
    if wire is None:  # a backslash before the header's end, or non-ASCII in a text session
        assert any(b"\\" in h or (text and not (h + b).isascii()) for h, b in payloads)
        return
    assert unframe(wire) == expected


@needs_c
def test_ws_encode_frame_sizes_and_a_truncated_buffer() -> None:
    for n in (0, 125, 126, 65_535, 65_536):  # the three length encodings, at their edges
        payload = b'{"c":"p","t":"t"}' + b"z" * n
        wire = C.ws_encode(frame(payload), True)
        assert wire is not None
        assert unframe(wire) == ws_messages(frame(payload), True)
    with pytest.raises(ValueError, match="truncated"):
        C.ws_encode(frame(b'{"c":"p"}{}')[:-1], True)
    with pytest.raises(ValueError, match="truncated"):
        C.ws_encode(b"\x00\x00", True)


@pytest.mark.integration
def test_ws_client_publishes_and_receives(implementation: str, server: Any) -> None:
    """ws:// end to end with the C frames and with the Python ones."""
    seen: list[str] = []
    with Client(f"ws-{implementation}") as client:
        client.connect(server.uri("ws", "json"))
        client.logon(5000)
        client.subscribe(lambda m: seen.append(m.get_data()), "ws-speedups")
        for i in range(300):
            client.publish("ws-speedups", f'{{"i":{i},"s":"é"}}' if i % 7 == 0 else f'{{"i":{i}}}')
        client.flush(5000)
        wait_for(lambda: len(seen) == 300, what="every delivery")
    assert seen == [f'{{"i":{i},"s":"é"}}' if i % 7 == 0 else f'{{"i":{i}}}' for i in range(300)]


# ----------------------------------------------------------------------------- queue auto-ack


def _delivery(topic: bytes, sids: bytes, bm: bytes, lp: bytes, rest: bytes) -> bytes:
    return (
        b'{"c":"p","t":"'
        + topic
        + b'","sids":"'
        + sids
        + b'","bm":"'
        + bm
        + b'","lp":"'
        + lp
        + rest
    )


_field = st.one_of(
    st.sampled_from(
        [b"q", b"orders", b"", b"a\\b", b'a"b', b"\xc3\xa9t\xc3\xa9", b"\xff", b"1|2|"]
    ),
    st.binary(max_size=6),
)


def _take_both(
    pending: dict[str, list[str]], caps: dict[str, int], batch: int, payload: bytes
) -> tuple[Any, Any]:
    """Run C and the twin on copies of the same state; the states must end equal too."""
    from ampsclient.acks import autoack_take as twin

    pending_c = {k: list(v) for k, v in pending.items()}
    got_c = C.autoack_take(pending_c, dict(caps), batch, payload)
    got_py = twin(pending, caps, batch, payload)
    assert pending_c == pending
    return got_c, got_py


@needs_c
@settings(max_examples=600, deadline=None)
@given(
    topic=_field,
    sids=_field,
    bm=_field,
    lp=st.one_of(st.sampled_from([b"1000", b"", b'"', b"\\x"]), st.binary(max_size=3)),
    rest=st.sampled_from([b'","data":1}', b"", b"}", b'"']),
    cut=st.integers(0, 80),
    batch=st.integers(0, 5),
    cap=st.one_of(st.none(), st.integers(-1, 4)),
    held=st.integers(0, 4),
)
def test_autoack_take_matches_python(
    topic: bytes,
    sids: bytes,
    bm: bytes,
    lp: bytes,
    rest: bytes,
    cut: int,
    batch: int,
    cap: int | None,
    held: int,
) -> None:
    """The C auto-ack read-and-append against its twin: deliveries in and out of the form
    (empty, quoted, escaped, non-UTF-8 fields, cut anywhere), batches already holding some
    bookmarks, capped or not; same result and same pending batches afterwards."""
    payload = _delivery(topic, sids, bm, lp, rest)
    payload = payload[: len(payload) - cut] if cut < len(payload) else payload
    name = topic.decode("utf-8", "replace")
    pending: dict[str, list[str]] = {"other": ["9|9|"]}
    if held:
        pending[name] = [f"{i}|1|" for i in range(held)]
    caps = {} if cap is None else {name: cap}
    got_c, got_py = _take_both(pending, caps, batch, payload)
    assert got_c == got_py
    assert type(got_c) is type(got_py)


@needs_c
def test_autoack_take_fills_and_sends_batches_like_python() -> None:
    """A stream of deliveries of two topics through C and twin: the same acks to send (each
    bookmark exactly once, in order), the same counts in between, the backlog cap applied."""
    from ampsclient.acks import autoack_take as twin, delivery_fields

    rng = random.Random(16)
    payloads = [
        _delivery(rng.choice([b"q1", b"q2"]), b"s1", b"1|%d|" % i, b"1000", b'","data":1}')
        for i in range(1000)
    ]
    caps = {"q2": 3}
    sent: dict[str, list[list[str]]] = {"c": [], "py": []}
    between: dict[str, list[int]] = {}
    for name, take in (("c", C.autoack_take), ("py", twin)):
        pending: dict[str, list[str]] = {}
        counts = []
        for payload in payloads:
            done = take(pending, caps, 7, payload)
            if isinstance(done, tuple):
                sent[name].append([done[0], *done[1].split(",")])
            else:
                assert isinstance(done, int)
                counts.append(done)
        for topic, bookmarks in pending.items():
            sent[name].append([topic, *bookmarks])
        between[name] = counts
    assert sent["c"] == sent["py"]
    assert between["c"] == between["py"]
    acked = [(b[0], bm) for b in sent["c"] for bm in b[1:]]
    expected = [f for f in map(delivery_fields, payloads) if f is not None]
    assert sorted(acked) == sorted(expected)
    assert len(set(acked)) == len(payloads)
    for batch in sent["c"]:
        assert len(batch) - 1 <= (3 if batch[0] == "q2" else 7)


def _c_autoack(handler: Any, acks: Any, *, after: Any = None) -> Any:
    """The C auto-ack handler over ``acks`` (a ``QueueAcks``), wired as ``QueueAcks.wrap``
    wires it; ``after``: its Python path (default the acks object's own)."""
    return C.AutoAck(
        handler,
        acks._batches,
        acks._settled,
        acks._lock,
        acks.hand_out,
        acks.settle,
        after or acks.after_handler,
        acks._send_now,
        acks._arm,
    )


def _autoack_run(use_c: bool, steps: list[tuple[int, str, int]]) -> list[Any]:
    """Deliveries through one client's auto-ack handler, C ``AutoAck`` or its twin; what
    the handler returned or raised, every frame sent, every timer armed, the state after."""
    from ampsclient.acks import AutoAckCall, QueueAcks

    sent: list[bytes] = []
    timers: list[float] = []
    acks = QueueAcks(sent.append, lambda seconds, fn: timers.append(seconds))
    acks.set_batch_size(4)
    acks.subscribed("s1", "q2", "max_backlog=3")
    out: list[Any] = []

    def handler(message: Message) -> Any:
        what = behaviour[0]
        if what == "raise":
            raise ValueError(message.bookmark)
        if what == "ack":
            acks.ack(message.topic or "", message.bookmark or "")
        if what == "cancel":
            acks.ack(message.topic or "", message.bookmark or "", "cancel")
        return message.bookmark

    behaviour = ["ok"]
    call = _c_autoack(handler, acks) if use_c else AutoAckCall(handler, acks).call
    forms = [
        b'{"c":"p","t":"%s","sids":"s1","bm":"1|%d|","lp":"1000"}{"n":1}',
        b'{"c":"p","t":"%s","sids":"s1","bm":"1|%d|","lp":"1000","x":"\\u0041"}{}',
        b'{"c":"p","sids":"s1","t":"%s","bm":"1|%d|","lp":"1000"}{}',  # other order
        b'{"c":"p","t":"%s","sids":"s1","bm":"1|%d|"}{}',  # no lease: not a queue message
    ]
    for i, (form, what, topic) in enumerate(steps):
        if what == "flush":
            acks.flush()
            continue
        behaviour[0] = what
        payload = forms[form] % (b"q1" if topic == 1 else b"q2", i)
        try:
            out.append(("ok", call(Message(payload))))
        except ValueError as exc:
            out.append(("raised", str(exc)))
    pending = {t: list(b) for t, b in acks._batches.pending.items()}
    return [out, sent, timers, pending, dict(acks._settled)]


@needs_lane
@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([0, 0, 0, 1, 2, 3]),
            st.sampled_from(["ok", "ok", "ok", "raise", "ack", "cancel", "flush"]),
            st.integers(1, 2),
        ),
        max_size=40,
    )
)
def test_autoack_handler_matches_python(steps: list[tuple[int, str, int]]) -> None:
    """The C auto-ack handler against its twin over random deliveries (in the form the
    C path reads or not, not leased), handlers that return, raise, ack or cancel the message
    themselves, and flushes: the same results, frames, timers, batches and settled acks."""
    assert C is not None
    got_c = _autoack_run(True, steps)
    got_py = _autoack_run(False, steps)
    assert got_c == got_py


@needs_lane
def test_autoack_handler_is_what_a_client_routes_to() -> None:
    """With the speedups, a client's auto-ack subscription routes to the C handler, which
    keeps the application's handler as ``__wrapped__``."""
    client = AsyncClient("autoack-lane")
    client.queue_acks.auto_ack = True

    def handler(message: Message) -> None:
        return None

    wrapped = client.queue_acks.wrap(handler)
    assert type(wrapped) is C.AutoAck
    assert wrapped.__wrapped__ is handler
    assert wrapped.fast == 0
    client.queue_acks.set_batch_size(10)
    for i in range(3):
        wrapped(Message(b'{"c":"p","t":"q","sids":"s","bm":"7|%d|","lp":"9"}{}' % i))
    assert wrapped.fast == 3  # each one through the C path
    assert client.queue_acks._batches.pending == {"q": ["7|0|", "7|1|", "7|2|"]}
    wrapped(Message(b'{"c":"p","t":"q","sids":"s","bm":"7|3|"}{}'))  # not leased: no ack
    assert wrapped.fast == 3
    assert client.queue_acks.pending == 3


@needs_lane
def test_autoack_handler_reads_the_settings_as_they_are_now() -> None:
    """The C handler reads the acks object's batch size, backlog caps and batches on each
    message (the fields of its ``AckBatches``), so a change made after it was created counts
    from the next message; a new topic after another is its own batch."""
    from ampsclient.acks import QueueAcks

    sent: list[bytes] = []
    acks = QueueAcks(sent.append, lambda seconds, fn: None)
    acks.set_batch_size(10)
    call = _c_autoack(lambda m: None, acks)
    for i in range(3):
        call(Message(b'{"c":"p","t":"q","sids":"s","bm":"6|%d|","lp":"9"}{}' % i))
    call(Message(b'{"c":"p","t":"r","sids":"s","bm":"6|9|","lp":"9"}{}'))
    assert acks._batches.pending == {"q": ["6|0|", "6|1|", "6|2|"], "r": ["6|9|"]} and sent == []
    acks.set_batch_size(4)  # the fourth of q fills its batch now
    call(Message(b'{"c":"p","t":"q","sids":"s","bm":"6|3|","lp":"9"}{}'))
    assert [decode_header(f)[0]["bm"] for f in sent] == ["6|0|,6|1|,6|2|,6|3|"]
    acks.subscribed("s", "r", "max_backlog=2")  # a cap below the batch size, for r
    call(Message(b'{"c":"p","t":"r","sids":"s","bm":"6|10|","lp":"9"}{}'))
    assert [decode_header(f)[0]["bm"] for f in sent][1:] == ["6|9|,6|10|"]
    assert acks._batches.pending == {} and call.fast == 6


@needs_lane
def test_autoack_handler_leaves_the_batches_to_python_while_another_thread_holds_them() -> None:
    """While another thread holds the batches' lock, the C handler does not touch them: it
    hands the message to the Python path (here a recorder), which takes the lock."""
    from ampsclient.acks import QueueAcks

    acks = QueueAcks(lambda payload: None, lambda seconds, fn: None)
    acks.set_batch_size(10)
    to_python: list[Message] = []
    call = _c_autoack(lambda m: None, acks, after=to_python.append)
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with acks._lock:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(30)
        first = Message(b'{"c":"p","t":"q","sids":"s","bm":"5|1|","lp":"9"}{}')
        call(first)
        assert to_python == [first] and call.fast == 0 and acks._batches.pending == {}
    finally:
        release.set()
        thread.join(30)
    call(Message(b'{"c":"p","t":"q","sids":"s","bm":"5|2|","lp":"9"}{}'))
    assert call.fast == 1 and acks._batches.pending == {"q": ["5|2|"]} and len(to_python) == 1


# ------------------------------------------------------------------------- send_nowait


@needs_c
def test_send_nowait_matches_python() -> None:
    """On a non-blocking socket pair: all of a small write; as much as fits, then 0, once the
    peer stops reading (the same bytes arrive in order); OSError once the peer is gone."""
    from ampsclient.writer import send_nowait as send_py

    for send in (C.send_nowait, send_py):
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            assert send(a.fileno(), b"hello") == 5
            assert b.recv(5) == b"hello"
            chunk = bytes(range(256)) * 256
            sent = [send(a.fileno(), chunk) for _ in range(200)]
            assert 0 < sum(sent) < 200 * len(chunk)  # the buffers filled up...
            assert sent[-1] == 0  # ...and then it took nothing
            got = bytearray()
            b.setblocking(False)
            while True:
                try:
                    part = b.recv(1 << 20)
                except BlockingIOError:
                    break
                got += part
            assert bytes(got) == b"".join(chunk[:n] for n in sent)
            b.close()
            with pytest.raises(OSError):
                for _ in range(10):  # (the first send after the close may still be taken)
                    send(a.fileno(), b"late")
