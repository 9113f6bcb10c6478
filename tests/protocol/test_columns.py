"""delivery_columns: the column buffers of a batch of deliveries (Python twin and C)."""

from __future__ import annotations

import random
import struct
from decimal import Decimal

import pytest

from ampsclient import _accel
from ampsclient.protocol.columns import delivery_columns
from ampsclient.protocol.header import KEY_ALIASES, decode_header

ALIASES = tuple(a.encode() for a, k in KEY_ALIASES.items() if k in ("t", "bm", "k", "x", "ts"))
needs_c = pytest.mark.skipif(_accel.delivery_columns is None, reason="no C speedups")


def _strings(offsets: bytes, data: bytes, valid: bytes | None, n: int) -> list[bytes | None]:
    ends = struct.unpack(f"<{n + 1}i", offsets)
    out: list[bytes | None] = []
    for i in range(n):
        ok = valid is None or valid[i >> 3] >> (i & 7) & 1
        out.append(data[ends[i] : ends[i + 1]] if ok else None)
    return out


def _delivery(seq: int, **extra: str) -> bytes:
    head = b'{"c":"p","t":"orders","sids":"s1","bm":"1234567890123456789|%d|"' % seq
    for key, value in extra.items():
        head += b',"%s":"%s"' % (key.encode(), value.encode())
    return head + b'}{"n":%d}' % seq


def test_the_usual_deliveries_become_columns() -> None:
    payloads = [
        _delivery(1, ts="20261128T235959.000001Z"),
        _delivery(2, k="key2", x="corr"),
        b'{"c":"p","sids":"s1","t":"other","n":-5.5e3,"b":true}',
        b'{"c":"p"}\xff{}}',
    ]
    cols = delivery_columns(payloads, ALIASES)
    assert cols is not None
    assert _strings(*cols[0:3], 4) == [b"orders", b"orders", b"other", None]
    assert _strings(*cols[3:6], 4) == [
        b"1234567890123456789|1|",
        b"1234567890123456789|2|",
        None,
        None,
    ]
    assert _strings(*cols[6:9], 4) == [None, b"key2", None, None]
    assert _strings(*cols[9:12], 4) == [None, b"corr", None, None]
    pids = [int.from_bytes(cols[12][i : i + 16], "little") for i in range(0, 64, 16)]
    assert pids[:2] == [1234567890123456789] * 2
    assert struct.unpack("<4q", cols[13])[:2] == (1, 2)
    micros = struct.unpack("<4q", cols[14])[0]
    assert micros == 1_795_910_399_000_001  # 2026-11-28T23:59:59.000001Z
    assert cols[15] == bytes([0b0001])  # only the first has a time
    assert _strings(cols[16], cols[17], None, 4) == [b'{"n":1}', b'{"n":2}', b"", b"\xff{}}"]
    assert Decimal(pids[0]) == Decimal("1234567890123456789")


@pytest.mark.parametrize(
    "payload",
    [
        b'{"c":"p","topic":"orders"}{}',  # a long name of a wanted key
        b'{"c":"p","t":"or\\"ders"}{}',  # an escape in a wanted value
        b'{"c":"p","t":"a","t":"b"}{}',  # twice
        b'{"c":"p","t":1}{}',  # not a string
        b'{"c":"p","bm":"12|x|"}{}',
        b'{"c":"p","bm":"18446744073709551616|1|"}{}',  # publisher id above 2**64 - 1
        b'{"c":"p","bm":"1|9223372036854775808|"}{}',  # sequence above 2**63 - 1
        b'{"c":"p","ts":"20261128T235959Z"}{}',
        b'{"c":"p","ts":"20260230T000000.000000Z"}{}',  # no 30th of February
        b'{"c":"p", "t":"x"}{}',  # whitespace
        b'{"c":"p","t":"\xc3\xa9"}{}',  # not ASCII
        b'{"c":"p"',
        b"",
    ],
)
def test_an_irregular_delivery_makes_the_batch_irregular(payload: bytes) -> None:
    assert delivery_columns([_delivery(1), payload], ALIASES) is None
    if _accel.delivery_columns is not None:
        assert _accel.delivery_columns([_delivery(1), payload], ALIASES) is None


