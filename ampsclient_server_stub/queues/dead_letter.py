"""Dead letters: the ``amps-action-on-sow-expire-message`` + ``amps-action-do-publish-message``
actions, the part of the AMPS actions framework that queues need.

An ``<Action>`` whose ``<On>`` is ``amps-action-on-sow-expire-message`` runs once for each
message that expires from the queue it names (AMPS presents queue expirations to this module
as SOW expirations). Its ``<Do>`` steps, each ``amps-action-do-publish-message``, publish a
message built from the ``Data`` template, in which ``{{AMPS_TOPIC}}``, ``{{AMPS_DATA}}``,
``{{AMPS_DATA_LENGTH}}``, ``{{AMPS_REASON}}`` and ``{{AMPS_CORRELATION_ID}}`` are replaced by
the expired message's values (the ``Topic`` option may use them too). The publish is an
internal one: journaled and delivered as if an external publisher had sent it.

The reasons (``AMPS_REASON``, and the ``Reason`` option that selects them): ``time_limit``
(``Expiration`` passed), ``forced_expire`` (acknowledged with ``expire``), ``max_cancels``,
``max_deliveries``.

Refused at start-up, by name: a ``Topic`` that is not a queue of that ``MessageType`` (the
reference server has no other SOW expirations to report to this module), a regex topic, a
missing required option, an unknown reason, an unknown context variable, and any other
option (``Delta`` and ``UpdateOnly``: delta publishes from actions are not implemented);
an expire trigger with a ``<Do>`` other than the publish module, or a publish without this
trigger. The action's publish has no user and no entitlement check, as in AMPS; it is
published as the internal client ``<instance>/actions`` (its bookmarks' publisher), and a
publish that fails is logged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ampsclient.protocol.bookmarks import publisher_id_for

from ..config_model import ActionConfig, ActionStep, ServerConfig
from ..config_values import ConfigError
from ..engine.ingest import ClientPublish, Incoming
from ..engine.state import ClientState, Connection

__all__ = [
    "CONTEXT_VARIABLES",
    "DO_PUBLISH_MODULE",
    "ON_SOW_EXPIRE_MODULE",
    "REASONS",
    "ActionPublisher",
    "DeadLetters",
    "ExpireAction",
    "PublishStep",
    "expire_actions",
]

logger = logging.getLogger(__name__)

ON_SOW_EXPIRE_MODULE: Final = "amps-action-on-sow-expire-message"
DO_PUBLISH_MODULE: Final = "amps-action-do-publish-message"
REASONS: Final = ("time_limit", "forced_expire", "max_cancels", "max_deliveries")
"""The expiration reasons AMPS reports (``AMPS_REASON``)."""
CONTEXT_VARIABLES: Final = (
    "AMPS_TOPIC",
    "AMPS_DATA",
    "AMPS_DATA_LENGTH",
    "AMPS_REASON",
    "AMPS_CORRELATION_ID",
)
"""The variables ``amps-action-on-sow-expire-message`` adds to the action's context."""

_VARIABLE: Final = re.compile(r"\{\{\s*([A-Za-z0-9_]*)\s*\}\}")
_ON_OPTIONS: Final = ("Topic", "MessageType", "Reason")
_DO_OPTIONS: Final = ("Topic", "MessageType", "Data")

Publish = Callable[[str, str, bytes], None]
"""``publish(message_type, topic, data)``: an internal publish (the broker's)."""


@dataclass(frozen=True, slots=True)
class PublishStep:
    """One ``amps-action-do-publish-message``: templates of its topic and data."""

    topic: str
    message_type: str
    data: str


@dataclass(frozen=True, slots=True)
class ExpireAction:
    """An action run when a message expires from queue ``topic`` (``reasons``: the reasons it
    reacts to, ``None``: all)."""

    topic: str
    message_type: str
    reasons: frozenset[str] | None
    publishes: tuple[PublishStep, ...]


