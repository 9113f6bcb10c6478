"""The ``ampsclient`` command run as a real process against a real server process."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from cli_helpers import ServerProcess, cli, start_cli

from ampsclient import Client

pytestmark = pytest.mark.integration


def lines_of(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def assert_one_line_error(done: subprocess.CompletedProcess[str], kind: str) -> None:
    """One error line; besides it, at most publish's summary (what was persisted)."""
    assert "Traceback" not in done.stderr, done.stderr
    command = done.args[3]
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("ampsclient ")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"ampsclient {command}: {kind}: "), errors[0]
    others = [line for line in lines if line not in errors]
    assert others == [] or (command == "publish" and len(others) == 1), done.stderr


class LineReader:
    """Collects a process's stdout lines on a thread; waits for them with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.put(line)

    def next(self, timeout: float = 20) -> str:
        return self.lines.get(timeout=timeout)


def wait_until_subscribed(
    reader: LineReader, amps: ServerProcess, topic: str, proc: subprocess.Popen[str]
) -> None:
    """Publish markers until the subscriber prints one (so it is subscribed)."""
    with Client("marker") as client:
        client.connect(amps.uri)
        client.logon(5000)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            client.publish(topic, json.dumps({"marker": True}))
            try:
                line = reader.next(timeout=0.2)
            except queue.Empty:
                continue
            assert json.loads(line)["data"] == {"marker": True}
            while True:  # drain the markers that are still on their way
                client.publish(topic, json.dumps({"marker": "last"}))
                while json.loads(reader.next())["data"] != {"marker": "last"}:
                    pass
                return
        raise AssertionError("the subscriber never received a marker")


def test_publish_from_stdin_then_sow(amps: ServerProcess) -> None:
    orders = [{"id": i, "qty": i * 10} for i in range(1, 6)]
    done = cli(
        "publish",
        "-s",
        amps.uri,
        "-t",
        "orders",
        stdin="".join(json.dumps(o) + "\n" for o in orders),
    )
    assert done.returncode == 0, done.stderr
    assert "publish: 5 messages" in done.stderr and "5 persisted" in done.stderr

    done = cli("sow", "-s", amps.uri, "-t", "orders", "--filter", "/qty >= 30", "-f", "jsonl")
    assert done.returncode == 0, done.stderr
    got = lines_of(done.stdout)
    assert sorted(g["data"]["id"] for g in got) == [3, 4, 5]  # type: ignore[index]
    for record in got:
        assert record["command"] == "sow" and record["topic"] == "orders"
        assert record["sow_key"]
    assert "sow: 3 messages" in done.stderr

    raw = cli("sow", "-s", amps.uri, "-t", "orders", "--order-by", "/id DESC", "--top-n", "2")
    assert raw.returncode == 0, raw.stderr
    assert [json.loads(line) for line in raw.stdout.splitlines()] == orders[:2:-1][:2]

    whole = cli("sow", "-s", amps.uri, "-t", "orders", "-f", "json", "--filter", "/id = 1")
    assert [e["data"] for e in json.loads(whole.stdout)] == [orders[0]]


def test_publish_envelopes_file_and_data(amps: ServerProcess, tmp_path) -> None:
    source = tmp_path / "in.json"
    source.write_text(
        json.dumps(
            [
                {"topic": "orders", "data": {"id": 1, "v": "a"}},
                {"topic": "orders", "data": {"id": 2, "v": "b"}},
            ]
        )
    )
    done = cli("publish", "-s", amps.uri, "-f", "json", "--file", str(source))
    assert done.returncode == 0, done.stderr
    done = cli("publish", "-s", amps.uri, "-t", "orders", "--data", '{"id": 3, "v": "c"}')
    assert done.returncode == 0, done.stderr
    done = cli("sow", "-s", amps.uri, "-t", "orders", "--order-by", "/id")
    assert [json.loads(x)["v"] for x in done.stdout.splitlines()] == ["a", "b", "c"]


def test_bad_input_is_one_line_and_code_6(amps: ServerProcess) -> None:
    done = cli(
        "publish", "-s", amps.uri, "-t", "orders", "-f", "jsonl", stdin='{"id": 1}\nnot json\n'
    )
    assert done.returncode == 6
    assert_one_line_error(done, "BadInputError")
    assert "line 2" in done.stderr
    done = cli("publish", "-s", amps.uri, "-f", "jsonl", stdin='{"id": 1}\n')
    assert done.returncode == 6  # no --topic and not an envelope
    assert "envelope" in done.stderr
    done = cli("publish", "-s", amps.uri, stdin="raw line\n")  # raw lines need --topic
    assert done.returncode == 2
    assert_one_line_error(done, "UsageException")


def test_subscribe_receives_what_another_process_publishes(amps: ServerProcess) -> None:
    sub = start_cli("subscribe", "-s", amps.uri, "-t", "news", "-f", "jsonl")
    try:
        reader = LineReader(sub)
        wait_until_subscribed(reader, amps, "news", sub)
        pub = cli(
            "publish",
            "-s",
            amps.uri,
            "-t",
            "news",
            stdin="".join(json.dumps({"n": n}) + "\n" for n in range(20)),
        )
        assert pub.returncode == 0, pub.stderr
        got = [json.loads(reader.next()) for _ in range(20)]
        assert [g["data"] for g in got] == [{"n": n} for n in range(20)]
        assert all(g["command"] == "publish" and g["topic"] == "news" for g in got)
        sub.send_signal(signal.SIGINT)
        _, err = sub.communicate(timeout=30)
        assert sub.returncode == 0, err  # Ctrl-C is how a subscription ends
        assert "Traceback" not in err
        assert "interrupted" in err.splitlines()[-1]
        assert err.splitlines()[-1].startswith("subscribe: ")
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()


def test_subscribe_count_and_sow_and_subscribe(amps: ServerProcess) -> None:
    assert cli("publish", "-s", amps.uri, "-t", "orders", "--data", '{"id": 1}').returncode == 0
    sas = start_cli(
        "sow_and_subscribe", "-s", amps.uri, "-t", "orders", "-f", "jsonl", "--count", "3"
    )
    try:
        reader = LineReader(sas)
        first = json.loads(reader.next())
        assert (first["command"], first["data"]) == ("sow", {"id": 1})
        # the SOW record came: the subscription is placed
        for i in (2, 3):
            assert (
                cli(
                    "publish", "-s", amps.uri, "-t", "orders", "--data", json.dumps({"id": i})
                ).returncode
                == 0
            )
        rest = [json.loads(reader.next()) for _ in range(2)]
        assert [(r["command"], r["data"]) for r in rest] == [
            ("publish", {"id": 2}),
            ("publish", {"id": 3}),
        ]
        assert sas.wait(30) == 0  # --count 3 reached: it stops by itself
        assert "sow_and_subscribe: 3 messages" in sas.stderr.read()  # type: ignore[union-attr]
    finally:
        if sas.poll() is None:
            sas.kill()
        sas.communicate()


def test_replay_from_epoch_now_and_a_range(amps: ServerProcess) -> None:
    stdin = "".join(json.dumps({"n": n}) + "\n" for n in range(6))
    assert cli("publish", "-s", amps.uri, "-t", "events", stdin=stdin).returncode == 0

    done = cli("replay", "-s", amps.uri, "-t", "events", "-f", "jsonl")  # EPOCH by default
    assert done.returncode == 0, done.stderr
    every = lines_of(done.stdout)
    assert [e["data"] for e in every] == [{"n": n} for n in range(6)]
    bookmarks = [str(e["bookmark"]) for e in every]
    assert len(set(bookmarks)) == 6

    done = cli(
        "replay", "-s", amps.uri, "-t", "events", "--bookmark", "EPOCH", "--filter", "/n > 3"
    )
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"n": 4}, {"n": 5}]

    done = cli("replay", "-s", amps.uri, "-t", "events", "--bookmark", "NOW")
    assert done.returncode == 0 and done.stdout == ""

    done = cli("replay", "-s", amps.uri, "-t", "events", "-b", f"[{bookmarks[1]}:{bookmarks[3]}]")
    assert done.returncode == 0, done.stderr
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"n": 1}, {"n": 2}, {"n": 3}]

    done = cli("replay", "-s", amps.uri, "-t", "events", "-b", f"({bookmarks[1]}:{bookmarks[3]})")
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"n": 2}]

    done = cli("replay", "-s", amps.uri, "-t", "events", "-b", bookmarks[4])  # after it
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"n": 5}]

    done = cli(
        "replay", "-s", amps.uri, "-t", "events", "-b", f"{bookmarks[3]},{bookmarks[2]}"
    )  # after the oldest of a list
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"n": 3}, {"n": 4}, {"n": 5}]

    done = cli("replay", "-s", amps.uri, "-t", "events", "-b", "20000101T000000Z")
    assert len(done.stdout.splitlines()) == 6  # a timestamp before everything


def test_replay_follow_continues_live(amps: ServerProcess) -> None:
    assert cli("publish", "-s", amps.uri, "-t", "events", "--data", '{"n": 0}').returncode == 0
    follow = start_cli("replay", "-s", amps.uri, "-t", "events", "--follow", "-n", "2")
    try:
        reader = LineReader(follow)
        assert json.loads(reader.next()) == {"n": 0}  # replayed: the subscription is placed
        assert cli("publish", "-s", amps.uri, "-t", "events", "--data", '{"n": 1}').returncode == 0
        assert json.loads(reader.next()) == {"n": 1}  # live, after the replay
        assert follow.wait(30) == 0
    finally:
        if follow.poll() is None:
            follow.kill()
        follow.communicate()


def test_sow_delete(amps: ServerProcess) -> None:
    stdin = "".join(json.dumps({"id": i, "qty": i}) + "\n" for i in range(1, 5))
    assert cli("publish", "-s", amps.uri, "-t", "orders", stdin=stdin).returncode == 0
    done = cli("sow_delete", "-s", amps.uri, "-t", "orders", "--filter", "/qty > 2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "deleted 2 of 2 matching records from orders"
    done = cli("sow", "-s", amps.uri, "-t", "orders", "--order-by", "/id")
    assert [json.loads(x)["id"] for x in done.stdout.splitlines()] == [1, 2]

    done = cli("sow", "-s", amps.uri, "-t", "orders", "--filter", "/id = 2", "-f", "jsonl")
    key = lines_of(done.stdout)[0]["sow_key"]
    done = cli("sow_delete", "-s", amps.uri, "-t", "orders", "--keys", str(key), "-f", "jsonl")
    assert lines_of(done.stdout) == [{"topic": "orders", "matches": 1, "records_deleted": 1}]
    done = cli("sow", "-s", amps.uri, "-t", "orders")
    assert [json.loads(x)["id"] for x in done.stdout.splitlines()] == [1]

    done = cli("sow_delete", "-s", amps.uri, "-t", "orders")
    assert done.returncode == 2 and "--filter or --keys" in done.stderr


def test_ping(amps: ServerProcess) -> None:
    done = cli("ping", "-s", amps.uri)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"pong from {amps.uri} (")
    done = cli("ping", "-s", amps.uri, "-f", "jsonl", "--count", "3")
    pongs = lines_of(done.stdout)
    assert len(pongs) == 3
    for pong in pongs:
        assert pong["server"] == amps.uri
        assert isinstance(pong["round_trip_ms"], float) and pong["round_trip_ms"] >= 0


def test_failover_with_two_servers_one_dead(amps: ServerProcess, dead_uri: str) -> None:
    servers = ["-s", dead_uri, "-s", amps.uri]
    done = cli("publish", *servers, "-t", "orders", stdin='{"id": 1}\n{"id": 2}\n')
    assert done.returncode == 0, done.stderr
    assert "2 persisted" in done.stderr
    done = cli("sow", *servers, "-t", "orders", "--order-by", "/id")
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"id": 1}, {"id": 2}]
    done = cli("ping", *servers)
    assert done.stdout.startswith(f"pong from {amps.uri}")


def test_bad_server_is_one_line_and_code_3(dead_uri: str) -> None:
    started = time.monotonic()
    done = cli("sow", "-s", dead_uri, "-t", "orders", "--retry-time", "300")
    assert done.returncode == 3
    assert_one_line_error(done, "RetryLimitError")
    assert "Connect call failed" in done.stderr or "refused" in done.stderr.lower()
    assert time.monotonic() - started < 30
    assert done.stdout == ""


def test_server_errors_and_usage_errors(amps: ServerProcess) -> None:
    done = cli("sow", "-s", amps.uri, "-t", "orders", "--filter", "/a = (((")
    assert done.returncode == 1
    assert_one_line_error(done, "BadFilterException")
    done = cli("replay", "-s", amps.uri, "-t", "events", "-b", "yesterday")
    assert done.returncode == 2
    assert_one_line_error(done, "UsageException")
    done = cli("ping", "-s", "http://example.com/")
    assert done.returncode == 2
    assert_one_line_error(done, "UsageException")
    done = cli("subscribe", "-s", amps.uri)  # no --topic: argparse
    assert done.returncode == 2 and "--topic" in done.stderr


def test_sigint_during_publish_flushes_and_exits_130(amps: ServerProcess) -> None:
    with Client("watcher") as watcher:
        watcher.connect(amps.uri)
        watcher.logon(5000)
        stream = watcher.subscribe("slow", timeout=5000)
        pub = start_cli("publish", "-s", amps.uri, "-t", "slow")
        try:
            assert pub.stdin is not None
            for n in range(3):
                pub.stdin.write(json.dumps({"n": n}) + "\n")
            pub.stdin.flush()  # stdin stays open: the command is still reading
            got = [m.json()["n"] for _, m in zip(range(3), stream.timeout(20_000), strict=False)]
            assert got == [0, 1, 2]
            pub.send_signal(signal.SIGINT)
            _, err = pub.communicate(timeout=30)
        finally:
            if pub.poll() is None:
                pub.kill()
                pub.communicate()
        stream.close()
    assert pub.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("publish: 3 messages in "), err
    assert "3 persisted" in last and last.endswith("interrupted")


def test_version_and_module_entry_point() -> None:
    from ampsclient import __version__

    done = cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"ampsclient {__version__}"
    done = subprocess.run(
        [sys.executable, "-m", "ampsclient", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    for command in ("publish", "subscribe", "sow_and_subscribe", "sow_delete", "ping", "replay"):
        assert command in done.stdout


def test_unpersisted_publishes_give_code_5(amps: ServerProcess) -> None:
    """Messages the server never acknowledged (it froze after the first one) are reported as
    not persisted, with exit status 5."""
    with Client("watcher-bulk") as watcher:
        watcher.connect(amps.uri)
        watcher.logon(5000)
        stream = watcher.subscribe("bulk", timeout=5000)
        pub = start_cli("publish", "-s", amps.uri, "-t", "bulk", "--timeout", "1000")
        try:
            assert pub.stdin is not None
            pub.stdin.write(json.dumps({"n": 0}) + "\n")
            pub.stdin.flush()
            got = [m.json()["n"] for _, m in zip(range(1), stream.timeout(20_000), strict=False)]
            assert got == [0]
            amps.proc.send_signal(signal.SIGSTOP)  # frozen: nothing more is acknowledged
            try:
                rest = "".join(json.dumps({"n": n}) + "\n" for n in range(1, 10))
                _, err = pub.communicate(rest, timeout=60)
            finally:
                amps.proc.send_signal(signal.SIGCONT)
        finally:
            if pub.poll() is None:
                pub.kill()
                pub.communicate()
        stream.close()
    assert pub.returncode == 5, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("publish: 10 messages in "), last
    assert "NOT persisted" in last
    persisted = int(last.split(", ")[1].split()[0].replace(",", ""))
    left = int(last.split(", ")[2].split()[0].replace(",", ""))
    assert persisted + left == 10 and left >= 9


def test_subscription_fails_over_then_gives_up(tmp_path) -> None:
    from cli_helpers import server_process

    with server_process(tmp_path / "a") as a, server_process(tmp_path / "b") as b:
        sub = start_cli(
            "subscribe",
            "-s",
            a.uri,
            "-s",
            b.uri,
            "-t",
            "news",
            "-f",
            "jsonl",
            "--retry-time",
            "2000",
        )
        try:
            reader = LineReader(sub)
            wait_until_subscribed(reader, a, "news", sub)
            a.proc.kill()  # kill -9 of the server the subscriber is on
            a.proc.wait(10)
            wait_until_subscribed(reader, b, "news", sub)  # re-placed on b
            assert cli("publish", "-s", b.uri, "-t", "news", "--data", '{"n": 1}').returncode == 0
            assert json.loads(reader.next())["data"] == {"n": 1}
            b.proc.kill()  # now no server is left: it gives up after --retry-time
            b.proc.wait(10)
            assert sub.wait(60) == 3
            err = sub.stderr.read()  # type: ignore[union-attr]
            assert "Traceback" not in err
            lines = err.strip().splitlines()
            errors = [line for line in lines if line.startswith("ampsclient ")]
            assert len(errors) == 1, err
            # besides the error: only rate lines of the long run (no summary after an error)
            assert all(line.startswith("subscribe: ") for line in lines if line not in errors)
            assert " messages in " not in err
            assert "ampsclient subscribe: RetryLimitError: gave up reconnecting" in err
        finally:
            if sub.poll() is None:
                sub.kill()
            sub.communicate()


def test_a_frozen_server_times_out_with_code_4(amps: ServerProcess) -> None:
    ping = start_cli("ping", "-s", amps.uri, "--count", "1000000", "--timeout", "500")
    try:
        reader = LineReader(ping)
        assert reader.next().startswith(f"pong from {amps.uri}")  # connected, answering
        amps.proc.send_signal(signal.SIGSTOP)  # the server freezes with the socket open
        try:
            assert ping.wait(60) == 4
        finally:
            amps.proc.send_signal(signal.SIGCONT)
        err = ping.stderr.read()  # type: ignore[union-attr]
        errors = [line for line in err.splitlines() if line.startswith("ampsclient ")]
        assert errors == ["ampsclient ping: TimedOutException: timed out waiting for the flush ack"]
    finally:
        if ping.poll() is None:
            ping.kill()
        ping.communicate()


def test_heartbeat_notices_a_frozen_server(amps: ServerProcess) -> None:
    sub = start_cli(
        "subscribe", "-s", amps.uri, "-t", "news", "-f", "jsonl",
        "--heartbeat", "0.5", "--timeout", "500", "--retry-time", "1000",
    )  # fmt: skip
    try:
        reader = LineReader(sub)
        wait_until_subscribed(reader, amps, "news", sub)
        amps.proc.send_signal(signal.SIGSTOP)  # silent, socket open: only heartbeats tell
        try:
            assert sub.wait(60) == 3
        finally:
            amps.proc.send_signal(signal.SIGCONT)
        err = sub.stderr.read()  # type: ignore[union-attr]
        errors = [line for line in err.splitlines() if line.startswith("ampsclient ")]
        assert len(errors) == 1 and "RetryLimitError" in errors[0], err
    finally:
        if sub.poll() is None:
            sub.kill()
        sub.communicate()
