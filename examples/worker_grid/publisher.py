"""The order publisher of the grid: ``N`` orders, exactly once (file publish store)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ampsclient.stores.publish import FilePublishStore
from ampsclient.sync import HAClient


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", action="append", required=True)
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--store", type=Path, required=True)
    args = parser.parse_args(argv)
    store = FilePublishStore(args.store)
    with HAClient("grid-publisher", store) as client:
        client.get_server_chooser().add_all(args.uri)
        client.connect_and_logon()
        for n in range(args.orders):
            order = {"order_id": n, "symbol": ("IBM", "MSFT", "AAPL")[n % 3], "qty": 1 + n % 50}
            client.publish("orders", json.dumps(order))
        client.publish_flush(60_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