def expire_actions(config: ServerConfig) -> tuple[ExpireAction, ...]:
    """The dead-letter actions of ``config``.

    Raises:
        ConfigError: an action using either module that the reference server would not run
            as AMPS documents it (see the module docstring).
    """
    queues = {(q.message_type, q.name) for q in config.queues}
    out: list[ExpireAction] = []
    for position, action in enumerate(config.actions, 1):
        where = f"<Actions> action #{position}"
        expiring = [s for s in action.on if s.module == ON_SOW_EXPIRE_MODULE]
        publishing = [s for s in action.do if s.module == DO_PUBLISH_MODULE]
        if not expiring and not publishing:
            continue
        _check_shape(action, where, expiring, publishing)
        on = expiring[0]
        topic, mt = _trigger(on, where, queues)
        reasons = _reasons(on, where)
        steps = tuple(_publish_step(s, where) for s in action.do)
        out.append(ExpireAction(topic=topic, message_type=mt, reasons=reasons, publishes=steps))
    return tuple(out)


def _check_shape(
    action: ActionConfig, where: str, expiring: list[ActionStep], publishing: list[ActionStep]
) -> None:
    if len(action.on) != 1 or len(expiring) != 1:
        raise ConfigError(
            f"{where}: {DO_PUBLISH_MODULE} runs on exactly one <On> {ON_SOW_EXPIRE_MODULE} in "
            f"the reference server (found: {', '.join(s.module for s in action.on) or 'none'})"
        )
    if not action.do or len(publishing) != len(action.do):
        others = [s.module for s in action.do if s.module != DO_PUBLISH_MODULE]
        raise ConfigError(
            f"{where}: <On> {ON_SOW_EXPIRE_MODULE} runs only {DO_PUBLISH_MODULE} steps in the "
            f"reference server (found: {', '.join(others) or 'no <Do>'})"
        )


def _options(step: ActionStep, where: str, known: tuple[str, ...]) -> Mapping[str, str]:
    for name in step.options:
        if name not in known:
            raise ConfigError(
                f"{where}: {step.module} option <{name}> is not supported "
                f"(accepted: {', '.join(known)})"
            )
    return step.options


def _required(step: ActionStep, where: str, options: Mapping[str, str], name: str) -> str:
    value = options.get(name, "").strip()
    if not value:
        raise ConfigError(f"{where}: {step.module} requires the <{name}> option")
    return value


def _trigger(step: ActionStep, where: str, queues: set[tuple[str, str]]) -> tuple[str, str]:
    options = _options(step, where, _ON_OPTIONS)
    topic = _required(step, where, options, "Topic")
    mt = _required(step, where, options, "MessageType")
    if (mt, topic) not in queues:
        raise ConfigError(
            f"{where}: {ON_SOW_EXPIRE_MODULE} <Topic> {topic!r} ({mt}) is not a queue; the "
            "reference server reports expirations of queue messages only (no regex topics)"
        )
    return topic, mt


def _reasons(step: ActionStep, where: str) -> frozenset[str] | None:
    text = step.options.get("Reason")
    if text is None:
        return None
    reasons = frozenset(r.strip() for r in text.split(",") if r.strip())
    unknown = sorted(reasons.difference(REASONS))
    if not reasons or unknown:
        raise ConfigError(
            f"{where}: {ON_SOW_EXPIRE_MODULE} <Reason> {text!r}: unknown reason(s) "
            f"{', '.join(unknown) or '(empty)'} (known: {', '.join(REASONS)})"
        )
    return reasons


def _publish_step(step: ActionStep, where: str) -> PublishStep:
    options = _options(step, where, _DO_OPTIONS)
    topic = _required(step, where, options, "Topic")
    mt = _required(step, where, options, "MessageType")
    if "Data" not in options:
        raise ConfigError(f"{where}: {DO_PUBLISH_MODULE} requires the <Data> option")
    data = options["Data"]
    for text in (topic, data):
        for name in _VARIABLE.findall(text):
            if name not in CONTEXT_VARIABLES:
                raise ConfigError(
                    f"{where}: {DO_PUBLISH_MODULE}: context variable {{{{{name}}}}} is not set "
                    f"by {ON_SOW_EXPIRE_MODULE} (it sets {', '.join(CONTEXT_VARIABLES)})"
                )
    return PublishStep(topic=topic, message_type=mt, data=data)


def render(template: str, context: Mapping[str, bytes]) -> bytes:
    """``template`` with every ``{{VARIABLE}}`` replaced by its bytes in ``context``."""
    out: list[bytes] = []
    last = 0
    for match in _VARIABLE.finditer(template):
        out.append(template[last : match.start()].encode())
        out.append(context[match.group(1)])
        last = match.end()
    out.append(template[last:].encode())
    return b"".join(out)


