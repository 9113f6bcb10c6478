"""Journal management on a running server: pruning keeps what an active replay still needs,
and compressed journal files stay replayable (seed 000, "Managing Journal Files")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _txlog_support import Inbox, txlog_xml, unique, wait_durable

from ampsclient import Client, Command
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config

CONFIG = txlog_xml(
    "managed",
    """<JournalDirectory>journal</JournalDirectory>
    <JournalSize>16KB</JournalSize>
    <Topic><Name>.*</Name></Topic>""",
)


@pytest.mark.integration
def test_prune_keeps_files_an_active_replay_needs_and_compressed_files_replay(
    tmp_path: Path,
) -> None:
    config = parse_config(CONFIG, base_dir=tmp_path)
    with ServerThread(config, fsync="never") as server:
        journal = server.server.journal
        assert journal is not None
        uri = server.uri("tcp", "json")
        with Client(unique("pub")) as pub, Client(unique("sub")) as sub:
            for client in (pub, sub):
                client.connect(uri)
                client.logon(5000)
            for n in range(2000):
                pub.publish("managed", json.dumps({"n": n, "pad": "x" * 40}))
            pub.flush(10_000)
            wait_durable(server)
            sealed = [s for s in server.call(journal.segments) if s.state == "sealed"]
            assert len(sealed) >= 5

            # a replay from EPOCH, paused before it delivered anything: it needs every file
            box = Inbox()
            cmd = Command("subscribe").set_topic("managed").set_bookmark("0")
            cmd.set_sub_id("held").set_options("pause").add_ack_type("completed")
            sub.execute_async(cmd.set_timeout(5000), box)
            removed = server.run(server.server.prune_journal(0))
            assert removed == []
            assert server.call(lambda: journal.first_index) == 1

            # compression works while the replay is pinned, and the replay reads through it
            compressed = server.run(server.server.compress_journal(0))
            assert len(compressed) == len(sealed)
            assert all(p.name.endswith(".journal.gz") for p in compressed)
            states = {s.state for s in server.call(journal.segments)}
            assert "compressed" in states and "sealed" not in states
            sub.execute_async(Command("subscribe").set_sub_id("held").set_options("resume"))
            box.wait_ack("completed")
            assert [m.json()["n"] for m in box.messages] == list(range(2000))

            # the replay is gone: now the old files can go; what is left still replays
            sub.unsubscribe("held")
            sub.flush(5000)
            removed = server.run(server.server.prune_journal(0))
            assert len(removed) == len(sealed)
            first = server.call(lambda: journal.first_index)
            assert first > 1
            box = Inbox()
            cmd = Command("subscribe").set_topic("managed").set_bookmark("0")
            sub.execute_async(cmd.add_ack_type("completed").set_timeout(5000), box)
            box.wait_ack("completed")
            ns = [m.json()["n"] for m in box.messages]
            assert ns == list(range(first - 1, 2000))
