"""What goes where: replication routing rules and connection-time configuration validation.

Pure functions and small classes, no I/O, so every rule is unit-testable.

Routing (seed ch. 25, "Understanding Replication Message Routing"): a record goes to a
destination when

1. its topic and message type match one of the destination's ``<Topic>`` rules (and, for
   publishes, the rule's ``<Filter>``);
2. it was published directly to this instance, or it arrived over replication from an
   instance whose group matches one of the destination's ``<PassThrough>`` regexes;
3. it never visited the receiving instance, and it would not re-enter a group it has
   already left (loop prevention: a message passes each instance, and each group, once).

The path a record travelled is kept in its journal fields under :data:`PATH_FIELD`, as a
JSON list of ``[instance name, group]`` hops, origin first, this instance last.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ampsclient_server_stub.config import (
    ConfigError,
    DestinationConfig,
    ReplicationTopicConfig,
    ServerConfig,
)
from ampsclient_server_stub.engine.filters import compile_filter
from ampsclient_server_stub.engine.payload import decode
from ampsclient_server_stub.engine.topics import TopicMatcher, compile_topic, is_regex_topic
from ampsclient_server_stub.queues.replicated_actions import proxied_actions
from ampsclient_server_stub.regexes import RegexError, compile_regex

__all__ = [
    "CHECKS",
    "PATH_FIELD",
    "DestinationRules",
    "Hop",
    "InstanceSummary",
    "decode_path",
    "encode_path",
    "queue_config_problems",
    "summarize",
    "validate_destination",
]

PATH_FIELD: Final = "rp"
"""Journal field holding the replication path of a record received over replication."""

CHECKS: Final = (
    "txlog",
    "replicate",
    "sow",
    "keys",
    "cascade",
    "replicate_filter",
    "queue",
    "queue_underlying",
    "queue_passthrough",
)
"""Validation checks performed at connection time (each excludable per topic, except
``queue`` and ``queue_underlying``, which the configuration refuses to exclude)."""

Hop = tuple[str, str]
"""``(instance name, group)``."""


def encode_path(path: Sequence[Hop]) -> str:
    """The :data:`PATH_FIELD` value for ``path``."""
    return json.dumps([list(h) for h in path], separators=(",", ":"))


def decode_path(value: object) -> list[Hop]:
    """Parse a :data:`PATH_FIELD` value (an empty list when absent or malformed)."""
    if not isinstance(value, str) or not value:
        return []
    try:
        raw = json.loads(value)
    except ValueError:
        return []
    if not isinstance(raw, list):
        return []
    return [(str(h[0]), str(h[1])) for h in raw if isinstance(h, list) and len(h) == 2]


# --------------------------------------------------------------------------- routing


@dataclass(slots=True)
class _TopicRule:
    matcher: TopicMatcher
    message_type: str | None
    predicate: Callable[[Any], bool] | None


class DestinationRules:
    """The routing decision for one ``<Destination>`` of this instance.

    Raises:
        ValueError: a ``<Filter>`` or ``<PassThrough>`` that does not compile.
    """

    def __init__(self, dest: DestinationConfig, name: str, group: str) -> None:
        self.dest = dest
        self.name = name
        self.group = group
        self._topics = [
            _TopicRule(
                compile_topic(t.name),
                t.message_type,
                compile_filter(t.filter) if t.filter else None,
            )
            for t in dest.topics
        ]
        self._passthrough = [compile_regex(p) for p in dest.passthrough]
        self._cache: dict[tuple[str, str], list[_TopicRule]] = {}

    def _rules_for(self, mt: str, topic: str) -> list[_TopicRule]:
        key = (mt, topic)
        rules = self._cache.get(key)
        if rules is None:
            rules = [
                r
                for r in self._topics
                if (r.message_type is None or r.message_type == mt) and r.matcher.matches(topic)
            ]
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = rules
        return rules

    def topic_decision(self, mt: str, topic: str) -> bool | None:
        """Rule 1 where it does not depend on the message: ``False`` when no ``<Topic>``
        takes ``(mt, topic)``, ``True`` when one without ``<Filter>`` does (every record
        goes), ``None`` when only filtered ones do (ask :meth:`topic_matches`)."""
        rules = self._rules_for(mt, topic)
        if not rules:
            return False
        return True if any(r.predicate is None for r in rules) else None

    def topic_matches(self, mt: str, topic: str, command: str, payload: bytes) -> bool:
        """Rule 1: topic, message type and (for publishes) content filter."""
        rules = self._rules_for(mt, topic)
        if not rules:
            return False
        if command == "sow_delete":
            return True
        doc: Any = None
        parsed = False
        for rule in rules:
            if rule.predicate is None:
                return True
            if not parsed:
                doc = decode(mt, payload)
                parsed = True
            if doc is not None and rule.predicate(doc):
                return True
        return False

    def passes(self, path: Sequence[Hop]) -> bool:
        """Rule 2: direct publishes always; replicated ones by ``<PassThrough>`` group."""
        if len(path) < 2:
            return True
        upstream_group = path[-2][1]
        return any(p.test(upstream_group) for p in self._passthrough)

    @staticmethod
    def loop_free(path: Sequence[Hop], peer_name: str, peer_group: str, own_group: str) -> bool:
        """Rule 3: the peer is not on the path, and its group was not left before."""
        for name, group in path:
            if name == peer_name:
                return False
            if group == peer_group and peer_group != own_group:
                return False
        return True


# --------------------------------------------------------------------------- summaries


@dataclass(slots=True)
class InstanceSummary:
    """What one instance tells a peer about its configuration (the ``rconfig`` body)."""

    name: str
    group: str
    txlog: list[tuple[str, str | None]] | None
    """Recorded ``(topic, message type)`` rules; ``None`` records every topic."""
    sow: list[tuple[str, str, list[str]]] = field(default_factory=list)
    destinations: list[dict[str, Any]] = field(default_factory=list)
    queues: list[list[Any]] = field(default_factory=list)
    """Replicated queues: ``[name, message type, kind, underlying topics, filter, initial
    owner]``."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "group": self.group,
            "txlog": None if self.txlog is None else [list(t) for t in self.txlog],
            "sow": [[t, mt, list(keys)] for t, mt, keys in self.sow],
            "destinations": self.destinations,
            "queues": self.queues,
        }

    @classmethod
    def from_wire(cls, body: Any) -> InstanceSummary:
        """Parse an ``rconfig`` body; raises ``ValueError`` when malformed."""
        if not isinstance(body, Mapping):
            raise ValueError("rconfig body must be a map")
        try:
            txlog_raw = body.get("txlog")
            txlog = None if txlog_raw is None else [(str(n), m) for n, m in txlog_raw]
            sow = [(str(t), str(mt), [str(k) for k in keys]) for t, mt, keys in body["sow"]]
            dests = [dict(d) for d in body["destinations"]]
            queues = [list(q) for q in body.get("queues") or []]
            return cls(str(body["name"]), str(body["group"]), txlog, sow, dests, queues)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed rconfig body: {exc}") from exc


