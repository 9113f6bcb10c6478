# ruff: noqa: E402 - an official-style script: the module is chosen before other imports
"""The command builder: Command setters, execute (a stream), execute_async (a handler)."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
import threading

TOPIC = "/ADMIN/bookmark_store"
client = AMPS.Client("corpus-s14")
client.connect(uri)
client.logon()
publish = AMPS.Command("publish").set_topic(TOPIC)
for name in ("p", "q", "r"):
    publish.set_data(json.dumps({"clientName": "s14", "subId": name, "bookmark": "0"}))
    client.execute(publish)
client.flush(5000)
query = AMPS.Command("sow").set_topic(TOPIC).set_filter("/clientName = 's14'").set_batch_size(2)
rows = [
    json.loads(m.get_data())["subId"] for m in client.execute(query) if m.get_command() == "sow"
]
print("execute", sorted(rows))
got = []
done = threading.Event()


def on_message(message):
    if message.get_command() == "publish":
        got.append(json.loads(message.get_data())["n"])
        if len(got) == 3:
            done.set()


sub = AMPS.Command("subscribe").set_topic("s14-live").set_sub_id("s14-sub")
print("sub_id", client.execute_async(sub, on_message))
for n in range(3):
    client.publish("s14-live", json.dumps({"n": n}))
print("execute_async", done.wait(5), got)
client.unsubscribe("s14-sub")
delete = AMPS.Command("sow_delete").set_topic(TOPIC).set_filter("/clientName = 's14'")
acks = [m.get_ack_type() for m in client.execute(delete)]
print("sow_delete_acks", acks)
client.close()
