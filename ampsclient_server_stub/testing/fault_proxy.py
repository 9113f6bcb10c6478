"""A fault proxy in front of one server's listener: what ``amps_fault_proxy`` yields.

A :class:`~ampsclient_server_stub.testing.proxy.LoopbackProxy` (every fault it offers:
``cut()``, ``stall()``, ``latency()``, ``fragment()``, ``bandwidth()``, one-way
``partition()``...) that also knows the client URI leading through it::

    with FaultProxy(server.port("tcp")) as proxy:
        client.connect(proxy.uri())     # tcp://127.0.0.1:<proxy port>/amps/json
        proxy.cut()                     # both sides see a reset
"""

from __future__ import annotations

from typing import Literal

from .proxy import LoopbackProxy

__all__ = ["FaultProxy"]


class FaultProxy(LoopbackProxy):
    """A :class:`LoopbackProxy` to ``127.0.0.1:target_port``, with :meth:`uri`.

    Args:
        target_port: the server listener's port (its ``tcp`` one, or its ``ws`` one with
            ``kind="ws"``: the proxy moves bytes and knows no protocol).
        kind: the URI scheme of :meth:`uri`.
        message_type: the default message type of :meth:`uri`.
        record: keep a copy of what clients send (``upstream``).
        seed: the seed of the proxy's random draws (jitter, fragment sizes); ``None``: a
            fresh one.
    """

    def __init__(
        self,
        target_port: int,
        *,
        kind: Literal["tcp", "ws"] = "tcp",
        message_type: str = "json",
        record: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__("127.0.0.1", target_port, record=record, seed=seed)
        self.kind = kind
        """The URI scheme of :meth:`uri`."""
        self.message_type = message_type
        """The default message type of :meth:`uri`."""

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def uri(self, message_type: str | None = None) -> str:
        """``tcp://127.0.0.1:<proxy port>/amps/<message type>``: connect here to go through
        the proxy (once started)."""
        if not self.port:
            raise RuntimeError("the proxy is not started")
        return f"{self.kind}://127.0.0.1:{self.port}/amps/{message_type or self.message_type}"
