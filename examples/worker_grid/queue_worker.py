"""One worker of the grid in queue mode: takes orders from the ``work`` queue, at least once.

The server leases each order to one worker at a time (``max_backlog`` of them per worker).
The worker publishes the order's result to the ``results`` SOW topic (keyed by order id, so an
order processed twice leaves one and the same result) and a line to ``processed`` (the audit
counts redeliveries there); auto-ack then acknowledges the order, in batches, on the same
connection after the result (the server takes the result before the ack). A ``kill -9`` loses
nothing: the orders it held unacknowledged go back to the queue when its connection drops and
another worker (or the restarted one) processes them again.

Usage: ``python queue_worker.py --uri URI --name NAME [--backlog 10] [--batch 5]``
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading

from ampsclient import Client, Command, Message


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--backlog", type=int, default=10, help="orders leased at once")
    parser.add_argument("--batch", type=int, default=5, help="acks per acknowledgement")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Client(args.name) as client:
        client.connect(args.uri)
        client.logon(10_000)
        client.set_auto_ack(True)  # each order is acknowledged when the handler returns
        client.set_ack_batch_size(args.batch)
        client.set_ack_timeout(200)

        def process(message: Message) -> None:
            order = message.json()
            result = {"order_id": order["order_id"], "total": order["qty"] * 10}
            client.publish("results", json.dumps(result))  # the same record if done again
            client.publish("processed", json.dumps({**result, "worker": args.name}))

        command = Command("subscribe").set_topic("work").set_options(f"max_backlog={args.backlog}")
        client.execute_async(command, process)
        print(f"{args.name} consuming the work queue", flush=True)
        stop.wait()
    return 0  # closing the client sent the pending acks first


if __name__ == "__main__":
    sys.exit(main())
