"""StoreAndForward: an HA client's publish state, in one object that alone writes it.

An :class:`~ampsclient.ha.client.AsyncHAClient` stores every publish before it sends it, and
sends it only while its *publish gate* is open: closed while disconnected, reconnecting and
replaying, when publishes are stored and go out with the replay after the next logon. The
state that makes this work is here, written by nothing else:

* the publish store, whose index gives each publish its sequence number (``store_parts``);
* the gate (``can_send``) and an event publishers that block while disconnected wait on;
* the lock held while a publish is stored and queued, while the gate moves and while the
  reconnect sequence replays, so that a publish is either in the replay or sent after it,
  never both nor neither;
* the per-topic tails of a stored publish, spelled by the core encoder
  (:func:`ampsclient.core.publish.publish_header`) and cached.

Its fields are a :data:`~ampsclient._accel.StoreForwardFields` (a type the C speedups own;
twin :class:`~ampsclient._accel.PyStoreForwardFields`): the C ``PublishLane``, the common
case of a plain publish, is built on them (:meth:`StoreAndForward.publish_lane`). Frames go
out through the client's writer (:meth:`~ampsclient.writer.FrameWriter.queue_frame`).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any, Final

from .. import _accel
from ..core.publish import publish_header
from ..stores.publish import PublishStore
from ..writer import FrameWriter
from .persist_waiters import publish_lane_store_kind

__all__ = ["STORED_P_HEAD", "StoreAndForward"]

_pack_len: Final = struct.Struct(">I").pack

STORED_P_HEAD: Final = publish_header("p", "", sequenced=True)[0]
"""The head of every stored ``p`` (up to its ``"s":``), from the core's encoder: the C
``PublishLane`` is given it too."""


class StoreAndForward:
    """An HA client's publish store, gate, lock and stored-tail cache (see the module).

    Args:
        store: the publish store.
        writer: the held client's writer: stored publishes are queued on it while the gate
            is open.
        block: called (without the lock) before a publish is stored while the gate is closed,
            to wait for it to open (``publish_while_disconnected="block"``); ``None``: store
            and return.
    """

    __slots__ = ("_block", "_opened", "_queue_frame", "_writable", "_writer", "fields")

    def __init__(
        self,
        store: PublishStore,
        writer: FrameWriter,
        *,
        block: Callable[[], None] | None = None,
    ) -> None:
        self.fields: Final[_accel.PyStoreForwardFields] = _accel.StoreForwardFields()
        """The state (see :class:`ampsclient._accel.PyStoreForwardFields`): this object alone
        writes it; the C ``PublishLane`` is built on it."""
        fields = self.fields
        fields.store = store
        fields.lock = threading.Lock()
        fields.suffixes = {}
        fields.can_send = False
        self._writer = writer
        self._queue_frame = writer.queue_frame
        self._writable = writer.writable
        self._block = block
        self._opened = threading.Event()

    # ------------------------------------------------------------------------------ reading

    @property
    def store(self) -> PublishStore:
        """The publish store."""
        store: PublishStore = self.fields.store
        return store

    @property
    def lock(self) -> threading.Lock:
        """The lock held while a publish is stored and queued and while the gate moves: hold
        it to make a step atomic with those (the reconnect sequence's replay)."""
        return self.fields.lock

    @property
    def gate_open(self) -> bool:
        """Whether stored publishes are sent at once (``False`` while disconnected,
        reconnecting and replaying)."""
        return self.fields.can_send

    def wait_open(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the gate to open (or :meth:`release_waiters`)."""
        return self._opened.wait(timeout)

    # ------------------------------------------------------------------------------ the gate

    def set_store(self, store: PublishStore) -> None:
        """Use ``store`` from now on (its owner checked it may be replaced; a lane built on
        the old one must be rebuilt: :meth:`publish_lane`)."""
        self.fields.store = store

    def open_gate(self) -> None:
        """Open the gate: publishes from now on go straight out. The caller holds
        :attr:`lock` and has just replayed what was stored meanwhile (the reconnect
        sequence's ``open``), so nothing stored can overtake the replay."""
        self.fields.can_send = True
        self._opened.set()

    def close_gate(self) -> None:
        """Close the gate: publishes from now on are stored for the next replay. The caller
        holds :attr:`lock` (and tells the reconnect sequence the connection is lost)."""
        self.fields.can_send = False
        self._opened.clear()

    def release_waiters(self) -> None:
        """Wake publishers blocked in :meth:`wait_open` without opening the gate (the client
        closes or gave up reconnecting: they see why)."""
        self._opened.set()

    # ---------------------------------------------------------------------------- publishing

    def suffix(self, topic: str) -> bytes:
        """The tail of a stored publish of ``topic`` with no option (after its ``s``), from
        the core's encoder, cached per topic (the C ``PublishLane`` reads the cache)."""
        suffixes = self.fields.suffixes
        suffix = suffixes.get(topic)
        if suffix is None:
            suffix = suffixes[topic] = publish_header(
                "p", topic, sequenced=True, ack_type="persisted"
            )[1]
        return suffix

    def store_and_send(self, head: bytes, tail: bytes) -> int:
        """Store the publish ``head + s + tail`` (the store gives it its sequence number
        ``s``) and, while the gate is open, queue its frame; returns ``s``. While the gate is
        closed, first wait for it when told to block."""
        fields = self.fields
        if self._block is not None and not fields.can_send:
            self._block()
        store: PublishStore = fields.store
        lock = fields.lock
        lock.acquire()  # not ``with``: this runs once per publish and __exit__ costs a call
        try:
            seq, payload = store.store_parts(head, tail)
            # sent only while the gate is open; no back-pressure wait while holding the lock
            # the reconnect sequence needs
            if fields.can_send:
                self._queue_frame(_pack_len(len(payload)) + payload)
        finally:
            lock.release()
        if not self._writable.is_set():
            self._writer.wait_writable()
        return seq

    def store_parts(self, head: bytes, tail: bytes) -> tuple[int, bytes]:
        """Store ``head + s + tail`` in the current store (the caller holds :attr:`lock`):
        ``(s, payload)``."""
        return self.store.store_parts(head, tail)

    def queue_frame_now(self, frame: bytes) -> bool:
        """While the gate is open, queue ``frame`` and, on the loop thread, write it at once
        (:meth:`~ampsclient.writer.FrameWriter.queue_frame_now`; the caller holds
        :attr:`lock`): whether it was queued."""
        return self.fields.can_send and self._writer.queue_frame_now(frame)

    def publish_lane(self, publish: Callable[..., int]) -> Any:
        """A C ``PublishLane`` built on these fields and the writer: the common case of a
        plain publish, calling ``publish`` (the HA client's Python path) for the rest; ``None``
        without the C speedups or for a store the lane does not know."""
        lane = _accel.PublishLane
        kind = publish_lane_store_kind(self.store)
        if lane is None or kind is None:
            return None
        return lane(
            state=self.fields,
            file=kind == "file",
            publish=publish,
            head=STORED_P_HEAD,
            **self._writer.lane_arguments(),
        )
