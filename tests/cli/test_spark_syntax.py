"""``ampsclient spark <command> -flag value``: AMPS spark's syntax, run against a real server."""

from __future__ import annotations

import gzip
import json
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
from cli_helpers import CONFIG, ROOT, ServerProcess, cli, server_process, start_cli
from test_cli_commands import LineReader

from ampsclient.cli import spark_syntax
from ampsclient.cli.spark_syntax import SparkSyntaxError, translate

pytestmark = pytest.mark.integration


def hostport(amps: ServerProcess) -> str:
    return f"127.0.0.1:{amps.tcp_port}"


def spark(*args: str, stdin: str | None = None):  # type: ignore[no-untyped-def]
    return cli("spark", *args, stdin=stdin)


def sow_ids(amps: ServerProcess, *extra: str) -> list[int]:
    """The ``id`` of each record of ``orders``, in the order the server sent them."""
    done = spark(
        "sow", "-server", hostport(amps), "-type", "json", "-topic", "orders", *extra,
        "--format", "jsonl",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["data"]["id"] for line in done.stdout.splitlines() if line]


def test_publish_json_lines_then_sow_orderby_topn(amps: ServerProcess, tmp_path: Path) -> None:
    data = tmp_path / "orders.json"
    data.write_text("".join(json.dumps({"id": i, "qty": i * 10}) + "\n" for i in range(1, 6)))
    done = spark(
        "publish",
        "-server",
        hostport(amps),
        "-type",
        "json",
        "-topic",
        "orders",
        "-file",
        str(data),
    )
    assert done.returncode == 0, done.stderr
    assert sorted(sow_ids(amps)) == [1, 2, 3, 4, 5]
    assert sow_ids(amps, "-orderby", "/qty DESC", "-topn", "2", "-batchsize", "1") == [5, 4]


def test_publish_delimited_gz_and_zip_files(amps: ServerProcess, tmp_path: Path) -> None:
    delimited = tmp_path / "orders.rs"
    # records separated by 0x1e (30): one of them spans two lines
    delimited.write_bytes(b'{"id":1}\x1e{"id":2,\n"note":"two lines"}\x1e')
    packed = tmp_path / "orders.json.gz"
    packed.write_bytes(gzip.compress(b'{"id":3}\n{"id":4}\n'))
    archive = tmp_path / "orders.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.json", '{"id":5}\n')
        zf.writestr("b.json", '{"id":6}\n')
    base = ("publish", "-server", hostport(amps), "-type", "json", "-topic", "orders")
    for extra in (
        ("-file", str(delimited), "-delimiter", "30"),
        ("-file", str(packed)),
        ("-file", str(archive)),
    ):
        done = spark(*base, *extra)
        assert done.returncode == 0, (extra, done.stderr)
    assert sow_ids(amps, "-orderby", "/id") == [1, 2, 3, 4, 5, 6]
    two = spark(
        "sow", "-server", hostport(amps), "-type", "json", "-topic", "orders",
        "-filter", "/id = 2", "-format", "{data}",
    )  # fmt: skip
    assert json.loads(two.stdout) == {"id": 2, "note": "two lines"}


