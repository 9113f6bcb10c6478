"""The official convenience commands of :class:`~ampsclient.client.AsyncClient`, typed.

``subscribe``, ``delta_subscribe``, ``bookmark_subscribe``, ``sow``, ``sow_and_subscribe``,
``sow_and_delta_subscribe``, ``sow_delete``, ``sow_delete_by_keys`` and
``sow_delete_by_data`` take the official client's arguments in its order, with or without a
handler first (:mod:`ampsclient.calls`): given a handler they return the command id, without
one a :class:`~ampsclient.stream.MessageStream` (``sow_delete*``: the ``stats`` ack). Timeouts
are milliseconds (0: wait indefinitely). :class:`~ampsclient.sync_convenience.SyncCommands`
has the same methods for the synchronous facade: it is generated from this file by
``tools/unasync.py`` (run it after changing a command here; ``tests/test_unasync.py`` fails
until then).
"""

from __future__ import annotations

import abc
import asyncio
import builtins
from collections.abc import Iterable
from typing import Any, overload

from . import calls
from .calls import UNSET, Handler, OptionsArg, join_options
from .command import Command
from .exceptions import TimeoutError
from .protocol.acks import AckType
from .protocol.bookmarks import MOST_RECENT
from .protocol.message import Message
from .stream import MessageStream

__all__ = ["AsyncCommands", "build_command"]


def build_command(name: str, p: dict[str, Any], bookmark: str | None) -> Command:
    """The command of convenience method ``name`` for the parameters :func:`calls.bind` read.

    ``bookmark`` is the bookmark to send (the client resolved ``MOST_RECENT``);
    ``sow_delete*`` commands get their keys or data set by the caller.
    """
    cmd = Command(name).set_topic(p["topic"])
    cmd.set_timeout(int(p.get("timeout") or 0))
    if name in ("subscribe", "delta_subscribe"):
        cmd.set_filter(p.get("filter"))
        cmd.set_options(_with_max_backlog(join_options(p.get("options")), p.get("max_backlog")))
        cmd.set_sub_id(p.get("sub_id"))
        cmd.set_bookmark(bookmark)
        return cmd
    if name == "sow_delete":
        return cmd.set_filter(p.get("filter")).add_ack_type(AckType.STATS)
    cmd.set_filter(p.get("filter"))
    bs = p.get("batch_size")
    cmd.set_batch_size(10 if bs is None else int(bs))
    if p.get("top_n") is not None:
        cmd.set_top_n(int(p["top_n"]))
    cmd.set_order_by(p.get("order_by"))
    cmd.set_bookmark(bookmark)
    # the official order: oof, no_empties, then the caller's options
    opts = ["oof"] if p.get("oof_enabled") or p.get("oof") else []
    if name == "sow_and_delta_subscribe" and not p.get("send_empties"):
        opts.append("no_empties")  # the official default (send_empties=False)
    opts.extend(o for o in (join_options(p.get("options")),) if o)
    cmd.set_options(",".join(opts) or None)
    if p.get("sub_id") is not None:
        cmd.set_sub_id(p["sub_id"])
    return cmd


def _with_max_backlog(options: str | None, max_backlog: object) -> str | None:
    """``options`` with ``max_backlog=N`` added (the ``max_backlog`` keyword of ``subscribe``)."""
    if max_backlog is None:
        return options
    if isinstance(max_backlog, bool) or not isinstance(max_backlog, int) or max_backlog < 1:
        raise ValueError(f"max_backlog must be an int >= 1, not {max_backlog!r}")
    return f"{options},max_backlog={max_backlog}" if options else f"max_backlog={max_backlog}"


