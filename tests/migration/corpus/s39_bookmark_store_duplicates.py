"""Bookmark subscriptions with a memory bookmark store on an HAClient: discarded messages
are the resume point; get_most_recent names a bookmark after the replay."""

import json
import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.HAClient("corpus-s39")
chooser = AMPS.DefaultServerChooser()
chooser.add(uri)
client.set_server_chooser(chooser)
client.connect_and_logon()
for n in range(4):
    client.publish("s39-topic", json.dumps({"n": n}))
client.publish_flush(10000)
print("unpersisted", client.get_unpersisted_count())
seen = []
done = threading.Event()


def on_message(message):
    seen.append(json.loads(message.get_data())["n"])
    client.discard(message)
    if len(seen) == 4:
        done.set()


client.bookmark_subscribe(
    on_message, "s39-topic", AMPS.Client.Bookmarks.EPOCH, sub_id="s39-sub", timeout=5000
)
print("replayed", done.wait(10), seen)
print("most recent is a bookmark", client.get_most_recent("s39-sub") not in ("", "0"))
client.close()
