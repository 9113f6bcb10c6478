"""The options each ``<Actions>`` module reads: any other is refused by name.

An ``<Options>`` child that belongs to another module (``<Topic>`` on a journal step,
``<Reason>`` on a schedule trigger) would otherwise be accepted and never read (issue 28).
:func:`check_action_options` refuses it at start-up, naming the option and the module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .config_model import (
    DOWNGRADE_REPLICATION_MODULE,
    SCHEDULE_MODULE,
    UPGRADE_REPLICATION_MODULE,
    ActionConfig,
)
from .config_values import ConfigError

__all__ = ["MODULE_OPTIONS", "check_action_options"]

MODULE_OPTIONS: Final[dict[str, tuple[str, ...]]] = {
    SCHEDULE_MODULE: ("Every", "Name"),
    "amps-action-do-archive-journal": ("Age",),
    "amps-action-do-compress-journal": ("Age",),
    "amps-action-do-remove-journal": ("Age",),
    DOWNGRADE_REPLICATION_MODULE: ("Age",),
    UPGRADE_REPLICATION_MODULE: ("Age",),
    "amps-action-do-enable-proxied-transfer": ("Topic", "MessageType"),
    "amps-action-do-disable-proxied-transfer": ("Topic", "MessageType"),
}
"""Module -> the ``<Options>`` children it reads.  ``amps-action-on-sow-expire-message`` and
``amps-action-do-publish-message`` are not here: :mod:`.queues.dead_letter` checks theirs."""


def check_action_options(actions: Iterable[ActionConfig]) -> None:
    """Refuse an option its module does not read.

    Raises:
        ConfigError: naming the action, the step, the option and the module.
    """
    for position, action in enumerate(actions, 1):
        for tag, steps in (("On", action.on), ("Do", action.do)):
            for step in steps:
                known = MODULE_OPTIONS.get(step.module)
                if known is None:
                    continue  # the section reader refuses an unknown module
                for option in step.options:
                    if option.split("/", 1)[0] not in known:
                        raise ConfigError(
                            f"<Actions> <Action> #{position}: <{tag}> option <{option}> is not "
                            f"an option of module {step.module} (it reads "
                            f"<{'>, <'.join(known)}>)"
                        )
