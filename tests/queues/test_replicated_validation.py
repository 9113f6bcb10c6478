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
    queue_config_problems,
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
    problems = queue_config_problems(replicated)
    assert len(problems) == 1 and "<LocalQueue> 'work' cannot be replicated" in problems[0]
    elsewhere = dataclasses.replace(
        base,
        replication=ReplicationConfig(
            destinations=(dest(ReplicationTopicConfig("orders", "json")),)
        ),
    )
    assert queue_config_problems(elsewhere) == []


def _xml(queue: str, topic: str, admin_port: int) -> str:
    return f"""<AMPSConfig><Name>A</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
<InetAddr>127.0.0.1:0</InetAddr></Transport>
<Transport><Name>r</Name><Type>amps-replication</Type>
<InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<Admin><InetAddr>127.0.0.1:{admin_port}</InetAddr></Admin>
<TransactionLog><JournalDirectory>j</JournalDirectory>
<Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>{queue}</SOW>
<Replication><Destination><Name>B</Name><SyncType>async</SyncType>
<Transport><InetAddr>127.0.0.1:1</InetAddr><Type>amps-replication</Type></Transport>
<Topic><Name>{topic}</Name><MessageType>json</MessageType></Topic></Destination></Replication>
</AMPSConfig>"""


LOCAL = (
    "<LocalQueue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>orders</UnderlyingTopic></LocalQueue>"
)


def test_a_replicated_local_queue_stops_the_start(tmp_path: Path) -> None:
    from ampsclient_server_stub import ServerThread
    from ampsclient_server_stub.harness import free_port

    config = parse_config(_xml(LOCAL, ".*", free_port()), base_dir=tmp_path)
    with pytest.raises(ConfigError, match="<LocalQueue> 'work' cannot be replicated"):
        ServerThread(config, fsync="never").start()


def test_proxied_transfer_admin_errors(tmp_path: Path) -> None:
    import json
    import urllib.error
    import urllib.request

    from ampsclient_server_stub import ServerThread
    from ampsclient_server_stub.harness import free_port

    def get(path: str) -> tuple[int, Any]:
        listing = f"http://127.0.0.1:{port}/amps/administrator"
        with urllib.request.urlopen(listing, timeout=10) as r:
            token = json.loads(r.read())["token"]  # actions carry the admin token
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", headers={"X-AMPS-Admin-Token": token}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    port = free_port()
    config = parse_config(_xml(LOCAL, "orders", port), base_dir=tmp_path)  # not replicated
    server = ServerThread(config, fsync="never").start()
    try:
        base = "/amps/administrator/queues"
        status, text = get(f"{base}/nope/enable_proxied_transfer")
        assert status == 404 and "no queue 'nope'" in text
        status, text = get(f"{base}/work/enable_proxied_transfer")
        assert status == 409 and "not a replicated queue" in text
        status, text = get(f"{base}/work/frobnicate_proxied_transfer")
        assert status == 404
    finally:
        server.stop()
    replicated = "<Queue>" + LOCAL[len("<LocalQueue>") : -len("</LocalQueue>")] + "</Queue>"
    port = free_port()
    config = parse_config(_xml(replicated, ".*", port), base_dir=tmp_path / "q")
    server = ServerThread(config, fsync="never").start()
    try:
        assert get(f"{base}/work/enable_proxied_transfer") == (
            200,
            {"action": "enable_proxied_transfer", "queue": "work", "result": True},
        )
        assert get(f"{base}/work/enable_proxied_transfer")[1]["result"] is False  # already on
        assert get("/amps/instance/queues/work")[1]["proxied_transfer"] is True
        assert get(f"{base}/work/disable_proxied_transfer")[1]["result"] is True
        assert get("/amps/instance/queues/work")[1]["proxied_transfer"] is False
    finally:
        server.stop()
