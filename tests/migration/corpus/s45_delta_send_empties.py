"""Delta: with send_empties=True an unchanged re-publish comes through as a delta that
carries only the key; options given alongside keep the official order."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s45")
client.connect(uri)
client.logon()
client.publish("orders", json.dumps({"id": 1, "qty": 5}))
client.flush()
stream = client.sow_and_delta_subscribe("orders", send_empties=True, timeout=5000)
client.publish("orders", json.dumps({"id": 1, "qty": 5}))  # unchanged
client.publish("orders", json.dumps({"id": 1, "qty": 6}))  # the marker
updates = []
for message in stream.timeout(5000):
    if message is None:
        updates.append("timeout")
        break
    if message.get_command() in ("p", "publish"):
        record = json.loads(message.get_data())
        updates.append(record)
        if record.get("qty") == 6:
            break
stream.close()
print("updates", updates)
client.close()
