"""A queue's arrivals (``queues/arrivals.py``): runs of new messages kept as the intake read
them, made objects when leased or looked at. The queue model alone (no I/O): every rule of
the FIFO holds across the two forms, message by message."""

from __future__ import annotations

from typing import Any

import pytest

from ampsclient_server_stub.queues.arrivals import MERGE_WINDOW, Arrivals
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.queues.model import GONE, LEASED, Queue, QueueMessage, QueueSub


def run(first: int, count: int) -> list[tuple[str, bytes]]:
    return [(f"7|{n}|", b'{"n":%d}' % n) for n in range(first, first + count)]


def make_queue(**options: Any) -> Queue:
    options.setdefault("max_per_subscription_backlog", 1000)
    return Queue(QueueConfig(name="q", message_type="json", **options), decode=lambda _: None)


def subscribe(queue: Queue, backlog: int) -> QueueSub:
    qsub = QueueSub(object(), object(), backlog, None)
    queue.add(qsub)
    return qsub


def leased_ns(leases: list[tuple[QueueSub, Any]]) -> list[int]:
    return [int(msg.bookmark.split("|")[1]) for _, msg in leases]


def known_nothing(_bookmark: str) -> bool:
    return False


def test_arrivals_keep_runs_in_order_and_count_them() -> None:
    arrivals = Arrivals()
    arrivals.add(run(1, 3), 10.0, 1)
    arrivals.add([], 11.0, 4)  # an empty run is not kept
    arrivals.add(run(4, 2), 12.0, 4)
    assert len(arrivals) == 5 and arrivals.first_bookmark() == "7|1|"
    batch, index, first, when = arrivals.head()
    assert (len(batch), index, first, when) == (3, 0, 1, 10.0)
    arrivals.advance(2)
    assert arrivals.first_bookmark() == "7|3|" and len(arrivals) == 3
    arrivals.advance(5)  # at most what the first run has left
    assert arrivals.first_bookmark() == "7|4|" and len(arrivals) == 2
    rest = arrivals.drain()
    assert [(b, order, when) for b, _, order, when in rest] == [
        ("7|4|", 4, 12.0),
        ("7|5|", 5, 12.0),
    ]
    assert len(arrivals) == 0 and arrivals.first_bookmark() is None and arrivals.drain() == []


def test_runs_within_the_merge_window_join_the_newest_run() -> None:
    arrivals = Arrivals()
    arrivals.add(run(1, 2), 10.0, 1)
    arrivals.add(run(3, 1), 10.0 + MERGE_WINDOW / 2, 3)  # within the window, next in order
    batch, index, first, when = arrivals.head()
    assert ([b for b, _ in batch], index, first, when) == (["7|1|", "7|2|", "7|3|"], 0, 1, 10.0)
    arrivals.add(run(4, 1), 10.0 + MERGE_WINDOW * 2, 4)  # after the window: a run of its own
    arrivals.add(run(9, 1), 10.0 + MERGE_WINDOW * 2, 9)  # not next in order: its own too
    arrivals.advance(3)
    assert arrivals.head()[1:] == (0, 4, 10.0 + MERGE_WINDOW * 2)
    rest = arrivals.drain()
    assert [(b, order) for b, _, order, _ in rest] == [("7|4|", 4), ("7|9|", 9)]
    assert len(arrivals) == 0


def test_a_publisher_sending_one_message_at_a_time_is_leased_in_order() -> None:
    queue = make_queue()
    for n in range(1, 501):  # the intake's runs of one message, all within the window
        assert queue.enqueue_run(run(n, 1), 1.0 + n * 1e-7) == 1
    qsub = subscribe(queue, 300)
    assert leased_ns(queue.offer(2.0)) == list(range(1, 301))
    queue.ack(list(qsub.leased), option=None, owner=None, now=3.0, known=known_nothing)
    assert leased_ns(queue.offer(4.0)) == list(range(301, 501))


def test_a_run_is_kept_and_leased_in_publication_order() -> None:
    queue = make_queue()
    assert queue.enqueue_run(run(1, 50), 1.0) == 50
    assert queue.enqueue_run(run(51, 50), 2.0) == 50
    assert len(queue) == 100 and queue.oldest_bookmark() == "7|1|"
    a, b = subscribe(queue, 30), subscribe(queue, 30)
    leases = queue.offer(3.0)
    assert leased_ns(leases) == list(range(1, 61))  # the backlogs' room, oldest first
    assert len(a.leased) == len(b.leased) == 30  # proportional: the same share each
    assert all(msg.state == LEASED and msg.deliveries == 1 for _, msg in leases)
    assert [msg.order for _, msg in leases] == list(range(1, 61))
    assert {msg.enqueued for _, msg in leases} == {1.0, 2.0}
    assert len(queue) == 100 and queue.oldest_bookmark() == "7|1|"
    # the acknowledged ones leave; the next offer continues where the last stopped
    result = queue.ack(
        [msg.bookmark for _, msg in leases], option=None, owner=None, now=4.0, known=known_nothing
    )
    assert len(result.removed) == 60 and len(queue) == 40
    assert queue.oldest_bookmark() == "7|61|"
    assert leased_ns(queue.offer(5.0)) == list(range(61, 101))


