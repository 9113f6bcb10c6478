"""sow_and_subscribe: the SOW part, then live updates of the same topic, each with its
command; a filter applies to both."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s38")
client.connect(uri)
client.logon()
for n in range(4):
    client.publish("orders", json.dumps({"id": n, "qty": n * 5}))
client.flush()
stream = client.sow_and_subscribe("orders", "/qty >= 5", order_by="/id", timeout=5000)
events = []
for message in stream.timeout(5000):
    if message is None:
        events.append("timeout")
        break
    command = message.get_command()
    if command == "group_end":
        events.append("group_end")
        client.publish("orders", json.dumps({"id": 9, "qty": 1}))  # filtered out
        client.publish("orders", json.dumps({"id": 8, "qty": 50}))
    elif command in ("sow", "p", "publish"):
        events.append(
            (command if command == "sow" else "publish", json.loads(message.get_data())["id"])
        )
        if events[-1] == ("publish", 8):
            break
    else:
        events.append(command)
stream.close()
print("events", events)
client.close()