def test_headers_decode_as_the_columns_say() -> None:
    """Every regular header gives the values the client's own decoder gives."""
    payloads = [_delivery(7, ts="20000229T120000.500000Z", x="c")]
    cols = delivery_columns(payloads, ALIASES)
    assert cols is not None
    header, end = decode_header(payloads[0])
    assert _strings(*cols[9:12], 1) == [header["x"].encode()]
    assert _strings(cols[16], cols[17], None, 1) == [payloads[0][end:]]


def _random_payload(rng: random.Random) -> bytes:
    keys = ["c", "t", "sids", "bm", "ts", "k", "x", "s", "l", "topic", "sub_id", "bookmark"]
    parts = []
    for key in rng.sample(keys, rng.randint(0, 6)):
        kind = rng.random()
        if kind < 0.5:
            if key == "bm":
                value = f"{rng.choice([0, 7, 2**64 - 1, 2**64])}|{rng.choice([1, 2**63])}|"
            elif key == "ts":
                value = rng.choice(
                    ["20261128T235959.123456Z", "19691231T235959.999999Z", "20261328T000000.0Z"]
                )
            else:
                value = rng.choice(["orders", "", "a/b", "é", 'q\\"x', "1|2|"])
            parts.append(f'"{key}":"{value}"'.encode())
        elif kind < 0.8:
            parts.append(f'"{key}":{rng.choice(["1", "-2.5", "true", "", "{"])}'.encode())
        else:
            parts.append(f'"{key}":"{rng.choice(["x", "y"])}"'.encode())
    head = b"{" + b",".join(parts) + b"}"
    if rng.random() < 0.1:
        head = head[: rng.randrange(len(head) + 1)]
    return head + rng.randbytes(rng.choice([0, 3, 20]))


@needs_c
@pytest.mark.parametrize("seed", range(30))
def test_c_matches_its_twin(seed: int) -> None:
    rng = random.Random(seed)
    c_version = _accel.delivery_columns
    assert c_version is not None
    for _ in range(40):
        payloads = [_random_payload(rng) for _ in range(rng.randint(0, 12))]
        if rng.random() < 0.5:  # mostly regular batches
            payloads = [_delivery(i, ts="20261128T000000.000042Z") for i in range(5)] + [
                p for p in payloads if delivery_columns([p], ALIASES) is not None
            ]
        assert c_version(payloads, ALIASES) == delivery_columns(payloads, ALIASES)


def _same_in_c_and_twin(payloads: list[bytes], aliases: tuple[bytes, ...] = ALIASES) -> None:
    c_version = _accel.delivery_columns
    assert c_version is not None
    assert c_version(payloads, aliases) == delivery_columns(payloads, aliases)


