"""Slow-client offline (spill) files are private: made 0600 with ``O_EXCL|O_NOFOLLOW`` in a
0700 directory of the server's own under ``MessageDiskPath``, never through a planted symbolic
link, and the clean-up removes only the server's own files (issue 31, "Spill files")."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.net.flow import PRIVATE_PREFIX, create_private_file
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

BODY = json.dumps({"pad": "x" * 8000})
DEAD_PID = 2**22 + 12345  # above Linux' pid_max: never a running process


def offline_files(disk: Path) -> list[Path]:
    return sorted(disk.rglob("*.offline")) if disk.exists() else []


def test_spill_files_are_private_and_cleanup_spares_other_files(tmp_path: Path) -> None:
    disk = tmp_path / "offline"
    disk.mkdir()
    # a victim file and symbolic links planted under every name the server used to pick
    # (<client>-<pid>-<connection>-<n>.offline) for the first connections
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    pid = os.getpid()  # the server runs in this process
    for conn in range(1, 4):
        for n in range(1, 3000):
            os.symlink(victim, disk / f"slow-spill-{pid}-{conn}-{n}.offline")
    planted = len(list(disk.iterdir()))
    # other programs' files, one looking like a dead server's stale file
    foreign = disk / f"c-{DEAD_PID}-1-1.offline"
    notes = disk / "notes.offline"
    foreign.write_text("not the server's")
    notes.write_text("not the server's either")
    xml = f"""<AMPSConfig><Name>spill</Name>
      <MessageMemoryLimit>2MB</MessageMemoryLimit><MessageDiskPath>{disk}</MessageDiskPath>
      <MessageDiskLimit>500MB</MessageDiskLimit><ClientMaxCapacity>50%</ClientMaxCapacity>
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      </Transport></Transports></AMPSConfig>"""
    server = ServerThread(parse_config(xml, base_dir=tmp_path), record_all_topics=False).start()
    sub = RawClient(server.server.tcp_port, rcvbuf=4096, timeout=10)
    try:
        sub.send({"c": "logon", "cid": "L", "client_name": "slow-spill", "a": "processed"})
        sub.send({"c": "subscribe", "cid": "S", "t": "t", "a": "processed"})
        acks = 0
        while acks < 2:
            acks += sum(1 for h, _ in sub.read_some(1 << 20, timeout=10) if h.get("c") == "ack")
        with Client("spill-pub") as pub:
            pub.connect(server.uri())
            pub.logon(5000)
            for i in range(600):  # ~5 MB towards a reader that reads nothing
                pub.publish("t", BODY[:-1] + f',"i":{i}}}')
            pub.flush(30_000)
        wait_for(lambda: server.statistics().get("slow_offlined", 0) >= 1, what="offlined")
        ours = [p for p in offline_files(disk) if p.parent != disk]
        assert len(ours) == 1, offline_files(disk)
        spill = ours[0]
        private = spill.parent
        assert private.parent == disk and private.name.startswith(PRIVATE_PREFIX)
        assert stat.S_IMODE(private.lstat().st_mode) == 0o700
        assert stat.S_IMODE(spill.lstat().st_mode) == 0o600
        assert stat.S_ISREG(spill.lstat().st_mode)  # a file, not a link
        assert spill.stat().st_size > 100_000
        assert victim.read_text() == "precious"  # no planted link was followed
        seen: list[int] = []
        while len(seen) < 600:
            for hdr, body in sub.read_some(1 << 20, timeout=10):
                if hdr.get("c") == "p":
                    seen.append(json.loads(body)["i"])
        assert seen == list(range(600))
        wait_for(lambda: not spill.exists(), what="the drained offline file removed")
    finally:
        sub.close()
        server.stop()
    assert victim.read_text() == "precious"
    assert foreign.read_text() == "not the server's"  # the clean-up spared them
    assert notes.exists()
    assert not any(p.name.startswith(PRIVATE_PREFIX) for p in disk.iterdir())  # ours is gone
    assert len(list(disk.iterdir())) == planted + 2


def test_create_private_file_refuses_a_planted_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "x.offline"
    link.symlink_to(target)
    with pytest.raises(FileExistsError):
        create_private_file(link)
    assert target.read_text() == "keep"
    with create_private_file(tmp_path / "new.offline") as handle:
        handle.write(b"ok")
    assert stat.S_IMODE((tmp_path / "new.offline").stat().st_mode) == 0o600
