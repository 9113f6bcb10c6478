"""The section readers: an ``<AMPSConfig>`` element tree to a :class:`ServerConfig`.

:func:`build_config` walks the document section by section (transports, SOW topics,
transaction log, actions, replication, admin) with a :class:`ConfigReader`, which resolves
relative paths against the data directory and fails with a :class:`ConfigError` naming the
element and its line.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal

from .config_elements import check_elements
from .config_indexes import parse_hash_indexes, parse_memo_indexes
from .config_message_types import check_message_types, read_message_types
from .config_model import (
    DEFAULT_JOURNAL_SIZE,
    DEFAULT_PREALLOCATED_JOURNAL_FILES,
    DEFAULT_SERVER_NAME,
    DOWNGRADE_REPLICATION_MODULE,
    SCHEDULE_MODULE,
    TRANSPORT_TYPES,
    UPGRADE_REPLICATION_MODULE,
    ActionConfig,
    ActionStep,
    AdminConfig,
    DestinationConfig,
    ReplicationActionConfig,
    ReplicationConfig,
    ReplicationTopicConfig,
    ServerConfig,
    SowTopicConfig,
    SyncType,
    TransactionLogConfig,
    TransportConfig,
    TxlogTopic,
)
from .config_values import InetAddr, parse_duration, parse_inet_addr, parse_size
from .config_xml import ElementReader, XmlDocument, flatten
from .conflated_config import CONFLATED_TAGS, parse_conflated_topics
from .engine.enrichment import ENRICHABLE_TYPES, EnrichmentError, compile_stage
from .engine.filters import FilterError, compile_filter
from .engine.payload import PARSEABLE_TYPES, is_parseable
from .engine.wire import opaque_filter_refusal
from .queues.config import QUEUE_TAGS, parse_queues
from .queues.view_config import VIEW_TAGS, is_queue_view, parse_views
from .regexes import RegexError, compile_regex
from .views.config import parse_sow_views

__all__ = ["ConfigReader", "build_config"]

logger = logging.getLogger("ampsclient_server_stub.config")

_MAX_SYNC_DESTINATIONS = 64

# Validation checks that a replication topic may exclude; "queue" and "queue_underlying"
# are validated by AMPS but "cannot be excluded".
_EXCLUDABLE_VALIDATIONS = frozenset(
    {"txlog", "replicate", "sow", "cascade", "keys", "replicate_filter", "queue_passthrough"}
)
_UNEXCLUDABLE_VALIDATIONS = frozenset({"queue", "queue_underlying"})


def _opaque_filter(message_type: str, text: str) -> str | None:
    """Why a configured ``<Filter>`` is refused on ``message_type``: it reads inside a binary
    part of a composite-local type (``None``: it does not, or it does not parse: that is
    reported where it is compiled)."""
    try:
        return opaque_filter_refusal(message_type.lower(), text)
    except (FilterError, ValueError, RecursionError):
        return None


class ConfigReader(ElementReader):
    """Reads each section of the document into its dataclass."""

    def transports(self, section: ET.Element) -> tuple[TransportConfig, ...]:
        result: list[TransportConfig] = []
        for index, elem in enumerate(section.findall("Transport"), start=1):
            result.append(self.transport(elem, index))
        self.ignore_unknown(section, ["Transport"])
        names: set[str] = set()
        addrs: set[tuple[str, int]] = set()
        replication: TransportConfig | None = None
        for elem, transport in zip(section.findall("Transport"), result, strict=True):
            if transport.name in names:
                self.fail(elem, f"duplicate transport name {transport.name!r}")
            names.add(transport.name)
            if transport.type == "amps-replication":
                if replication is not None:
                    self.fail(
                        elem,
                        f"<Transport> {transport.name!r} is a second amps-replication transport "
                        f"({replication.name!r} is the first): an instance has one incoming "
                        "replication transport",
                    )
                replication = transport
            key = (transport.host, transport.port)
            if transport.port and key in addrs:
                self.fail(
                    elem,
                    f"<Transport> {transport.name!r} reuses address {transport.address}",
                )
            addrs.add(key)
        return tuple(result)

    def transport(self, elem: ET.Element, index: int) -> TransportConfig:
        name = self.text(elem, "Name")
        label = f"<Transport> {name!r}" if name else f"<Transport> #{index}"
        raw_type = self.text(elem, "Type")
        if raw_type is None:
            self.fail(elem, f"{label} has no <Type>")
        ttype = TRANSPORT_TYPES.get(raw_type.lower())
        if ttype is None:
            allowed = ", ".join(TRANSPORT_TYPES)
            self.fail(
                self.child(elem, "Type"),
                f"{label} has unsupported <Type> {raw_type!r} (expected one of {allowed})",
            )
        if ttype == "unix":
            return self.unix_transport(elem, name, label, index)
        addr_elems = elem.findall("InetAddr")
        if not addr_elems:
            self.fail(elem, f"{label} has no <InetAddr>")
        if len(addr_elems) > 1:
            self.fail(addr_elems[1], f"{label} has more than one <InetAddr>")
        addr_text = self.elem_text(addr_elems[0], elem)
        addr = self.convert(addr_elems[0], parse_inet_addr, addr_text)
        protocol = (self.text(elem, "Protocol") or "amps").lower()
        if protocol not in _PROTOCOLS or (protocol == "websocket" and ttype not in ("tcp", "tcps")):
            self.fail(
                self.child(elem, "Protocol"),
                f"{label}: <Protocol> {protocol!r} is not supported by the reference server "
                "(amps, or websocket on a tcp/tcps transport)",
            )
        self.check_transport_extras(elem, ttype, label)
        message_type = self.text(elem, "MessageType")
        known: tuple[str, ...] = ("Name", "Type", "InetAddr", "Protocol", "MessageType")
        compression = None
        if ttype != "amps-replication":  # (a replication transport keeps its own reading)
            compression = self.compression(elem, None, label)
            known += ("Compression",)
        return TransportConfig(
            name=name or f"{ttype}-{index}",
            type=ttype,
            host=addr.host,
            port=addr.port,
            protocol=protocol,
            message_type=message_type.lower() if message_type else None,
            extra=MappingProxyType(self.extras(elem, known)),
            compression=compression,
        )

    def unix_transport(
        self, elem: ET.Element, name: str | None, label: str, index: int
    ) -> TransportConfig:
        """``<Type>unix</Type>``: a Unix domain socket at ``<Path>`` (amps protocol)."""
        if elem.find("InetAddr") is not None:
            self.fail(self.child(elem, "InetAddr"), f"{label}: a unix transport has a <Path>")
        path = self.required(elem, "Path", label)
        protocol = (self.text(elem, "Protocol") or "amps").lower()
        if protocol != "amps":
            self.fail(self.child(elem, "Protocol"), f"{label}: a unix transport speaks amps")
        if self.compression(elem, None, label) is not None:
            self.fail(self.child(elem, "Compression"), f"{label}: no compression on unix")
        self.check_transport_extras(elem, "unix", label)
        message_type = self.text(elem, "MessageType")
        known = ("Name", "Type", "Path", "Protocol", "MessageType", "Compression")
        return TransportConfig(
            name=name or f"unix-{index}",
            type="unix",
            host="",
            port=0,
            message_type=message_type.lower() if message_type else None,
            extra=MappingProxyType(self.extras(elem, known)),
            path=str(self.path(elem, "Path", path)),
        )

    def check_transport_extras(self, elem: ET.Element, ttype: str, label: str) -> None:
        """TLS elements only on tcps/wss, ``Secret`` only on amps-replication (they would do
        nothing elsewhere)."""
        for child in elem:
            if child.tag in _TLS_ONLY and ttype not in ("tcps", "wss"):
                self.fail(child, f"{label}: <{child.tag}> applies to tcps and wss transports only")
            if child.tag == "Secret" and ttype != "amps-replication":
                self.fail(child, f"{label}: <Secret> applies to amps-replication transports only")

    def sow_topics(self, root: ET.Element) -> tuple[SowTopicConfig, ...]:
        elems: list[ET.Element] = []
        sow = self.single(root, "SOW")
        if sow is not None:
            elems += [c for c in sow if c.tag in ("Topic", "TopicDefinition")]
            self.ignore_unknown(
                sow, ["Topic", "TopicDefinition", *QUEUE_TAGS, *VIEW_TAGS, *CONFLATED_TAGS]
            )
        # Pre-5.0 AMPS spelled the SOW section <TopicMetaData><TopicDefinition>.
        meta = self.single(root, "TopicMetaData")
        if meta is not None:
            elems += meta.findall("TopicDefinition")
            self.ignore_unknown(meta, ["TopicDefinition"])
        result: list[SowTopicConfig] = []
        seen: set[tuple[str, str]] = set()
        for elem in elems:
            topic = self.sow_topic(elem)
            if (topic.topic, topic.message_type) in seen:
                self.fail(
                    elem,
                    f"duplicate SOW topic {topic.topic!r} of message type {topic.message_type!r}",
                )
            seen.add((topic.topic, topic.message_type))
            result.append(topic)
        return tuple(result)

    def sow_topic(self, elem: ET.Element) -> SowTopicConfig:
        name = self.text(elem, "Name")
        # Inside the old <TopicDefinition>, the topic name is a <Topic> child.
        legacy = self.text(elem, "Topic") if elem.tag == "TopicDefinition" else None
        if name is not None and legacy is not None:
            self.fail(elem, f"<{elem.tag}> has both <Name> and <Topic>")
        topic = name if name is not None else legacy
        if topic is None:
            self.fail(elem, f"SOW <{elem.tag}> has no <Name>")
        label = f"SOW topic {topic!r}"
        message_type = self.required(elem, "MessageType", label).lower()
        keys = tuple(self.elem_text(k, elem) for k in elem.findall("Key"))
        if keys and not is_parseable(message_type):
            self.fail(
                self.child(elem, "Key"),
                f"{label}: a <Key> needs a message type the server parses "
                f"({', '.join(sorted(PARSEABLE_TYPES))}, a composite type with a parsed part), "
                f"not {message_type!r}: a {message_type} record is keyed by the SOW key its "
                "publisher gives (no <Key>; AMPS User Guide, 'Understanding SOW Keys')",
            )
        file_text = self.text(elem, "FileName")
        file_name = None
        if file_text is not None:
            file_name = self.path(elem, "FileName", file_text.replace("%n", _sanitize(topic)))
        self.durability(elem, label, file_name is not None)
        window, granularity = self.history(elem, label)
        expiration = None
        exp_text = self.text(elem, "Expiration")
        if exp_text is not None and exp_text.lower() not in ("disabled", "none"):
            expiration = self.convert(self.child(elem, "Expiration"), parse_duration, exp_text)
        known = (
            "Name",
            "Topic",
            "MessageType",
            "Key",
            "FileName",
            "KeyDomain",
            "Expiration",
            "Durability",
            "History",
            "Preprocessing",
            "Enrichment",
            "HashIndex",
            "Index",
        )
        parseable = is_parseable(message_type)
        hash_indexes = parse_hash_indexes(elem, label, parseable=parseable, fail=self.fail)
        memo_indexes = parse_memo_indexes(elem, label, parseable=parseable, fail=self.fail)
        preprocessing = self.enrichment_stage(elem, "Preprocessing", label, message_type)
        enrichment = self.enrichment_stage(elem, "Enrichment", label, message_type)
        return SowTopicConfig(
            preprocessing=preprocessing,
            enrichment=enrichment,
            history_window=window,
            history_granularity=granularity,
            topic=topic,
            message_type=message_type,
            keys=keys,
            file_name=file_name,
            key_domain=self.text(elem, "KeyDomain"),
            expiration=expiration,
            extra=MappingProxyType(self.extras(elem, known)),
            hash_indexes=hash_indexes,
            memo_indexes=memo_indexes,
        )

    def enrichment_stage(
        self, elem: ET.Element, tag: str, label: str, message_type: str
    ) -> tuple[str, ...]:
        """The ``<Field>`` texts of the ``<Preprocessing>``/``<Enrichment>`` stage ``tag``,
        each compiled here so a bad one (an unknown function too) fails at start."""
        stage = self.single(elem, tag)
        if stage is None:
            return ()
        if message_type not in ENRICHABLE_TYPES:
            self.fail(
                stage,
                f"{label}: <{tag}> needs a message type the reference server can rewrite "
                f"({', '.join(sorted(ENRICHABLE_TYPES))}), not {message_type!r}",
            )
        fields: list[str] = []
        for child in stage:
            if child.tag != "Field":
                self.fail(child, f"{label}: <{child.tag}> in <{tag}> is not a <Field>")
            text = (child.text or "").strip()
            try:
                compile_stage([text], stage=tag)
            except EnrichmentError as exc:
                self.fail(child, f"{label}: {exc}")
            fields.append(text)
        if not fields:
            self.fail(stage, f"{label}: <{tag}> has no <Field>")
        return tuple(fields)

    def history(self, elem: ET.Element, label: str) -> tuple[float | None, float]:
        """``<History>``: ``Window`` (required) and ``Granularity`` (default 0: every change)."""
        history = self.single(elem, "History")
        if history is None:
            return None, 0.0
        window = self.duration(history, "Window")
        if window is None or window <= 0:
            self.fail(history, f"{label}: <History> needs a positive <Window>")
        granularity = self.duration(history, "Granularity") or 0.0
        if granularity > window:
            self.fail(history, f"{label}: <History> <Granularity> is longer than its <Window>")
        return window, granularity

    def durability(self, elem: ET.Element, label: str, has_file: bool) -> None:
        """``<Durability>``: ``transient`` (in memory: no ``FileName``) or ``persistent`` (the
        SOW file, so a ``FileName`` is required), as in AMPS."""
        text = self.text(elem, "Durability")
        if text is None:
            return
        value = text.lower()
        if value not in ("transient", "persistent"):
            self.fail(
                self.child(elem, "Durability"),
                f"{label}: <Durability> must be transient or persistent, got {text!r}",
            )
        if value == "transient" and has_file:
            self.fail(self.child(elem, "Durability"), f"{label}: transient with a <FileName>")
        if value == "persistent" and not has_file:
            self.fail(self.child(elem, "Durability"), f"{label}: persistent needs a <FileName>")

    def transaction_log(self, elem: ET.Element) -> TransactionLogConfig:
        directory = self.text(elem, "JournalDirectory")
        archive = self.text(elem, "JournalArchiveDirectory")
        journal_size = self.size(elem, "JournalSize")
        if journal_size is not None and journal_size <= 0:
            self.fail(self.child(elem, "JournalSize"), "<JournalSize> must be positive")
        prealloc = self.integer(elem, "PreallocatedJournalFiles", minimum=1)
        topics: list[TxlogTopic] = []
        for topic_elem in elem.findall("Topic"):
            name = self.required(topic_elem, "Name", "<TransactionLog> <Topic>")
            message_type = self.text(topic_elem, "MessageType")
            filter_text = self.text(topic_elem, "Filter")
            if filter_text is not None:
                try:
                    compile_filter(filter_text)
                except FilterError as exc:
                    self.fail(
                        self.child(topic_elem, "Filter"),
                        f"<TransactionLog> <Topic> {name!r}: bad <Filter> {filter_text!r}: {exc}",
                    )
                if message_type is not None and not is_parseable(message_type):
                    self.fail(
                        self.child(topic_elem, "Filter"),
                        f"<TransactionLog> <Topic> {name!r}: a <Filter> needs a message type "
                        f"the server parses ({', '.join(sorted(PARSEABLE_TYPES))}), "
                        f"not {message_type!r}",
                    )
                opaque = _opaque_filter(message_type, filter_text) if message_type else None
                if opaque is not None:
                    self.fail(
                        self.child(topic_elem, "Filter"),
                        f"<TransactionLog> <Topic> {name!r}: <Filter>: {opaque}",
                    )
            self.ignore_unknown(topic_elem, ["Name", "MessageType", "Filter"])
            topics.append(
                TxlogTopic(name, message_type.lower() if message_type else None, filter_text)
            )
        known = (
            "JournalDirectory",
            "JournalArchiveDirectory",
            "JournalSize",
            "PreallocatedJournalFiles",
            "FlushInterval",
            "Topic",
        )
        return TransactionLogConfig(
            journal_directory=(
                self.path(elem, "JournalDirectory", directory)
                if directory
                else self.data_dir / "journal"
            ),
            journal_size=journal_size if journal_size is not None else DEFAULT_JOURNAL_SIZE,
            preallocated_journal_files=(
                prealloc if prealloc is not None else DEFAULT_PREALLOCATED_JOURNAL_FILES
            ),
            topics=tuple(topics),
            flush_interval=self.duration(elem, "FlushInterval"),
            archive_directory=(
                self.path(elem, "JournalArchiveDirectory", archive) if archive else None
            ),
            extra=MappingProxyType(self.extras(elem, known)),
        )

    def replication(
        self, elem: ET.Element, actions: tuple[ReplicationActionConfig, ...]
    ) -> ReplicationConfig:
        destinations: list[DestinationConfig] = []
        names: set[str] = set()
        for dest_elem in elem.findall("Destination"):
            dest = self.destination(dest_elem)
            if dest.name in names:
                self.fail(dest_elem, f"duplicate replication <Destination> {dest.name!r}")
            names.add(dest.name)
            destinations.append(dest)
        self.ignore_unknown(elem, ["Destination"])
        sync_count = sum(1 for d in destinations if d.sync_type == "sync")
        if sync_count > _MAX_SYNC_DESTINATIONS:
            self.fail(
                elem,
                f"{sync_count} sync replication destinations configured; "
                f"at most {_MAX_SYNC_DESTINATIONS} are supported",
            )
        return ReplicationConfig(destinations=tuple(destinations), actions=actions)

    def destination(self, elem: ET.Element) -> DestinationConfig:
        name = self.required(elem, "Name", "replication <Destination>")
        label = f"replication <Destination> {name!r}"
        sync_text = self.text(elem, "SyncType")
        sync_type: SyncType = "async"
        if sync_text is not None:
            lowered = sync_text.lower()
            if lowered == "sync":
                sync_type = "sync"
            elif lowered != "async":
                self.fail(
                    self.child(elem, "SyncType"),
                    f"{label}: <SyncType> must be 'sync' or 'async', got {sync_text!r}",
                )
        topics = tuple(self.replication_topic(t, label) for t in elem.findall("Topic"))
        passthrough: list[str] = []
        for pt in elem.findall("PassThrough"):
            regex = self.elem_text(pt, elem)
            try:
                compile_regex(regex)
            except RegexError as exc:
                self.fail(pt, f"{label}: invalid <PassThrough> regex {regex!r}: {exc}")
            passthrough.append(regex)
        inet_addrs: list[InetAddr] = []
        transport_type = "amps-replication"
        extra: dict[str, str] = {}
        transport = self.single(elem, "Transport")
        if transport is not None:
            raw_type = self.text(transport, "Type")
            if raw_type is not None:
                transport_type = raw_type.lower()
                if transport_type != "amps-replication":
                    self.fail(
                        self.child(transport, "Type"),
                        f"{label}: <Transport> <Type> must be amps-replication, got {raw_type!r}",
                    )
            for addr_elem in transport.findall("InetAddr"):
                for part in self.elem_text(addr_elem, transport).split(","):
                    if part.strip():
                        inet_addrs.append(self.convert(addr_elem, parse_inet_addr, part))
            extra.update(
                self.extras(transport, ("Type", "InetAddr", "Compression"), prefix="Transport/")
            )
        compression = self.compression(elem, transport, label)
        known = ("Name", "Group", "SyncType", "Topic", "PassThrough", "Transport", "Compression")
        extra.update(self.extras(elem, known))
        return DestinationConfig(
            name=name,
            group=self.text(elem, "Group"),
            sync_type=sync_type,
            topics=topics,
            inet_addrs=tuple(inet_addrs),
            transport_type=transport_type,
            passthrough=tuple(passthrough),
            extra=MappingProxyType(extra),
            compression=compression,
        )

    def compression(self, elem: ET.Element, transport: ET.Element | None, label: str) -> str | None:
        """``<Compression>`` of a destination (directly in it, or in its ``<Transport>``)."""
        found = [(elem, c) for c in elem.findall("Compression")]
        if transport is not None:
            found += [(transport, c) for c in transport.findall("Compression")]
        if not found:
            return None
        if len(found) > 1:
            self.fail(found[1][1], f"{label}: more than one <Compression>")
        parent, comp = found[0]
        value = self.elem_text(comp, parent).lower()
        if value in _COMPRESSION_OFF:
            return None
        if value not in _COMPRESSIONS:
            self.fail(
                comp,
                f"{label}: unsupported <Compression> {value!r} (expected one of "
                f"{', '.join(_COMPRESSIONS)}, or none)",
            )
        return value

    def replication_topic(self, elem: ET.Element, label: str) -> ReplicationTopicConfig:
        name = self.required(elem, "Name", f"{label} <Topic>")
        message_type = self.text(elem, "MessageType")
        exclusions: list[str] = []
        excl_text = self.text(elem, "ExcludeValidation")
        if excl_text is not None:
            for raw in excl_text.split(","):
                check = raw.strip().lower()
                if not check:
                    continue
                if check not in _EXCLUDABLE_VALIDATIONS:
                    reason = (
                        "cannot be excluded"
                        if check in _UNEXCLUDABLE_VALIDATIONS
                        else "is not a known validation check"
                    )
                    self.fail(
                        self.child(elem, "ExcludeValidation"),
                        f"{label} <Topic> {name!r}: <ExcludeValidation> {check!r} {reason}",
                    )
                exclusions.append(check)
        self.ignore_unknown(elem, ["Name", "MessageType", "Filter", "ExcludeValidation"])
        filter_text = self.text(elem, "Filter")
        if filter_text is not None and message_type is not None and not is_parseable(message_type):
            self.fail(
                self.child(elem, "Filter"),
                f"{label} <Topic> {name!r}: a <Filter> needs a message type the server parses "
                f"({', '.join(sorted(PARSEABLE_TYPES))}), not {message_type!r}",
            )
        if filter_text is not None and message_type is not None:
            opaque = _opaque_filter(message_type, filter_text)
            if opaque is not None:
                self.fail(self.child(elem, "Filter"), f"{label} <Topic> {name!r}: {opaque}")
        return ReplicationTopicConfig(
            name=name,
            message_type=message_type.lower() if message_type else None,
            filter=filter_text,
            exclude_validation=tuple(exclusions),
        )

    def admin(self, elem: ET.Element) -> AdminConfig:
        addr_text = self.required(elem, "InetAddr", "<Admin>")
        addr = self.convert(self.child(elem, "InetAddr"), parse_inet_addr, addr_text)
        file_text = self.text(elem, "FileName")
        return AdminConfig(
            host=addr.host,
            port=addr.port,
            interval=self.duration(elem, "Interval"),
            file_name=self.path(elem, "FileName", file_text) if file_text else None,
            extra=MappingProxyType(self.extras(elem, ("InetAddr", "FileName", "Interval"))),
        )

    def actions(
        self, section: ET.Element
    ) -> tuple[tuple[ActionConfig, ...], tuple[ReplicationActionConfig, ...]]:
        raw: list[ActionConfig] = []
        replication: list[ReplicationActionConfig] = []
        self.ignore_unknown(section, ["Action"])
        for action in section.findall("Action"):
            on = tuple(self.action_step(s) for s in action.findall("On"))
            do = tuple(self.action_step(s) for s in action.findall("Do"))
            self.check_modules(action, on, do)
            self.ignore_unknown(action, ["On", "Do"])
            raw.append(ActionConfig(on=on, do=do))
            every: float | None = None
            replicating = any(
                s.module in (DOWNGRADE_REPLICATION_MODULE, UPGRADE_REPLICATION_MODULE) for s in do
            )  # other actions' Every (a time of day, a weekday) is journal_actions.py's
            for step_elem, step in zip(action.findall("On"), on, strict=True):
                if replicating and step.module == SCHEDULE_MODULE and "Every" in step.options:
                    every = self.convert(step_elem, parse_duration, step.options["Every"])
            for step_elem, step in zip(action.findall("Do"), do, strict=True):
                kind: Literal["downgrade", "upgrade"]
                if step.module == DOWNGRADE_REPLICATION_MODULE:
                    kind = "downgrade"
                elif step.module == UPGRADE_REPLICATION_MODULE:
                    kind = "upgrade"
                else:
                    continue
                age_text = step.options.get("Age")
                if age_text is None:
                    self.fail(step_elem, f"<Do> {step.module} requires an <Age> option")
                age = self.convert(step_elem, parse_duration, age_text)
                replication.append(
                    ReplicationActionConfig(kind=kind, age=age, every=every, options=step.options)
                )
        return tuple(raw), tuple(replication)

    def check_modules(
        self, action: ET.Element, on: tuple[ActionStep, ...], do: tuple[ActionStep, ...]
    ) -> None:
        """Refuse an action the server would not run: a module it does not implement, or an
        action without a step (replication actions without ``<On>`` run on the default
        period; journal actions need one, see ``journal_actions``)."""
        journal = any(s.module in _JOURNAL_DO_MODULES for s in do)
        for tag, steps, known in (("On", on, _ON_MODULES), ("Do", do, _DO_MODULES)):
            if tag == "On" and journal:
                continue  # journal_actions refuses a journal action's trigger at start-up
            if not steps and tag == "Do":
                self.fail(action, "<Action> has no <Do>: it would do nothing")
            for elem, step in zip(action.findall(tag), steps, strict=True):
                if step.module not in known:
                    self.fail(
                        elem,
                        f"<Action> <{tag}> module {step.module!r} is not supported by the "
                        f"reference server (supported: {', '.join(known)})",
                    )

    def action_step(self, elem: ET.Element) -> ActionStep:
        module = self.required(elem, "Module", f"<Action> <{elem.tag}>")
        options: dict[str, str] = {}
        opts = self.single(elem, "Options")
        if opts is not None:
            for child in opts:
                flatten(child, child.tag, options, 0)
        self.ignore_unknown(elem, ["Module", "Options"])
        return ActionStep(module=module, options=MappingProxyType(options))


_ON_MODULES: Final = (SCHEDULE_MODULE, "amps-action-on-sow-expire-message")
_JOURNAL_DO_MODULES: Final = (
    "amps-action-do-archive-journal",
    "amps-action-do-compress-journal",
    "amps-action-do-remove-journal",
)
_DO_MODULES: Final = (
    DOWNGRADE_REPLICATION_MODULE,
    UPGRADE_REPLICATION_MODULE,
    *_JOURNAL_DO_MODULES,
    "amps-action-do-publish-message",  # on a queue expiration: queues.dead_letter checks it
    "amps-action-do-enable-proxied-transfer",  # queues.replicated_actions checks these two
    "amps-action-do-disable-proxied-transfer",
)
_PROTOCOLS: Final = ("amps", "websocket")
_TLS_ONLY: Final = (
    "Certificate",
    "PrivateKey",
    "PrivateKeyPassword",
    "CAFile",
    "RequireClientCertificate",
)
_COMPRESSIONS: Final = ("zlib",)
_COMPRESSION_OFF: Final = ("none", "off", "false", "disabled")


def _sanitize(topic: str) -> str:
    """Make a topic name usable as a file name component."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", topic).strip("_.")
    return cleaned or "topic"


