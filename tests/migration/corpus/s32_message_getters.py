"""Messages: the getters of a delivery (topic, data, sub id, sow key, bookmark, command,
correlation id) and of a sow record; deepcopy keeps a message past its handler."""

import copy
import json
import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s32")
client.connect(uri)
client.logon()
kept = []
done = threading.Event()


def on_message(message):
    kept.append(copy.deepcopy(message))
    done.set()


client.bookmark_subscribe(
    on_message, "orders", AMPS.Client.Bookmarks.NOW, sub_id="s32-sub", timeout=5000
)
client.publish("orders", json.dumps({"id": 7, "qty": 1}), correlation_id="s32-corr")
print("delivered", done.wait(5))
message = kept[0]
print("topic", message.get_topic())
print("data", json.loads(message.get_data()))
print("sub_id", message.get_sub_id())
print("command", message.get_command())
print("has sow key", bool(message.get_sow_key()))
print("has bookmark", bool(message.get_bookmark()))
print("correlation", message.get_correlation_id())
for record in client.sow("orders", timeout=5000):
    if record.get_command() == "sow":
        print(
            "sow topic",
            record.get_topic(),
            "same key",
            record.get_sow_key() == message.get_sow_key(),
        )
client.close()