def test_publish_stdin_subscribe_filter_and_format(amps: ServerProcess) -> None:
    lines = "".join(json.dumps({"a": i}) + "\n" for i in range(1, 5))
    server = hostport(amps)
    done = spark("publish", "-server", server, "-type", "json", "-topic", "ticks", stdin=lines)
    assert done.returncode == 0, done.stderr
    # a replay from the start of the transaction log (bookmark 0), stopped by our --count
    got = spark(
        "subscribe", "-server", server, "-type", "json", "-topic", "ticks",
        "-filter", "/a > 2", "-bookmark", "0", "-format", "{topic}\t{data}\t{bookmark}",
        "--count", "2",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    rows = [line.split("\t") for line in got.stdout.splitlines()]
    assert [(t, json.loads(d)) for t, d, _ in rows] == [("ticks", {"a": 3}), ("ticks", {"a": 4})]
    assert all(bookmark for _, _, bookmark in rows)


def test_sow_and_subscribe_and_output_delimiter(amps: ServerProcess) -> None:
    server = hostport(amps)
    lines = '{"id":1,"q":1}\n{"id":2,"q":2}\n'
    sent = spark("publish", "-server", server, "-type", "json", "-topic", "orders", stdin=lines)
    assert sent.returncode == 0, sent.stderr
    got = spark(
        "sow_and_subscribe", "-server", server, "-type", "json", "-topic", "orders",
        "-orderby", "/id", "-format", "{sow_key}:{data}", "-delimiter", "59", "--count", "2",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    records = [r for r in got.stdout.split(";") if r]
    assert [json.loads(r.partition(":")[2])["id"] for r in records] == [1, 2]
    assert all(r.partition(":")[0] for r in records)


def test_sow_delete_filter_prints_count_and_deletes(amps: ServerProcess) -> None:
    server = hostport(amps)
    lines = "".join(json.dumps({"id": i}) + "\n" for i in range(1, 6))
    sent = spark("publish", "-server", server, "-type", "json", "-topic", "orders", stdin=lines)
    assert sent.returncode == 0, sent.stderr
    assert sorted(sow_ids(amps)) == [1, 2, 3, 4, 5]
    done = spark(
        "sow_delete", "-server", server, "-type", "json", "-topic", "orders", "-filter", "/id > 3"
    )
    assert done.returncode == 0, done.stderr
    assert "deleted 2 of 2 matching records from orders" in done.stdout
    assert sorted(sow_ids(amps)) == [1, 2, 3]


def test_ping_user_at_host_and_unreachable(amps: ServerProcess, dead_uri: str) -> None:
    ok = spark("ping", "-server", f"alice@{hostport(amps)}")
    assert ok.returncode == 0, ok.stderr
    assert f"pong from tcp://{hostport(amps)}/amps/json" in ok.stdout  # the user is not shown
    with_password = spark("ping", "-server", f"alice:secret@{hostport(amps)}", "-type", "json")
    assert with_password.returncode == 0, with_password.stderr
    assert "secret" not in with_password.stdout + with_password.stderr
    dead = dead_uri.split("//")[1].split("/")[0]
    down = spark("ping", "-server", dead, "--retry-time", "500")
    assert down.returncode == 3, down.stderr
    assert "Traceback" not in down.stderr


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["sow", "-server", "h:1", "-type", "json", "-topic", "t", "-delta"], "-delta"),
        (["subscribe", "-server", "h:1", "-type", "json", "-topic", "t", "-copy", "x"], "-copy"),
        (["sow", "-server", "h:1", "-type", "json", "-topic", "t", "-ack"], "-ack"),
        (["sow", "-server", "h:1", "-type", "json", "-topic", "t", "-backlog", "2"], "-backlog"),
        (["ping", "-server", "h:1", "-authenticator", "com.x.Auth"], "-authenticator"),
        (["sow", "-server", "h:1", "-type", "json", "-topic", "t", "-bogus", "1"], "-bogus"),
        (["sow", "-server", "h:1", "-topic", "t"], "-type"),
        (["sow", "-server", "tcp://h:1", "-type", "json", "-topic", "t"], "-server"),
        (["sow_delete", "-server", "h:1", "-type", "json", "-topic", "t"], "-filter"),
        (["sow", "-topic", "t"], "-server"),
        (["sow", "-server", "h:1", "-proto", "fix", "-type", "json", "-topic", "t"], "-type"),
    ],
)
def test_refused_flags_are_named(argv: list[str], named: str) -> None:
    with pytest.raises(SparkSyntaxError, match=named):
        translate(argv)


def test_translation() -> None:
    assert translate(
        ["sow", "-server", "u:pw@h:9007", "-type", "json", "-topic", "t", "-topn", "3",
         "-orderby", "/x", "-opts", "oof", "-secure", "--quiet"]
    ) == [
        "sow", "--server", "tcps://u:pw@h:9007/amps/json", "--topic", "t", "--top-n", "3",
        "--order-by", "/x", "--options", "oof", "--quiet",
    ]  # fmt: skip
    assert translate(["ping", "-server", "h:1", "-proto", "nvfix"])[1:] == [
        "--server",
        "tcp://h:1/amps/nvfix",
    ]
    assert translate(["ping", "-uri", "tcp://h:1/amps/xml"])[1:] == [
        "--server",
        "tcp://h:1/amps/xml",
    ]


