"""AMPS message queues in the reference server (``<SOW>/<Queue>``, ``<LocalQueue>``,
``<GroupLocalQueue>``).

* :mod:`.config`: the queue elements of the configuration, validated at start-up;
* :mod:`.model`: one queue's state (messages, leases, subscriptions, fairness);
* :mod:`.engine`: the queues of one broker: intake from the underlying topics, queue
  subscriptions, acknowledgements, lease timers, durability (journal + ``queues.ack``).

This package's ``__init__`` imports nothing, so the configuration layer can import
:mod:`.config` without pulling the engine in.
"""
