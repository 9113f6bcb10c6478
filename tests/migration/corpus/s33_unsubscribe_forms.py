"""Subscriptions: unsubscribe one id, unsubscribe all, and closing a stream; a marker
publish proves what is still delivered."""

import json
import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s33")
client.connect(uri)
client.logon()
lock = threading.Lock()
seen = {"a": [], "b": []}


def handler(name):
    def on_message(message):
        with lock:
            seen[name].append(json.loads(message.get_data())["n"])

    return on_message


client.subscribe(handler("a"), "s33-topic", sub_id="a", timeout=5000)
client.subscribe(handler("b"), "s33-topic", sub_id="b", timeout=5000)
client.publish("s33-topic", json.dumps({"n": 1}))
client.flush()
client.unsubscribe("a")
client.publish("s33-topic", json.dumps({"n": 2}))
client.flush()
client.unsubscribe()
client.publish("s33-topic", json.dumps({"n": 3}))
stream = client.subscribe("s33-topic", timeout=5000)
stream.close()
client.publish("s33-topic", json.dumps({"n": 4}))
client.flush()
with lock:
    print("a", seen["a"], "b", seen["b"])
client.close()
