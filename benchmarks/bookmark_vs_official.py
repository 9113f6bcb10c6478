"""Bookmark subscriptions with ``discard`` in the handler: ours vs the official HAClient,
against the same pumping server; and SOW-update traffic with and without conflation.

Usage: ``python benchmarks/bookmark_vs_official.py [-n 300000] [--updates 100000]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))

from publish_vs_official import report
from sink import PUMP_SUB_ID, PumpServer

from ampsclient import Client
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.stores.recovery import (
    ConflatingRecoveryPointAdapter,
    SOWRecoveryPointAdapter,
)
from ampsclient.sync import HAClient
from ampsclient_server_stub import ServerThread

try:
    import AMPS  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    AMPS = None


def ours(uri: str, n: int) -> float:
    client = HAClient("bm-ours")
    client.get_server_chooser().add(uri)
    client.connect_and_logon()
    count = [0]
    done = threading.Event()
    discard = client.discard

    def handler(message: object) -> None:
        discard(message)  # type: ignore[arg-type]
        count[0] += 1
        if count[0] == n:
            done.set()

    start = time.perf_counter()
    client.bookmark_subscribe(handler, "orders", "0", sub_id=PUMP_SUB_ID)
    if not done.wait(300):
        raise SystemExit(f"ours: {count[0]} of {n}")
    took = time.perf_counter() - start
    client.close(timeout=0)
    return n / took


def official(uri: str, n: int) -> float:
    client = AMPS.HAClient("bm-official")
    chooser = AMPS.DefaultServerChooser()
    chooser.add(uri)
    client.set_server_chooser(chooser)
    client.connect_and_logon()
    count = [0]
    done = threading.Event()
    discard = client.discard

    def handler(message: object) -> None:
        discard(message)
        count[0] += 1
        if count[0] == n:
            done.set()

    start = time.perf_counter()
    client.bookmark_subscribe(handler, "orders", "0", sub_id=PUMP_SUB_ID)
    if not done.wait(300):
        raise SystemExit(f"official: {count[0]} of {n}")
    took = time.perf_counter() - start
    client.close()
    return n / took


def sow_traffic(updates: int) -> tuple[int, int]:
    """SOW publishes made for ``updates`` processed messages: (plain adapter, conflating)."""
    results = []
    with ServerThread() as server:
        for conflate in (False, True):
            store_client = Client(f"traffic-{conflate}")
            store_client.connect(server.uri())
            store_client.logon(5000)
            before = server.statistics().get("publishes", 0)
            sow = SOWRecoveryPointAdapter(store_client, f"tracked-{conflate}")
            adapter = ConflatingRecoveryPointAdapter(sow, update_threshold=100) if conflate else sow
            store = MemoryBookmarkStore(adapter)
            from ampsclient import Message

            for i in range(1, updates + 1):
                m = Message(header={"c": "p", "bm": f"777|{i}|", "sub_id": "s"}, data=b"")
                store.log(m)
                store.discard_message(m)
            store.close()
            store_client.flush(30_000)
            results.append(server.statistics().get("publishes", 0) - before)
            store_client.close()
    return results[0], results[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=300_000)
    parser.add_argument("--updates", type=int, default=100_000)
    args = parser.parse_args()
    with PumpServer(args.n) as pump:
        a = ours(pump.uri(), args.n)
    b = None
    if AMPS is not None:
        with PumpServer(args.n) as pump:
            b = official(pump.uri(), args.n)
    report("bookmark subscription + discard", a, b)
    plain, conflated = sow_traffic(args.updates)
    print(
        f"SOW updates for {args.updates:,} processed messages: {plain:,} without conflation, "
        f"{conflated:,} with a ConflatingRecoveryPointAdapter(update_threshold=100)"
    )


if __name__ == "__main__":
    main()
