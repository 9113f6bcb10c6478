"""The proxied-transfer actions of replicated queues (the AMPS configuration guide's "Manage
Queue Transfers")::

    <Actions>
      <Action>
        <On>
          <Module>amps-action-on-schedule</Module>
          <Options><Every>17:30</Every></Options>
        </On>
        <Do>
          <Module>amps-action-do-enable-proxied-transfer</Module>
          <Options><Topic>work</Topic><MessageType>json</MessageType></Options>
        </Do>
      </Action>
    </Actions>

``amps-action-do-enable-proxied-transfer`` and ``amps-action-do-disable-proxied-transfer``
switch proxied transfer (``queues.replicated``) of the queue ``Topic`` (``MessageType``) on or
off, as the admin actions ``/amps/administrator/queues/<queue>/enable_proxied_transfer`` and
``disable_proxied_transfer`` do. 60East recommends the admin interface and warns against
enabling it automatically (duplicates when the owner is in fact alive). The only trigger
the reference server has for them is ``amps-action-on-schedule`` (``Every``: a duration, a
time of day or a day and a time, as for the journal actions).

Anything else is refused at start-up with a :class:`ConfigError` that names it: another
trigger, a missing ``Topic``/``MessageType``, a topic that is not a replicated queue of this
instance, an instance that does not replicate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..config import SCHEDULE_MODULE, ConfigError, ServerConfig
from ..journal_actions import Schedule, parse_every

__all__ = ["DISABLE_MODULE", "ENABLE_MODULE", "ProxiedAction", "proxied_actions"]

ENABLE_MODULE: Final = "amps-action-do-enable-proxied-transfer"
DISABLE_MODULE: Final = "amps-action-do-disable-proxied-transfer"


@dataclass(frozen=True, slots=True)
class ProxiedAction:
    """One configured proxied-transfer action."""

    enable: bool
    queue: str
    message_type: str
    schedule: Schedule


def proxied_actions(config: ServerConfig) -> tuple[ProxiedAction, ...]:
    """The proxied-transfer actions of ``config``.

    Raises:
        ConfigError: one that cannot run as configured (see the module docstring).
    """
    found: list[ProxiedAction] = []
    for position, action in enumerate(config.actions, 1):
        steps = [s for s in action.do if s.module in (ENABLE_MODULE, DISABLE_MODULE)]
        if not steps:
            continue
        label = f"<Action> {position} ({steps[0].module})"
        if config.replication is None:
            raise ConfigError(
                f"{label}: proxied transfer needs <Replication> (no queue is replicated)"
            )
        if len(action.on) != 1 or action.on[0].module != SCHEDULE_MODULE:
            raise ConfigError(
                f"{label}: the reference server runs it only <On> {SCHEDULE_MODULE} (one <On>)"
            )
        every = action.on[0].options.get("Every")
        if every is None:
            raise ConfigError(f"{label}: {SCHEDULE_MODULE} requires <Every>")
        schedule = parse_every(every)
        for step in steps:
            topic = step.options.get("Topic")
            mt = step.options.get("MessageType")
            if not topic or not mt:
                raise ConfigError(f"{label}: <Do> {step.module} requires <Topic> and <MessageType>")
            if not any(
                q.name == topic and q.message_type == mt.lower() and q.kind != "LocalQueue"
                for q in config.queues
            ):
                raise ConfigError(
                    f"{label}: {topic!r} ({mt}) is not a replicated queue (<Queue> or "
                    "<GroupLocalQueue>) of this instance"
                )
            found.append(ProxiedAction(step.module == ENABLE_MODULE, topic, mt.lower(), schedule))
    return tuple(found)
