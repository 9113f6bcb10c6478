"""The main job until the worker grid exists: an embedded reference server, a publisher, a
subscriber with a content filter, a SOW query and a SOW delete, over tcp:// and ws://.

Run it with ``make demo`` (or ``python examples/demo.py``). Nothing to configure: the server
runs in this process on free loopback ports.
"""

from __future__ import annotations

import json
import threading
import time

from ampsclient import Client, Message
from ampsclient_server_stub import ServerThread


def main() -> None:
    with ServerThread() as server:
        tcp = server.uri("tcp", "json")
        ws = server.uri("ws", "json")
        print(f"reference server listening: {tcp}  {ws}")

        received: list[Message] = []
        done = threading.Event()

        def on_order(message: Message) -> None:
            received.append(message)
            if len(received) == 500:
                done.set()

        with Client("demo-subscriber") as sub, Client("demo-publisher") as pub:
            sub.connect(ws)
            sub.logon(5000)
            sub.subscribe(on_order, "orders", "/qty >= 50")
            pub.connect(tcp)
            pub.logon(5000)

            start = time.perf_counter()
            for i in range(1000):
                pub.publish("orders", json.dumps({"id": i, "sym": "IBM", "qty": i % 100}))
            pub.flush(10000)
            if not done.wait(10):
                raise SystemExit(f"only {len(received)} of 500 filtered messages arrived")
            took = time.perf_counter() - start
            print(
                f"published 1000 orders over tcp://, subscriber on ws:// with filter '/qty >= 50' "
                f"received {len(received)} in {took * 1000:.1f} ms"
            )

            topic = "/ADMIN/bookmark_store"
            for worker in range(3):
                pub.publish(
                    topic,
                    {"clientName": "demo", "subId": f"worker-{worker}", "bookmark": f"1|{worker}|"},
                )
            pub.flush(5000)
            rows = [
                m.json() for m in sub.sow(topic, "/clientName = 'demo'") if m.get_command() == "sow"
            ]
            print(f"SOW query on {topic}: {len(rows)} records")
            for row in rows:
                print(f"  {row}")
            stats = pub.sow_delete(topic, "/subId = 'worker-0'")
            print(f"sow_delete removed {stats.get_records_deleted()} record(s)")
            left = [m for m in sub.sow(topic) if m.get_command() == "sow"]
            print(f"{len(left)} records left; done.")


if __name__ == "__main__":
    main()
