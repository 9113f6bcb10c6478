"""The replication validation checks of replicated queues (``replication/rules.py``):
``queue``, ``queue_underlying`` (mandatory: the configuration refuses to exclude them) and
``queue_passthrough`` (excludable), and ``LocalQueue`` refused for replication."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub.config import (
    ConfigError,
    DestinationConfig,
    ReplicationConfig,
    ReplicationTopicConfig,
    parse_config,
)
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.replication.rules import (
    InstanceSummary,
    local_queue_problems,
    validate_destination,
)

WORK = ["work", "json", "Queue", ["orders"], None, None]
ALL = ReplicationTopicConfig(".*", "json")


def summary(
    name: str, queues: list[list[Any]], *, onward: Sequence[dict[str, Any]] = ()
) -> InstanceSummary:
    back: dict[str, Any] = {
        "name": "A" if name == "B" else "B",
        "group": "A" if name == "B" else "B",
        "sync": "sync",
        "topics": [[".*", "json", None, []]],
        "passthrough": [],
    }
    return InstanceSummary(name, name, None, [], [back, *onward], queues)


def dest(*topics: ReplicationTopicConfig) -> DestinationConfig:
    return DestinationConfig(name="B", group=None, sync_type="sync", topics=topics)


def checks(problems: list[str]) -> list[str]:
    return sorted(p.split("]")[0][1:] for p in problems)


def test_matching_queues_validate() -> None:
    assert validate_destination(summary("A", [WORK]), dest(ALL), summary("B", [WORK])) == []


def test_queue_missing_downstream() -> None:
    problems = validate_destination(summary("A", [WORK]), dest(ALL), summary("B", []))
    assert checks(problems) == ["queue"]
    assert "queue 'work' here is not a replicated queue on 'B'" in problems[0]


@pytest.mark.parametrize(
    "theirs",
    [
        ["work", "json", "Queue", ["other"], None, None],
        ["work", "json", "Queue", ["orders"], "/x > 1", None],
        ["work", "json", "GroupLocalQueue", ["orders"], None, "B"],
    ],
)
def test_queue_underlying_differs(theirs: list[Any]) -> None:
    problems = validate_destination(summary("A", [WORK]), dest(ALL), summary("B", [theirs]))
    assert checks(problems) == ["queue_underlying"]


def test_initial_owner_must_agree() -> None:
    ours = ["work", "json", "GroupLocalQueue", ["orders"], None, "A"]
    theirs = ["work", "json", "GroupLocalQueue", ["orders"], None, "B"]
    problems = validate_destination(summary("A", [ours]), dest(ALL), summary("B", [theirs]))
    assert checks(problems) == ["queue_underlying"] and "<InitialOwner>" in problems[0]


def test_underlying_topic_must_be_replicated_too() -> None:
    only_queue = ReplicationTopicConfig("work", "json")
    problems = validate_destination(summary("A", [WORK]), dest(only_queue), summary("B", [WORK]))
    assert checks(problems) == ["queue_underlying"]
    assert "not its underlying topic 'orders'" in problems[0]


def test_queue_passthrough_and_its_exclusion() -> None:
    onward: dict[str, Any] = {
        "name": "C",
        "group": "C",
        "sync": "async",
        "topics": [[".*", "json", None, []]],
        "passthrough": [],
    }
    remote = summary("B", [WORK], onward=[onward])
    problems = validate_destination(summary("A", [WORK]), dest(ALL), remote)
    assert checks(problems) == ["queue_passthrough"]
    excluded = ReplicationTopicConfig(".*", "json", exclude_validation=("queue_passthrough",))
    assert validate_destination(summary("A", [WORK]), dest(excluded), remote) == []
    through = dict(onward, passthrough=["^A$"])
    assert (
        validate_destination(
            summary("A", [WORK]), dest(ALL), summary("B", [WORK], onward=[through])
        )
        == []
    )


@pytest.mark.parametrize("check", ["queue", "queue_underlying"])
def test_mandatory_checks_cannot_be_excluded(check: str) -> None:
    xml = f"""<AMPSConfig><Name>A</Name>
<Transports><Transport><Name>r</Name><Type>amps-replication</Type>
<InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory></TransactionLog>
<Replication><Destination><Name>B</Name><SyncType>sync</SyncType>
<Transport><InetAddr>127.0.0.1:1</InetAddr><Type>amps-replication</Type></Transport>
<Topic><Name>.*</Name><MessageType>json</MessageType>
<ExcludeValidation>{check}</ExcludeValidation></Topic></Destination></Replication>
</AMPSConfig>"""
    with pytest.raises(ConfigError, match=f"{check!r} cannot be excluded"):
        parse_config(xml)


def test_local_queue_refused_for_replication(tmp_path: Path) -> None:
    from ampsclient_server_stub.config import default_config

    local = QueueConfig(name="work", message_type="json", kind="LocalQueue")
    base = dataclasses.replace(
        default_config(tcp_port=0, ws_port=0, data_dir=tmp_path), queues=(local,)
    )
    replicated = dataclasses.replace(base, replication=ReplicationConfig(destinations=(dest(ALL),)))
    problems = local_queue_problems(replicated)
    assert len(problems) == 1 and "<LocalQueue> 'work' cannot be replicated" in problems[0]
    elsewhere = dataclasses.replace(
        base,
        replication=ReplicationConfig(
            destinations=(dest(ReplicationTopicConfig("orders", "json")),)
        ),
    )
    assert local_queue_problems(elsewhere) == []
