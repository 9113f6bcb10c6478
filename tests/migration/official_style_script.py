"""A script in the official AMPS Python client's style. It must run unchanged with
``import AMPS`` and with ``import ampsclient as AMPS`` (choose with AMPS_MODULE).

Usage: python official_style_script.py <tcp uri>; prints one JSON line of what it saw.
"""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri = sys.argv[1]
result = {}

client = AMPS.Client("migration-script")
client.connect(uri)
client.logon()
client.set_heartbeat(5)

received = []


def on_message(message):
    received.append(json.loads(message.get_data()))


sub_id = client.subscribe(on_message, "migration-orders", "/qty > 5", timeout=5000, sub_id="sub-1")
for i in range(10):
    client.publish("migration-orders", json.dumps({"id": i, "qty": i}))
client.flush(5000)

stream = client.subscribe("migration-stream", timeout=5000)
client.publish("migration-stream", '{"n":1}')
for message in stream:
    result["stream"] = [message.get_command(), message.get_topic(), message.get_data()]
    break
stream.close()

topic = "/ADMIN/bookmark_store"
for name in ("a", "b", "c"):
    client.publish(topic, json.dumps({"clientName": "mig", "subId": name, "bookmark": "0"}))
client.flush(5000)
rows = []
for message in client.sow(topic, "/clientName = 'mig'", batch_size=10, timeout=5000):
    if message.get_command() == "sow":
        rows.append(json.loads(message.get_data())["subId"])
result["sow"] = sorted(rows)

cmd = AMPS.Command("sow").set_topic(topic).set_filter("/subId = 'b'")
result["command"] = [
    json.loads(m.get_data())["subId"] for m in client.execute(cmd) if m.get_command() == "sow"
]

deleted = client.sow_delete(topic, "/clientName = 'mig'")
result["deleted"] = int(deleted.get_matches())

try:
    client.subscribe(on_message, "migration-orders", "/qty >>> (", timeout=5000)
    result["bad_filter"] = "no error"
except AMPS.BadFilterException as exc:
    result["bad_filter"] = type(exc).__name__
except AMPS.AMPSException as exc:
    result["bad_filter"] = "other: " + type(exc).__name__

result["received"] = [r["id"] for r in received]
client.unsubscribe(sub_id)
client.disconnect()
print(json.dumps(result))
