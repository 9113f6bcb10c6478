"""Views over SOW topics (``views.config``): each view is an in-memory SOW topic of its own,
written by the server, that clients read like any SOW topic.

AMPS User Guide, "Understanding Views" (https://docs.crankuptheamps.com/amps-user-guide/views/
understanding-views): view topics are part of the State of the World, so ``sow``,
``subscribe``, ``sow_and_subscribe``, ``delta_subscribe``, ``top_n``, ``orderby`` and
out-of-focus (``oof``) tracking work on them as on any SOW topic; a view can be the underlying
topic of another view; publishing to a view is refused.

Every change of an underlying record (publish, delta publish, ``sow_delete``, expiration,
replication, journal recovery) reaches the view through :class:`~..engine.sow.SowWatcher` in
the same turn: the affected group(s) are updated (:class:`~.groups.GroupTable`), the view's
record is rewritten and delivered to its subscribers (``p``, a delta, or ``oof`` ``match`` when
it left a subscriber's filter), an emptied group is deleted (``oof`` ``deleted``). At start each
view is computed from its underlying topics' current records (a file-backed underlying SOW
persists; the view does not need to).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from ..engine.delivery import NO_PREVIOUS, Delivery
from ..engine.payload import encode
from ..engine.routing import RoutingIndex
from ..engine.sow import SowRecord, SowTopic
from ..engine.sow_service import SowService
from ..engine.wire import format_timestamp
from .config import SowViewConfig, qualify
from .groups import GroupTable, Touched
from .joins import JoinRows
from .view_sow import ViewSow

__all__ = ["SowView", "SowViews"]

logger = logging.getLogger(__name__)


class SowView:
    """One view: its groups, its join (if any) and its own SOW topic (the records clients read).

    Args:
        config: the definition.
        underlying: its underlying SOW topics, in ``config.topics`` order.
    """

    def __init__(self, config: SowViewConfig, underlying: Sequence[SowTopic]) -> None:
        self.config: Final = config
        self.underlying: Final = tuple(underlying)
        self.table, self.join = self._empty()
        self.sow: Final = ViewSow(
            config.name, message_type=config.message_type, hash_indexes=config.hash_indexes
        )
        """The view's records (keyed by their group)."""

    def _empty(self) -> tuple[GroupTable, JoinRows | None]:
        config = self.config
        topics, types = config.topics, config.types
        table = GroupTable(
            config.projection,
            config.grouping,
            filter_text=config.filter,
            key_domain=config.key_domain or config.name,
            rewrite=lambda text: qualify(text, topics, types),
        )
        if not config.joins:
            return table, None
        return table, JoinRows(config.joins, types, null_equivalency=config.join_null_equivalency)

    @property
    def name(self) -> str:
        return self.config.name

    def changed(self, side: int, key: str, doc: Any) -> Touched:
        """Record ``key`` of underlying topic ``side`` is now ``doc`` (``None``: gone): the
        groups this changed."""
        table = self.table
        if self.join is None:
            if doc is None:
                return table.drop(key)
            return table.put(key, doc)
        gone, now = self.join.change(side, key, doc)
        touched: Touched = {}
        for row in gone:
            touched |= table.drop(row)
        for row, row_doc in now.items():
            touched |= table.put(row, row_doc)
        return touched

    def rebuild(self) -> None:
        """Compute the groups from the underlying topics' current records."""
        self.table, self.join = self._empty()
        for side, under in enumerate(self.underlying):
            for key in list(under):
                doc = under.doc(key)
                if doc is not None:
                    self.changed(side, key, doc)


class _Link:
    """Tells one view of the changes of one of its underlying topics (a ``SowWatcher``)."""

    def __init__(self, views: SowViews, view: SowView, side: int) -> None:
        self._views = views
        self._view = view
        self._side = side

    def record_changed(self, sow: SowTopic, key: str, before: Any, after: Any) -> None:
        if before is None and after is None:
            return
        self._views.apply(self._view, self._view.changed(self._side, key, after))

    def records_reloaded(self, sow: SowTopic) -> None:
        self._views.recompute(self._view)


class SowViews:
    """The views over SOW topics of a broker, registered as read-only SOW topics.

    Args:
        configs: the definitions (their underlying topics are in ``sows``, or earlier views).
        sows: the broker's SOW topics.
        delivery: sends the views' changes.
        index: the subscriptions' routing index.
    """

    def __init__(
        self,
        configs: Sequence[SowViewConfig],
        *,
        sows: SowService,
        delivery: Delivery,
        index: RoutingIndex,
    ) -> None:
        self._delivery = delivery
        self._index = index
        self._stamp_at = -1
        self._stamp_text = ""
        self._unwritable: set[str] = set()  # views whose record could not be encoded (logged)
        self.views: dict[str, SowView] = {}
        for config in configs:
            underlying = []
            for topic, mt in zip(config.topics, config.types, strict=True):
                sow = sows.topic(topic, mt)
                if sow is None:  # the configuration reader checked it
                    raise ValueError(f"view {config.name!r}: no SOW topic {topic!r}")
                underlying.append(sow)
            view = SowView(config, underlying)
            view.rebuild()
            self._write(view, dict.fromkeys(view.table.groups))
            sows.add_read_only(
                view.sow,
                f"{config.name!r} is a view: publish to its underlying topic"
                + ("s " if len(config.topics) > 1 else " ")
                + ", ".join(repr(t) for t in config.topics),
            )
            for side, sow in enumerate(underlying):
                sow.watchers.append(_Link(self, view, side))
            self.views[config.name] = view
            logger.info("view %r: %d records at start", config.name, len(view.sow))

    def apply(self, view: SowView, touched: Touched) -> None:
        """Write the records of the groups in ``touched`` and deliver the changes."""
        if touched:
            self._write(view, touched)

    def recompute(self, view: SowView) -> None:
        """Recompute ``view`` from scratch (an underlying topic reloaded after a rollback)."""
        old: Touched = dict.fromkeys(view.table.groups)
        view.rebuild()
        self._write(view, old | dict.fromkeys(view.table.groups))

    def _stamp(self) -> str:
        """The timestamp of a view record written now (formatted once per millisecond)."""
        now = time.time()
        milli = int(now * 1000)
        if milli != self._stamp_at:
            self._stamp_at = milli
            self._stamp_text = format_timestamp(milli / 1000)
        return self._stamp_text

    def _write(self, view: SowView, touched: Touched) -> None:
        sow = view.sow
        current = sow.records
        removed = []
        route = None
        for key in touched:
            doc = view.table.record(key)
            entry = current.get(key)
            if doc is None:
                if entry is not None:
                    removed.append(entry[0])
                    sow.stage(key, None)
                continue
            try:
                body = encode(sow.message_type, doc)
            except ValueError as exc:
                if view.name not in self._unwritable:
                    self._unwritable.add(view.name)
                    logger.warning("view %r: a record is not written: %s", view.name, exc)
                continue
            if entry is not None and entry[0].data == body:
                continue
            record = SowRecord(key, body, "", self._stamp(), None, None, 0)
            sow.stage(key, record, doc)
            if route is None:
                route = self._index.route(sow.message_type, sow.topic)
            if route:
                prev_doc = entry[1] if entry is not None else NO_PREVIOUS
                self._delivery.deliver_sow(route, sow, record, doc, prev_doc)
        if removed:
            self._delivery.sow_removed(sow, removed, "deleted")

    def close(self) -> None:
        """Close the views' SOW topics."""
        for view in self.views.values():
            view.sow.close()
