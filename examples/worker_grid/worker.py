"""One worker of the grid: processes its share of the orders exactly once, resumably.

Its resume point lives in the server's ``/ADMIN/bookmark_store`` SOW topic (no local files):
``MemoryBookmarkStore(ConflatingRecoveryPointAdapter(SOWRecoveryPointAdapter(...)))``. Each
order is processed (a result is published to ``processed``), the result is flushed until the
server persisted it, and only then the order is discarded — so a ``kill -9`` at any moment
loses nothing; at most the orders whose recovery point was not yet written to the SOW (the
conflation threshold) are processed again.

Usage: ``python worker.py --uri URI --index I --workers K [--threshold 10]``
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys

from ampsclient import Client
from ampsclient.ha import FixedDelayStrategy
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.stores.recovery import ConflatingRecoveryPointAdapter, SOWRecoveryPointAdapter
from ampsclient.sync import HAClient

stopping = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", action="append", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--threshold", type=int, default=10, help="conflation threshold")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    name = f"worker-{args.index}"

    def stop(*_: object) -> None:
        global stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)

    # the recovery point adapter has a client of its own (it could point at another server)
    store_client = Client(f"{name}-recovery")
    store_client.connect(args.uri[0])
    store_client.logon(10_000)
    adapter = ConflatingRecoveryPointAdapter(
        SOWRecoveryPointAdapter(store_client, name, close_client=True),
        update_threshold=args.threshold,
        timeout_millis=500,
    )
    bookmarks = MemoryBookmarkStore(adapter)
    with HAClient(
        name, bookmark_store=bookmarks, reconnect_delay_strategy=FixedDelayStrategy(100)
    ) as client:
        client.get_server_chooser().add_all(args.uri)
        client.connect_and_logon()
        stream = client.bookmark_subscribe(
            "orders",
            HAClient.Bookmarks.MOST_RECENT,
            f"/order_id % {args.workers} = {args.index}",
            sub_id="orders",
        )
        print(f"{name} resuming from {bookmarks.get_most_recent('orders')}", flush=True)
        for message in stream.timeout(200):
            if stopping:
                break
            if message is None:
                continue
            order = message.json()
            result = {"order_id": order["order_id"], "worker": name, "total": order["qty"] * 10}
            client.publish("processed", json.dumps(result))
            client.publish_flush(30_000)  # the result is durable before the order is discarded
            client.discard(message)
        stream.close()
    bookmarks.close()  # flushes the conflated recovery point to the SOW
    return 0


if __name__ == "__main__":
    sys.exit(main())