@needs_c
@pytest.mark.parametrize(
    "payload",
    [
        b"{}",  # an empty header, no body
        b'{}{"n":1}',  # an empty header
        b"{}" + b"b" * 5_000_000,  # a huge body
        b'{"c":"p","t":"' + b"t" * 70_000 + b'"}' + b"x" * 1_000_000,  # a huge value
        b'{"c":"p","s":"' + b"\\" * 40 + b'"}{}',  # escaped backslashes, word-long
        b'{"c":"p","s":"abcdefgh\\"ijklmnop\\"q"}{}',  # escaped quotes (not a wanted key)
        b'{"c":"p","t":"abcdefgh\\"ijklmnop"}{}',  # an escaped quote in a wanted value
        b'{"c":"p","t":"abcdefghijklmno\\\\"}{}',  # an escaped backslash before the quote
        b'{"c":"p","t":"abcdefghijklmnop\xc3\xa9"}{}',  # not ASCII, after two words
        b'{"c":"p","t":"abcdefg\xffhijklmnop"}{}',  # not ASCII inside a word
        b'{"c":"p","s":"abcdefg\xffhijklmnop"}{}',  # ... in a value no column takes
        b'{"c":"p","t":"ab\xffc"}{"body":1}',  # ... in the word of the closing quote
        b'{"t":"a","\xff":"v"}{"body":1}',  # ... after the closing quote, in its word
        b'{"c":"p","t":"abcdefghijklmnop',  # no closing quote, word-long
        b'{"c":"p","t":"abcdefghijklmno"',  # no closing brace
        b'{"k\\"ey":"v"}{}',  # an escape in a key
        b'{"' + b"k" * 100 + b'":"v"}{}',  # a long key
        b'{"c":"p","bm":"18446744073709551615|9223372036854775807|"}{}',  # the largest
        b'{"c":"p","bm":"012345678901234567890|1|"}{}',  # 21 digits
        b'{"c":"p","bm":"1|01234567890123456789|"}{}',  # 20 digits
        b'{"c":"p","bm":"1|2"}{}',  # no second bar
        b'{"c":"p","bm":"|1|"}{}',
        b'{"c":"p","bm":"1||"}{}',
        b'{"c":"p","bm":"1|2|3|4"}{}',
        b'{"c":"p","ts":"20261128T235959.000001Z","t":"x"}{}',
        b"no header at all",
        b'"c":"p"}{}',
        b"{",
        b"{}}",
    ],
)
def test_c_matches_its_twin_at_the_edges(payload: bytes) -> None:
    _same_in_c_and_twin([payload])
    _same_in_c_and_twin([_delivery(1), payload, _delivery(2, k="k")])


@needs_c
def test_c_matches_its_twin_for_every_value_length() -> None:
    """Values and bodies of 0-200 bytes (C copies short spans by words) and a quote at each
    place of an 8-byte word (C scans values 8 bytes at a time)."""
    payloads = [
        b'{"c":"p","t":"%s","x":"%s","k":"%s"}%s'
        % (b"t" * n, b"x" * (n // 2), b"k" * (n % 9), b"b" * n)
        for n in range(200)
    ]
    _same_in_c_and_twin(payloads)
    cols = delivery_columns(payloads, ALIASES)
    assert cols is not None
    assert _strings(*cols[0:3], 200) == [b"t" * n for n in range(200)]
    _same_in_c_and_twin(
        [
            b'{"%s":"%s\\"%s"}{}' % (b"s" * k, b"v" * v, b"w" * k)
            for k in range(1, 10)
            for v in range(20)
        ]
    )


@needs_c
def test_c_matches_its_twin_with_any_aliases() -> None:
    """C checks the aliases by length first: short, long (64 bytes and more) and empty ones."""
    long_key = b"q" * 70
    payload = b'{"c":"p","%s":"v","sub_id":"1"}{}' % long_key
    for aliases in [(), (b"",), (long_key,), (b"q" * 63,), (b"sub_id",), (*ALIASES, long_key)]:
        _same_in_c_and_twin([_delivery(1), payload], aliases)
    assert _accel.delivery_columns is not None
    assert _accel.delivery_columns([payload], (long_key,)) is None
    assert _accel.delivery_columns([payload], (b"q" * 63,)) is not None


@needs_c
def test_c_matches_its_twin_for_bookmarks_of_every_width() -> None:
    """Publisher ids and sequences of 0-22 digits (C reads 8 digits at a time)."""
    rng = random.Random(5)
    payloads = []
    for width in range(23):
        for _ in range(5):
            pid = "".join(rng.choice("0123456789") for _ in range(width))
            seq = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 20)))
            texts = [pid, "9" * width]  # and a byte just beside the digits at each place:
            texts += [pid[:at] + rng.choice("/:") + pid[at + 1 :] for at in range(width)]
            for pid_text in texts:
                payloads.append(b'{"bm":"%s|%s|"}{}' % (pid_text.encode(), seq.encode()))
    for p in payloads:
        _same_in_c_and_twin([p])
    regular = [p for p in payloads if delivery_columns([p], ALIASES) is not None]
    assert len(regular) > 100
    _same_in_c_and_twin(regular)
