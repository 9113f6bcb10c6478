"""``make test`` runs the tests marked serial over the files ``tests/serial_files.txt`` names:
the list must name every file that has one, or that test would run in neither pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "serial_files.txt"


def listed() -> list[str]:
    return [line.strip() for line in LIST.read_text().splitlines() if line.strip()]


def collect_serial_files() -> set[str]:
    """The files of every test marked serial, from a collection of the whole suite."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q", "-m", "serial"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line}


def test_the_serial_list_names_every_file_with_a_serial_test(
    serial_files_collected: set[str] | None,
) -> None:
    # the parallel pass collects the whole suite: its own collection says (a run of part of the
    # suite collects it all once more)
    found = serial_files_collected
    if found is None:
        found = collect_serial_files()
    assert found, "no test marked serial was collected"
    missing = sorted(found - set(listed()))
    assert missing == [], f"add to tests/serial_files.txt (make test's serial pass): {missing}"


def test_the_serial_list_names_only_files_that_mark_tests_serial() -> None:
    # a module skipped at collection (the official client not installed) shows no tests, so
    # this reads the files: each exists and marks something serial
    files = listed()
    assert files == sorted(set(files)), "one line per file, sorted"
    for name in files:
        path = ROOT / name
        assert path.is_file(), f"{name}: no such file (tests/serial_files.txt)"
        assert "mark.serial" in path.read_text(), f"{name}: no test marked serial"
