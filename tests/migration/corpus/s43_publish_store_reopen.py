"""A publisher restarted in the same process: a PublishStore on the same path, given to a
new HAClient after the first one closed, has what was left unpersisted; the store object is
usable with a new client too."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

path = os.path.join(workdir, "s43.store")


def client_with(store):
    client = AMPS.HAClient("corpus-s43")
    client.set_publish_store(store)
    return client


first = client_with(AMPS.PublishStore(path))
for n in range(3):
    try:
        first.publish("s43-topic", json.dumps({"n": n}))
    except AMPS.DisconnectedException:
        pass  # not connected: the message stays in the store
print("first unpersisted", first.get_unpersisted_count())
first.close()
del first
second = client_with(AMPS.PublishStore(path))
print("second unpersisted", second.get_unpersisted_count())
chooser = AMPS.DefaultServerChooser()
chooser.add(uri)
second.set_server_chooser(chooser)
second.connect_and_logon()
second.publish_flush(10000)
print("after replay", second.get_unpersisted_count())
second.close()
reader = AMPS.Client("corpus-s43-reader")
reader.connect(uri)
reader.logon()
got = []
for message in reader.bookmark_subscribe(
    "s43-topic", AMPS.Client.Bookmarks.EPOCH, timeout=5000
).timeout(2000):
    if message is None:
        break
    if message.get_command() in ("p", "publish"):
        got.append(json.loads(message.get_data())["n"])
print("journal", sorted(got))
reader.close()
