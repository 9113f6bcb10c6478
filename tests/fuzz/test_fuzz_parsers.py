"""Property-based fuzzing (hypothesis) of every reader that takes bytes from outside: the
header reader, the TCP and WebSocket framers, the filter parser, the bookmark/range parser,
the XML config reader, the users file, and the store file readers (publish store segments and
state, journal segments and sidecars, the file recovery point adapter).

Each reader must either succeed or raise its own typed error: never another exception, never
hang (hypothesis' per-example deadline), and never allocate in proportion to a length it was
told rather than to the bytes it was given (tracemalloc peaks).
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ampsclient.exceptions import (
    CorruptStoreError,
    InvalidBookmarkError,
    NotAmpsPortError,
    ProtocolError,
    StoreError,
)
from ampsclient.protocol.bookmarks import parse_bookmark
from ampsclient.protocol.framing import TcpFramer, WsClientFramer, WsServerFramer
from ampsclient.protocol.header import decode_header, encode_header
from ampsclient.stores.publish.file import FilePublishStore, inspect_store
from ampsclient.stores.recovery.file import FileRecoveryPointAdapter
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.engine.filters import FilterError, compile_filter
from ampsclient_server_stub.engine.journal import Journal, JournalError
from ampsclient_server_stub.engine.journal_format import (
    CorruptJournalError,
    decode_clients,
    read_index_header,
    scan_records,
)
from ampsclient_server_stub.security.auth import AuthVerdict, ChallengeResponseAuthentication
from ampsclient_server_stub.security.passwords import PasswordHashError, parse_hash
from ampsclient_server_stub.security.users import UsersFile, UsersFileError

FUZZ = settings(
    max_examples=300,
    deadline=5000,  # a hang shows up as a deadline failure, not a stuck run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=False,
)
FEW = settings(FUZZ, max_examples=120)


@contextmanager
def bounded_memory(limit: int) -> Iterator[None]:
    """Fail when the block allocates more than ``limit`` bytes at its peak."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= limit, f"peak allocation {peak} > {limit}"


# --------------------------------------------------------------------------- wire readers

header_like = st.one_of(
    st.binary(max_size=300),
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none()),
        max_size=6,
    ).map(lambda d: encode_header(d) if d else b"{}"),
    st.text(max_size=200).map(lambda t: ("{" + t).encode("utf-8", "surrogatepass")),
)


@FUZZ
@given(header_like, st.binary(max_size=50))
def test_header_reader(header: bytes, body: bytes) -> None:
    payload = header + body
    with bounded_memory(64 * len(payload) + 256 * 1024):
        try:
            hdr, end = decode_header(payload)
        except ProtocolError:
            return
    assert isinstance(hdr, dict) and 0 < end <= len(payload)


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=30), st.integers(16, 4096))
def test_tcp_framer(chunks: list[bytes], max_frame: int) -> None:
    framer = TcpFramer(max_frame_size=max_frame)
    total = sum(map(len, chunks))
    with bounded_memory(16 * total + 256 * 1024):
        for chunk in chunks:
            try:
                framer.receive_data(chunk)
            except (ProtocolError, NotAmpsPortError):  # (an HTTP answer: 'HTTP/' first)
                return
            for frame in framer.frames():
                assert len(frame) <= max_frame
        assert framer.buffered <= max(total, 4)


@FUZZ
@given(st.integers(0, 2**32 - 1))
def test_tcp_framer_never_trusts_a_length(n: int) -> None:
    framer = TcpFramer(max_frame_size=1 << 20)
    with bounded_memory(256 * 1024):
        try:
            framer.receive_data(struct.pack(">I", n) + b"\xff" * 8)
        except ProtocolError:
            return  # either this length or the next (0xffffffff) is refused
        frames = framer.frames()
        assert frames == ([] if n > 8 else [b"\xff" * n])  # only whole frames, never a guess


ws_message = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200),
    st.integers(0, 5).map(lambda n: struct.pack("<I", n)),
    st.sampled_from(["text", "binary"]),
)


@FUZZ
@given(st.lists(ws_message, max_size=20), st.integers(16, 2048))
def test_ws_server_framer(messages: list[bytes | str], max_frame: int) -> None:
    framer = WsServerFramer(max_frame_size=max_frame)
    with bounded_memory(64 * 1024 + 64 * sum(len(m) for m in messages)):
        for message in messages:
            try:
                payload = framer.receive_message(message)
            except ProtocolError:
                return
            if payload is not None:
                assert isinstance(payload, bytes)


