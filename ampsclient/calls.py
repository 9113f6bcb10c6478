"""The official client's two call forms of a convenience command, bound to one shape.

The official AMPS Python client documents each convenience command (``subscribe``, ``sow``,
``sow_delete``...) with two signatures, the second being the first without its handler::

    client.subscribe(on_message, topic, filter=None, options=None, timeout=0, sub_id=None)
    client.subscribe(topic, filter=None, options=None, timeout=0, sub_id=None)

The first returns the command id and calls ``on_message`` for each message; the second
returns a :class:`~ampsclient.stream.MessageStream`. Our methods declare both forms with
``@overload`` (that is what mypy and IDEs see); their one implementation takes the handler
form's parameters, each defaulting to :data:`UNSET`, and :func:`bind` reads the call: when
the first argument is not a handler, the arguments given by position move one place to the
right (the ones given by keyword keep their names).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeAlias

from .protocol.message import Message

__all__ = [
    "BOOKMARK_SUBSCRIBE",
    "SOW",
    "SOW_AND_DELTA_SUBSCRIBE",
    "SOW_AND_SUBSCRIBE",
    "SOW_DELETE",
    "SOW_DELETE_BY_DATA",
    "SOW_DELETE_BY_KEYS",
    "SUBSCRIBE",
    "UNSET",
    "Handler",
    "OptionsArg",
    "Unset",
    "bind",
    "join_options",
]

Handler: TypeAlias = Callable[[Message], Any]
"""A message handler."""

OptionsArg: TypeAlias = str | Iterable[str] | None
"""Command options: a comma-separated string (as the official client takes) or the items."""


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "<unset>"


UNSET: Final = Unset.UNSET
"""The default of an implementation's parameters: "not given" (``None`` is a value)."""

# The parameters after ``on_message``, in the official positional order.
SUBSCRIBE: Final = ("topic", "filter", "options", "timeout", "sub_id")
BOOKMARK_SUBSCRIBE: Final = ("topic", "bookmark", "filter", "sub_id", "options", "timeout")
SOW: Final = (
    "topic",
    "filter",
    "batch_size",
    "timeout",
    "top_n",
    "order_by",
    "bookmark",
    "options",
)
SOW_AND_SUBSCRIBE: Final = (
    "topic",
    "filter",
    "batch_size",
    "oof_enabled",
    "timeout",
    "top_n",
    "order_by",
    "bookmark",
    "options",
)
SOW_AND_DELTA_SUBSCRIBE: Final = (
    "topic",
    "filter",
    "batch_size",
    "oof_enabled",
    "send_empties",
    "timeout",
    "top_n",
    "order_by",
    "options",
)
SOW_DELETE: Final = ("topic", "filter", "timeout")
SOW_DELETE_BY_KEYS: Final = ("topic", "keys", "timeout")
SOW_DELETE_BY_DATA: Final = ("topic", "data", "timeout")


def bind(
    method: str,
    names: tuple[str, ...],
    on_message: object,
    values: tuple[object, ...],
    keywords: Mapping[str, object] | None = None,
    *,
    required: tuple[str, ...] = ("topic",),
) -> tuple[Handler | None, dict[str, Any]]:
    """Read one call of ``method`` in either official form.

    Args:
        method: the method's name, for error messages.
        names: the parameters after ``on_message``, in order (one of the tables above).
        on_message: the implementation's first parameter (a handler, ``None``, the topic of
            the handler-less form, or :data:`UNSET`).
        values: the implementation's next parameters, in the order of ``names``.
        keywords: keyword-only extras (left out when :data:`UNSET`).
        required: parameters that must be given.

    Returns:
        The handler (``None`` for the stream form) and the given parameters by name.

    Raises:
        TypeError: a call that fits neither form, as Python raises for a bad call.
    """
    slots = (on_message, *values)
    handler: Handler | None = None
    params: dict[str, Any] = {}
    if on_message is UNSET or on_message is None or callable(on_message):
        if callable(on_message):
            handler = on_message
        params = {n: v for n, v in zip(names, values, strict=True) if v is not UNSET}
    else:
        # the handler-less form: what came by position (the longest given prefix of the
        # slots) shifts right by one; a slot given after the first gap came by keyword, and
        # keeps its name (it cannot collide: the shifted ones end before the gap's name)
        given = 0
        while given < len(slots) and slots[given] is not UNSET:
            given += 1
        if given > len(names):
            raise TypeError(
                f"{method}() takes at most {len(names)} positional arguments without a handler"
            )
        params = dict(zip(names, slots[:given], strict=False))
        for name, value in zip(names[given:], values[given:], strict=True):
            if value is not UNSET:
                params[name] = value
    for name, value in (keywords or {}).items():
        if value is not UNSET:
            params[name] = value
    for name in required:
        if params.get(name) is None or params.get(name) == "":
            raise TypeError(f"{method}() missing required argument: {name!r}")
    return handler, params


def join_options(options: OptionsArg) -> str | None:
    """A comma-separated option string (``None`` when there are none)."""
    if options is None:
        return None
    if isinstance(options, str):
        return options or None
    return ",".join(str(o) for o in options) or None
