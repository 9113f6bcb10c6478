"""The journal's archive directory and instance prefix, through the storage API and the
``journal_tool`` command line (a real process): archived files stay part of the log, an
interrupted archive recovers, tools find a server's journal without being told its name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient_server_stub.engine.journal import Journal

PID = publisher_id_for("archivist")
T0 = 1_700_000_000_000_000  # 2023: every record is old


def fill(journal: Journal, count: int) -> None:
    for seq in range(1, count + 1):
        journal.append(
            publisher_id=PID,
            sequence=seq,
            topic="t",
            command="p",
            payload=b'{"n":%d,"pad":"xxxxxxxxxxxxxxxxxxxxxxxx"}' % seq,
            fields={"mt": "json"},
            timestamp=T0 + seq,
        )


def tool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ampsclient_server_stub.journal_tool", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_archived_files_stay_part_of_the_log_and_survive_an_interrupted_archive(
    tmp_path: Path,
) -> None:
    directory, archive = tmp_path / "j", tmp_path / "archive"
    with Journal(directory, name="inst", journal_size=2048, archive_directory=archive) as journal:
        fill(journal, 300)
        journal.sync()
        sealed = [s for s in journal.segments() if s.state == "sealed"]
        assert len(sealed) >= 5
        moved = journal.archive(1.0)
        assert [p.name for p in moved] == [s.path.name for s in sealed]
        assert all(p.parent == archive and p.exists() for p in moved)
        assert not any(s.path.exists() for s in sealed)
        assert journal.statistics()["archived_segments"] == len(sealed)
        # still read, searched and compressible where they are
        assert [r.sequence for r in journal.read(1, max_records=1000)] == list(range(1, 301))
        assert journal.find_bookmark(PID, 7) == 7
        made = journal.compress(1.0)
        assert all(p.parent == archive and p.name.endswith(".journal.gz") for p in made)
    # an archive interrupted after the copy: the original is still in the journal directory
    first = sorted(archive.iterdir())[0]
    original = directory / first.name.removesuffix(".gz")
    # recreate the situation: the .journal original next to the archive copy
    subprocess.run(["zcat", str(first)], stdout=original.open("wb"), check=True)
    with Journal(directory, name="inst", archive_directory=archive) as journal:
        assert not first.exists()  # the copy went, the original stays
        assert original.exists()
        assert [r.sequence for r in journal.read(1, max_records=1000)] == list(range(1, 301))


def test_journal_tool_archives_and_reads_archived_files(tmp_path: Path) -> None:
    directory, archive = tmp_path / "j", tmp_path / "archive"
    with Journal(directory, name="node-a", journal_size=2048) as journal:
        fill(journal, 200)
    done = tool("archive", directory, "--archive-dir", archive, "--older-than", "1s")
    assert done.returncode == 0, done.stderr
    count = len(list(archive.glob("node-a-*.journal")))
    assert count >= 3 and f"archived {count} segment(s)" in done.stdout
    # without the archive directory the archived files are simply not there
    alone = json.loads(tool("info", directory, "--json").stdout)
    assert alone["first_index"] > 1
    info = tool("info", directory, "--archive-dir", archive, "--json", "--verify")
    assert info.returncode == 0, info.stderr
    summary = json.loads(info.stdout)
    assert summary["first_index"] == 1 and summary["verified"] == 200
    assert sum(1 for s in summary["segments"] if s["archived"]) == count
    dump = tool("dump", directory, "--archive-dir", archive, "--json")
    assert [json.loads(line)["index"] for line in dump.stdout.splitlines()] == list(range(1, 201))
    # archiving needs the directory; another instance's name finds nothing
    refused = tool("archive", directory)
    assert refused.returncode == 1 and "archive directory" in refused.stderr
    other = json.loads(tool("info", directory, "--name", "node-b", "--json").stdout)
    assert other["records"] == 0


def test_a_journal_opened_without_a_name_finds_the_one_prefix(tmp_path: Path) -> None:
    with Journal(tmp_path, name="amps-1", journal_size=4096) as journal:
        fill(journal, 50)
    with Journal(tmp_path, read_only=True) as journal:
        assert journal.name == "amps-1" and journal.last_index == 50
    with Journal(tmp_path, name="journal") as journal:  # another instance, same directory
        assert journal.last_index == 0
        fill(journal, 5)
    with Journal(tmp_path, read_only=True) as journal:  # "journal" has files: the default
        assert journal.name == "journal" and journal.last_index == 5
    with Journal(tmp_path, name="amps-1") as journal:
        assert journal.last_index == 50
