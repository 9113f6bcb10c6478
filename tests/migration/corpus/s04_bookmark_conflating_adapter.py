# ruff: noqa: UP031 - an official-style script: the module is chosen before other imports
"""Bookmark subscriber resuming through a ConflatingRecoveryPointAdapter over a SOW adapter."""

import json
import os
import sys
import threading
import time

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
SUB = "s04-sub"


def make_store():
    store_client = AMPS.Client("corpus-s04-store-%d" % len(stores))
    store_client.connect(uri)
    store_client.logon()
    stores.append(store_client)
    sow = AMPS.SOWRecoveryPointAdapter(store_client, "corpus-s04-sub")
    conflating = AMPS.ConflatingRecoveryPointAdapter(sow)
    adapters.append(conflating)
    return AMPS.MemoryBookmarkStore(conflating)


stores = []
adapters = []

publisher = AMPS.Client("corpus-s04-pub")
publisher.connect(uri)
publisher.logon()
for n in range(10):
    publisher.publish("s04-journal", json.dumps({"n": n}))
publisher.flush(5000)


def session(stop_after):
    """Subscribe from the recovery point; discard up to stop_after messages; return them."""
    client = AMPS.HAClient("corpus-s04-sub")
    client.set_bookmark_store(make_store())
    chooser = AMPS.DefaultServerChooser()
    chooser.add(uri)
    client.set_server_chooser(chooser)
    client.connect_and_logon()
    seen = []
    done = threading.Event()

    last = [None]

    def on_message(message):
        n = json.loads(message.get_data())["n"]
        if len(seen) < stop_after:
            seen.append(n)
            last[0] = message.get_bookmark()
            client.discard(message)
        if len(seen) == stop_after or n == 9:
            done.set()

    client.bookmark_subscribe(
        on_message, "s04-journal", AMPS.Client.Bookmarks.MOST_RECENT, sub_id="s04-sub", timeout=5000
    )
    done.wait(10)
    # the recovery point moves once the server's persisted ack covers the discarded messages
    deadline = time.time() + 10
    while time.time() < deadline and client.get_most_recent(SUB) != last[0]:
        time.sleep(0.05)
    client.unsubscribe("s04-sub")
    client.close()
    adapters.pop().close()  # forwards the latest point to the SOW adapter
    return seen


print("first", session(6))
print("second", session(10))
publisher.close()
