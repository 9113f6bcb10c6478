"""Delta: sow_and_delta_subscribe drops empty deltas by default (send_empties=False); a delta
publish merges into the record; delta_subscribe gets only the changed fields."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s22")
client.connect(uri)
client.logon()
client.publish("orders", json.dumps({"id": 1, "qty": 5, "px": 10}))
client.flush()
stream = client.sow_and_delta_subscribe("orders", timeout=5000)
client.publish("orders", json.dumps({"id": 1, "qty": 5, "px": 10}))  # unchanged: no delta
client.delta_publish("orders", json.dumps({"id": 1, "qty": 7}))
events = []
for message in stream.timeout(5000):
    if message is None:
        events.append("timeout")
        break
    command = message.get_command()
    if command in ("sow", "p", "publish"):
        events.append((command if command == "sow" else "publish", json.loads(message.get_data())))
        if len(events) == 2:
            break
stream.close()
print("events", events)
merged = [
    json.loads(m.get_data()) for m in client.sow("orders", timeout=5000) if m.get_command() == "sow"
]
print("merged", merged)
client.close()
