"""SOW deletes: by filter, by keys (the SowKey of records) and by data; each returns its stats
ack with the number of records removed."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s28")
client.connect(uri)
client.logon()
for n in range(6):
    client.publish("orders", json.dumps({"id": n, "qty": n}))
client.flush()
keys = {}
for message in client.sow("orders", timeout=5000):
    if message.get_command() == "sow":
        keys[json.loads(message.get_data())["id"]] = message.get_sow_key()
print("keys are distinct", len(set(keys.values())) == 6)
ack = client.sow_delete("orders", "/qty >= 4")
print("by filter", ack.get_matches(), ack.get_status())
ack = client.sow_delete_by_keys("orders", ",".join([keys[0], keys[1]]))
print("by keys", ack.get_matches(), ack.get_status())
ack = client.sow_delete_by_data("orders", json.dumps({"id": 2, "qty": 2}))
print("by data", ack.get_matches(), ack.get_status())
left = sorted(
    json.loads(m.get_data())["id"]
    for m in client.sow("orders", timeout=5000)
    if m.get_command() == "sow"
)
print("left", left)
client.close()
