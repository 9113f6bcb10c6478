"""Reading what a queue's intake subscription receives: bookmark, body, ``x``.

The ordinary delivery code hands a queue the frames it would send a subscriber of the
underlying topic. Most are in one plain form, ``{...,"bm":"<bookmark>"}BODY`` (no correlation
id, no SOW key): :func:`plain_run` reads a run of those with two ``find`` calls each and no
header parse; :func:`parse_frame` reads any other frame (and a SOW record's own expiration).
A journaled run of plain publishes that needs no filter skips the frames: the intake
connection's ``run_sink`` takes the run itself, and :func:`run_pairs` makes the same pairs
from its sequences.
"""

from __future__ import annotations

from collections.abc import Sequence

from ampsclient.protocol.header import decode_header

from ..engine.wire import text
from .expiration import MessageExpiry

__all__ = ["Parsed", "parse_frame", "plain_run", "run_pairs"]

Parsed = tuple[str | None, bytes, str | None, float | None]
"""``(bookmark or None, body, x, own expiration)`` of one frame."""


def plain_run(
    frames: Sequence[bytes], start: int, sow_keys: bool
) -> tuple[int, list[tuple[str, bytes]]]:
    """``(end, [(bookmark, body), ...])`` of ``frames[start:end]``, the longest run of frames
    in the plain form from ``start``.

    The plain form is ``...,"bm":"<bookmark>"}BODY``: the bookmark is the header's last
    field and has no quote. With ``sow_keys`` (the broker has SOW topics), a frame whose
    header has a ``k`` (a SOW record, which may carry its own expiration) is not plain; nor
    is anything but ``bytes``. The twin of the C ``plain_run`` (:mod:`.speedups`).

    Raises:
        ValueError: ``start`` is negative.
    """
    if start < 0:
        raise ValueError("plain_run: start must be >= 0")
    out: list[tuple[str, bytes]] = []
    append = out.append
    end = len(frames)
    pos = start
    while pos < end:
        frame = frames[pos]
        if type(frame) is not bytes:
            break
        i = frame.find(b',"bm":"')
        if i <= 0:
            break
        j = frame.find(b'"', i + 7)
        if j < 0 or frame[j + 1 : j + 2] != b"}":
            break
        if sow_keys and frame.find(b',"k":"', 0, i) >= 0:
            break
        append((frame[i + 7 : j].decode(), frame[j + 2 :]))
        pos += 1
    return pos, out


def parse_frame(frame: bytes, mt: str, expiry: MessageExpiry | None) -> Parsed:
    """Any intake frame, its header parsed; with ``expiry``, a SOW record's expiration."""
    hdr, end = decode_header(frame)
    expires = None
    if expiry is not None:  # a SOW record's expiration is the message's own
        expires = expiry.live(mt, str(hdr.get("t")), text(hdr.get("k")))
    return text(hdr.get("bm")), frame[end:], text(hdr.get("x")), expires


def run_pairs(prefix: str, batch: list[tuple[int, str, bytes]]) -> list[tuple[str, bytes]]:
    """``(bookmark, body)`` of each ``(sequence, topic, body)`` of a journaled run of one
    publisher, ``prefix`` being its ``"PID|"``: what :func:`plain_run` reads from the run's
    delivery frames, without making them. The twin of the C ``run_pairs``.

    Raises:
        ValueError: ``prefix`` is not ASCII (a publisher id is digits).
    """
    if not prefix.isascii():
        raise ValueError("run_pairs: the prefix must be ASCII")
    return [(f"{prefix}{seq}|", data) for seq, _topic, data in batch]
