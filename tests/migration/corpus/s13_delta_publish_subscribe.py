"""Delta publish and delta subscribe on a SOW topic: the update merges; the subscriber sees it."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
TOPIC = "/ADMIN/bookmark_store"
client = AMPS.Client("corpus-s13")
client.connect(uri)
client.logon()
client.publish(
    TOPIC, json.dumps({"clientName": "s13", "subId": "x", "bookmark": "1", "extra": "kept"})
)
client.flush(5000)
stream = client.delta_subscribe(TOPIC, "/clientName = 's13'", timeout=5000)
client.delta_publish(TOPIC, json.dumps({"clientName": "s13", "subId": "x", "bookmark": "2"}))
for message in stream:
    update = json.loads(message.get_data())
    print("delta_update", update.get("bookmark"), update.get("subId"))
    break
stream.close()
rows = [
    json.loads(m.get_data())
    for m in client.sow(TOPIC, "/clientName = 's13'", timeout=5000)
    if m.get_command() == "sow"
]
print("merged", rows)
client.sow_delete(TOPIC, "/clientName = 's13'")
client.close()
