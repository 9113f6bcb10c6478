"""The replication holds file (``replication/holds.py``): unit tests on real files, no
process (the restart itself is proven in ``test_hold_restart.py``)."""

from __future__ import annotations

from pathlib import Path

from ampsclient_server_stub.replication.holds import HoldFile


def test_the_hold_file_is_replaced_atomically_and_a_bad_one_holds_everything(
    tmp_path: Path,
) -> None:
    """The file's round trip, and the safe reading of a damaged one."""
    holds = HoldFile(tmp_path, "A/1", durable=True)
    assert holds.path.name == "A_1.replication-holds.json"
    holds.load()
    assert holds.restored("B") is None  # first start: assumed caught up
    assert holds.save({"B": 120, "C": 7})
    assert not holds.save({"B": 120, "C": 7})  # unchanged: not written again
    assert not list(tmp_path.glob("*.tmp"))
    again = HoldFile(tmp_path, "A/1", durable=False)
    again.load()
    assert (again.restored("B"), again.restored("C"), again.restored("D")) == (120, 7, None)
    holds.path.write_text('{"version": 1, "holds": {"B": ')  # torn by hand
    damaged = HoldFile(tmp_path, "A/1", durable=False)
    damaged.load()
    assert damaged.restored("B") == 0 and damaged.restored("D") == 0
