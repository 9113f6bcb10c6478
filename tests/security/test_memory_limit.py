"""Issue #32, memory pressure: a server started inside a memory-limited cgroup, with the zero
configuration, while a consumer stalls. Its default ``MessageMemoryLimit`` follows what the
process may use (10% of the cgroup's limit, not of the host's memory), so the stalled
consumer is offlined to disk long before the kernel would kill the server for memory; the
consumer then gets every message, in order. Skipped where this machine cannot make a cgroup."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.security.policy import _cgroup_memory_limit
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

CGROUP_ROOT = Path("/sys/fs/cgroup")
LIMIT = 100 * 1024 * 1024
BODY = "x" * 8000
COUNT = 15_000
"""120 MB towards a reader that reads nothing: with the server's own ~50 MB, over the
cgroup's 100 MB (held in memory, it would get the server killed)."""


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A new memory cgroup (v2 or v1) limited to ``limit`` bytes; yields its ``cgroup.procs``."""
    name = f"ampsclient-test-{uuid.uuid4().hex[:8]}"
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        group, limit_file = CGROUP_ROOT / name, "memory.max"
    elif (CGROUP_ROOT / "memory").is_dir():
        group, limit_file = CGROUP_ROOT / "memory" / name, "memory.limit_in_bytes"
    else:
        pytest.skip("no cgroup memory controller here")
    try:
        group.mkdir()
        (group / limit_file).write_text(str(limit))
    except OSError as exc:
        with contextlib.suppress(OSError):
            group.rmdir()
        pytest.skip(f"cannot make a memory cgroup here ({exc})")
    try:
        yield group / "cgroup.procs"
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()


class CgroupServer(ServerProcess):
    """A server process that moves itself into a cgroup before it starts Python."""

    def __init__(self, procs: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.procs = procs

    def command(self) -> list[str]:
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs), *super().command()]


def test_the_cgroup_limit_is_read(tmp_path: Path) -> None:
    proc_cgroup = tmp_path / "cgroup"
    root = tmp_path / "fs"
    (root / "memory" / "a" / "b").mkdir(parents=True)
    (root / "memory" / "a" / "b" / "memory.limit_in_bytes").write_text("268435456\n")
    (root / "c").mkdir()
    (root / "c" / "memory.max").write_text("max\n")
    proc_cgroup.write_text("4:memory:/a/b\n3:cpu:/x\n0::/c\n")
    assert _cgroup_memory_limit(proc_cgroup, root) == 256 * 1024 * 1024
    proc_cgroup.write_text("0::/c\n")
    assert _cgroup_memory_limit(proc_cgroup, root) is None  # "max": no limit


def test_a_stalled_consumer_does_not_get_the_server_killed(tmp_path: Path) -> None:
    with memory_cgroup(LIMIT) as procs:
        server = CgroupServer(procs, data_dir=tmp_path / "data", extra_args=["--no-txlog"])
        server.start()
        sub = RawClient(server.tcp_port, rcvbuf=4096, timeout=10)
        try:
            assert server.pid is not None
            assert str(server.pid) in procs.read_text().split()  # inside the cgroup
            sub.logon("stalled")
            sub.send({"c": "subscribe", "cid": "S", "t": "t", "a": "processed"})
            while not any(h.get("c") == "ack" for h, _ in sub.read_some(1 << 16, timeout=10)):
                pass
            with Client("pub") as pub:
                pub.connect(f"tcp://127.0.0.1:{server.tcp_port}/amps/json")
                pub.logon(5000)
                for i in range(COUNT):
                    pub.publish("t", json.dumps({"i": i, "pad": BODY}))
                pub.flush(120_000)
            assert server.running, "".join(server.stderr_lines[-20:])
            seen = 0
            while seen < COUNT:
                for hdr, body in sub.read_some(1 << 20, timeout=30):
                    if hdr.get("c") == "p":
                        assert json.loads(body)["i"] == seen  # every message, in order
                        seen += 1
            assert server.running
            assert server.stop() == 0  # a clean stop logs the statistics
            (line,) = [x for x in server.stderr_lines if "statistics {" in x]
            stats = json.loads(line.split("statistics ", 1)[1])
            assert stats["slow_offlined"] >= 1 and stats.get("slow_disconnected", 0) == 0
        finally:
            sub.close()
            server.kill()
