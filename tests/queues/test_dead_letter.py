"""Dead letters over real sockets: a queue message expired by MaxDeliveries, MaxCancels,
Expiration or an ``expire`` acknowledgement is published by the
``amps-action-on-sow-expire-message`` + ``amps-action-do-publish-message`` action to the
dead-letter topic, once, with the documented context (``AMPS_DATA``, ``AMPS_REASON``...);
a subscriber of that topic sees it; options that would not work are refused by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer, bodies, publish, queue_config

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.config_model import ActionConfig, ActionStep
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.queues.dead_letter import (
    DO_PUBLISH_MODULE,
    ON_SOW_EXPIRE_MODULE,
    expire_actions,
)
from ampsclient_server_stub.security.users import add_user
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

DATA = (
    '{"message":{{AMPS_DATA}},"reason":"{{AMPS_REASON}}","topic":"{{AMPS_TOPIC}}",'
    '"length":{{AMPS_DATA_LENGTH}},"cid":"{{AMPS_CORRELATION_ID}}"}'
)


def action(**on: str) -> ActionConfig:
    return ActionConfig(
        on=(ActionStep(ON_SOW_EXPIRE_MODULE, {"Topic": "work", "MessageType": "json", **on}),),
        do=(
            ActionStep(
                DO_PUBLISH_MODULE, {"Topic": "dead-letters", "MessageType": "json", "Data": DATA}
            ),
        ),
    )


def run(tmp_path: Path, *, on: dict[str, str] | None = None, **fields: Any) -> ServerThread:
    fields.setdefault("max_per_subscription_backlog", 50)
    cfg = queue_config(tmp_path, QueueConfig(name="work", message_type="json", **fields))
    cfg = dataclasses.replace(cfg, actions=(action(**(on or {})),))
    return ServerThread(cfg, fsync="never").start()


def letters(dlq: Consumer, count: int) -> list[dict[str, Any]]:
    """Wait for ``count`` dead letters in all, then prove no more came (a flush marker)."""
    dlq.wait_deliveries(count)
    dlq.sync()
    got = bodies(dlq.deliveries)
    assert len(got) == count, got
    return got


def test_forced_expire_publishes_the_message_with_its_reason(tmp_path: Path) -> None:
    server = run(tmp_path)
    try:
        dlq = Consumer(server)
        dlq.subscribe("dead-letters")
        c = Consumer(server)
        c.subscribe("work", o="max_backlog=2")
        publish(server, "work", [{"n": 0}, {"n": 1}])
        (first, _), (second, _) = c.sync()
        c.ack("work", first["bm"], o="expire", a="processed")
        (letter,) = letters(dlq, 1)
        body = b'{"n": 0}'
        assert letter == {
            "message": {"n": 0},
            "reason": "forced_expire",
            "topic": "work",
            "length": len(body),
            "cid": "",
        }
        c.ack("work", second["bm"], a="processed")  # a plain ack is no expiration
        assert letters(dlq, 1) == [letter]
    finally:
        server.stop()


def test_max_cancels_publishes_on_the_last_cancel_only(tmp_path: Path) -> None:
    server = run(tmp_path, max_cancels=2)
    try:
        dlq = Consumer(server)
        dlq.subscribe("dead-letters")
        c = Consumer(server)
        c.subscribe("work", o="max_backlog=1")
        publish(server, "work", [{"n": 7}])
        ((hdr, _),) = c.sync()
        c.ack("work", hdr["bm"], o="cancel", a="processed")
        assert letters(dlq, 0) == []  # the first cancel returns it
        ((again, _),) = c.wait_deliveries(2)[1:]
        assert again["bm"] == hdr["bm"]
        c.ack("work", again["bm"], o="cancel", a="processed")
        (letter,) = letters(dlq, 1)
        assert (letter["message"], letter["reason"]) == ({"n": 7}, "max_cancels")
        assert c.sync() == []  # expired: never delivered again
    finally:
        server.stop()


def test_max_deliveries_publishes_after_the_last_failed_delivery(tmp_path: Path) -> None:
    server = run(tmp_path, max_deliveries=2)
    try:
        dlq = Consumer(server)
        dlq.subscribe("dead-letters")
        publish(server, "work", [{"n": 3}])
        for attempt in range(2):
            c = Consumer(server)
            c.subscribe("work", o="max_backlog=1")
            assert bodies(c.wait_deliveries(1)) == [{"n": 3}]
            assert letters(dlq, 0) == [] or attempt == 1
            c.close()  # the lease ends without an ack: a delivery that did not succeed
        (letter,) = letters(dlq, 1)
        assert (letter["message"], letter["reason"]) == ({"n": 3}, "max_deliveries")
        late = Consumer(server)
        late.subscribe("work", o="max_backlog=1")
        assert late.sync() == []
    finally:
        server.stop()


def test_lease_expiry_counts_toward_max_deliveries(tmp_path: Path) -> None:
    server = run(tmp_path, lease_period=0.2, max_deliveries=2)
    try:
        dlq = Consumer(server)
        dlq.subscribe("dead-letters")
        c = Consumer(server)
        c.subscribe("work", o="max_backlog=1")
        publish(server, "work", [{"n": 4}])
        first, second = c.wait_deliveries(2)  # never acknowledged: the lease runs out twice
        assert first[0]["bm"] == second[0]["bm"]
        (letter,) = letters(dlq, 1)
        assert (letter["message"], letter["reason"]) == ({"n": 4}, "max_deliveries")
        assert c.sync() == []
    finally:
        server.stop()


def test_expiration_publishes_time_limit_with_the_correlation_id(tmp_path: Path) -> None:
    server = run(tmp_path, expiration=0.2)
    try:
        dlq = Consumer(server)
        dlq.subscribe("dead-letters")
        with RawClient(server.tcp_port) as raw:
            raw.logon("pub-x")
            raw.send({"c": "p", "t": "work", "x": "order-42"}, b'{"n": 9}')
            raw.send({"c": "flush", "cid": "f", "a": "processed"})
            raw.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "f")
        (letter,) = letters(dlq, 1)
        assert letter["reason"] == "time_limit"
        assert (letter["message"], letter["cid"]) == ({"n": 9}, "order-42")
    finally:
        server.stop()


def test_many_expirations_nothing_lost_and_journaled(tmp_path: Path) -> None:
    server = run(tmp_path)
    try:
        dlq = Consumer(server)
        dlq.subscribe("dead-letters")
        c = Consumer(server)
        c.subscribe("work", o="max_backlog=40")
        publish(server, "work", [{"n": i} for i in range(40)])
        got = c.sync()
        assert len(got) == 40
        for hdr, body in got:
            n = json.loads(body)["n"]
            c.ack("work", hdr["bm"], o="expire" if n % 2 else None)
        c.sync()
        dead = letters(dlq, 20)
        assert sorted(d["message"]["n"] for d in dead) == list(range(1, 40, 2))
        assert {d["reason"] for d in dead} == {"forced_expire"}
        # the action's publishes are journaled like external ones: a replay has them all
        replay = Consumer(server)
        replay.subscribe("dead-letters", bm="0", sub_id="r")
        replayed = bodies(replay.wait_deliveries(20))
        assert sorted(d["message"]["n"] for d in replayed) == list(range(1, 40, 2))
        assert replay.sync() == []
    finally:
        server.stop()


def test_reason_option_selects_the_reasons(tmp_path: Path) -> None:
    server = run(tmp_path, on={"Reason": "max_cancels"}, max_cancels=1)
    try:
        dlq = Consumer(server)
        dlq.subscribe("dead-letters")
        c = Consumer(server)
        c.subscribe("work", o="max_backlog=2")
        publish(server, "work", [{"n": 0}, {"n": 1}])
        (a, _), (b, _) = c.sync()
        c.ack("work", a["bm"], o="expire", a="processed")  # forced_expire: not selected
        c.ack("work", b["bm"], o="cancel", a="processed")  # max_cancels
        (letter,) = letters(dlq, 1)
        assert (letter["message"], letter["reason"]) == ({"n": 1}, "max_cancels")
    finally:
        server.stop()


def test_a_dead_letter_queue_hands_each_letter_to_one_consumer(tmp_path: Path) -> None:
    work = QueueConfig(name="work", message_type="json", max_per_subscription_backlog=10)
    retry = QueueConfig(
        name="retry",
        message_type="json",
        underlying=("dead-letters",),
        max_per_subscription_backlog=10,
    )
    cfg = dataclasses.replace(queue_config(tmp_path, work, retry), actions=(action(),))
    server = ServerThread(cfg, fsync="never").start()
    try:
        a, b = Consumer(server), Consumer(server)
        a.subscribe("retry", o="max_backlog=10")
        b.subscribe("retry", o="max_backlog=10")
        c = Consumer(server)
        c.subscribe("work", o="max_backlog=10")
        publish(server, "work", [{"n": i} for i in range(6)])
        for hdr, _body in c.sync():
            c.ack("work", hdr["bm"], o="expire")
        c.sync()  # the letters were published while the acks were handled, before this
        a.sync()
        b.sync()
        seen = sorted(d["message"]["n"] for d in bodies(a.deliveries + b.deliveries))
        assert seen == list(range(6))  # each letter to exactly one consumer
        for consumer in (a, b):
            for hdr, _body in consumer.deliveries:
                consumer.ack("retry", hdr["bm"], a="processed")
        stats = server.call(lambda: server.broker.queues.statistics()["retry"])  # type: ignore[union-attr]
        assert (stats["queue_depth"], stats["backlog"]) == (0, 0)
    finally:
        server.stop()


def test_letters_after_a_restart_get_new_bookmarks(tmp_path: Path) -> None:
    seen: list[str] = []
    for round_ in range(2):
        server = run(tmp_path)
        try:
            c = Consumer(server)
            c.subscribe("work", o="max_backlog=1")
            publish(server, "work", [{"round": round_}])
            ((hdr, _),) = c.wait_deliveries(1)
            c.ack("work", hdr["bm"], o="expire", a="processed")
            replay = Consumer(server)
            replay.subscribe("dead-letters", bm="0", sub_id="r")
            got = replay.wait_deliveries(round_ + 1)
            assert replay.sync() == []
            assert [d["message"]["round"] for d in bodies(got)] == list(range(round_ + 1))
            seen = [h["bm"] for h, _b in got]
        finally:
            server.stop()
    assert len(set(seen)) == 2  # the second run's letter did not reuse the first's sequence


XML = """<AMPSConfig><Name>dl</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><Protocol>amps</Protocol>
    <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
  <TransactionLog><JournalDirectory>j</JournalDirectory>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>dead-letters</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW><Queue><Name>work</Name><MessageType>json</MessageType>
    <UnderlyingTopic>orders</UnderlyingTopic><MaxCancels>1</MaxCancels></Queue></SOW>
  <Actions><Action>
    <On><Module>amps-action-on-sow-expire-message</Module>
      <Options><Topic>work</Topic><MessageType>json</MessageType>{on}</Options></On>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>{topic}</Topic><MessageType>json</MessageType>
        <Data>{data}</Data>{do}</Options></Do>
  </Action></Actions></AMPSConfig>"""


def xml(
    *,
    on: str = "",
    do: str = "",
    topic: str = "dead-letters",
    data: str = DATA.replace('"', "&quot;"),
) -> str:
    return XML.format(on=on, do=do, topic=topic, data=data)


def test_the_xml_configuration_runs(tmp_path: Path) -> None:
    cfg = parse_config(
        xml(on="<Reason>max_cancels,forced_expire</Reason>", topic="{{AMPS_TOPIC}}-dead"),
        base_dir=tmp_path,
    )
    server = ServerThread(cfg, fsync="never").start()
    try:
        dlq = Consumer(server)
        dlq.subscribe("work-dead")
        c = Consumer(server)
        c.subscribe("work", o="max_backlog=1")
        publish(server, "orders", [{"id": 1}])
        ((hdr, _),) = c.sync()
        c.ack("work", hdr["bm"], o="cancel", a="processed")
        (letter,) = letters(dlq, 1)
        assert (letter["message"], letter["reason"]) == ({"id": 1}, "max_cancels")
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"on": "<Reason>too_old</Reason>"}, r"<Reason> 'too_old': unknown reason\(s\) too_old"),
        ({"on": "<Filter>/a=1</Filter>"}, r"<Filter> in <Options> is not supported"),
        ({"on": "<Name>x</Name>"}, r"on-sow-expire-message option <Name> is not supported"),
        ({"data": "{{AMPS_USER}}"}, r"context variable \{\{AMPS_USER\}\} is not set"),
        ({"do": "<Delta>true</Delta>"}, r"<Delta> in <Options> is not supported"),
    ],
)
def test_refused_by_name(tmp_path: Path, kwargs: dict[str, str], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        expire_actions(parse_config(xml(**kwargs), base_dir=tmp_path))


def test_refused_trigger_on_a_non_queue_and_publish_without_the_trigger(tmp_path: Path) -> None:
    cfg = parse_config(xml(), base_dir=tmp_path)
    on, do = cfg.actions[0].on[0], cfg.actions[0].do[0]
    not_a_queue = ActionStep(on.module, {**on.options, "Topic": "orders"})
    bad = dataclasses.replace(cfg, actions=(ActionConfig(on=(not_a_queue,), do=(do,)),))
    with pytest.raises(ConfigError, match=r"<Topic> 'orders' \(json\) is not a queue"):
        ServerThread(bad, fsync="never").start()
    scheduled = ActionStep("amps-action-on-schedule", {"Every": "1s"})
    bad = dataclasses.replace(cfg, actions=(ActionConfig(on=(scheduled,), do=(do,)),))
    with pytest.raises(ConfigError, match="runs on exactly one <On> amps-action-on-sow-expire"):
        expire_actions(bad)
    other = ActionStep("amps-action-do-remove-journal", {"Age": "1d"})
    bad = dataclasses.replace(cfg, actions=(ActionConfig(on=(on,), do=(do, other)),))
    with pytest.raises(ConfigError, match="runs only amps-action-do-publish-message steps"):
        expire_actions(bad)


def test_the_action_publishes_without_entitlements(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    add_user(users, "worker", "pw", read=[".*"], write=["^orders$", "^work$"], n=1024)
    ent = (
        "<Entitlement><Module>amps-default-entitlement-module</Module>"
        f"<Options><UsersFile>{users}</UsersFile></Options></Entitlement>"
    )
    text = xml().replace("</AMPSConfig>", ent + "</AMPSConfig>")
    server = ServerThread(parse_config(text, base_dir=tmp_path), fsync="never").start()
    try:
        dlq = Consumer(server, name="dlq")
        dlq.raw.close()
        dlq.raw = RawClient(server.tcp_port)
        dlq.raw.logon("dlq-w", user_id="worker", pw="pw")
        dlq.subscribe("dead-letters")
        c = Consumer(server)
        c.raw.close()
        c.raw = RawClient(server.tcp_port)
        c.raw.logon("worker-1", user_id="worker", pw="pw")
        c.subscribe("work", o="max_backlog=1")
        with RawClient(server.tcp_port) as raw:  # the worker may not write dead-letters itself
            raw.logon("pub", user_id="worker", pw="pw")
            raw.send({"c": "p", "t": "dead-letters", "cid": "p1", "a": "processed"}, b"{}")
            ack, _ = raw.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "p1")
            assert ack["status"] == "failure", ack
            raw.send({"c": "p", "t": "orders", "cid": "p2", "a": "processed"}, b'{"id": 5}')
            ack, _ = raw.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "p2")
            assert ack["status"] == "success", ack
        ((hdr, _),) = c.wait_deliveries(1)
        c.ack("work", hdr["bm"], o="cancel", a="processed")  # MaxCancels 1
        (letter,) = letters(dlq, 1)
        assert (letter["message"], letter["reason"]) == ({"id": 5}, "max_cancels")
    finally:
        server.stop()


@pytest.mark.interop
def test_official_client_consumer_and_dead_letter_subscriber(tmp_path: Path) -> None:
    """The official client's auto-ack cancels a message whose handler raises; on the last
    cancel (MaxCancels 2) the letter reaches an official subscriber of the dead-letter topic."""
    amps: Any = pytest.importorskip("AMPS")
    server = run(tmp_path, max_cancels=2)
    uri = server.uri("tcp", "json")
    seen: list[int] = []
    dead: list[dict[str, Any]] = []
    worker = amps.Client("official-worker")
    watcher = amps.Client("official-watcher")

    def work(message: Any) -> None:
        if message.get_command() in ("p", "publish"):
            n = json.loads(message.get_data())["n"]
            seen.append(n)
            if n == 1:
                raise RuntimeError("cannot process 1")  # auto-ack turns this into a cancel

    def letter(message: Any) -> None:
        if message.get_command() in ("p", "publish"):
            dead.append(json.loads(message.get_data()))

    try:
        watcher.connect(uri)
        watcher.logon()
        watcher.execute_async(amps.Command("subscribe").set_topic("dead-letters"), letter)
        worker.connect(uri)
        worker.logon()
        worker.set_auto_ack(True)
        worker.execute_async(
            amps.Command("subscribe").set_topic("work").set_options("max_backlog=1"), work
        )
        publish(server, "work", [{"n": n} for n in range(3)])
        wait_for(
            lambda: len(dead) == 1 and sorted(seen) == [0, 1, 1, 2], 10, "the letter and the rest"
        )
        assert (dead[0]["message"], dead[0]["reason"]) == ({"n": 1}, "max_cancels")

        def stats() -> tuple[int, int, int]:
            s = server.call(lambda: server.broker.queues.statistics()["work"])  # type: ignore[union-attr]
            return s["queue_depth"], s["acked"], s["expired"]

        wait_for(lambda: stats() == (0, 2, 1), 10, "0 and 2 acknowledged (after their handlers)")
        publish(server, "dead-letters", [{"marker": True}])  # nothing else came before it
        wait_for(lambda: len(dead) == 2, 10, "the marker")
        assert dead[1] == {"marker": True}
    finally:
        worker.disconnect()
        watcher.disconnect()
        server.stop()
