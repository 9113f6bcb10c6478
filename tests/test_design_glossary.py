"""docs/design.md keeps up with the house: its drawing names every subpackage, its glossary's
"where" column names files that exist, and its headings use no house word the glossary lacks.

Unit test: reads files only.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DESIGN = (ROOT / "docs" / "design.md").read_text()
PACKAGES = ("ampsclient", "ampsclient_server_stub")

PLAIN = {
    "a",
    "an",
    "and",
    "client",
    "client's",
    "decisions",
    "design",
    "engine",
    "glossary",
    "house",
    "its",
    "of",
    "server",
    "server's",
    "the",
    "tests",
    "where",
    "live",
    "words",
}
"""Heading words that are plain English or this project's ordinary names."""


def _section(title: str) -> str:
    start = DESIGN.index(f"\n## {title}")
    end = DESIGN.find("\n## ", start + 1)
    return DESIGN[start : end if end > 0 else None]


def _glossary() -> list[tuple[list[str], str]]:
    """``([word, ...], where)`` per row of the glossary table."""
    rows = []
    for line in _section("Glossary").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("**"):
            words = [w.strip() for w in cells[0].strip("*").split(",")]
            rows.append((words, cells[2]))
    return rows


def test_the_glossary_is_read() -> None:
    words = {w for ws, _ in _glossary() for w in ws}
    assert {"core", "wing", "face", "gate", "lane", "twin", "plug", "relay"} <= words


def test_every_place_the_glossary_names_exists() -> None:
    missing = []
    for words, where in _glossary():
        for path in re.findall(r"`([\w./*-]+/[\w./*-]*|[\w*-]+\.(?:py|c|md))`", where):
            bases = [ROOT, *(ROOT / p for p in PACKAGES)]
            if not any(list(base.glob(path.rstrip("/"))) for base in bases):
                missing.append(f"{words[0]}: {path}")
    assert missing == []


def test_the_drawing_names_every_subpackage() -> None:
    drawing = DESIGN.split("```", 2)[1]
    missing = [
        f"{package}/{sub.name}/"
        for package in PACKAGES
        for sub in sorted((ROOT / package).iterdir())
        if (sub / "__init__.py").exists() and f"  {sub.name}/" not in drawing
    ]
    assert missing == []  # before: cli/, spark/, queues/, views/


def test_headings_use_no_house_word_the_glossary_lacks() -> None:
    glossed = {w.lower() for ws, _ in _glossary() for w in ws}
    unknown = []
    for heading in re.findall(r"^#+ (.+)$", DESIGN, flags=re.MULTILINE):
        for word in re.findall(r"[A-Za-z][\w']*", heading.split(":")[0]):
            w = word.lower()
            if w not in PLAIN and w not in glossed and w.rstrip("s") not in glossed:
                unknown.append(f"{heading}: {word}")
    assert unknown == []