@FUZZ
@given(st.lists(ws_message, max_size=20), st.integers(16, 2048))
def test_ws_client_framer(messages: list[bytes | str], max_frame: int) -> None:
    framer = WsClientFramer(max_frame_size=max_frame)
    for message in messages:
        try:
            framer.receive_message(message)
        except ProtocolError:
            return


# --------------------------------------------------------------------------- text parsers

filter_alphabet = st.sampled_from(
    [
        *list("/abcxyz019 .,'\"()[]<>=!+-*%_\\"),
        *(" AND ", " OR ", " NOT ", " IN ", " LIKE ", " BETWEEN ", " IS NULL", "NaN", "/a/b"),
    ]
)
filter_text = st.one_of(
    st.text(max_size=80),
    st.lists(filter_alphabet, max_size=40).map("".join),
    st.integers(1, 600).map(lambda n: "(" * n + "/a = 1" + ")" * n),
    st.integers(1, 600).map(lambda n: "NOT " * n + "/a = 1"),
)
documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abcxyz"), inner, max_size=3)
    ),
    max_leaves=10,
)


@FUZZ
@given(filter_text, st.lists(documents, max_size=3))
def test_filter_parser(text: str, docs: list[Any]) -> None:
    try:
        predicate = compile_filter(text)
    except FilterError:
        return
    for doc in docs:
        assert predicate(doc) in (True, False)


bookmark_alphabet = st.sampled_from([*list("0123456789|,:[]()T.Z"), "EPOCH", "NOW", "recent"])


@FUZZ
@given(st.one_of(st.text(max_size=60), st.lists(bookmark_alphabet, max_size=30).map("".join)))
def test_bookmark_and_range_parser(text: str) -> None:
    try:
        parse_bookmark(text)
    except InvalidBookmarkError:
        return


xml_pieces = st.sampled_from(
    [
        "<AMPSConfig>",
        "</AMPSConfig>",
        "<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>",
        "</InetAddr></Transport></Transports>",
        "<SOW><Topic><Name>x</Name><MessageType>json</MessageType><Key>/k</Key></Topic></SOW>",
        "<TransactionLog><JournalDirectory>j</JournalDirectory><Topic><Name>a",
        "</Name></Topic></TransactionLog>",
        "<MessageMemoryLimit>",
        "</MessageMemoryLimit>",
        "<!DOCTYPE x [<!ENTITY a 'b'>]>",
        "&a;",
        "9007",
        "10GB",
        "-1",
        "%",
        "<Replication><Destination><Name>d</Name>",
        "</Destination></Replication>",
        "<Admin><InetAddr>8085</InetAddr></Admin>",
    ]
)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.lists(xml_pieces, max_size=12).map("".join)))
def test_xml_config_reader(text: str) -> None:
    try:
        parse_config(text, base_dir=Path("/nonexistent-fuzz-base"))
    except ConfigError:
        return


@FUZZ
@given(st.one_of(st.text(max_size=120), st.binary(max_size=120).map(lambda b: b.hex())))
def test_password_hash_parser(text: str) -> None:
    try:
        parse_hash(text)
    except PasswordHashError:
        return


users_json = st.one_of(
    st.text(max_size=100),
    st.recursive(
        st.one_of(st.none(), st.text(max_size=10), st.integers(), st.booleans()),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(
                st.sampled_from(["users", "default", "password", "read", "write", "a", "sow"]),
                inner,
                max_size=4,
            ),
        ),
        max_leaves=12,
    ).map(json.dumps),
)


@FUZZ
@given(users_json)
def test_users_file_reader(text: str) -> None:
    try:
        UsersFile.parse(text)
    except UsersFileError:
        return


@FEW
@given(st.text(max_size=40), st.text(max_size=120))
def test_challenge_response_answers(user: str, answer: str) -> None:
    class _NoUsers:
        users: dict[str, Any] = {}

        def refresh(self, now: float) -> None:
            return None

    module = ChallengeResponseAuthentication(_NoUsers())  # type: ignore[arg-type]
    state: dict[str, Any] = {}
    first = module.authenticate(user, answer, state)
    assert first.status == "retry"
    second = module.authenticate(user, answer, state)
    assert isinstance(second, AuthVerdict) and second.status in ("failure", "retry")


# --------------------------------------------------------------------------- store readers


def _mutations() -> st.SearchStrategy[list[tuple[int, int]]]:
    return st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6)


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, value in edits:
        if buf:
            buf[pos % len(buf)] = value
    if cut is not None and buf:
        del buf[cut % len(buf) :]
    return bytes(buf)