def _topic_wire(t: ReplicationTopicConfig) -> list[Any]:
    return [t.name, t.message_type, t.filter, list(t.exclude_validation)]


def summarize(config: ServerConfig, *, record_all_topics: bool) -> InstanceSummary:
    """The :class:`InstanceSummary` of an instance running ``config``."""
    txlog_cfg = config.transaction_log
    txlog: list[tuple[str, str | None]] | None
    if txlog_cfg is None:
        txlog = None if record_all_topics else []
    else:
        txlog = [(t.name, t.message_type) for t in txlog_cfg.topics]
    sow = [(s.topic, s.message_type, list(s.keys)) for s in config.sow_topics]
    dests: list[dict[str, Any]] = []
    if config.replication is not None:
        for d in config.replication.destinations:
            dests.append(
                {
                    "name": d.name,
                    "group": d.group,
                    "sync": d.sync_type,
                    "topics": [_topic_wire(t) for t in d.topics],
                    "passthrough": list(d.passthrough),
                }
            )
    queues = [
        [q.name, q.message_type, q.kind, sorted(q.topics()), q.filter, q.initial_owner]
        for q in config.queues
        if q.kind != "LocalQueue"
    ]
    return InstanceSummary(config.name, config.effective_group, txlog, sow, dests, queues)


def queue_config_problems(config: ServerConfig) -> list[str]:
    """What stops the start of an instance with queues: a ``<LocalQueue>`` cannot be
    replicated (one problem per destination ``<Topic>`` that covers one); a proxied-transfer
    action that cannot run (``queues.replicated_actions``)."""
    problems = []
    try:
        proxied_actions(config)
    except ConfigError as exc:
        problems.append(str(exc))
    for queue in config.queues:
        if queue.kind != "LocalQueue" or config.replication is None:
            continue
        for dest in config.replication.destinations:
            if _covers([(t.name, t.message_type) for t in dest.topics], queue.name, None):
                problems.append(
                    f"<LocalQueue> {queue.name!r} cannot be replicated, but destination "
                    f"{dest.name!r} replicates its topic: make it a <Queue> or a "
                    "<GroupLocalQueue>, or leave its topic out of the destination's <Topic>"
                )
    return problems


