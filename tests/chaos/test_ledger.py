"""The chaos subscriber's ledger: a restarted subscriber reads only its ledger's tail.

The soaks' subscriber RSS peaks (250-340 MB each) were all sampled while a restarted
subscriber read its whole ledger (3 descriptors: not connected yet); every sample of a
connected subscriber was 52-54 MB. These tests pin the recovery to the tail, by the bytes it
allocates (tracemalloc), and check it finds the same points as reading every line.
"""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

from tests.chaos.run import LEDGER_BLOCK, LedgerAdapter, iter_lines, last_points


def _line(**fields: object) -> bytes:
    return (json.dumps(fields, separators=(",", ":")) + "\n").encode()


def _delivery(sub: str, k: int) -> bytes:
    return (
        b'{"sub":"%s","point":"1234567890123456789|%d|","msg":{"pub":"pub-0","k":%d,'
        b'"pid":"1234567890123456789","s":%d,"t":1.0,"rt":2.0}}\n' % (sub.encode(), k, k, k)
    )


def _naive(path: Path, sub_ids: tuple[str, ...]) -> dict[str, str]:
    points = {}
    for line in iter_lines(path):
        if line.get("sub") in sub_ids:
            points[line["sub"]] = line["point"]
    return points


def test_a_restart_reads_the_tail_of_a_large_ledger_not_the_whole_file(tmp_path: Path) -> None:
    ledger = tmp_path / "sub-0.ledger"
    with ledger.open("wb") as f:
        f.writelines(_delivery("s", k) for k in range(1, 60_001))
    size = ledger.stat().st_size
    assert size > 8_000_000
    tracemalloc.start()
    try:
        adapter = LedgerAdapter(ledger)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    adapter.close()
    assert adapter.points == {"s": "1234567890123456789|60000|"}
    # a few blocks at most (the whole file before: read_bytes + a line list, ~3x its size)
    assert peak < 8 * LEDGER_BLOCK, (peak, size)


def test_the_tail_scan_finds_what_reading_every_line_finds(tmp_path: Path) -> None:
    rng = random.Random(32)
    pads, weights = [0, 100, 3000, 2 * LEDGER_BLOCK], [50, 40, 9, 1]  # a few longer than a block
    for case in range(12):
        ledger = tmp_path / f"ledger-{case}"
        lines: list[bytes] = []
        for k in range(rng.randrange(0, 1500)):
            kind = rng.random()
            if kind < 0.6:
                lines.append(_delivery(rng.choice(["s", "t"]), k))
            elif kind < 0.9:  # an unpaired delivery, long lines crossing block boundaries
                lines.append(
                    _line(msg={"pub": "p", "k": k, "pad": "x" * rng.choices(pads, weights)[0]})
                )
            else:
                lines.append(_line(stats={"received": k}))
        if rng.random() < 0.5:  # many lines without a point after the last one
            lines += [_line(msg={"k": k, "pad": "y" * 200}) for k in range(rng.randrange(2000))]
        data = b"".join(lines)
        if rng.random() < 0.3:
            data += b'{"sub":"s","point":"99|9'  # a torn last line
        ledger.write_bytes(data)
        for subs in (("s",), ("s", "t"), ("u",)):
            assert last_points(ledger, subs) == _naive(ledger, subs), (case, subs)
    assert last_points(tmp_path / "absent", ("s",)) == {}
