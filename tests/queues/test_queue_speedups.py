"""The queue engine's optional C speedups (``queues/_queue_speedups.c``) against their
pure-Python twins (``queues.speedups.TWINS``), input by input, and the intake they accelerate
through a real server.

The C cases are skipped when the extension is absent or ``AMPSCLIENT_PUREPYTHON=1``; the twin
is then checked against the hand-written expectations alone (the suite's pure-Python pass).
"""

from __future__ import annotations

import copy
import gc
import heapq
import importlib
import importlib.util
import os
import random
import subprocess
import sys
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer, start

from ampsclient_server_stub.queues import (
    acking,
    engine,
    framing,
    intake,
    leasing,
    message,
    model,
    speedups,
)
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.queues.message import UNPARSED, PyQueueMessage
from ampsclient_server_stub.queues.model import QueueMessage, QueueSub
from ampsclient_server_stub.queues.states import AVAILABLE, GONE, LEASED, REMOTE

SLOTS = PyQueueMessage.__slots__
MISSING = object()

needs_c = pytest.mark.skipif(not speedups.SPEEDUPS, reason="queue C speedups not in use")
IMPLS = ["python", pytest.param("c", marks=needs_c)]

PlainRun = Callable[[Sequence[bytes], int, bool], tuple[int, list[tuple[str, bytes]]]]


def impl(name: str) -> PlainRun:
    if name == "c":
        assert speedups.plain_run is not None
        return speedups.plain_run
    return intake.plain_run


def test_every_c_function_names_an_existing_twin() -> None:
    for name, qualname in speedups.TWINS.items():
        module, attr = qualname.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), attr)), name
        if speedups.SPEEDUPS:
            assert callable(getattr(speedups, name)), name
    expected = speedups.plain_run if speedups.SPEEDUPS else intake.plain_run
    assert engine.plain_run is expected
    assert model._lease_run is (speedups.lease_run or leasing.lease_run)
    assert model._ack_run is (speedups.ack_run or acking.ack_run)
    assert model.QueueMessage is (speedups.QueueMessage or PyQueueMessage)


def test_built_where_the_build_requires_it() -> None:
    """``make test`` sets AMPSCLIENT_REQUIRE_SPEEDUPS=1: it fails if the extension did not
    build (its pure-Python pass sets AMPSCLIENT_PUREPYTHON=1 as well: the twin then)."""
    if os.environ.get("AMPSCLIENT_REQUIRE_SPEEDUPS") != "1":
        pytest.skip("AMPSCLIENT_REQUIRE_SPEEDUPS is not set")
    assert speedups.SPEEDUPS is (not os.environ.get("AMPSCLIENT_PUREPYTHON"))


@pytest.mark.parametrize("pure", ["1", ""])
def test_purepython_switch_selects_the_twin(pure: str) -> None:
    code = (
        "from ampsclient_server_stub.queues import engine, intake, leasing, message, model\n"
        "from ampsclient_server_stub.queues import speedups\n"
        "print(speedups.SPEEDUPS, engine.plain_run is intake.plain_run)\n"
        "print(model._lease_run is leasing.lease_run, model.QueueMessage is message.PyQueueMessage)"
    )
    env = {**os.environ, "AMPSCLIENT_PUREPYTHON": pure}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    if pure:
        assert out == ["False", "True", "True", "True"]
    else:  # C when it was built (the other test asserts that it is where required)
        assert out in (["True", "False", "False", "False"], ["False", "True", "True", "True"])
        assert out[0] == str(importlib.util.find_spec(_EXT) is not None)


_EXT = "ampsclient_server_stub.queues._queue_speedups"


def frame(bm: str, body: bytes = b'{"id":1}', *, extra: str = "") -> bytes:
    return (
        '{"c":"p","t":"orders","sids":"queue-intake-0"' + extra + ',"bm":"' + bm + '"}'
    ).encode() + body


@pytest.mark.parametrize("name", IMPLS)
def test_plain_run_reads_a_run_and_stops_at_the_first_other_form(name: str) -> None:
    run = impl(name)
    frames = [
        frame("11|1|"),
        frame("11|2|", b""),  # an empty body
        frame("11|3|", b'{"s":"}\\""}'),  # quotes and braces in the body
        b'{"c":"p","t":"orders","bm":"11|4|","x":"c1"}{}',  # bm not last: not plain
        frame("11|5|"),
    ]
    assert run(frames, 0, False) == (
        3,
        [("11|1|", b'{"id":1}'), ("11|2|", b""), ("11|3|", b'{"s":"}\\""}')],
    )
    assert run(frames, 3, False) == (3, [])
    assert run(frames, 4, False) == (5, [("11|5|", b'{"id":1}')])
    assert run(frames, 5, False) == (5, [])
    assert run(frames, 9, False) == (9, [])
    assert run((), 0, True) == (0, [])