@pytest.fixture(scope="module")
def publish_store_image(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    directory = tmp_path_factory.mktemp("pubstore")
    store = FilePublishStore(str(directory / "s"))
    try:
        for i in range(20):
            store.store(lambda seq, i=i: f'{{"c":"p","t":"t","s":{seq}}}{{"i":{i}}}'.encode())
        store.discard_up_to(5)
        store.discard(9)
    finally:
        store.close()
    return {p.name: p.read_bytes() for p in (directory / "s").iterdir() if p.name != "lock"}


@FEW
@given(_mutations(), st.one_of(st.none(), st.integers(0, 10_000)), st.binary(max_size=64))
def test_publish_store_reader(
    tmp_path_factory: pytest.TempPathFactory,
    publish_store_image: dict[str, bytes],
    edits: list[tuple[int, int]],
    cut: int | None,
    junk: bytes,
) -> None:
    directory = tmp_path_factory.mktemp("pub")
    for i, (name, data) in enumerate(sorted(publish_store_image.items())):
        mutated = _mutate(data, edits if i == 0 else [], cut if i == 0 else None)
        (directory / name).write_bytes(mutated + (junk if i == 0 else b""))
    try:
        inspect_store(directory)
    except StoreError:
        pass
    try:
        FilePublishStore(str(directory)).close()
    except StoreError:
        pass


@pytest.fixture(scope="module")
def journal_image(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    directory = tmp_path_factory.mktemp("journal")
    journal = Journal(directory, journal_size=4096, fsync="never")
    try:
        for i in range(60):
            journal.append(
                publisher_id=7, sequence=i + 1, topic="t", command="p", payload=b"x" * (i % 50)
            )
        journal.sync()
    finally:
        journal.close()
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.name != "journal.lock"}


JOURNAL_ERRORS = (CorruptJournalError, JournalError, OSError)


@FEW
@given(
    st.integers(0, 50), _mutations(), st.one_of(st.none(), st.integers(0, 10_000)), st.booleans()
)
def test_journal_segment_and_sidecar_readers(
    tmp_path_factory: pytest.TempPathFactory,
    journal_image: dict[str, bytes],
    which: int,
    edits: list[tuple[int, int]],
    cut: int | None,
    tolerate: bool,
) -> None:
    names = sorted(journal_image)
    target = names[which % len(names)]
    directory = tmp_path_factory.mktemp("j")
    for name in names:
        data = journal_image[name]
        if name == target:
            data = _mutate(data, edits, cut)
        (directory / name).write_bytes(data)
    path = directory / target
    if target.endswith(".journal"):
        first = int(target.split("-")[1].split(".")[0])
        try:
            scan_records(path, first, tolerate_tail=tolerate)
        except CorruptJournalError:
            pass
    elif target.endswith(".index"):
        header = read_index_header(path.read_bytes()[:64])
        assert header is None or header.count >= 0
    elif target == "journal.clients":
        decoded = decode_clients(path.read_bytes())
        assert decoded is None or isinstance(decoded[1], dict)
    try:
        journal = Journal(directory, journal_size=4096, fsync="never")
    except JOURNAL_ERRORS:
        return
    try:
        position = journal.first_index
        while position <= journal.last_index:
            try:
                records = journal.read(position, max_records=16)
            except JOURNAL_ERRORS:
                break
            if not records:
                break
            position = records[-1].index + 1
    finally:
        journal.close()


recovery_lines = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.text(max_size=40).map(str.encode),
        st.fixed_dictionaries(
            {
                "subId": st.one_of(st.text(max_size=5), st.integers()),
                "bookmark": st.text(max_size=8),
            }
        ).map(lambda d: json.dumps(d).encode()),
        st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
    ),
    max_size=6,
)


@FUZZ
@given(st.booleans(), recovery_lines, st.booleans())
def test_file_recovery_point_adapter_reader(
    tmp_path_factory: pytest.TempPathFactory,
    good_header: bool,
    lines: list[bytes],
    trailing_newline: bool,
) -> None:
    directory = tmp_path_factory.mktemp("rp")
    path = directory / "points"
    with FileRecoveryPointAdapter(path):
        pass  # a valid header
    header = path.read_bytes().split(b"\n")[0]
    body = b"\n".join(([header] if good_header else []) + lines)
    path.write_bytes(body + (b"\n" if trailing_newline else b""))
    try:
        FileRecoveryPointAdapter(path, fsync="never").close()
    except (CorruptStoreError, StoreError):
        pass
