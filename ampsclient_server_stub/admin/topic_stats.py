"""The ``views`` and ``conflated_topics`` parts of the statistics tree (no I/O).

``/amps/instance/views/<id>`` follows the AMPS monitoring guide's "views (instance
statistics)" (https://docs.crankuptheamps.com/amps-monitoring-guide/instance-interface/views):
``topic``, ``message_type``, ``underlying_topic``, ``projection``, ``grouping``,
``conflation``, ``conflation_ratio`` and ``queue_depth`` (updates not yet applied). Views over
SOW topics and views over queues are both listed; a view's SOW figures stay under
``/amps/instance/sow/<view>``, as the guide places them.

``/amps/instance/conflated_topics/<id>``: per conflated topic, ``topic``, ``message_type``,
``underlying_topic``, ``interval`` (seconds), ``filter``, ``records``, ``intervals`` (copies
run), ``updates_in`` (writes to the underlying topic since start), ``updates_out`` (records
copied) and ``conflation_ratio`` (``updates_in`` / ``updates_out``, a running average as the
guide's "Statistics Types" describes it for conflated topics; 0.0 before any copy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..queues.plug import queue_engine
from .tree import Entries

if TYPE_CHECKING:
    from ..engine.broker import Broker

__all__ = ["conflated_topics", "views"]


def _field_text(path: str, expression: str, aggregate: str | None) -> str:
    expr = f"{aggregate}({expression})" if aggregate else expression
    return expr if expr == path else f"{expr} AS {path}"


def views(broker: Broker | None) -> Entries:
    """``/amps/instance/views``: every view, over SOW topics and over queues."""
    out = Entries()
    if broker is None:
        return out
    for name, view in broker.views.views.items():
        cfg = view.config
        out[name] = {
            "topic": name,
            "message_type": cfg.message_type,
            "underlying_topic": " JOIN ".join(cfg.topics),
            "projection": [_field_text(f.path, f.expression, f.aggregate) for f in cfg.projection],
            "grouping": list(cfg.grouping),
            "conflation": cfg.conflation,  # (as configured: updates are all processed)
            "conflation_ratio": 0.0,
            "queue_depth": 0,  # a view over SOW topics is updated with the publish itself
            "records": len(view.sow),
            "hash_indexes": view.sow.index_statistics(),
        }
    engine = queue_engine(broker)
    queue_views = engine.views if engine is not None else None
    if queue_views is not None:
        for (mt, name), qcfg, records, pending in queue_views.summaries():
            out[name] = {
                "topic": name,
                "message_type": qcfg.message_type,
                "underlying_topic": qcfg.underlying,
                "projection": [
                    _field_text(f.path, f.expression, f.aggregate) for f in qcfg.projection
                ],
                "grouping": list(qcfg.grouping),
                "conflation": "none",
                "conflation_ratio": 0.0,
                "queue_depth": pending,
                "records": records,
                "hash_indexes": queue_views.index_statistics(mt, name),
            }
    return out


def conflated_topics(broker: Broker | None) -> Entries:
    """``/amps/instance/conflated_topics``: every conflated topic and its conflation."""
    out = Entries()
    if broker is None:
        return out
    for topic in broker.conflated.topics:
        cfg = topic.config
        updates_in = topic.updates_in()
        out[topic.name] = {
            "topic": topic.name,
            "message_type": cfg.message_type,
            "underlying_topic": cfg.underlying,
            "interval": cfg.interval,
            "filter": cfg.filter or "",
            "records": len(topic.sow),
            "hash_indexes": topic.sow.index_statistics(),
            "intervals": topic.intervals,
            "updates_in": updates_in,
            "updates_out": topic.copied,
            "conflation_ratio": round(updates_in / topic.copied, 3) if topic.copied else 0.0,
        }
    return out
