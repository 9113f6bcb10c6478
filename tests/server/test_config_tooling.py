"""AMPS' configuration tooling (issue 28): ``${VAR}``/``$VAR`` expansion, ``<Include>``, and the
``--verify-config`` / ``--dump-config`` / ``--sample-config`` command-line options.

AMPS "fully expands any environment variables in the file and fully processes any include
directives" on start-up (AMPS Configuration Guide, "AMPS Configuration Basics"). Real files,
the real ``ampsclient-server`` entry point in a subprocess, a real server started from the
sample configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ampsclient_server_stub.config import ConfigError, load_config
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

SERVER = Path(sys.executable).parent / "ampsclient-server"

TRANSPORT = (
    "<Transport><Name>{name}</Name><Type>tcp</Type>"
    "<InetAddr>127.0.0.1:0</InetAddr><MessageType>json</MessageType></Transport>"
)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SERVER), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- environment variables ------------------------------------------------------------------


def test_braced_and_bare_variables_are_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMPS_TEST_NAME", "from-env")
    monkeypatch.setenv("AMPS_TEST_TRANSPORT", "tcp-env")
    cfg = write(
        tmp_path / "c.xml",
        "<AMPSConfig><Name>${AMPS_TEST_NAME}</Name><Transports>"
        + TRANSPORT.format(name="$AMPS_TEST_TRANSPORT")
        + "</Transports></AMPSConfig>",
    )
    config = load_config(cfg)
    assert config.name == "from-env"
    assert [t.name for t in config.transports] == ["tcp-env"]


def test_an_undefined_variable_is_an_error_naming_it_and_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AMPS_TEST_UNDEFINED", raising=False)
    cfg = write(
        tmp_path / "c.xml", "<AMPSConfig>\n<Name>${AMPS_TEST_UNDEFINED}</Name>\n</AMPSConfig>"
    )
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert "environment variable AMPS_TEST_UNDEFINED is not defined" in str(err.value)
    assert "line 2" in str(err.value)


def test_variables_in_comments_are_not_expanded(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "c.xml",
        "<AMPSConfig><!-- ${AMPS_TEST_IN_COMMENT} --><Name>n</Name><Transports>"
        + TRANSPORT.format(name="t")
        + "</Transports></AMPSConfig>",
    )
    assert load_config(cfg).name == "n"


# -- <Include> ------------------------------------------------------------------------------


def test_include_is_relative_to_the_including_file_and_nests(tmp_path: Path) -> None:
    write(
        tmp_path / "parts" / "transports.xml",
        '<?xml version="1.0"?>\n'
        + TRANSPORT.format(name="first")
        + "\n<Include>more.xml</Include>",
    )
    write(tmp_path / "parts" / "more.xml", TRANSPORT.format(name="second"))
    cfg = write(
        tmp_path / "main.xml",
        "<AMPSConfig><Name>inc</Name><Transports>"
        "<Include>parts/transports.xml</Include></Transports></AMPSConfig>",
    )
    config = load_config(cfg)
    assert [t.name for t in config.transports] == ["first", "second"]


def test_a_missing_include_names_the_file_and_line(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "main.xml",
        "<AMPSConfig>\n<Name>inc</Name>\n<Transports>\n<Include>nowhere.xml</Include>\n"
        "</Transports></AMPSConfig>",
    )
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    message = str(err.value)
    assert message.startswith(f"{cfg}: line 4: ")
    assert str(tmp_path / "nowhere.xml") in message


def test_an_include_cycle_is_an_error_naming_the_file(tmp_path: Path) -> None:
    write(tmp_path / "a.xml", "<Include>b.xml</Include>")
    write(tmp_path / "b.xml", "\n<Include>a.xml</Include>")
    cfg = write(
        tmp_path / "main.xml", "<AMPSConfig><Name>c</Name><Include>a.xml</Include></AMPSConfig>"
    )
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    message = str(err.value)
    assert f"{tmp_path / 'b.xml'}, line 2" in message
    assert "cycle" in message


def test_include_paths_may_use_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMPS_TEST_PARTS", str(tmp_path / "parts"))
    write(tmp_path / "parts" / "t.xml", TRANSPORT.format(name="envpath"))
    cfg = write(
        tmp_path / "main.xml",
        "<AMPSConfig><Name>c</Name><Transports><Include>${AMPS_TEST_PARTS}/t.xml</Include>"
        "</Transports></AMPSConfig>",
    )
    assert [t.name for t in load_config(cfg).transports] == ["envpath"]


# -- the command line -----------------------------------------------------------------------


def test_verify_config_exits_0_on_a_valid_file_and_2_with_the_error(tmp_path: Path) -> None:
    good = write(
        tmp_path / "good.xml",
        "<AMPSConfig><Name>${AMPS_TEST_V}</Name><Transports>"
        + TRANSPORT.format(name="t")
        + "</Transports></AMPSConfig>",
    )
    ok = cli("--config", str(good), "--verify-config", env={"AMPS_TEST_V": "v"})
    assert ok.returncode == 0, ok.stderr
    assert "configuration is valid" in ok.stdout
    env = {k: v for k, v in os.environ.items() if k != "AMPS_TEST_V"}
    bad = subprocess.run(
        [str(SERVER), "--config", str(good), "--verify-config"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert bad.returncode == 2
    assert "environment variable AMPS_TEST_V is not defined" in bad.stderr
    unknown = write(tmp_path / "bad.xml", "<AMPSConfig><Name>n</Name><Bogus/></AMPSConfig>")
    res = cli("--config", str(unknown), "--verify-config")
    assert res.returncode == 2
    assert "Bogus" in res.stderr


def test_dump_config_prints_includes_and_variables_resolved(tmp_path: Path) -> None:
    write(tmp_path / "parts" / "t.xml", TRANSPORT.format(name="${AMPS_TEST_T}"))
    cfg = write(
        tmp_path / "main.xml",
        "<AMPSConfig><Name>dump</Name><Transports><Include>parts/t.xml</Include>"
        "</Transports></AMPSConfig>",
    )
    res = cli("--config", str(cfg), "--dump-config", env={"AMPS_TEST_T": "dumped"})
    assert res.returncode == 0, res.stderr
    assert "<Name>dumped</Name>" in res.stdout
    assert "Include" not in res.stdout and "$" not in res.stdout
    # what is printed is itself a valid configuration
    out = write(tmp_path / "dumped.xml", res.stdout)
    assert [t.name for t in load_config(out).transports] == ["dumped"]


def test_dump_config_fills_in_the_defaults(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "main.xml",
        "<AMPSConfig><Name>d</Name><Transports>"
        + TRANSPORT.format(name="t")
        + "</Transports><TransactionLog><JournalDirectory>j</JournalDirectory>"
        "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>"
        "</AMPSConfig>",
    )
    res = cli("--config", str(cfg), "--dump-config")
    assert res.returncode == 0, res.stderr
    for line in (
        "<Group>d</Group>",
        "<Protocol>amps</Protocol>",
        f"<JournalSize>{1024**3}</JournalSize>",
        "<PreallocatedJournalFiles>2</PreallocatedJournalFiles>",
    ):
        assert line in res.stdout
    out = write(tmp_path / "dumped.xml", res.stdout)
    assert load_config(out).group == "d"
    bad = write(tmp_path / "bad.xml", "<AMPSConfig><Name>n</Name><Bogus/></AMPSConfig>")
    res = cli("--config", str(bad), "--dump-config")
    assert res.returncode == 2 and "Bogus" in res.stderr and not res.stdout


def test_verify_and_dump_need_a_config_file() -> None:
    res = cli("--verify-config")
    assert res.returncode == 2
    assert "need --config" in res.stderr


def test_sample_config_is_a_configuration_the_server_starts_with(tmp_path: Path) -> None:
    res = cli("--sample-config")
    assert res.returncode == 0, res.stderr
    sample = write(tmp_path / "sample.xml", res.stdout)
    assert cli("--config", str(sample), "--verify-config").returncode == 0
    # the sample's fixed ports are replaced by free ones, as for any configuration
    server = ServerProcess(config=sample, extra_args=["--admin-port", "0"])
    with server, RawClient(server.tcp_port) as client:
        client.logon("sample-test")
        client.send({"c": "subscribe", "cid": "S", "t": "orders", "sub_id": "s", "a": "processed"})
        ack, _ = client.recv_until(lambda h: h.get("cid") == "S", 10)
        assert ack["status"] == "success"
        client.send({"c": "p", "t": "orders"}, b'{"n": 1}')
        _, body = client.recv_until(lambda h: h.get("c") == "p", 10)
        assert body == b'{"n": 1}'


def test_the_docs_example_runs_as_shown(tmp_path: Path) -> None:
    """docs/configuration.md's console example: the files it shows, the output it shows."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    text = doc.read_text(encoding="utf-8")
    start = text.index("$ cat parts/transports.xml\n")
    block = text[start : text.index("```", start)]
    part = block.split("$ cat parts/transports.xml\n")[1].split("$ cat amps.xml\n")[0]
    main = block.split("$ cat amps.xml\n")[1].split("$ INSTANCE=")[0]
    dumped = block.split("--dump-config\n")[1]
    write(tmp_path / "parts" / "transports.xml", part)
    cfg = write(tmp_path / "amps.xml", main)
    env = {"INSTANCE": "east", "TCP_PORT": "9007"}
    verify = cli("--config", str(cfg), "--verify-config", env=env)
    assert verify.returncode == 0, verify.stderr
    res = cli("--config", str(cfg), "--dump-config", env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout == dumped
