# Generated from ampsclient/convenience.py by tools/unasync.py: do not edit by hand.
"""The official convenience commands of the synchronous :class:`~ampsclient.sync.Client`.

Generated from :class:`~ampsclient.convenience.AsyncCommands` by ``tools/unasync.py`` (the
same methods, arguments, overloads and docstrings; ``tests/test_unasync.py`` checks the file
is current), blocking until the command is placed: ``subscribe(on_message, topic, ...)``
returns the command id, ``subscribe(topic, ...)`` a :class:`~ampsclient.stream.MessageStream`
to iterate on.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from . import calls
from .calls import UNSET, Handler, OptionsArg
from .protocol.message import Message
from .stream import MessageStream

if TYPE_CHECKING:
    from .convenience import AsyncCommands

__all__ = ["SyncCommands"]

T = TypeVar("T")


class SyncCommands:
    """The convenience commands, for a class with ``_async`` (the asyncio client it drives)
    and ``_run(coroutine)`` (:class:`~ampsclient.sync.Client`).

    (1) As in :class:`~ampsclient.convenience.AsyncCommands`: the overloads are what callers
    are checked against; the implementation takes the handler form's parameters.
    """

    if TYPE_CHECKING:
        _async: AsyncCommands

        def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...

    # ------------------------------------------------------------------------ subscribe
    @overload
    def subscribe(
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
    def subscribe(
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
    def subscribe(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_subscription("subscribe", handler, p))

    @overload
    def delta_subscribe(
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
    def delta_subscribe(
        self,
        topic: str,
        filter: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
        sub_id: str | None = None,
        *,
        bookmark: str | None = None,
    ) -> MessageStream: ...
    def delta_subscribe(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_subscription("delta_subscribe", handler, p))

    @overload
    def bookmark_subscribe(
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
    def bookmark_subscribe(
        self,
        topic: str,
        bookmark: str,
        filter: str | None = None,
        sub_id: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
    ) -> MessageStream: ...
    def bookmark_subscribe(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_subscription("subscribe", handler, p))

    # ------------------------------------------------------------------------------ sow
    @overload
    def sow(
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
    def sow(
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
    def sow(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_subscription("sow", handler, p))

    @overload
    def sow_and_subscribe(
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
    def sow_and_subscribe(
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
    def sow_and_subscribe(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_subscription("sow_and_subscribe", handler, p))

    @overload
    def sow_and_delta_subscribe(
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
    def sow_and_delta_subscribe(
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
    def sow_and_delta_subscribe(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_subscription("sow_and_delta_subscribe", handler, p))

    # ----------------------------------------------------------------------- sow_delete
    @overload
    def sow_delete(
        self, on_message: Handler, topic: str, filter: str | None = None, timeout: int = 0
    ) -> str: ...
    @overload
    def sow_delete(self, topic: str, filter: str | None = None, timeout: int = 0) -> Message: ...
    def sow_delete(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_sow_delete("sow_delete", handler, p))

    @overload
    def sow_delete_by_keys(
        self, on_message: Handler, topic: str, keys: str | Iterable[str], timeout: int = 0
    ) -> str: ...
    @overload
    def sow_delete_by_keys(
        self, topic: str, keys: str | Iterable[str], timeout: int = 0
    ) -> Message: ...
    def sow_delete_by_keys(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_sow_delete("sow_delete_by_keys", handler, p))

    @overload
    def sow_delete_by_data(
        self, on_message: Handler, topic: str, data: object, timeout: int = 0
    ) -> str: ...
    @overload
    def sow_delete_by_data(self, topic: str, data: object, timeout: int = 0) -> Message: ...
    def sow_delete_by_data(  # type: ignore[misc]  # (1)
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
        return self._run(self._async.run_sow_delete("sow_delete_by_data", handler, p))
