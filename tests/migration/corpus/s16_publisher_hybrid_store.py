# ruff: noqa: E402 - an official-style script: the module is chosen before other imports
"""Reliable publisher with a HybridPublishStore (memory, spilling to a file) set on the HAClient."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
import threading

done = threading.Event()
got = []


def on_message(message):
    got.append(json.loads(message.get_data())["n"])
    if len(got) == 300:
        done.set()


reader = AMPS.Client("corpus-s16-reader")
reader.connect(uri)
reader.logon()
reader.subscribe(on_message, "s16-orders", timeout=5000)

client = AMPS.HAClient("corpus-s16-publisher")
client.set_publish_store(AMPS.HybridPublishStore(os.path.join(workdir, "s16.hybrid"), 100))
chooser = AMPS.DefaultServerChooser()
chooser.add(uri)
client.set_server_chooser(chooser)
client.connect_and_logon()
for n in range(300):
    client.publish("s16-orders", json.dumps({"n": n}))
client.publish_flush(10000)
print("unpersisted", client.get_unpersisted_count())
print("received_in_order", done.wait(10) and got == list(range(300)))
client.close()
reader.close()
