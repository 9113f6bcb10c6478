"""The chaos run's queue audit (:func:`tests.chaos.queue_workers.check_queue`) on ledgers
written here: it finds a lost message and a message processed after its ack was persisted,
and counts a redelivery that came before any ack was persisted without failing for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ampsclient_server_stub.engine.wire import format_timestamp
from tests.chaos.queue_workers import check_queue, parse_duration, parse_lp, queue_complete


def ledger(work: Path, name: str, lines: list[dict[str, Any]]) -> None:
    with open(work / f"{name}.ledger", "w", encoding="ascii") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


LEASE = 3.0
"""The queue's LeasePeriod in these ledgers: ``lp`` = server delivery time + LEASE."""

BASE = 1_795_000_000.0
"""Times below are offsets from this epoch second."""


def done(life: int, i: int, s: int, t: float, *, delivered: float | None = None) -> dict[str, Any]:
    """A processed line: processed at ``t``, delivered by the server at ``delivered`` (``t``
    when not given)."""
    lp = format_timestamp(BASE + (t if delivered is None else delivered) + LEASE)
    return {"life": life, "i": i, "pub": "pub-0", "s": s, "lp": lp, "t": BASE + t}


def mark(life: int, upto: int, t: float) -> dict[str, Any]:
    return {"life": life, "upto": upto, "t": BASE + t}


def check(work: Path, consumers: list[str], expected: dict[str, tuple[int, int]]) -> Any:
    return check_queue(work, consumers, expected, lease_period=LEASE)


EXPECTED = {"pub-0": (1, 3)}


def test_clean_run_with_a_redelivery_before_any_persisted_ack(tmp_path: Path) -> None:
    # c0 processes 1 and 2, dies before persisting acks; c1 gets 2 again, then 3
    ledger(tmp_path, "c0", [done(10, 0, 1, 1.0), done(10, 1, 2, 1.1)])
    ledger(
        tmp_path,
        "c1",
        [done(20, 0, 2, 2.0), done(20, 1, 3, 2.1), mark(20, 1, 2.2)],
    )
    audit = check(tmp_path, ["c0", "c1"], EXPECTED)
    assert audit.problems == []
    assert (audit.processed, audit.distinct, audit.redeliveries) == (4, 3, 1)
    assert (audit.lost, audit.after_persisted_ack, audit.acks_persisted) == (0, 0, 1)
    assert audit.per_consumer == {"c0": 2, "c1": 2}
    assert queue_complete(tmp_path, ["c0", "c1"], EXPECTED)


def test_a_lost_message_is_found(tmp_path: Path) -> None:
    ledger(tmp_path, "c0", [done(10, 0, 1, 1.0), done(10, 1, 3, 1.1)])
    audit = check(tmp_path, ["c0"], EXPECTED)
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
            mark(10, 2, 1.5),
        ],
    )
    ledger(tmp_path, "c1", [done(20, 0, 2, 3.0)])
    audit = check(tmp_path, ["c0", "c1"], EXPECTED)
    assert audit.after_persisted_ack == 1
    assert audit.acks_persisted == 2  # i < upto: message 2 (sequence 3) not covered
    assert any("('pub-0', 2) delivered to c1 1.500 s after" in p for p in audit.problems)


def test_a_slow_consumer_processing_late_what_it_was_leased_before_the_ack_is_no_violation(
    tmp_path: Path,
) -> None:
    # c1 gets 2 back (c0 was cut off) at t=1.4, before c0's replayed ack persisted at t=1.5,
    # and processes it at t=1.6 (its backlog waited in its client): a redelivery, no violation
    ledger(tmp_path, "c0", [done(10, 0, 2, 1.0), done(10, 1, 1, 1.1), mark(10, 2, 1.5)])
    ledger(tmp_path, "c1", [done(20, 0, 2, 1.6, delivered=1.4)])
    audit = check(tmp_path, ["c0", "c1"], {"pub-0": (1, 2)})
    assert (audit.after_persisted_ack, audit.redeliveries, audit.problems) == (0, 1, [])


def test_parsers() -> None:
    assert parse_lp(format_timestamp(BASE + 0.25)) == BASE + 0.25
    assert parse_lp("20261124T004500Z") == parse_lp("20261124T004500.000000Z")
    assert [parse_duration(d) for d in ("3s", "500ms", "1m")] == [3.0, 0.5, 60.0]


def test_a_mark_covers_only_its_own_life_and_earlier_processings(tmp_path: Path) -> None:
    # life 11 (a restarted c0) marks at t=1.5: nothing about life 10's message, nor about its
    # own message processed later (t=2.0); its second mark (t=2.5) covers that one
    ledger(
        tmp_path,
        "c0",
        [
            done(10, 0, 1, 1.0),
            mark(11, 5, 1.5),
            done(11, 0, 1, 2.0),
            mark(11, 5, 2.5),
        ],
    )
    audit = check(tmp_path, ["c0"], {"pub-0": (1, 1)})
    assert audit.after_persisted_ack == 0 and audit.redeliveries == 1
    assert audit.acks_persisted == 1  # life 11's message 0, by the mark at t=2.5


def test_a_refused_ack_is_no_persisted_ack(tmp_path: Path) -> None:
    """``--disk-full``: the server refused c0's ack of sequence 2 (the consumer's failed-write
    handler wrote ``refused_ack``) and its flush still completed (``upto`` 2): the message
    was not acknowledged, so c1 getting it again is no redelivery after a persisted ack; the
    refused publishes are not expected either."""
    with_pid = [
        {**done(10, 0, 1, 1.0), "pid": "77"},
        {**done(10, 1, 2, 1.1), "pid": "77"},
        {**done(10, 2, 3, 1.2), "pid": "77"},
    ]
    refused = {"life": 10, "refused_ack": "77|2|", "reason": "internal error"}
    ledger(tmp_path, "c0", [*with_pid, refused, mark(10, 2, 1.5)])
    ledger(tmp_path, "c1", [{**done(20, 0, 2, 3.0), "pid": "77"}])
    audit = check_queue(
        tmp_path,
        ["c0", "c1"],
        {"pub-0": (1, 4)},
        lease_period=LEASE,
        refused=frozenset({("pub-0", 4)}),
    )
    assert (audit.after_persisted_ack, audit.refused_acks, audit.lost) == (0, 1, 0)
    assert audit.problems == []
    assert queue_complete(tmp_path, ["c0", "c1"], {"pub-0": (1, 4)}, {("pub-0", 4)})
    # the same ledgers without the refusal: the redelivery is found
    ledger(tmp_path, "c0", [*with_pid, mark(10, 2, 1.5)])
    audit = check_queue(tmp_path, ["c0", "c1"], {"pub-0": (1, 3)}, lease_period=LEASE)
    assert audit.after_persisted_ack == 1
