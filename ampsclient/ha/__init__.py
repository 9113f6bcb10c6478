"""High availability: server choosers, reconnect delay strategies, the HA client."""

from .chooser import DefaultServerChooser, ServerChooser
from .reconnect import (
    ExponentialDelayStrategy,
    FixedDelayStrategy,
    ReconnectDelayStrategy,
    RetryLimitError,
)
from .subscriptions import Subscription, SubscriptionManager

__all__ = [
    "DefaultServerChooser",
    "ExponentialDelayStrategy",
    "FixedDelayStrategy",
    "ReconnectDelayStrategy",
    "RetryLimitError",
    "ServerChooser",
    "Subscription",
    "SubscriptionManager",
]
