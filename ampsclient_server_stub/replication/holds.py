"""Replication holds that survive a restart: what each destination may still need.

Each :class:`~.streams.Outbound` pins the journal from the first record its destination has
not acknowledged (the journal's pins are its retention hook: journal management never
removes a file a pin still needs). Pins live in memory; this module keeps them on disk, so
that after a restart (``kill -9`` included) a destination that was down still holds the
journal files it has not acknowledged, instead of being assumed caught up.

The state is one small JSON file beside the journal, ``<instance>.replication-holds.json`` in
the journal directory, replaced atomically (written to a ``.tmp`` file, fsynced when the
journal's policy is durable, then renamed)::

    {"version": 1, "instance": "A", "holds": {"B": 1201, "C": 5}}

``holds`` maps a destination's name to the first journal index it may still need. The value
on disk may lag behind the one in memory (it is saved at most every
:data:`SAVE_DELAY` seconds): a lower value only keeps more, and the downstream's resync
(``rhave``) skips what it already has, so a lag never loses or duplicates a record. A move
backwards (a resync from an earlier record) is saved at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ..engine.storage_faults import StorageFaults

__all__ = ["SAVE_DELAY", "HoldFile", "hold_file_name"]

logger = logging.getLogger("ampsclient_server_stub.replication")

SAVE_DELAY: Final = 0.5
"""Seconds a forward move of a hold may wait before it is written (moves are coalesced)."""

_VERSION: Final = 1


def hold_file_name(instance: str) -> str:
    """The file name of ``instance``'s holds (characters outside ``[A-Za-z0-9._-]`` become
    ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", instance) + ".replication-holds.json"


class HoldFile:
    """The persisted holds of one instance's destinations.

    Args:
        directory: the journal directory.
        instance: the instance name (it names the file).
        durable: fsync the file and the directory on every save (the journal's policy is
            not ``never``).
    """

    def __init__(
        self,
        directory: Path,
        instance: str,
        *,
        durable: bool,
        faults: StorageFaults | None = None,
    ) -> None:
        self.path = Path(directory) / hold_file_name(instance)
        """Where the holds are kept."""
        self.instance = instance
        self.durable = durable
        """Whether a save is fsynced."""
        self.saves = 0
        """Saves since the instance started (for statistics and tests)."""
        self.unsaved = False
        """The last save failed (a full disk): the file may be behind; save again later."""
        self._faults = faults if faults is not None else StorageFaults()
        self._saved: dict[str, int] | None = None
        self._loaded: dict[str, int] | None = None
        self._unreadable = False

    def load(self) -> None:
        """Read the holds saved by the previous run (see :meth:`restored`).

        No file means a first start. A file that cannot be read makes every destination hold
        the whole journal (the safe reading), with a warning.
        """
        self._loaded = None
        self._unreadable = False
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as exc:
            self._unreadable = True
            logger.warning(
                "replication: cannot read %s (%s): holding the whole journal", self.path, exc
            )
            return
        try:
            doc = json.loads(text)
            if doc.get("version") != _VERSION:
                raise ValueError(f"version {doc.get('version')!r}")
            holds = {str(k): int(v) for k, v in dict(doc["holds"]).items()}
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self._unreadable = True
            logger.warning(
                "replication: %s is unreadable (%s): every destination holds the whole journal",
                self.path,
                exc,
            )
            return
        self._loaded = self._saved = holds

    def restored(self, destination: str) -> int | None:
        """The first index ``destination`` may still need, as the previous run saved it.

        Returns:
            ``None`` when nothing was saved for it (a first start, or a destination new in
            the configuration): it is assumed caught up. ``0`` (hold everything) when the
            file could not be read.
        """
        if self._unreadable:
            return 0
        if self._loaded is None:
            return None
        return self._loaded.get(destination)

    def save(self, holds: Mapping[str, int]) -> bool:
        """Write ``holds`` (atomically) unless they are what was saved last.

        Returns:
            Whether the file was written. A failure to write is reported once (the storage
            faults), not raised, and :attr:`unsaved` set: the holds in memory still protect
            the journal while this run lasts, and the caller saves again later.
        """
        current = dict(holds)
        if current == self._saved:
            return False
        data = json.dumps(
            {"version": _VERSION, "instance": self.instance, "holds": current},
            separators=(",", ":"),
            sort_keys=True,
        ).encode()
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                if self.durable:
                    os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            if self.durable:
                fd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:  # reported once while it lasts (StorageFaults)
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._faults.failed("replication/holds", str(self.path), exc)
            self.unsaved = True
            return False
        if self.unsaved:
            self.unsaved = False
            self._faults.succeeded("replication/holds")
        self._saved = current
        self.saves += 1
        return True
