"""SOW snapshot reads (``command=sow``): the current state of a SOW topic, or its state as of a
time for a topic that keeps history (AMPS user guide, "State of the World" and "Historical SOW
Query"). Nothing here imports pyspark."""

from __future__ import annotations

from collections.abc import Generator
from typing import Final

from ..command import Command
from ..exceptions import TimeoutError, error_for_reason
from ..protocol.acks import AckType
from ..protocol.message import Message
from ..sync import Client
from ._core import WAIT_MS, AMPSSparkError

__all__ = ["SOW_BATCH_SIZE", "sow_records"]

SOW_BATCH_SIZE: Final = 1_000
"""Records per ``sow`` batch frame the server sends (the ``bs`` header)."""


def sow_records(
    client: Client,
    topic: str,
    filter: str | None,
    *,
    top_n: int | None = None,
    order_by: str | None = None,
    as_of: str | None = None,
    timestamps: bool = True,
    wait_ms: int = WAIT_MS,
) -> Generator[Message, None, None]:
    """The records of a ``sow`` query, up to the server's ``completed`` ack.

    Args:
        as_of: an AMPS timestamp: a historical query (the SOW as it was then).
        timestamps: ask for each record's server time (the ``timestamp`` option).

    Raises:
        CommandError: the server refused the query (its reason, e.g. ``invalid topic`` for a
            topic without a SOW, ``bad filter``, or a historical query the topic cannot answer).
        DisconnectedError: the connection dropped before the query completed.
        TimeoutError: the server sent nothing for ``wait_ms``.
    """
    cmd = (
        Command("sow")
        .set_topic(topic)
        .set_filter(filter)
        .set_top_n(top_n)
        .set_order_by(order_by)
        .set_bookmark(as_of)
        .set_batch_size(SOW_BATCH_SIZE)
        .add_ack_type("completed")
        .set_timeout(wait_ms)
    )
    if timestamps:
        cmd.set_options("timestamp")
    what = f"the sow query of {topic!r}" + (f" as of {as_of}" if as_of else "")
    try:
        stream = client.execute(cmd)
    except TimeoutError as exc:
        raise TimeoutError(f"no processed ack within {wait_ms} ms for {what}") from exc
    try:
        for message in stream.timeout(wait_ms):
            if message is None:
                raise TimeoutError(f"nothing arrived within {wait_ms} ms during {what}")
            if message.command == "sow":
                yield message
            elif message.command == "ack":
                if message.status == "failure":
                    raise error_for_reason(message.reason, ack=message)
                if message.ack_type & AckType.COMPLETED:
                    return
        raise AMPSSparkError(f"{what} ended before it completed")
    finally:
        stream.close()