# --------------------------------------------------------------------------- validation


def _mt_ok(rule_mt: str | None, mt: str | None) -> bool:
    return rule_mt is None or mt is None or rule_mt == mt


def _covers(rules: Iterable[tuple[str, str | None]], name: str, mt: str | None) -> bool:
    """Does one of ``rules`` (topic name or regex, message type) cover topic ``name``?"""
    literal = not is_regex_topic(name)
    for rule_name, rule_mt in rules:
        if not _mt_ok(rule_mt, mt):
            continue
        if rule_name == name:
            return True
        if literal:
            try:
                if compile_topic(rule_name).matches(name):
                    return True
            except ValueError:
                continue
    return False


def _dest_topics(dest: Mapping[str, Any]) -> list[tuple[str, str | None, str | None, list[str]]]:
    out = []
    for t in dest.get("topics") or []:
        name, mt, flt, excl = t
        out.append((str(name), mt, flt, [str(x) for x in excl or []]))
    return out


def _passes(passthrough: object, group: str) -> bool:
    """Whether a peer's ``<PassThrough>`` regex (as it describes it) admits ``group``."""
    try:
        return isinstance(passthrough, str) and compile_regex(passthrough).test(group)
    except RegexError:
        return False


def _targets(dest: Mapping[str, Any], name: str, group: str) -> bool:
    return dest.get("name") == name or (dest.get("group") is not None and dest["group"] == group)


def _local_sows(
    sows: Sequence[tuple[str, str, list[str]]], name: str, mt: str | None
) -> list[tuple[str, str, list[str]]]:
    literal = not is_regex_topic(name)
    out = []
    for topic, sow_mt, keys in sows:
        if not _mt_ok(mt, sow_mt):
            continue
        if (literal and topic == name) or (not literal and compile_topic(name).matches(topic)):
            out.append((topic, sow_mt, keys))
    return out


def validate_destination(
    local: InstanceSummary, dest: DestinationConfig, remote: InstanceSummary
) -> list[str]:
    """Problems that forbid replicating ``dest`` to ``remote`` (empty: valid).

    Each problem is one sentence naming the topic, the check and what to change. The
    checks are those of seed ch. 25, table 25.2; each can be excluded per topic with
    ``<ExcludeValidation>`` except ``queue`` and ``queue_underlying`` (mandatory).
    """
    problems: list[str] = []
    if dest.group is not None and dest.group != remote.group:
        problems.append(
            f"destination {dest.name!r} expects group {dest.group!r} but instance "
            f"{remote.name!r} is in group {remote.group!r}: fix <Group> of the destination "
            "or of the remote instance"
        )
    back = [d for d in remote.destinations if _targets(d, local.name, local.group)]
    for topic in dest.topics:
        label = f"topic {topic.name!r} ({topic.message_type or 'any message type'})"
        for check, text in _topic_problems(local, topic, remote, back):
            problems.append(
                f"[{check}] {label}: {text} "
                f"(or add '{check}' to <ExcludeValidation> of this <Topic>)"
            )
    rules = [(t.name, t.message_type) for t in dest.topics]
    for name, mt, _kind, underlying, _flt, _owner in local.queues:
        if not _covers(rules, name, mt):
            continue
        for topic_name in underlying:
            if not is_regex_topic(topic_name) and not _covers(rules, topic_name, mt):
                problems.append(
                    f"[queue_underlying] queue {name!r}: destination {dest.name!r} replicates "
                    f"the queue topic but not its underlying topic {topic_name!r}; add it to "
                    "the destination's <Topic> (a mandatory check)"
                )
    return problems


def _topic_problems(
    local: InstanceSummary,
    topic: ReplicationTopicConfig,
    remote: InstanceSummary,
    back: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str]]:
    """``(check, problem)`` for one ``<Topic>`` of a destination; ``back``: remote's way back."""
    excluded = set(topic.exclude_validation)
    found: list[tuple[str, str]] = []
    if (
        "txlog" not in excluded
        and remote.txlog is not None
        and not _covers(remote.txlog, topic.name, topic.message_type)
    ):
        found.append(
            (
                "txlog",
                f"is not recorded in the transaction log of {remote.name!r}; add it to "
                "<TransactionLog> there",
            )
        )
    back_rules = [
        rule
        for d in back
        for rule in _dest_topics(d)
        if _covers([(rule[0], rule[1])], topic.name, topic.message_type)
    ]
    if "replicate" not in excluded and not back_rules:
        found.append(
            (
                "replicate",
                f"is not replicated from {remote.name!r} back to {local.name!r}; add a "
                f"<Destination> for {local.name!r} replicating it on {remote.name!r}",
            )
        )
    found += _sow_problems(local, topic, remote, excluded)
    if "cascade" not in excluded:
        found += _cascade_problems(topic, remote, excluded)
    found += _queue_problems(local, topic, remote, excluded)
    if "replicate_filter" not in excluded and topic.filter:
        found += [
            (
                "replicate_filter",
                f"is replicated here with filter {topic.filter!r} but {remote.name!r} "
                f"replicates it back with filter {rule[2]!r}",
            )
            for rule in back_rules
            if rule[2] != topic.filter
        ]
    return found


