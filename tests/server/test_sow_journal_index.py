"""The SOW's recovery checkpoint: the journal index its state reflects, kept in its own file and
written in the same transaction as the data."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ampsclient_server_stub.engine.sow import SowTopic


def open_sow(path: Path) -> SowTopic:
    return SowTopic("orders", keys=("/id",), filename=path)


def write(sow: SowTopic, n: int, journal_index: int | None) -> None:
    body = b'{"id":%d}' % n
    sow.publish(
        body, doc=None, sow_key=None, bookmark="", timestamp="", journal_index=journal_index
    )


def test_a_new_sow_reflects_nothing(tmp_path: Path) -> None:
    with open_sow(tmp_path / "s.sqlite") as sow:
        assert sow.journal_index == 0


def test_writes_carry_the_journal_index_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with open_sow(path) as sow:
        write(sow, 1, 7)
        write(sow, 2, None)  # an unrecorded write leaves it alone
        assert sow.journal_index == 7
        sow.delete(keys=[sow.compute_key({"id": 1})], journal_index=9)
        assert sow.journal_index == 9 and len(sow) == 1
    with open_sow(path) as sow:
        assert sow.journal_index == 9
        sow.set_journal_index(4)  # moved back after a crash that lost journal records
    with open_sow(path) as sow:
        assert sow.journal_index == 4


def test_topics_sharing_a_file_have_their_own_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    with open_sow(path) as a, SowTopic("other", keys=("/id",), filename=path) as b:
        write(a, 1, 3)
        b.set_journal_index(11)
    with open_sow(path) as a, SowTopic("other", keys=("/id",), filename=path) as b:
        assert (a.journal_index, b.journal_index) == (3, 11)


def test_the_checkpoint_commits_with_the_data_it_describes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with open_sow(path) as sow:
        write(sow, 1, 1)
        # another connection sees the data and the index together, never one without the other
        peek = sqlite3.connect(path)
        try:
            (count,) = peek.execute(
                "SELECT count(*) FROM sqlite_master WHERE name = 'journal_checkpoint'"
            ).fetchone()
            assert count == 1
            (index,) = peek.execute("SELECT journal_index FROM journal_checkpoint").fetchone()
            assert index == 1
        finally:
            peek.close()


def test_a_batch_commits_once_and_rolls_back_as_a_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with open_sow(path) as sow:
        with sow.batch():
            for n in range(1, 101):
                write(sow, n, n)
        assert len(sow) == 100 and sow.journal_index == 100

        class Boom(Exception):
            pass

        with pytest.raises(Boom), sow.batch():
            write(sow, 500, 101)
            sow.delete(journal_index=102)
            assert len(sow) == 0
            raise Boom
        # nothing of the failed batch: data, cache and index as before it
        assert len(sow) == 100 and sow.journal_index == 100
        assert sow.compute_key({"id": 500}) not in sow
    with open_sow(path) as sow:
        assert len(sow) == 100 and sow.journal_index == 100
