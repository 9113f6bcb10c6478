# ruff: noqa: E402 - an official-style script: the module is chosen before other imports
"""Bookmark subscriber with the default (memory) bookmark store: replay, discard, most recent."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
import threading

publisher = AMPS.Client("corpus-s02-pub")
publisher.connect(uri)
publisher.logon()
for n in range(10):
    publisher.publish("s02-journal", json.dumps({"n": n}))
publisher.flush(5000)

client = AMPS.HAClient("corpus-s02-sub")
client.set_bookmark_store(AMPS.MemoryBookmarkStore())
chooser = AMPS.DefaultServerChooser()
chooser.add(uri)
client.set_server_chooser(chooser)
client.connect_and_logon()
seen = []
last = []
done = threading.Event()


def on_message(message):
    seen.append(json.loads(message.get_data())["n"])
    last[:] = [message.get_bookmark()]
    client.discard(message)
    if len(seen) == 10:
        done.set()


client.bookmark_subscribe(
    on_message, "s02-journal", AMPS.Client.Bookmarks.EPOCH, sub_id="s02-sub", timeout=5000
)
print("replayed", done.wait(10), seen)
print("most_recent_is_last", client.get_most_recent("s02-sub") == last[0])
client.close()
publisher.close()
