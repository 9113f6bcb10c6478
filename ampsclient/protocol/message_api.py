"""The official client's spellings on :class:`~ampsclient.protocol.message.Message`.

Every header field has a getter, a setter and a property in the official snake_case
(``get_topic``/``set_topic``/``topic``) and camelCase (``getTopic``/``setTopic``) forms;
``Message.Command`` holds the command names and their numeric ``...Enum`` values;
``Message.AckType`` gains the official string constants (``Persisted``, ``PersistedEnum``);
``Message.Options`` also works as the official instance builder
(``str(Message.Options().set_max_backlog(5).set_OOF())``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FIELDS", "MessageCommand", "MessageOptionsBuilder", "install_official_api"]

FIELDS: dict[str, tuple[str, str, str]] = {
    # official name: (wire key, camelCase suffix, kind)
    "ack_type": ("a", "AckType", "str"),
    "batch_size": ("bs", "BatchSize", "int"),
    "bookmark": ("bm", "Bookmark", "str"),
    "client_name": ("client_name", "ClientName", "str"),
    "command": ("c", "Command", "str"),
    "command_id": ("cid", "CommandId", "str"),
    "correlation_id": ("x", "CorrelationId", "str"),
    "expiration": ("e", "Expiration", "str"),
    "filter": ("filter", "Filter", "str"),
    "group_seq_no": ("gseq", "GroupSequenceNumber", "str"),
    "heartbeat": ("hb", "Heartbeat", "str"),
    "lease_period": ("lp", "LeasePeriod", "str"),
    "matches": ("matches", "Matches", "int"),
    "message_size": ("l", "MessageLength", "int"),
    "message_type": ("mt", "MessageType", "str"),
    "options": ("o", "Options", "str"),
    "order_by": ("orderby", "OrderBy", "str"),
    "password": ("pw", "Password", "str"),
    "query_id": ("query_id", "QueryID", "str"),
    "reason": ("reason", "Reason", "str"),
    "records_inserted": ("records_inserted", "RecordsInserted", "int"),
    "records_returned": ("records_returned", "RecordsReturned", "int"),
    "records_updated": ("records_updated", "RecordsUpdated", "int"),
    "sequence": ("s", "Sequence", "int"),
    "sow_deleted": ("records_deleted", "SowDelete", "int"),
    "sow_key": ("k", "SowKey", "str"),
    "sow_keys": ("sow_keys", "SowKeys", "str"),
    "status": ("status", "Status", "str"),
    "sub_id": ("sub_id", "SubscriptionId", "str"),
    "sub_ids": ("sids", "SubscriptionIds", "str"),
    "timeout_interval": ("timeout_interval", "TimeoutInterval", "str"),
    "timestamp": ("ts", "Timestamp", "str"),
    "top_n": ("top_n", "TopNRecordsReturned", "int"),
    "topic": ("t", "Topic", "str"),
    "topic_matches": ("topic_matches", "TopicMatches", "int"),
    "user_id": ("user_id", "UserId", "str"),
    "version": ("version", "Version", "str"),
}
"""Each official header field: its wire key, its camelCase name, and its value kind."""

_SETTER_ALIASES = {"records_deleted": "sow_deleted"}


class MessageCommand:
    """``Message.Command``: the command names and their numeric values (official)."""

    Ack = "ack"
    AckEnum = 65536
    DeltaPublish = "delta_publish"
    DeltaPublishEnum = 64
    DeltaSubscribe = "delta_subscribe"
    DeltaSubscribeEnum = 512
    GroupBegin = "group_begin"
    GroupBeginEnum = 8192
    GroupEnd = "group_end"
    GroupEndEnum = 16384
    Heartbeat = "heartbeat"
    HeartbeatEnum = 16
    Logon = "logon"
    LogonEnum = 128
    OOF = "oof"
    OOFEnum = 32768
    Publish = "publish"
    PublishEnum = 1
    SOW = "sow"
    SOWAndDeltaSubscribe = "sow_and_delta_subscribe"
    SOWAndDeltaSubscribeEnum = 1024
    SOWAndSubscribe = "sow_and_subscribe"
    SOWAndSubscribeEnum = 256
    SOWDelete = "sow_delete"
    SOWDeleteEnum = 32
    SOWEnum = 8
    StartTimer = "start_timer"
    StartTimerEnum = 2048
    StopTimer = "stop_timer"
    StopTimerEnum = 4096
    Subscribe = "subscribe"
    SubscribeEnum = 2
    Unknown = ""
    UnknownEnum = 0
    Unsubscribe = "unsubscribe"
    UnsubscribeEnum = 4


_FLAGS = {
    "OOF": "oof",
    "bookmark_not_found_epoch": "bookmark_not_found=epoch",
    "bookmark_not_found_fail": "bookmark_not_found=fail",
    "bookmark_not_found_now": "bookmark_not_found=now",
    "cancel": "cancel",
    "fully_durable": "fully_durable",
    "live": "live",
    "no_empties": "no_empties",
    "no_sowkey": "no_sowkey",
    "pause": "pause",
    "replace": "replace",
    "resume": "resume",
    "send_keys": "send_keys",
    "timestamp": "timestamp",
}
_VALUED = {
    "bookmark_not_found": "bookmark_not_found",
    "conflation": "conflation",
    "conflation_key": "conflation_key",
    "grouping": "grouping",
    "max_backlog": "max_backlog",
    "projection": "projection",
    "rate": "rate",
    "rate_max_gap": "rate_max_gap",
    "skip_n": "skip_n",
    "top_n": "top_n",
}


class MessageOptionsBuilder:
    """The instance side of the official ``Message.Options``: chainable ``set_*`` calls.

    ``str(Message.Options().set_max_backlog(5).set_OOF())`` is ``"max_backlog=5,oof"``.
    """

    def __init__(self, options: str = "") -> None:
        self._items: list[str] = [options] if options else []

    def __str__(self) -> str:
        return ",".join(self._items)

    def __repr__(self) -> str:
        return str(self)

    def _add(self, item: str) -> MessageOptionsBuilder:
        self._items.append(item)
        return self

    def set_none(self) -> MessageOptionsBuilder:
        """Clear every option."""
        self._items.clear()
        return self


def _flag_setter(item: str) -> Callable[[MessageOptionsBuilder], MessageOptionsBuilder]:
    def setter(self: MessageOptionsBuilder) -> MessageOptionsBuilder:
        return self._add(item)

    setter.__doc__ = f"Add ``{item}``."
    return setter


def _valued_setter(name: str) -> Callable[[MessageOptionsBuilder, Any], MessageOptionsBuilder]:
    def setter(self: MessageOptionsBuilder, value: Any) -> MessageOptionsBuilder:
        if isinstance(value, (list, tuple)):
            value = "[" + ",".join(str(v) for v in value) + "]"
        return self._add(f"{name}={value}")

    setter.__doc__ = f"Add ``{name}=<value>``."
    return setter


for _name, _item in _FLAGS.items():
    setattr(MessageOptionsBuilder, f"set_{_name}", _flag_setter(_item))
for _name, _key in _VALUED.items():
    setattr(MessageOptionsBuilder, f"set_{_name}", _valued_setter(_key))


def _getter(name: str, key: str, kind: str) -> Callable[[Any], Any]:
    if name == "command":

        def get_command(self: Any) -> Any:
            return self.command

        return get_command

    def get(self: Any) -> Any:
        return self._int(key) if kind == "int" else self._str(key)

    get.__name__ = f"get_{name}"
    get.__doc__ = f'The ``{key}`` header field (``""`` when unset on a built message).'
    return get


def _setter(name: str, key: str) -> Callable[[Any, Any], Any]:
    def set_(self: Any, value: Any) -> Any:
        if key == "c" and value == "publish":
            value = "p"
        return self._set(key, value)

    set_.__name__ = f"set_{name}"
    set_.__doc__ = f'Set the ``{key}`` header field (``None`` or ``""`` removes it).'
    return set_


def install_official_api(message_cls: type, options_cls: type, ack_type: Any) -> None:
    """Add the official spellings to ``message_cls`` (called once, by ``message.py``)."""
    for name, (key, camel, kind) in FIELDS.items():
        getter = getattr(message_cls, f"get_{name}", None) or _getter(name, key, kind)
        setter = _setter(name, key)
        if not hasattr(message_cls, f"get_{name}"):
            setattr(message_cls, f"get_{name}", getter)
        setattr(message_cls, f"set_{name}", setter)
        setattr(message_cls, f"get{camel}", getter)
        setattr(message_cls, f"set{camel}", setter)
        if not hasattr(message_cls, name):
            setattr(message_cls, name, property(getter, setter, doc=getter.__doc__))
    message_cls.getData = message_cls.get_data  # type: ignore[attr-defined]
    message_cls.setData = message_cls.set_data  # type: ignore[attr-defined]
    message_cls.get_bookmark_seq_no = lambda self: 0  # type: ignore[attr-defined]
    message_cls.get_bookmark_seq_no.__doc__ = (  # type: ignore[attr-defined]
        "Always 0: the official client's bookmark store slot number; ours keeps none."
    )
    for old, new in _SETTER_ALIASES.items():
        setattr(message_cls, f"get_{old}", getattr(message_cls, f"get_{new}"))

    class Options(options_cls, MessageOptionsBuilder):  # type: ignore[misc]
        """``Message.Options``: the option constants and builders, and the official
        instance builder (``Message.Options().set_OOF()``)."""

        def __init__(self, options: str = "") -> None:
            MessageOptionsBuilder.__init__(self, options)

    setattr(Options, "None", "")  # "None" is a keyword: only setattr can make it
    Options.__qualname__ = "Message.Options"
    message_cls.Options = Options  # type: ignore[attr-defined]
    message_cls.Command = MessageCommand  # type: ignore[attr-defined]
    message_cls.AckType = ack_type  # type: ignore[attr-defined]
    for name, value in (
        ("None_", "none"),
        ("Received", "received"),
        ("Parsed", "parsed"),
        ("Processed", "processed"),
        ("Persisted", "persisted"),
        ("Completed", "completed"),
        ("Stats", "stats"),
    ):
        setattr(ack_type, name, value)
        setattr(ack_type, f"{name.rstrip('_')}Enum", int(getattr(ack_type, value.upper())))