def test_looking_at_the_queue_makes_every_arrival_an_object_in_order() -> None:
    queue = make_queue()
    queue.enqueue_run(run(1, 3), 1.0)
    qsub = subscribe(queue, 1)
    assert leased_ns(queue.offer(2.0)) == [1]
    queue.enqueue_run(run(4, 2), 3.0)
    assert list(queue.messages) == ["7|1|", "7|2|", "7|3|", "7|4|", "7|5|"]
    assert [m.order for m in queue.messages.values()] == [1, 2, 3, 4, 5]
    assert "7|5|" in queue and "7|6|" not in queue
    qsub.backlog = 10
    assert leased_ns(queue.offer(4.0)) == [2, 3, 4, 5]


def test_a_message_enqueued_one_by_one_after_arrivals_keeps_its_place() -> None:
    queue = make_queue()
    queue.enqueue_run(run(1, 2), 1.0)
    assert queue.enqueue("7|3|", b'{"n":3}', "corr", 1.5)  # another form: after the run
    queue.enqueue_run(run(4, 2), 2.0)
    subscribe(queue, 10)
    leases = queue.offer(3.0)
    assert leased_ns(leases) == [1, 2, 3, 4, 5]
    assert [msg.x for _, msg in leases] == [None, None, "corr", None, None]


def test_an_ack_of_a_waiting_arrival_removes_it_and_an_unknown_one_is_deferred() -> None:
    queue = make_queue()
    queue.enqueue_run(run(1, 4), 1.0)
    result = queue.ack(["7|2|", "7|9|"], option=None, owner=None, now=2.0, known=known_nothing)
    assert result.removed == ["7|2|"] and result.deferred == ["7|9|"]
    subscribe(queue, 10)
    assert leased_ns(queue.offer(3.0)) == [1, 3, 4]
    # the deferred ack takes the message out of the run that brings it
    assert queue.enqueue_run(run(8, 3), 4.0) == 2
    assert queue.counters["deferred_acks_applied"] == 1
    assert leased_ns(queue.offer(5.0)) == [8, 10]


def test_at_most_once_arrivals_leave_the_queue_when_sent() -> None:
    queue = make_queue(semantics="at-most-once")
    queue.enqueue_run(run(1, 3), 1.0)
    qsub = subscribe(queue, 2)
    leases = queue.offer(2.0)
    assert leased_ns(leases) == [1, 2] and {msg.state for _, msg in leases} == {GONE}
    assert len(queue) == 1 and list(queue.messages) == ["7|3|"]
    assert len(qsub.leased) == 2  # the backlog slots stay until acknowledged
    queue.ack(["7|1|", "7|2|"], option=None, owner=None, now=3.0, known=known_nothing)
    assert len(qsub.leased) == 0 and leased_ns(queue.offer(4.0)) == [3]


@pytest.mark.parametrize(
    "options",
    [{"underlying": ("a", "b")}, {"priority": "/p"}, {"expiration": 60.0}],
    ids=["two-topics", "priority", "expiration"],
)
def test_other_queues_make_objects_at_once(options: dict[str, Any]) -> None:
    queue = make_queue(**options)
    if "priority" in options:
        queue = Queue(queue.config, decode=lambda _: None, priority=lambda _: 0)
    queue.enqueue_run(run(1, 3), 1.0)
    assert queue.enqueue_run(run(1, 3), 1.0) == 0  # duplicates are seen there
    assert queue.oldest_bookmark() == "7|1|" and len(queue) == 3


def test_arrivals_leased_with_a_lease_period_share_one_deadline_and_come_back() -> None:
    queue = make_queue(lease_period=5.0)
    queue.enqueue_run(run(1, 4), 1.0)
    a, b = subscribe(queue, 2), subscribe(queue, 2)
    leases = queue.offer(10.0)
    assert leased_ns(leases) == [1, 2, 3, 4]
    assert [qsub for qsub, _ in leases] == [a, b, a, b]  # proportional, ties to the first
    deadline = leases[0][1].lease_deadline
    assert deadline == 15.0 and all(msg.lease_deadline is deadline for _, msg in leases)
    assert queue.next_deadline() == 15.0
    queue.ack(["7|2|"], option=None, owner=None, now=11.0, known=known_nothing)
    assert queue.tick(14.9) == ([], 0)  # not yet
    assert queue.tick(15.0) == ([], 3)  # the three still leased come back, in their order
    assert not a.leased and not b.leased
    again = queue.offer(16.0)
    assert leased_ns(again) == [1, 3, 4]
    assert [msg.deliveries for _, msg in again] == [2, 2, 2]


def test_arrivals_become_the_queue_s_message_class_if_it_changes() -> None:
    queue = make_queue()
    queue.enqueue_run(run(1, 3), 1.0)  # kept as a run (the plain class)

    class Tagged(QueueMessage):
        __slots__ = ("tag",)

    queue.message_class = Tagged
    subscribe(queue, 10)
    leases = queue.offer(2.0)
    assert leased_ns(leases) == [1, 2, 3]
    assert all(type(msg) is Tagged for _, msg in leases)
    assert [msg.order for _, msg in leases] == [1, 2, 3]
