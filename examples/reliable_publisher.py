"""A reliable publisher: every order reaches the server exactly once, even if this process is
killed with ``kill -9`` at any moment and started again.

How:

* an ``HAClient`` with a ``FilePublishStore``: ``publish()`` returns only once the message is
  on disk (``fsync="always"``); after a restart the store replays what the server had not
  acknowledged, with the original sequence numbers, and the server drops the duplicates;
* the order number is derived from the store's sequence numbers, so a restarted run continues
  with the first order it had not stored yet (nothing is published twice by the application);
* ``publish_flush()`` before exit, and the ``with`` block's safe shutdown.

``--fsync never`` (or ``interval``) is as safe against ``kill -9``: the store's records are
in the kernel's page cache once ``publish()`` returns. Only a crash of the machine can lose
what was not yet written back (see ``docs/publish-stores.md``); it is several times faster.

Usage::

    python examples/reliable_publisher.py --uri tcp://127.0.0.1:9007/amps/json \
        --store ./orders.store --orders 10000
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from ampsclient.ha import FixedDelayStrategy
from ampsclient.stores.publish import FilePublishStore
from ampsclient.sync import HAClient


def order(n: int) -> dict[str, object]:
    """The n-th order of the (deterministic) order book."""
    return {"order_id": n, "symbol": ("IBM", "MSFT", "AAPL", "ORCL")[n % 4], "qty": 1 + n % 100}


def base_sequence(store: FilePublishStore, store_dir: Path) -> int:
    """The sequence number of order 0, saved once beside the store."""
    path = store_dir / "first-sequence"
    if path.exists():
        return int(path.read_text())
    first = store.next_sequence()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(first))
    tmp.replace(path)
    return first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", action="append", required=True, help="server URI (repeatable)")
    parser.add_argument("--store", type=Path, required=True, help="publish store directory")
    parser.add_argument("--orders", type=int, default=10_000)
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--name", default="reliable-publisher")
    parser.add_argument(
        "--fsync", choices=["always", "interval", "never"], default="always", help="store policy"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    store = FilePublishStore(args.store, fsync=args.fsync)
    first = base_sequence(store, args.store)
    already = store.next_sequence() - first
    print(f"resuming at order {already} ({store.unpersisted_count} unpersisted)", flush=True)

    with HAClient(args.name, store, reconnect_delay_strategy=FixedDelayStrategy(100)) as client:
        client.get_server_chooser().add_all(args.uri)
        client.connect_and_logon()  # replays what the server had not acknowledged
        for n in range(already, args.orders):
            seq = client.publish(args.topic, json.dumps(order(n)))
            assert seq == first + n, "sequence numbers and order numbers must agree"
            if n % 500 == 0:
                print(f"stored order {n}", flush=True)
        client.publish_flush(60_000)
        print(
            f"done: {args.orders} orders, {client.get_unpersisted_count()} unpersisted", flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