def _sow_problems(
    local: InstanceSummary,
    topic: ReplicationTopicConfig,
    remote: InstanceSummary,
    excluded: set[str],
) -> list[tuple[str, str]]:
    """The ``sow`` and ``keys`` checks: each local SOW topic the rule covers is one remotely."""
    found: list[tuple[str, str]] = []
    for sow_topic, sow_mt, keys in _local_sows(local.sow, topic.name, topic.message_type):
        remote_sow = next((s for s in remote.sow if s[0] == sow_topic and s[1] == sow_mt), None)
        if remote_sow is None:
            if "sow" not in excluded or "keys" not in excluded:
                found.append(
                    (
                        "sow" if "sow" not in excluded else "keys",
                        f"SOW topic {sow_topic!r} ({sow_mt}) here is not a SOW topic on "
                        f"{remote.name!r}",
                    )
                )
        elif "keys" not in excluded and list(remote_sow[2]) != list(keys):
            found.append(
                (
                    "keys",
                    f"SOW topic {sow_topic!r} has keys {list(keys)} here but "
                    f"{list(remote_sow[2])} on {remote.name!r}",
                )
            )
    return found


def _cascade_problems(
    topic: ReplicationTopicConfig, remote: InstanceSummary, excluded: set[str]
) -> list[tuple[str, str]]:
    """The ``cascade`` check: the remote enforces, downstream, every check enforced here."""
    found: list[tuple[str, str]] = []
    for d in remote.destinations:
        for rule in _dest_topics(d):
            if not _covers([(rule[0], rule[1])], topic.name, topic.message_type):
                continue
            extra = sorted(set(rule[3]) - excluded)
            if extra:
                found.append(
                    (
                        "cascade",
                        f"{remote.name!r} excludes {extra} when replicating it to "
                        f"{d.get('name')!r}, checks this instance enforces",
                    )
                )
    return found


def _queue_problems(
    local: InstanceSummary,
    topic: ReplicationTopicConfig,
    remote: InstanceSummary,
    excluded: set[str],
) -> list[tuple[str, str]]:
    """The ``queue``, ``queue_underlying`` and ``queue_passthrough`` checks for every local
    replicated queue whose topic the rule covers."""
    found: list[tuple[str, str]] = []
    for name, mt, kind, underlying, flt, initial in local.queues:
        if not _covers([(topic.name, topic.message_type)], name, mt):
            continue
        theirs = next((q for q in remote.queues if q[0] == name and q[1] == mt), None)
        if theirs is None:
            found.append(
                ("queue", f"queue {name!r} here is not a replicated queue on {remote.name!r}")
            )
            continue
        if list(theirs[3]) != list(underlying) or theirs[4] != flt or theirs[2] != kind:
            found.append(
                (
                    "queue_underlying",
                    f"queue {name!r} is a <{kind}> of {list(underlying)} filter {flt!r} here "
                    f"but a <{theirs[2]}> of {list(theirs[3])} filter {theirs[4]!r} on "
                    f"{remote.name!r}",
                )
            )
        elif theirs[5] != initial:
            found.append(
                (
                    "queue_underlying",
                    f"queue {name!r} has <InitialOwner> {initial!r} here but {theirs[5]!r} on "
                    f"{remote.name!r}",
                )
            )
        if "queue_passthrough" not in excluded:
            onward = [
                d
                for d in remote.destinations
                if not _targets(d, local.name, local.group)
                and any(_covers([(r[0], r[1])], name, mt) for r in _dest_topics(d))
            ]
            for d in onward:
                if not any(_passes(p, local.group) for p in d.get("passthrough") or []):
                    found.append(
                        (
                            "queue_passthrough",
                            f"queue {name!r}: {remote.name!r} replicates it on to "
                            f"{d.get('name')!r} without <PassThrough> for group "
                            f"{local.group!r}, so transfers of this instance do not reach it",
                        )
                    )
    return found
