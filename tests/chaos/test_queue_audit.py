"""The chaos run's queue audit (:func:`tests.chaos.queue_workers.check_queue`) on ledgers
written here: it finds a lost message and a message processed after its ack was persisted,
and counts a redelivery that came before any ack was persisted without failing for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.chaos.queue_workers import check_queue, queue_complete


def ledger(work: Path, name: str, lines: list[dict[str, Any]]) -> None:
    with open(work / f"{name}.ledger", "w", encoding="ascii") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def done(life: int, i: int, s: int, t: float) -> dict[str, Any]:
    return {"life": life, "i": i, "pub": "pub-0", "s": s, "t": t}


EXPECTED = {"pub-0": (1, 3)}


def test_clean_run_with_a_redelivery_before_any_persisted_ack(tmp_path: Path) -> None:
    # c0 processes 1 and 2, dies before persisting acks; c1 gets 2 again, then 3
    ledger(tmp_path, "c0", [done(10, 0, 1, 1.0), done(10, 1, 2, 1.1)])
    ledger(
        tmp_path,
        "c1",
        [done(20, 0, 2, 2.0), done(20, 1, 3, 2.1), {"life": 20, "upto": 1, "t": 2.2}],
    )
    audit = check_queue(tmp_path, ["c0", "c1"], EXPECTED)
    assert audit.problems == []
    assert (audit.processed, audit.distinct, audit.redeliveries) == (4, 3, 1)
    assert (audit.lost, audit.after_persisted_ack, audit.acks_persisted) == (0, 0, 1)
    assert audit.per_consumer == {"c0": 2, "c1": 2}
    assert queue_complete(tmp_path, ["c0", "c1"], EXPECTED)


def test_a_lost_message_is_found(tmp_path: Path) -> None:
    ledger(tmp_path, "c0", [done(10, 0, 1, 1.0), done(10, 1, 3, 1.1)])
    audit = check_queue(tmp_path, ["c0"], EXPECTED)
    assert audit.lost == 1
    assert any("lost pub-0 [2]" in p for p in audit.problems)
    assert not queue_complete(tmp_path, ["c0"], EXPECTED)


def test_processing_after_a_persisted_ack_is_found(tmp_path: Path) -> None:
    # c0's acks of its messages 0 and 1 (sequences 1, 2) persisted at t=1.5; c1 gets 2 at t=3
    ledger(
        tmp_path,
        "c0",
        [
            *(done(10, 0, 1, 1.0), done(10, 1, 2, 1.1), done(10, 2, 3, 1.2)),
            {"life": 10, "upto": 2, "t": 1.5},
        ],
    )
    ledger(tmp_path, "c1", [done(20, 0, 2, 3.0)])
    audit = check_queue(tmp_path, ["c0", "c1"], EXPECTED)
    assert audit.after_persisted_ack == 1
    assert audit.acks_persisted == 2  # i < upto: message 2 (sequence 3) not covered
    assert any("('pub-0', 2) processed by c1" in p for p in audit.problems)


def test_a_mark_covers_only_its_own_life_and_earlier_processings(tmp_path: Path) -> None:
    # life 11 (a restarted c0) marks at t=1.5: nothing about life 10's message, nor about its
    # own message processed later (t=2.0); its second mark (t=2.5) covers that one
    ledger(
        tmp_path,
        "c0",
        [
            done(10, 0, 1, 1.0),
            {"life": 11, "upto": 5, "t": 1.5},
            done(11, 0, 1, 2.0),
            {"life": 11, "upto": 5, "t": 2.5},
        ],
    )
    audit = check_queue(tmp_path, ["c0"], {"pub-0": (1, 1)})
    assert audit.after_persisted_ack == 0 and audit.redeliveries == 1
    assert audit.acks_persisted == 1  # life 11's message 0, by the mark at t=2.5