class DeadLetters:
    """Runs the dead-letter actions when queue messages expire.

    Args:
        actions: what to run (:func:`expire_actions`).
        publish: the internal publish.
    """

    def __init__(self, actions: Iterable[ExpireAction], *, publish: Publish) -> None:
        self._by_queue: dict[tuple[str, str], list[ExpireAction]] = {}
        for action in actions:
            self._by_queue.setdefault((action.message_type, action.topic), []).append(action)
        self._publish = publish
        self.published = 0
        """Messages the actions published."""

    def watches(self, message_type: str, topic: str) -> bool:
        """An action reacts to expirations from this queue."""
        return (message_type, topic) in self._by_queue

    def expired(
        self,
        message_type: str,
        topic: str,
        data: bytes,
        reason: str,
        correlation_id: str | None,
    ) -> int:
        """A message expired from queue ``topic`` for ``reason``: run the actions that react
        to it; the number of messages published. A publish that fails is logged (the
        expiration itself stands, as in AMPS)."""
        actions = self._by_queue.get((message_type, topic))
        if not actions:
            return 0
        context = {
            "AMPS_TOPIC": topic.encode(),
            "AMPS_DATA": data,
            "AMPS_DATA_LENGTH": str(len(data)).encode(),
            "AMPS_REASON": reason.encode(),
            "AMPS_CORRELATION_ID": (correlation_id or "").encode(),
        }
        count = 0
        for action in actions:
            if action.reasons is not None and reason not in action.reasons:
                continue
            for step in action.publishes:
                target = render(step.topic, context).decode()
                try:
                    self._publish(step.message_type, target, render(step.data, context))
                except Exception:
                    logger.exception(
                        "%s: publish to %r after an expiration from %r failed",
                        DO_PUBLISH_MODULE,
                        target,
                        topic,
                    )
                    continue
                count += 1
        self.published += count
        return count


class _Unrestricted:
    """The security policy of the actions' publisher: no authentication, no entitlements
    (the guide: the action's publish has no user credentials, entitlements are not applied)."""

    auth: None = None
    entitlements: None = None


class _Silent:
    """The session of the actions' internal publisher: nothing is ever sent to it."""

    policy: Final = _Unrestricted()
    """Read by the security guard instead of the instance's default policy."""

    def send(self, payload: bytes) -> None:  # pragma: no cover - a publisher only
        return None

    def send_many(self, payloads: list[bytes]) -> None:  # pragma: no cover
        return None

    def backlog(self) -> int:  # pragma: no cover
        return 0

    def disconnect(self, reason: str) -> None:  # pragma: no cover
        logger.warning("actions publisher: disconnect %s ignored", reason)

    def start_heartbeat(self, interval: float) -> None:  # pragma: no cover
        return None


class ActionPublisher:
    """The internal AMPS client the actions publish through: a logged-on connection of
    client name ``name`` (no user, so no entitlement check of its own) whose publishes take
    the broker's ingest path (journaled, SOW, delivered) like an external publisher's.

    Args:
        ingest: the broker's ingest.
        name: the client name (its publisher id is in the bookmarks).
        last_sequence: ``last_sequence(publisher_id)`` of the journal (a restart goes on
            from there).
    """

    def __init__(
        self,
        ingest: Callable[[Incoming], object],
        *,
        name: str,
        last_sequence: Callable[[int], int] | None,
    ) -> None:
        self._ingest = ingest
        self._name = name
        last = 0 if last_sequence is None else last_sequence(publisher_id_for(name))
        self._state = ClientState(name, last)
        self._conns: dict[str, Connection] = {}

    def __call__(self, message_type: str, topic: str, data: bytes) -> None:
        """Publish ``data`` to ``topic`` as ``message_type``."""
        conn = self._conns.get(message_type)
        if conn is None:
            conn = Connection(
                -1_000_000 - len(self._conns),
                _Silent(),
                message_type=message_type,
                transport="action",
                peer=self._name,
            )
            conn.logged_on = True
            conn.client_name = self._name
            conn.state = self._state
            self._conns[message_type] = conn
        self._ingest(ClientPublish(conn, topic, None, data, 0))