@pytest.mark.parametrize("name", IMPLS)
def test_plain_run_leaves_sow_records_and_odd_frames_to_the_parser(name: str) -> None:
    run = impl(name)
    keyed = frame("11|1|", extra=',"k":"abc"')
    assert run([keyed], 0, True) == (0, [])
    assert run([keyed], 0, False) == (1, [("11|1|", b'{"id":1}')])
    assert run([b'{"c":"p","t":"orders"}{"id":1}'], 0, False) == (0, [])  # no bm
    assert run([b',"bm":"11|1|"}{}'], 0, False) == (0, [])  # bm at position 0
    assert run([b'{"c":"p","bm":"11|1|'], 0, False) == (0, [])  # no closing quote
    assert run([b'{"c":"p","bm":"11|1|"'], 0, False) == (0, [])  # nothing after it
    assert run([bytearray(frame("11|1|"))], 0, False) == (0, [])  # type: ignore[list-item]
    assert run([frame("ü|1|")], 0, False) == (1, [("ü|1|", b'{"id":1}')])
    with pytest.raises(UnicodeDecodeError):
        run([b'{"c":"p","bm":"\xff"}{}'], 0, False)
    with pytest.raises(ValueError, match="start"):
        run([frame("11|1|")], -1, False)


@needs_c
def test_c_and_python_agree_on_random_frames() -> None:
    rng = random.Random(16)
    alphabet = [
        b'"',
        b"}",
        b"{",
        b",",
        b":",
        b"\\",
        b"k",
        b"bm",
        b',"bm":"',
        b',"k":"',
        b"1|",
        b"a",
    ]
    assert speedups.plain_run is not None
    cases = 0
    for _ in range(3000):
        frames: list[Any] = []
        for _ in range(rng.randint(0, 6)):
            if rng.random() < 0.6:
                frames.append(
                    frame(
                        f"{rng.randint(1, 9)}|{rng.randint(1, 99)}|",
                        rng.choice([b"", b"{}", b'"}']),
                    )
                )
            else:
                frames.append(b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
        start = rng.randint(0, len(frames))
        sow = rng.random() < 0.5
        assert speedups.plain_run(frames, start, sow) == intake.plain_run(frames, start, sow), (
            frames,
            start,
            sow,
        )
        cases += 1
    assert cases == 3000


def test_intake_through_a_server_in_both_forms(tmp_path: Path) -> None:
    """Plain frames and frames with ``x`` (a correlation id: the parsed path) published in
    one run all enter the queue in order, each delivered once with its own body."""
    server = start(
        tmp_path, QueueConfig(name="work", message_type="json", max_per_subscription_backlog=100)
    )
    try:
        consumer = Consumer(server)
        consumer.subscribe("work", o="max_backlog=100")
        pub = Consumer(server, "publisher")
        for i in range(40):
            fields: dict[str, Any] = {"c": "publish", "t": "work"}
            if i % 7 == 3:
                fields["x"] = f"corr-{i}"
            pub.raw.send(fields, b'{"id":%d}' % i)
        pub.raw.send({"c": "flush", "cid": "f1", "a": "completed"})
        pub.wait_ack("f1", "completed")
        consumer.raw.send({"c": "flush", "cid": "f2", "a": "completed"})
        consumer.wait_ack("f2", "completed")
        bodies = [body for _hdr, body in consumer.deliveries]
        assert bodies == [b'{"id":%d}' % i for i in range(40)]
        xs = {hdr["x"] for hdr, _body in consumer.deliveries if "x" in hdr}
        assert xs == {f"corr-{i}" for i in range(40) if i % 7 == 3}
        assert len({hdr["bm"] for hdr, _body in consumer.deliveries}) == 40
    finally:
        server.stop()


FrameRun = Callable[[Sequence[Any], int, dict[Any, Any], float | None, bytes], int]


def frame_impl(name: str) -> FrameRun:
    if name == "c":
        assert speedups.frame_run is not None
        return speedups.frame_run
    return framing.frame_run


class SubMessage(QueueMessage):
    """A subclass (the C functions take their generic path for it)."""

    __slots__ = ("extra",)


KINDS: list[type[QueueMessage]] = [QueueMessage, PyQueueMessage, SubMessage]
"""The messages the random cases mix: the bound type (the C type when built: its fields are
read in place), the Python class and a subclass (read through their attributes)."""


def _random_kind(rng: random.Random, msg: QueueMessage, names: Sequence[str]) -> QueueMessage:
    """``msg`` as one of :data:`KINDS`; now and then with one of ``names`` unset."""
    kind = rng.choice(KINDS)
    copy_ = kind(msg.bookmark, msg.data, msg.x, msg.order, msg.enqueued)
    for name in SLOTS:
        setattr(copy_, name, getattr(msg, name))
    if rng.random() < 0.03:
        delattr(copy_, rng.choice(names))
    return copy_


def outcome(fn: Callable[..., Any], *args: Any) -> Any:
    """What ``fn(*args)`` returned, or the type of what it raised."""
    try:
        return fn(*args)
    except Exception as exc:  # compared, not swallowed: both sides must raise the same
        return type(exc)


def _msg(
    bm: str,
    data: bytes = b"{}",
    *,
    x: str | None = None,
    deadline: float | None = None,
    barrier: bool = False,
) -> QueueMessage:
    msg = QueueMessage(bm, data, x, 1, 0.0)
    msg.lease_deadline = deadline
    msg.barrier = barrier
    return msg


@pytest.mark.parametrize("name", IMPLS)
def test_frame_run_joins_a_run_and_stops_where_the_caller_must_frame(name: str) -> None:
    run = frame_impl(name)
    a, b, c = (QueueSub(object(), object(), 10, None) for _ in range(3))
    end = 1234.5
    tail = b'","lp":"X"}'
    fa: list[bytes] = []
    fb: list[bytes] = []
    starts: dict[Any, Any] = {a: (b"<a:", fa), b: (b"<b:", fb)}
    leases = [
        (a, _msg("1|1|", b'{"n":1}', deadline=end)),
        (b, _msg("1|2|", b"", deadline=end)),
        (a, _msg("ü|3|", b'{"n":3}', deadline=end)),
        (c, _msg("1|4|", deadline=end)),  # no start for c yet
        (a, _msg("1|5|", x="corr", deadline=end)),  # an x
        (a, _msg("1|6|", deadline=None, barrier=True)),  # a barrier message
        (a, _msg("1|7|", deadline=end)),  # another deadline object (set below)
        (b, _msg("1|8|", b"[8]", deadline=end)),
    ]
    leases[6][1].lease_deadline = float(str(end))  # equal, not the same object
    assert leases[6][1].lease_deadline == end and leases[6][1].lease_deadline is not end
    assert run(leases, 0, starts, end, tail) == 3
    assert fa == [b'<a:1|1|","lp":"X"}{"n":1}', '<a:ü|3|","lp":"X"}{"n":3}'.encode()]
    assert fb == [b'<b:1|2|","lp":"X"}']
    for stop in (3, 4, 5, 6):
        assert run(leases, stop, starts, end, tail) == stop
    assert run(leases, 7, starts, end, tail) == 8
    assert fb[-1] == b'<b:1|8|","lp":"X"}[8]'
    assert run(leases, 8, starts, end, tail) == 8
    assert run(leases, 99, starts, end, tail) == 99
    assert run([], 0, {}, None, b"") == 0
    with pytest.raises(ValueError, match="pos"):
        run(leases, -1, starts, end, tail)
    bad = _msg("\ud800|1|", deadline=end)  # a lone surrogate cannot be UTF-8
    with pytest.raises(UnicodeEncodeError):
        run([(a, bad)], 0, starts, end, tail)


@needs_c
def test_frame_run_c_and_python_agree_on_random_runs() -> None:
    assert speedups.frame_run is not None
    rng = random.Random(61)
    subs = [QueueSub(object(), object(), 10, None) for _ in range(4)]
    end = 99.25
    cases = 0
    for _ in range(2000):
        known = rng.sample(subs, rng.randint(0, 4))
        leases = []
        for i in range(rng.randint(0, 8)):
            roll = rng.random()
            leases.append(
                (
                    rng.choice(subs),
                    _random_kind(
                        rng,
                        _msg(
                            f"{rng.randint(1, 9)}|{i}|{rng.choice(['', 'é', '€'])}",
                            rng.choice(
                                [
                                    b"",
                                    b"{}",
                                    b'{"a":"}"}',
                                    bytes(rng.randrange(256) for _ in range(5)),
                                ]
                            ),
                            x="c" if roll < 0.1 else None,
                            barrier=0.1 <= roll < 0.2,
                            deadline=None if roll < 0.3 else end,
                        ),
                        ("x", "barrier", "lease_deadline", "bookmark", "data"),
                    ),
                )
            )
        pos = rng.randint(0, len(leases))
        deadline = rng.choice([end, None])
        got: list[dict[Any, Any]] = []
        ends = []
        for fn in (speedups.frame_run, framing.frame_run):
            starts: dict[Any, tuple[bytes, list[bytes]]] = {
                s: (b"<%d:" % subs.index(s), []) for s in known
            }
            ends.append(outcome(fn, leases, pos, starts, deadline, b'"}'))
            got.append({subs.index(s): v[1] for s, v in starts.items()})
        assert ends[0] == ends[1] and got[0] == got[1], (leases, pos)
        cases += 1
    assert cases == 2000


AckRun = Callable[[dict[str, Any], Sequence[str], int, object, bool, list[str]], tuple[int, int]]


def ack_impl(name: str) -> AckRun:
    if name == "c":
        assert speedups.ack_run is not None
        return speedups.ack_run
    return acking.ack_run


def _ack_state(seed: int) -> tuple[dict[str, QueueMessage], list[QueueSub], list[object]]:
    """Messages in every state, leased to subscriptions of two connections (or to none)."""
    rng = random.Random(seed)
    conns = [object(), object()]
    subs = [QueueSub(object(), conns[i % 2], 10, None) for i in range(3)]
    messages: dict[str, QueueMessage] = {}
    for i in range(rng.randint(0, 10)):
        msg = QueueMessage(f"1|{i}|", b"{}", None, i, 0.0)
        msg.state = rng.choice([AVAILABLE, LEASED, LEASED, LEASED, REMOTE])
        if msg.state == LEASED or rng.random() < 0.2:
            msg.lessee = rng.choice(subs)
            msg.lease_deadline = 5.0
        msg = _random_kind(rng, msg, ("lessee", "state"))
        if getattr(msg, "state", None) == LEASED or rng.random() < 0.2:
            qsub = getattr(msg, "lessee", None)
            if qsub is not None and rng.random() < 0.9:  # (else: not in its dict any more)
                qsub.leased[msg.bookmark] = msg
        messages[msg.bookmark] = msg
    return messages, subs, conns


def _ack_view(messages: dict[str, QueueMessage], subs: list[QueueSub]) -> Any:
    def lessee(m: QueueMessage) -> Any:
        held = getattr(m, "lessee", MISSING)
        return subs.index(held) if isinstance(held, QueueSub) else held

    return (
        {
            b: (getattr(m, "state", MISSING), lessee(m), getattr(m, "lease_deadline", MISSING))
            for b, m in messages.items()
        },
        [sorted(s.leased) for s in subs],
    )


@pytest.mark.parametrize("name", IMPLS)
def test_ack_run_acks_leased_messages_and_stops_where_the_general_path_must(name: str) -> None:
    run = ack_impl(name)
    mine, other = object(), object()
    a = QueueSub(object(), mine, 10, None)
    b = QueueSub(object(), other, 10, None)
    messages: dict[str, QueueMessage] = {}
    for i, (state, lessee) in enumerate(
        [(LEASED, a), (LEASED, b), (AVAILABLE, None), (LEASED, b), (REMOTE, None), (LEASED, a)]
    ):
        msg = QueueMessage(f"1|{i}|", b"{}", None, i, 0.0)
        msg.state, msg.lessee, msg.lease_deadline = state, lessee, None if lessee is None else 9.0
        if lessee is not None:
            lessee.leased[msg.bookmark] = msg
        messages[msg.bookmark] = msg
    kept = dict(messages)
    bookmarks = ["1|0|", "1|1|", "1|9|", "1|2|", "1|3|", "1|4|", "1|5|"]
    removed: list[str] = []
    assert run(messages, bookmarks, 0, mine, True, removed) == (1, 1)  # 1|1| is b's: strict
    assert removed == ["1|0|"] and "1|0|" not in messages and "1|0|" not in a.leased
    gone = kept["1|0|"]
    assert (gone.state, gone.lessee, gone.lease_deadline) == (GONE, None, None)
    assert run(messages, bookmarks, 1, mine, False, removed) == (2, 1)  # 1|9|: not queued
    assert run(messages, bookmarks, 2, mine, False, removed) == (2, 0)
    assert run(messages, bookmarks, 3, mine, False, removed) == (3, 0)  # available
    assert run(messages, bookmarks, 4, mine, False, removed) == (5, 1)  # then remote
    assert run(messages, bookmarks, 6, mine, True, removed) == (7, 1)
    assert removed == ["1|0|", "1|1|", "1|3|", "1|5|"]
    assert sorted(messages) == ["1|2|", "1|4|"] and not a.leased and not b.leased
    assert run(messages, bookmarks, 99, mine, False, removed) == (99, 0)
    with pytest.raises(ValueError, match="pos"):
        run(messages, bookmarks, -1, mine, False, removed)


@needs_c
def test_ack_run_c_and_python_agree_on_random_states() -> None:
    assert speedups.ack_run is not None
    rng = random.Random(17)
    cases = 0
    for seed in range(2000):
        bookmarks = [f"1|{rng.randint(0, 11)}|" for _ in range(rng.randint(0, 8))]
        pos = rng.randint(0, len(bookmarks))
        strict = rng.random() < 0.5
        results = []
        for fn in (speedups.ack_run, acking.ack_run):
            messages, subs, conns = _ack_state(seed)
            removed: list[str] = []
            got = outcome(fn, messages, bookmarks, pos, conns[seed % 2], strict, removed)
            results.append((got, removed, _ack_view(messages, subs)))
        assert results[0] == results[1], (seed, bookmarks, pos, strict)
        cases += 1
    assert cases == 2000


# ---------------------------------------------------------------------- the message type


def msg_class(name: str) -> Any:
    if name == "c":
        assert speedups.QueueMessage is not None
        return speedups.QueueMessage
    return PyQueueMessage


def fields(msg: Any) -> dict[str, Any]:
    return {name: getattr(msg, name, MISSING) for name in SLOTS}


def test_the_bound_message_type_is_the_c_type_when_built() -> None:
    expected = speedups.QueueMessage if speedups.SPEEDUPS else PyQueueMessage
    assert QueueMessage is expected and message.QueueMessage is expected
    assert message.UNPARSED is speedups.UNPARSED


@pytest.mark.parametrize("name", IMPLS)
def test_message_fields_and_defaults(name: str) -> None:
    cls = msg_class(name)
    assert tuple(cls.__slots__) == SLOTS
    msg = cls("1|2|", b"{}", "corr", 7, 1.5)
    assert fields(msg) == {
        "barrier": False,
        "bookmark": "1|2|",
        "cancels": 0,
        "data": b"{}",
        "deliveries": 0,
        "doc": UNPARSED,
        "enqueued": 1.5,
        "expires": None,
        "lease_deadline": None,
        "leased_at": 0.0,
        "lessee": None,
        "order": 7,
        "owner": None,
        "rank": 0,
        "state": AVAILABLE,
        "x": "corr",
    }
    assert type(msg.leased_at) is float and type(msg.rank) is int
    by_name = cls(bookmark="b", data=b"d", x=None, order=1, enqueued=0.0)
    assert (by_name.bookmark, by_name.data, by_name.x) == ("b", b"d", None)
    with pytest.raises(TypeError):
        cls("b", b"d", None, 1)
    with pytest.raises(TypeError):
        cls("b", b"d", None, 1, 0.0, 9)
    with pytest.raises(AttributeError):
        msg.other = 1
    assert not hasattr(msg, "__dict__")
    with pytest.raises(TypeError):
        weakref.ref(msg)


@pytest.mark.parametrize("name", IMPLS)
def test_message_fields_set_get_and_delete_as_slots(name: str) -> None:
    cls = msg_class(name)
    msg = cls("b", b"d", None, 1, 0.0)
    values = {slot: object() for slot in SLOTS}
    for slot, value in values.items():
        setattr(msg, slot, value)
    assert fields(msg) == values
    for slot in SLOTS:
        delattr(msg, slot)
        with pytest.raises(AttributeError, match=slot):
            getattr(msg, slot)
        with pytest.raises(AttributeError):
            delattr(msg, slot)
    assert fields(msg) == dict.fromkeys(SLOTS, MISSING)
    bare = cls.__new__(cls)  # no __init__: nothing set, as Python slots
    assert fields(bare) == dict.fromkeys(SLOTS, MISSING)


@needs_c
def test_c_and_python_messages_agree_on_random_assignments() -> None:
    rng = random.Random(23)
    c_cls = msg_class("c")
    values = [None, 0, 1, -5, 2**70, 0.5, "s", b"b", True, False, UNPARSED]
    for _ in range(500):
        args = (
            rng.choice(["1|1|", "ü"]),
            rng.choice([b"", b"{}"]),
            rng.choice([None, "x"]),
            rng.randint(0, 10**6),
            rng.random(),
        )
        pair = [c_cls(*args), PyQueueMessage(*args)]
        for _ in range(rng.randint(0, 20)):
            slot = rng.choice(SLOTS)
            if rng.random() < 0.2:
                outcome = []
                for msg in pair:
                    try:
                        delattr(msg, slot)
                        outcome.append("deleted")
                    except AttributeError:
                        outcome.append("unset")
                assert outcome[0] == outcome[1]
            else:
                value = rng.choice(values)
                for msg in pair:
                    setattr(msg, slot, value)
        assert fields(pair[0]) == fields(pair[1])


@pytest.mark.parametrize("name", IMPLS)
def test_message_subclasses_with_slots_properties_and_init(name: str) -> None:
    cls = msg_class(name)

    class Extra(cls):  # type: ignore[valid-type,misc]
        __slots__ = ("extra",)

    msg = Extra("b", b"d", None, 3, 0.0)
    msg.extra = 5
    assert (msg.extra, msg.order, msg.data) == (5, 3, b"d") and not hasattr(msg, "__dict__")
    with pytest.raises(AttributeError):
        msg.other = 1

    seen: list[tuple[str, bytes]] = []

    class Stored(cls):  # type: ignore[valid-type,misc]
        """Like queues.metadata_file's: ``data`` is a property, set at construction."""

        __slots__ = ("_body",)

        @property
        def data(self) -> bytes:
            return b"<" + self._body + b">"

        @data.setter
        def data(self, value: bytes) -> None:
            seen.append((self.bookmark, value))  # the bookmark is set before the data
            self._body = value

    stored = Stored("1|9|", b"body", "corr", 4, 2.0)
    assert seen == [("1|9|", b"body")]
    assert stored.data == b"<body>"
    stored.data = b"new"
    assert stored.data == b"<new>" and seen[-1] == ("1|9|", b"new")
    assert {k: v for k, v in fields(stored).items() if k != "data"} == {
        k: v for k, v in fields(cls("1|9|", b"", "corr", 4, 2.0)).items() if k != "data"
    }

    class Init(cls):  # type: ignore[valid-type,misc]
        def __init__(self, bookmark: str) -> None:
            super().__init__(bookmark, b"", None, 0, 0.0)
            self.state = LEASED

    assert (Init("z").bookmark, Init("z").state, Init("z").doc) == ("z", LEASED, UNPARSED)


@pytest.mark.parametrize("name", IMPLS)
def test_message_cycles_are_collected_and_copies_keep_the_fields(name: str) -> None:
    cls = msg_class(name)

    class Holder:
        pass

    holder = Holder()
    msg = cls("b", b"d", None, 1, 0.0)
    msg.lessee = holder
    holder.msg = msg  # type: ignore[attr-defined]
    ref = weakref.ref(holder)
    del holder, msg
    gc.collect()
    assert ref() is None
    original = cls("b", b"d", "x", 2, 3.0)
    original.state = LEASED
    assert fields(copy.copy(original)) == fields(original)
    assert fields(copy.deepcopy(original))["bookmark"] == "b"


# ---------------------------------------------------------------------- lease_run


def lease_impl(name: str) -> Callable[..., None]:
    if name == "c":
        assert speedups.lease_run is not None
        return speedups.lease_run
    return leasing.lease_run


def arrivals_run(count: int) -> list[tuple[str, bytes]]:
    return [(f"4|{i}|", b'{"i":%d}' % i) for i in range(count)]


def two_subs() -> tuple[QueueSub, QueueSub]:
    """Two subscriptions for proportional choices: a with 1 of 4 leased, b with 0 of 2."""
    a = QueueSub(object(), object(), 4, None)
    b = QueueSub(object(), object(), 2, None)
    a.leased["old"] = QueueMessage("old", b"", None, 0, 0.0)
    return a, b


@pytest.mark.parametrize("name", IMPLS)
def test_lease_run_makes_and_leases_each_arrival(name: str) -> None:
    lease = lease_impl(name)
    a, b = two_subs()  # a: 1/4, b: 0/2
    run = arrivals_run(6)
    messages: dict[str, QueueMessage] = {}
    heap: list[Any] = []
    out: list[tuple[QueueSub, QueueMessage]] = []
    deadline = 1000.5
    lease(run, 1, 4, 10, 2.5, [a, b], messages, 7.0, LEASED, deadline, heapq.heappush, heap, out)
    # ratios a 1/4 b 0/2 -> b; a 1/4 b 1/2 -> a; a 2/4 b 1/2 -> a (tie: first); a 3/4 -> b
    assert [(sub, msg.bookmark) for sub, msg in out] == [
        (b, "4|1|"),
        (a, "4|2|"),
        (a, "4|3|"),
        (b, "4|4|"),
    ]
    for i, (sub, msg) in enumerate(out, start=1):
        assert type(msg) is QueueMessage
        assert fields(msg) == {
            **fields(QueueMessage(f"4|{i}|", b'{"i":%d}' % i, None, 10 + i, 2.5)),
            "deliveries": 1,
            "lessee": sub,
            "leased_at": 7.0,
            "state": LEASED,
            "lease_deadline": deadline,
        }
        assert msg.lease_deadline is deadline  # one object for all (framing relies on it)
        assert messages[msg.bookmark] is msg and sub.leased[msg.bookmark] is msg
    assert list(messages) == ["4|1|", "4|2|", "4|3|", "4|4|"]
    assert list(a.leased) == ["old", "4|2|", "4|3|"] and list(b.leased) == ["4|1|", "4|4|"]
    assert sorted((d, order, msg.bookmark) for d, order, msg in heap) == [
        (deadline, 10 + i, f"4|{i}|") for i in range(1, 5)
    ]


@pytest.mark.parametrize("name", IMPLS)
def test_lease_run_at_most_once_single_and_full_subscriptions(name: str) -> None:
    lease = lease_impl(name)
    only = QueueSub(object(), object(), 1, None)
    out: list[tuple[QueueSub, QueueMessage]] = []
    heap: list[Any] = []
    # one subscription takes all it is given (the caller counts the room), at-most-once:
    # no messages table, state GONE, no lease deadline (nothing pushed)
    lease(arrivals_run(3), 0, 3, 1, 0.0, [only], None, 5.0, GONE, None, heapq.heappush, heap, out)
    assert [(s, m.bookmark, m.state, m.order) for s, m in out] == [
        (only, f"4|{i}|", GONE, 1 + i) for i in range(3)
    ]
    assert heap == [] and all(m.lease_deadline is None for _, m in out)
    assert list(only.leased) == ["4|0|", "4|1|", "4|2|"]
    # no subscription with room: the first (the caller never asks for more than the room)
    full = [QueueSub(object(), object(), 0, None), QueueSub(object(), object(), 0, None)]
    out.clear()
    lease(arrivals_run(1), 0, 1, 1, 0.0, full, {}, 5.0, LEASED, None, heapq.heappush, heap, out)
    assert out[0][0] is full[0]
    # nothing to do, and the errors (nothing changed by them)
    messages: dict[str, QueueMessage] = {}
    out.clear()
    before = [dict(qsub.leased) for qsub in full]
    lease(arrivals_run(2), 5, 0, 1, 0.0, [], messages, 0.0, LEASED, None, heapq.heappush, heap, out)
    with pytest.raises(ValueError, match="index"):
        lease(arrivals_run(2), -1, 1, 1, 0.0, full, messages, 0.0, LEASED, None, None, heap, out)
    with pytest.raises(IndexError):
        lease(arrivals_run(2), 1, 2, 1, 0.0, full, messages, 0.0, LEASED, None, None, heap, out)
    with pytest.raises(IndexError):
        lease(arrivals_run(2), 0, 1, 1, 0.0, [], messages, 0.0, LEASED, None, None, heap, out)
    assert out == [] and messages == {} and [dict(qsub.leased) for qsub in full] == before


@pytest.mark.parametrize("name", IMPLS)
def test_lease_run_frames_each_lease_into_its_subscriptions_list(name: str) -> None:
    lease = lease_impl(name)
    a, b = two_subs()  # a: 1/4, b: 0/2
    frames_a: list[bytes] = [b"earlier"]
    frames_b: list[bytes] = []
    targets = [(b"A[", frames_a), (b"B[", frames_b)]
    messages: dict[str, QueueMessage] = {}
    heap: list[Any] = []
    out: list[tuple[QueueSub, QueueMessage]] = []
    run = arrivals_run(6)
    run[2] = ("4|\u00e9|", b"{}")  # a non-ASCII bookmark: framed as UTF-8
    lease(
        run,
        1,
        4,
        10,
        2.5,
        [a, b],
        messages,
        7.0,
        LEASED,
        9.5,
        heapq.heappush,
        heap,
        out,
        targets,
        b"]~",
    )
    # the same choice as without frames (b, a, a, b); the leases are framed, not listed
    assert out == []
    assert frames_a == [b"earlier", "A[4|\u00e9|]~{}".encode(), b'A[4|3|]~{"i":3}']
    assert frames_b == [b'B[4|1|]~{"i":1}', b'B[4|4|]~{"i":4}']
    assert list(a.leased) == ["old", "4|\u00e9|", "4|3|"] and list(b.leased) == ["4|1|", "4|4|"]
    assert [m.lessee for m in messages.values()] == [b, a, a, b]
    assert all(m.lease_deadline == 9.5 and m.deliveries == 1 for m in messages.values())
    assert len(heap) == 4
    # the errors: nothing leased by them
    for bad, error in (
        ((targets, None), TypeError),  # frames without a tail
        ((targets[:1], b"]"), ValueError),  # not one entry per subscription
        (([(b"A", frames_a), ("B", frames_b)], b"]"), TypeError),  # a start that is not bytes
    ):
        with pytest.raises(error):
            lease(
                run,
                5,
                1,
                1,
                0.0,
                [a, b],
                messages,
                0.0,
                LEASED,
                None,
                heapq.heappush,
                heap,
                out,
                *bad,
            )
    assert "4|5|" not in messages and len(frames_a) + len(frames_b) == 5
    with pytest.raises(TypeError):  # an arrival that cannot be framed
        lease(
            [("4|9|", "not bytes")],
            0,
            1,
            1,
            0.0,
            [a],
            None,
            0.0,
            GONE,
            None,
            heapq.heappush,
            heap,
            out,
            [(b"A", frames_a)],
            b"]",
        )


def _lease_case(seed: int) -> tuple[list[QueueSub], dict[str, Any]]:
    """Subscriptions with random backlogs and leases (some under the run's bookmarks),
    and lease_run's other arguments."""
    rng = random.Random(seed)
    subs = [QueueSub(object(), object(), rng.randint(0, 5), None) for _ in range(rng.randint(1, 4))]
    for qsub in subs:
        for j in rng.sample(range(12), rng.randint(0, 3)):
            qsub.leased[f"4|{j}|"] = None  # type: ignore[assignment]
    count = rng.randint(0, 10)
    index = rng.randint(0, count)
    return subs, {
        "run": arrivals_run(count),
        "index": index,
        "n": rng.randint(0, count - index),
        "first": rng.randint(0, 2**40),
        "enqueued": rng.random(),
        "messages": None if rng.random() < 0.3 else {"x": None},
        "now": rng.random(),
        "state": rng.choice([LEASED, GONE]),
        "deadline": rng.choice([None, 3.5]),
    }


@needs_c
def test_lease_run_c_and_python_agree_on_random_cases() -> None:
    assert speedups.lease_run is not None

    def view(
        sub_list: list[QueueSub], args: dict[str, Any], heap: list[Any], out: list[Any]
    ) -> Any:
        def norm(value: Any) -> Any:
            if isinstance(value, QueueSub):
                return ("sub", sub_list.index(value))
            return value

        def msg_view(msg: Any) -> Any:
            return msg if msg is None else (type(msg), {k: norm(v) for k, v in fields(msg).items()})

        messages = args["messages"]
        return (
            [(sub_list.index(s), msg_view(m)) for s, m in out],
            None if messages is None else {b: msg_view(m) for b, m in messages.items()},
            [(d, order, msg.bookmark) for d, order, msg in heap],
            [[(b, msg_view(m)) for b, m in s.leased.items()] for s in sub_list],
        )

    cases = 0
    for seed in range(1500):
        views = []
        for fn in (speedups.lease_run, leasing.lease_run):
            sub_list, args = _lease_case(seed)
            heap: list[Any] = []
            out: list[Any] = []
            # every third case frames the leases instead of listing them
            framed: list[list[bytes]] = [[] for _ in sub_list]
            targets = [(b"S%d:" % k, framed[k]) for k in range(len(sub_list))]
            extra = (targets, b"|t|") if seed % 3 == 0 else ()
            fn(
                args["run"],
                args["index"],
                args["n"],
                args["first"],
                args["enqueued"],
                sub_list,
                args["messages"],
                args["now"],
                args["state"],
                args["deadline"],
                heapq.heappush,
                heap,
                out,
                *extra,
            )
            views.append((view(sub_list, args, heap, out), framed))
        assert views[0] == views[1], seed
        cases += 1
    assert cases == 1500
