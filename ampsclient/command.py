"""The :class:`Command` builder, with the official client's chainable setters."""

from __future__ import annotations

from typing import Any

from .protocol.acks import AckType, format_ack_types, parse_ack_types
from .protocol.header import Header, encode_text

__all__ = ["Command"]


class Command:
    """A command to send to the server.

    Example::

        cmd = Command("sow").set_topic("orders").set_filter("/qty > 10").set_batch_size(100)
        for message in client.execute(cmd):
            ...

    Setters return ``self`` so they chain; ``timeout`` is in milliseconds (0 = wait forever),
    like the official client.
    """

    __slots__ = ("_ack_text", "_acks", "data", "fields", "name", "timeout_ms")

    def __init__(self, command: str) -> None:
        self.name = "p" if command == "publish" else command
        """The ``c`` header."""
        self.fields: Header = {}
        """Header fields other than ``c`` and ``a``."""
        self.data: bytes | None = None
        """The body."""
        self.timeout_ms = 0
        """Client-side wait for the processed ack (ms, 0 = no limit)."""
        self._acks = AckType.NONE
        self._ack_text = ""  # what get_ack_type() shows, built as the official client does

    # -- generic ---------------------------------------------------------------------------

    def _set(self, key: str, value: Any) -> Command:
        if value is None or value == "":
            self.fields.pop(key, None)
        else:
            self.fields[key] = value
        return self

    def reset(self, command: str) -> Command:
        """Reuse this object for another command."""
        self.__init__(command)  # type: ignore[misc]
        return self

    @property
    def ack_types(self) -> AckType:
        """The requested ack types."""
        return self._acks

    # -- setters (official names) -----------------------------------------------------------

    def set_topic(self, topic: str) -> Command:
        """``t``."""
        return self._set("t", topic)

    def set_filter(self, filter: str | None) -> Command:
        """``filter``."""
        return self._set("filter", filter)

    def set_options(self, options: str | None) -> Command:
        """``o``: a comma list of options."""
        return self._set("o", options)

    def set_bookmark(self, bookmark: str | None) -> Command:
        """``bookmark``."""
        return self._set("bm", bookmark)

    def set_sub_id(self, sub_id: str | None) -> Command:
        """``sub_id``."""
        return self._set("sub_id", sub_id)

    def set_query_id(self, query_id: str | None) -> Command:
        """``query_id``."""
        return self._set("query_id", query_id)

    def set_command_id(self, command_id: str | None) -> Command:
        """``cid``."""
        return self._set("cid", command_id)

    def set_correlation_id(self, correlation_id: str | None) -> Command:
        """``x``."""
        return self._set("x", correlation_id)

    def set_data(self, data: str | bytes | None) -> Command:
        """The body (text is encoded as UTF-8)."""
        self.data = encode_text(data, "the data") if isinstance(data, str) else data
        return self

    def set_expiration(self, seconds: int | None) -> Command:
        """``e``: expiration in seconds."""
        return self._set("e", None if seconds is None else str(seconds))

    def set_sow_key(self, sow_key: str | None) -> Command:
        """``k``: the SOW key of a publish or delta_publish."""
        return self._set("k", sow_key)

    def set_sow_keys(self, sow_keys: str | None) -> Command:
        """``sow_keys``: comma list for sow, sow_and_subscribe, sow_delete."""
        return self._set("sow_keys", sow_keys)

    def set_order_by(self, order_by: str | None) -> Command:
        """``orderby``."""
        return self._set("orderby", order_by)

    def set_top_n(self, top_n: int | None) -> Command:
        """``top_n``."""
        return self._set("top_n", top_n)

    def set_batch_size(self, batch_size: int | None) -> Command:
        """``batch_size``."""
        return self._set("bs", batch_size)

    def set_sequence(self, sequence: int | None) -> Command:
        """``s``."""
        return self._set("s", sequence)

    def get_sequence(self) -> int:
        """``s`` (0 when not set, as the official client reads it)."""
        v = self.fields.get("s")
        return 0 if v is None else int(v)

    def set_timeout(self, timeout_ms: int) -> Command:
        """Client-side wait for the processed ack, in milliseconds."""
        self.timeout_ms = int(timeout_ms)
        return self

    def set_ack_type(self, ack_type: str | int | AckType | None) -> Command:
        """Replace the requested ack types (``"processed,completed"`` or flags)."""
        if ack_type is None:
            self._acks = AckType.NONE
            self._ack_text = ""
        elif isinstance(ack_type, str):
            self._acks = parse_ack_types(ack_type)
            self._ack_text = ack_type  # kept as given (official)
        else:
            self._acks = AckType(int(ack_type))
            self._ack_text = format_ack_types(self._acks)
        return self

    set_ack_type_enum = set_ack_type

    def add_ack_type(self, ack_type: str | int | AckType) -> Command:
        """Request one more ack type."""
        if isinstance(ack_type, str):
            extra, text = parse_ack_types(ack_type), ack_type
        else:
            extra = AckType(int(ack_type))
            text = format_ack_types(extra)
        self._acks |= extra
        self._ack_text += "," + text  # the official text: appended, leading comma and all
        return self

    def get_ack_type(self) -> str:
        """The requested ack types as the official client shows them: the string given to
        :meth:`set_ack_type`, each :meth:`add_ack_type` appended after a comma (so
        ``Command("sow").add_ack_type("processed")`` shows ``",processed"``); flags in the
        wire's order. What is sent is the wire's comma list of :attr:`ack_types`."""
        return self._ack_text

    def get_ack_type_enum(self) -> int:
        """The requested ack types as the official numeric flags (``processed`` = 4)."""
        return int(self._acks)

    def get_command(self) -> str:
        """``c``."""
        return self.name

    def get_topic(self) -> str | None:
        """``t``."""
        v = self.fields.get("t")
        return None if v is None else str(v)

    def get_sub_id(self) -> str | None:
        """``sub_id``."""
        v = self.fields.get("sub_id")
        return None if v is None else str(v)

    def get_query_id(self) -> str | None:
        """``query_id``."""
        v = self.fields.get("query_id")
        return None if v is None else str(v)

    def get_command_id(self) -> str | None:
        """``cid``."""
        v = self.fields.get("cid")
        return None if v is None else str(v)

    def __repr__(self) -> str:
        return f"Command({self.name!r}, {self.fields!r}, acks={format_ack_types(self._acks)!r})"