# --------------------------------------------------------------------------- entry points

_ROOT_KNOWN = (
    "Name",
    "Group",
    "Transports",
    "SOW",
    "TopicMetaData",
    "TransactionLog",
    "Replication",
    "Admin",
    "Actions",
    "MessageMemoryLimit",
    "DataDirectory",
    "MessageTypes",
)


def build_config(
    doc: XmlDocument, base_dir: Path | None, source: Path | None, data_dir: Path | None = None
) -> ServerConfig:
    """The :class:`ServerConfig` of ``doc``; relative paths resolve against ``data_dir``
    (absolute; it replaces ``<DataDirectory>``) when given, else ``<DataDirectory>``, else
    ``base_dir``."""
    root = doc.root
    if root.tag != "AMPSConfig":
        doc.fail(root, f"root element must be <AMPSConfig>, found <{root.tag}>")
    check_message_types(doc)  # a type the server cannot implement, refused by name
    message_types = read_message_types(doc)  # before any reader needs to know the types
    check_elements(doc)  # nothing is accepted and ignored
    base = (base_dir if base_dir is not None else Path.cwd()).expanduser().absolute()
    reader = ConfigReader(doc, base)
    data_dir_text = reader.text(root, "DataDirectory")
    if data_dir is not None:
        reader.data_dir = data_dir
    elif data_dir_text is not None:
        reader.data_dir = reader.path(root, "DataDirectory", data_dir_text)

    transports_elem = reader.single(root, "Transports")
    transports = reader.transports(transports_elem) if transports_elem is not None else ()
    sow_topics = reader.sow_topics(root)
    queues = parse_queues(reader.single(root, "SOW"), fail=doc.fail)
    views = parse_views(reader.single(root, "SOW"), queues, fail=doc.fail)
    sow_views = parse_sow_views(
        reader.single(root, "SOW"),
        sow_topics,
        skip=lambda elem: is_queue_view(elem, queues),
        fail=doc.fail,
    )
    conflated = parse_conflated_topics(reader.single(root, "SOW"), sow_topics, fail=doc.fail)
    txlog_elem = reader.single(root, "TransactionLog")
    txlog = reader.transaction_log(txlog_elem) if txlog_elem is not None else None

    actions: tuple[ActionConfig, ...] = ()
    repl_actions: tuple[ReplicationActionConfig, ...] = ()
    actions_elem = reader.single(root, "Actions")
    if actions_elem is not None:
        actions, repl_actions = reader.actions(actions_elem)
    repl_elem = reader.single(root, "Replication")
    replication = reader.replication(repl_elem, repl_actions) if repl_elem is not None else None
    if replication is None and repl_actions and actions_elem is not None:
        doc.fail(actions_elem, "replication downgrade/upgrade actions need a <Replication>")

    admin_elem = reader.single(root, "Admin")
    admin = reader.admin(admin_elem) if admin_elem is not None else None

    extra = reader.extras(root, _ROOT_KNOWN)
    stats_text = reader.text(root, "SOWStatsInterval")
    if stats_text is not None:  # kept verbatim in extra; checked here, with its line
        reader.convert(reader.child(root, "SOWStatsInterval"), parse_duration, stats_text)
    disk_path = reader.text(root, "MessageDiskPath")
    if disk_path is not None:  # written by the server: re-based on the data directory
        extra["MessageDiskPath"] = str(reader.path(root, "MessageDiskPath", disk_path))
    memory_limit: int | None = None
    memory_text = reader.text(root, "MessageMemoryLimit")
    if memory_text is not None:
        if memory_text.endswith("%"):
            extra["MessageMemoryLimit"] = memory_text  # a share of host memory
        else:
            memory_limit = reader.convert(
                reader.child(root, "MessageMemoryLimit"), parse_size, memory_text
            )

    return ServerConfig(
        name=reader.text(root, "Name") or DEFAULT_SERVER_NAME,
        group=reader.text(root, "Group"),
        transports=transports,
        sow_topics=sow_topics,
        queues=queues,
        views=views,
        sow_views=sow_views,
        conflated_topics=conflated,
        transaction_log=txlog,
        replication=replication,
        admin=admin,
        data_dir=reader.data_dir,
        message_memory_limit=memory_limit,
        actions=actions,
        message_types=message_types,
        extra=MappingProxyType(extra),
        source=source,
    )
