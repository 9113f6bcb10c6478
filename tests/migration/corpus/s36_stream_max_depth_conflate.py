"""Message streams: conflate() keeps the newest waiting message per SOW key; get_depth counts
what waits."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s36")
client.connect(uri)
client.logon()
stream = client.subscribe("orders", timeout=5000).conflate()
for round_ in range(3):
    for n in range(3):
        client.publish("orders", json.dumps({"id": n, "v": round_}))
client.publish("orders", json.dumps({"id": 99, "v": "marker"}))
client.flush()
out = []
for message in stream.timeout(5000):
    if message is None:
        break
    record = json.loads(message.get_data())
    out.append((record["id"], record["v"]))
    if record["id"] == 99:
        break
stream.close()
print("conflated", sorted(out[:-1]), "then", out[-1])
client.close()
