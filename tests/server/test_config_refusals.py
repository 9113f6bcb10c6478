"""Issue 28, "configuration accepted and ignored": an ``<Options>`` child that its module never
reads is refused at start-up, naming the option and the module.

* ``<Actions>``: a journal step's ``<Topic>``, a schedule trigger's ``<Reason>`` (options that
  belong to another action's module).
* ``Authentication/Options/*`` and ``Entitlement/Options/*`` of the built-in modules: they read
  ``<UsersFile>`` only (``allow-all``/``none``: nothing); a custom ``module:factory`` gets every
  option and validates them itself.

Real files and the real ``ampsclient-server`` entry point (``--verify-config``, and a plain
start) in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ampsclient_server_stub.config import ConfigError, load_config
from ampsclient_server_stub.security.users import add_user

pytestmark = pytest.mark.integration

SERVER = Path(sys.executable).parent / "ampsclient-server"
TRANSPORT = (
    "<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>"
    "</Transport></Transports>"
)


def config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.xml"
    path.write_text(f"<AMPSConfig><Name>r</Name>{TRANSPORT}{body}</AMPSConfig>")
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SERVER), *args], capture_output=True, text=True, timeout=60, check=False
    )


def journal_action(on: str, do: str) -> str:
    return (
        "<TransactionLog><JournalDirectory>j</JournalDirectory><Topic><Name>.*</Name>"
        "<MessageType>json</MessageType></Topic></TransactionLog>"
        "<Actions><Action><On><Module>amps-action-on-schedule</Module>"
        f"<Options><Every>1h</Every>{on}</Options></On>"
        "<Do><Module>amps-action-do-remove-journal</Module>"
        f"<Options><Age>1d</Age>{do}</Options></Do></Action></Actions>"
    )


def test_a_journal_action_with_its_own_options_loads(tmp_path: Path) -> None:
    loaded = load_config(config(tmp_path, journal_action("<Name>cleanup</Name>", "")))
    assert loaded.actions[0].do[0].options == {"Age": "1d"}


@pytest.mark.parametrize(
    ("on", "do", "option", "module"),
    [
        ("", "<Topic>orders</Topic>", "Topic", "amps-action-do-remove-journal"),
        ("<Reason>expire</Reason>", "", "Reason", "amps-action-on-schedule"),
    ],
)
def test_an_option_of_another_module_is_refused_by_name(
    tmp_path: Path, on: str, do: str, option: str, module: str
) -> None:
    path = config(tmp_path, journal_action(on, do))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"option <{option}> is not an option of module {module}" in str(err.value)
    res = cli("--config", str(path), "--verify-config")
    assert res.returncode == 2
    assert f"<{option}>" in res.stderr and module in res.stderr


def security(section: str, module: str, options: str) -> str:
    return f"<{section}><Module>{module}</Module><Options>{options}</Options></{section}>"


@pytest.mark.parametrize(
    ("section", "module", "option"),
    [
        ("Authentication", "amps-default-authentication-module", "Realm"),
        ("Authentication", "users-file", "PasswordFile"),
        ("Authentication", "challenge-response", "Digest"),
        ("Authentication", "allow-all", "UsersFile"),
        ("Entitlement", "amps-default-entitlement-module", "DefaultAccess"),
        ("Entitlement", "users-file", "Cache"),
    ],
)
def test_an_option_a_builtin_security_module_does_not_read_is_refused(
    tmp_path: Path, section: str, module: str, option: str
) -> None:
    users = tmp_path / "users.json"
    add_user(users, "alice", "alice-secret-1", read=[".*"], write=[".*"])
    opts = f"<UsersFile>{users}</UsersFile><{option}>x</{option}>"
    if option == "UsersFile":
        opts = f"<UsersFile>{users}</UsersFile>"
    path = config(tmp_path, security(section, module, opts))
    for args in (("--verify-config",), ()):
        res = cli("--config", str(path), *args)
        assert res.returncode != 0
        assert f"<{section}><Options><{option}> is not an option" in res.stderr
        assert repr(module) in res.stderr


def test_the_options_a_builtin_module_reads_are_accepted(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    add_user(users, "alice", "alice-secret-1", read=[".*"], write=[".*"])
    opts = f"<UsersFile>{users}</UsersFile>"
    path = config(
        tmp_path,
        security("Authentication", "users-file", opts)
        + security("Entitlement", "amps-default-entitlement-module", opts),
    )
    res = cli("--config", str(path), "--verify-config")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("section", ["Authentication", "Entitlement"])
def test_options_without_a_module_are_refused(tmp_path: Path, section: str) -> None:
    path = config(
        tmp_path, f"<{section}><Options><UsersFile>u.json</UsersFile></Options></{section}>"
    )
    res = cli("--config", str(path), "--verify-config")
    assert res.returncode == 2
    assert f"<{section}><Options><UsersFile> without a <{section}><Module>" in res.stderr
