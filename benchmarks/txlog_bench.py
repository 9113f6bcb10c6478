"""Transaction-log figures end to end, against the reference server in its own process.

1. **Durable publish**: our ``HAClient`` (memory publish store) publishes N messages to a server
   with ``--fsync always``; the clock stops when ``publish_flush`` returns (every message
   acknowledged as persisted, i.e. fsynced). Reports msgs/s and the server's fsyncs per 100k
   messages (its ``statistics`` line, logged at shutdown).
2. **Replay from EPOCH**: a journal of R records is written with the journal API, a server is
   started on it, and a minimal raw-socket subscriber (it only counts frames) replays it from
   EPOCH to the ``completed`` ack. Reports msgs/s and the server's peak RSS (VmHWM).
3. **Seek**: time from sending a bookmark subscription (a bookmark, then a timestamp, from the
   middle of the log) to its first message, median of several, for each log size.

Usage::

    python benchmarks/txlog_bench.py                 # 200k durable publishes; logs of 100k, 1M
    python benchmarks/txlog_bench.py --quick         # smaller: 50k publishes; logs of 20k, 200k

Sizes are arguments (``--publish N``, ``--logs 100000,1000000``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ampsclient.protocol.bookmarks import publisher_id_for, timestamp_bookmark
from ampsclient.protocol.header import decode_header, encode_header
from ampsclient.sync import HAClient
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.harness import ServerProcess

BODY = b'{"id":12345,"sym":"ABCD","px":101.25,"qty":300,"side":"B"}'
_LEN = struct.Struct(">I")


def _proc_status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _server_stats(server: ServerProcess) -> dict[str, Any]:
    """SIGTERM the server and read the ``statistics {...}`` line it logs while stopping."""
    server.stop()
    for line in reversed(server.stderr_lines):
        if " statistics {" in line:
            return dict(json.loads(line[line.index("{") :]))
    return {}


# --------------------------------------------------------------------------- 1. durable publish


def durable_publish(count: int, workdir: Path) -> dict[str, float]:
    with ServerProcess(data_dir=workdir / "durable", extra_args=["--fsync", "always"]) as server:
        client = HAClient("bench-durable")
        client.get_server_chooser().add(server.uri())
        client.connect_and_logon()
        publish = client.publish
        start = time.perf_counter()
        for _ in range(count):
            publish("orders", BODY)
        sent = time.perf_counter() - start
        client.publish_flush(600_000)
        took = time.perf_counter() - start
        client.close()
        stats = _server_stats(server)
    appends = stats.get("journal_appends", 0) or count
    fsyncs = stats.get("journal_fsyncs", 0)
    return {
        "msgs_per_s": count / took,
        "client_publish_loop_msgs_per_s": count / sent,
        "fsyncs_per_100k": fsyncs * 100_000 / appends,
        "seconds": took,
    }


def durable_publish_raw(count: int, workdir: Path) -> dict[str, float]:
    """The server's side alone: pre-built HAClient-shaped frames from a raw socket, as fast as
    the server takes them, until the persisted ack covers the last one."""
    with ServerProcess(data_dir=workdir / "raw", extra_args=["--fsync", "always"]) as server:
        sock = socket.create_connection(("127.0.0.1", server.tcp_port))
        logon = encode_header({"c": "logon", "cid": "l", "client_name": "bench-raw"})
        sock.sendall(_LEN.pack(len(logon)) + logon)
        base = time.time_ns() // 1000 * 1000
        chunks = []
        for start in range(0, count, 10_000):
            parts = []
            for seq in range(base + start + 1, base + min(count, start + 10_000) + 1):
                frame = b'{"c":"p","s":%d,"a":"persisted","t":"orders"}' % seq + BODY
                parts.append(_LEN.pack(len(frame)) + frame)
            chunks.append(b"".join(parts))
        last = b'"s":%d,' % (base + count)
        done = threading.Event()

        def read_acks() -> None:
            tail = b""
            while not done.is_set():
                data = sock.recv(1 << 16)
                if not data:
                    return
                if last in tail[-64:] + data:
                    done.set()
                tail = data

        reader = threading.Thread(target=read_acks, daemon=True)
        start_t = time.perf_counter()
        reader.start()
        for chunk in chunks:
            sock.sendall(chunk)
        done.wait(600)
        took = time.perf_counter() - start_t
        sock.close()
        stats = _server_stats(server)
    appends = stats.get("journal_appends", 0) or count
    return {
        "msgs_per_s": count / took,
        "fsyncs_per_100k": stats.get("journal_fsyncs", 0) * 100_000 / appends,
        "seconds": took,
    }


# --------------------------------------------------------------------------- 2./3. replay, seek


def build_log(directory: Path, records: int) -> list[tuple[str, int]]:
    """Write ``records`` records to a journal (as the zero-config server records them);
    return ``(bookmark, timestamp_us)`` of a few records in the middle for seeking."""
    pid = publisher_id_for("bench-publisher")
    journal = Journal(directory, fsync="never")
    append = journal.append
    fields = {"mt": "json"}
    t0 = time.time_ns() // 1000 - records  # one record per µs, ending now
    for seq in range(1, records + 1):
        append(
            publisher_id=pid,
            sequence=seq,
            topic="orders",
            command="p",
            payload=BODY,
            fields=fields,
            timestamp=t0 + seq,
        )
    journal.close()
    middle = records // 2
    return [(f"{pid}|{middle + k * 997}|", t0 + middle + k * 997) for k in range(7)]


class RawSubscriber:
    """A raw-socket subscriber that does as little as possible (counts frames)."""

    def __init__(self, port: int, name: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.send({"c": "logon", "cid": "l", "client_name": name, "a": "processed"})
        self.next_frame()  # the logon ack

    def send(self, fields: dict[str, Any]) -> None:
        payload = encode_header(fields)
        self.sock.sendall(_LEN.pack(len(payload)) + payload)

    def next_frame(self) -> bytes:
        while True:
            if len(self.buf) >= 4:
                (size,) = _LEN.unpack_from(self.buf)
                if len(self.buf) >= 4 + size:
                    frame = self.buf[4 : 4 + size]
                    self.buf = self.buf[4 + size :]
                    return frame
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    def count_until_completed(self) -> int:
        """Count ``p`` frames until the completed ack; returns the count."""
        count = 0
        buf = self.buf
        pos = 0
        recv = self.sock.recv
        while True:
            n = len(buf)
            while pos + 4 <= n:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                end = pos + 4 + size
                if end > n:
                    break
                if buf[pos + 4 : pos + 12] == b'{"c":"p"':
                    count += 1
                elif b'"completed"' in buf[pos + 4 : end]:
                    self.buf = buf[end:]
                    return count
                pos = end
            chunk = recv(4 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf = buf[pos:] + chunk
            pos = 0

    def close(self) -> None:
        self.sock.close()


def replay_and_seek(records: int, workdir: Path, seeks: int = 5) -> dict[str, float]:
    data = workdir / f"log-{records}"
    t = time.perf_counter()
    points = build_log(data / "journal", records)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    with ServerProcess(data_dir=data, extra_args=["--fsync", "never"]) as server:
        startup_s = time.perf_counter() - t
        assert server.pid is not None
        rss_start = _proc_status(server.pid, "VmRSS")
        sub = RawSubscriber(server.tcp_port, "bench-replay")
        start = time.perf_counter()
        sub.send({"c": "subscribe", "cid": "r", "t": "orders", "bm": "0", "a": "completed"})
        got = sub.count_until_completed()
        took = time.perf_counter() - start
        sub.close()
        assert got == records, (got, records)
        peak = _proc_status(server.pid, "VmHWM")
        waits = -1
        # seeks: time to the first message of a subscription starting in the middle
        by_bookmark: list[float] = []
        by_time: list[float] = []
        for i in range(seeks):
            for kind, out in (("bm", by_bookmark), ("ts", by_time)):
                bm, ts = points[i % len(points)]
                start_at = bm if kind == "bm" else timestamp_bookmark(ts / 1_000_000)
                probe = RawSubscriber(server.tcp_port, f"bench-seek-{kind}-{i}")
                t0 = time.perf_counter()
                probe.send({"c": "subscribe", "cid": "s", "t": "orders", "bm": start_at})
                frame = probe.next_frame()
                out.append(time.perf_counter() - t0)
                assert frame.startswith(b'{"c":"p"'), frame[:80]
                _hdr, _ = decode_header(frame)
                probe.close()
        waits = _server_stats(server).get("replay_waits", -1)
    return {
        "replay_waits": waits,
        "records": records,
        "build_s": build_s,
        "startup_s": startup_s,
        "replay_msgs_per_s": records / took,
        "replay_s": took,
        "rss_start_mib": rss_start / 1024,
        "peak_rss_mib": peak / 1024,
        "seek_bookmark_ms": statistics.median(by_bookmark) * 1000,
        "seek_timestamp_ms": statistics.median(by_time) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--publish", type=int, default=None, help="durable publishes")
    parser.add_argument("--logs", default=None, help="log sizes, comma separated")
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--skip-publish", action="store_true")
    parser.add_argument("--skip-replay", action="store_true")
    args = parser.parse_args()
    count = args.publish or (50_000 if args.quick else 200_000)
    logs = [
        int(x)
        for x in (args.logs or ("20000,200000" if args.quick else "100000,1000000")).split(",")
    ]
    print(f"cpus={os.cpu_count()} python={sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="txlog-bench-") as tmp:
        workdir = Path(tmp)
        if not args.skip_publish:
            r = durable_publish(count, workdir)
            print(
                f"durable publish  n={count:,}: {r['msgs_per_s']:,.0f} msgs/s end to end "
                f"(client loop {r['client_publish_loop_msgs_per_s']:,.0f}/s), "
                f"{r['fsyncs_per_100k']:,.1f} fsyncs per 100k, {r['seconds']:.2f} s"
            )
            r = durable_publish_raw(count, workdir)
            print(
                f"durable publish  n={count:,} from a raw socket (server side alone): "
                f"{r['msgs_per_s']:,.0f} msgs/s, {r['fsyncs_per_100k']:,.1f} fsyncs per 100k"
            )
        if not args.skip_replay:
            for records in logs:
                r = replay_and_seek(records, workdir)
                print(
                    f"log {records:>9,}: replay {r['replay_msgs_per_s']:,.0f} msgs/s "
                    f"({r['replay_s']:.2f} s), server RSS {r['rss_start_mib']:.0f} MiB at start, "
                    f"peak {r['peak_rss_mib']:.0f} MiB; startup {r['startup_s']:.2f} s; "
                    f"seek to first message: bookmark {r['seek_bookmark_ms']:.2f} ms, "
                    f"timestamp {r['seek_timestamp_ms']:.2f} ms; {r['replay_waits']} backlog waits"
                )


if __name__ == "__main__":
    main()
