"""The link-shaping core of the fault proxy (:mod:`ampsclient_server_stub.testing.netem`):
no I/O, the time is passed in."""

from __future__ import annotations

import random

import pytest

from ampsclient_server_stub.testing.netem import (
    DirectionShaper,
    LinkShape,
    TokenBucket,
    direction_rng,
)


def test_release_times_never_go_backwards_under_jitter() -> None:
    """TCP never reorders bytes: a chunk with a short delay drawn waits for the one ahead."""
    shaper = DirectionShaper(random.Random(1))
    shape = LinkShape(latency=0.05, jitter=0.05)
    releases = [shaper.release_time(i * 0.001, shape) for i in range(500)]
    assert releases == sorted(releases)
    assert all(r >= i * 0.001 for i, r in enumerate(releases))  # never before it was read
    assert all(r <= i * 0.001 + 0.1 for i, r in enumerate(releases))  # latency + jitter
    # some draws were shortened and clamped to the chunk ahead (the test shows the clamp)
    assert len(set(releases)) < len(releases)


def test_fragment_pieces_cover_the_bytes_in_order() -> None:
    shaper = DirectionShaper(random.Random(2))
    data = bytes(range(256)) * 4
    pieces = shaper.pieces(data, LinkShape(fragment=7))
    assert b"".join(pieces) == data
    assert all(1 <= len(p) <= 7 for p in pieces)
    assert {len(p) for p in pieces} == set(range(1, 8))
    assert shaper.pieces(data, LinkShape(fragment=1)) == [bytes([b]) for b in data]
    assert shaper.pieces(data, LinkShape()) == [data]


def test_bandwidth_pieces_are_no_larger_than_the_bucket() -> None:
    shaper = DirectionShaper(random.Random(3))
    pieces = shaper.pieces(b"x" * 10_000, LinkShape(bandwidth=10_000.0))
    assert [len(p) for p in pieces] == [1000] * 10  # a tenth of a second's worth


def test_token_bucket_rate() -> None:
    """K bytes never leave faster than (K - size) / rate, whatever the piece sizes."""
    bucket = TokenBucket(1000.0, 100, now=0.0)
    now = 0.0
    for _ in range(50):  # 50 pieces of 100 bytes: 5000 bytes at 1000 B/s
        now += bucket.reserve(100, now)
    assert now == pytest.approx(4.9)  # the first 100 bytes were credit
    assert TokenBucket(1000.0, 100, now=0.0).reserve(100, 0.0) == 0.0


def test_token_bucket_credit_is_capped() -> None:
    bucket = TokenBucket(1000.0, 100, now=0.0)
    assert bucket.reserve(100, 0.0) == 0.0
    assert bucket.reserve(100, 60.0) == 0.0  # a minute idle: still only 100 bytes of credit
    assert bucket.reserve(100, 60.0) == pytest.approx(0.1)


def test_the_same_seed_shapes_the_same_way() -> None:
    def draws(seed: int, connection: int) -> list[bytes]:
        shaper = DirectionShaper(direction_rng(seed, connection, "to_client"))
        return shaper.pieces(b"y" * 200, LinkShape(fragment=9))

    assert draws(5, 1) == draws(5, 1)
    assert draws(5, 1) != draws(5, 2)
    assert direction_rng(5, 1, "to_server").random() != direction_rng(5, 1, "to_client").random()


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"latency": -1.0}, "latency"),
        ({"latency": 61.0}, "latency"),
        ({"latency": 0.01, "jitter": 0.02}, "jitter"),
        ({"fragment": -1}, "fragment"),
        ({"coalesce": -2}, "coalesce"),
        ({"coalesce_window": 0.0}, "coalesce_window"),
        ({"bandwidth": 0.5}, "bandwidth"),
        ({"burst": -1}, "burst"),
    ],
)
def test_bad_settings_are_refused_by_name(changes: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named} must be"):
        LinkShape(**changes)  # type: ignore[arg-type]


def test_plain() -> None:
    assert LinkShape().plain
    assert not LinkShape(drop=True).plain
    assert not LinkShape(coalesce=2).plain
