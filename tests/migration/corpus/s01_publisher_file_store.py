"""Reliable publisher: HAClient with a file publish store and a failed-write handler."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
failed = []


def on_failed_write(message, reason):
    failed.append((message.get_sequence(), reason))


reader = AMPS.Client("corpus-s01-reader")
reader.connect(uri)
reader.logon()
got = []
reader.subscribe(lambda m: got.append(json.loads(m.get_data())["n"]), "s01-orders", timeout=5000)

client = AMPS.HAClient("corpus-s01-publisher", os.path.join(workdir, "s01.store"))
chooser = AMPS.DefaultServerChooser()
chooser.add(uri)
client.set_server_chooser(chooser)
client.set_failed_write_handler(on_failed_write)
client.connect_and_logon()
for n in range(25):
    client.publish("s01-orders", json.dumps({"n": n}))
client.publish_flush(10000)
print("unpersisted", client.get_unpersisted_count())
reader.flush(5000)
print("received", got == list(range(25)))
print("failed", failed)
client.close()
reader.close()