def test_refusal_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = spark_syntax.main(
        ["subscribe", "-server", "h:1", "-type", "json", "-topic", "t", "-copy", "h:2"]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "ampsclient spark subscribe: UsageError: -copy is not supported: copying messages to "
        "another server is not offered by this command line"
    ]


def test_unknown_template_placeholder_is_refused(amps: ServerProcess) -> None:
    done = spark(
        "sow", "-server", hostport(amps), "-type", "json", "-topic", "orders", "-format", "{nope}"
    )
    assert done.returncode == 2
    assert "unknown placeholder {nope}" in done.stderr


def test_amps_spark_console_script() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["amps-spark"] == "ampsclient.cli.spark_syntax:main"
    help_run = cli("spark", "help")
    assert help_run.returncode == 0
    assert "sow_and_subscribe" in help_run.stdout


def test_publish_delta_merges_into_the_record(amps: ServerProcess) -> None:
    server = hostport(amps)
    base = ("publish", "-server", server, "-type", "json", "-topic", "orders")
    first = spark(*base, stdin='{"id":1,"a":1,"b":1}\n')
    assert first.returncode == 0, first.stderr
    delta = spark(*base, "-delta", stdin='{"id":1,"b":2}\n')
    assert delta.returncode == 0, delta.stderr
    got = spark("sow", "-server", server, "-type", "json", "-topic", "orders")
    assert [json.loads(line) for line in got.stdout.splitlines()] == [{"id": 1, "a": 1, "b": 2}]


def test_publish_rate_paces_the_messages(
    amps: ServerProcess, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    data = tmp_path / "ten.json"
    data.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(11)))
    argv = ["publish", "-server", hostport(amps), "-type", "json", "-topic", "orders"]
    start = time.monotonic()
    code = spark_syntax.main([*argv, "-file", str(data), "-rate", "10", "--quiet"])
    elapsed = time.monotonic() - start
    assert code == 0, capsysbinary.readouterr()
    # message n leaves at n / 10 s: the 11th at 1.0 s (without -rate: a few ms)
    assert elapsed >= 0.99
    assert sorted(sow_ids(amps)) == list(range(11))


def test_sow_and_subscribe_delta(amps: ServerProcess) -> None:
    server = hostport(amps)
    base = ("-server", server, "-type", "json", "-topic", "orders")
    assert spark("publish", *base, stdin='{"id":1,"a":1,"b":1}\n').returncode == 0
    proc = start_cli("spark", "sow_and_subscribe", *base, "-delta", "--count", "2", "--quiet")
    try:
        reader = LineReader(proc)
        assert json.loads(reader.next()) == {"id": 1, "a": 1, "b": 1}  # the SOW part: placed
        assert spark("publish", *base, stdin='{"id":1,"a":1,"b":2}\n').returncode == 0
        update = json.loads(reader.next())
        assert update["b"] == 2 and "a" not in update  # only what changed (and the key)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


QUEUE_CONFIG = CONFIG.replace(
    "</SOW>",
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>jobs</UnderlyingTopic></Queue></SOW>",
)


@pytest.mark.parametrize("ack", [True, False])
def test_subscribe_ack_consumes_queue_messages(tmp_path: Path, ack: bool) -> None:
    with server_process(tmp_path / "server", QUEUE_CONFIG) as amps:
        base = ("-server", hostport(amps), "-type", "json")
        jobs = "".join(json.dumps({"job": i}) + "\n" for i in range(3))
        assert spark("publish", *base, "-topic", "jobs", stdin=jobs).returncode == 0
        # without -ack only one message is leased at a time (the default max_backlog, 1)
        flags, count = (("-ack", "-backlog", "2"), "3") if ack else ((), "1")
        first = spark("subscribe", *base, "-topic", "work", *flags, "--count", count)
        assert first.returncode == 0, first.stderr
        got = [json.loads(line)["job"] for line in first.stdout.splitlines()]
        assert got == ([0, 1, 2] if ack else [0])
        # a marker after them: acked jobs are gone, an unacked one came back before it
        marker = spark("publish", *base, "-topic", "jobs", stdin='{"job": "marker"}\n')
        assert marker.returncode == 0, marker.stderr
        again = spark("subscribe", *base, "-topic", "work", "-ack", "--count", "1")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["job"] == ("marker" if ack else 0)