class AsyncCommands(abc.ABC):
    """The convenience commands, built on three primitives a client defines: ``execute``,
    ``execute_async`` and ``encode_data`` (:class:`~ampsclient.client.AsyncClient`, and
    :class:`~ampsclient.ha.face.ConnectionFace` for the HA client that holds one).

    An abstract base in the manner of :class:`collections.abc.Mapping`: it keeps no state and
    writes no attribute (``tests/client/test_client_bases.py`` checks), so the commands are
    written once for both clients instead of forwarded twice with their three overloads
    each; a class that lacks a primitive cannot be instantiated.

    (1) Each implementation takes the handler form's parameters; mypy cannot see that
    :func:`calls.bind` moves the handler-less form's positional arguments one place right
    (the ``misc`` error it reports), so the overloads are what callers are checked against
    and ``tests/typing/test_call_forms.py`` runs both forms.
    """

    @abc.abstractmethod
    async def execute(self, command: Command) -> MessageStream:
        """Send ``command``; its messages arrive on the stream returned."""

    @abc.abstractmethod
    async def execute_async(self, command: Command, handler: Handler | None = None) -> str:
        """Send ``command``; its messages go to ``handler``; returns its command id."""

    @abc.abstractmethod
    def encode_data(self, data: Any) -> bytes:
        """``data`` as bytes for the connection's message type."""

    def _resolve_bookmark(self, bookmark: str | None, sub_id: str | None) -> str | None:
        """``MOST_RECENT`` is resolved here and never sent: with no bookmark store it is EPOCH.

        The one hook a client may override: the HA client asks its bookmark store.
        """
        if bookmark == MOST_RECENT:
            return "0"
        return bookmark

    async def run_subscription(
        self, name: str, handler: Handler | None, p: dict[str, Any]
    ) -> str | MessageStream:
        """Run subscription or query ``name`` with the parameters :func:`calls.bind` read
        (where every form of these methods ends; the synchronous facade calls it too)."""
        bookmark = p.get("bookmark")
        if name in ("subscribe", "delta_subscribe"):
            bookmark = self._resolve_bookmark(bookmark, p.get("sub_id"))
        command = build_command(name, p, bookmark)
        if handler is None:
            return await self.execute(command)
        return await self.execute_async(command, handler)

    async def run_sow_delete(
        self, name: str, handler: Handler | None, p: dict[str, Any]
    ) -> Message | str:
        """Run ``sow_delete``, ``sow_delete_by_keys`` or ``sow_delete_by_data`` (``name``) with
        the parameters :func:`calls.bind` read."""
        cmd = build_command("sow_delete", p, None)
        if name == "sow_delete_by_keys":
            keys = p["keys"]
            cmd.set_filter(None).set_sow_keys(keys if isinstance(keys, str) else ",".join(keys))
        elif name == "sow_delete_by_data":
            cmd.set_filter(None).set_data(self.encode_data(p["data"]))
        if handler is not None:
            return await self.execute_async(cmd, handler)
        timeout = int(p.get("timeout") or 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout / 1000.0 if timeout else None
        try:
            async with asyncio.timeout_at(deadline):  # one bound for the command and its acks
                stream = await self.execute(cmd)
                try:
                    async for message in stream:
                        if message.command == "ack" and message.ack_type & AckType.STATS:
                            return message
                finally:
                    stream.close()
        except TimeoutError:
            raise
        except builtins.TimeoutError:  # the deadline (the builtin, not ours)
            pass
        raise TimeoutError(f"timed out waiting for the {name} stats ack")

    # ------------------------------------------------------------------------ subscribe
    @overload
    async def subscribe(
        self,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
        sub_id: str | None = None,
        *,
        bookmark: str | None = None,
        max_backlog: int | None = None,
    ) -> str: ...
    @overload
    async def subscribe(
        self,
        topic: str,
        filter: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
        sub_id: str | None = None,
        *,
        bookmark: str | None = None,
        max_backlog: int | None = None,
    ) -> MessageStream: ...
    async def subscribe(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        filter: Any = UNSET,
        options: Any = UNSET,
        timeout: Any = UNSET,
        sub_id: Any = UNSET,
        *,
        bookmark: Any = UNSET,
        max_backlog: Any = UNSET,
    ) -> str | MessageStream:
        """Subscribe to ``topic``: ``subscribe(on_message, topic, filter=None, options=None,
        timeout=0, sub_id=None)`` returns the command id; without ``on_message``, a
        :class:`MessageStream`. Keyword-only extras: ``bookmark`` (a bookmark subscription),
        ``max_backlog`` (a queue subscription's backlog: sent as the ``max_backlog=N`` option).
        """
        handler, p = calls.bind(
            "subscribe",
            calls.SUBSCRIBE,
            on_message,
            (topic, filter, options, timeout, sub_id),
            {"bookmark": bookmark, "max_backlog": max_backlog},
        )
        return await self.run_subscription("subscribe", handler, p)

    @overload
    async def delta_subscribe(
        self,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
        sub_id: str | None = None,
        *,
        bookmark: str | None = None,
    ) -> str: ...
    @overload
    async def delta_subscribe(
        self,
        topic: str,
        filter: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
        sub_id: str | None = None,
        *,
        bookmark: str | None = None,
    ) -> MessageStream: ...
    async def delta_subscribe(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        filter: Any = UNSET,
        options: Any = UNSET,
        timeout: Any = UNSET,
        sub_id: Any = UNSET,
        *,
        bookmark: Any = UNSET,
    ) -> str | MessageStream:
        """Like :meth:`subscribe`; updates to a SOW record carry only the changed fields."""
        handler, p = calls.bind(
            "delta_subscribe",
            calls.SUBSCRIBE,
            on_message,
            (topic, filter, options, timeout, sub_id),
            {"bookmark": bookmark},
        )
        return await self.run_subscription("delta_subscribe", handler, p)

    @overload
    async def bookmark_subscribe(
        self,
        on_message: Handler,
        topic: str,
        bookmark: str,
        filter: str | None = None,
        sub_id: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
    ) -> str: ...
    @overload
    async def bookmark_subscribe(
        self,
        topic: str,
        bookmark: str,
        filter: str | None = None,
        sub_id: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
    ) -> MessageStream: ...
    async def bookmark_subscribe(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        bookmark: Any = UNSET,
        filter: Any = UNSET,
        sub_id: Any = UNSET,
        options: Any = UNSET,
        timeout: Any = UNSET,
    ) -> str | MessageStream:
        """``bookmark_subscribe(on_message, topic, bookmark, filter=None, sub_id=None,
        options=None, timeout=0)``: replay the transaction log from ``bookmark`` (a bookmark,
        a timestamp, ``EPOCH``, ``NOW`` or ``MOST_RECENT``), then continue live."""
        handler, p = calls.bind(
            "bookmark_subscribe",
            calls.BOOKMARK_SUBSCRIBE,
            on_message,
            (topic, bookmark, filter, sub_id, options, timeout),
            required=("topic", "bookmark"),
        )
        return await self.run_subscription("subscribe", handler, p)

    # ------------------------------------------------------------------------------ sow
    @overload
    async def sow(
        self,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        batch_size: int = 10,
        timeout: int = 0,
        top_n: int | None = None,
        order_by: str | None = None,
        bookmark: str | None = None,
        options: OptionsArg = None,
    ) -> str: ...
    @overload
    async def sow(
        self,
        topic: str,
        filter: str | None = None,
        batch_size: int = 10,
        timeout: int = 0,
        top_n: int | None = None,
        order_by: str | None = None,
        bookmark: str | None = None,
        options: OptionsArg = None,
    ) -> MessageStream: ...
    async def sow(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        filter: Any = UNSET,
        batch_size: Any = UNSET,
        timeout: Any = UNSET,
        top_n: Any = UNSET,
        order_by: Any = UNSET,
        bookmark: Any = UNSET,
        options: Any = UNSET,
    ) -> str | MessageStream:
        """Query the State of the World: ``sow(on_message, topic, filter=None, batch_size=10,
        timeout=0, top_n=None, order_by=None, bookmark=None, options=None)``. The results come
        between a ``group_begin`` and a ``group_end`` message."""
        handler, p = calls.bind(
            "sow",
            calls.SOW,
            on_message,
            (topic, filter, batch_size, timeout, top_n, order_by, bookmark, options),
        )
        return await self.run_subscription("sow", handler, p)

    @overload
    async def sow_and_subscribe(
        self,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        batch_size: int = 10,
        oof_enabled: bool = False,
        timeout: int = 0,
        top_n: int | None = None,
        order_by: str | None = None,
        bookmark: str | None = None,
        options: OptionsArg = None,
        *,
        sub_id: str | None = None,
        oof: bool = False,
    ) -> str: ...
    @overload
    async def sow_and_subscribe(
        self,
        topic: str,
        filter: str | None = None,
        batch_size: int = 10,
        oof_enabled: bool = False,
        timeout: int = 0,
        top_n: int | None = None,
        order_by: str | None = None,
        bookmark: str | None = None,
        options: OptionsArg = None,
        *,
        sub_id: str | None = None,
        oof: bool = False,
    ) -> MessageStream: ...
    async def sow_and_subscribe(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        filter: Any = UNSET,
        batch_size: Any = UNSET,
        oof_enabled: Any = UNSET,
        timeout: Any = UNSET,
        top_n: Any = UNSET,
        order_by: Any = UNSET,
        bookmark: Any = UNSET,
        options: Any = UNSET,
        *,
        sub_id: Any = UNSET,
        oof: Any = UNSET,
    ) -> str | MessageStream:
        """Query the SOW, then subscribe: ``sow_and_subscribe(on_message, topic, filter=None,
        batch_size=10, oof_enabled=False, timeout=0, top_n=None, order_by=None,
        bookmark=None, options=None)``. Keyword-only extras: ``sub_id``, and ``oof`` (the
        same as ``oof_enabled``: ``oof`` messages when a record leaves the filter)."""
        handler, p = calls.bind(
            "sow_and_subscribe",
            calls.SOW_AND_SUBSCRIBE,
            on_message,
            (topic, filter, batch_size, oof_enabled, timeout, top_n, order_by, bookmark, options),
            {"sub_id": sub_id, "oof": oof},
        )
        return await self.run_subscription("sow_and_subscribe", handler, p)

    @overload
    async def sow_and_delta_subscribe(
        self,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        batch_size: int = 10,
        oof_enabled: bool = False,
        send_empties: bool = False,
        timeout: int = 0,
        top_n: int | None = None,
        order_by: str | None = None,
        options: OptionsArg = None,
        *,
        sub_id: str | None = None,
        oof: bool = False,
    ) -> str: ...
    @overload
    async def sow_and_delta_subscribe(
        self,
        topic: str,
        filter: str | None = None,
        batch_size: int = 10,
        oof_enabled: bool = False,
        send_empties: bool = False,
        timeout: int = 0,
        top_n: int | None = None,
        order_by: str | None = None,
        options: OptionsArg = None,
        *,
        sub_id: str | None = None,
        oof: bool = False,
    ) -> MessageStream: ...
    async def sow_and_delta_subscribe(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        filter: Any = UNSET,
        batch_size: Any = UNSET,
        oof_enabled: Any = UNSET,
        send_empties: Any = UNSET,
        timeout: Any = UNSET,
        top_n: Any = UNSET,
        order_by: Any = UNSET,
        options: Any = UNSET,
        *,
        sub_id: Any = UNSET,
        oof: Any = UNSET,
    ) -> str | MessageStream:
        """Like :meth:`sow_and_subscribe` with delta updates. ``send_empties=False`` (the
        default, as in the official client) asks the server to drop updates that changed
        nothing (``no_empties``); ``True`` lets them through."""
        handler, p = calls.bind(
            "sow_and_delta_subscribe",
            calls.SOW_AND_DELTA_SUBSCRIBE,
            on_message,
            (
                topic,
                filter,
                batch_size,
                oof_enabled,
                send_empties,
                timeout,
                top_n,
                order_by,
                options,
            ),
            {"sub_id": sub_id, "oof": oof},
        )
        return await self.run_subscription("sow_and_delta_subscribe", handler, p)

    # ----------------------------------------------------------------------- sow_delete
    @overload
    async def sow_delete(
        self, on_message: Handler, topic: str, filter: str | None = None, timeout: int = 0
    ) -> str: ...
    @overload
    async def sow_delete(
        self, topic: str, filter: str | None = None, timeout: int = 0
    ) -> Message: ...
    async def sow_delete(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        filter: Any = UNSET,
        timeout: Any = UNSET,
    ) -> str | Message:
        """Delete the SOW records of ``topic`` that match ``filter``: ``sow_delete(topic,
        filter=None, timeout=0)`` returns the ``stats`` ack (``get_records_deleted()``...);
        with ``on_message`` first, the acks go to it and the command id is returned."""
        handler, p = calls.bind(
            "sow_delete", calls.SOW_DELETE, on_message, (topic, filter, timeout)
        )
        return await self.run_sow_delete("sow_delete", handler, p)

    @overload
    async def sow_delete_by_keys(
        self, on_message: Handler, topic: str, keys: str | Iterable[str], timeout: int = 0
    ) -> str: ...
    @overload
    async def sow_delete_by_keys(
        self, topic: str, keys: str | Iterable[str], timeout: int = 0
    ) -> Message: ...
    async def sow_delete_by_keys(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        keys: Any = UNSET,
        timeout: Any = UNSET,
    ) -> str | Message:
        """Delete the SOW records with these SOW keys (a comma-separated string or the keys)."""
        handler, p = calls.bind(
            "sow_delete_by_keys",
            calls.SOW_DELETE_BY_KEYS,
            on_message,
            (topic, keys, timeout),
            required=("topic", "keys"),
        )
        return await self.run_sow_delete("sow_delete_by_keys", handler, p)

    @overload
    async def sow_delete_by_data(
        self, on_message: Handler, topic: str, data: object, timeout: int = 0
    ) -> str: ...
    @overload
    async def sow_delete_by_data(self, topic: str, data: object, timeout: int = 0) -> Message: ...
    async def sow_delete_by_data(  # type: ignore[misc]  # (1)
        self,
        on_message: Any = UNSET,
        topic: Any = UNSET,
        data: Any = UNSET,
        timeout: Any = UNSET,
    ) -> str | Message:
        """Delete the SOW record that ``data`` (a message of the topic's type) names."""
        handler, p = calls.bind(
            "sow_delete_by_data",
            calls.SOW_DELETE_BY_DATA,
            on_message,
            (topic, data, timeout),
            required=("topic", "data"),
        )
        return await self.run_sow_delete("sow_delete_by_data", handler, p)
